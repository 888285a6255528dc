"""Dequantization kernels for ggml's lattice types: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS and IQ3_S.

Each group of 4 or 8 values is a row of a fixed lattice table (``_iq_grids``), with
per-value signs for the IQ2/IQ3 types and a shift of +-1/8 for IQ1, times a float32
sub-block scale. The reference computes ``scale * row * sign`` (IQ2/IQ3) and
``scale * (row + shift)`` (IQ1) in float32. The rows never hold 0 and the signs are
+-1, so ``scale * (row * sign)`` rounds identically (the same magnitude, the sign
applied exactly, a NaN scale propagated alike) and ``row + shift`` is exact: each
kernel gathers pre-signed (or pre-shifted) rows from a table built once, indexed by the
row number and sign pattern together, then multiplies by the scale. Sub-block scales
follow the reference's float32 operations in order. Kernels take and fill arrays as
described in ``_quants``.

The tables are built on a type's first use and kept: 2 MiB for IQ2_XS (its 16-bit
codes index the table directly), 1 MiB for IQ2_XXS, 512 KiB for IQ2_S, at most 128 KiB
for the others.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from ._iq_grids import grid
from ._quants import Kernel, f16_at

__all__ = ["KERNELS"]

Array = np.ndarray[Any, Any]


def _sign_patterns(bits: int) -> Array:
    """(2**bits, bits) float32: row p holds -1 where bit i of p is set, else 1."""
    p = np.arange(1 << bits)[:, None]
    return (1 - 2 * ((p >> np.arange(bits)) & 1)).astype(np.float32)


def _even_parity_patterns() -> Array:
    """The 128 eight-bit sign patterns of the IQ2/IQ3 types: 7 bits, the 8th for even parity."""
    p = np.arange(128)
    parity = np.zeros(128, dtype=np.int64)
    for i in range(7):
        parity ^= (p >> i) & 1
    return p | (parity << 7)


def _signed(rows: Array, signs: Array) -> Array:
    """Table (len(signs) * len(rows), width): entry ``s * len(rows) + r`` is rows[r] * signs[s]."""
    return (signs[:, None, :] * rows[None, :, :]).reshape(-1, rows.shape[1])


@cache
def _table(name: str) -> Array:
    if name in ("IQ2_XXS", "IQ2_XS"):
        return _signed(grid(name), _sign_patterns(8)[_even_parity_patterns()])
    if name == "IQ2_S":
        return _signed(grid(name).reshape(-1, 4), _sign_patterns(4))
    if name in ("IQ3_XXS", "IQ3_S"):
        return _signed(grid(name), _sign_patterns(4))
    rows = grid("IQ1_S")  # IQ1_S and IQ1_M: + 1/8, then - 1/8 (the shift bit set)
    return np.concatenate((rows + np.float32(0.125), rows - np.float32(0.125)))


@cache
def _nibble_pair_shifted() -> Array:
    """(128, 2) uint16: each even-parity sign pattern's low and high nibbles, ``<< 8``."""
    pattern = _even_parity_patterns()
    return np.stack(((pattern & 15) << 8, (pattern >> 4) << 8), axis=1).astype(np.uint16)


def _gather(name: str, index: Array, out: Array, width: int) -> None:
    rows = out.reshape(*index.shape, width)
    np.take(_table(name), index, axis=0, out=rows, mode="clip")


def _scale_groups(scale: Array, out: Array, groups: int) -> None:
    """``out`` *= scale, ``scale`` (n, groups) covering equal runs of each block's values."""
    values = out.reshape(out.shape[0], groups, -1)
    np.multiply(scale[:, :, None], values, out=values)


def _half_scale(d: Array, nibbles: Array, last: float) -> Array:
    """``d * (0.5 + nibbles) * last`` in float32, the IQ2/IQ3 sub-block scale."""
    return d * (np.float32(0.5) + nibbles.astype(np.float32)) * np.float32(last)  # type: ignore[no-any-return]


def _nibbles(packed: Array) -> Array:
    """(n, m) bytes -> (n, 2m) uint8: low then high nibble of each byte, byte by byte."""
    split = np.empty((*packed.shape, 2), dtype=np.uint8)
    np.bitwise_and(packed, 15, out=split[..., 0])
    np.right_shift(packed, 4, out=split[..., 1])
    return split.reshape(packed.shape[0], -1)


