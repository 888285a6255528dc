"""Quantization kernels for the ggml block types the ``gguf`` package writes.

Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0 and MXFP4. A kernel takes ``x`` (float32,
one block's values per row, C-contiguous, every value finite: the caller checks) and
``out`` (uint8, one block's bytes per row) and fills ``out`` with exactly the bytes
``gguf.quants.quantize`` writes for those blocks; ``Scratch`` lends it reusable buffers,
so a chunk allocates nothing of its own size.

Bit-identity: every float operation that decides a result is the reference's, in float32
and in the same order (``amax / 127``, ``1 / d``, ``x * id``, ``+ 8.5``, ``(x - min) *
id``, ``np.log2``...). Only steps whose result is an exact integer or an exact
comparison are computed differently, because they cannot change a bit:

* Rounding half away from zero of a float32 ``v`` (``|v| <= 128``): the reference
  computes ``sign(v) * (floor|v| + floor(2 (|v| - floor|v|)))``. The kernels add
  ``copysign(0.5 - 2**-25, v)`` and truncate. Proof sketch: for ``n - 1/2 <= |v| < n +
  1/2`` (``n >= 1``) the float sum lies in ``[n, n + 1)`` after rounding, because the
  spacing of floats just below an integer ``n`` is at least the spacing at ``|v|``
  while the constant falls 2**-25 short of one half; below one half the sum stays
  below 1. Truncation toward zero is what the float-to-integer cast does anyway.
* ``trunc(y).astype(uint8)`` is ``y.astype(uint8)``: the cast truncates toward zero.
* MXFP4's ``argmin |d * k - x|`` over the 16 E2M1 levels ``k`` is a comparison of
  ``|x| / (d / 2)`` (an exact power-of-two scaling here) against the midpoints of
  adjacent levels, the lower level winning a tie as ``argmin``'s first index does; the
  float32 subtractions the reference performs are exact near every midpoint, so no
  rounding creates a tie there.
* A block's max and min are exact however they are reduced, except for which of two
  signed zeros comes out: rows whose max or min is zero are reduced again the way the
  reference reduces them (Q4_1/Q5_1 store that sign in ``d`` and ``m``).
* Packing (nibbles, bit planes, base-3 digits) is integer work, done on uint64 words.

Where the reference's arithmetic leaves the normal path, the few blocks concerned take
the reference's own float operations and casts: blocks whose ``1 / d`` overflows to
infinity (a largest magnitude below about 2**-121 for Q8_0), whose integer casts of NaN
or infinity are platform-dependent and reproduced as such (``_degenerate``); Q4_1/Q5_1
blocks whose ``max - min`` overflows; MXFP4 blocks whose levels ``8d`` and ``12d``
overflow (a largest magnitude within 2**-17 of 2**128), which ``argmin`` then never
picks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._quants import E8M0_HALF

__all__ = ["KERNELS", "NonFinite", "ScaleOverflow", "Scratch"]

Array = np.ndarray[Any, Any]

# 0.5 - 2**-25 (see the module docstring), and the bits of float32 sign and magnitude.
_JUST_UNDER_HALF = np.float32(0.5) - np.float32(2.0**-25)
_HALF_BITS = np.uint32(_JUST_UNDER_HALF.view(np.uint32))
_SIGN = np.uint32(0x80000000)
_BYTES = np.uint64(0x0101010101010101)


class NonFinite(Exception):
    """Raised by a kernel for a block holding NaN or infinity (``block``: its row in x)."""

    def __init__(self, block: int) -> None:
        super().__init__(block)
        self.block = block


class ScaleOverflow(Exception):
    """Raised by a kernel for a block whose F16 field (the scale ``d``, or Q4_1/Q5_1's
    minimum ``m``) rounds beyond F16's largest finite value: ``block`` is its row in x,
    ``name`` the field, ``value`` the float32 value that overflowed."""

    def __init__(self, block: int, name: str, value: float) -> None:
        super().__init__(block, name, value)
        self.block = block
        self.name = name
        self.value = value


def _require_finite(*stats: Array) -> None:
    """NonFinite for the first block whose statistics (max, min, max |x|) are not all
    finite: max and min propagate NaN and reach an infinity, so they are finite exactly
    when the block is."""
    finite = np.isfinite(stats[0])
    for stat in stats[1:]:
        finite &= np.isfinite(stat)
    if not finite.all():
        raise NonFinite(int(np.argmin(finite)))


class Scratch:
    """Named reusable buffers, each sized for the largest chunk once."""

    __slots__ = ("_arrays", "_elements")

    def __init__(self, elements: int) -> None:
        self._elements = elements
        self._arrays: dict[str, Array] = {}

    def get(self, name: str, dtype: Any, shape: tuple[int, ...]) -> Array:
        """A buffer of ``shape`` (at most the chunk's element count, in ``dtype``)."""
        flat = self._arrays.get(name)
        if flat is None:
            flat = np.empty(self._elements * 4, dtype=np.uint8)
            self._arrays[name] = flat
        size = np.dtype(dtype).itemsize
        for dim in shape:
            size *= dim
        buffer: Array = flat[:size].view(dtype).reshape(shape)
        return buffer


_DTYPES: dict[str, np.dtype[Any]] = {}


def field(rows: Array, offset: int, fmt: str) -> Array:
    """(k,) view of the bytes at ``offset`` of each row of C-contiguous, writable
    ``rows`` (k, ...), one ``fmt`` item per row (``"<f2"``, ``"u1"``, ``"V16"``...).

    NumPy walks a copy between two (k, 16) byte arrays as k short rows, paying a fixed
    cost per row; between two such views it is one 1-D loop over k items.
    """
    dtype = _DTYPES.get(fmt)
    if dtype is None:
        dtype = _DTYPES[fmt] = np.dtype(fmt)
    view: Array = np.ndarray((len(rows),), dtype, rows, offset, (rows.nbytes // len(rows),))
    return view


def _halving(op: Any, values: Array, scratch: Scratch) -> Array:
    """``op`` (maximum/minimum) over each row of ``values`` (k, width), shape (k,).

    NumPy pays a fixed cost per row of a reduction along a short axis, so narrow rows
    are reduced by halving: ``op`` of the flat array and itself shifted by width / 2,
    then by width / 4... (long contiguous loops; position 0 of each row ends up holding
    the row's result). Wide rows are reduced row by row. Either way the result is exact
    (max and min do not round) and NaN propagates; which of two zeros comes out is not
    specified (callers that care reduce those rows again).
    """
    k, width = values.shape
    if width > 64:
        return np.asarray(op.reduce(values, axis=1))
    size = k * width
    a = scratch.get("b", values.dtype, (size,))
    b = scratch.get("c", values.dtype, (size,))
    step = width // 2
    op(values.reshape(-1)[: size - step], values.reshape(-1)[step:], out=a[: size - step])
    size -= step
    while step > 1:
        step //= 2
        op(a[: size - step], a[step:size], out=b[: size - step])
        size -= step
        a, b = b, a
    return a[:size:width].copy()


def row_max(x: Array, scratch: Scratch) -> Array:
    """The maximum of each row of ``x`` (k, width), shape (k,); NaN propagates."""
    return _halving(np.maximum, x, scratch)


def row_min(x: Array, scratch: Scratch) -> Array:
    """The minimum of each row of ``x`` (k, width), shape (k,); NaN propagates."""
    return _halving(np.minimum, x, scratch)


def _abs_max(x: Array, scratch: Scratch) -> Array:
    """max |x| of each row (k,): the maximum of the magnitudes' bits as uint32 (NaN
    bits are above infinity's); NonFinite unless every block is finite. Leaves |x| in
    scratch buffer "a"."""
    magnitude = scratch.get("a", np.float32, x.shape)
    np.abs(x, out=magnitude)
    bits = _halving(np.maximum, magnitude.view(np.uint32), scratch)
    amax = bits.view(np.float32)
    _require_finite(amax)
    return amax


def _inverse(d: Array) -> Array:
    """The reference's ``np.where(d == 0, 0, 1 / d)`` in float32."""
    inverse = np.divide(np.float32(1), d)
    inverse[d == 0] = 0
    return inverse


def _signed_amax(x: Array, scratch: Scratch) -> Array:
    """(k,) the first value of each row with the largest magnitude (``argmax |x|``)."""
    high, low = row_max(x, scratch), row_min(x, scratch)
    _require_finite(high, low)
    value = np.where(high > -low, high, low)
    # Equal magnitudes of both signs (and all-zero rows, whose first zero keeps its
    # sign): the first one in the row wins, as argmax picks it.
    tie = np.flatnonzero(high == -low)
    if tie.size:
        rows = x[tie]
        value[tie] = rows[np.arange(tie.size), np.argmax(np.abs(rows), axis=1)]
    return value


def _f16_into(out: Array, at: int, values: Array, name: str = "scale d") -> None:
    """Store float32 ``values`` (k,) as little-endian F16 at byte ``at`` of each row.

    ScaleOverflow for the first value that the cast (round to nearest even) made
    infinite: the reference writes that infinity, which reads back as infinity or NaN
    for every value of the block. Checked on the stored bits, so the threshold is
    exactly the cast's (a value below 65520 rounds to 65504 and is kept).
    """
    stored = field(out, at, "<f2")
    np.copyto(stored, values, casting="same_kind")
    bits = stored.view("<u2")
    over = np.flatnonzero((bits & np.uint16(0x7FFF)) >= np.uint16(0x7C00))
    if over.size:
        first = int(over[0])
        raise ScaleOverflow(first, name, float(values[first]))


def _bytes_into(out: Array, at: int, source: Array, size: int, start: int = 0) -> None:
    """Copy ``size`` bytes from byte ``start`` of each row of ``source`` to byte ``at``
    of the same row of ``out`` (both C-contiguous, k rows)."""
    np.copyto(field(out, at, f"V{size}"), field(source, start, f"V{size}"))


def _round_away(v: Array, scratch: Scratch, into: Array) -> None:
    """``into`` (int8) = ``v`` (float32, |v| <= 128; changed) rounded half away from 0."""
    shift = scratch.get("b", np.uint32, v.shape)
    np.bitwise_and(v.view(np.uint32), _SIGN, out=shift)
    np.bitwise_or(shift, _HALF_BITS, out=shift)
    np.add(v, shift.view(np.float32), out=v)
    np.copyto(into, v, casting="unsafe")


def _scaled(x: Array, inverse: Array, scratch: Scratch) -> Array:
    """``x * inverse[:, None]`` in float32, in a scratch buffer."""
    v = scratch.get("a", np.float32, x.shape)
    np.multiply(x, inverse[:, None], out=v)
    return v


_LOW_NIBBLES = np.uint64(0x0F) * _BYTES
_HIGH_NIBBLES = np.uint64(0xF0) * _BYTES


def _words(codes: Array) -> Array:
    """The bytes of C-contiguous uint8 ``codes`` as one flat uint64 array (a view)."""
    return codes.reshape(-1).view("<u8")


def _nibble_pack(codes: Array, mask: bool, scratch: Scratch) -> Array:
    """Bytes ``codes[j] | codes[16 + j] << 4`` (j < 16) of (k, 32) uint8 codes, as the
    first 16 bytes of each row of a (k, 4) uint64 array.

    With ``mask`` the low code keeps only its low nibble (Q5's high bit goes to ``qh``);
    the shifted code is taken modulo 256 either way, as uint8 arithmetic does. Whole
    words, flat: word i is combined with word i + 2, valid where i is 0 or 1 mod 4.
    """
    w = _words(codes)
    n = w.size - 2
    packed = scratch.get("pack", np.uint64, (w.size,))
    np.left_shift(w[2:], np.uint64(4), out=packed[:n])
    np.bitwise_and(packed[:n], _HIGH_NIBBLES, out=packed[:n])
    if mask:
        low = scratch.get("pack2", np.uint64, (n,))
        np.bitwise_and(w[:n], _LOW_NIBBLES, out=low)
        np.bitwise_or(packed[:n], low, out=packed[:n])
    else:
        np.bitwise_or(packed[:n], w[:n], out=packed[:n])
    return packed.reshape(len(codes), 4)


# Little-endian bit gather: byte i (0 or 1) of a word lands on bit 56 + i of the product.
_GATHER = np.uint64(0x0102040810204080)


def _high_bits(codes: Array, scratch: Scratch) -> Array:
    """(k, 4) bytes: bit i of the 32-bit field is bit 4 of code i (``packbits`` little)."""
    w = _words(codes)
    bits = scratch.get("pack2", np.uint64, (w.size,))
    np.right_shift(w, np.uint64(4), out=bits)
    np.bitwise_and(bits, _BYTES, out=bits)
    np.multiply(bits, _GATHER, out=bits)
    np.right_shift(bits, np.uint64(56), out=bits)
    high = scratch.get("qh", np.uint8, (len(codes), 4))
    np.copyto(high.reshape(-1), bits, casting="unsafe")
    return high


def _clip_down(codes: Array, bits: int) -> None:
    """Clamp codes in [0, 2 ** bits] to at most 2 ** bits - 1 in place (uint8 ``clip``).

    The cast codes are at most 2 ** bits (``... + 8.5`` truncates to 16 for Q4, never
    17), so subtracting each byte's own bit ``bits`` clamps whole words without a
    borrow; a byte outside that range changes only itself.
    """
    w = codes.reshape(-1).view("<u8")
    over = np.right_shift(w, np.uint64(bits))
    over &= _BYTES
    w -= over


# -- the degenerate path: 1 / d overflowed -----------------------------------------------


def _reference_round(v: Array) -> Array:
    """The reference's half-away rounding, float op for float op (NaN stays NaN)."""
    a = np.abs(v)
    floored = np.floor(a)
    b = floored + np.floor(2 * (a - floored))
    return np.asarray(np.sign(v) * b)


def _degenerate(inverse: Array) -> Array:
    """Indices of the blocks whose ``1 / d`` is infinite."""
    return np.flatnonzero(np.isinf(inverse))


# -- kernels ------------------------------------------------------------------------------


def _q8_0(x: Array, out: Array, scratch: Scratch) -> None:
    d = _abs_max(x, scratch) / np.float32(127)
    inverse = _inverse(d)
    codes = scratch.get("codes", np.int8, x.shape)
    _round_away(_scaled(x, inverse, scratch), scratch, codes)
    odd = _degenerate(inverse)
    if odd.size:
        codes[odd] = _reference_round(x[odd] * inverse[odd, None]).astype(np.int8)
    _f16_into(out, 0, d)
    _bytes_into(out, 2, codes, 32)


def _symmetric_codes(x: Array, scratch: Scratch, levels: int) -> tuple[Array, Array]:
    """Q4_0/Q5_0: (d, codes) with d = max / -levels, codes = x * id + levels + 0.5
    truncated to uint8 and clipped to 2 * levels - 1, as the reference computes them."""
    d = _signed_amax(x, scratch) / np.float32(-levels)
    inverse = _inverse(d)
    v = _scaled(x, inverse, scratch)
    np.add(v, np.float32(levels + 0.5), out=v)
    codes = scratch.get("codes", np.uint8, x.shape)
    np.copyto(codes, v, casting="unsafe")
    odd = _degenerate(inverse)
    bits = levels.bit_length()
    if odd.size:
        # NaN and infinity cast as the reference casts them: any byte may come out, so
        # these blocks are clipped as bytes (the word clip below assumes at most
        # 2 * levels) and put back afterwards.
        y = np.trunc(x[odd] * inverse[odd, None] + np.float32(levels + 0.5))
        exact = y.astype(np.uint8).clip(0, 2 * levels - 1)
    _clip_down(codes, bits)
    if odd.size:
        codes[odd] = exact
    return d, codes


def _affine_codes(x: Array, scratch: Scratch, top: int) -> tuple[Array, Array, Array]:
    """Q4_1/Q5_1: (d, min, codes): d = (max - min) / top, codes = (x - min) * id + 0.5
    truncated to uint8 and clipped to ``top``, as the reference computes them."""
    high, low = row_max(x, scratch), row_min(x, scratch)
    _require_finite(high, low)
    # A zero max or min has a sign, and which zero NumPy's row reduction returns
    # depends on its lanes: those rows are reduced the way the reference reduces them.
    zero = np.flatnonzero((high == 0) | (low == 0))
    if zero.size:
        rows = x[zero]
        high[zero] = rows.max(axis=1)
        low[zero] = rows.min(axis=1)
    d = (high - low) / np.float32(top)
    inverse = _inverse(d)
    v = scratch.get("a", np.float32, x.shape)
    np.subtract(x, low[:, None], out=v)
    np.multiply(v, inverse[:, None], out=v)
    np.add(v, np.float32(0.5), out=v)
    codes = scratch.get("codes", np.uint8, x.shape)
    np.copyto(codes, v, casting="unsafe")
    # (x - min) * id + 0.5 stays below top + 1.5 unless it is NaN: max - min overflowing
    # to infinity makes id 0 and (x - min) * 0 NaN where x - min overflows too.
    bad = np.flatnonzero(~np.isfinite(d) | np.isinf(inverse))
    bits = top.bit_length()
    if bad.size:
        y = np.trunc((x[bad] - low[bad, None]) * inverse[bad, None] + np.float32(0.5))
        exact = y.astype(np.uint8).clip(0, top)
    _clip_down(codes, bits)
    if bad.size:
        codes[bad] = exact
    return d, low, codes


def _q4_0(x: Array, out: Array, scratch: Scratch) -> None:
    d, codes = _symmetric_codes(x, scratch, 8)
    _f16_into(out, 0, d)
    _bytes_into(out, 2, _nibble_pack(codes, False, scratch), 16)


def _q5_0(x: Array, out: Array, scratch: Scratch) -> None:
    d, codes = _symmetric_codes(x, scratch, 16)
    _f16_into(out, 0, d)
    _bytes_into(out, 2, _high_bits(codes, scratch), 4)
    _bytes_into(out, 6, _nibble_pack(codes, True, scratch), 16)


def _q4_1(x: Array, out: Array, scratch: Scratch) -> None:
    d, low, codes = _affine_codes(x, scratch, 15)
    _f16_into(out, 0, d)
    _f16_into(out, 2, low, "minimum m")
    _bytes_into(out, 4, _nibble_pack(codes, False, scratch), 16)


def _q5_1(x: Array, out: Array, scratch: Scratch) -> None:
    d, low, codes = _affine_codes(x, scratch, 31)
    _f16_into(out, 0, d)
    _f16_into(out, 2, low, "minimum m")
    _bytes_into(out, 4, _high_bits(codes, scratch), 4)
    _bytes_into(out, 8, _nibble_pack(codes, True, scratch), 16)


_LOW7 = np.uint64(0x7F) * _BYTES
_TOP = np.uint64(0x80) * _BYTES


def _ternary_codes(x: Array, scratch: Scratch) -> tuple[Array, Array, Array]:
    """TQ1_0/TQ2_0: (d, codes, degenerate rows) with d = max |x| and codes = round(x /
    d) + 1 as uint8: 0, 1 or 2, except in degenerate rows (any byte, as the reference's
    casts and int8 wrap-around make them)."""
    d = _abs_max(x, scratch)
    inverse = _inverse(d)
    codes = scratch.get("codes", np.int8, x.shape)
    _round_away(_scaled(x, inverse, scratch), scratch, codes)
    odd = _degenerate(inverse)
    if odd.size:
        codes[odd] = _reference_round(x[odd] * inverse[odd, None]).astype(np.int8)
    # + 1 in every byte, modulo 256: the low 7 bits added, the top bit flipped back in.
    w = _words(codes)
    plus = scratch.get("pack2", np.uint64, (w.size,))
    np.bitwise_and(w, _LOW7, out=plus)
    np.add(plus, _BYTES, out=plus)
    np.bitwise_and(w, _TOP, out=w)
    np.bitwise_xor(w, plus, out=w)
    return d, codes.view(np.uint8), odd


def _tq2_0(x: Array, out: Array, scratch: Scratch) -> None:
    d, codes, _ = _ternary_codes(x, scratch)
    # Byte j of half h: codes 128h + 32s + j shifted left 2s (mod 256), s = 0..3, or-ed.
    # On flat words: word i or-ed with words i + 4s, valid at words 16h + (0..3).
    w = _words(codes)
    n = w.size - 12
    packed = scratch.get("pack", np.uint64, (w.size,))
    shifted = scratch.get("pack2", np.uint64, (n,))
    np.copyto(packed[:n], w[:n])
    for s in (1, 2, 3):
        np.left_shift(w[4 * s : 4 * s + n], np.uint64(2 * s), out=shifted)
        np.bitwise_and(shifted, np.uint64((0xFF << (2 * s)) & 0xFF) * _BYTES, out=shifted)
        np.bitwise_or(packed[:n], shifted, out=packed[:n])
    rows = packed.reshape(len(codes), 32)
    _bytes_into(out, 0, rows, 32, start=0)
    _bytes_into(out, 32, rows, 32, start=128)
    _f16_into(out, 64, d)


def _tq1_table() -> Array:
    # A byte sum s of base-3 digits becomes ceil(s * 256 / 243), modulo 256 as the
    # reference's uint16 arithmetic and uint8 cast leave it.
    s = np.arange(256, dtype=np.uint32)
    return ((s * 256 + 242) // 243 % 256).astype(np.uint8)


_TQ1_TABLE = _tq1_table()


def _horner(words: Array, stride: int, digits: int, into: Array) -> None:
    """``into[i]`` = sum of ``words[i + m * stride] * 3 ** (4 - m)`` (m < digits), per
    byte; exact as long as every byte sum stays below 256 (digits 0, 1, 2 do)."""
    n = into.size
    np.copyto(into, words[:n])
    for m in range(1, digits):
        np.multiply(into, 3, out=into)
        np.add(into, words[m * stride : m * stride + n], out=into)
    if digits == 4:
        np.multiply(into, 3, out=into)


def _base3(groups: Array, digits: int) -> Array:
    """Like ``_horner`` on (k, digits, m) uint8 digits of any value, modulo 256 per
    byte as the reference's uint8 products and uint16 cast leave it."""
    total = groups[:, 0].astype(np.uint8)
    for m in range(1, digits):
        total *= np.uint8(3)
        total += groups[:, m]
    if digits == 4:
        total *= np.uint8(3)
    return total


def _tq1_0(x: Array, out: Array, scratch: Scratch) -> None:
    d, codes, odd = _ternary_codes(x, scratch)
    k = len(codes)
    sums = scratch.get("tq1", np.uint8, (k, 52))
    w = _words(codes)
    acc = scratch.get("pack", np.uint64, (w.size,))
    # Bytes 0-31: digits 32m + j; bytes 32-47: 160 + 16m + j; bytes 48-51: 240 + 4m + j.
    _horner(w, 4, 5, acc[: w.size - 16])
    _bytes_into(sums, 0, acc.reshape(k, 32), 32, start=0)
    _horner(w, 2, 5, acc[: w.size - 8])
    _bytes_into(sums, 32, acc.reshape(k, 32), 16, start=160)
    narrow = codes.reshape(-1).view("<u4")
    acc32 = acc.view("<u4")
    _horner(narrow, 1, 4, acc32[: narrow.size - 3])
    _bytes_into(sums, 48, acc32.reshape(k, 64), 4, start=240)
    if odd.size:
        rows = codes[odd]
        sums[odd, :32] = _base3(rows[:, :160].reshape(-1, 5, 32), 5)
        sums[odd, 32:48] = _base3(rows[:, 160:240].reshape(-1, 5, 16), 5)
        sums[odd, 48:] = _base3(rows[:, 240:].reshape(-1, 4, 4), 4)
    mapped = scratch.get("tq1_mapped", np.uint8, (k, 52))
    np.take(_TQ1_TABLE, sums, out=mapped, mode="clip")
    _bytes_into(out, 0, mapped, 52)
    _f16_into(out, 52, d)


def _mxfp4_table() -> Array:
    # Index: c = ceil(|x| / (d / 2)) (below 128) for x >= 0, the int8 -c as a byte for
    # x < 0. Value: the nibble argmin picks among the doubled E2M1 levels 0 1 2 3 4 6 8
    # 12 (nibbles 0-7) and their negatives (nibbles 9-15; nibble 8, also zero, never
    # beats nibble 0): the count of level midpoints (1 3 5 7 10 14 20 in units of d/2)
    # strictly below the ratio, which is the count strictly below its ceiling.
    ceiling = np.arange(129)
    magnitude = np.searchsorted(np.array([1, 3, 5, 7, 10, 14, 20]), ceiling, side="left")
    table = np.zeros(256, dtype=np.uint8)
    table[:128] = magnitude[:128]
    table[256 - ceiling[1:]] = np.where(magnitude[1:] > 0, magnitude[1:] + 8, 0)
    return table


_MXFP4_TABLE = _mxfp4_table()
_E2M1_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)


def _mxfp4(x: Array, out: Array, scratch: Scratch) -> None:
    amax = _abs_max(x, scratch)
    # The reference's exponent: floor(log2(amax)) - 2 + 127 in float32, 0 for a zero
    # block, cast to uint8 (a subnormal amax gives a negative float; the cast decides).
    with np.errstate(divide="ignore"):
        exponent = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0)
    e = exponent.astype(np.uint8)
    d = np.take(E8M0_HALF, e)
    half = d * np.float32(0.5)
    ratio = scratch.get("a", np.float32, x.shape)  # still |x|, from _abs_max
    np.divide(ratio, half[:, None], out=ratio)
    np.ceil(ratio, out=ratio)
    # copysign(ceiling, x) on the bits, then the int8 cast: -c for a negative x.
    sign = scratch.get("b", np.uint32, x.shape)
    np.bitwise_and(x.view(np.uint32), _SIGN, out=sign)
    np.bitwise_or(ratio.view(np.uint32), sign, out=sign)
    index = scratch.get("codes", np.int8, x.shape)
    np.copyto(index, sign.view(np.float32), casting="unsafe")
    codes = scratch.get("mx_codes", np.uint8, x.shape)
    np.take(_MXFP4_TABLE, index.view(np.uint8), out=codes, mode="clip")
    # e >= 253 (a largest magnitude within 2**-17 of 2**128, or garbage exponents of
    # tiny blocks): levels 8d and 12d overflow to infinity, so their errors are infinite
    # and argmin never picks them. Those blocks take the reference's own arithmetic.
    huge = np.flatnonzero(e >= 253)
    if huge.size:
        levels = d[huge, None, None] * _E2M1_DOUBLED
        errors = np.abs(levels - x[huge][:, :, None])
        codes[huge] = np.argmin(errors, axis=-1)
    np.copyto(field(out, 0, "u1"), e)
    _bytes_into(out, 1, _nibble_pack(codes, False, scratch), 16)


Kernel = Callable[[Array, Array, Scratch], None]

KERNELS: dict[str, Kernel] = {
    "Q8_0": _q8_0,
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "TQ1_0": _tq1_0,
    "TQ2_0": _tq2_0,
    "MXFP4": _mxfp4,
}
