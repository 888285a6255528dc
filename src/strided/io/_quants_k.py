"""Dequantization kernels for ggml's 256-element super-block types: the K-quants and IQ4_XS.

Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS hold one F16 scale ``d`` per 256 values (and
for Q2_K, Q4_K, Q5_K an F16 ``dmin``) plus small integer scales per 16 or 32 values. As
the reference formulas do, a sub-block's float32 scale is ``d * scale`` (and its offset
``dmin * min``), and each value is ``scale * q`` (then ``- offset``), all in float32 in
that order. Kernels take and fill arrays as described in ``_quants``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._quants import (
    IQ4_PAIRS,
    f16_at,
    field_planes,
    nibble_planes,
    pair_codes,
    take_pairs,
    two_bit_values,
)

__all__ = ["KERNELS"]

Array = np.ndarray[Any, Any]


def _bit_planes(field: Array, to_bit: int) -> Array:
    """(8, n, width) uint8: bit k of every byte of ``field`` (n, width) moved to ``to_bit``."""
    packed = np.ascontiguousarray(field)
    return field_planes(packed, tuple(to_bit - k for k in range(8)), 1 << to_bit)


def _scaled(d: Array, scales: Array) -> Array:
    """``d * scales`` in float32, shaped to broadcast over each sub-block's values."""
    product: Array = d * scales.astype(np.float32)
    return product[:, :, None]


def _per_value(scales: Array) -> Array:
    """(n, 16, 1) sub-block scales repeated over their 16 values: (n, 256).

    For 16-value sub-blocks a broadcasting multiply pays NumPy's per-run cost every 16
    values; repeating the scales once and multiplying whole rows is cheaper.
    """
    return np.repeat(scales.reshape(scales.shape[0], 16), 16, axis=1)


def _q2_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d, dmin = f16_at(blocks, 80), f16_at(blocks, 82)
    scales = blocks[:, :16]
    step = _scaled(d, scales & 15)
    offset = _scaled(dmin, scales >> 4)
    np.copyto(out.reshape(n, 2, 4, 32), two_bit_values(blocks, 16))
    np.multiply(_per_value(step), out, out=out)
    np.subtract(out, _per_value(offset), out=out)


def _q3_k_scales(blocks: Array) -> Array:
    """Q3_K's 16 six-bit scales minus 32, int8 (n, 16), from bytes 96-107.

    Scale i takes its low 4 bits from nibble i // 8 of byte 96 + i % 8 and its top 2
    bits from bits 2 (i // 4) of byte 104 + i % 4: computed as 4 words of 4 scales.
    """
    packed = blocks[:, 96:108].view("<u4")  # (n, 3)
    low = (packed[:, 0], packed[:, 1], packed[:, 0] >> 4, packed[:, 1] >> 4)
    high = packed[:, 2]
    scales = np.empty((blocks.shape[0], 4), dtype="<u4")
    for k in range(4):
        scales[:, k] = (low[k] & 0x0F0F0F0F) | (((high >> (2 * k)) & 0x03030303) << 4)
    six = scales.view(np.int8)
    np.subtract(six, 32, out=six)
    return six


def _q3_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    step = _scaled(f16_at(blocks, 108), _q3_k_scales(blocks))
    # q = low 2 bits, minus 4 where the hmask bit is clear: (low | bit << 2) - 4.
    codes = np.empty((n, 2, 4, 32), dtype=np.uint8)
    np.copyto(codes, two_bit_values(blocks, 32))
    hmask = _bit_planes(blocks[:, :32], 2).transpose(1, 0, 2).reshape(n, 2, 4, 32)
    np.bitwise_or(codes, hmask, out=codes)  # in place: cheaper than a 3-array operation
    np.subtract(codes, 4, out=codes)
    np.copyto(out, codes.view(np.int8).reshape(n, 256))
    np.multiply(_per_value(step), out, out=out)


