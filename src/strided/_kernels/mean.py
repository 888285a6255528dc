"""Exact means: the exact sum divided by the count, rounded once (or within one ulp).

The rows to average are the tensor's elements with the reduced axes moved last. Each
row's mean is settled in one of three ways:

* integer and BOOL rows: summed exactly in 64-bit lanes (or, past 2**53, as Python ints);
  an exact sum and an exact count divide with one correctly rounded F64 division;
* F16/BF16/F32 rows: summed in F64 with a proven error bound; the mean is accepted when
  its whole error interval rounds to one value or two neighbours of the dtype (so it is
  within one ulp of the exact mean);
* F64 rows: one extraction pass (see ``_summation``) turns each row into an exact float sum
  plus remainders whose sum has a proven error bound; the quotient by the count is
  computed with an exact remainder (Dekker's product) and accepted only when the whole
  error interval lies inside one rounding cell of the candidate;
* everything else (huge, tiny or cancelling F64 rows, very long ones, the rare
  uncertified narrow row): the exact partial sum (``_summation``), divided by the count
  and rounded once.

No sum overflows on the way: the mean of ``[F16 max, F16 max]`` is F16 max. A row with
a NaN, or infinities of both signs, has mean NaN; one infinity sign gives that infinity;
an empty row gives NaN (without NumPy's warning).
"""

from __future__ import annotations

import math

import numpy as np

from .._core.dtype import DType
from .convert import cast
from .partials import exact_partial
from .summation import (
    U,
    certify_narrow,
    gamma,
    int_total,
    nonfinite,
    two_product,
    two_sum,
)

__all__ = ["mean_of"]

_EXACT_F64 = 2**53  # integers up to this size are exact float64 values
_EXACT_TERMS = 1 << 31  # a 64-bit accumulator of values below 2**32 is exact this far
_F64_ROW = 1 << 20  # longer F64 rows take the exact (streaming) path
_F64_BLOCK = 1 << 17  # elements per block of F64 rows in the fast path
_SAFE_LOW = 2.0**-900  # below this, products' error terms could underflow
_SAFE_BITS = 990  # sigma up to 2**990: no product or split can overflow


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
    length = rows.shape[1]
    values = rows.view(np.uint8) if dtype is DType.BOOL else rows
    sums, risky = _int_sums(values, dtype)
    means: np.ndarray = sums.astype(np.float64) / length  # exact / exact: rounded once
    redo = np.flatnonzero(risky | (sums > _EXACT_F64) | (sums < -_EXACT_F64))
    int_dtype = DType.U8 if dtype is DType.BOOL else dtype
    for i in redo.tolist():
        total = int_total(np.ascontiguousarray(values[i]), int_dtype)
        means[i] = total / length  # int / int: correctly rounded
    return means


