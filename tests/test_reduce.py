"""sum (exact integers, correctly rounded F64, one-ulp narrow floats) and matmul."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.floats import round_exact

from .strategies import arrays, shapes

D = st.DType
INTS = [D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64]
NARROW = [D.F16, D.BF16, D.F32]
BLOCK = 1 << 16


def bounds(dtype: st.DType) -> tuple[int, int]:
    return int(dtype.min.value), int(dtype.max.value)


def as_f64(array: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(array).astype(np.float64)


def exact_sum(values: list[float]) -> float:
    """The correctly rounded F64 sum (math.fsum, or exact rationals where it overflows)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    if math.inf in values and -math.inf in values:
        return math.nan
    if math.inf in values or -math.inf in values:
        return math.inf if math.inf in values else -math.inf
    try:
        return math.fsum(values) + 0.0
    except OverflowError:
        total = sum((Fraction(v) for v in values), Fraction(0))
        try:
            return float(total)
        except OverflowError:
            return math.inf if total > 0 else -math.inf


def correctly_rounded(values: list[float], dtype: st.DType) -> float:
    if any(not math.isfinite(v) for v in values):
        return exact_sum(values)
    total = sum((Fraction(v) for v in values), Fraction(0))
    try:
        return round_exact(dtype, total) + 0.0
    except st.RangeError:
        return math.inf if total > 0 else -math.inf


def ulps_apart(a: float, b: float, dtype: st.DType) -> int:
    """Distance between two values of ``dtype`` in representable steps."""
    if math.isnan(a) or math.isnan(b):
        return 0 if math.isnan(a) and math.isnan(b) else 10**9
    bits = np.array([a, b], dtype=np.float64)
    with np.errstate(all="ignore"):
        raw = bits.astype(dtype.numpy).view(f"<u{dtype.itemsize}").astype(np.int64)
    sign = 1 << (8 * dtype.itemsize - 1)
    keys = [-(int(r) & (sign - 1)) if int(r) & sign else int(r) for r in raw]
    return abs(keys[0] - keys[1])


# -- integer sums ----------------------------------------------------------------------------


@hs.composite
def int_arrays(draw: hs.DrawFn, dtype: st.DType, shape: tuple[int, ...]) -> np.ndarray:
    lo, hi = bounds(dtype)
    count = math.prod(shape)
    element = hs.one_of(
        hs.sampled_from([lo, hi, 0, 1, -1 if lo else 0]),
        hs.integers(-3, 3).filter(lambda v: v >= lo),
        hs.integers(lo, hi),
    )
    return np.array(
        draw(hs.lists(element, min_size=count, max_size=count)), dtype=dtype.numpy
    ).reshape(shape)


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from(INTS), shapes(max_rank=3), hs.data())
def test_integer_sums_are_exact(
    dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject
) -> None:
    array = data.draw(int_arrays(dtype, dims))
    t = st.Tensor.from_numpy(array)
    lo, hi = bounds(dtype)
    total = sum(int(v) for v in array.reshape(-1).tolist())
    if lo <= total <= hi:
        assert t.sum() == st.Scalar(dtype, total)
    else:
        with pytest.raises(st.RangeError, match=str(total)):
            t.sum()
    if not dims:
        return
    axis = data.draw(hs.integers(-len(dims), len(dims) - 1))
    keepdims = data.draw(hs.booleans())
    exact = array.astype(object).sum(axis=axis, keepdims=keepdims)
    flat = np.asarray(exact).reshape(-1).tolist()
    bad = [i for i, v in enumerate(flat) if not lo <= v <= hi]
    if bad:
        with pytest.raises(st.RangeError) as caught:
            t.sum(axis=axis, keepdims=keepdims)
        index = [int(i) for i in np.unravel_index(bad[0], np.shape(exact))]
        assert str(index) in str(caught.value)
    else:
        result = t.sum(axis=axis, keepdims=keepdims)
        assert result.dtype is dtype
        assert result.shape == np.shape(exact)
        assert result.numpy().reshape(-1).tolist() == flat


