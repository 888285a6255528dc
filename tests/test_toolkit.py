"""The comparison reductions (min, max, argmin, argmax, any, all, count_nonzero), the BOOL
sum as a count and the exact mean: NumPy and exact rationals as the oracles, over every
dtype, layout and axis form. Selection and joining are in ``test_toolkit_select``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.floats import round_exact
from strided._kernels import argfind as _argfind

from .strategies import ALL_DTYPES, arrays, shapes
from .test_reduce import ulps_apart

D = st.DType
FP8 = [d for d in ALL_DTYPES if d.is_storage_only]
FLOATS = [D.F16, D.BF16, D.F32, D.F64]
INTS = [D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64]


# -- strategies -------------------------------------------------------------------------------


def interesting(dtype: st.DType) -> list[Any]:
    """Values at the edges of ``dtype``: extremes, zeros of both signs, NaN, infinities."""
    if dtype is D.BOOL:
        return [False, True]
    lo, hi = dtype.min.value, dtype.max.value
    if dtype.is_integer:
        return [lo, lo + 1, -1 if lo else 0, 0, 1, hi - 1, hi]
    values = [lo, hi, 0.0, -0.0, math.nan, 1.0, -1.0, 0.5, hi / 2]
    if dtype is not D.F8_E4M3:
        values += [math.inf, -math.inf]
    return [v for v in values if dtype is not D.F8_E8M0 or (v > 0 or math.isnan(v))]


@hs.composite
def edge_arrays(draw: hs.DrawFn, dtype: st.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Random bit patterns (every value occurs) or a mix of the dtype's edge values."""
    if draw(hs.booleans()):
        return draw(arrays(dtype, shape))
    count = math.prod(shape)
    picks = draw(hs.lists(hs.sampled_from(interesting(dtype)), min_size=count, max_size=count))
    with np.errstate(all="ignore"):
        return np.array(picks, dtype=dtype.numpy).reshape(shape)


@hs.composite
def laid_out(
    draw: hs.DrawFn, dtype: st.DType, max_rank: int = 4, max_dim: int = 4
) -> tuple[st.Tensor, np.ndarray]:
    """A tensor (contiguous, transposed, reversed or stepped) and the NumPy view of it."""
    shape = draw(shapes(0, max_rank, max_dim))
    layout = draw(hs.sampled_from(["contiguous", "transposed", "reversed", "stepped"]))
    if layout == "transposed":
        base = draw(edge_arrays(dtype, shape[::-1]))
        return st.Tensor.from_numpy(base).transpose(), base.T
    if layout == "contiguous":
        base = draw(edge_arrays(dtype, shape))
        return st.Tensor.from_numpy(base), base
    step = -1 if layout == "reversed" else -2
    base = draw(edge_arrays(dtype, tuple(-step * d for d in shape)))
    key = (slice(None, None, step),) * len(shape)
    return st.Tensor.from_numpy(base)[key], base[(*key, ...)]


@hs.composite
def axes(draw: hs.DrawFn, ndim: int) -> Any:
    """None, an int or a tuple of distinct axes, each possibly negative."""
    kind = draw(hs.integers(0, 2))
    if kind == 0 or ndim == 0:
        return None if kind != 2 else ()
    if kind == 1:
        return draw(hs.integers(-ndim, ndim - 1))
    chosen = draw(hs.permutations(range(ndim)))[: draw(hs.integers(0, ndim))]
    return tuple(a - ndim if draw(hs.booleans()) else a for a in chosen)


def bits_equal(found: Any, expected: np.ndarray) -> None:
    """Same dtype, shape and values: bit patterns, except that any NaN matches any NaN."""
    got = np.asarray(found.numpy() if isinstance(found, st.Tensor) else found)
    expected = np.asarray(expected)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    if got.dtype.kind in "biu":
        assert np.array_equal(got, expected)
        return
    with np.errstate(all="ignore"):
        nan = np.isnan(got.astype(np.float32))
        assert np.array_equal(nan, np.isnan(expected.astype(np.float32)))
    bits = np.dtype(f"<u{got.itemsize}")
    assert np.array_equal(got.view(bits)[~nan], expected.view(bits)[~nan])


