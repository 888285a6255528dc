"""Float sums: F64 correctly rounded (the value of ``math.fsum``), F16/BF16/F32 within one ulp.

The tool is *extraction* (Rump, Ogita and Oishi, "Accurate floating-point summation"):
with ``sigma = 2**s`` above ``n * max|x|``, ``q = (x + sigma) - sigma`` rounds every
element to a multiple of ``2**(s - 53)``. Each ``q`` and ``r = x - q`` is exact, and so is
the sum of the ``q`` in *any* order, because every partial sum is a multiple of that unit
below ``2**s``. One pass turns ``n`` elements into one exact float plus remainders about
``2**-36`` smaller, all with NumPy-wide operations.

* Full F64 sums take one extraction pass per cache-sized block, add the remainders in
  floating point, and *certify* the result: with a rigorous error bound for the
  remainder sums, the rounded total is proven correct unless it lies within that bound
  of a rounding boundary. Uncertified totals (heavy cancellation, exact ties) go to:
* the exact engine, which repeats extraction on rows of 256 until every remainder is
  zero (each pass clears about 43 bits, so at most ~50 passes even for adversarial
  exponent spreads), leaving a few exact parts per row that are rounded once.
* F16/BF16/F32 sums accumulate exactly-widened values in F64 with a proven error bound
  and accept the result when rounding its whole error interval gives one value or two
  neighbours; otherwise the exact engine decides.

Every sum whose exact value is zero is +0.0, as with ``math.fsum`` and ``numpy.sum``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .._core.dtype import DType
from .convert import cast, round_to_float, widen

__all__ = ["float_row_sums", "float_sum"]

_BLOCK = 1 << 16  # elements per cache block (float32 input, and row groups)
_F64_BLOCK = 1 << 15  # float64 blocks: the block and two temporaries stay in L2
_F64_BLOCK_BITS = 16  # log2(_F64_BLOCK) + 1: sigma must exceed the block's |sum|
_ROW = 256  # width of the exact engine's extraction rows
_SMALL = 256  # full F64 sums up to this size go straight to math.fsum
_U = 2.0**-53  # unit roundoff of float64
_SLACK = 1.0 + 2.0**-40  # covers the rounding of the bound arithmetic itself
_max = np.maximum.reduce
_min = np.minimum.reduce
_add = np.add.reduce


def _gamma(count: int) -> float:
    """Higham's gamma_n: any-order float64 sum of n terms errs by at most gamma_n * sum|x|."""
    n = count * _U
    return n / (1.0 - n) * _SLACK


# -- full sums ------------------------------------------------------------------------------


def float_sum(array: np.ndarray, dtype: DType) -> float:
    """The sum of every element of a float ``array`` of ``dtype``, as an exact value of it.

    F64: correctly rounded. F16/BF16/F32: within one ulp of correctly rounded (almost
    always exactly so). Overflow gives infinity; NaN, or infinities of both signs, NaN.
    """
    with np.errstate(all="ignore"):  # overflow to infinity is the IEEE answer here
        return _float_sum(array, dtype)


def _float_sum(array: np.ndarray, dtype: DType) -> float:
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.size == 0:
        return 0.0
    if dtype is DType.F64:
        if flat.size <= _SMALL:
            try:  # math.fsum is exact and quickest for a few values
                return math.fsum(flat.tolist()) + 0.0
            except ValueError:  # inf - inf
                return math.nan
            except OverflowError:  # an intermediate overflow: the exact engine decides
                pass
        result = _f64_fast(flat)
        if result is None:
            # Finite here (the fast path settles non-finite input): straight to exact.
            magnitude = np.array([max(float(_max(flat)), -float(_min(flat)))])
            result = float(_exact_rows(flat.reshape(1, -1), magnitude)[0])
        return result
    result = _narrow_fast(flat, dtype)
    if result is None:
        result = float(_float_row_sums(widen(flat, dtype).reshape(1, -1), dtype)[0])
    return result


