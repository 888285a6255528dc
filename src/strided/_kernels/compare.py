"""Exact element-wise comparison of two tensors' values, range by range, merged exactly.

Values are compared as the numbers they are: floats of any two dtypes through their
exact F64 values, integers as integers (never through a float that could round them).
NaN matches NaN, -0.0 matches 0.0, equal infinities match. With tolerances an element
matches when ``|a - b| <= atol + rtol * |b|`` holds for the exact values (``atol`` and
``rtol`` being F64 numbers): a float64 evaluation with a proven error bound decides
almost every element, error-free transformations (TwoSum, Dekker's product and
Shewchuk's expansion growth) decide the close calls exactly, and the rare element
whose magnitude is beyond their safe range is decided with ``fractions``. With
``ulp``, an element also matches when both values, rounded into the dtype with fewer
significand bits, are at most that many representable values apart.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from .._core.dtype import DType, finfo
from .._core.scalar import Scalar
from .convert import cast, round_to_float
from .summation import two_product, two_sum

__all__ = ["Tally", "Tolerance", "compare", "precision"]


@functools.cache
def precision(dtype: DType) -> int:
    """Significand bits of a float dtype, the implicit bit included (F32: 24)."""
    return int(finfo(dtype).nmant) + 1


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_MARGIN = 2.0**-50  # eight units of roundoff: covers the filter's own rounding
_TINY = 2.0**-1069  # covers underflow in the filter
_SAFE_HIGH = 2.0**995  # Dekker's split and TwoSum cannot overflow below this
_SAFE_PRODUCT = 2.0**-900  # a product this large has an exactly representable error
_EXACT_INT = 2**53


@dataclass(frozen=True, slots=True)
class Tolerance:
    """``atol`` and ``rtol`` (finite F64 numbers >= 0) and ``ulp`` (None or an int >= 0)."""

    atol: float = 0.0
    rtol: float = 0.0
    ulp: int | None = None


@dataclass(slots=True)
class Tally:
    """What a comparison of consecutive elements found; ``merge`` joins consecutive runs.

    ``identical``: every stored bit was equal. ``count``: mismatched elements; ``first``
    the flat index of the first one and ``first_a`` / ``first_b`` its two values as
    canonical text. ``max_abs``: the largest ``|a - b|`` over pairs without NaN,
    correctly rounded to F64. ``max_ulp``: the largest distance in representable values
    over pairs without NaN, for two tensors of one float dtype (else None).
    """

    identical: bool = True
    count: int = 0
    first: int | None = None
    first_a: str | None = None
    first_b: str | None = None
    max_abs: float = 0.0
    max_ulp: int | None = None

    def merge(self, later: Tally) -> Tally:
        """This run followed by ``later``."""
        ulps = [value for value in (self.max_ulp, later.max_ulp) if value is not None]
        keep = self if self.first is not None or later.first is None else later
        return Tally(
            identical=self.identical and later.identical,
            count=self.count + later.count,
            first=keep.first,
            first_a=keep.first_a,
            first_b=keep.first_b,
            max_abs=max(self.max_abs, later.max_abs),
            max_ulp=max(ulps) if ulps else None,
        )


def compare(
    a: np.ndarray[Any, Any],
    a_dtype: DType,
    b: np.ndarray[Any, Any],
    b_dtype: DType,
    tolerance: Tolerance,
    offset: int,
    same_dtype: bool,
) -> Tally:
    """Compare 1-D ranges ``a`` and ``b`` (the elements from flat index ``offset`` on).

    Both are floats or both integers/BOOL (the caller checks the kinds); ``same_dtype``
    asks for ``max_ulp`` (two tensors of one float dtype). Bits are not compared here.
    """
    if a_dtype.is_float:
        wide_a, wide_b = cast(a, np.float64), cast(b, np.float64)
    else:
        exact_a, exact_b = _exact_floats(a), _exact_floats(b)
        if exact_a is None or exact_b is None:
            return _compare_big_ints(a.tolist(), b.tolist(), tolerance, offset)
        wide_a, wide_b = exact_a, exact_b
    with np.errstate(all="ignore"):
        distance = np.abs(wide_a - wide_b)
        real: Any = None  # pairs without NaN: None when that is every pair
        odd = np.isnan(distance)  # a NaN on either side, or two infinities of one sign
        if odd.any():
            nan_a, nan_b = np.isnan(wide_a), np.isnan(wide_b)
            real = ~(nan_a | nan_b)
            distance[odd & real] = 0.0
            match = (distance == 0) & real | (nan_a & nan_b)
        else:
            match = distance == 0  # a - b is never 0 for two different floats
        if tolerance.atol or tolerance.rtol:
            _update(match, ~match & np.isfinite(wide_a) & np.isfinite(wide_b), wide_a, wide_b,
                    lambda x, y: _within(x, y, tolerance.atol, tolerance.rtol))  # fmt: skip
        if tolerance.ulp is not None and a_dtype.is_float:
            narrow = min(a_dtype, b_dtype, key=precision)
            unmatched = ~match if real is None else ~match & real
            _update(match, unmatched, wide_a, wide_b,
                    lambda x, y: _ulps(round_to_float(x, narrow), round_to_float(y, narrow),
                                       narrow.is_signed)
                    <= tolerance.ulp)  # fmt: skip
    tally = Tally(identical=False)
    ulps = same_dtype and a_dtype.is_float
    if real is None:
        tally.max_abs = float(distance.max()) if distance.size else 0.0
        tally.max_ulp = _max_ulp(a, b, a_dtype.is_signed) if ulps else None
    else:
        tally.max_abs = float(distance[real].max()) if real.any() else 0.0
        tally.max_ulp = _max_ulp(a[real], b[real], a_dtype.is_signed) if ulps else None
    tally.count = int(match.size - np.count_nonzero(match))
    if tally.count:
        index = int(np.argmax(~match))
        tally.first = offset + index
        tally.first_a = _text(a, a_dtype, index)
        tally.first_b = _text(b, b_dtype, index)
    return tally


def _update(match: Any, where: Any, a: Any, b: Any, test: Any) -> None:
    index = np.flatnonzero(where)
    if index.size:
        match[index] = test(a[index], b[index])


def _text(values: np.ndarray[Any, Any], dtype: DType, index: int) -> str:
    value = values[index]
    if dtype.is_float:
        return str(Scalar._trusted(dtype, float(cast(value.reshape(1), np.float64)[0])))
    if dtype is DType.BOOL:
        return "true" if value else "false"
    return str(int(value))


def _exact_floats(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Integers as exact float64 values, or None when one is beyond 2**53 in magnitude."""
    big = values.size and values.dtype.itemsize == 8
    if big and (int(values.max()) > _EXACT_INT or int(values.min()) < -_EXACT_INT):
        return None
    return values.astype(np.float64)


