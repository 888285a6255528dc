"""Exact statistics over every element, computed piece by piece and merged exactly.

``Totals`` summarizes a run of consecutive elements: counts of NaN, infinities and
zeros, the first NaN or infinity, the extremes, and the exact sum of the values. Sums
are kept as Python integers in units of the dtype's smallest subnormal (``2**-149``
for F32, ``2**-1074`` for F64; 1 for integers), so partial results of pieces, chunks
and worker processes add up exactly in any grouping, and the final mean is one
correctly rounded division.

Float sums are exact by construction. F32, F16, BF16 and FP8 values are grouped by
their exponent into bins narrow enough that any 2**20 values of one bin sum exactly in
float64 (the bin's values span ``32 - mantissa bits`` exponents: with the significand
and the count, at most 53 bits), so NumPy's ``bincount`` adds each bin exactly and the
bins are combined as integers. F64 values, whose significands already fill float64,
are first split exactly into two halves of at most 27 significant bits (Veltkamp's
split), which are binned the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._core.dtype import FLOAT_LAYOUTS, DType
from .._core.scalar import Scalar
from .convert import cast, widen

__all__ = ["Totals", "summary", "totals"]

_STEP = 1 << 20  # elements per exact-sum step: 2**20 terms below 2**31 sum exactly in F64


class _Format:
    """Bit layout of a float dtype: widths, the sum unit and the exponent bins."""

    __slots__ = ("bins", "ebits", "mbits", "nbits", "table", "uint", "unit_bits")

    def __init__(self, nbits: int, ebits: int, mbits: int) -> None:
        self.nbits = nbits
        self.ebits = ebits
        self.mbits = mbits
        self.uint = np.dtype(f"<u{nbits // 8}")
        bias = (1 << (ebits - 1)) - 1
        self.unit_bits = bias + mbits - 1  # values are integers in units of 2**-unit_bits
        # Narrower floats: exponents in bins this wide sum 2**20 values exactly in F64
        # (a bin's values span width + mbits + 1 bits; 20 more for the count). F32 bins
        # are eight exponents wide (a shift finds them), the others come from a table.
        span = 8 if nbits == 32 else 32 - mbits
        top = (1 << ebits) - 1
        self.bins = top // span + 1
        self.table = np.zeros(0, dtype=np.uint8)
        if nbits <= 16:
            patterns = np.arange(1 << nbits, dtype=np.uint32)
            table = (((patterns >> mbits) & top) // span).astype(np.uint8)
            table.flags.writeable = False
            self.table = table


_FORMATS = {
    dtype: _Format(layout.bits, layout.exponent_bits, layout.mantissa_bits)
    for dtype, layout in FLOAT_LAYOUTS.items()
}


@dataclass(slots=True)
class Totals:
    """Exact statistics of a run of consecutive elements (see the module docstring).

    ``low`` / ``high`` are exact Python values (NaN ignored; between zeros ``low``
    prefers -0.0 and ``high`` 0.0); ``total`` is the exact sum of the finite values in
    the dtype's units; ``first`` is the flat index of the first NaN or infinity.
    """

    count: int = 0
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0
    zeros: int = 0
    low: Any = None
    high: Any = None
    total: int = 0
    first: int | None = None

    def merge(self, later: Totals) -> Totals:
        """These totals followed by ``later``'s (elements that come after them)."""
        return Totals(
            count=self.count + later.count,
            nan=self.nan + later.nan,
            pos_inf=self.pos_inf + later.pos_inf,
            neg_inf=self.neg_inf + later.neg_inf,
            zeros=self.zeros + later.zeros,
            low=_pick(self.low, later.low, low=True),
            high=_pick(self.high, later.high, low=False),
            total=self.total + later.total,
            first=self.first if self.first is not None else later.first,
        )


def _key(value: Any, low: bool) -> tuple[Any, int]:
    # Orders -0.0 below 0.0, so the low extreme prefers -0.0 and the high one 0.0.
    if isinstance(value, float) and value == 0.0:
        return value, 0 if math.copysign(1.0, value) < 0 else 1
    return value, 0


def _pick(a: Any, b: Any, low: bool) -> Any:
    if a is None or b is None:
        return a if b is None else b
    if low:
        return a if _key(a, low) <= _key(b, low) else b
    return a if _key(a, low) >= _key(b, low) else b


