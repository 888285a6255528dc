"""Canonical scalar text back into arrays, in bulk, with ``Scalar.parse``'s exact results.

The bulk path parses every entry in C and proves it got the same answer the scalar
parser would, falling back to ``parse_value`` only for the entries it cannot vouch for:

1. The entries, joined as ``t1","t2",...","tn`` (the inside of a JSON array of strings),
   must use only the characters of the grammar (digits, ``.eE+-``, and for floats the
   letters of ``inf``/``nan``): no spaces, underscores, ``x``, ``t``/``y`` (so neither
   ``infinity`` nor ``0x10``), parentheses or anything else.
2. ``numpy.fromstring`` with separator ``","`` parses that text with CPython's own
   correctly rounded ``PyOS_string_to_double`` (floats) or ``PyOS_strtol`` /
   ``PyOS_strtoul`` (integers). Over that alphabet their grammars are exactly the
   scalar grammar (but for ``PyOS_strtol`` reading a lone sign as 0, checked apart),
   and a sentinel entry appended at the end makes a token that is not consumed to its
   end show up as a short count, so the count proves every entry is well formed (and
   that no entry contained a separator).
3. What C cannot decide is redone per entry, exactly: integers that saturated
   (``INT64_MAX``/``UINT64_MAX``: overflow), entries longer than MAX_DIGITS, infinities
   that came from numbers (``1e999``: RangeError), values outside the dtype, and
   narrowing ties. Decimal text is first rounded to F64; rounding that again into a
   narrower float is exact unless the F64 value is exactly a midpoint of the narrower
   format (then the decimal itself decides the tie). Midpoints are found vectorized:
   with ``nextafter`` for F32, and by a sorted table of every midpoint for the 8- and
   16-bit floats, which also rounds them (ml_dtypes would round through F32, twice).
   F8_E8M0 does not round: an F64 value that is not exactly one of its values is redone.

Every error names the entry: ``data[17]: malformed F32 text '1..2'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError, FormatError
from .._core.floats import MAX_DIGITS
from .._core.scalar import parse_value

__all__ = ["parse_list", "parse_quoted"]

# Overflow, underflow and invalid casts are expected and settled explicitly here, so
# a caller's np.seterr(all="raise") must not turn them into FloatingPointError.
_QUIET = np.errstate(all="ignore")

_SEPARATOR = b'","'


def _allowed(alphabet: bytes) -> bytes:
    """The bytes an entry list may hold: the entry characters, quotes and commas.

    ``inner.translate(None, allowed)`` deletes them all, so the text is over the alphabet
    exactly when nothing is left (and nothing large is written to find out).
    """
    return alphabet + b'",'


_FLOAT_ALLOWED = _allowed(b"0123456789.eE+-nNaAiIfF")
_INT_ALLOWED = _allowed(b"0123456789+-")
_BOOL_BYTES = {b"true": True, b"false": False, b"1": True, b"0": False}
_INT64_MAX = np.iinfo(np.int64).max
_UINT64_MAX = np.iinfo(np.uint64).max


@_QUIET
def parse_list(dtype: DType, data: list[Any]) -> np.ndarray:
    """A fresh flat array of ``dtype`` from a list of scalar texts.

    Raises FormatError / RangeError / LimitError naming the first bad entry
    (``data[i]: ...``); a non-str entry is FormatError.
    """
    if not data:
        return np.empty(0, dtype=dtype.numpy)
    try:
        inner = '","'.join(data)
    except TypeError:  # some entry is not a str: the per-entry path names it
        return _parse_each(dtype, data)
    if inner.isascii():
        result = parse_quoted(dtype, inner.encode("ascii"), len(data))
        if result is not None:
            return result
    return _parse_each(dtype, data)


@_QUIET
def parse_quoted(dtype: DType, inner: bytes, count: int) -> np.ndarray | None:
    """A fresh flat array of ``dtype`` from ``t1","t2",...","tn``, or None.

    None means the bytes are not exactly ``count`` entries over the grammar's alphabet
    (the caller then goes entry by entry, which names the bad one). Well-formed entries
    whose values do not fit raise the scalar parser's error, with the entry's index.
    """
    if count == 0:
        return np.empty(0, dtype=dtype.numpy) if not inner else None
    if dtype is DType.BOOL:
        return _parse_bools(inner, count)
    if inner.translate(None, _FLOAT_ALLOWED if dtype.is_float else _INT_ALLOWED):
        return None  # a character outside the grammar's alphabet
    if dtype.is_float:
        target: type = np.float64
    elif dtype is DType.U64 and b"-" not in inner and b"+" not in inner:
        target = np.uint64  # PyOS_strtoul takes no sign; every U64 value fits
    else:
        target = np.int64
    try:
        # The sentinel makes the last real entry end at a separator like all the others.
        values: np.ndarray = np.fromstring(inner + b'","0', dtype=target, sep='","')
    except Exception:  # "could not be read to its end": some entry is malformed
        return None
    if values.size != count + 1:
        return None
    values = values[:count]
    # PyOS_strtol reads a lone sign as 0 (it consumed a character, so NumPy counts it as
    # a number): only entries read as 0 can be one.
    if not dtype.is_float and not np.all(values) and _has_lone_sign(inner):
        return None
    tokens = _Tokens(inner, count)
    redo = (
        tokens.longer_than(MAX_DIGITS)
        if _may_be_longer(inner, MAX_DIGITS)
        else np.zeros(count, bool)
    )
    if dtype.is_float:
        result = _narrow(dtype, values, redo, tokens)
    else:
        result = _fit_ints(dtype, values, redo)
    for index in np.flatnonzero(redo).tolist():
        result[index] = _exact(dtype, tokens.text(index), index)
    return result if result.base is None else result.copy()


def _may_be_longer(inner: bytes, limit: int) -> bool:
    """False when no entry can be longer than ``limit``: cheaper than finding them all.

    An entry holds no quote, and one longer than ``limit`` covers a whole aligned block
    of ``(limit + 2) // 2`` bytes, so it suffices that every block holds a quote.
    """
    block = (limit + 2) // 2
    find = inner.find
    return any(
        find(b'"', start, start + block) < 0 for start in range(0, len(inner) - block + 1, block)
    )


def _has_lone_sign(inner: bytes) -> bool:
    raw = np.frombuffer(inner + b'"', dtype=np.uint8)
    after = raw[np.flatnonzero((raw == ord("+")) | (raw == ord("-"))) + 1]
    return not np.all((after >= ord("0")) & (after <= ord("9")))


def _parse_each(dtype: DType, data: list[Any]) -> np.ndarray:
    values = []
    for index, text in enumerate(data):
        if not isinstance(text, str):
            raise FormatError(f"data[{index}]: expected a string, found {type(text).__name__}")
        values.append(_exact(dtype, text, index))
    if dtype.is_float:
        return np.array(values, dtype=np.float64).astype(dtype.numpy)
    return np.array(values, dtype=dtype.numpy)


def _exact(dtype: DType, text: str, index: int) -> Any:
    try:
        return parse_value(dtype, text)
    except DataError as error:
        raise type(error)(f"data[{index}]: {error}") from None


def _parse_bools(inner: bytes, count: int) -> np.ndarray | None:
    tokens = inner.split(_SEPARATOR)
    if len(tokens) != count:
        return None
    found = list(map(_BOOL_BYTES.get, map(bytes.lower, tokens)))
    if None in found:
        return None
    return np.array(found, dtype=np.bool_)


class _Tokens:
    """Where each entry lies in ``inner``, computed only when some entry is needed.

    Only used after ``fromstring`` accepted the text, so every comma is the middle of a
    separator.
    """

    def __init__(self, inner: bytes, count: int) -> None:
        self._inner = inner
        self._count = count
        self._starts: np.ndarray | None = None
        self._ends: np.ndarray | None = None

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        if self._starts is None or self._ends is None:
            commas = np.flatnonzero(np.frombuffer(self._inner, dtype=np.uint8) == ord(","))
            self._starts = np.concatenate(([0], commas + 2))
            self._ends = np.concatenate((commas - 1, [len(self._inner)]))
        return self._starts, self._ends

    def longer_than(self, limit: int) -> np.ndarray:
        """A mask of the entries longer than ``limit`` characters (a fresh array)."""
        starts, ends = self._bounds()
        longer: np.ndarray = (ends - starts) > limit
        return longer

    def text(self, index: int) -> str:
        starts, ends = self._bounds()
        return self._inner[int(starts[index]) : int(ends[index])].decode("ascii")

    def first_chars(self, indices: np.ndarray) -> np.ndarray:
        """The first character after an optional sign of each entry in ``indices``."""
        starts, _ = self._bounds()
        raw = np.frombuffer(self._inner, dtype=np.uint8)
        first = raw[starts[indices]]
        signed = (first == ord("+")) | (first == ord("-"))
        chars: np.ndarray = np.where(signed, raw[starts[indices] + signed], first)
        return chars


def _fit_ints(dtype: DType, values: np.ndarray, redo: np.ndarray) -> np.ndarray:
    # A saturated result means overflow; redo those exactly (an in-range extreme too).
    redo |= values == (_UINT64_MAX if values.dtype == np.uint64 else _INT64_MAX)
    if dtype is DType.U64:
        if values.dtype == np.int64:
            redo |= values < 0
        return values.astype(np.uint64)
    if dtype is not DType.I64:
        info = np.iinfo(dtype.numpy)
        redo |= (values < info.min) | (values > info.max)
    return values.astype(dtype.numpy)


def _narrow(dtype: DType, values: np.ndarray, redo: np.ndarray, tokens: _Tokens) -> np.ndarray:
    nan = np.isnan(values)
    values[nan] = np.nan  # one NaN (positive, quiet), as Scalar values give
    infinite = np.flatnonzero(np.isinf(values))
    if infinite.size:
        # "inf" text is fine; a number that overflowed F64 ("1e999") is RangeError.
        first = tokens.first_chars(infinite)
        redo[infinite[(first != ord("i")) & (first != ord("I"))]] = True
    if dtype is DType.F64:
        return values
    if dtype is DType.F32:
        return _narrow_f32(values, redo)
    if dtype is DType.F8_E8M0:
        return _narrow_e8m0(values, nan, redo)
    return _narrow_small(dtype, values, nan, redo)


def _narrow_e8m0(values: np.ndarray, nan: np.ndarray, redo: np.ndarray) -> np.ndarray:
    """F8_E8M0 takes the F64 value only when it is exactly 2**k, -127 <= k <= 127 (or NaN);
    anything else (zero, infinities, other values) is redone, which raises RangeError."""
    significand, exponent = np.frexp(values)
    exact = (significand == 0.5) & (exponent >= -126) & (exponent <= 128)
    redo |= ~exact & ~nan
    bits: np.ndarray = np.where(exact, exponent + 126, 255).astype(np.uint8)
    return bits.view(DType.F8_E8M0.numpy)


def _narrow_f32(values: np.ndarray, redo: np.ndarray) -> np.ndarray:
    # Overflow and underflow are expected here (settled below), whatever np.seterr says.
    with np.errstate(over="ignore", under="ignore"):
        result = values.astype(np.float32)
    redo |= np.isinf(result) & np.isfinite(values)  # overflow, or the tie at the top
    # In F32's normal range an F64 value is an F32 midpoint exactly when the 29
    # fraction bits F32 drops are 1000...0 (the last value of the binade included).
    bits = values.view(np.uint64)
    redo |= (bits & _F32_DROPPED) == _F32_HALF
    # Below it F32 keeps fewer bits: compare with the neighbour on the value's side.
    magnitude = np.abs(values)
    tiny = np.flatnonzero((magnitude < _F32_SMALLEST_NORMAL) & (magnitude > 0))
    if tiny.size:
        wide = result[tiny].astype(np.float64)
        off = values[tiny] - wide  # exact: both lie on F64's grid far above its last bit
        toward = np.where(off > 0, np.float32(np.inf), np.float32(-np.inf))
        gap = np.nextafter(result[tiny], toward).astype(np.float64) - wide
        redo[tiny[(off != 0) & (2 * off == gap)]] = True
    return result


_F32_DROPPED = np.uint64((1 << 29) - 1)
_F32_HALF = np.uint64(1 << 28)
_F32_SMALLEST_NORMAL = 2.0**-126


class _SmallTable:
    """Every finite non-negative value of an 8- or 16-bit float, with the rounding edges.

    ``edges[i]`` is the midpoint between values ``i`` and ``i + 1``; the last edge is
    the overflow point half a step above the largest value. A value rounds to ``i``
    when it lies in ``(edges[i - 1], edges[i])``; on an edge it is a tie.
    """

    def __init__(self, dtype: DType) -> None:
        bits_type = np.uint16 if dtype.itemsize == 2 else np.uint8
        self.bits_type = bits_type
        self.sign_bit = 1 << (8 * dtype.itemsize - 1)
        patterns = np.arange(self.sign_bit, dtype=bits_type)
        with np.errstate(invalid="ignore"):  # ml_dtypes warns when casting NaN patterns
            values = patterns.view(dtype.numpy).astype(np.float64)
        finite = np.isfinite(values)
        self.patterns = patterns[finite]
        ordered = values[finite]
        if np.any(np.diff(ordered) <= 0):
            raise AssertionError(f"{dtype} values are not ordered by bit pattern")
        top_step = ordered[-1] - ordered[-2]
        self.edges = np.concatenate(
            ((ordered[:-1] + ordered[1:]) / 2, [ordered[-1] + top_step / 2])
        )
        self.nan = np.array([np.nan]).astype(dtype.numpy).view(bits_type)[0]
        infinities = patterns[np.isinf(values)]
        self.inf = infinities[0] if infinities.size else None


_SMALL_TABLES: dict[DType, _SmallTable] = {}


def _narrow_small(
    dtype: DType, values: np.ndarray, nan: np.ndarray, redo: np.ndarray
) -> np.ndarray:
    table = _SMALL_TABLES.get(dtype)
    if table is None:
        table = _SMALL_TABLES[dtype] = _SmallTable(dtype)
    magnitude = np.abs(values)
    position = np.searchsorted(table.edges, magnitude, side="left")
    top = table.patterns.size - 1
    clipped = np.minimum(position, top)
    redo |= table.edges[clipped] == magnitude  # a tie: the decimal decides
    beyond = position > top  # past the overflow point, infinities included
    bits = table.patterns[clipped] | (np.signbit(values).astype(table.bits_type) * table.sign_bit)
    infinite = np.isinf(values)
    if table.inf is not None:
        signs = np.signbit(values[infinite]).astype(table.bits_type) * table.sign_bit
        bits[infinite] = table.inf | signs
        redo |= beyond & ~infinite & ~nan
    else:  # F8_E4M3 has no infinity: "inf" is RangeError like any overflow
        redo |= beyond & ~nan
    bits[nan] = table.nan
    result: np.ndarray = bits.view(dtype.numpy)
    return result
