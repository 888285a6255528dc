"""The exact summation engine against math.fsum and fractions.Fraction."""

from __future__ import annotations

import math
from fractions import Fraction

import hypothesis.strategies as hs
import numpy as np
from hypothesis import given, settings

import strided as st
from strided._core.floats import round_exact
from strided._kernels.partials import ExactSum, combine, exact_partial
from strided._kernels.summation import float_row_sums, float_sum, unit_bits

D = st.DType
FLOATS = [D.F64, D.F32, D.F16, D.BF16]
# Values that stress the engine: the ends of each range, subnormals, both zeros, specials.
SPECIAL = [
    0.0, -0.0, 1.0, -1.0, 1e-300, -5e-324, 2.0**-1074, 2.0**-1022, 1e308, -1.7976931348623157e308,
    2.0**960, 2.0**-149, 3.4028234663852886e38, 65504.0, 6e-8, 2.0**-133, 3.3895313892515355e38,
    math.inf, -math.inf, math.nan, 0.1, 1 / 3,
]  # fmt: skip


@hs.composite
def arrays(draw: hs.DrawFn, dtype: st.DType) -> np.ndarray:
    """Arrays of ``dtype``: raw bit patterns, special values, repeats and cancelling copies."""
    bits = 8 * dtype.itemsize
    raw = draw(hs.lists(hs.integers(0, (1 << bits) - 1), max_size=12))
    values = np.array(raw, dtype=f"<u{dtype.itemsize}").view(dtype.numpy)
    picked = draw(hs.lists(hs.sampled_from(SPECIAL), max_size=12))
    finite = draw(hs.lists(hs.floats(-6e4, 6e4, width=16), max_size=12))
    with np.errstate(all="ignore"):
        extra = np.array(picked + finite, dtype=np.float64).astype(dtype.numpy)
    base = np.concatenate([values, extra])
    if draw(hs.booleans()):  # long enough for the blocked fast paths, maybe cancelling
        base = np.resize(base, draw(hs.integers(0, 3000)))
        if draw(hs.booleans()):
            base = np.concatenate([base, -base[::-1], base[:7]])
    if not draw(hs.booleans()):  # most examples finite: the certified paths matter most
        with np.errstate(all="ignore"):
            base = base[np.isfinite(base.astype(np.float64))]
    return np.ascontiguousarray(base)


def _exact(values: np.ndarray) -> Fraction | float:
    """The exact sum as a Fraction, or NaN / an infinity as IEEE addition defines them."""
    wide = values.astype(np.float64).tolist()
    infinities = {v for v in wide if math.isinf(v)}
    if any(math.isnan(v) for v in wide) or len(infinities) == 2:
        return math.nan
    if infinities:
        return infinities.pop()
    return sum((Fraction(v) for v in wide), Fraction(0))


def _rounded(exact: Fraction | float, dtype: st.DType) -> float:
    """``exact`` rounded once into ``dtype`` (overflow to infinity, zero is +0.0)."""
    if isinstance(exact, float):
        return exact
    try:
        return round_exact(dtype, exact) + 0.0
    except st.RangeError:
        return math.inf if exact > 0 else -math.inf


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


def _ulps(a: float, b: float, dtype: st.DType) -> int:
    keys = np.array([a, b]).astype(dtype.numpy).view(f"<i{dtype.itemsize}").astype(np.int64)
    sign = 1 << (8 * dtype.itemsize - 1)
    keys = np.where(keys < 0, -(keys & (sign - 1)), keys)
    return abs(int(keys[0] - keys[1]))


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_f64_sums_equal_math_fsum(data: hs.DataObject) -> None:
    values = data.draw(arrays(D.F64))
    expected = _rounded(_exact(values), D.F64)
    if np.isfinite(values).all():
        try:
            assert math.fsum(values.tolist()) + 0.0 == expected  # the oracle agrees with fsum
        except OverflowError:  # fsum gives up on an intermediate overflow: Fraction decides
            pass
    assert _same(float_sum(values, D.F64), expected)
    assert _same(exact_partial(values, D.F64).rounded(D.F64), expected)


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from([D.F32, D.F16, D.BF16]), hs.data())
def test_narrow_sums_within_one_ulp_and_partials_exact(
    dtype: st.DType, data: hs.DataObject
) -> None:
    values = data.draw(arrays(dtype))
    expected = _rounded(_exact(values), dtype)
    found = float_sum(values, dtype)
    if math.isnan(expected) or math.isinf(expected):
        assert _same(found, expected)
    else:  # infinity is the neighbour of the largest finite value: within one ulp too
        assert _ulps(found, expected, dtype) <= 1
    assert _same(exact_partial(values, dtype).rounded(dtype), expected)  # correctly rounded