def _scale_min_k4(blocks: Array) -> tuple[Array, Array]:
    """The 8 six-bit scales and 8 six-bit mins packed in bytes 4-15 (Q4_K, Q5_K).

    Scales 0-3 and mins 0-3 are the low 6 bits of bytes 4-7 and 8-11; scales 4-7 and
    mins 4-7 take their low 4 bits from the nibbles of bytes 12-15 and their top 2 bits
    from the top bits of bytes 4-7 and 8-11. Computed on 4-byte words per block.
    """
    packed = blocks[:, 4:16].view("<u4")  # (n, 3)
    first, second, third = packed[:, 0], packed[:, 1], packed[:, 2]
    scales = np.empty((blocks.shape[0], 2), dtype="<u4")
    mins = np.empty((blocks.shape[0], 2), dtype="<u4")
    np.bitwise_and(first, 0x3F3F3F3F, out=scales[:, 0])
    np.bitwise_and(second, 0x3F3F3F3F, out=mins[:, 0])
    scales[:, 1] = (third & 0x0F0F0F0F) | ((first >> 2) & 0x30303030)
    mins[:, 1] = ((third >> 4) & 0x0F0F0F0F) | ((second >> 2) & 0x30303030)
    return scales.view(np.uint8), mins.view(np.uint8)


def _q4_k_like(blocks: Array, out: Array, low_at: int) -> None:
    """Q4_K (``low_at`` 16) and Q5_K (48, bit 4 from the 32 bytes at 16)."""
    n = blocks.shape[0]
    d, dmin = f16_at(blocks, 0), f16_at(blocks, 2)
    scales, mins = _scale_min_k4(blocks)
    step, offset = _scaled(d, scales), _scaled(dmin, mins)
    planes = nibble_planes(blocks)[:, :, low_at : low_at + 128]
    low = planes.reshape(2, n, 4, 32).transpose(1, 2, 0, 3)
    if low_at == 16:
        np.copyto(out.reshape(n, 4, 2, 32), low)
    else:
        codes = np.empty((n, 4, 2, 32), dtype=np.uint8)
        np.copyto(codes, low)
        high = _bit_planes(blocks[:, 16:48], 4).transpose(1, 0, 2).reshape(n, 4, 2, 32)
        np.bitwise_or(codes, high, out=codes)
        np.copyto(out, codes.reshape(n, 256))
    values = out.reshape(n, 8, 32)
    np.multiply(step, values, out=values)
    np.subtract(values, offset, out=values)


def _q4_k(blocks: Array, out: Array) -> None:
    _q4_k_like(blocks, out, 16)


def _q5_k(blocks: Array, out: Array) -> None:
    _q4_k_like(blocks, out, 48)


def _q6_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 208)
    step = _scaled(d, blocks[:, 192:208].view(np.int8))
    # Values 128h + 32p + j: low 4 bits from nibble p // 2 of byte 64h + 32(p % 2) + j,
    # bits 4-5 from bits 2p of byte 128 + 32h + j.
    low = nibble_planes(blocks)[:, :, :128].reshape(2, n, 2, 2, 32).transpose(1, 2, 0, 3, 4)
    high = field_planes(np.ascontiguousarray(blocks[:, 128:192]), (4, 2, 0, -2), 0x30)
    high5 = high.reshape(2, 2, n, 2, 32).transpose(2, 3, 0, 1, 4)
    codes = np.empty((n, 2, 2, 2, 32), dtype=np.uint8)
    np.copyto(codes, low)
    np.bitwise_or(codes, high5, out=codes)
    np.subtract(codes, 32, out=codes)
    np.copyto(out, codes.view(np.int8).reshape(n, 256))
    np.multiply(_per_value(step), out, out=out)


def _iq4_xs(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    low = blocks[:, 4:8]
    scales = np.empty((n, 4, 2), dtype=np.uint8)
    np.bitwise_and(low, 15, out=scales[:, :, 0])
    np.right_shift(low, 4, out=scales[:, :, 1])
    high = blocks[:, 2:4].view("<u2") >> np.arange(0, 16, 2, dtype=np.uint16)
    scales8 = scales.reshape(n, 8) | ((high.astype(np.uint8) & 3) << 4)
    step = _scaled(d, scales8.view(np.int8) - np.int8(32))
    take_pairs(IQ4_PAIRS, pair_codes(blocks[:, 8:], 16), out)
    values = out.reshape(n, 8, 32)
    np.multiply(step, values, out=values)


KERNELS: dict[str, Any] = {
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "IQ4_XS": _iq4_xs,
}
