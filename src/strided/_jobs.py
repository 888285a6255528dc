"""Whole-checkpoint jobs spread over worker processes, with output independent of their count.

A job is cut into tasks before anything runs: consecutive small tensors are batched
into one task, and a large tensor is cut into chunks of flat element ranges (when the
job can combine chunks; a digest cannot, it is one SHA-256 stream per tensor). The cut
depends only on the tensors, never on the number of workers, and every task's result
is exact, so combining results in task order gives the same output for any ``--jobs``.

Workers are separate processes (``concurrent.futures.ProcessPoolExecutor``) that open
the checkpoint files themselves by path (nothing large crosses a pipe) and keep them
open for the tasks that follow. With one job every task runs in the calling process.
When a task fails, the error reported is the one of the first failing task in task
order (later tasks are cancelled), so errors too are the same for any number of jobs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint
    from ._tensor import Tensor

__all__ = [
    "TASK_BYTES",
    "JobError",
    "Part",
    "Runner",
    "loaded",
    "opened",
    "plan",
    "sharing",
    "where",
]

# A task reads about this many stored bytes (one tensor at least, when not splittable).
TASK_BYTES = 1 << 25
# Checkpoints a worker keeps open at once.
_OPEN_LIMIT = 8


class JobError(Exception):
    """A task failed on one tensor: ``path``, ``name`` and the reader's message."""

    def __init__(self, path: str, name: str, message: str) -> None:
        super().__init__(path, name, message)
        self.path = path
        self.name = name
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: tensor {self.name!r}: {self.message}"


@dataclass(frozen=True, slots=True)
class Part:
    """Flat logical elements ``[start, stop)`` of tensor ``name``."""

    name: str
    start: int
    stop: int


def plan(
    sizes: Sequence[tuple[str, int, int]], split: bool, target: int = TASK_BYTES
) -> list[list[Part]]:
    """Tasks (lists of Parts) over ``(name, numel, stored_bytes)`` in the given order.

    Tensors smaller than ``target`` bytes are batched until a task holds about
    ``target`` bytes; with ``split``, a larger tensor is cut into chunks of about
    ``target`` bytes each. Depends only on the arguments.
    """
    tasks: list[list[Part]] = []
    batch: list[Part] = []
    held = 0
    for name, numel, size in sizes:
        if size >= target and batch:
            tasks.append(batch)
            batch, held = [], 0
        if size > target and split and numel > 1:
            step = max(target * numel // size, 1)
            tasks.extend(
                [Part(name, begin, min(begin + step, numel))] for begin in range(0, numel, step)
            )
            continue
        batch.append(Part(name, 0, numel))
        held += size
        if held >= target:
            tasks.append(batch)
            batch, held = [], 0
    if batch:
        tasks.append(batch)
    return tasks


def where(path: str) -> str:
    """The path workers open: absolute, so a worker's working directory does not matter."""
    return path if "://" in path else os.path.abspath(path)


# -- the worker side: checkpoints opened once per process ---------------------------------

_OPEN: dict[str, Checkpoint] = {}
_SHARED: set[str] = set()
_LAST: list[tuple[str, str, Tensor]] = []


def opened(path: str) -> Checkpoint:
    """The checkpoint at ``path``, opened once per process and kept for later tasks."""
    found = _OPEN.get(path)
    if found is None:
        from ._checkpoint import open_checkpoint

        unshared = [key for key in _OPEN if key not in _SHARED]
        if len(unshared) >= _OPEN_LIMIT:
            _OPEN.pop(unshared[0]).close()
            _LAST.clear()
        found = _OPEN[path] = open_checkpoint(path)
    return found


def loaded(path: str, name: str) -> Tensor:
    """``opened(path)[name]``, remembering the last tensor (chunks of one tensor reuse it)."""
    if _LAST and _LAST[0][0] == path and _LAST[0][1] == name:
        return _LAST[0][2]
    _LAST.clear()
    tensor = opened(path)[name]
    _LAST.append((path, name, tensor))
    return tensor


@contextmanager
def sharing(*checkpoints: tuple[str, Checkpoint]) -> Iterator[None]:
    """Let tasks run in this process use checkpoints already open here (by ``where`` path)."""
    added = []
    for path, checkpoint in checkpoints:
        if path not in _OPEN:
            _OPEN[path] = checkpoint
            _SHARED.add(path)
            added.append(path)
    try:
        yield
    finally:
        for path in added:
            _OPEN.pop(path, None)
            _SHARED.discard(path)
        _LAST.clear()


def _worker_start() -> None:
    # The parent handles Ctrl-C and stops the workers; they must not print tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# -- the parent side ------------------------------------------------------------------------


class _Progress(Protocol):
    def update(self, done: int) -> None: ...


class Runner:
    """Runs tasks in ``jobs`` worker processes (or in this process for one job).

    Use as a context manager; the pool starts on the first parallel ``run`` and is shut
    down (its workers stopped) on exit.
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = max(int(jobs), 1)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close(error is not None)

    def close(self, abandon: bool = False) -> None:
        """Shut the pool down; with ``abandon``, stop workers still busy at once."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if abandon:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            pool.shutdown(wait=True)

    def run(
        self,
        function: Callable[[Any], Any],
        tasks: Sequence[Any],
        weights: Sequence[int] | None = None,
        progress: _Progress | None = None,
    ) -> list[Any]:
        """``[function(task) for task in tasks]``, computed by the workers.

        ``weights`` (bytes per task) drive ``progress.update(done)``. The first failing
        task in task order raises its exception (a dead worker is an OSError).
        """
        weights = weights if weights is not None else [1] * len(tasks)
        results = []
        done = 0
        for result, weight in zip(self.imap(function, tasks), weights, strict=True):
            results.append(result)
            done += weight
            if progress is not None:
                progress.update(done)
        return results

    def imap(
        self, function: Callable[[Any], Any], tasks: Sequence[Any], window: int | None = None
    ) -> Iterator[Any]:
        """``function(task)`` for each task, yielded in task order as they are ready.

        At most ``window`` tasks (default four per worker) are submitted ahead of the
        one being waited for, which bounds the results held in memory. When a task
        fails, the tasks after it are cancelled and its exception is raised.
        """
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                yield function(task)
            return
        pool = self._start()
        ahead = max(window if window is not None else 4 * self.jobs, 1)
        pending: deque[Future[Any]] = deque()
        upcoming = iter(tasks)
        try:
            for task in islice(upcoming, ahead):
                pending.append(pool.submit(function, task))
            while pending:
                result = pending.popleft().result()
                for task in islice(upcoming, 1):
                    pending.append(pool.submit(function, task))
                yield result
        except BrokenProcessPool:
            raise OSError("a worker process died (out of memory or killed)") from None
        finally:
            for future in pending:
                future.cancel()

    def _start(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context: Any
            if "forkserver" in multiprocessing.get_all_start_methods():
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(["numpy", "strided"])
            else:
                context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=context, initializer=_worker_start
            )
        return self._pool