def as_array(result: Any, dtype: st.DType) -> np.ndarray:
    """A Scalar or Tensor result as a NumPy array of ``dtype``."""
    if isinstance(result, st.Scalar):
        assert result.dtype is dtype
        with np.errstate(all="ignore"):
            return np.array(result.value, dtype=dtype.numpy)
    assert isinstance(result, st.Tensor) and result.dtype is dtype
    return result.numpy()


# -- min, max, argmin, argmax -----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_min_max_match_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    tensor, view = data.draw(laid_out(dtype))
    axis = data.draw(axes(view.ndim))
    keepdims = data.draw(hs.booleans())
    for name, reduce in (("min", np.minimum.reduce), ("max", np.maximum.reduce)):
        method = getattr(tensor, name)
        if dtype.is_storage_only:
            with pytest.raises(st.DTypeError, match="convert to F32"):
                method(axis=axis, keepdims=keepdims)
            continue
        full = tuple(range(view.ndim)) if axis is None else axis
        try:
            with np.errstate(all="ignore"):
                expected = reduce(view, axis=full, keepdims=keepdims)
        except ValueError:
            with pytest.raises(st.ShapeError, match=name):
                method(axis=axis, keepdims=keepdims)
            continue
        found = method(axis=axis, keepdims=keepdims)
        assert isinstance(found, st.Scalar) == (axis is None and not keepdims)
        bits_equal(as_array(found, dtype), np.asarray(expected, dtype=dtype.numpy))


@pytest.mark.parametrize("block", [None, 1, 8])  # large arrays are searched in blocks
@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_argmin_argmax_match_numpy(block: int | None, data: hs.DataObject) -> None:
    with _blocks_of(block):
        _argmin_argmax_match_numpy(data)


@contextmanager
def _blocks_of(size: int | None) -> Iterator[None]:
    """Let argmin/argmax search arrays past ``2 * size`` bytes in blocks of ``size``."""
    saved = _argfind.BLOCK_BYTES
    _argfind.BLOCK_BYTES = saved if size is None else size
    try:
        yield
    finally:
        _argfind.BLOCK_BYTES = saved


def _argmin_argmax_match_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    tensor, view = data.draw(laid_out(dtype))
    axis = data.draw(hs.none() | hs.integers(-view.ndim, view.ndim - 1)) if view.ndim else None
    keepdims = data.draw(hs.booleans())
    for name in ("argmin", "argmax"):
        method = getattr(tensor, name)
        if dtype.is_storage_only:
            with pytest.raises(st.DTypeError):
                method(axis=axis, keepdims=keepdims)
            continue
        try:
            with np.errstate(all="ignore"):
                expected = getattr(np, name)(view, axis=axis, keepdims=keepdims)
        except ValueError:
            with pytest.raises(st.ShapeError, match=name):
                method(axis=axis, keepdims=keepdims)
            continue
        found = method(axis=axis, keepdims=keepdims)
        bits_equal(as_array(found, D.I64), np.asarray(expected, dtype=np.int64))


def test_nan_propagates_and_the_first_nan_is_the_arg() -> None:
    for dtype in FLOATS:
        t = st.tensor([1.0, math.nan, 3.0, math.nan, -2.0], dtype)
        assert math.isnan(t.max().value) and math.isnan(t.min().value)
        assert t.argmax() == st.Scalar(D.I64, 1) and t.argmin() == st.Scalar(D.I64, 1)
        assert t[2:].argmax().value == 1  # the NaN at position 3, first within the view
    t = st.tensor([[3, 9, 9], [-7, -7, 0]], D.I8)
    assert t.argmax(axis=1).tolist() == [1, 2] and t.argmin(axis=-1).tolist() == [0, 0]
    assert t.T.argmax().value == 2  # flattened row-major order of the transposed view


def test_extremes_of_integers_and_bool() -> None:
    for dtype in INTS:
        lo, hi = dtype.min.value, dtype.max.value
        t = st.tensor([[0, hi], [lo, 1]], dtype)
        assert t.max() == st.Scalar(dtype, hi) and t.min() == st.Scalar(dtype, lo)
        assert t.max(axis=0).tolist() == [0, hi] and t.min(axis=1).tolist() == [0, lo]
    b = st.tensor([False, True], D.BOOL)
    assert b.max() == st.Scalar(D.BOOL, True) and b.min() == st.Scalar(D.BOOL, False)
    assert b.argmax().value == 1