def _iq2_xxs(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    aux = blocks[:, 2:66].view("<u4")[:, 1::2]  # (n, 8): four 7-bit signs, 4-bit scale
    scale = _half_scale(d, aux >> 28, 0.25)
    index = np.empty((n, 8, 4), dtype=np.uint32)
    for k in range(4):  # sign pattern k to bits 8..14
        shift = 7 * k - 8
        if shift < 0:
            np.left_shift(aux, -shift, out=index[:, :, k])
        else:
            np.right_shift(aux, shift, out=index[:, :, k])
    np.bitwise_and(index, 0x7F00, out=index)
    np.bitwise_or(index, blocks[:, 2:66].reshape(n, 8, 8)[:, :, :4], out=index)
    _gather("IQ2_XXS", index, out, 8)
    _scale_groups(scale, out, 8)


def _iq2_xs(blocks: Array, out: Array) -> None:
    d = f16_at(blocks, 0)
    scale = _half_scale(d, _nibbles(blocks[:, 66:74]), 0.25)
    # Each uint16 is a 9-bit row number and a 7-bit sign pattern: the table's own index.
    _gather("IQ2_XS", blocks[:, 2:66].view("<u2"), out, 8)
    _scale_groups(scale, out, 16)


def _iq2_s(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    scale = _half_scale(d, _nibbles(blocks[:, 74:82]), 0.25)
    qh = blocks[:, 66:74]
    high = np.empty((n, 8, 4), dtype=np.uint8)  # bits 8-9 of row 4i + k: bits 2k of qh[i]
    for k in range(4):
        np.right_shift(qh, 2 * k, out=high[:, :, k])
    np.bitwise_and(high, 3, out=high)
    # Half-rows of 4: index = sign nibble << 11 | row << 1 | half.
    base = np.left_shift(high.reshape(n, 32), 9, dtype=np.uint32)
    base |= np.left_shift(blocks[:, 2:34], 1, dtype=np.uint32)
    index = np.empty((n, 32, 2), dtype=np.uint32)
    signs = blocks[:, 34:66]
    np.left_shift(signs & 15, 11, out=index[:, :, 0], dtype=np.uint32)
    np.left_shift(signs >> 4, 11, out=index[:, :, 1], dtype=np.uint32)
    np.bitwise_or(index, base[:, :, None], out=index)
    np.bitwise_or(index[:, :, 1], 1, out=index[:, :, 1])
    _gather("IQ2_S", index, out, 4)
    _scale_groups(scale, out, 16)


def _iq3_xxs(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    aux = blocks[:, 66:98].view("<u4")  # (n, 8): four 7-bit signs, 4-bit scale
    scale = _half_scale(d, aux >> 28, 0.5)
    patterns = np.empty((n, 8, 4), dtype=np.uint32)
    for k in range(4):
        np.right_shift(aux, 7 * k, out=patterns[:, :, k])
    np.bitwise_and(patterns, 127, out=patterns)
    # Rows of 4: index = sign nibble << 8 | row; each pattern signs two rows.
    index = np.take(_nibble_pair_shifted(), patterns, axis=0, mode="clip").reshape(n, 64)
    np.bitwise_or(index, blocks[:, 2:66], out=index)
    _gather("IQ3_XXS", index, out, 4)
    _scale_groups(scale, out, 8)


def _iq3_s(blocks: Array, out: Array) -> None:
    blocks.shape[0]
    d = f16_at(blocks, 0)
    scale = d * (1 + 2 * _nibbles(blocks[:, 106:110]))
    # Rows of 4: index = sign nibble << 9 | row (8 bits, and a 9th from qh).
    high = _nibbles(blocks[:, 74:106])
    np.left_shift(high, 1, out=high)
    np.bitwise_or(high, np.unpackbits(blocks[:, 66:74], axis=1, bitorder="little"), out=high)
    index = np.left_shift(high, 8, dtype=np.uint16)
    np.bitwise_or(index, blocks[:, 2:66], out=index)
    _gather("IQ3_S", index, out, 4)
    _scale_groups(scale, out, 8)


def _iq1_s(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 0)
    qh = blocks[:, 34:50].view("<u2")  # (n, 8)
    scale = d * (2 * ((qh >> 12) & 7) + 1)
    # Index = shift bit << 11 | row (8 bits, 3 more from qh per group of 8).
    index = np.empty((n, 8, 4), dtype=np.uint16)
    for k in range(4):
        np.right_shift(qh, 3 * k, out=index[:, :, k])
    np.bitwise_and(index, 7, out=index)
    np.bitwise_or(index, ((qh >> 12) & 8)[:, :, None], out=index)
    np.left_shift(index, 8, out=index)
    np.bitwise_or(index, blocks[:, 2:34].reshape(n, 8, 4), out=index)
    _gather("IQ1", index, out, 8)
    _scale_groups(scale, out, 8)


def _iq1_m(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    packed = blocks[:, 48:56].view("<u2")  # (n, 4): 3-bit scales, F16 in the top nibbles
    bits = (packed[:, 0:1] >> 12) | ((packed[:, 1:2] >> 8) & 0xF0)
    bits |= ((packed[:, 2:3] >> 4) & 0xF00) | (packed[:, 3:4] & 0xF000)
    d = bits.view(np.float16).astype(np.float32)
    small = np.empty((n, 4, 4), dtype=np.uint16)
    for k in range(4):
        np.right_shift(packed, 3 * k, out=small[:, :, k])
    np.bitwise_and(small, 7, out=small)
    scale = d * (2 * small.reshape(n, 16) + 1)
    # Each nibble of qh: 3 more row bits and the shift bit, so index = nibble << 8 | row.
    index = np.left_shift(_nibbles(blocks[:, 32:48]), 8, dtype=np.uint16)
    np.bitwise_or(index, blocks[:, :32], out=index)
    _gather("IQ1", index, out, 8)
    _scale_groups(scale, out, 16)


KERNELS: dict[str, Kernel] = {
    "IQ1_S": _iq1_s,
    "IQ1_M": _iq1_m,
    "IQ2_XXS": _iq2_xxs,
    "IQ2_XS": _iq2_xs,
    "IQ2_S": _iq2_s,
    "IQ3_XXS": _iq3_xxs,
    "IQ3_S": _iq3_s,
}
