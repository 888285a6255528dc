"""Whole-checkpoint jobs spread over worker processes, with output independent of their count.

A job is cut into tasks before anything runs: consecutive small tensors are batched
into one task, and a large tensor is cut into chunks of flat element ranges (when the
job can combine chunks; a digest cannot, it is one SHA-256 stream per tensor). The cut
depends only on the tensors, never on the number of workers, and every task's result
is exact, so combining results in task order gives the same output for any ``--jobs``.

Tasks run on an engine (``runner``): with ``--jobs N`` the calling process and N - 1
worker processes (``concurrent.futures.ProcessPoolExecutor``, the ``Runner`` here);
with a Dask scheduler address, the workers of a ``dask.distributed`` cluster
(``_dask_engine``; ``_engine.runner`` picks one). Both run the same task functions on
the same tasks. Workers open
the checkpoint files themselves by path (nothing large crosses a pipe or the network)
and keep them open for the tasks that follow; a path made by ``where(path, lenient=True)``
is a ``LenientPath``, which workers open with ``lenient=True`` (so ``--lenient`` reaches
every worker with no change to the tasks). With one job every task runs in the
calling process. When a task fails, the error reported is the one of the first failing
task in task order (later tasks are cancelled), so errors too are the same for any
number of workers.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from .._core.errors import DataError
from ..io._http import TOKENS_VARIABLE
from ._checkpoint import open_checkpoint

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from .._tensor.tensor import Tensor
    from ._checkpoint import Checkpoint

__all__ = [
    "TASK_BYTES",
    "Engine",
    "EngineError",
    "JobError",
    "LenientPath",
    "Part",
    "Runner",
    "loaded",
    "opened",
    "plan",
    "sharing",
    "task_scope",
    "where",
]

# A task reads about this many bytes of logical values (one tensor at least, when not
# splittable).
TASK_BYTES = 1 << 24
# Checkpoints a worker keeps open at once.
_OPEN_LIMIT = 8


class JobError(Exception):
    """A task failed on one tensor: ``path``, ``name``, the reader's message and the
    DataError subclass it raised (``kind``), so a Python face can raise that type again."""

    def __init__(
        self, path: str, name: str, message: str, kind: type[DataError] = DataError
    ) -> None:
        super().__init__(path, name, message, kind)
        self.path = path
        self.name = name
        self.message = message
        self.kind = kind

    def as_data_error(self) -> DataError:
        """The failure as the reader's own error type, naming the file and the tensor."""
        return self.kind(str(self))

    def __str__(self) -> str:
        return f"{self.path}: tensor {self.name!r}: {self.message}"


class EngineError(Exception):
    """The engine itself failed (a scheduler out of reach, a worker that cannot see a
    file): one line, reported as bad usage rather than bad input."""


@dataclass(frozen=True, slots=True)
class Part:
    """Flat logical elements ``[start, stop)`` of tensor ``name``."""

    name: str
    start: int
    stop: int


