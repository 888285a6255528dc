"""Exact summation: the one engine behind sums, means, exact statistics and Dask partials.

Arrays in, arrays (or Python numbers) out; nothing here knows of tensors or files.

* Error-free pieces, defined once: TwoSum, Veltkamp's split and Dekker's product,
  Higham's ``gamma_n`` bound, float ordinals, and the value of a row holding NaN or
  infinities (NaN for a NaN or infinities of both signs, else that infinity).
* Rounded sums (``float_sum``, ``float_row_sums``) use *extraction* (Rump, Ogita and
  Oishi, "Accurate floating-point summation"): with ``sigma = 2**s`` above
  ``n * max|x|``, ``q = (x + sigma) - sigma`` rounds every element to a multiple of
  ``2**(s - 53)``; each ``q`` and ``r = x - q`` is exact, and so is the sum of the ``q``
  in *any* order. F64 sums take one pass per cache-sized block and *certify* the
  rounded total with a rigorous bound; F16/BF16/F32 sums accumulate in F64 with a
  proven bound and are accepted when the whole error interval rounds to one value or
  two neighbours. What is not certified goes to the exact engine, which repeats
  extraction on rows of 256 until every remainder is zero (at most ~50 passes), leaving
  a few exact parts per row that are rounded once. F64 sums are correctly rounded (the
  value of ``math.fsum``), narrower ones within one ulp; an exact zero is +0.0.
* Exact partials (``ExactSum``, in ``partials``; their units are here): a run of values
  as counts of NaN and infinities plus the exact sum of its finite values, a Python int
  in units of the dtype's smallest subnormal (``2**-149`` for F32, ``2**-1074`` for
  F64, 1 for integers). Partials of pieces, chunks and processes ``merge`` exactly in
  any grouping and are rounded once. F32/F16/BF16/FP8 values are binned by exponent
  (``NARROW_BINS``) so that NumPy's ``bincount`` adds ``2**20`` of a bin exactly in F64;
  F64 values go through the exact engine's parts (or, spanning many exponents, through
  their bits: ``f64_units``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .._core.dtype import FLOAT_LAYOUTS, DType
from .._core.errors import RangeError
from .._core.floats import round_exact
from .checked import CHUNK
from .convert import cast, round_to_float, widen

__all__ = [
    "EXACT_TERMS",
    "NARROW_BINS",
    "SPLIT",
    "NarrowBins",
    "U",
    "certify_narrow",
    "exact_row_sums",
    "f64_units",
    "float_row_sums",
    "float_sum",
    "gamma",
    "int_total",
    "nonfinite",
    "ordinals",
    "round_units",
    "two_product",
    "two_sum",
    "unit_bits",
    "veltkamp",
]

U = 2.0**-53  # unit roundoff of float64
SPLIT = 134217729.0  # 2**27 + 1, Veltkamp's splitter
_SLACK = 1.0 + 2.0**-40  # covers the rounding of the bound arithmetic itself
_BLOCK = 1 << 16  # elements per cache block (float32 input, and row groups)
_F64_BLOCK = 1 << 15  # float64 blocks: the block and two temporaries stay in L2
_F64_BLOCK_BITS = 16  # log2(_F64_BLOCK) + 1: sigma must exceed the block's |sum|
_ROW = 256  # width of the exact engine's extraction rows
_SMALL = 256  # full F64 sums up to this size go straight to math.fsum
EXACT_TERMS = 1 << 31  # a 64-bit accumulator of 32-bit values is exact this far
_M32 = 0xFFFFFFFF
_max = np.maximum.reduce
_min = np.minimum.reduce
_add = np.add.reduce


# -- error-free transformations and bounds ----------------------------------------------------


def gamma(count: int) -> float:
    """Higham's gamma_n: any-order float64 sum of n terms errs by at most gamma_n * sum|x|."""
    n = count * U
    return n / (1.0 - n) * _SLACK


