"""The engine a job runs on: this process and ``--jobs`` worker processes, or a Dask cluster.

Both engines take the same task functions and tasks and return results in task order
(see ``_pool``), so a job's output does not depend on which one runs it.
"""

from __future__ import annotations

from ._dask_engine import DaskRunner
from ._pool import Engine, Runner

__all__ = ["runner"]


def runner(jobs: int, scheduler: str | None = None) -> Engine:
    """The engine for ``--jobs N`` or, given a scheduler address, for a Dask cluster.

    ``scheduler`` is ``tcp://host:port`` (any address ``dask.distributed`` accepts) or
    ``local:N`` (a local cluster of N worker processes while the engine is open).
    Without Dask installed that is an EngineError saying how to install it.
    """
    if scheduler is None:
        return Runner(jobs)
    return DaskRunner(scheduler)
