"""Correctly rounded low-rank updates and weighted sums of float arrays.

Arrays in, arrays out; nothing here knows of tensors, files or adapters.

* ``low_rank_update``: ``W + s * (L @ R)``, each element the exact real value computed
  from the stored values, rounded once (nearest, ties to even) into the target dtype.
* ``weighted_sum``: ``sum_i w_i * X_i`` for exact rational weights ``w_i``, each element
  rounded once the same way.

Three tiers, so that ordinary inputs cost a few passes and no input is ever rounded twice:

1. **Certified fast path** (targets F16, BF16, F32): the value is approximated in F64
   (``L @ R`` by BLAS, in any summation order, with or without FMA) together with a
   rigorous bound on the approximation's error (Higham's ``gamma_n`` plus an absolute
   term for underflow). The element is accepted when the whole interval
   ``approx +- bound`` lies strictly between the two rounding midpoints around the
   candidate result: then every value in it, the exact one included, rounds to the
   candidate. F64 targets skip this tier (F64 arithmetic cannot pin an F64 result).
2. **Exact engine** for the rest (near or at a midpoint, F64 targets): every product is
   split into F64 terms whose sum is exact (Dekker's product, the scale handled as its
   significand and a power of two), the terms are summed exactly by the summation
   engine (``exact_row_sums``: correctly rounded F64 with the exact sum's sign), and
   the result is rounded once: an F64 sum that falls exactly on a midpoint of the
   narrower target is moved one F64 step toward the exact value (whose side is the sign
   of the exact residual), which is rounding to odd in effect, so the final
   nearest-even step rounds the exact value. A weighted sum whose weights have an odd
   common denominator ``Q`` rounds ``N / Q`` by the exact signs of ``N - Q * m`` for the
   midpoints ``m`` around a candidate.
3. **Python integers** for the elements whose terms would leave the range where those
   splits are exact (values beyond ``2**+-200`` in F64 factors, absurd scales):
   ``fractions.Fraction`` arithmetic and ``round_exact``, slow and never met by real
   checkpoints.

Non-finite values: a NaN or infinite weight element stays as it is in ``W`` (the update
is finite: callers refuse non-finite factors); in a weighted sum an element holding NaN
or an infinity in any input is what IEEE arithmetic gives on its weighted non-finite
inputs (NaN, or that infinity). Every other element has a finite exact value, decided
from the inputs, never from an F64 intermediate that overflowed: when it rounds past
the target's largest finite value it is a RangeError naming the element (never an
infinity, a NaN or an OverflowError); an exact zero is ``+0.0``, and a non-zero value
that rounds to zero keeps its sign.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from .._core.dtype import FLOAT_LAYOUTS, DType, finite_range
from .._core.errors import DTypeError, RangeError
from .._core.floats import round_exact
from .convert import cast, round_to_float
from .summation import U, exact_row_sums, gamma, two_product, veltkamp

__all__ = ["TARGETS", "low_rank_update", "weighted_sum"]

# The dtypes a result may be rounded into (and the dtypes of the inputs).
TARGETS = (DType.F16, DType.BF16, DType.F32, DType.F64)
_SLACK = 1.0 + 2.0**-40  # covers the rounding of the bound arithmetic itself
_TINY = 2.0**-1074
_FAST_ELEMENTS = 1 << 16  # elements per fast-path block: F64 temporaries of 512 KiB
_EXACT_TERMS = 1 << 18  # terms per exact-engine group
_FACTOR_RANGE = 200  # F64 factors within 2**+-200 split exactly (else Python integers)
_SCALE_RANGE = 300  # the scale's binary exponent, likewise
_VALUE_RANGE = 700  # F64 summands of a weighted sum, likewise
_CHUNK_BITS = 26  # integer coefficients are cut into chunks of this many bits
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _check_target(target: DType) -> None:
    if target not in TARGETS:
        raise DTypeError(f"exact rounding targets are F16, BF16, F32 and F64, not {target.name}")


def _wide(array: np.ndarray, dtype: DType) -> np.ndarray:
    """The values of a float array of ``dtype`` as exact float64 (a view for F64)."""
    if dtype is DType.F64:
        return array
    if dtype is DType.F32:
        return array.astype(np.float64)
    return cast(cast(array, np.float32), np.float64)


# -- rounding midpoints -------------------------------------------------------------------


def _limit(target: DType) -> float:
    """The value one step past the largest finite one: its midpoint is the overflow edge."""
    fmt = FLOAT_LAYOUTS[target]
    return math.ldexp(fmt.max_significand + 1, fmt.emax - fmt.precision + 1)


def _edge(target: DType) -> float:
    """The midpoint past the largest finite value: at or beyond it values overflow."""
    return (float(finite_range(target)[1]) + _limit(target)) * 0.5


def _steps(magnitude: np.ndarray, target: DType) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(t, below, above)`` for non-negative F64 values: ``t`` each one rounded into
    ``target`` (as F64; infinity past the range) and its neighbours in the target, also as
    F64 (``below`` is 0 for ``t == 0``; ``above`` of the largest finite value is the step
    past it). Neighbours of an infinite ``t`` are meaningless."""
    rounded = round_to_float(magnitude, target)
    itemsize = target.itemsize
    bits = rounded.view(_UINT[itemsize]).astype(np.int64 if itemsize < 8 else np.uint64)
    one = bits.dtype.type(1)
    up = (bits + one).astype(_UINT[itemsize]).view(target.numpy)
    down = np.where(bits > 0, bits - one, bits).astype(_UINT[itemsize]).view(target.numpy)
    t = cast(rounded, np.float64)
    above = cast(up, np.float64)
    below = np.where(t > 0, cast(down, np.float64), 0.0)
    with np.errstate(invalid="ignore"):
        above = np.where(np.isinf(above) & np.isfinite(t), _limit(target), above)
    return t, below, above


