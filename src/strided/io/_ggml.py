"""The ggml tensor types GGUF files use, and vectorized Q8_0 / Q4_0 dequantization."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtype import DType

__all__ = ["DEQUANTIZABLE", "GGML_TYPES", "ZERO_COPY", "GGMLType", "dequantize"]


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
DEQUANTIZABLE = frozenset({"Q8_0", "Q4_0"})

# Dequantize this many blocks at a time, so temporaries stay small for any tensor.
_BLOCKS_PER_CHUNK = 1 << 16


def dequantize(kind: GGMLType, data: np.ndarray[Any, Any], numel: int) -> np.ndarray[Any, Any]:
    """Q8_0 / Q4_0 blocks (flat uint8, validated length) -> a new flat float32 array.

    Each value is ``d * q`` computed in float32 (``d`` the block's F16 scale), as ggml
    does: Q8_0 holds 32 int8 ``q``; Q4_0 holds 32 nibbles, low nibbles first, ``q`` being
    the nibble minus 8.
    """
    blocks = data.reshape(-1, kind.block_bytes)
    out = np.empty((blocks.shape[0], kind.block_size), dtype=np.float32)
    for start in range(0, blocks.shape[0], _BLOCKS_PER_CHUNK):
        chunk = blocks[start : start + _BLOCKS_PER_CHUNK]
        scale = chunk[:, :2].view("<f2").astype(np.float32)
        if kind.name == "Q8_0":
            values = chunk[:, 2:].view(np.int8).astype(np.float32)
        else:
            packed = chunk[:, 2:]
            nibbles = np.concatenate((packed & 0x0F, packed >> 4), axis=1)
            values = nibbles.astype(np.float32) - np.float32(8)
        np.multiply(values, scale, out=out[start : start + _BLOCKS_PER_CHUNK])
    return out.reshape(numel)