def two_sum(a: Any, b: Any) -> tuple[Any, Any]:
    """Knuth's TwoSum of floats or float64 arrays: ``s + e == a + b`` exactly (no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def veltkamp(a: Any) -> tuple[Any, Any]:
    """Veltkamp's split: ``high + low == a`` exactly, each of at most 27 significant bits
    (for ``|a|`` below about ``2**995``)."""
    scaled = a * SPLIT
    high = scaled - (scaled - a)
    return high, a - high


def two_product(a: Any, b: Any) -> tuple[Any, Any]:
    """Dekker's product: ``p + e == a * b`` exactly (no overflow, no underflow of ``e``)."""
    product = a * b
    a_high, a_low = veltkamp(a)
    b_high, b_low = veltkamp(b)
    error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
    return product, error


def ordinals(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Integers in the order of the float ``values`` of ``dtype`` (neighbours differ by 1)."""
    bits = values.view(f"<u{dtype.itemsize}").astype(np.int64)
    sign = 1 << (8 * dtype.itemsize - 1)
    return np.where(bits & sign, -(bits & (sign - 1)), bits)


def nonfinite(high: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Sums (and means) of rows holding NaN or infinities, from each row's max and min
    (NumPy's max is NaN iff the row holds a NaN): NaN, or the one infinity's sign."""
    nan = np.isnan(high) | np.isnan(low) | ((high == math.inf) & (low == -math.inf))
    return np.where(nan, math.nan, np.where(high == math.inf, math.inf, -math.inf))


def certify_narrow(
    approx: np.ndarray, error: np.ndarray, dtype: DType
) -> tuple[np.ndarray, np.ndarray]:
    """``(approx rounded into dtype, as float64; where approx +- error pins it to one ulp)``.

    Accepted where the ends of the error interval round to one value or two neighbours.
    """
    low = ordinals(round_to_float(approx - error, dtype), dtype)
    high = ordinals(round_to_float(approx + error, dtype), dtype)
    return cast(round_to_float(approx, dtype), np.float64), low + 1 >= high


# -- full sums ------------------------------------------------------------------------------


def float_sum(array: np.ndarray, dtype: DType) -> float:
    """The sum of every element of a float ``array`` of ``dtype``, as an exact value of it.

    F64: correctly rounded. F16/BF16/F32: within one ulp of correctly rounded (almost
    always exactly so). Overflow gives infinity; NaN, or infinities of both signs, NaN.
    """
    with np.errstate(all="ignore"):  # overflow to infinity is the IEEE answer here
        return _float_sum(np.ascontiguousarray(array).reshape(-1), dtype)


def _float_sum(flat: np.ndarray, dtype: DType) -> float:
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
            return float(nonfinite(np.array([_max(flat)]), np.array([_min(flat)]))[0])
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
        delta += gamma(n) * n * math.ldexp(1.0, scale - 53)
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
    error = (abs(residual) * (1.0 + 4 * U) + delta) * _SLACK
    gap = min(math.nextafter(total, math.inf) - total, total - math.nextafter(total, -math.inf))
    if 2.0 * error < gap:
        return total + 0.0  # +0.0 for an exact zero
    return None


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
            wide = widen(flat, dtype)
            return float(nonfinite(np.array([_max(wide)]), np.array([_min(wide)]))[0])
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
        bound += gamma(depth) * n * max(high, -low)
    total = math.fsum(sums)  # F32 sums of at most 2**34 terms cannot overflow F64
    error = (bound + 2 * U * abs(total)) * 2.0
    rounded, ok = certify_narrow(np.array([total]), np.array([error]), dtype)
    return float(rounded[0]) if ok[0] else None


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
        result[~finite] = nonfinite(high[~finite], low[~finite])
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
        length = wide.shape[1]
        approx = _add(wide, axis=1)
        error = (gamma(length) * length * magnitude + 2 * U * np.abs(approx)) * 2.0
        sums, ok = certify_narrow(approx, error, dtype)
    if not ok.all():
        redo = np.flatnonzero(~ok)
        exact = _exact_rows(wide[redo], magnitude[redo])
        sums[redo] = exact if dtype is DType.F64 else cast(round_to_float(exact, dtype), np.float64)
    return sums


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
    delta = gamma(width) * width * np.ldexp(1.0, scale - 53)
    parts = np.concatenate([taus.reshape(count, per_row), rhos.reshape(count, per_row)], axis=1)
    delta = delta.reshape(count, per_row).sum(axis=1) * _SLACK
    usable = usable.reshape(count, per_row).all(axis=1)
    sums, ok = _certified_parts(parts, delta)
    return sums, ok & usable


# -- the exact engine -----------------------------------------------------------------------


def exact_row_sums(rows: np.ndarray) -> np.ndarray:
    """Correctly rounded F64 sums of each row of a 2-D array of finite float64 values.

    Every term must stay below ``2**960`` in magnitude. Each result has the sign of its
    row's exact sum and is zero exactly when that sum is zero (terms are multiples of
    ``2**-1074``, so a non-zero sum never rounds to zero): callers learn on which side
    of a value an exact sum lies by appending that value, negated, to the row.
    """
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0])
    with np.errstate(all="ignore"):
        magnitude = np.maximum(_max(rows, axis=1), -_min(rows, axis=1))
        return _exact_rows(rows, magnitude)


