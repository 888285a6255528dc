"""Exact means: the exact sum divided by the count, rounded once (or within one ulp).

The rows to average are the tensor's elements with the reduced axes moved last. Each
row's mean is settled in one of three ways:

* integer and BOOL rows: summed exactly in 64-bit lanes (or, past 2**53, as Python ints);
  an exact sum and an exact count divide with one correctly rounded F64 division;
* F16/BF16/F32 rows: summed in F64 with a proven error bound; the mean is accepted when
  its whole error interval rounds to one value or two neighbours of the dtype (so it is
  within one ulp of the exact mean);
* everything else (every F64 row, and the rare uncertified narrow row): the exact sum as
  an integer in units of the dtype's smallest subnormal (``_exact_stats``), divided as a
  ``Fraction`` and rounded once.

No sum overflows on the way: the mean of ``[F16 max, F16 max]`` is F16 max. A row with
a NaN, or infinities of both signs, has mean NaN; one infinity sign gives that infinity;
an empty row gives NaN (without NumPy's warning).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ._convert import cast, round_to_float
from ._dtype import DType
from ._exact_stats import _FORMATS, totals
from ._floats import round_exact
from ._fsum import _gamma, _ordinals
from ._reduce import _int_total

__all__ = ["mean_of"]

_U = 2.0**-53
_EXACT_F64 = 2**53  # integers up to this size are exact float64 values
_EXACT_TERMS = 1 << 31  # a 64-bit accumulator of values below 2**32 is exact this far


def mean_of(array: np.ndarray, dtype: DType, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Means of ``array`` (of ``dtype``) over ``axes``, as an array of the result dtype
    (``dtype`` for floats, float64 otherwise), shaped as NumPy's ``mean`` would be."""
    kept = [i for i in range(array.ndim) if i not in axes]
    out_shape = tuple(array.shape[i] for i in kept)
    length = math.prod(array.shape[i] for i in axes)
    count = math.prod(out_shape)
    result_type = dtype.numpy if dtype.is_float else np.dtype(np.float64)
    if count == 0 or length == 0:
        means = np.full(count, math.nan)
    else:
        rows = np.transpose(array, [*kept, *axes]).reshape(count, length)
        with np.errstate(all="ignore"):
            means = _float_means(rows, dtype) if dtype.is_float else _int_means(rows, dtype)
    if keepdims:
        out_shape = tuple(1 if i in axes else d for i, d in enumerate(array.shape))
    return cast(means, result_type).reshape(out_shape)


# -- integers ---------------------------------------------------------------------------------


def _int_means(rows: np.ndarray, dtype: DType) -> np.ndarray:
    count, length = rows.shape
    values = rows.view(np.uint8) if dtype is DType.BOOL else rows
    sums = _int_sums(values, dtype)
    if sums is None:
        redo = np.arange(count)
        means = np.zeros(count)
    else:
        means = sums.astype(np.float64) / length  # exact / exact: rounded once
        redo = np.flatnonzero((sums > _EXACT_F64) | (sums < -_EXACT_F64))
    int_dtype = DType.U8 if dtype is DType.BOOL else dtype
    for i in redo.tolist():
        total = _int_total(np.ascontiguousarray(values[i]), int_dtype)
        means[i] = total / length  # int / int: correctly rounded
    return means


def _int_sums(values: np.ndarray, dtype: DType) -> np.ndarray | None:
    """Exact row sums in 64-bit lanes, or None when a lane might wrap."""
    length = values.shape[1]
    if dtype.itemsize <= 4:
        if length >= _EXACT_TERMS:
            return None
        return np.asarray(np.add.reduce(values, axis=1, dtype=np.int64))
    high, low = int(np.max(values)), int(np.min(values))
    if max(high, -low) * length >= 2**63:
        return None
    return np.asarray(
        np.add.reduce(values, axis=1, dtype=np.int64 if dtype.is_signed else np.uint64)
    )


# -- floats -----------------------------------------------------------------------------------


def _float_means(rows: np.ndarray, dtype: DType) -> np.ndarray:
    """Means of float rows as float64 values that are exact values of ``dtype``."""
    count, length = rows.shape
    high = cast(np.maximum.reduce(rows, axis=1), np.float64)  # exact: every value is
    low = cast(np.minimum.reduce(rows, axis=1), np.float64)
    means = np.zeros(count)
    finite = np.isfinite(high) & np.isfinite(low)
    if not finite.all():
        means[~finite] = _nonfinite(high[~finite], low[~finite])
    todo = np.flatnonzero(finite)
    if todo.size and dtype is not DType.F64:
        chosen = rows if todo.size == count else rows[todo]
        # Summed in float64 as NumPy converts each buffer: no widened copy of the rows.
        sums = np.add.reduce(chosen, axis=1, dtype=np.float64)
        fast, ok = _certified(sums, length, dtype, np.maximum(high[todo], -low[todo]))
        means[todo[ok]] = fast[ok]
        todo = todo[~ok]
    for i in todo.tolist():
        means[i] = _exact_mean(np.ascontiguousarray(rows[i]), dtype)
    return means


def _nonfinite(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Means of rows holding NaN or infinities (max NaN iff any NaN, as in NumPy)."""
    nan = np.isnan(high) | np.isnan(low) | ((high == math.inf) & (low == -math.inf))
    return np.where(nan, math.nan, np.where(high == math.inf, math.inf, -math.inf))


def _certified(
    sums: np.ndarray, length: int, dtype: DType, magnitude: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """F64 means with a proven error bound, and where they pin the result to one ulp.

    Any-order sums err by at most gamma_n * n * max|x|; the division adds one rounding
    (2u of the result covers it and the bound's own rounding, doubled for safety).
    """
    approx = sums / length + 0.0  # +0.0: an exact zero is +0.0
    error = (_gamma(length) * magnitude + 2 * _U * np.abs(approx)) * 2.0
    low = _ordinals(round_to_float(approx - error, dtype), dtype)
    high = _ordinals(round_to_float(approx + error, dtype), dtype)
    return cast(round_to_float(approx, dtype), np.float64), low + 1 >= high


def _exact_mean(row: np.ndarray, dtype: DType) -> float:
    """The mean of a finite float row: its exact sum over its length, rounded once."""
    found = totals([row], dtype)
    units = _FORMATS[dtype].unit_bits
    return round_exact(dtype, Fraction(found.total, row.size << units))
