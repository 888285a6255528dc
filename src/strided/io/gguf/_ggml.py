"""The ggml tensor types GGUF files use, and dequantization of their blocks to float32.

The kernels live in ``_quants`` (32-value blocks, TQ, MXFP4, NVFP4), ``_quants_k``
(K-quants, IQ4_XS) and ``_quants_iq`` (lattice types); each reproduces the ``gguf``
package's ``gguf.quants.dequantize`` bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._core.dtype import DType
from ..._core.errors import FormatError
from ._quants import KERNELS as BASIC_KERNELS
from ._quants import Kernel
from ._quants_iq import KERNELS as IQ_KERNELS
from ._quants_k import KERNELS as K_KERNELS

__all__ = [
    "DEQUANTIZABLE",
    "GGML_TYPES",
    "ZERO_COPY",
    "GGMLType",
    "decode_into",
    "dequantize",
    "sample",
]


class GGMLType:
    """A ggml tensor type: name, elements per block and bytes per block."""

    __slots__ = ("block_bytes", "block_size", "name", "type_id")

    def __init__(self, type_id: int, name: str, block_size: int, block_bytes: int) -> None:
        self.type_id = type_id
        self.name = name
        self.block_size = block_size
        self.block_bytes = block_bytes


# Type id -> type, as ggml defines them. Ids ggml has retired (4, 5, 31-33, 36-38) and
# anything unknown are refused as malformed; known types are listed by ``info`` even
# when strided cannot read them.
GGML_TYPES: dict[int, GGMLType] = {
    t.type_id: t
    for t in (
        GGMLType(0, "F32", 1, 4),
        GGMLType(1, "F16", 1, 2),
        GGMLType(2, "Q4_0", 32, 18),
        GGMLType(3, "Q4_1", 32, 20),
        GGMLType(6, "Q5_0", 32, 22),
        GGMLType(7, "Q5_1", 32, 24),
        GGMLType(8, "Q8_0", 32, 34),
        GGMLType(9, "Q8_1", 32, 40),
        GGMLType(10, "Q2_K", 256, 84),
        GGMLType(11, "Q3_K", 256, 110),
        GGMLType(12, "Q4_K", 256, 144),
        GGMLType(13, "Q5_K", 256, 176),
        GGMLType(14, "Q6_K", 256, 210),
        GGMLType(15, "Q8_K", 256, 292),
        GGMLType(16, "IQ2_XXS", 256, 66),
        GGMLType(17, "IQ2_XS", 256, 74),
        GGMLType(18, "IQ3_XXS", 256, 98),
        GGMLType(19, "IQ1_S", 256, 50),
        GGMLType(20, "IQ4_NL", 32, 18),
        GGMLType(21, "IQ3_S", 256, 110),
        GGMLType(22, "IQ2_S", 256, 82),
        GGMLType(23, "IQ4_XS", 256, 136),
        GGMLType(24, "I8", 1, 1),
        GGMLType(25, "I16", 1, 2),
        GGMLType(26, "I32", 1, 4),
        GGMLType(27, "I64", 1, 8),
        GGMLType(28, "F64", 1, 8),
        GGMLType(29, "IQ1_M", 256, 56),
        GGMLType(30, "BF16", 1, 2),
        GGMLType(34, "TQ1_0", 256, 54),
        GGMLType(35, "TQ2_0", 256, 66),
        GGMLType(39, "MXFP4", 32, 17),
        GGMLType(40, "NVFP4", 64, 36),
        GGMLType(41, "Q1_0", 128, 18),
    )
}

# Types whose bytes are plain little-endian elements: read as zero-copy views.
ZERO_COPY: dict[str, DType] = {
    "F32": DType.F32,
    "F16": DType.F16,
    "BF16": DType.BF16,
    "F64": DType.F64,
    "I8": DType.I8,
    "I16": DType.I16,
    "I32": DType.I32,
    "I64": DType.I64,
}
# Every block type the kernels decode (exactly those ``gguf.quants.dequantize`` handles
# besides plain F32/F16/BF16), name -> kernel(blocks, out).
_KERNELS: dict[str, Kernel] = {**BASIC_KERNELS, **K_KERNELS, **IQ_KERNELS}
DEQUANTIZABLE = frozenset(_KERNELS)

# Decode this many values at a time (a multiple of 8 blocks), each chunk copied into an
# aligned scratch buffer first: temporaries stay a few MiB for any tensor size.
_CHUNK_VALUES = 1 << 18


def dequantize(
    kind: GGMLType, data: np.ndarray[Any, Any], dims: tuple[int, ...], where: str
) -> np.ndarray[Any, Any]:
    """Blocks of ``kind`` (flat uint8) -> a new float32 array of shape ``dims``.

    FormatError unless ``data`` is a whole number of blocks holding exactly the values
    ``dims`` asks for; checked before anything is allocated.
    """
    numel = 1
    for dim in dims:
        numel *= dim
    blocks, partial = divmod(data.size, kind.block_bytes)
    if partial or numel % kind.block_size or numel // kind.block_size != blocks:
        raise FormatError(
            f"{where}: {data.size} bytes of {kind.name} blocks ({kind.block_bytes} bytes "
            f"per {kind.block_size} values) do not hold the {numel} values of shape {list(dims)}"
        )
    out = np.empty(dims, dtype=np.float32)
    decode_into(kind, data.reshape(blocks, kind.block_bytes), out.reshape(blocks, kind.block_size))
    return out


def decode_into(kind: GGMLType, blocks: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> None:
    """Decode ``blocks`` (uint8, (n, block_bytes)) into ``out`` (float32, (n, block_size)).

    A bounded number of blocks at a time; no floating-point warning or error escapes,
    whatever ``np.seterr`` says (NaN and infinite scales are data, not failures).
    """
    kernel = _KERNELS[kind.name]
    step = max(8, _CHUNK_VALUES // kind.block_size // 8 * 8)
    count = blocks.shape[0]
    scratch = np.empty((min(step, -(-count // 8) * 8), kind.block_bytes), dtype=np.uint8)
    with np.errstate(all="ignore"):
        for start in range(0, count, step):
            chunk = blocks[start : start + step]
            size = chunk.shape[0]
            work = scratch[: -(-size // 8) * 8]
            work[:size] = chunk
            if size == work.shape[0]:
                kernel(work, out[start : start + size])
                continue
            # The last chunk: whole groups of 8 blocks, the padding zero and discarded.
            work[size:] = 0
            tail = np.empty((work.shape[0], kind.block_size), dtype=np.float32)
            kernel(work, tail)
            out[start:] = tail[:size]


# Blocks decoded at a time when sampling: bounds the memory of a spread-out sample.
_SAMPLE_BLOCKS = 512


def sample(
    kind: GGMLType, data: np.ndarray[Any, Any], positions: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """The float32 values at flat ``positions`` (increasing) of validated ``kind`` blocks.

    Only the blocks holding a position are decoded, a bounded number at a time; each
    value is bit-identical to the same element of the whole tensor's dequantization.
    """
    blocks = data.reshape(-1, kind.block_bytes)
    owner = positions // kind.block_size
    needed, slot = np.unique(owner, return_inverse=True)
    values = np.empty(positions.size, dtype=np.float32)
    for start in range(0, needed.size, _SAMPLE_BLOCKS):
        chosen = needed[start : start + _SAMPLE_BLOCKS]
        decoded = np.empty((chosen.size, kind.block_size), dtype=np.float32)
        decode_into(kind, blocks[chosen], decoded)
        first, last = np.searchsorted(slot, (start, start + chosen.size))
        rows = slot[first:last] - start
        values[first:last] = decoded[rows, positions[first:last] % kind.block_size]
    return values