@settings(max_examples=200, deadline=None)
@given(hs.sampled_from(FLOATS), hs.data())
def test_exact_partial_counts_and_units(dtype: st.DType, data: hs.DataObject) -> None:
    values = data.draw(arrays(dtype))
    wide = values.astype(np.float64)
    part = exact_partial(values, dtype)
    assert part.nan == int(np.isnan(wide).sum())
    assert part.pos_inf == int((wide == math.inf).sum())
    assert part.neg_inf == int((wide == -math.inf).sum())
    finite = sum((Fraction(v) for v in wide[np.isfinite(wide)].tolist()), Fraction(0))
    assert part.total == finite * 2 ** unit_bits(dtype)


@settings(max_examples=200, deadline=None)
@given(hs.sampled_from([*FLOATS, D.I64, D.U64, D.I32, D.I8]), hs.data())
def test_partials_of_any_split_combine_to_one_pass(dtype: st.DType, data: hs.DataObject) -> None:
    if dtype.is_float:
        values = data.draw(arrays(dtype))
    else:
        info = np.iinfo(dtype.numpy)
        items = data.draw(hs.lists(hs.integers(int(info.min), int(info.max)), max_size=60))
        values = np.array(items, dtype=dtype.numpy)
        assert exact_partial(values, dtype).total == sum(items)
    cuts = sorted(data.draw(hs.lists(hs.integers(0, values.size), max_size=6)))
    pieces = np.split(values, cuts)
    parts = [exact_partial(piece, dtype) for piece in pieces]
    order = data.draw(hs.permutations(range(len(parts))))
    whole = exact_partial(values, dtype)
    assert combine(parts[i] for i in order) == whole  # any grouping, any order
    assert combine([combine(parts[: len(parts) // 2]), combine(parts[len(parts) // 2 :])]) == whole
    if dtype.is_float:
        assert _same(whole.rounded(dtype), _rounded(_exact(values), dtype))


@settings(max_examples=100, deadline=None)
@given(hs.data(), hs.integers(1, 5))
def test_f64_row_sums_equal_fsum_per_row(data: hs.DataObject, count: int) -> None:
    values = data.draw(arrays(D.F64))
    length = max(1, values.size // count)
    rows = np.resize(values, (count, length)) if values.size else np.zeros((count, length))
    expected = [_rounded(_exact(row), D.F64) for row in rows]
    found = float_row_sums(rows, D.F64).tolist()
    assert all(_same(a, b) for a, b in zip(found, expected, strict=True))


def test_huge_tiny_and_cancelling_f64() -> None:
    values = np.array([1e308, 1e308, -1e308, 2.0**-1074, -1e308, 3.0, 2.0**-1074] * 50)
    exact = sum((Fraction(v) for v in values.tolist()), Fraction(0))
    assert float_sum(values, D.F64) == float(exact) == exact_partial(values, D.F64).rounded(D.F64)
    over = np.full(300, 1.7976931348623157e308)
    assert float_sum(over, D.F64) == math.inf == exact_partial(over, D.F64).rounded(D.F64)
    assert math.isnan(ExactSum(pos_inf=1, neg_inf=2).rounded(D.F32))
    assert ExactSum(total=5, neg_inf=2).rounded(D.F16) == -math.inf
    assert ExactSum(total=-(1 << 149)).rounded(D.F32) == -1.0  # units of 2**-149