def _compare_big_ints(a: list[int], b: list[int], tolerance: Tolerance, offset: int) -> Tally:
    """Integers beyond 2**53: compared one by one with Python's exact integers."""
    atol, rtol = Fraction(tolerance.atol), Fraction(tolerance.rtol)
    tally = Tally(identical=False)
    largest = 0
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        distance = abs(int(x) - int(y))
        largest = max(largest, distance)
        if distance and distance > atol + rtol * abs(int(y)):
            tally.count += 1
            if tally.first is None:
                tally.first, tally.first_a, tally.first_b = offset + index, str(x), str(y)
    tally.max_abs = float(largest)
    return tally


def _ordinals(values: np.ndarray[Any, Any], signed: bool) -> np.ndarray[Any, Any]:
    """Floats of at most 32 bits as int64 ranks in value order (both zeros rank 0).

    An F8_E4M3 NaN made by rounding past the range ranks one step beyond the largest
    finite value, where an infinity would be. Formats without a sign bit rank as
    their bits.
    """
    bits: np.ndarray[Any, Any] = values.view(_UINT[values.dtype.itemsize]).astype(np.int64)
    if not signed:
        return bits
    width = 8 * values.dtype.itemsize - 1
    sign = bits >> width
    magnitude = bits & ((1 << width) - 1)
    ranks: np.ndarray[Any, Any] = (magnitude ^ -sign) + sign  # negated where the sign is set
    return ranks


