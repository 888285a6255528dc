"""Exact partial sums: a run of values as counts of NaN and infinities plus the exact sum
of its finite values (a Python int in units of ``2**-unit_bits(dtype)``).

Partials of pieces, chunks and processes merge exactly in any grouping and are rounded
once, so sums, means, exact statistics and Dask partials agree however the work is
split. The units, bins and rounding are ``summation``'s; arrays in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .._core.dtype import DType
from .convert import cast, widen
from .summation import NARROW_BINS, f64_units, int_total, round_units

__all__ = ["ExactSum", "combine", "exact_partial", "float_exact"]

_STEP = 1 << 20  # elements per exact-partial step: 2**20 terms of a bin sum exactly in F64


@dataclass(slots=True)
class ExactSum:
    """The exact sum of a run of values: NaN and infinity counts, and ``total``, the exact
    sum of the finite values in units of ``2**-unit_bits(dtype)``. Partials merge exactly."""

    total: int = 0
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0

    def merge(self, other: ExactSum) -> ExactSum:
        """The partial of both runs (a new object; addition is exact, so order is free)."""
        return ExactSum(
            self.total + other.total,
            self.nan + other.nan,
            self.pos_inf + other.pos_inf,
            self.neg_inf + other.neg_inf,
        )

    def rounded(self, dtype: DType, count: int = 1) -> float:
        """The sum (divided by ``count``) rounded once into float ``dtype``: NaN for a NaN
        or infinities of both signs, else an infinity's sign; a finite value past the
        largest one gives infinity."""
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf or self.neg_inf:
            return math.inf if self.pos_inf else -math.inf
        return round_units(self.total, dtype, count)


def combine(parts: Iterable[ExactSum]) -> ExactSum:
    """The partial of consecutive (or any) runs: exact, so any grouping gives the same."""
    result = ExactSum()
    for part in parts:
        result = result.merge(part)
    return result


def exact_partial(values: np.ndarray, dtype: DType) -> ExactSum:
    """The exact partial of a 1-D array of ``dtype`` (any float or integer but BOOL)."""
    result = ExactSum()
    for start in range(0, values.size, _STEP):
        step = values[start : start + _STEP]
        if dtype.is_float:
            wide = step if dtype is DType.F64 else cast(widen(step, dtype), np.float64)
            result = result.merge(float_exact(step, wide, dtype))
        else:
            result.total += int_total(step, dtype)
    return result


def float_exact(values: np.ndarray, wide: np.ndarray, dtype: DType) -> ExactSum:
    """The exact partial of at most 2**20 ``values`` of float ``dtype``, given as ``wide``
    too (the same values as float64, which the caller shares)."""
    result = ExactSum()
    if not np.isfinite(wide).all():
        nan, inf = np.isnan(wide), np.isinf(wide)
        result.nan = int(np.count_nonzero(nan))
        result.pos_inf = int(np.count_nonzero(inf & (wide > 0)))
        result.neg_inf = int(np.count_nonzero(inf)) - result.pos_inf
        finite = ~(nan | inf)
        values, wide = values[finite], wide[finite]
    fmt = NARROW_BINS.get(dtype)
    if fmt is None:
        result.total = f64_units(wide)
        return result
    if fmt.nbits == 32:  # sign and the exponent's top five bits: bins eight exponents wide
        bins = (values.view(fmt.uint) >> np.uint32(26)) & np.uint32(31)
    else:
        bins = np.take(fmt.table, values.view(fmt.uint))
    sums = np.bincount(bins, weights=wide, minlength=fmt.bins)
    scale = 2.0**fmt.unit_bits  # every bin's sum is a whole number of units, exactly
    result.total = sum(int(value * scale) for value in sums[sums != 0].tolist())
    return result