def test_reductions_of_nothing() -> None:
    empty = st.Tensor.zeros(D.F32, (0, 3))
    for name in ("min", "max", "argmin", "argmax"):
        with pytest.raises(st.ShapeError, match=f"^{name}: nothing to reduce"):
            getattr(empty, name)()
        with pytest.raises(st.ShapeError, match=name):
            getattr(empty, name)(axis=0)
    assert empty.max(axis=1).shape == (0,)  # the reduced axis has elements: empty result
    assert empty.argmin(axis=1).shape == (0,)
    assert empty.any() == st.Scalar(D.BOOL, False)
    assert empty.all() == st.Scalar(D.BOOL, True)
    assert empty.any(axis=0).tolist() == [False] * 3
    assert empty.all(axis=0).tolist() == [True] * 3
    assert empty.count_nonzero() == st.Scalar(D.I64, 0)
    assert empty.sum(axis=0).tolist() == [0.0] * 3
    assert math.isnan(empty.mean().value)
    assert [math.isnan(v) for v in empty.mean(axis=0).tolist()] == [True] * 3


def test_axis_errors() -> None:
    t = st.Tensor.zeros(D.I32, (2, 3))
    for name in ("min", "max", "any", "all", "count_nonzero", "mean", "sum"):
        method = getattr(t, name)
        for bad in (2, -3, (0, 0), (1, -1), True, "0", 1.0):
            with pytest.raises(st.IndexingError, match=name):
                method(axis=bad)
    for name in ("argmin", "argmax"):
        for bad in (2, -3, (0,), (0, 1), True):
            with pytest.raises(st.IndexingError, match=name):
                getattr(t, name)(axis=bad)
    with pytest.raises(st.IndexingError):
        st.Tensor.zeros(D.I32, ()).argmax(axis=0)


def test_storage_only_dtypes() -> None:
    for dtype in FP8:
        t = st.Tensor.full(dtype, (2,), 1.0)
        for name in ("sum", "mean", "min", "max", "argmin", "argmax", "any", "all"):
            with pytest.raises(st.DTypeError, match=f"{name}: {dtype.name} is storage-only"):
                getattr(t, name)()
        with pytest.raises(st.DTypeError):
            t.count_nonzero()
        assert t.convert(D.F32).max() == st.Scalar(D.F32, 1.0)  # the documented detour


# -- any, all, count_nonzero, BOOL sum --------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_any_all_count_nonzero_and_bool_sum_match_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    tensor, view = data.draw(laid_out(dtype))
    axis = data.draw(axes(view.ndim))
    keepdims = data.draw(hs.booleans())
    full = tuple(range(view.ndim)) if axis is None else axis
    scalar = axis is None and not keepdims
    if dtype.is_storage_only:
        with pytest.raises(st.DTypeError):
            tensor.any(axis=axis, keepdims=keepdims)
        return
    with np.errstate(all="ignore"):
        expected_any = np.any(view, axis=full, keepdims=keepdims)
        expected_all = np.all(view, axis=full, keepdims=keepdims)
        expected_count = np.count_nonzero(view, axis=full, keepdims=keepdims)
    for found, expected, result in (
        (tensor.any(axis=axis, keepdims=keepdims), expected_any, D.BOOL),
        (tensor.all(axis=axis, keepdims=keepdims), expected_all, D.BOOL),
        (tensor.count_nonzero(axis=axis, keepdims=keepdims), expected_count, D.I64),
    ):
        assert isinstance(found, st.Scalar) == scalar
        bits_equal(as_array(found, result), np.asarray(expected, dtype=result.numpy))
    if dtype is D.BOOL:
        found = tensor.sum(axis=axis, keepdims=keepdims)
        expected = np.sum(view, axis=full, keepdims=keepdims)
        assert np.asarray(expected).dtype == np.int64  # NumPy's sum of bools is int64 too
        bits_equal(as_array(found, D.I64), np.asarray(expected))


