"""Running checkpoint jobs as tasks of a ``dask.distributed`` cluster.

``DaskRunner`` is the Dask backend of ``_engine.runner``: it takes the very tasks and
task functions the process pool runs (digests, scans, comparisons), submits one Dask
task per job task, and hands the results back in task order, so the output is the
same as with ``--jobs``. Workers open the files by path (they need the same
filesystem); a missing file on a worker, or a scheduler out of reach, is an
``EngineError`` of one line. Dask is an optional extra, looked up at run time.
"""

from __future__ import annotations

import importlib
import logging
import uuid
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from .._core.limits import MAX_JOBS
from ._pool import EngineError, task_scope

__all__ = ["CONNECT_TIMEOUT", "DaskRunner", "require", "run_in_worker"]

# Seconds to wait for a scheduler before giving up (a cluster that is up answers at once).
CONNECT_TIMEOUT = 5.0
_INSTALL = "pip install 'strided[dask]'"


def require(module: str, what: str) -> Any:
    """Import ``module`` of the optional Dask extra; ImportError naming the extra if absent."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{what} needs Dask's '{module}' module, which is not installed ({error}); "
            f"install it with: {_INSTALL}"
        ) from None


def run_in_worker(function: Callable[[Any], Any], task: Any, version: str) -> Any:
    """``function(task)`` on a Dask worker; a file the worker cannot see is an EngineError.

    ``version`` names the command's run: files the worker kept open for an earlier
    command (and may since have been rewritten) are not reused.
    """
    try:
        with task_scope(version):
            return function(task)
    except FileNotFoundError as error:
        missing = error.filename if error.filename is not None else "a file"
        raise EngineError(
            f"{missing}: not found on Dask worker {_worker_address()} (workers open the "
            f"files by path, so they need the same filesystem and absolute paths)"
        ) from None


def _worker_address() -> str:
    try:
        return str(importlib.import_module("distributed").get_worker().address)
    except (ImportError, ValueError, AttributeError):
        return "(unknown)"


class DaskRunner:
    """Runs job tasks on the cluster at ``address`` (``local:N`` starts one while open)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._client: Any = None
        self._cluster: Any = None
        self._distributed: Any = None

    def __enter__(self) -> DaskRunner:
        try:
            distributed = require("distributed", "--scheduler")
        except ImportError as error:
            raise EngineError(str(error)) from None
        target: Any = self.address
        if self.address.startswith("local:"):
            self._cluster = target = _local_cluster(distributed, self.address)
        try:
            self._client = distributed.Client(target, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError, ValueError, TypeError) as error:
            self.close()
            raise EngineError(
                f"cannot reach the Dask scheduler at {self.address}: {_first_line(error)}"
            ) from None
        except BaseException:  # an interrupt, or anything else: no cluster is left running
            self.close()
            raise
        self._distributed = distributed
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect, and stop the local cluster if this runner started one."""
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    def run(
        self,
        function: Callable[[Any], Any],
        tasks: Sequence[Any],
        weights: Sequence[int] | None = None,
        progress: Any = None,
    ) -> list[Any]:
        """``[function(task) for task in tasks]``, one Dask task each.

        ``progress.update(done)`` follows the ``weights`` of the tasks finished so far,
        in whatever order they finish. The first failing task in task order raises its
        exception (later tasks are cancelled, earlier ones awaited), as with ``Runner``.
        """
        if self._client is None:
            raise EngineError("the Dask runner is not open")
        weights = weights if weights is not None else [1] * len(tasks)
        distributed = self._distributed
        version = uuid.uuid4().hex
        futures = [
            self._client.submit(run_in_worker, function, task, version, pure=False)
            for task in tasks
        ]
        position = {future.key: index for index, future in enumerate(futures)}
        results: list[Any] = [None] * len(tasks)
        errors: dict[int, BaseException] = {}
        waiting = set(range(len(tasks)))
        done = 0
        try:
            for future in distributed.as_completed(futures, loop=self._client.loop):
                index = position[future.key]
                waiting.discard(index)
                if errors and index > min(errors):
                    continue
                try:
                    results[index] = future.result()
                except Exception as error:
                    errors[index] = _translated(error, distributed)
                    later = [futures[i] for i in waiting if i > index]
                    if later:
                        self._client.cancel(later)
                else:
                    done += weights[index]
                    if progress is not None:
                        progress.update(done)
                if errors and not any(i < min(errors) for i in waiting):
                    break
        finally:
            unfinished = [futures[i] for i in waiting]
            if unfinished:
                self._client.cancel(unfinished)
        if errors:
            raise errors[min(errors)]
        return results


def _local_cluster(distributed: Any, address: str) -> Any:
    """A cluster of N single-threaded worker processes on this machine (``local:N``)."""
    count = address[len("local:") :]
    if not count.isdigit() or not 1 <= int(count) <= MAX_JOBS:
        raise EngineError(
            f"local:N takes a number of workers from 1 to {MAX_JOBS}, found {address!r}"
        )
    try:
        return distributed.LocalCluster(
            n_workers=int(count),
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port for its HTTP routes, no dashboard
            scheduler_kwargs={"dashboard": False},
            silence_logs=logging.CRITICAL,  # task failures are reported here, once
        )
    except Exception as error:  # whatever stopped it, the command cannot go on
        raise EngineError(f"cannot start a local Dask cluster: {_first_line(error)}") from None


def _translated(error: Exception, distributed: Any) -> BaseException:
    """A worker that died is an EngineError; any other error is the task's own."""
    if isinstance(error, distributed.KilledWorker):
        return EngineError(f"a Dask worker died running a task: {_first_line(error)}")
    return error


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
