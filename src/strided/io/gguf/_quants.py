"""Dequantization kernels for the ggml block types with one scale per small block.

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, NVFP4, TQ1_0 and TQ2_0, plus the helpers
the other kernel modules share. A kernel takes ``blocks`` (uint8, one block per row,
C-contiguous and aligned, a multiple of 8 rows: its bytes can be read as whole uint64
words) and ``out`` (float32, one block's values per row, C-contiguous) and fills
``out``; the caller bounds how many blocks one call sees.

Speed: NumPy pays a fixed cost per call and per contiguous run an operation walks, so
the byte work (nibbles, bit fields) is done on whole chunks at once as little-endian
uint64 words (the masks keep every result bit inside its byte), and each kernel moves
values into output order in as few strided operations as it can.

Bit-identity: every float operation is the one ggml's reference formula performs, in the
same order and precision (float32 products such as ``d * q``, then ``+ m``), so NaN and
infinite scales, subnormals and signed zeros come out exactly as the ``gguf`` package
computes them. Quantized integers are exact in float32, so how a kernel obtains them
(byte arithmetic, lookup tables of exact values) does not change a bit; only the float
products and sums follow the reference. The caller silences floating-point warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "IQ4_PAIRS",
    "KERNELS",
    "f16_at",
    "field_planes",
    "nibble_planes",
    "pair_codes",
    "take_pairs",
    "two_bit_values",
    "words",
]

Array = np.ndarray[Any, Any]
Kernel = Callable[[Array, Array], None]


# -- shared helpers -------------------------------------------------------------------

LOW4 = np.uint64(0x0F0F0F0F0F0F0F0F)


def f16_at(blocks: Array, at: int) -> Array:
    """The little-endian F16 at byte ``at`` of every block, as float32, shape (n, 1)."""
    return blocks[:, at : at + 2].view("<f2").astype(np.float32)


def words(blocks: Array) -> Array:
    """Every byte of ``blocks`` as one flat uint64 array (a view)."""
    return blocks.reshape(-1).view("<u8")


def nibble_planes(blocks: Array) -> Array:
    """(2, n, block_bytes) uint8: the low nibble of every byte, then the high nibble."""
    x = words(blocks)
    planes = np.empty((2, x.size), dtype="<u8")
    np.bitwise_and(x, LOW4, out=planes[0])
    np.right_shift(x, np.uint64(4), out=planes[1])
    np.bitwise_and(planes[1], LOW4, out=planes[1])
    return planes.view(np.uint8).reshape(2, *blocks.shape)


def field_planes(blocks: Array, shifts: tuple[int, ...], mask: int) -> Array:
    """(len(shifts), n, block_bytes) uint8: every byte shifted (left if > 0), then masked.

    The byte's own bits only: ``mask`` must keep no bit that a shift brings in from a
    neighbouring byte.
    """
    x = words(blocks)
    planes = np.empty((len(shifts), x.size), dtype="<u8")
    for plane, shift in zip(planes, shifts, strict=True):
        if shift >= 0:
            np.left_shift(x, np.uint64(shift), out=plane)
        else:
            np.right_shift(x, np.uint64(-shift), out=plane)
    np.bitwise_and(planes, np.uint64(mask * 0x0101010101010101), out=planes)
    return planes.view(np.uint8).reshape(len(shifts), *blocks.shape)


def pair_codes(payload: Array, group: int) -> Array:
    """Flat uint8 lookup codes, in output order, for nibble-packed ``payload`` (n, m).

    Each ``group`` bytes (8 or 16) of a row hold 2 * group values: the low nibbles in
    order, then the high nibbles. Code i of a group's low half is (low nibble of byte
    2i) | (low nibble of byte 2i+1) << 4, likewise for the high half, so one lookup in a
    256-entry pair table yields two consecutive output values. Computed on whole uint64
    words: nibble pairs are merged into even bytes, which are then packed together.
    """
    x = np.ascontiguousarray(payload).reshape(-1).view("<u8")
    halves = np.empty((2, x.size), dtype="<u8")
    np.bitwise_and(x, LOW4, out=halves[0])
    np.right_shift(x, np.uint64(4), out=halves[1])
    np.bitwise_and(halves[1], LOW4, out=halves[1])
    scratch = np.empty_like(halves)
    np.right_shift(halves, np.uint64(4), out=scratch)
    np.bitwise_or(halves, scratch, out=halves)
    for shift, mask in ((8, 0x00FF00FF00FF00FF), (16, 0x0000FFFF0000FFFF)):
        np.bitwise_and(halves, np.uint64(mask), out=halves)
        np.right_shift(halves, np.uint64(shift), out=scratch)
        np.bitwise_or(halves, scratch, out=halves)
    np.bitwise_and(halves, np.uint64(0xFFFFFFFF), out=halves)  # 4 codes per word and half
    codes = np.empty(x.size, dtype="<u8")
    if group == 8:
        np.left_shift(halves[1], np.uint64(32), out=codes)
        np.bitwise_or(codes, halves[0], out=codes)
    else:  # words 2k, 2k+1: the low codes of both, then the high codes of both
        pairs = codes.reshape(-1, 2).T
        np.left_shift(halves[:, 1::2], np.uint64(32), out=pairs)
        np.bitwise_or(pairs, halves[:, 0::2], out=pairs)
    return codes.view(np.uint8)


def pair_table(values: Array) -> Array:
    """A (256,) uint64 table: code ``c`` -> float32 pair (values[c & 15], values[c >> 4])."""
    codes = np.arange(256)
    pairs = np.stack((values[codes & 15], values[codes >> 4]), axis=1).astype(np.float32)
    return np.ascontiguousarray(pairs).view(np.uint64).reshape(256)


def take_pairs(table: Array, codes: Array, out: Array) -> None:
    """Fill ``out`` (float32, 2 * codes.size values) from a pair table, in code order."""
    np.take(table, codes, out=out.reshape(-1).view(np.uint64), mode="clip")


# -- tables ---------------------------------------------------------------------------

# IQ4_NL's 16 non-linear levels and the E2M1 values of MXFP4/NVFP4 doubled (both as
# ggml defines them).
IQ4_LEVELS = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32
)
_E2M1_DOUBLED = np.array(
    [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32
)
IQ4_PAIRS = pair_table(IQ4_LEVELS)
_E2M1_PAIRS = pair_table(_E2M1_DOUBLED)
_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint16)


def _e8m0_half() -> Array:
    # An E8M0 exponent e scales by 2**(e - 127); halved, as the doubled E2M1 values ask:
    # 2**(e - 128), subnormal for e < 2.
    e = np.arange(256, dtype=np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23))
    return bits.astype(np.uint32).view(np.float32)


def _ue4m3_half() -> Array:
    # Unsigned E4M3 (bias 7, the top bit ignored), halved; 0x00 and 0x7F decode to 0.
    # Every value is exact in float32.
    x = np.arange(256)
    exponent, mantissa = (x >> 3) & 15, x & 7
    normal = (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7.0)
    value = np.where(exponent == 0, mantissa * 2.0**-9, normal) * 0.5
    value[(x == 0) | (x == 0x7F)] = 0.0
    return value.astype(np.float32)


E8M0_HALF = _e8m0_half()
UE4M3_HALF = _ue4m3_half()


# -- kernels --------------------------------------------------------------------------


def _q8_0(blocks: Array, out: Array) -> None:
    d = f16_at(blocks, 0)
    np.copyto(out, blocks[:, 2:].view(np.int8))
    np.multiply(out, d, out=out)


def _nibble_values(blocks: Array, begin: int, minus: int) -> Array:
    """(n, 2, 16) uint8 view of nibble planes of the 16 bytes at ``begin``, minus ``minus``
    (wrapping: read as int8 it is the signed difference)."""
    planes = nibble_planes(blocks)
    if minus:
        np.subtract(planes, minus, out=planes)
    return planes[:, :, begin : begin + 16].transpose(1, 0, 2)


def _q4_0(blocks: Array, out: Array) -> None:
    d = f16_at(blocks, 0)
    np.copyto(out.reshape(-1, 2, 16), _nibble_values(blocks, 2, 8).view(np.int8))
    np.multiply(d, out, out=out)


def _q4_1(blocks: Array, out: Array) -> None:
    d, m = f16_at(blocks, 0), f16_at(blocks, 2)
    np.copyto(out.reshape(-1, 2, 16), _nibble_values(blocks, 4, 0))
    np.multiply(d, out, out=out)
    np.add(out, m, out=out)


def _five_bit(blocks: Array, high_at: int) -> Array:
    """Q5 codes (n, 32) uint8: nibbles of the 16 bytes after the 4 bytes at ``high_at``,
    whose bits are bit 4 of each value."""
    n = blocks.shape[0]
    high = np.unpackbits(blocks[:, high_at : high_at + 4], axis=1, bitorder="little")
    wide = high.reshape(-1).view("<u8")
    np.left_shift(wide, np.uint64(4), out=wide)
    codes = np.empty((n, 2, 16), dtype=np.uint8)
    np.copyto(codes, _nibble_values(blocks, high_at + 4, 0))
    np.bitwise_or(codes, high.reshape(n, 2, 16), out=codes)
    return codes.reshape(n, 32)


def _q5_0(blocks: Array, out: Array) -> None:
    d = f16_at(blocks, 0)
    codes = _five_bit(blocks, 2)
    np.subtract(codes, 16, out=codes)
    np.copyto(out, codes.view(np.int8))
    np.multiply(d, out, out=out)


def _q5_1(blocks: Array, out: Array) -> None:
    d, m = f16_at(blocks, 0), f16_at(blocks, 2)
    np.copyto(out, _five_bit(blocks, 4))
    np.multiply(d, out, out=out)
    np.add(out, m, out=out)


def _iq4_nl(blocks: Array, out: Array) -> None:
    d = f16_at(blocks, 0)
    take_pairs(IQ4_PAIRS, pair_codes(blocks[:, 2:], 16), out)
    np.multiply(d, out, out=out)


def _mxfp4(blocks: Array, out: Array) -> None:
    d = np.take(E8M0_HALF, blocks[:, :1], mode="clip")
    take_pairs(_E2M1_PAIRS, pair_codes(blocks[:, 1:], 16), out)
    np.multiply(d, out, out=out)


def _nvfp4(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = np.take(UE4M3_HALF, blocks[:, :4], mode="clip")[:, :, None]
    take_pairs(_E2M1_PAIRS, pair_codes(blocks[:, 4:], 8), out)
    values = out.reshape(n, 4, 16)
    np.multiply(d, values, out=values)


def _tq1_0(blocks: Array, out: Array) -> None:
    # Base-3 digits of every byte: (byte * 3**k) mod 256, then ((that * 3) >> 8) - 1,
    # computed as (that * 3 + 0xFF00) >> 8 read as int16.
    n = blocks.shape[0]
    d = f16_at(blocks, 52)
    wide = blocks.astype(np.uint16).reshape(-1)
    digits = np.empty((5, wide.size), dtype=np.uint16)
    np.multiply(wide[None, :], _POW3[:, None], out=digits)
    np.bitwise_and(digits, 0xFF, out=digits)
    np.multiply(digits, 3, out=digits)
    np.add(digits, 0xFF00, out=digits)
    signed = digits.view(np.int16)
    np.right_shift(signed, 8, out=signed)
    planes = signed.reshape(5, n, 54)
    values = out.reshape(n, 256)
    np.copyto(values[:, :160].reshape(n, 5, 32), planes[:, :, :32].transpose(1, 0, 2))
    np.copyto(values[:, 160:240].reshape(n, 5, 16), planes[:, :, 32:48].transpose(1, 0, 2))
    np.copyto(values[:, 240:].reshape(n, 4, 4), planes[:4, :, 48:52].transpose(1, 0, 2))
    np.multiply(d, out, out=out)


def two_bit_values(blocks: Array, begin: int, minus: int = 0) -> Array:
    """(n, 2, 4, 32) uint8 view: 2-bit field s of byte ``begin + 32h + j`` at [:, h, s, j].

    ``minus`` is subtracted (wrapping; read as int8 it is the signed difference).
    """
    planes = field_planes(blocks, (0, -2, -4, -6), 3)
    if minus:
        np.subtract(planes, minus, out=planes)
    n = blocks.shape[0]
    return planes[:, :, begin : begin + 64].reshape(4, n, 2, 32).transpose(1, 2, 0, 3)


def _tq2_0(blocks: Array, out: Array) -> None:
    n = blocks.shape[0]
    d = f16_at(blocks, 64)
    np.copyto(out.reshape(n, 2, 4, 32), two_bit_values(blocks, 0, 1).view(np.int8))
    np.multiply(d, out, out=out)


KERNELS: dict[str, Kernel] = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "IQ4_NL": _iq4_nl,
    "MXFP4": _mxfp4,
    "NVFP4": _nvfp4,
    "TQ1_0": _tq1_0,
    "TQ2_0": _tq2_0,
}