def _f64_fast(flat: np.ndarray) -> float | None:
    """One extraction pass per block, then a certified rounding; None when not certified."""
    parts: list[float] = []
    delta = 0.0
    q = np.empty(min(flat.size, _F64_BLOCK))
    r = np.empty_like(q)
    for start in range(0, flat.size, _F64_BLOCK):
        block = flat[start : start + _F64_BLOCK]
        n = block.size
        high, low = float(_max(block)), float(_min(block))
        if not (math.isfinite(high) and math.isfinite(low)):
            return _nonfinite(flat)
        magnitude = max(high, -low)
        if magnitude == 0.0:
            continue
        scale = math.frexp(magnitude)[1] + _F64_BLOCK_BITS
        if scale > 1023:
            return None  # sigma would overflow: the exact engine handles huge values
        sigma = math.ldexp(1.0, scale)
        qb, rb = q[:n], r[:n]
        np.add(block, sigma, out=qb)
        np.subtract(qb, sigma, out=qb)
        np.subtract(block, qb, out=rb)
        parts.append(float(_add(qb)))  # exact, in any order
        parts.append(float(_add(rb)))  # |rb| <= 2**(scale - 53): error bounded below
        delta += _gamma(n) * n * math.ldexp(1.0, scale - 53)
    return _certify(parts, delta)


def _certify(parts: list[float], delta: float) -> float | None:
    """``fsum(parts)`` when it is provably the rounding of ``sum(parts) + e``, ``|e| <= delta``."""
    try:
        total = math.fsum(parts)
        residual = math.fsum([*parts, -total])  # the rounding error of ``total``, rounded
    except OverflowError:
        return None
    if not math.isfinite(total):
        return None
    error = (abs(residual) * (1.0 + 4 * _U) + delta) * _SLACK
    gap = min(math.nextafter(total, math.inf) - total, total - math.nextafter(total, -math.inf))
    if 2.0 * error < gap:
        return total + 0.0  # +0.0 for an exact zero
    return None


def _nonfinite(flat: np.ndarray) -> float:
    if np.isnan(flat).any():
        return math.nan
    positive = bool((flat == math.inf).any())
    negative = bool((flat == -math.inf).any())
    if positive and negative:
        return math.nan
    return math.inf if positive else -math.inf


def _narrow_fast(flat: np.ndarray, dtype: DType) -> float | None:
    """F64 accumulation with a proven bound, accepted when it pins the result to one ulp."""
    partial = np.empty(min(flat.size, _BLOCK))
    sums: list[float] = []
    bound = 0.0
    for start in range(0, flat.size, _BLOCK):
        block = widen(flat[start : start + _BLOCK], dtype)
        n = block.size
        high, low = float(_max(block)), float(_min(block))
        if not (math.isfinite(high) and math.isfinite(low)):
            return _nonfinite(widen(flat, dtype))
        wide = partial[:n]
        np.copyto(wide, block)
        if n % 128 == 0 and n >= 1024:
            # Columns summed in sequence (depth 127), then 512-ish column sums: any order.
            columns = _add(wide.reshape(128, -1), axis=0)
            sums.append(float(_add(columns)))
            depth = 127 + columns.size
        else:
            sums.append(float(_add(wide)))
            depth = n
        bound += _gamma(depth) * n * max(high, -low)
    total = math.fsum(sums)  # F32 sums of at most 2**34 terms cannot overflow F64
    error = (bound + 2 * _U * abs(total)) * 2.0
    rounded = round_to_float(np.array([total - error, total, total + error]), dtype)
    keys = _ordinals(rounded, dtype)
    if keys[0] + 1 >= keys[2]:
        return float(cast(rounded[1:2], np.float64)[0])
    return None


# -- row sums (axis sums, and the exact fallback of full sums) -------------------------------


def float_row_sums(rows: np.ndarray, dtype: DType) -> np.ndarray:
    """Sums of each row of a 2-D float array (exact values of ``dtype``), as float64.

    ``rows`` holds values of ``dtype`` (already widened for F16/BF16). F64 rows are
    correctly rounded; narrower dtypes are within one ulp.
    """
    with np.errstate(all="ignore"):  # overflow to infinity is the IEEE answer here
        return _float_row_sums(rows, dtype)


def _float_row_sums(rows: np.ndarray, dtype: DType) -> np.ndarray:
    count, length = rows.shape
    result = np.zeros(count)
    if count == 0 or length == 0:
        return result
    wide = rows if rows.dtype == np.float64 else cast(rows, np.float64)
    high = _max(wide, axis=1)
    low = _min(wide, axis=1)
    finite = np.isfinite(high) & np.isfinite(low)
    if not finite.all():
        bad = ~finite
        nan = np.isnan(high) | np.isnan(low) | ((high == math.inf) & (low == -math.inf))
        infinity = np.where(high[bad] == math.inf, math.inf, -math.inf)
        result[bad] = np.where(nan[bad], math.nan, infinity)
    todo = np.flatnonzero(finite)
    if todo.size:
        chosen = wide if todo.size == count else wide[todo]
        result[todo] = _exact_or_certified(chosen, dtype, high[todo], low[todo])
    return result