def test_nan_is_nonzero_and_negative_zero_is_zero() -> None:
    for dtype in FLOATS:
        t = st.tensor([0.0, -0.0, math.nan], dtype)
        assert t.count_nonzero() == st.Scalar(D.I64, 1)
        assert t[:2].any() == st.Scalar(D.BOOL, False)
        assert t[2:].all() == st.Scalar(D.BOOL, True)


def test_bool_sum_counts_into_i64() -> None:
    b = st.tensor([[True, False, True], [True, True, True]], D.BOOL)
    assert b.sum() == st.Scalar(D.I64, 5)
    assert b.sum(axis=0) == st.tensor([2, 1, 2], D.I64)
    assert b.sum(axis=-1, keepdims=True) == st.tensor([[2], [3]], D.I64)
    assert b.sum(keepdims=True) == st.tensor([[5]], D.I64)


# -- mean -------------------------------------------------------------------------------------


def exact_mean(values: list[Any]) -> Fraction | float:
    """The exact mean (a Fraction), or the IEEE special value NumPy gives."""
    if not values or any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    infinities = {v for v in values if isinstance(v, float) and math.isinf(v)}
    if infinities:
        return math.nan if len(infinities) == 2 else infinities.pop()
    return sum((Fraction(v) for v in values), Fraction(0)) / len(values)


def check_mean(found: float, values: list[Any], dtype: st.DType) -> None:
    exact = exact_mean(values)
    if isinstance(exact, float):
        assert found == exact or (math.isnan(found) and math.isnan(exact)), (found, exact)
        return
    if dtype.is_float and dtype is not D.F64:
        assert ulps_apart(found, round_exact(dtype, exact), dtype) <= 1, (found, exact)
    else:
        expected = round_exact(D.F64, exact)
        assert found == expected and math.copysign(1, found) == math.copysign(1, expected)


@settings(max_examples=250, deadline=None)
@given(hs.data())
def test_mean_is_the_exact_mean_rounded(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from([d for d in ALL_DTYPES if not d.is_storage_only]))
    tensor, view = data.draw(laid_out(dtype))
    axis = data.draw(axes(view.ndim))
    keepdims = data.draw(hs.booleans())
    result_dtype = dtype if dtype.is_float else D.F64
    found = as_array(tensor.mean(axis=axis, keepdims=keepdims), result_dtype)
    picked = range(view.ndim) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    full = tuple(a % view.ndim for a in picked)
    kept = [i for i in range(view.ndim) if i not in full]
    length = math.prod(view.shape[i] for i in full)
    rows = np.transpose(view, [*kept, *full]).reshape(-1, length) if length else []
    expected_shape = (
        [1 if i in full else d for i, d in enumerate(view.shape)]
        if keepdims
        else [view.shape[i] for i in kept]
    )
    assert list(found.shape) == expected_shape
    if not length:
        assert np.isnan(found.astype(np.float64)).all()
        return
    for got, row in zip(found.reshape(-1).tolist(), rows.tolist(), strict=True):
        check_mean(float(got), row, dtype)


def test_mean_never_overflows_through_the_sum() -> None:
    for dtype in FLOATS:
        top = dtype.max.value
        t = st.tensor([top, top, top], dtype)
        assert t.mean() == st.Scalar(dtype, top)
        assert t.mean(axis=0) == st.Tensor.full(dtype, (), top)
        assert st.tensor([[top, -top, top]], dtype).mean(axis=1).tolist() == [
            round_exact(dtype, Fraction(top) / 3)
        ]
    assert st.tensor([2**63 - 1] * 3, D.I64).mean() == st.Scalar(D.F64, 2.0**63)
    assert st.tensor([2**64 - 1, 2**64 - 2], D.U64).mean().value == float(2**64 - 1)


def test_mean_with_cancellation_is_exact() -> None:
    # The F64 sum in any order loses the 1.0 here; the exact path does not.
    for dtype in (D.F32, D.F64, D.BF16):
        big = 2.0**100
        t = st.tensor([[big, 1.0, -big], [1.0, 2.0, 4.0]], dtype)
        means = t.mean(axis=1).tolist()
        assert means == [round_exact(dtype, Fraction(1, 3)), round_exact(dtype, Fraction(7, 3))]
    t = st.tensor([0.1, 0.2, 0.3, 1e300, -1e300], D.F64)
    expected = (Fraction(0.1) + Fraction(0.2) + Fraction(0.3)) / 5
    assert t.mean().value == float(expected)