def plan(
    sizes: Sequence[tuple[str, int, int]], split: bool, target: int = TASK_BYTES
) -> list[list[Part]]:
    """Tasks (lists of Parts) over ``(name, numel, bytes)`` in the given order.

    ``bytes`` is the work a tensor is: the logical bytes it reads (which for an
    expanded view, allowed by ``admit``, exceed its stored bytes).

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


class LenientPath(str):
    """A checkpoint path that workers open with ``lenient=True``; its text is the path.

    A str, so tasks, error messages and both engines (pickled to worker processes and
    Dask workers) carry it as they carry any path, and the mode travels with it.
    """

    __slots__ = ()


def where(path: str, lenient: bool = False) -> str:
    """The path workers open: absolute, so a worker's working directory does not matter;
    with ``lenient`` (or given a ``LenientPath``), a ``LenientPath`` (workers open it with
    ``lenient=True``)."""
    found = path if "://" in path else os.path.abspath(path)
    return LenientPath(found) if lenient or type(path) is LenientPath else found


# -- the worker side: checkpoints opened once per process ---------------------------------
# A Dask worker may run several tasks at once in threads: the cache is guarded by a
# lock, and a checkpoint evicted while other tasks run is closed when the last ends.
# A Dask worker also outlives the command that used it: its tasks run under a
# ``version`` (one per command, or the file's stamp), so a file rewritten between two
# commands is opened afresh instead of being read through a stale mapping.

_Key = tuple[str, bool, object]  # (path, lenient, version)
_OPEN: dict[_Key, Checkpoint] = {}
_SHARED: set[_Key] = set()
_LAST: list[tuple[_Key, str, Tensor]] = []
_LOCK = threading.RLock()
_BUSY = [0]  # tasks running in this process inside ``task_scope``
_RETIRED: list[Checkpoint] = []
_TASK = threading.local()  # the version of the task running in this thread


def _key(path: str, version: object = None) -> _Key:
    """The cache key of ``path`` (as a plain str) in its mode, under ``version``."""
    return (str(path), type(path) is LenientPath, version)


def _task_key(path: str) -> _Key:
    return _key(path, getattr(_TASK, "version", None))


def opened(path: str) -> Checkpoint:
    """The checkpoint at ``path``, opened once per process and kept for later tasks.

    A ``LenientPath`` is opened with ``lenient=True``.
    """
    key = _task_key(path)
    with _LOCK:
        found = _OPEN.get(key)
        if found is None:
            unshared = [item for item in _OPEN if item not in _SHARED]
            if len(unshared) >= _OPEN_LIMIT:
                evicted = _OPEN.pop(unshared[0])
                if _BUSY[0] > 1:
                    _RETIRED.append(evicted)
                else:
                    evicted.close()
                _LAST.clear()
            found = _OPEN[key] = open_checkpoint(str(path), lenient=key[1])
        return found


def loaded(path: str, name: str) -> Tensor:
    """``opened(path)[name]``, remembering the last tensor loaded of each of the last
    two checkpoints.

    Chunks of one tensor (of one or two checkpoints, for a comparison) reuse it, so a
    tensor that must be decoded whole (a compressed member, a merged tensor) is decoded
    once per worker. What leaves the cache leaves before the next tensor is decoded, so
    a worker never holds two decoded tensors of one checkpoint at once.
    """
    key = _task_key(path)
    with _LOCK:
        found = _cached(key, name)
        if found is not None:
            return found
        _LAST[:] = [entry for entry in _LAST if entry[0] != key][-1:]
        tensor = opened(path)[name]
        _LAST.append((key, name, tensor))
        return tensor


def _cached(key: _Key, name: str) -> Tensor | None:
    """The cached tensor ``name`` of ``key``, moved to the end; None when not cached.

    A function of its own: the loop's names end with it, so none still refers to a
    tensor that ``loaded`` drops before decoding the next one.
    """
    for index, (found_key, found_name, tensor) in enumerate(_LAST):
        if found_key == key and found_name == name:
            _LAST.append(_LAST.pop(index))
            return tensor
    return None


@contextlib.contextmanager
def task_scope(version: object = None) -> Iterator[None]:
    """Run a task in this thread under ``version`` (see above); threads of a Dask worker
    run several tasks at once."""
    before = getattr(_TASK, "version", None)
    _TASK.version = version
    with _LOCK:
        _BUSY[0] += 1
    try:
        yield
    finally:
        _TASK.version = before
        with _LOCK:
            _BUSY[0] -= 1
            retired = _RETIRED[:] if not _BUSY[0] else []
            if retired:
                _RETIRED.clear()
        for checkpoint in retired:
            checkpoint.close()


@contextlib.contextmanager
def sharing(*checkpoints: tuple[str, Checkpoint]) -> Iterator[None]:
    """Let tasks run in this process use checkpoints already open here (by ``where`` path)."""
    added: list[_Key] = []
    for path, checkpoint in checkpoints:
        key = _key(path)
        if key not in _OPEN:
            _OPEN[key] = checkpoint
            _SHARED.add(key)
            added.append(key)
    try:
        yield
    finally:
        for key in added:
            _OPEN.pop(key, None)
            _SHARED.discard(key)
        _LAST.clear()


# What a worker must see of the parent's environment as it is when the job starts: the
# remote tokens (``token=`` / ``--token``, set just for the job) and Hugging Face's
# settings. A worker from the fork server inherits the server's environment, which may
# be older than the job, so these are handed over explicitly.
_PASSED_ON = (TOKENS_VARIABLE, "HF_TOKEN", "HF_ENDPOINT")


def _worker_start(parent: int, environment: dict[str, str | None]) -> None:
    """Set up a worker: Ctrl-C is the parent's business, the worker dies with it, and it
    sees the parent's tokens as they are for this job."""
    for variable, value in environment.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:  # PR_SET_PDEATHSIG: SIGKILL when the process that started this one ends
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent and os.getppid() != parent:
        os._exit(1)  # the parent died before the line above took effect


# -- the parent side ------------------------------------------------------------------------