def totals(pieces: Iterable[np.ndarray[Any, Any]], dtype: DType, offset: int = 0) -> Totals:
    """Totals of consecutive 1-D ``pieces`` of ``dtype`` whose first element is at ``offset``."""
    result = Totals()
    position = offset
    for piece in pieces:
        for start in range(0, piece.size, _STEP):
            step = piece[start : start + _STEP]
            part = _float_totals(step, dtype) if dtype.is_float else _int_totals(step, dtype)
            if part.first is not None:
                part.first += position + start
            result = result.merge(part)
        position += piece.size
    return result


def _float_totals(values: np.ndarray[Any, Any], dtype: DType) -> Totals:
    if dtype not in _FORMATS or dtype is DType.F64:
        # A float dtype without a table here is summed through its exact F64 values.
        return _f64_totals(cast(values, np.float64))
    fmt = _FORMATS[dtype]
    wide = cast(widen(values, dtype), np.float64)
    bins = _bins(values, fmt)
    result = Totals(count=int(values.size))
    real = wide
    if not np.isfinite(wide).all():
        nan, inf = np.isnan(wide), np.isinf(wide)
        _count_special(result, nan, inf, wide > 0)
        real = wide[~nan]
        finite = ~(nan | inf)
        wide, bins = wide[finite], bins[finite]
    result.zeros = int(np.count_nonzero(real == 0))
    sums = np.bincount(bins, weights=wide, minlength=fmt.bins)
    scale = 2.0**fmt.unit_bits  # every bin's sum is a whole number of units, exactly
    result.total = sum(int(value * scale) for value in sums[sums != 0].tolist())
    if real.size:
        result.low, result.high = _extremes(real, result.zeros > 0)
    return result


def _count_special(result: Totals, nan: Any, inf: Any, positive: Any) -> None:
    result.nan = int(np.count_nonzero(nan))
    result.pos_inf = int(np.count_nonzero(inf & positive))
    result.neg_inf = int(np.count_nonzero(inf)) - result.pos_inf
    if result.nan or result.pos_inf or result.neg_inf:
        result.first = int(np.argmax(nan | inf))


def _bins(values: np.ndarray[Any, Any], fmt: _Format) -> np.ndarray[Any, Any]:
    """Each element's exponent bin (meaningless for NaN and infinities)."""
    bits = values.view(fmt.uint)
    if fmt.nbits == 32:
        # Sign and the exponent's top five bits: bins eight exponents wide.
        return (bits >> np.uint32(26)) & np.uint32(31)
    return np.take(fmt.table, bits)


def _f64_totals(values: np.ndarray[Any, Any]) -> Totals:
    result = Totals(count=int(values.size))
    finite = values
    if not np.isfinite(values).all():
        nan, inf = np.isnan(values), np.isinf(values)
        _count_special(result, nan, inf, values > 0)
        finite = values[~(nan | inf)]
    result.zeros = int(np.count_nonzero(finite == 0))
    magnitude = np.abs(finite)
    # Veltkamp's split is exact away from the ends of the range; the rare values out
    # there are summed from their bits instead.
    usual = (magnitude < _SPLIT_HIGH) & ((magnitude >= _SPLIT_LOW) | (magnitude == 0))
    if usual.all():
        result.total = _split_sum(finite)
    else:
        result.total = _split_sum(finite[usual])
        rest = finite[~usual]
        result.total += _exact_sum(rest.view(np.uint64) & np.uint64((1 << 63) - 1), rest < 0)
    real = values[~np.isnan(values)] if result.nan else values
    if real.size:
        result.low, result.high = _extremes(real, result.zeros > 0)
    return result


