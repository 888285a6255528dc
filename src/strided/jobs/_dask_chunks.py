"""Checkpoint tensors as Dask chunks read in the worker, and F8_E5M2 arrays on the wire.

``TensorChunks`` is the small array-like that ``dask.array.from_array`` slices: it
holds only a path and a tensor name, and each slice is read in the worker that runs
the task, from the checkpoint that process keeps open (memory-mapped where the format
allows). Block-quantized GGUF tensors are dequantized to F32 for the rows a chunk
covers only.

``dask.distributed`` describes a NumPy array's dtype on the wire by its type string,
and ``ml_dtypes.float8_e5m2`` has the string ``<f1``, which NumPy cannot read back;
its other types (BF16, F8_E4M3, F8_E8M0) travel as they are. Importing this module
registers a serializer that sends F8_E5M2 arrays as their ``uint8`` bytes with a dtype
that views them back; unpickling that dtype imports this module, so every process
that receives such an array can also send it on. Other arrays are left to Dask.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np

from .._core.dtype import DType
from ..io._http import is_url
from ._pool import loaded, opened, task_scope
from ._values import Source

__all__ = ["TensorChunks", "e5m2_dtype"]


class TensorChunks:
    """Tensor ``name`` of the checkpoint at ``path``, sliced in whichever process asks.

    ``shape`` and ``dtype`` (a NumPy dtype) come from the header; ``quantized`` tensors
    are read through their dequantized F32 values. ``version`` identifies the file's
    state (size, modification time): a worker keeps files open between tasks, and a
    file rewritten since is opened afresh.
    """

    __slots__ = ("dtype", "name", "ndim", "path", "quantized", "shape", "version")

    def __init__(
        self,
        path: str,
        name: str,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        quantized: bool,
        version: object = None,
    ) -> None:
        self.version = version
        self.path = path
        self.name = name
        self.shape = shape
        self.ndim = len(shape)
        self.dtype = dtype
        self.quantized = quantized

    def __getitem__(self, index: tuple[slice, ...]) -> np.ndarray[Any, Any]:
        """The block at ``index`` (slices, as Dask asks): a read-only view where possible.

        Over HTTP only the rows the block covers are fetched.
        """
        with task_scope(self.version):
            if self.quantized:
                return self._dequantized(index)
            # Over HTTP, or assembled from a distributed checkpoint's chunks: only the rows.
            if self.ndim and (is_url(self.path) or opened(self.path)._assembled(self.name)):
                return self._fetched(index)
            return np.asarray(loaded(self.path, self.name).numpy()[index])

    def _rows(self, index: tuple[slice, ...]) -> tuple[int, int, tuple[slice, ...], int]:
        """(first row, end row, the slices within those rows, elements per row)."""
        low, high, step = index[0].indices(self.shape[0])
        return low, max(high, low), (slice(None, None, step), *index[1:]), math.prod(self.shape[1:])

    def _fetched(self, index: tuple[slice, ...]) -> np.ndarray[Any, Any]:
        low, high, within, inner = self._rows(index)
        row_bytes = inner * self.dtype.itemsize
        checkpoint = opened(self.path)
        found = checkpoint._chunks(self.name, low * row_bytes, high * row_bytes)
        if found is None:  # a format read whole
            return np.asarray(loaded(self.path, self.name).numpy()[index])
        data = np.concatenate([np.zeros(0, np.uint8), *found])
        return data.view(self.dtype).reshape((high - low, *self.shape[1:]))[within]

    def _dequantized(self, index: tuple[slice, ...]) -> np.ndarray[Any, Any]:

        low, high, within, inner = self._rows(index)
        source = Source(opened(self.path), self.name)
        values = source.values(low * inner, high * inner)
        return values.reshape((high - low, *self.shape[1:]))[within]


def e5m2_dtype() -> np.dtype[Any]:
    """The F8_E5M2 NumPy dtype (what the wire format of such arrays unpickles to)."""
    return DType.F8_E5M2.numpy


class _ViewBack:
    """Pickles as a call of ``e5m2_dtype``: the receiver imports this module with it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (e5m2_dtype, ())


def _register() -> None:
    serialize = importlib.import_module("distributed.protocol.serialize")
    pickle = importlib.import_module("distributed.protocol.pickle")
    registry = serialize.dask_serialize
    original = registry.dispatch(np.ndarray)  # also loads Dask's own NumPy serializers
    if getattr(original, "strided_wire", False):
        return
    viewed_back = (1, pickle.dumps(_ViewBack()))

    def send(array: np.ndarray[Any, Any], context: Any = None) -> Any:
        # The itemsize first: a wider array is never F8_E5M2, and asking for that
        # dtype would import ml_dtypes in a process that may not need it.
        if array.dtype.itemsize != 1 or array.dtype != e5m2_dtype():
            return original(array, context=context)
        header, frames = original(array.view(np.uint8), context=context)
        header["dtype"] = viewed_back
        return header, frames

    send.strided_wire = True  # type: ignore[attr-defined]
    registry.register(np.ndarray, send)


try:
    _register()
except ImportError:  # without distributed, arrays never leave the process
    pass