def _int_sums(values: np.ndarray, dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Row sums in 64-bit lanes, and which rows' lanes might have wrapped (to be redone).

    A row is safe when its largest magnitude times its length stays below 2**63; one
    large value sends only its own row to the exact path.
    """
    count, length = values.shape
    if dtype.itemsize <= 4:
        if length >= _EXACT_TERMS:
            return np.zeros(count, dtype=np.int64), np.ones(count, dtype=bool)
        return np.add.reduce(values, axis=1, dtype=np.int64), np.zeros(count, dtype=bool)
    bound = 2**63 // length
    risky = np.max(values, axis=1) >= bound
    if dtype.is_signed:
        risky |= np.min(values, axis=1) <= -bound
    lane = np.int64 if dtype.is_signed else np.uint64
    return np.add.reduce(values, axis=1, dtype=lane), risky


# -- floats -----------------------------------------------------------------------------------


def _float_means(rows: np.ndarray, dtype: DType) -> np.ndarray:
    """Means of float rows as float64 values that are exact values of ``dtype``."""
    count, length = rows.shape
    high = cast(np.maximum.reduce(rows, axis=1), np.float64)  # exact: every value is
    low = cast(np.minimum.reduce(rows, axis=1), np.float64)
    means = np.zeros(count)
    finite = np.isfinite(high) & np.isfinite(low)
    if not finite.all():
        means[~finite] = nonfinite(high[~finite], low[~finite])
    todo = np.flatnonzero(finite)
    if todo.size and dtype is DType.F64 and length <= _F64_ROW:
        todo = _f64_means(rows, todo, np.maximum(high[todo], -low[todo]), means)
    elif todo.size and dtype is not DType.F64:
        chosen = rows if todo.size == count else rows[todo]
        # Summed in float64 as NumPy converts each buffer: no widened copy of the rows.
        sums = np.add.reduce(chosen, axis=1, dtype=np.float64)
        fast, ok = _certified(sums, length, dtype, np.maximum(high[todo], -low[todo]))
        means[todo[ok]] = fast[ok]
        todo = todo[~ok]
    for i in todo.tolist():
        means[i] = _exact_mean(np.ascontiguousarray(rows[i]), dtype)
    return means


def _certified(
    sums: np.ndarray, length: int, dtype: DType, magnitude: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """F64 means with a proven error bound, and where they pin the result to one ulp.

    Any-order sums err by at most gamma_n * n * max|x|; the division adds one rounding
    (2u of the result covers it and the bound's own rounding, doubled for safety).
    """
    approx = sums / length + 0.0  # +0.0: an exact zero is +0.0
    error = (gamma(length) * magnitude + 2 * U * np.abs(approx)) * 2.0
    return certify_narrow(approx, error, dtype)


def _exact_mean(row: np.ndarray, dtype: DType) -> float:
    """The mean of a finite float row: its exact sum over its length, rounded once."""
    return exact_partial(row, dtype).rounded(dtype, row.size)


# -- F64: one extraction pass and a certified quotient ------------------------------------


def _f64_means(
    rows: np.ndarray, todo: np.ndarray, magnitude: np.ndarray, means: np.ndarray
) -> np.ndarray:
    """Fill ``means`` for the rows ``todo`` the fast path certifies; return the others."""
    length = rows.shape[1]
    per_block = max(1, _F64_BLOCK // length)
    left = []
    every = todo.size == rows.shape[0]  # then blocks are slices, not gathered copies
    # Two scratch blocks reused throughout: fresh ones would cost a page fault per page.
    scratch = np.empty((2, min(per_block, todo.size), length))
    for start in range(0, todo.size, per_block):
        chosen = todo[start : start + per_block]
        block = rows[start : start + per_block] if every else rows[chosen]
        found, ok = _f64_block(block, magnitude[start : start + per_block], scratch)
        means[chosen[ok]] = found[ok]
        left.append(chosen[~ok])
    return np.concatenate(left) if left else todo


def _f64_block(
    block: np.ndarray, magnitude: np.ndarray, scratch: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Correctly rounded means of finite F64 rows, and where they are certified."""
    length = block.shape[1]
    usable = (magnitude >= _SAFE_LOW) | (magnitude == 0.0)
    scale = np.frexp(magnitude)[1] + (length - 1).bit_length() + 1
    usable &= scale <= _SAFE_BITS
    sigma = np.ldexp(1.0, np.where(usable, scale, 0))[:, None]
    q, r = scratch[0, : block.shape[0]], scratch[1, : block.shape[0]]
    np.add(block, sigma, out=q)
    np.subtract(q, sigma, out=q)  # multiples of 2**(scale - 53): their sums are exact
    np.subtract(block, q, out=r)  # exact
    total = np.add.reduce(q, axis=1)
    rest = np.add.reduce(r, axis=1)
    delta = gamma(length) * np.add.reduce(np.abs(r, out=r), axis=1) * 2.0
    hi, lo = two_sum(total, rest)  # hi + lo == total + rest exactly
    count = float(length)
    first = hi / count
    found, ok = first, _cell_holds(first, hi, lo, delta, count)
    # Not certified: the mean may round to a neighbour; try the corrected quotient once.
    second = first + _remainder(first, hi, lo, count) / count
    redo = ~ok & _cell_holds(second, hi, lo, delta, count)
    found = np.where(redo, second, found) + 0.0
    zero = magnitude == 0.0  # a row of zeros: the exact mean is +0.0
    return np.where(zero, 0.0, found), usable & (ok | redo | zero)


def _remainder(c: np.ndarray, hi: np.ndarray, lo: np.ndarray, count: float) -> np.ndarray:
    """``hi + lo - c * count`` (rounded at most twice; exact products by Dekker's split)."""
    product, error = two_product(c, count)
    return ((hi - product) - error) + lo  # type: ignore[no-any-return]


def _cell_holds(
    c: np.ndarray, hi: np.ndarray, lo: np.ndarray, delta: np.ndarray, count: float
) -> np.ndarray:
    """Where the exact mean (``hi + lo + e) / count``, ``|e| <= delta``) certainly rounds
    to ``c``: its distance from ``c`` is below half of ``c``'s narrower neighbour gap."""
    remainder = _remainder(c, hi, lo, count)
    # Rounding of the last two steps of _remainder, then the remainders' sum bound.
    error = (np.abs(remainder) * 2.0**-51 + np.abs(lo) * 2.0**-52 + delta) * 1.0000001
    gap = np.minimum(np.nextafter(c, np.inf) - c, c - np.nextafter(c, -np.inf))
    safe = np.abs(c) >= _SAFE_LOW
    return np.asarray(safe & (np.abs(remainder) + error < gap * (count / 2.0)))
