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


def _q2_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d, dmin = f16_at(blocks, 80), f16_at(blocks, 82)
    scales = blocks[:, :16]
    step = _scaled(d, scales & 15)
    offset = _scaled(dmin, scales >> 4)
    values = out.reshape(n, 16, 16)
    np.copyto(out.reshape(n, 2, 4, 32), two_bit_values(blocks, 16))
    np.multiply(step, values, out=values)
    np.subtract(values, offset, out=values)


def _q3_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 108)
    low, high = blocks[:, 96:104], blocks[:, 104:108]
    six = np.empty((n, 2, 8), dtype=np.uint8)  # scale i: low bits from nibble of byte i % 8
    np.bitwise_and(low, 15, out=six[:, 0])
    np.right_shift(low, 4, out=six[:, 1])
    top = np.empty((n, 4, 4), dtype=np.uint8)  # scale i: bits 2(i // 4) of byte i % 4
    for k in range(4):
        np.right_shift(high, 2 * k, out=top[:, k])
    np.bitwise_and(top, 3, out=top)
    scales = six.reshape(n, 16) | (top.reshape(n, 16) << 4)
    step = _scaled(d, scales.view(np.int8) - np.int8(32))
    # q = low 2 bits, minus 4 where the hmask bit is clear: (low | bit << 2) - 4.
    codes = np.empty((n, 2, 4, 32), dtype=np.uint8)
    hmask = _bit_planes(blocks[:, :32], 2).transpose(1, 0, 2).reshape(n, 2, 4, 32)
    np.bitwise_or(two_bit_values(blocks, 32), hmask, out=codes)
    np.subtract(codes, 4, out=codes)
    values = out.reshape(n, 16, 16)
    np.copyto(out, codes.view(np.int8).reshape(n, 256))
    np.multiply(step, values, out=values)


def _scale_min_k4(packed: Array) -> tuple[Array, Array]:
    """The 8 six-bit scales and 8 six-bit mins packed in 12 bytes (Q4_K, Q5_K)."""
    n = packed.shape[0]
    first, second, third = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.empty((n, 2, 4), dtype=np.uint8)
    mins = np.empty((n, 2, 4), dtype=np.uint8)
    np.bitwise_and(first, 63, out=scales[:, 0])
    np.bitwise_and(second, 63, out=mins[:, 0])
    np.bitwise_or(third & 15, (first >> 2) & 0x30, out=scales[:, 1])
    np.bitwise_or(third >> 4, (second >> 2) & 0x30, out=mins[:, 1])
    return scales.reshape(n, 8), mins.reshape(n, 8)


def _q4_k_like(blocks: Array, out: Array, low_at: int) -> None:
    """Q4_K (``low_at`` 16) and Q5_K (48, bit 4 from the 32 bytes at 16)."""
    n = blocks.shape[0]
    d, dmin = f16_at(blocks, 0), f16_at(blocks, 2)
    scales, mins = _scale_min_k4(blocks[:, 4:16])
    step, offset = _scaled(d, scales), _scaled(dmin, mins)
    planes = nibble_planes(blocks)[:, :, low_at : low_at + 128]
    low = planes.reshape(2, n, 4, 32).transpose(1, 2, 0, 3)
    if low_at == 16:
        np.copyto(out.reshape(n, 4, 2, 32), low)
    else:
        codes = np.empty((n, 4, 2, 32), dtype=np.uint8)
        high = _bit_planes(blocks[:, 16:48], 4).transpose(1, 0, 2).reshape(n, 4, 2, 32)
        np.bitwise_or(low, high, out=codes)
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
    np.bitwise_or(low, high5, out=codes)
    np.subtract(codes, 32, out=codes)
    values = out.reshape(n, 16, 16)
    np.copyto(out, codes.view(np.int8).reshape(n, 256))
    np.multiply(step, values, out=values)


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