def _is_even(values: np.ndarray, target: DType) -> np.ndarray:
    """Whether the target bit pattern of each (exact target) F64 value has a zero last bit."""
    bits = cast(values, target.numpy).view(_UINT[target.itemsize])
    return np.asarray((bits & 1) == 0)


def _certify(approx: np.ndarray, bound: np.ndarray, target: DType) -> tuple[np.ndarray, np.ndarray]:
    """``(rounded, ok)``: ``approx + bound`` rounded into ``target`` (an array of it), and
    where both ends of ``approx +- bound`` round to the same finite value, so that every
    value between them, the exact one included, rounds to it.

    ``bound`` must also cover the rounding of ``approx +- bound`` itself. NumPy rounds
    F64 to F32 and F16 in one step. BF16 goes through F32 (ml_dtypes would round
    twice): the ends are rounded to F32, then to BF16 by integer arithmetic, and an end
    whose F32 value is itself a BF16 midpoint is not accepted, so no midpoint (all of
    which are F32 values) lies between the ends.
    """
    with np.errstate(all="ignore"):
        low = approx - bound
        high = approx + bound
        if target is DType.BF16:
            low_bits = low.astype(np.float32).view(np.uint32)
            high_bits = high.astype(np.float32).view(np.uint32)
            rounded = _bf16_bits(high_bits)
            ok = _bf16_bits(low_bits) == rounded
            ok &= (rounded & 0x7F80) != 0x7F80  # finite
            ok &= (low_bits & 0xFFFF) != 0x8000
            ok &= (high_bits & 0xFFFF) != 0x8000
            return rounded.astype(np.uint16).view(target.numpy), ok
        ends = low.astype(target.numpy), high.astype(target.numpy)
        kind = _UINT[target.itemsize]
        ok = (ends[0].view(kind) == ends[1].view(kind)) & np.isfinite(ends[1])
        return ends[1], ok


