"""Exact statistics over every element, computed piece by piece and merged exactly.

``Totals`` summarizes a run of consecutive elements: the count, zeros, the first NaN or
infinity, the extremes, and the exact partial sum of ``_summation`` (NaN and infinity
counts, the sum of the finite values as an integer in units of the dtype's smallest
subnormal). Totals of pieces, chunks and worker processes merge exactly in any grouping,
and the final mean is one correctly rounded division.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.scalar import Scalar
from .convert import cast, widen
from .partials import ExactSum, float_exact
from .summation import int_total, round_units

__all__ = ["Totals", "summary", "totals"]

_STEP = 1 << 20  # elements per step: the most ``float_exact`` takes at once


@dataclass(slots=True)
class Totals:
    """Exact statistics of a run of consecutive elements (see the module docstring).

    ``low`` / ``high`` are exact Python values (NaN ignored; between zeros ``low``
    prefers -0.0 and ``high`` 0.0); ``sum`` is the exact partial sum (NaN and
    infinities counted there); ``first`` is the flat index of the first NaN or infinity.
    """

    count: int = 0
    zeros: int = 0
    low: Any = None
    high: Any = None
    first: int | None = None
    sum: ExactSum = field(default_factory=ExactSum)

    def merge(self, later: Totals) -> Totals:
        """These totals followed by ``later``'s (elements that come after them)."""
        return Totals(
            count=self.count + later.count,
            zeros=self.zeros + later.zeros,
            low=_pick(self.low, later.low, low=True),
            high=_pick(self.high, later.high, low=False),
            first=self.first if self.first is not None else later.first,
            sum=self.sum.merge(later.sum),
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
    wide = values if dtype is DType.F64 else cast(widen(values, dtype), np.float64)
    exact = float_exact(values, wide, dtype)
    result = Totals(count=int(values.size), sum=exact)
    real = wide
    if exact.nan or exact.pos_inf or exact.neg_inf:
        result.first = int(np.argmax(~np.isfinite(wide)))
        if exact.nan:
            real = wide[~np.isnan(wide)]
    result.zeros = int(np.count_nonzero(real == 0))
    if real.size:
        result.low, result.high = _extremes(real, result.zeros > 0)
    return result


def _extremes(real: np.ndarray[Any, Any], zeros: bool) -> tuple[float, float]:
    low, high = float(real.min()), float(real.max())
    if zeros and (low == 0.0 or high == 0.0):
        signs = np.signbit(real[real == 0])
        if low == 0.0:
            low = -0.0 if signs.any() else 0.0
        if high == 0.0:
            high = -0.0 if signs.all() else 0.0
    return low, high


def _int_totals(values: np.ndarray[Any, Any], dtype: DType) -> Totals:
    result = Totals(count=int(values.size))
    if values.size == 0:
        return result
    if dtype is DType.BOOL:
        true = int(np.count_nonzero(values))
        result.sum.total, result.zeros = true, values.size - true
        result.low, result.high = values.size == true, true > 0
        return result
    result.zeros = int(np.count_nonzero(values == 0))
    result.low, result.high = int(values.min()), int(values.max())
    result.sum.total = int_total(values, dtype)
    return result


def summary(found: Totals, dtype: DType) -> dict[str, Any]:
    """The statistics people read: canonical ``min``/``max`` text, exact ``mean`` and counts.

    ``mean`` is the mean of every non-NaN element, correctly rounded to F64 (NaN with
    infinities of both signs, an infinity with one sign; None when there is no value).
    """
    exact = found.sum
    values = found.count - exact.nan
    mean: float | None
    if exact.pos_inf and exact.neg_inf:
        mean = math.nan
    elif exact.pos_inf or exact.neg_inf:
        mean = math.inf if exact.pos_inf else -math.inf
    elif values == 0:
        mean = None
    else:
        mean = round_units(exact.total, dtype, values, DType.F64)
    return {
        "min": None if found.low is None else str(Scalar._trusted(dtype, found.low)),
        "max": None if found.high is None else str(Scalar._trusted(dtype, found.high)),
        "mean": mean,
        "nan": exact.nan,
        "inf": exact.pos_inf + exact.neg_inf,
        "zeros": found.zeros,
        "first_nonfinite": found.first,
    }