@pytest.mark.parametrize("dtype", [D.I64, D.U64])
def test_64_bit_sums_without_a_wider_type(dtype: st.DType) -> None:
    lo, hi = bounds(dtype)
    values = [hi, hi, lo, lo + 5] if dtype.is_signed else [hi, 1, 0]
    t = st.tensor(values, dtype)
    total = sum(values)
    if lo <= total <= hi:
        assert t.sum().value == total
    else:
        with pytest.raises(st.RangeError):
            t.sum()
    # Several blocks, the first of which forces the exact split path.
    rng = np.random.default_rng(5)
    big = rng.integers(lo, hi, 3 * BLOCK + 11, dtype=dtype.numpy, endpoint=True)
    big[: BLOCK // 2] = hi
    big[BLOCK // 2 : BLOCK] = lo if dtype.is_signed else 0
    exact = sum(int(v) for v in big.tolist())
    t = st.Tensor.from_numpy(big)
    if lo <= exact <= hi:
        assert t.sum().value == exact
    else:
        with pytest.raises(st.RangeError):
            t.sum()
    rows = big[: 3 * BLOCK].reshape(3, BLOCK)
    sums = [sum(int(v) for v in row.tolist()) for row in rows]
    if all(lo <= s <= hi for s in sums):
        assert st.Tensor.from_numpy(rows).sum(axis=1).tolist() == sums
    else:
        with pytest.raises(st.RangeError):
            st.Tensor.from_numpy(rows).sum(axis=1)


def test_int64_axis_sum_overflow_index() -> None:
    lo, hi = bounds(D.I64)
    t = st.tensor([[1, 2], [hi, 1], [lo, -1]], D.I64)
    with pytest.raises(st.RangeError, match=r"index \[1\]"):
        t.sum(axis=1)
    assert t.sum(axis=0, keepdims=True).tolist() == [[0, 2]]
    assert st.tensor([[hi, hi], [lo, lo + 1]], D.I64).sum(axis=0).tolist() == [-1, 0]


def test_sum_axis_forms() -> None:
    t = st.Tensor.from_numpy(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    a = np.arange(24).reshape(2, 3, 4)
    assert t.sum(axis=(0, 2)).tolist() == a.sum(axis=(0, 2)).tolist()
    assert t.sum(axis=[-1]).tolist() == a.sum(axis=-1).tolist()
    assert t.sum(axis=()).tolist() == a.tolist()
    assert t.sum(keepdims=True).shape == (1, 1, 1)
    assert t.sum(keepdims=True).tolist() == [[[276]]]
    assert t.sum(axis=1, keepdims=True).shape == (2, 1, 4)
    assert st.Tensor.zeros(D.I8, (0, 3)).sum() == st.Scalar(D.I8, 0)
    assert st.Tensor.zeros(D.I8, (0, 3)).sum(axis=0).tolist() == [0, 0, 0]
    assert st.Tensor.zeros(D.F16, (2, 0)).sum(axis=1).tolist() == [0.0, 0.0]
    with pytest.raises(st.IndexingError):
        t.sum(axis=3)
    with pytest.raises(st.IndexingError):
        t.sum(axis=(0, 0))
    with pytest.raises(st.IndexingError):
        t.sum(axis=True)
    with pytest.raises(st.IndexingError):
        st.Tensor.full(D.I8, (), 1).sum(axis=0)
    assert st.tensor([True], D.BOOL).sum() == st.Scalar(D.I64, 1)  # a count (test_toolkit)
    with pytest.raises(st.DTypeError, match="convert to F32"):
        st.tensor([1.0], D.F8_E4M3).sum()


# -- float sums -------------------------------------------------------------------------------


ADVERSARIAL = [
    [1e16, 1.0, -1e16],
    [1e308, 1e308, -1e308],
    [1e308, 1e308],
    [-1e308, -1e308, 1e307],
    [1.0, 2.0**-53],
    [1.0, 2.0**-53, 2.0**-110],
    [1.0, -(2.0**-54), -(2.0**-110)],
    [2.0**-1074] * 5 + [-(2.0**-1073)],
    [5e-324, -5e-324],
    [-0.0, -0.0],
    [0.1] * 10,
    [1e100, 1.0, -1e100, 1e-100],
    [math.inf, 1.0],
    [math.inf, -math.inf],
    [math.nan, 1.0],
    [1.7976931348623157e308, 1.7976931348623157e308 / 2**53, -1.0],
    [1.7976931348623157e308, 2.0**970],
    [1.7976931348623157e308, 2.0**970 - 2.0**917],
]


@pytest.mark.parametrize("values", ADVERSARIAL)
def test_f64_sums_equal_fsum_on_adversarial_data(values: list[float]) -> None:
    got = st.tensor(values, D.F64).sum().value
    want = exact_sum(values)
    assert (math.isnan(got) and math.isnan(want)) or (
        got == want and math.copysign(1, got) == math.copysign(1, want)
    )
    # The same values inside a long array, spread over several blocks and rows.
    padded = np.zeros(2 * BLOCK + 3)
    padded[:: (2 * BLOCK) // len(values)][: len(values)] = values
    got = st.Tensor.from_numpy(padded).sum().value
    assert (math.isnan(got) and math.isnan(want)) or got == want
    rows = np.zeros((3, len(values) + 2))
    rows[1, 1:-1] = values
    got_rows = st.Tensor.from_numpy(rows).sum(axis=1).tolist()
    assert got_rows[0] == 0.0 and got_rows[2] == 0.0
    assert (math.isnan(got_rows[1]) and math.isnan(want)) or got_rows[1] == want


@settings(max_examples=200, deadline=None)
@given(shapes(min_rank=1, max_rank=3, max_dim=6), hs.data())
def test_f64_sums_of_any_bits(dims: tuple[int, ...], data: hs.DataObject) -> None:
    array = data.draw(arrays(D.F64, dims))
    t = st.Tensor.from_numpy(array)
    got = t.sum().value
    want = exact_sum(array.reshape(-1).tolist())
    assert (math.isnan(got) and math.isnan(want)) or got == want
    axis = data.draw(hs.integers(0, len(dims) - 1))
    moved = np.moveaxis(array, axis, -1)
    result = t.sum(axis=axis).numpy()
    for index in np.ndindex(moved.shape[:-1]):
        w = exact_sum(moved[index].tolist())
        g = float(result[index])
        assert (math.isnan(g) and math.isnan(w)) or g == w


@settings(max_examples=60, deadline=None)
@given(hs.integers(0, 2**32 - 1), hs.sampled_from(["normal", "cancel", "spread", "ties"]))
def test_f64_large_sums_equal_fsum(seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3 * BLOCK))
    if kind == "normal":
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 5)
    elif kind == "cancel":
        half = rng.standard_normal(n // 2 + 1) * 1e10
        x = np.concatenate([half, -half[::-1], rng.standard_normal(3) * 1e-10])
    elif kind == "spread":
        x = rng.standard_normal(n) * np.exp2(rng.integers(-1000, 1000, n))
    else:
        x = np.ldexp(rng.integers(-(2**20), 2**20, n).astype(np.float64), 0)
        x[0] = 2.0**60
        x[-1] = 2.0**7  # the integer total lands next to a rounding midpoint of 2**60
    got = st.Tensor.from_numpy(x).sum().value
    assert got == exact_sum(x.tolist())
    rows = x[: (n // 7) * 7].reshape(7, -1)
    sums = st.Tensor.from_numpy(rows).sum(axis=1).tolist()
    assert sums == [exact_sum(r.tolist()) for r in rows]


@pytest.mark.parametrize("kind", ["normal", "cancel", "huge"])
def test_f64_long_rows_split_into_sub_rows(kind: str) -> None:
    """Rows longer than one block are summed as several sub-rows; still fsum's value."""
    rng = np.random.default_rng(len(kind))
    rows = rng.standard_normal((3, BLOCK + 4099))
    if kind == "cancel":
        rows[:, BLOCK // 2 :][:, : BLOCK // 2] = -rows[:, : BLOCK // 2]
        rows[:, BLOCK:] = 0.0
        rows[1, -1] = 2.0**-60
    elif kind == "huge":
        rows[0, 7] = 1.7976931348623157e308
        rows[0, BLOCK + 9] = -1.7976931348623157e308
        rows[2, 3] = 1e300
    got = st.Tensor.from_numpy(rows).sum(axis=1).tolist()
    assert got == [exact_sum(r.tolist()) for r in rows]
    columns = st.Tensor.from_numpy(np.ascontiguousarray(rows.T)).sum(axis=0).tolist()
    assert columns == got


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_axis_sums_under_cancellation(dtype: st.DType) -> None:
    rng = np.random.default_rng(4)
    half = (rng.standard_normal((4, 3000)) * 50).astype(dtype.numpy)
    rows = np.concatenate([half, -half, np.full((4, 1), 0.01, dtype=dtype.numpy)], axis=1)
    rows[2, 0] = 1000.0
    got = as_f64(st.Tensor.from_numpy(rows).sum(axis=1).numpy()).tolist()
    for g, row in zip(got, as_f64(rows), strict=True):
        assert ulps_apart(g, correctly_rounded(row.tolist(), dtype), dtype) <= 1


@settings(max_examples=200, deadline=None)
@given(hs.sampled_from(NARROW), shapes(min_rank=1, max_rank=2, max_dim=8), hs.data())
def test_narrow_float_sums_within_one_ulp(
    dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject
) -> None:
    array = data.draw(arrays(dtype, dims))
    t = st.Tensor.from_numpy(array)
    values = as_f64(array).reshape(-1).tolist()
    got = t.sum()
    assert got.dtype is dtype
    assert ulps_apart(got.value, correctly_rounded(values, dtype), dtype) <= 1
    result = as_f64(t.sum(axis=0).numpy())
    columns = as_f64(array).reshape(dims[0], math.prod(dims[1:]))
    for j, g in enumerate(result.reshape(-1).tolist()):
        assert ulps_apart(g, correctly_rounded(columns[:, j].tolist(), dtype), dtype) <= 1


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_float_sums_under_cancellation(dtype: st.DType) -> None:
    rng = np.random.default_rng(11)
    finfo_max = {D.F16: 60000.0, D.BF16: 1e38, D.F32: 1e38}[dtype]
    for n in (3, 1000, 3 * BLOCK + 5):
        half = (rng.standard_normal(n) * 100).astype(dtype.numpy)
        tiny = np.array([1e-3, 3e-3], dtype=dtype.numpy)
        values = np.concatenate([half, -half[::-1], tiny])
        for data in (values, np.array([finfo_max, 1.0, -finfo_max], dtype=dtype.numpy)):
            want = correctly_rounded(as_f64(data).tolist(), dtype)
            got = st.Tensor.from_numpy(data).sum().value
            assert ulps_apart(got, want, dtype) <= 1, (got, want)
    assert st.tensor([60000.0, 60000.0], D.F16).sum().value == math.inf


def test_sums_of_zeros_are_positive() -> None:
    assert math.copysign(1, st.tensor([-0.0, -0.0], D.F64).sum().value) == 1
    assert math.copysign(1, st.tensor([-0.0], D.F32).sum().value) == 1
    assert st.Tensor.zeros(D.F64, (0,)).sum() == st.Scalar(D.F64, 0.0)
    assert st.tensor([[-0.0, -0.0]], D.BF16).sum(axis=1).tolist() == [0.0]


# -- matmul -----------------------------------------------------------------------------------


@hs.composite
def matmul_shapes(draw: hs.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    m, k, n = (draw(hs.integers(0, 4)) for _ in range(3))
    batch = draw(hs.lists(hs.integers(1, 3), max_size=2))
    left_batch = [draw(hs.sampled_from([d, 1])) for d in batch][draw(hs.integers(0, len(batch))) :]
    right_batch = [draw(hs.sampled_from([d, 1])) for d in batch][draw(hs.integers(0, len(batch))) :]
    left = (k,) if draw(hs.integers(0, 4)) == 0 else (*left_batch, m, k)
    right = (k,) if draw(hs.integers(0, 4)) == 0 else (*right_batch, k, n)
    return left, right


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from(INTS), matmul_shapes(), hs.data())
def test_integer_matmul_is_exact(dtype: st.DType, dims: Any, data: hs.DataObject) -> None:
    lo, hi = bounds(dtype)
    scale = data.draw(hs.sampled_from([2, 100, hi]))
    low = max(lo, -scale)
    a = np.array(
        data.draw(
            hs.lists(
                hs.integers(low, min(hi, scale)),
                min_size=math.prod(dims[0]),
                max_size=math.prod(dims[0]),
            )
        ),
        dtype=dtype.numpy,
    ).reshape(dims[0])
    b = np.array(
        data.draw(
            hs.lists(
                hs.integers(low, min(hi, scale)),
                min_size=math.prod(dims[1]),
                max_size=math.prod(dims[1]),
            )
        ),
        dtype=dtype.numpy,
    ).reshape(dims[1])
    exact = np.matmul(a.astype(object), b.astype(object))
    ta, tb = st.Tensor.from_numpy(a), st.Tensor.from_numpy(b)
    flat = np.asarray(exact).reshape(-1).tolist()
    bad = [i for i, v in enumerate(flat) if not lo <= v <= hi]
    if bad:
        with pytest.raises(st.RangeError) as caught:
            ta @ tb
        index = [int(i) for i in np.unravel_index(bad[0], np.shape(exact))]
        assert str(index) in str(caught.value)
    else:
        result = ta @ tb
        assert result.dtype is dtype and result.shape == np.shape(exact)
        assert result.numpy().reshape(-1).tolist() == flat


@pytest.mark.parametrize("dtype", [D.I64, D.U64, D.I32, D.U32])
def test_integer_matmul_with_full_range_values(dtype: st.DType) -> None:
    lo, hi = bounds(dtype)
    rng = np.random.default_rng(3)
    a = rng.integers(lo, hi, (5, 7), dtype=dtype.numpy, endpoint=True)
    identity = np.eye(7, dtype=dtype.numpy)
    assert (st.Tensor.from_numpy(a) @ st.Tensor.from_numpy(identity)).numpy().tolist() == a.tolist()
    # Huge products that cancel exactly still give the exact (small) answer.
    if dtype.is_signed:
        pair = st.tensor([[hi, hi], [lo, hi]], dtype)
        with pytest.raises(st.RangeError, match=r"\[1, 0\]"):
            pair @ st.tensor([[1], [-1]], dtype)
        assert (pair[:1] @ st.tensor([[1], [-1]], dtype)).tolist() == [[0]]
        assert (
            st.tensor([[hi, hi, lo]], dtype) @ st.tensor([[hi], [-hi], [1]], dtype)
        ).tolist() == [[lo]]
        with pytest.raises(st.RangeError, match=r"\[0, 0\]"):
            st.tensor([[lo, 0]], dtype) @ st.tensor([[-1], [0]], dtype)
    else:
        assert (st.tensor([[hi, 1]], dtype) @ st.tensor([[1], [0]], dtype)).tolist() == [[hi]]
        with pytest.raises(st.RangeError, match=r"\[0, 1\]"):
            st.tensor([[hi, 1]], dtype) @ st.tensor([[1, 1], [0, 1]], dtype)


def test_large_integer_matmul_near_the_exactness_thresholds() -> None:
    rng = np.random.default_rng(9)
    for low, high, k in ((-128, 127, 600), (-(2**15), 2**15 - 1, 300), (-(2**30), 2**30, 7)):
        a = rng.integers(low, high, (9, k), endpoint=True).astype(np.int64)
        b = rng.integers(low, high, (k, 5), endpoint=True).astype(np.int64)
        exact = np.matmul(a.astype(object), b.astype(object))
        got = st.Tensor.from_numpy(a) @ st.Tensor.from_numpy(b)
        assert got.numpy().tolist() == exact.tolist()


@settings(max_examples=200, deadline=None)
@given(hs.sampled_from([D.F32, D.F64]), matmul_shapes(), hs.data())
def test_float_matmul_is_numpy_matmul(dtype: st.DType, dims: Any, data: hs.DataObject) -> None:
    a = data.draw(arrays(dtype, dims[0]))
    b = data.draw(arrays(dtype, dims[1]))
    with np.errstate(all="ignore"):
        expected = np.matmul(a, b)
    result = st.Tensor.from_numpy(a) @ st.Tensor.from_numpy(b)
    assert result.shape == expected.shape and result.dtype is dtype
    assert np.array_equal(result.numpy(), expected, equal_nan=True)


@pytest.mark.parametrize("dtype", [D.F16, D.BF16])
def test_half_matmul_accumulates_in_f32(dtype: st.DType) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 64)).astype(dtype.numpy)
    b = rng.standard_normal((64, 4)).astype(dtype.numpy)
    want = np.matmul(as_f64(a).astype(np.float32), as_f64(b).astype(np.float32))
    got = st.Tensor.from_numpy(a) @ st.Tensor.from_numpy(b)
    assert got.dtype is dtype
    expected = [round_exact(dtype, float(v)) for v in want.reshape(-1).tolist()]
    assert as_f64(got.numpy()).reshape(-1).tolist() == expected
    # A sum that F16/BF16 accumulation would lose entirely.
    ones = st.Tensor.full(dtype, (1, 4096), 1.0)
    assert (ones @ st.Tensor.full(dtype, (4096, 1), 1.0)).tolist() == [[4096.0]]


def test_matmul_errors() -> None:
    a = st.tensor([[1, 2], [3, 4]], D.I32)
    with pytest.raises(st.ShapeError, match=r"\[2, 2\].*\[3\]"):
        a @ st.tensor([1, 2, 3], D.I32)
    with pytest.raises(st.ShapeError):
        a @ st.Tensor.full(D.I32, (), 1)
    with pytest.raises(st.ShapeError):
        a @ 2
    with pytest.raises(st.ShapeError):
        2 @ a
    with pytest.raises(st.RangeError):
        a @ 2**40
    with pytest.raises(st.DTypeError):
        a @ st.tensor([[1, 2], [3, 4]], D.I64)
    with pytest.raises(st.DTypeError):
        a.matmul(np.eye(2))
    with pytest.raises(st.DTypeError, match="BOOL"):
        st.tensor([[True]], D.BOOL) @ st.tensor([[True]], D.BOOL)
    with pytest.raises(st.DTypeError, match="convert to F32"):
        st.tensor([[1.0]], D.F8_E5M2) @ st.tensor([[1.0]], D.F8_E5M2)
    with pytest.raises(st.ShapeError, match="batch"):
        st.Tensor.zeros(D.F32, (2, 1, 1)) @ st.Tensor.zeros(D.F32, (3, 1, 1))
    with pytest.raises(st.LimitError):
        st.Tensor.zeros(D.F32, (2**17 + 1, 1, 1, 1)) @ st.Tensor.zeros(D.F32, (2**17, 1, 1))
    assert (st.tensor([1, 2], D.I32) @ st.tensor([3, 4], D.I32)).tolist() == 11
    assert a.matmul(st.tensor([1, 1], D.I32)).tolist() == [3, 7]
    assert (st.Tensor.zeros(D.I64, (2, 0)) @ st.Tensor.zeros(D.I64, (0, 3))).tolist() == [
        [0] * 3
    ] * 2