_SPLIT_HIGH = 2.0**995  # (2**27 + 1) * x cannot overflow below this
_SPLIT_LOW = 2.0**-900  # halves of values above this are normal floats
_SPLIT = 134217729.0  # 2**27 + 1
_F64_SPAN = 6  # exponents per bin: 6 + 27 significant bits + 20 for the count <= 53
# Bin of each biased F64 exponent.
_F64_BINS = (np.arange(2048) // _F64_SPAN).astype(np.intp)


def _split_sum(values: np.ndarray[Any, Any]) -> int:
    """The exact sum of finite F64 values (within the split's range), in units of 2**-1074.

    Each value is split into two halves of at most 27 significant bits, which are
    summed exactly by exponent bins like the narrower floats.
    """
    if values.size == 0:
        return 0
    scaled = values * _SPLIT
    high = scaled - (scaled - values)
    low = values - high
    total = 0
    for half in (high, low):
        exponent = (half.view(np.uint64) >> np.uint64(52)).astype(np.intp) & 0x7FF
        sums = np.bincount(np.take(_F64_BINS, exponent), weights=half)
        for value in sums[sums != 0].tolist():
            numerator, denominator = value.as_integer_ratio()
            total += numerator * ((1 << 1074) // denominator)
    return total


def _extremes(real: np.ndarray[Any, Any], zeros: bool) -> tuple[float, float]:
    low, high = float(real.min()), float(real.max())
    if zeros and (low == 0.0 or high == 0.0):
        signs = np.signbit(real[real == 0])
        if low == 0.0:
            low = -0.0 if signs.any() else 0.0
        if high == 0.0:
            high = -0.0 if signs.all() else 0.0
    return low, high


def _exact_sum(magnitude: np.ndarray[Any, Any], negative: np.ndarray[Any, Any]) -> int:
    """The exact sum of finite F64 values given by magnitude bits and signs, in units.

    Integer significands shifted within 10-exponent bins (below 2**62), summed in two
    31-bit halves: slower than the split, but exact across the whole range.
    """
    if magnitude.size == 0:
        return 0
    width = 10
    wide = magnitude.astype(np.int64)
    exponent = wide >> 52
    significand = (wide & ((1 << 52) - 1)) | ((exponent != 0).astype(np.int64) << 52)
    position = np.maximum(exponent, 1) - 1  # value = significand * 2**position units
    bins = position // width
    shifted = significand << (position % width)
    length = int(bins.max()) + 1
    low = _bin_total(shifted & ((1 << 31) - 1), negative, bins, length, width)
    high = _bin_total(shifted >> 31, negative, bins, length, width)
    return (high << 31) + low


def _bin_total(
    parts: np.ndarray[Any, Any], negative: np.ndarray[Any, Any], bins: np.ndarray[Any, Any],
    length: int, width: int,
) -> int:  # fmt: skip
    weights = parts.astype(np.float64)
    np.negative(weights, out=weights, where=negative)
    sums = np.bincount(bins, weights=weights, minlength=length)
    total = 0
    for index in np.flatnonzero(sums).tolist():
        total += int(sums[index]) << (index * width)
    return total


def _int_totals(values: np.ndarray[Any, Any], dtype: DType) -> Totals:
    result = Totals(count=int(values.size))
    if values.size == 0:
        return result
    if dtype is DType.BOOL:
        true = int(np.count_nonzero(values))
        result.total, result.zeros = true, values.size - true
        result.low, result.high = values.size == true, true > 0
        return result
    result.zeros = int(np.count_nonzero(values == 0))
    result.low, result.high = int(values.min()), int(values.max())
    if dtype.itemsize < 8:
        result.total = int(values.astype(np.int64).sum())
    else:  # halves of 32 bits: at most 2**20 of them sum below 2**53 in 64-bit lanes
        unsigned = values.view(np.uint64)
        low = int((unsigned & np.uint64(0xFFFFFFFF)).sum())
        high = int((values >> 32).sum())
        result.total = (high << 32) + low
    return result


def summary(found: Totals, dtype: DType) -> dict[str, Any]:
    """The statistics people read: canonical ``min``/``max`` text, exact ``mean`` and counts.

    ``mean`` is the mean of every non-NaN element, correctly rounded to F64 (NaN with
    infinities of both signs, an infinity with one sign; None when there is no value).
    """
    values = found.count - found.nan
    mean: float | None
    if found.pos_inf and found.neg_inf:
        mean = math.nan
    elif found.pos_inf or found.neg_inf:
        mean = math.inf if found.pos_inf else -math.inf
    elif values == 0:
        mean = None
    else:
        shift = _FORMATS.get(dtype, _FORMATS[DType.F64]).unit_bits if dtype.is_float else 0
        mean = found.total / (values << shift)  # int / int: correctly rounded
    return {
        "min": None if found.low is None else str(Scalar._trusted(dtype, found.low)),
        "max": None if found.high is None else str(Scalar._trusted(dtype, found.high)),
        "mean": mean,
        "nan": found.nan,
        "inf": found.pos_inf + found.neg_inf,
        "zeros": found.zeros,
        "first_nonfinite": found.first,
    }