class _Progress(Protocol):
    def update(self, done: int) -> None: ...


class Engine(Protocol):
    """What runs a job's tasks: ``Runner`` (processes here) or a Dask cluster."""

    def __enter__(self) -> Engine: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def run(
        self,
        function: Callable[[Any], Any],
        tasks: Sequence[Any],
        weights: Sequence[int] | None = None,
        progress: _Progress | None = None,
    ) -> list[Any]: ...


class _Slot:
    """One task's place in the output order: a worker's future, or a result made here."""

    __slots__ = ("error", "future", "result")

    def __init__(
        self, future: Future[Any] | None = None, result: Any = None, error: Any = None
    ) -> None:
        self.future = future
        self.result = result
        self.error = error

    @classmethod
    def inline(cls, function: Callable[[Any], Any], task: Any) -> _Slot:
        try:
            return cls(result=function(task))
        except Exception as error:  # raised when its turn comes, after earlier tasks
            return cls(error=error)

    def busy(self) -> bool:
        return self.future is not None and not self.future.done()

    def ready(self) -> bool:
        return self.future is None or self.future.done()

    def value(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result if self.future is None else self.future.result()


class Runner:
    """Runs tasks in ``jobs`` processes: this one and ``jobs - 1`` workers.

    Use as a context manager; the workers start on the first parallel ``run`` and are
    shut down (stopped at once after an error) on exit.
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

        With ``jobs`` N > 1, N - 1 worker processes run tasks and this process runs
        tasks too while they are busy (so no time is lost while the workers start). At
        most ``window`` results (default four per job) are held ahead of the one being
        waited for, which bounds memory. When a task fails, no further task starts, the
        tasks before it finish, and the first failure in task order is raised.
        """
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                yield function(task)
            return
        pool = self._start()
        broken = _process_pools().BrokenProcessPool
        ahead = max(window if window is not None else 4 * self.jobs, 2)
        feed = 2 * (self.jobs - 1)  # tasks kept queued for the workers
        slots: deque[_Slot] = deque()
        upcoming = 0
        failed = False
        try:
            while slots or (upcoming < len(tasks) and not failed):
                while (
                    not failed
                    and upcoming < len(tasks)
                    and len(slots) < ahead
                    and sum(1 for slot in slots if slot.busy()) < feed
                ):
                    slots.append(_Slot(future=pool.submit(function, tasks[upcoming])))
                    upcoming += 1
                if slots and slots[0].ready():
                    yield slots.popleft().value()
                elif not failed and upcoming < len(tasks) and len(slots) < ahead:
                    slot = _Slot.inline(function, tasks[upcoming])
                    failed = slot.error is not None
                    slots.append(slot)
                    upcoming += 1
                else:
                    yield slots.popleft().value()
        except broken:
            raise OSError("a worker process died (out of memory or killed)") from None
        finally:
            for slot in slots:
                if slot.future is not None:
                    slot.future.cancel()

    def start(self) -> None:
        """Start the workers now (before opening files they need not inherit)."""
        if self.jobs > 1:
            self._start().submit(int).result()  # the pool forks its workers on first use

    def _start(self) -> ProcessPoolExecutor:
        if self._pool is None:
            for stream in (sys.stdout, sys.stderr):  # a forked worker flushes its copies
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            context = _context()
            # Forked workers are this process's children: they check it is still there.
            parent = os.getpid() if context.get_start_method() == "fork" else 0
            self._pool = _process_pools().ProcessPoolExecutor(
                max_workers=self.jobs - 1,
                mp_context=context,
                initializer=_worker_start,
                initargs=(parent, {name: os.environ.get(name) for name in _PASSED_ON}),
            )
        return self._pool


def _process_pools() -> ModuleType:
    """``concurrent.futures.process``, imported when the first pool of workers starts.

    With one job (the default) nothing uses it, and it and what it loads (logging,
    multiprocessing's queues and connections) would add about 10 ms to every start-up.
    """
    return importlib.import_module("concurrent.futures.process")


def _context() -> Any:
    """How workers start: forked (fast: nothing to import again) on Linux while this
    process runs a single thread, else from a fork server that has the readers and the
    job modules imported (``import strided`` alone loads nothing: its names are lazy),
    else spawned (macOS, Windows).
    """
    methods = multiprocessing.get_all_start_methods()
    if sys.platform.startswith("linux") and "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(
            ["strided.jobs._checkpoint", "strided.io", "strided.jobs._pool"]
        )
        return context
    return multiprocessing.get_context("spawn")