def _exact_or_certified(
    wide: np.ndarray, dtype: DType, high: np.ndarray, low: np.ndarray
) -> np.ndarray:
    magnitude = np.maximum(high, -low)
    if dtype is DType.F64:
        if wide.shape[1] <= 2:
            return np.asarray(_add(wide, axis=1) + 0.0)  # one IEEE addition rounds correctly
        sums, ok = _f64_rows_fast(wide, magnitude)
    else:
        sums, ok = _narrow_rows_fast(wide, dtype, magnitude)
    if not ok.all():
        redo = np.flatnonzero(~ok)
        exact = _exact_rows(wide[redo], magnitude[redo])
        sums[redo] = exact if dtype is DType.F64 else cast(round_to_float(exact, dtype), np.float64)
    return sums


def _narrow_rows_fast(
    wide: np.ndarray, dtype: DType, magnitude: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """F64 row sums with a proven bound, accepted where they pin the one-ulp result."""
    length = wide.shape[1]
    approx = _add(wide, axis=1)
    error = (_gamma(length) * length * magnitude + 2 * _U * np.abs(approx)) * 2.0
    low_r = round_to_float(approx - error, dtype)
    high_r = round_to_float(approx + error, dtype)
    ok = _ordinals(low_r, dtype) + 1 >= _ordinals(high_r, dtype)
    return cast(round_to_float(approx, dtype), np.float64), ok


def _f64_rows_fast(wide: np.ndarray, magnitude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One extraction pass per (sub-)row, certified per row: ``(sums, certified mask)``.

    Rows are handled in groups of about ``_BLOCK`` elements so the temporaries stay in
    cache; rows longer than ``_BLOCK`` are split into sub-rows with their own sigma.
    """
    count, length = wide.shape
    width = min(length, _BLOCK)
    per_row = -(-length // width)
    if per_row > 1:
        padded = np.zeros((count, per_row * width))
        padded[:, :length] = wide
        wide = padded.reshape(count * per_row, width)
        magnitude = np.maximum(_max(wide, axis=1), -_min(wide, axis=1))
    bits = math.ceil(math.log2(width)) + 1
    scale = np.frexp(magnitude)[1] + bits
    usable = scale <= 1023  # larger sigma would overflow: those rows go the exact way
    sigma = np.ldexp(1.0, np.minimum(scale, 1023))
    taus = np.empty(wide.shape[0])
    rhos = np.empty(wide.shape[0])
    group = max(1, _BLOCK // width)
    for start in range(0, wide.shape[0], group):
        rows = wide[start : start + group]
        column = sigma[start : start + group, None]
        q = rows + column
        q -= column
        r = rows - q
        taus[start : start + group] = _add(q, axis=1)  # exact
        rhos[start : start + group] = _add(r, axis=1)  # |r| <= 2**(scale - 53)
    delta = _gamma(width) * width * np.ldexp(1.0, scale - 53)
    parts = np.concatenate([taus.reshape(count, per_row), rhos.reshape(count, per_row)], axis=1)
    delta = delta.reshape(count, per_row).sum(axis=1) * _SLACK
    usable = usable.reshape(count, per_row).all(axis=1)
    sums, ok = _certified_parts(parts, delta)
    return sums, ok & usable


def _ordinals(values: np.ndarray, dtype: DType) -> np.ndarray:
    bits = values.view(f"<u{dtype.itemsize}").astype(np.int64)
    sign = 1 << (8 * dtype.itemsize - 1)
    return np.where(bits & sign, -(bits & (sign - 1)), bits)


def _exact_rows(wide: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """Correctly rounded F64 sums of finite rows (``magnitude`` = each row's max |x|)."""
    if wide.shape[1] <= 2:
        return np.asarray(_add(wide, axis=1) + 0.0)  # one IEEE addition rounds correctly
    # Extraction sums grow to at most 2**34 (MAX_ELEMENTS) times the largest value, and
    # sigma adds 2**9 more: below 2**960 nothing can overflow.
    if float(_max(magnitude)) < 2.0**960:
        parts = _row_parts(wide)
        sums, ok = _certified_parts(parts, np.zeros(parts.shape[0]))
        for i in np.flatnonzero(~ok).tolist():
            sums[i] = _exact_float(parts[i].tolist())
        return sums
    # Huge values: split off the large elements and scale them down by 2**-200, which is
    # exact for them (they stay far above the subnormal range).
    large = np.abs(wide) >= 2.0**-800
    high_parts = _row_parts(np.where(large, wide, 0.0) * 2.0**-200)
    low_parts = _row_parts(np.where(large, 0.0, wide))
    return np.array(
        [
            _exact_float(high_parts[i].tolist(), 200, low_parts[i].tolist())
            for i in range(wide.shape[0])
        ]
    )


def _row_parts(rows: np.ndarray) -> np.ndarray:
    """Few floats per row with exactly the same row sums (max |x| < 2**960)."""
    parts = rows
    while parts.shape[1] > _ROW:
        parts = _extract(parts)
    squeezed = _extract(parts)
    return squeezed if squeezed.shape[1] < parts.shape[1] else parts


def _extract(rows: np.ndarray) -> np.ndarray:
    """Repeated extraction over sub-rows of at most ``_ROW`` until every remainder is zero.

    Returns the exact per-pass sums: ``(count, sub-rows per row * passes)``. Sub-rows are
    processed in cache-sized groups, each group running all of its passes at once.
    """
    count, length = rows.shape
    width = min(length, _ROW)
    per_row = -(-length // width)
    if per_row * width != length:
        padded = np.zeros((count, per_row * width))
        padded[:, :length] = rows
        rows = padded
    data = rows.reshape(count * per_row, width)
    bits = math.ceil(math.log2(width)) + 1
    group = max(1, _BLOCK // width)
    blocks = [_extract_block(data[i : i + group], bits) for i in range(0, data.shape[0], group)]
    passes = max(block.shape[1] for block in blocks)
    sums = np.zeros((data.shape[0], passes))
    for i, block in zip(range(0, data.shape[0], group), blocks, strict=True):
        sums[i : i + block.shape[0], : block.shape[1]] = block
    return sums.reshape(count, per_row * passes)


def _extract_block(data: np.ndarray, bits: int) -> np.ndarray:
    """All extraction passes of a few sub-rows: ``(sub-rows, passes)`` exact sums."""
    count = data.shape[0]
    active = np.arange(count)
    sums: list[np.ndarray] = []
    while True:
        magnitude = np.maximum(_max(data, axis=1), -_min(data, axis=1))
        live = magnitude > 0
        if not live.all():
            data, active, magnitude = data[live], active[live], magnitude[live]
            if not data.shape[0]:
                break
        sigma = np.ldexp(1.0, np.frexp(magnitude)[1] + bits)[:, None]
        q = data + sigma
        q -= sigma
        data = data - q
        column = np.zeros(count)
        column[active] = _add(q, axis=1)
        sums.append(column)
    if not sums:
        return np.zeros((count, 1))
    return np.stack(sums, axis=1)


def _certified_parts(parts: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round each row's sum of floats (plus an unknown ``|e| <= delta``) once, if provable.

    A TwoSum chain gives the float sum and its exact error terms; their float sum has a
    tiny proven error, so one more TwoSum shows whether the total (within ``delta``)
    rounds unambiguously. Returns ``(sums, certified mask)``; uncertified rows (near
    ties, overflow) need exact treatment.
    """
    count, width = parts.shape
    total = parts[:, 0].copy()
    errors = np.zeros(count)
    magnitudes = np.zeros(count)
    with np.errstate(all="ignore"):
        for j in range(1, width):
            total, error = _two_sum(total, parts[:, j])
            errors += error  # the rounding of these additions is bounded below
            magnitudes += np.abs(error)
        result, last = _two_sum(total, errors)
        bound = (np.abs(last) + _gamma(width) * magnitudes * 2.0 + delta) * _SLACK
        up = np.nextafter(result, np.inf) - result
        down = result - np.nextafter(result, -np.inf)
        ok = np.isfinite(result) & np.isfinite(bound) & (2.0 * bound < np.minimum(up, down))
    return result + 0.0, ok


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _exact_float(parts: list[float], shift: int = 0, extra: list[float] | None = None) -> float:
    """``sum(parts) * 2**shift + sum(extra)``, rounded once (overflow gives infinity)."""
    if shift == 0 and extra is None:
        try:
            return math.fsum(parts) + 0.0
        except OverflowError:
            pass
    total = sum((Fraction(p) for p in parts), Fraction(0)) * 2**shift
    if extra:
        total += sum((Fraction(p) for p in extra), Fraction(0))
    try:
        return float(total) + 0.0
    except OverflowError:
        return math.inf if total > 0 else -math.inf