def _ulps(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], signed: bool) -> np.ndarray[Any, Any]:
    """Distances in representable values between float arrays of one dtype."""
    if a.dtype.itemsize <= 4:
        steps: np.ndarray[Any, Any] = np.abs(_ordinals(a, signed) - _ordinals(b, signed))
        return steps
    # F64: ranks span 2**64, so distances are formed from magnitudes in uint64.
    sign = np.uint64(1 << 63)
    bits_a, bits_b = a.view(np.uint64), b.view(np.uint64)
    mag_a, mag_b = bits_a & ~sign, bits_b & ~sign
    same_sign = (bits_a & sign) == (bits_b & sign)
    apart = np.where(mag_a > mag_b, mag_a - mag_b, mag_b - mag_a)
    return np.where(same_sign, apart, mag_a + mag_b)


def _max_ulp(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], signed: bool) -> int:
    if a.size == 0:
        return 0
    if a.dtype.itemsize <= 4:
        steps = _ordinals(a, signed) - _ordinals(b, signed)
        return max(int(steps.max()), -int(steps.min()))
    return int(_ulps(a, b, signed).max())


def _within(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], atol: float, rtol: float) -> Any:
    """``|a - b| <= atol + rtol * |b|`` for finite float64 arrays, exactly."""
    distance = np.abs(a - b)
    bound = atol + rtol * np.abs(b)
    margin = (distance + bound) * _MARGIN + _TINY
    result = distance + margin < bound
    unsure = ~result & ~(distance - margin > bound)
    index = np.flatnonzero(unsure)
    if index.size:
        result[index] = _within_exact(a[index], b[index], atol, rtol)
    return result


def _within_exact(
    a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], atol: float, rtol: float
) -> Any:
    """The close calls: error-free transformations where safe, fractions elsewhere."""
    magnitude = np.abs(b)
    product = rtol * magnitude
    safe = (np.abs(a) <= _SAFE_HIGH) & (magnitude <= _SAFE_HIGH) & (product <= _SAFE_HIGH)
    safe &= (rtol <= _SAFE_HIGH) & (atol <= _SAFE_HIGH)
    safe &= (rtol == 0.0) | (magnitude == 0.0) | (product >= _SAFE_PRODUCT)
    result = np.zeros(a.shape, dtype=bool)
    index = np.flatnonzero(safe)
    if index.size:
        x, y = a[index], b[index]
        high, low = two_sum(x, -y)
        sign = np.where(high < 0, -1.0, 1.0)
        p_high, p_low = two_product(np.full(x.shape, rtol), np.abs(y))
        terms = [sign * high, sign * low, np.full(x.shape, -atol), -p_high, -p_low]
        result[index] = _expansion_sign(terms) <= 0
    exact_atol, exact_rtol = Fraction(atol), Fraction(rtol)
    for i in np.flatnonzero(~safe).tolist():
        left, right = Fraction(float(a[i])), Fraction(float(b[i]))
        result[i] = abs(left - right) <= exact_atol + exact_rtol * abs(right)
    return result


def _expansion_sign(terms: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """The exact sign of the sum of float64 arrays (element-wise), via expansion growth.

    Each term is added to a nonoverlapping expansion with TwoSum; the sign of the
    expansion's largest nonzero component is the sign of the exact sum.
    """
    expansion = [terms[0]]
    for term in terms[1:]:
        carry = term
        grown = []
        for component in expansion:
            carry, error = two_sum(carry, component)
            grown.append(error)
        grown.append(carry)
        expansion = grown
    sign = np.zeros(terms[0].shape)
    for component in reversed(expansion):
        sign = np.where(sign == 0, np.sign(component), sign)
    return sign
