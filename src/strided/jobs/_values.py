"""A checkpoint tensor's values, read by flat element range without loading the whole tensor.

``Source`` hides how a tensor is stored: a plain tensor is read through its logical
view (zero-copy where the memory is contiguous), a tensor that would be assembled from
pieces (a distributed checkpoint's tensor of several chunks) through its chunks, a
range at a time, never whole; a block-quantized GGUF tensor is
dequantized only for the blocks that cover the range asked for, and a tensor of a
stored type strided cannot decode (safetensors ``F4``, ``C64``...) is offered as its
stored bytes, whose "elements" are then bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError
from .._kernels.pieces import pieces
from ..io.gguf import DEQUANTIZABLE, GGML_TYPES, dequantize
from ._checkpoint import has_dtype

if TYPE_CHECKING:
    from .._tensor.tensor import Tensor
    from ._checkpoint import Checkpoint

__all__ = ["Source"]

# Blocks dequantized together when a range spans many of them.
_BLOCKS_PER_STEP = 1 << 15


class Source:
    """Values of tensor ``name`` of an open checkpoint, by flat logical element range.

    ``kind`` is ``"float"``, ``"int"`` (integers and BOOL) or ``"raw"``; ``dtype`` is
    the DType the values come in (F32 for quantized tensors; U8 for raw bytes);
    ``type_name`` the stored type's name; ``numel`` the number of values (bytes for
    raw tensors).
    """

    __slots__ = (
        "_array",
        "_block",
        "_name",
        "_ranged",
        "_stored",
        "dtype",
        "kind",
        "numel",
        "type_name",
    )

    def __init__(
        self,
        checkpoint: Checkpoint,
        name: str,
        tensor: Tensor | None = None,
        stored: np.ndarray[Any, Any] | None = None,
    ) -> None:
        """``tensor`` or ``stored`` (the stored bytes), when the caller already has them."""
        info = checkpoint.info(name)
        self.type_name = info.dtype
        self._array: np.ndarray[Any, Any] | None = None
        self._stored: np.ndarray[Any, Any] | None = None
        self._block: Any = None
        self._ranged: Checkpoint | None = None
        self._name = name
        if has_dtype(info.dtype) and tensor is None and checkpoint._assembled(name):
            self._ranged = checkpoint
            self.dtype = DType[info.dtype]
            self.numel = info.shape.numel
        elif has_dtype(info.dtype):
            self._array = (checkpoint[name] if tensor is None else tensor).numpy()
            self.dtype = DType[info.dtype]
            self.numel = int(self._array.size)
        else:
            self._stored = checkpoint._stored(name) if stored is None else stored
            self._block = _block_type(checkpoint, info.dtype)
            self.dtype = DType.U8 if self._block is None else DType.F32
            self.numel = int(self._stored.size) if self._block is None else info.shape.numel
        self.kind = (
            "raw"
            if self._stored is not None and self._block is None
            else ("float" if self.dtype.is_float else "int")
        )

    def values(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        """Elements ``[start, stop)`` as one 1-D array (a view when the memory allows)."""
        if self._ranged is not None:
            size = self.dtype.itemsize
            found = self._ranged._chunks(self._name, start * size, stop * size)
            assert found is not None
            parts: list[np.ndarray[Any, Any]] = list(found)
            data = parts[0] if len(parts) == 1 else np.concatenate([np.zeros(0, np.uint8), *parts])
            viewed: np.ndarray[Any, Any] = data.view(self.dtype.numpy)
            return viewed
        if self._array is not None:
            parts = list(pieces(self._array, start, stop, 1 << 62, 1 << 62))
            if len(parts) == 1:
                return parts[0]
            return np.concatenate(parts) if parts else np.empty(0, self.dtype.numpy)
        assert self._stored is not None
        if self._block is None:
            return self._stored[start:stop]
        return self._dequantized(start, stop)

    def stored_bytes(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        """The stored bytes holding elements ``[start, stop)`` (whole blocks), as uint8."""
        if self._array is not None or self._ranged is not None:
            return self.values(start, stop).view(np.uint8)
        assert self._stored is not None
        if self._block is None:
            return self._stored[start:stop]
        size, nbytes = self._block.block_size, self._block.block_bytes
        first, last = start // size, -(-stop // size)
        return self._stored[first * nbytes : last * nbytes]

    def _dequantized(self, start: int, stop: int) -> np.ndarray[Any, Any]:

        assert self._stored is not None
        kind = self._block
        size, nbytes = kind.block_size, kind.block_bytes
        first, last = start // size, -(-stop // size)
        out = []
        for block in range(first, last, _BLOCKS_PER_STEP):
            end = min(block + _BLOCKS_PER_STEP, last)
            data = self._stored[block * nbytes : end * nbytes]
            out.append(dequantize(kind, data, ((end - block) * size,), self.type_name))
        flat = out[0] if len(out) == 1 else np.concatenate(out)
        offset = first * size
        return flat[start - offset : stop - offset]


def _block_type(checkpoint: Checkpoint, type_name: str) -> Any:
    """The ggml block type of a GGUF tensor strided dequantizes; None for raw bytes."""
    if checkpoint.format != "gguf":
        return None

    if type_name not in DEQUANTIZABLE:
        return None
    for kind in GGML_TYPES.values():
        if kind.name == type_name:
            return kind
    raise DTypeError(f"unknown ggml type {type_name}")  # pragma: no cover - table is closed
