"""The ``strided hash`` task: the digests of some tensors of a checkpoint, in a worker.

The digests themselves are defined in ``_kernels.digest`` (the bytes hashed) and
``Checkpoint.digest`` (how a checkpoint's tensors are combined); this module only runs
them as tasks of the ``--jobs`` or Dask engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.errors import DataError
from ._checkpoint import digest_of
from ._pool import JobError, opened

__all__ = ["run_task"]


def run_task(task: tuple[str, Sequence[str]]) -> list[str]:
    """Digests of the named tensors of the checkpoint at a path (run in a worker).

    A tensor that cannot be read is a JobError naming the file and the tensor.
    """
    path, names = task
    checkpoint = opened(path)
    found = []
    for name in names:
        try:
            found.append(digest_of(checkpoint, name))
        except DataError as error:
            raise JobError(path, name, str(error), type(error)) from None
    return found