def test_mean_of_integers_is_f64_and_exact() -> None:
    t = st.tensor([[1, 2], [3, 5]], D.I8)
    assert t.mean() == st.Scalar(D.F64, 2.75)
    assert t.mean(axis=0) == st.tensor([2.0, 3.5], D.F64)
    big = st.tensor([2**62 + 1, 2**62 + 2, 2**62 + 4], D.I64)
    assert big.mean().value == float(Fraction(3 * 2**62 + 7, 3))
    assert st.tensor([True, False, False, False], D.BOOL).mean() == st.Scalar(D.F64, 0.25)
    assert st.tensor([-0.0, -0.0], D.F64).mean().value == 0.0  # exact zero is +0.0
    assert math.copysign(1, st.tensor([-(2.0**-1074), 0.0, 0.0], D.F64).mean().value) == -1


@settings(max_examples=100, deadline=None)
@given(
    hs.sampled_from([D.I64, D.U64]),
    hs.lists(hs.lists(hs.integers(-(2**63), 2**64 - 1), min_size=3, max_size=3), min_size=1),
)
def test_i64_u64_row_means_are_exact_whatever_the_other_rows_hold(
    dtype: st.DType, rows: list[list[int]]
) -> None:
    low, high = (-(2**63), 2**63 - 1) if dtype is D.I64 else (0, 2**64 - 1)
    rows = [[min(max(v, low), high) for v in row] for row in rows]
    rows.append([1, 2, 4])  # an ordinary row next to rows of huge values
    means = st.Tensor.from_numpy(np.array(rows, dtype=dtype.numpy)).mean(axis=1)
    assert means.numpy().tolist() == [float(Fraction(sum(row), 3)) for row in rows]


@hs.composite
def f64_rows(draw: hs.DrawFn) -> np.ndarray:
    """F64 rows of ordinary magnitudes, cancellation or near-ties: the certified path."""
    count, length = draw(hs.integers(1, 4)), draw(hs.integers(1, 40))
    kind = draw(hs.sampled_from(["spread", "ties", "cancel"]))
    if kind == "ties":  # means that fall exactly on, or next to, a rounding midpoint
        base = draw(hs.floats(-1e10, 1e10, allow_nan=False, allow_subnormal=False))
        steps = draw(hs.lists(hs.integers(0, 3), min_size=length, max_size=length))
        row = [base + s * math.ulp(base) for s in steps]
        return np.array([row] * count)
    values = hs.floats(-1e30, 1e30, allow_nan=False, allow_infinity=False)
    data = draw(hs.lists(values, min_size=count * length, max_size=count * length))
    rows = np.array(data).reshape(count, length)
    if kind == "cancel":
        rows = np.concatenate([rows, -rows[:, :-1]], axis=1)
    return rows


@settings(max_examples=300, deadline=None)
@given(f64_rows())
def test_f64_mean_rows_are_correctly_rounded(rows: np.ndarray) -> None:
    found = st.Tensor.from_numpy(rows).mean(axis=-1).tolist()
    for got, row in zip(found, rows.tolist(), strict=True):
        check_mean(got, row, D.F64)
    flipped = st.Tensor.from_numpy(rows.T.copy()).T.mean(axis=1).tolist()  # a view
    assert flipped == found


def test_argmin_argmax_of_arrays_larger_than_a_block() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(-50, 50, (700, 1000)).astype(np.float32)  # many ties
    values[650, 3] = values[651, 9] = np.nan  # both in a late block; the first wins
    full = st.Tensor.from_numpy(values)
    cases = [(full, values), (full[:600], values[:600]), (full.T, values.T)]
    cases.append((full[:, ::-1], values[:, ::-1]))
    for tensor, array in cases:
        for name in ("argmin", "argmax"):
            find = getattr(np, name)
            assert getattr(tensor, name)().value == find(array)
            for axis in (0, 1):
                found = getattr(tensor, name)(axis=axis, keepdims=bool(axis))
                assert np.array_equal(found.numpy(), find(array, axis, keepdims=bool(axis)))
    assert st.Tensor.from_numpy(values).argmax().value == 650 * 1000 + 3