def _bf16_bits(bits: np.ndarray) -> np.ndarray:
    """F32 bit patterns (finite or infinite) rounded to nearest-even BF16 patterns."""
    return np.asarray((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16)


def _check_overflow(
    exact: np.ndarray, places: np.ndarray, target: DType, offset: int, shape: tuple[int, ...]
) -> None:
    """RangeError naming the first element whose finite exact value rounded past the
    largest finite value of ``target``: ``exact`` holds the rounded values of the
    elements at the flat ``places`` of a block (in order), the block's first element
    being ``offset`` in the whole tensor of ``shape``."""
    bad = np.flatnonzero(np.isinf(exact))
    if bad.size:
        index = np.unravel_index(offset + int(places[bad[0]]), shape)
        text = ", ".join(str(int(i)) for i in index)
        raise RangeError(
            f"element [{text}] overflows {target.name} (largest finite {finite_range(target)[1]!r})"
        )


# -- the exact engine: rows of exact terms, rounded once ----------------------------------


def _round_sums(terms: np.ndarray, target: DType) -> np.ndarray:
    """Each row's exact sum rounded once into ``target`` (signed F64 values; infinity
    where it overflows). Terms are finite F64 values below ``2**960``."""
    total = exact_row_sums(terms)
    if target is DType.F64:
        return total
    magnitude = np.abs(total)
    t, below, above = _steps(magnitude, target)
    with np.errstate(invalid="ignore"):
        tie = (magnitude == (t + above) * 0.5) | ((magnitude == (t + below) * 0.5) & (t > 0))
        tie |= magnitude == _edge(target)  # the overflow edge rounds to infinity: a tie
    where = np.flatnonzero(tie)
    if where.size:
        # The F64 sum sits on a midpoint: the exact residual's sign says which way.
        residual = exact_row_sums(np.concatenate([terms[where], -total[where, None]], axis=1))
        toward = np.sign(residual) * np.sign(total[where])
        moved = magnitude[where]
        moved = np.where(toward > 0, np.nextafter(moved, np.inf), moved)
        moved = np.where(toward < 0, np.nextafter(moved, 0.0), moved)
        magnitude[where] = moved
        t[where] = cast(round_to_float(moved, target), np.float64)
    return np.where(total == 0, 0.0, np.copysign(t, total))


def _pieces(values: np.ndarray) -> list[np.ndarray]:
    """Veltkamp halves of F64 values (each at most 27 significant bits)."""
    high, low = veltkamp(values)
    return [high, low]


def _chunks(number: int) -> list[float]:
    """A positive integer as F64 chunks ``c * 2**(26 j)`` with ``c < 2**26``, exact."""
    found = []
    shift = 0
    while number:
        found.append(math.ldexp(number & ((1 << _CHUNK_BITS) - 1), shift))
        number >>= _CHUNK_BITS
        shift += _CHUNK_BITS
    return found


def _round_quotients(terms: np.ndarray, denominator: int, target: DType) -> np.ndarray:
    """Each row's exact sum divided by the odd ``denominator`` (below ``2**64``),
    rounded once into ``target`` (signed F64; infinity where it overflows).

    A candidate from the F64 quotient is within one step of the result; the exact signs
    of ``N - Q * m`` at the midpoints ``m`` around it decide.
    """
    total = exact_row_sums(terms)
    q = float(denominator)  # exact: below 2**53 after the chunks check below, or rounded
    chunks = _chunks(denominator)
    sign = np.where(total < 0, -1.0, 1.0)
    approx = total / q
    if target is DType.F64:
        # One exact residual brings the candidate within one step.
        rest = exact_row_sums(np.concatenate([terms, -_times(chunks, approx)], axis=1))
        approx = approx + rest / q
    magnitude = np.abs(approx)
    if target is DType.F64:
        t = magnitude
        above = np.nextafter(t, np.inf)
        below = np.nextafter(t, 0.0)
    else:
        t, below, above = _steps(magnitude, target)
    if target is not DType.F64:
        # A candidate past the range: the largest finite value, settled by the checks.
        largest = float(finite_range(target)[1])
        past = ~np.isfinite(t)
        t = np.where(past, largest, t)
        _, under, _ = _steps(np.array([largest]), target)
        below = np.where(past, under[0], below)
        above = np.where(past, _limit(target), above)
    up = (above - t) * 0.5
    down = (t - below) * 0.5
    signed_t = t * sign
    high = _side(terms, chunks, signed_t, up * sign, sign)
    low = _side(terms, chunks, signed_t, -down * sign, sign)
    result = np.where(high > 0, above, t)
    result = np.where(high == 0, np.where(_even(t, target), t, above), result)
    result = np.where((low < 0) & (t > 0), below, result)
    result = np.where((low == 0) & (t > 0), np.where(_even(t, target), t, below), result)
    if target is not DType.F64:
        result = np.where(result >= _limit(target), np.inf, result)
    return np.where(total == 0, 0.0, result * sign)


def _even(values: np.ndarray, target: DType) -> np.ndarray:
    if target is DType.F64:
        return np.asarray((values.view(np.uint64) & 1) == 0)
    with np.errstate(over="ignore"):
        return _is_even(np.minimum(values, float(np.finfo(target.numpy).max)), target)


def _times(chunks: list[float], values: np.ndarray) -> np.ndarray:
    """``Q * values`` as exact F64 columns (each chunk of Q times each Veltkamp half)."""
    halves = _pieces(values)
    return np.stack([chunk * half for chunk in chunks for half in halves], axis=1)


def _side(
    terms: np.ndarray, chunks: list[float], t: np.ndarray, step: np.ndarray, sign: np.ndarray
) -> np.ndarray:
    """Sign of ``|N| - Q * |t + step|``: which side of the midpoint the quotient lies."""
    pieces = np.concatenate(
        [terms, -_times(chunks, t), -np.stack([chunk * step for chunk in chunks], axis=1)],
        axis=1,
    )
    return np.asarray(np.sign(exact_row_sums(pieces)) * sign)


def _rational(value: Fraction, target: DType) -> float:
    """``round_exact`` with overflow as infinity (reported by the caller, with an index).

    The infinity's sign comes from a comparison: ``float(value)`` of a value past F64's
    range would raise OverflowError.
    """
    try:
        return round_exact(target, value)
    except RangeError:
        return math.inf if value > 0 else -math.inf


# -- W + s * (L @ R) --------------------------------------------------------------------


def low_rank_update(
    weight: np.ndarray,
    weight_dtype: DType,
    left: np.ndarray,
    right: np.ndarray,
    factor_dtype: DType,
    scale: float,
    target: DType,
    offset: int = 0,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """``weight + scale * (left @ right)`` correctly rounded into ``target``.

    ``weight`` is ``(m, n)`` of ``weight_dtype``, ``left`` ``(m, r)`` and ``right``
    ``(r, n)`` of ``factor_dtype`` (all of ``TARGETS``, finite factors), ``scale`` a
    finite float. Returns a new ``(m, n)`` array of ``target``. An element whose exact
    value rounds past the largest finite value is a RangeError naming its index in the
    whole tensor: ``shape`` (default: the block's), where the block's first element has
    the flat index ``offset``. Inputs are never changed.
    """
    _check_target(target)
    rows, width = weight.shape
    out = np.empty((rows, width), dtype=target.numpy)
    if rows == 0 or width == 0:
        return out
    lefts = _wide(left, factor_dtype)
    rights = _wide(right, factor_dtype)
    scale = float(scale)
    # Bound of sum_k |L_ik| |R_kj|: the row's largest |L| times the column's sum of |R|,
    # with gamma_(r+1), |s| and the slack folded in.
    rank = lefts.shape[1]
    factor = gamma(rank + 1) * abs(scale) * _SLACK
    with np.errstate(all="ignore"):  # an infinite bound only sends elements to the exact tier
        row_bound = np.abs(lefts).max(axis=1, initial=0.0) * factor
        column_sums = np.abs(rights).sum(axis=0)
    tiny = 4.0 * (rank + 2) * max(abs(scale), 1.0) * _TINY
    # The product per group of rows, by NumPy's own loop rather than BLAS: with a rank
    # of 8 to 64 a threaded BLAS call spends more on handing work to its threads than on
    # the work (several times more on a busy machine). Then element-wise work per
    # cache-sized block.
    group = max(1, (4 * _FAST_ELEMENTS) // width)
    step = max(1, _FAST_ELEMENTS // width)
    for first in range(0, rows, group):
        last = min(first + group, rows)
        product = None
        if target is not DType.F64:
            with np.errstate(all="ignore"):  # overflow: not certified, computed exactly
                product = np.einsum("ik,kj->ij", lefts[first:last], rights, optimize=False)
        for start in range(first, last, step):
            stop = min(start + step, last)
            block = _Block(
                _wide(weight[start:stop], weight_dtype),
                lefts[start:stop],
                rights,
                factor_dtype,
                scale,
                target,
            )
            if product is not None:
                with np.errstate(all="ignore"):
                    bounds = (row_bound[start:stop, None] * column_sums) + tiny
                block.fast(product[start - first : stop - first], bounds)
            out[start:stop] = block.finish(offset + start * width, shape or (rows, width))
    return out


class _Block:
    """One block of rows of ``W + s * (L @ R)``: certified, then the rest exactly."""

    def __init__(
        self,
        weight: np.ndarray,
        left: np.ndarray,
        right: np.ndarray,
        factor_dtype: DType,
        scale: float,
        target: DType,
    ) -> None:
        self.weight, self.left, self.right = weight, left, right
        self.factor_dtype, self.scale, self.target = factor_dtype, scale, target
        self.finite = np.isfinite(weight)
        self.result = np.empty(weight.shape, dtype=target.numpy)
        if not self.finite.all():  # non-finite weights stay as they are
            self.result[~self.finite] = cast(weight[~self.finite], target.numpy)
        self.todo = self.finite

    def fast(self, product: np.ndarray, bounds: np.ndarray) -> None:
        """Certify ``W + s * product`` (``product`` is ``L @ R`` in F64, any order) with
        ``bounds`` (its error, times ``|s|``): F64 rounding of the sum adds
        ``U * (|delta| + 2 |approx|)`` (the ends' own rounding included)."""
        with np.errstate(all="ignore"):
            delta = product * self.scale
            approx = self.weight + delta
            error = np.abs(approx)
            error += error
            error += np.abs(delta)
            error *= 2 * U * _SLACK
            error += bounds
        result, ok = _certify(approx, error, self.target)
        ok &= self.finite
        np.copyto(self.result, result, where=ok)
        self.todo = self.finite & ~ok

    def finish(self, offset: int, shape: tuple[int, ...]) -> np.ndarray:
        """The block's results, the uncertified elements computed exactly."""
        if not self.todo.any():
            return self.result
        width = self.weight.shape[1]
        flat = np.flatnonzero(self.todo)
        rows, cols = np.divmod(flat, width)
        exact = _exact_update(
            self.weight, self.left, self.right, self.factor_dtype, self.scale, self.target,
            rows, cols,
        )  # fmt: skip
        _check_overflow(exact, flat, self.target, offset, shape)
        self.result[rows, cols] = round_to_float(exact, self.target)
        return self.result


def _exact_update(
    weight: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    factor_dtype: DType,
    scale: float,
    target: DType,
    rows: np.ndarray,
    cols: np.ndarray,
) -> np.ndarray:
    """The listed elements through the exact engine (or Python integers out of range)."""
    significand, exponent = math.frexp(scale)
    tame = np.abs(weight[rows, cols]) < 2.0**900
    if abs(exponent) > _SCALE_RANGE:
        tame[:] = False
    elif factor_dtype is DType.F64:
        tame &= _in_range(left, 1)[rows] & _in_range(right, 0)[cols]
    out = np.empty(rows.size)
    easy = np.flatnonzero(tame)
    rank = left.shape[1]
    per = 2 * rank if factor_dtype is not DType.F64 else 4 * rank
    group = max(1, _EXACT_TERMS // (per + 1))
    for start in range(0, easy.size, group):
        pick = easy[start : start + group]
        at_row, at_col = rows[pick], cols[pick]
        lefts, rights = left[at_row], right[:, at_col].T  # (count, rank) each
        # Narrow factors: each product is exact in F64; F64 factors: Dekker's pair.
        parts = list(two_product(lefts, rights)) if factor_dtype is DType.F64 else [lefts * rights]
        columns = [weight[at_row, at_col][:, None]]
        for part in parts:
            high, low = two_product(significand, part)
            columns += [np.ldexp(high, exponent), np.ldexp(low, exponent)]
        out[pick] = _round_sums(np.concatenate(columns, axis=1), target)
    for index in np.flatnonzero(~tame).tolist():
        row, col = int(rows[index]), int(cols[index])
        total = sum(
            (
                Fraction(float(a)) * Fraction(float(b))
                for a, b in zip(left[row], right[:, col], strict=True)
            ),
            Fraction(0),
        )
        out[index] = _rational(Fraction(float(weight[row, col])) + Fraction(scale) * total, target)
    return out


def _in_range(values: np.ndarray, axis: int) -> np.ndarray:
    """Per row (axis 1) or column (axis 0): every value zero or within ``2**+-200``."""
    magnitude = np.abs(values)
    fits = (magnitude == 0) | (
        (magnitude >= 2.0**-_FACTOR_RANGE) & (magnitude <= 2.0**_FACTOR_RANGE)
    )
    return np.asarray(fits.all(axis=axis))


# -- sum_i w_i * X_i ----------------------------------------------------------------------


def weighted_sum(
    arrays: Sequence[np.ndarray],
    dtypes: Sequence[DType],
    weights: Sequence[Fraction],
    target: DType,
    offset: int = 0,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """``sum_i weights[i] * arrays[i]`` for 1-D arrays of equal length, rounded once.

    ``arrays[i]`` holds values of ``dtypes[i]`` (of ``TARGETS``); ``weights`` are exact
    rationals whose common denominator is below ``2**64`` and whose numerators over it
    are below ``2**78`` in magnitude (the caller checks). Returns a new array of
    ``target``. An element whose finite exact value rounds past the largest finite value
    is a RangeError naming its index in the whole tensor: ``shape`` (default: the
    arrays' length), where the first element has the flat index ``offset``.
    """
    _check_target(target)
    count = arrays[0].size if arrays else 0
    out = np.empty(count, dtype=target.numpy)
    denominator = math.lcm(*(weight.denominator for weight in weights))
    twos = (denominator & -denominator).bit_length() - 1
    exact = _Weights([int(weight * denominator) for weight in weights], twos, denominator >> twos)
    floats = [float(weight) for weight in weights]
    step = max(1, _FAST_ELEMENTS // max(len(arrays), 1))
    for start in range(0, count, step):
        stop = min(start + step, count)
        block = [
            _wide(array[start:stop], dtype) for array, dtype in zip(arrays, dtypes, strict=True)
        ]
        out[start:stop] = _weighted_block(
            block, dtypes, exact, floats, target, offset + start, shape or (count,)
        )
    return out


class _Weights(NamedTuple):
    """Weights as ``numerators[i] / (2**twos * odd)`` over one common denominator."""

    numerators: list[int]
    twos: int
    odd: int


def _weighted_block(
    block: list[np.ndarray],
    dtypes: Sequence[DType],
    exact: _Weights,
    floats: list[float],
    target: DType,
    offset: int,
    shape: tuple[int, ...],
) -> np.ndarray:
    """One block: certified in F64 where possible, the rest exactly; NaN and infinities
    as IEEE arithmetic on the F64 values gives them."""
    with np.errstate(all="ignore"):
        approx = np.zeros(block[0].size)
        magnitude = np.zeros(block[0].size)
        # Finiteness from the inputs themselves: F64 sums near the top of the range
        # overflow although the exact value (1e308 + 1e308 - 1e308) is finite.
        finite = np.ones(block[0].size, dtype=bool)
        for values, weight in zip(block, floats, strict=True):
            approx += weight * values
            magnitude += abs(weight) * np.abs(values)
            finite &= np.isfinite(values)
        result = np.empty(approx.size, dtype=target.numpy)
        if not finite.all():
            result[~finite] = cast(_special(block, floats, ~finite), target.numpy)
        todo = finite
        if target is not DType.F64:
            # Each product and addition (and each weight's own F64 rounding) errs by at
            # most u of the magnitude: gamma of twice the terms, plus the ends' rounding.
            error = magnitude * gamma(2 * len(block) + 2) + 2 * U * np.abs(approx)
            error = error * _SLACK + 4.0 * (len(block) + 1) * _TINY
            certified, ok = _certify(approx, error, target)
            ok &= finite
            np.copyto(result, certified, where=ok)
            todo = finite & ~ok
    places = np.flatnonzero(todo)
    if places.size:
        values = _exact_weighted([values[places] for values in block], dtypes, exact, target)
        _check_overflow(values, places, target, offset, shape)
        result[places] = round_to_float(values, target)
    return result


def _special(block: list[np.ndarray], floats: list[float], where: np.ndarray) -> np.ndarray:
    """The IEEE value of elements holding NaN or an infinity: the sum of the weighted
    non-finite inputs alone (finite terms cannot change it, and summing them could
    overflow into an infinity of the wrong sign or a NaN)."""
    total = np.zeros(int(where.sum()))
    with np.errstate(all="ignore"):
        for values, weight in zip(block, floats, strict=True):
            picked = values[where]
            total += np.where(np.isfinite(picked), 0.0, weight * picked)
    return total


def _exact_weighted(
    block: list[np.ndarray], dtypes: Sequence[DType], exact: _Weights, target: DType
) -> np.ndarray:
    """Listed elements of a weighted sum through the exact engine (Python out of range)."""
    numerators, twos, odd = exact
    size = block[0].size
    tame = np.ones(size, dtype=bool)
    for values, dtype in zip(block, dtypes, strict=True):
        if dtype is DType.F64:
            magnitude = np.abs(values)
            tame &= (magnitude == 0) | (
                (magnitude >= 2.0**-_VALUE_RANGE) & (magnitude <= 2.0**_VALUE_RANGE)
            )
    out = np.empty(size)
    easy = np.flatnonzero(tame)
    if easy.size:
        columns = []
        for values, dtype, numerator in zip(block, dtypes, numerators, strict=True):
            chunks = _chunks(abs(numerator))
            signed = values[easy] if numerator > 0 else -values[easy]
            halves = _pieces(signed) if dtype is DType.F64 else [signed]
            for chunk in chunks:
                scaled = math.ldexp(chunk, -twos)  # exact: a power of two apart
                columns += [scaled * half for half in halves]
        terms = np.stack(columns, axis=1) if columns else np.zeros((easy.size, 1))
        out[easy] = _round_sums(terms, target) if odd == 1 else _round_quotients(terms, odd, target)
    denominator = odd << twos
    for index in np.flatnonzero(~tame).tolist():
        total = sum(
            (
                Fraction(float(values[index])) * numerator
                for values, numerator in zip(block, numerators, strict=True)
            ),
            Fraction(0),
        )
        out[index] = _rational(total / denominator, target)
    return out
