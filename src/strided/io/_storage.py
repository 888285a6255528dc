"""Where a reader's tensor bytes come from: a memory-mapped file, or a remote file.

Readers parse headers into byte offsets and then ask a storage for bytes:

* ``span(begin, end)``: the bytes as one flat read-only ``uint8`` array (for a mapped
  file a zero-copy view of the mapping; for a remote file a fresh buffer of exactly
  those bytes);
* ``units(begin, unit, indices)``: only the ``unit``-byte pieces at ``indices`` (sorted,
  unique) counted from ``begin``, as an ``(n, unit)`` array: the sampled elements or
  quantized blocks of an inspection;
* ``chunks(begin, end)``: the bytes as bounded pieces in order (whole-tensor jobs);
* ``inspect(begin, dims, dtype, options)``: the inspection of a plain tensor stored
  contiguously from ``begin``, reading only the sampled elements.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._kernels.pieces import pieces
from .._tensor.tensor import Tensor

if TYPE_CHECKING:
    from .._core.dtype import DType
    from .._tensor.inspect import TensorInspection, TensorInspectionOptions

__all__ = ["MappedStorage", "Storage"]


class Storage(Protocol):
    """The bytes of one file, by absolute offset (see the module docstring)."""

    where: str

    @property
    def size(self) -> int: ...
    def span(self, begin: int, end: int) -> np.ndarray[Any, Any]: ...
    def units(
        self, begin: int, unit: int, indices: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]: ...
    def chunks(self, begin: int, end: int) -> Iterator[np.ndarray[Any, Any]]: ...
    def inspect(
        self, begin: int, dims: tuple[int, ...], dtype: DType, options: TensorInspectionOptions
    ) -> TensorInspection: ...
    def close(self) -> None: ...


class MappedStorage:
    """A whole file memory-mapped as one flat read-only ``uint8`` array (``raw``)."""

    __slots__ = ("raw", "where")

    def __init__(self, raw: np.ndarray[Any, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return int(self.raw.size)

    def span(self, begin: int, end: int) -> np.ndarray[Any, Any]:
        """A zero-copy view of bytes ``[begin, end)``."""
        return self.raw[begin:end]

    def units(self, begin: int, unit: int, indices: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The ``unit``-byte pieces at ``indices`` from ``begin``, gathered (a copy)."""
        if not indices.size:
            return np.empty((0, unit), dtype=np.uint8)
        stop = begin + (int(indices[-1]) + 1) * unit
        gathered: np.ndarray[Any, Any] = self.raw[begin:stop].reshape(-1, unit)[indices]
        return gathered

    def chunks(self, begin: int, end: int) -> Iterator[np.ndarray[Any, Any]]:
        """Views of bytes ``[begin, end)`` in bounded pieces."""
        return pieces(self.raw[begin:end])

    def inspect(
        self, begin: int, dims: tuple[int, ...], dtype: DType, options: TensorInspectionOptions
    ) -> TensorInspection:
        """The tensor's inspection through a zero-copy view of the mapping."""

        nbytes = math.prod(dims) * dtype.itemsize
        view = self.raw[begin : begin + nbytes].view(dtype.numpy).reshape(dims)
        return Tensor._wrap(view).inspect(options)

    def close(self) -> None:
        """Nothing to release: tensors handed out keep the mapping alive."""
