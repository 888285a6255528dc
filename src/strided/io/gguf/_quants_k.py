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
    Kernel,
    f16_at,
    field_planes,
    nibble_planes,
    pair_codes,
    take_pairs,
    two_bit_values,
    words,
)

__all__ = ["KERNELS"]

Array = np.ndarray[Any, Any]


def _shifted_copies(field: Array, shifts: tuple[int, ...]) -> Array:
    """(n, len(shifts), width) uint8: the bytes of ``field`` (n, width) shifted right by
    each of ``shifts``; bits above 7 - shift may hold the next byte's low bits (every
    caller masks them off)."""
    packed = np.ascontiguousarray(field)
    x = words(packed)
    copies = np.empty((len(shifts), x.size), dtype="<u8")
    for copy, shift in zip(copies, shifts, strict=True):
        np.right_shift(x, np.uint64(shift), out=copy)
    spread = np.empty((packed.shape[0], len(shifts), packed.shape[1]), dtype=np.uint8)
    np.copyto(spread, copies.view(np.uint8).reshape(len(shifts), *packed.shape).transpose(1, 0, 2))
    return spread


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
    # Value 128h + 32s + j: bits 2s of byte 32 + 32h + j, minus 4 unless bit 4h + s of
    # byte j (hmask) is set: (low | bit << 2) - 4. The hmask bytes are laid beside both
    # halves of the low bits, the second copy shifted by 4, so that bit s serves plane s
    # of both halves and each plane is one operation over the whole chunk.
    low = field_planes(np.ascontiguousarray(blocks[:, 32:96]), (0, -2, -4, -6), 3)
    hmask = np.empty((n, 2, 32), dtype=np.uint8)
    np.copyto(hmask[:, 0], blocks[:, :32])
    np.right_shift(blocks[:, :32], 4, out=hmask[:, 1])
    np.bitwise_or(low, field_planes(hmask.reshape(n, 64), (2, 1, 0, -1), 4), out=low)
    np.subtract(low, 4, out=low)
    values = low.view(np.int8).reshape(4, n, 2, 32).transpose(1, 2, 0, 3)
    np.copyto(out.reshape(n, 2, 4, 32), values)
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
    if low_at == 16:
        planes = nibble_planes(blocks)[:, :, 16:144]
    else:
        # Value 64i + 32k + j: nibble k of byte 48 + 32i + j, bit 2i + k of byte 16 + j
        # as bit 4. With the high bytes shifted right by 2i beside each group i, bit k
        # serves every group and the merge is one operation over the whole chunk.
        planes = nibble_planes(np.ascontiguousarray(blocks[:, 48:176]))
        high = _shifted_copies(blocks[:, 16:48], (0, 2, 4, 6)).reshape(n, 128)
        np.bitwise_or(planes, field_planes(high, (4, 3), 0x10), out=planes)
    np.copyto(out.reshape(n, 4, 2, 32), planes.reshape(2, n, 4, 32).transpose(1, 2, 0, 3))
    values = out.reshape(n, 8, 32)
    np.multiply(step, values, out=values)
    np.subtract(values, offset, out=values)


def _q4_k(blocks: Array, out: Array) -> None:
    _q4_k_like(blocks, out, 16)


def _q5_k(blocks: Array, out: Array) -> None:
    _q4_k_like(blocks, out, 48)


def _q6_k(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    step = _scaled(f16_at(blocks, 208), blocks[:, 192:208].view(np.int8))
    # Value 128h + 64k + 32m + j: nibble k of byte 64h + 32m + j, and bits 2(2k + m) of
    # byte 128 + 32h + j as bits 4-5, minus 32. With the high bytes shifted right by 2m
    # beside each half m, bits 4k serve both halves: one merge over the whole chunk.
    planes = nibble_planes(np.ascontiguousarray(blocks[:, :128]))
    high = _shifted_copies(blocks[:, 128:192].reshape(2 * n, 32), (0, 2)).reshape(n, 128)
    np.bitwise_or(planes, field_planes(high, (4, 0), 0x30), out=planes)
    np.subtract(planes, 32, out=planes)
    values = planes.view(np.int8).reshape(2, n, 2, 64).transpose(1, 2, 0, 3)
    np.copyto(out.reshape(n, 2, 2, 64), values)
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


KERNELS: dict[str, Kernel] = {
    "Q2_K": _q2_k,
    "Q3_K": _q3_k,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "IQ4_XS": _iq4_xs,
}