def _exact_rows(wide: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """Correctly rounded F64 sums of finite rows (``magnitude`` = each row's max |x|)."""
    if wide.shape[1] <= 2:
        return np.asarray(_add(wide, axis=1) + 0.0)  # one IEEE addition rounds correctly
    # Extraction sums grow to at most 2**34 (MAX_ELEMENTS) times the largest value, and
    # sigma adds 2**9 more: below 2**960 nothing can overflow. Huge rows are summed whole.
    if float(_max(magnitude)) >= 2.0**960:
        return np.array([round_units(f64_units(row), DType.F64) for row in wide])
    parts = _row_parts(wide)
    sums, ok = _certified_parts(parts, np.zeros(parts.shape[0]))
    for i in np.flatnonzero(~ok).tolist():
        sums[i] = round_units(_parts_units(parts[i].tolist()), DType.F64)
    return sums


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
            total, error = two_sum(total, parts[:, j])
            errors += error  # the rounding of these additions is bounded below
            magnitudes += np.abs(error)
        result, last = two_sum(total, errors)
        bound = (np.abs(last) + gamma(width) * magnitudes * 2.0 + delta) * _SLACK
        up = np.nextafter(result, np.inf) - result
        down = result - np.nextafter(result, -np.inf)
        ok = np.isfinite(result) & np.isfinite(bound) & (2.0 * bound < np.minimum(up, down))
    return result + 0.0, ok


# -- integers -------------------------------------------------------------------------------


def int_total(flat: np.ndarray, dtype: DType) -> int:
    """The exact sum of a 1-D integer array of ``dtype`` (not BOOL), as a Python int.

    Narrow integers accumulate in 64-bit lanes (exact for 2**31 terms); 64-bit integers
    are summed block by block, directly when the block's bound rules out wrapping, else
    as 32-bit high and low halves.
    """
    if dtype.itemsize <= 4:
        wide = np.int64 if dtype.is_signed else np.uint64
        return sum(
            int(_add(flat[i : i + EXACT_TERMS], dtype=wide))
            for i in range(0, flat.size, EXACT_TERMS)
        )
    total = 0
    limit = 2**63 if dtype.is_signed else 2**64
    for start in range(0, flat.size, CHUNK):
        block = flat[start : start + CHUNK]
        high, low = int(block.max()), int(block.min())
        if max(high, -low) * block.size < limit:
            total += int(_add(block))  # no partial sum can wrap
        else:
            # Halves: |high half| < 2**31 and low half < 2**32, so neither sum can wrap.
            total += (int(_add(block >> 32)) << 32) + int(_add(block & _M32))
    return total


# -- units of exact sums -------------------------------------------------------------------------


class NarrowBins:
    """Exponent bins of a narrow float dtype: 2**20 values of one bin sum exactly in F64."""

    __slots__ = ("bins", "nbits", "table", "uint", "unit_bits")

    def __init__(self, nbits: int, ebits: int, mbits: int) -> None:
        self.nbits = nbits
        self.uint = np.dtype(f"<u{nbits // 8}")
        self.unit_bits = (1 << (ebits - 1)) - 1 + mbits - 1  # integers in 2**-unit_bits
        # A bin's values span width + mbits + 1 bits; 20 more for the count, at most 53.
        # F32 bins are eight exponents wide (a shift finds them), others come from a table.
        span = 8 if nbits == 32 else 32 - mbits
        top = (1 << ebits) - 1
        self.bins = top // span + 1
        self.table = np.zeros(0, dtype=np.uint8)
        if nbits <= 16:
            patterns = np.arange(1 << nbits, dtype=np.uint32)
            table = (((patterns >> mbits) & top) // span).astype(np.uint8)
            table.flags.writeable = False
            self.table = table


# The narrow floats, from the one table of float layouts (F64 goes through its parts).
NARROW_BINS: dict[DType, NarrowBins] = {
    dtype: NarrowBins(layout.bits, layout.exponent_bits, layout.mantissa_bits)
    for dtype, layout in FLOAT_LAYOUTS.items()
    if dtype is not DType.F64
}
_F64_UNIT = 1074


def unit_bits(dtype: DType) -> int:
    """Exact partials of ``dtype`` count units of ``2**-unit_bits`` (0 for integers; float
    dtypes without bins here are summed through their exact F64 values)."""
    if not dtype.is_float:
        return 0
    fmt = NARROW_BINS.get(dtype)
    return _F64_UNIT if fmt is None else fmt.unit_bits


def round_units(total: int, dtype: DType, count: int = 1, target: DType | None = None) -> float:
    """``total`` units of ``dtype`` divided by ``count``, rounded once into float ``target``
    (default ``dtype``); past the largest finite value gives infinity."""
    value = Fraction(total, count << unit_bits(dtype))
    try:
        return round_exact(target or dtype, value)
    except RangeError:  # past the largest finite value: IEEE overflow
        return math.inf if total > 0 else -math.inf


def f64_units(values: np.ndarray) -> int:
    """The exact sum of finite F64 values in units of ``2**-1074``.

    Values spanning few exponents take the exact engine's parts (a few extraction
    passes); wide spans, where extraction would need up to ~50 passes, are summed from
    their bits instead: integer significands shifted within 10-exponent bins (below
    2**62), added by ``bincount`` in two 31-bit halves.
    """
    magnitude = np.abs(values)
    top = float(_max(magnitude, initial=0.0))
    if top == 0.0:
        return 0
    bottom = float(_min(magnitude, where=magnitude > 0, initial=math.inf))
    if top < 2.0**960 and top < bottom * 2.0**128:
        return _parts_units(_row_parts(values.reshape(1, -1))[0].tolist())
    width = 10
    bits = magnitude.view(np.uint64).astype(np.int64)
    exponent = bits >> 52
    significand = (bits & ((1 << 52) - 1)) | ((exponent != 0).astype(np.int64) << 52)
    position = np.maximum(exponent, 1) - 1  # value = significand * 2**position units
    bins = position // width
    shifted = significand << (position % width)
    negative = values < 0
    total = 0
    for shift, half in ((0, shifted & ((1 << 31) - 1)), (31, shifted >> 31)):
        weights = half.astype(np.float64)  # below 2**31: 2**20 of them add exactly
        np.negative(weights, out=weights, where=negative)
        sums = np.bincount(bins, weights=weights)
        for index in np.flatnonzero(sums).tolist():
            total += int(sums[index]) << (index * width + shift)
    return total


def _parts_units(parts: list[float]) -> int:
    """The exact sum of finite floats in units of ``2**-1074`` (every float is a multiple)."""
    total = 0
    for part in parts:
        numerator, denominator = part.as_integer_ratio()  # a power of two up to 2**1074
        total += numerator * ((1 << _F64_UNIT) // denominator)
    return total
