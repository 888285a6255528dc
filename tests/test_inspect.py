"""Inspection: samples and statistics equal NumPy's over the same samples, on any layout.

The oracle flattens the NumPy view (a copy is fine in a test), picks the positions the
SPEC defines for each strategy, and computes every statistic with NumPy and exact
Python arithmetic over those values.
"""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import basic_indices, laid_out

F32 = st.DType.F32


@hs.composite
def views(draw: hs.DrawFn) -> tuple[st.Tensor, np.ndarray]:
    """A laid-out tensor, sometimes sliced further, and the equal NumPy view."""
    tensor, view = draw(laid_out(max_dim=6))
    if draw(hs.booleans()):
        index = draw(basic_indices(view.shape))
        items = index if type(index) is tuple else (index,)
        if Ellipsis not in items:
            items = (*items, Ellipsis)
        tensor, view = tensor[index], view[items]
    assert tensor.to_le_bytes() == view.tobytes()
    return tensor, view


def expected_positions(numel: int, max_samples: int, strategy: str) -> list[int]:
    count = min(max_samples, st.MAX_INSPECTION_SAMPLES, numel)
    if strategy == "head":
        return list(range(count))
    return [i * numel // count for i in range(count)]


def same_value(scalar: st.Scalar, value: Any, dtype: st.DType) -> bool:
    """``scalar`` holds exactly the NumPy element ``value`` (every NaN equal)."""
    if scalar.dtype is not dtype:
        return False
    if dtype.is_float:
        number = float(np.float64(value))
        if math.isnan(number):
            return math.isnan(scalar.value)
        return scalar.value == number and math.copysign(1, scalar.value) == math.copysign(1, number)
    return type(scalar.value) is (bool if dtype is st.DType.BOOL else int) and scalar.value == value


def check_against_numpy(
    result: st.TensorInspection,
    tensor: st.Tensor,
    view: np.ndarray,
    max_samples: int,
    strategy: str,
) -> None:
    dtype = tensor.dtype
    positions = expected_positions(view.size, max_samples, strategy)
    values = view.reshape(-1)[positions]

    assert result.dtype is dtype
    assert result.shape == view.shape and isinstance(result.shape, st.Shape)
    assert result.strides == tuple(s // view.itemsize for s in view.strides) or view.size == 0
    assert result.strides == tensor.strides
    assert result.numel == view.size
    assert result.byte_len == view.nbytes
    assert result.storage_byte_len == tensor.storage_byte_len
    assert result.is_contiguous == tensor.is_contiguous
    assert [index for index, _ in result.samples] == positions
    assert all(same_value(s, v, dtype) for (_, s), v in zip(result.samples, values, strict=True))
    assert result.sampled == len(positions)
    assert result.complete == (len(positions) == view.size)

    if dtype.is_float:
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN payloads
            wide = values.astype(np.float64)
        nan = np.isnan(wide)
        real = wide[~nan]
        assert result.nan_count == int(nan.sum())
        assert result.inf_count == int(np.isinf(wide).sum())
        assert result.zero_count == int((wide == 0).sum())
        check_float_extremes(result, real, dtype)
        check_float_mean(result.mean, real)
    else:
        assert (result.nan_count, result.inf_count) == (0, 0)
        assert result.zero_count == int((values == 0).sum())
        if values.size == 0:
            assert (result.min, result.max, result.mean) == (None, None, None)
        else:
            assert result.min == st.Scalar(dtype, int(values.min()))
            assert result.max == st.Scalar(dtype, int(values.max()))
            ints = [int(v) for v in values.tolist()]
            assert result.mean == float(Fraction(sum(ints), len(ints)))
            assert result.mean == pytest.approx(float(np.mean(values.astype(np.float64))))


def check_float_extremes(result: st.TensorInspection, real: np.ndarray, dtype: st.DType) -> None:
    if real.size == 0:
        assert result.min is None and result.max is None
        return
    low, high = float(np.min(real)), float(np.max(real))
    zeros = real[real == 0]
    if low == 0:  # IEEE 754-2019 minimum: -0.0 < +0.0
        low = -0.0 if np.signbit(zeros).any() else 0.0
    if high == 0:
        high = 0.0 if (~np.signbit(zeros)).any() else -0.0
    assert result.min == st.Scalar(dtype, low)
    assert result.max == st.Scalar(dtype, high)


def check_float_mean(mean: float | None, real: np.ndarray) -> None:
    if real.size == 0:
        assert mean is None
        return
    assert isinstance(mean, float)
    infinities = set(real[np.isinf(real)].tolist())
    if infinities == {math.inf, -math.inf}:
        assert math.isnan(mean)
    elif infinities:
        assert mean == infinities.pop()
    else:
        exact = sum(map(Fraction, real.tolist()), Fraction(0)) / real.size
        error = abs(Fraction(mean) - exact)
        assert error <= 2 * Fraction(math.ulp(float(exact))) + Fraction(2) ** -1000


@settings(max_examples=400, deadline=None)
@given(views(), hs.integers(0, 400), hs.sampled_from(["head", "spread"]))
def test_inspection_equals_numpy_over_the_same_samples(
    source: tuple[st.Tensor, np.ndarray], max_samples: int, strategy: str
) -> None:
    tensor, view = source
    before = tensor.to_le_bytes()
    result = tensor.inspect(st.TensorInspectionOptions(max_samples, strategy))
    check_against_numpy(result, tensor, view, max_samples, strategy)
    assert tensor.to_le_bytes() == before


@pytest.mark.parametrize("dtype", list(st.DType))
@pytest.mark.parametrize("strategy", ["head", "spread"])
def test_every_dtype_on_a_transposed_reversed_view(dtype: st.DType, strategy: str) -> None:
    raw = np.random.default_rng(7).integers(0, 256, size=6 * 7 * dtype.itemsize, dtype=np.uint8)
    if dtype is st.DType.BOOL:
        raw &= 1
    tensor = st.Tensor.from_le_bytes(dtype, (6, 7), raw.tobytes()).transpose()[::-1, 1::2]
    view = np.frombuffer(raw.tobytes(), dtype=dtype.numpy).reshape(6, 7).T[::-1, 1::2]
    assert not tensor.is_contiguous
    for max_samples in (0, 1, 5, 1000):
        result = tensor.inspect(st.TensorInspectionOptions(max_samples, strategy))
        check_against_numpy(result, tensor, view, max_samples, strategy)


def test_fixed_float_example() -> None:
    values = [[1.5, math.nan, -0.0], [0.0, math.inf, 3.0]]
    result = st.tensor(values, "F32").inspect()
    assert result.sampled == result.numel == 6 and result.complete
    assert result.min == st.Scalar(F32, -0.0) and result.max == st.Scalar(F32, math.inf)
    assert (result.nan_count, result.inf_count, result.zero_count) == (1, 1, 2)
    assert result.mean == math.inf
    spread = st.tensor(values, "F32").T.inspect(st.TensorInspectionOptions(3, "spread"))
    assert [index for index, _ in spread.samples] == [0, 2, 4]
    assert [s for _, s in spread.samples][::2] == [st.Scalar(F32, 1.5), st.Scalar(F32, -0.0)]
    assert spread.mean == 0.75 and not spread.complete and not spread.is_contiguous
    both = st.tensor([math.inf, -math.inf, 1.0], "F64").inspect()
    assert both.mean is not None and math.isnan(both.mean)
    nans = st.tensor([math.nan, math.nan], "F16").inspect()
    assert (nans.min, nans.max, nans.mean, nans.nan_count) == (None, None, None, 2)


def test_mean_is_exact_for_wide_integers_and_huge_floats() -> None:
    top = 2**64 - 1
    assert st.tensor([top, top, top - 1], "U64").inspect().mean == float(Fraction(3 * top - 1, 3))
    low = -(2**63)
    assert st.tensor([low, low], "I64").inspect().mean == float(low)
    big = np.finfo(np.float64).max
    result = st.tensor([big, big, -big], "F64").inspect()  # the F64 sum overflows midway
    assert result.mean == pytest.approx(big / 3, rel=1e-15)
    flags = st.tensor([True, False, True, True], "BOOL").inspect()
    assert (flags.mean, flags.zero_count) == (0.75, 1)
    assert (flags.min, flags.max) == (
        st.Scalar(st.DType.BOOL, False),
        st.Scalar(st.DType.BOOL, True),
    )


def test_zero_samples_empty_and_rank_zero_tensors() -> None:
    t = st.tensor([[1, 2], [3, 4]], "I32")
    none = t.inspect(st.TensorInspectionOptions(max_samples=0))
    assert (none.samples, none.sampled, none.complete) == ((), 0, False)
    assert (none.min, none.max, none.mean, none.zero_count) == (None, None, None, 0)
    assert none.numel == 4 and none.byte_len == 16
    empty = st.Tensor.zeros("F32", (3, 0, 2)).inspect(st.TensorInspectionOptions(10, "spread"))
    assert (empty.samples, empty.sampled, empty.complete, empty.numel) == ((), 0, True, 0)
    assert (empty.min, empty.max, empty.mean, empty.nan_count) == (None, None, None, 0)
    scalar = st.Tensor.full("BF16", (), 0.1).inspect(st.TensorInspectionOptions(5, "spread"))
    assert scalar.samples == ((0, st.Scalar(st.DType.BF16, 0.1)),)
    assert scalar.complete and scalar.shape == () and scalar.strides == ()


def test_samples_are_capped_at_max_inspection_samples() -> None:
    numel = st.MAX_INSPECTION_SAMPLES + 4465
    data = np.arange(numel, dtype=np.int32)
    tensor = st.Tensor.from_le_bytes("I32", (numel,), data.tobytes())[::-1]
    for strategy in ("head", "spread"):
        result = tensor.inspect(st.TensorInspectionOptions(10**12, strategy))
        assert result.sampled == len(result.samples) == st.MAX_INSPECTION_SAMPLES
        assert not result.complete
        check_against_numpy(result, tensor, data[::-1], 10**12, strategy)
    last = tensor.inspect(st.TensorInspectionOptions(10**12, "spread")).samples[-1]
    k = st.MAX_INSPECTION_SAMPLES
    assert last[0] == (k - 1) * numel // k


@pytest.mark.parametrize("strategy", ["head", "spread"])
def test_inspecting_a_huge_view_reads_only_the_samples(strategy: str) -> None:
    storage = bytes(1 << 26)  # 64 MiB, shared zero-copy by the tensor
    tensor = st.Tensor.from_le_bytes("U8", (8192, 8192), storage).transpose()[::-1, ::3]
    assert not tensor.is_contiguous and tensor.numel > 20_000_000
    tracemalloc.start()
    try:
        small = tensor.inspect(st.TensorInspectionOptions(1024, strategy))
        small_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        full = tensor.inspect(st.TensorInspectionOptions(10**9, strategy))
        full_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert small.sampled == 1024 and full.sampled == st.MAX_INSPECTION_SAMPLES
    assert small_peak < 1 << 20
    assert full_peak < 16 << 20  # O(samples) Python objects, far below the 64 MiB storage
    assert full.zero_count == full.sampled and full.mean == 0.0


def test_options_defaults_and_validation() -> None:
    default = st.TensorInspectionOptions()
    assert (default.max_samples, default.strategy) == (1024, "head")
    assert st.tensor([1], "I8").inspect() == st.tensor([1], "I8").inspect(default)
    numpy_count = st.TensorInspectionOptions(np.int64(5), "spread")
    assert type(numpy_count.max_samples) is int and numpy_count.max_samples == 5
    assert numpy_count == st.TensorInspectionOptions(5, "spread")
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.max_samples = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.tensor([1], "I8").inspect().numel = 2  # type: ignore[misc]


@pytest.mark.parametrize("max_samples", [-1, -(10**30), True, False, 1.0, 2.5, "3", None, [1]])
def test_bad_max_samples_is_shape_error(max_samples: Any) -> None:
    with pytest.raises(st.ShapeError):
        st.TensorInspectionOptions(max_samples)


@pytest.mark.parametrize("strategy", ["tail", "HEAD", "", "head ", None, 3, b"head"])
def test_unknown_strategy_is_format_error(strategy: Any) -> None:
    with pytest.raises(st.FormatError) as caught:
        st.TensorInspectionOptions(strategy=strategy)
    assert isinstance(caught.value, st.DataError)


@pytest.mark.parametrize("options", [1024, "head", {"max_samples": 3}, st.TensorInspectionOptions])
def test_inspect_rejects_other_option_objects(options: Any) -> None:
    t = st.tensor([1, 2], "I8")
    with pytest.raises(st.DTypeError):
        t.inspect(options)
    assert t.tolist() == [1, 2]


def test_inspection_has_exactly_the_spec_fields() -> None:
    names = [field.name for field in dataclasses.fields(st.TensorInspection)]
    assert names == [
        "dtype", "shape", "strides", "numel", "byte_len", "storage_byte_len", "is_contiguous",
        "samples", "sampled", "complete", "min", "max", "nan_count", "inf_count",
        "zero_count", "mean",
    ]  # fmt: skip


def test_samples_built_on_first_read_behave_as_a_plain_field() -> None:
    import pickle

    tensor = st.tensor([[1.5, -0.0], [math.nan, 4.0]], "BF16").transpose()
    options = st.TensorInspectionOptions(3, "spread")
    first, second = tensor.inspect(options), tensor.inspect(options)
    assert first == second and hash(first) == hash(second)  # built through __eq__/__hash__
    fresh = tensor.inspect(options)
    copied = pickle.loads(pickle.dumps(fresh))
    assert copied == first and copied.samples == first.samples
    assert dataclasses.replace(tensor.inspect(options)) == first
    expected = [(0, st.Scalar(st.DType.BF16, 1.5)), (1, st.Scalar(st.DType.BF16, math.nan))]
    assert list(first.samples[:2]) == expected and type(first.samples) is tuple
    assert all(type(i) is int and type(s) is st.Scalar for i, s in first.samples)
    assert first.samples is first.samples  # built once
    with pytest.raises(dataclasses.FrozenInstanceError):
        tensor.inspect(options).samples = ()  # type: ignore[misc]
    made = st.TensorInspection(
        **{f.name: getattr(first, f.name) for f in dataclasses.fields(first)}
    )
    assert made == first and made.samples is first.samples
    assert "samples=((0, Scalar(BF16, 1.5))" in repr(tensor.inspect(options))
