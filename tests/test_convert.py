"""convert(dtype): exact into integers and BOOL, rounded once into floats, refused on overflow."""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.floats import round_exact

from .strategies import ALL_DTYPES, arrays

D = st.DType


def python_values(t: st.Tensor) -> list[Any]:
    return [s.value for s in t.to_scalars()]


def expected_convert(values: list[Any], target: st.DType) -> tuple[int | None, list[Any]]:
    """(index of the first value that cannot convert, converted values) by the SPEC rules."""
    out = []
    for i, v in enumerate(values):
        if target.is_float:
            if isinstance(v, float) and math.isnan(v):
                out.append(math.nan)
                continue
            try:
                out.append(round_exact(target, v if isinstance(v, float) else int(v)))
            except st.RangeError:
                return i, []
            continue
        if isinstance(v, float) and not (math.isfinite(v) and v.is_integer()):
            return i, []
        number = int(v)
        low, high = (0, 1) if target is D.BOOL else (int(target.min.value), int(target.max.value))
        if not low <= number <= high:
            return i, []
        out.append(bool(number) if target is D.BOOL else number)
    return None, out


def same_values(got: list[Any], want: list[Any]) -> bool:
    for g, w in zip(got, want, strict=True):
        if isinstance(w, float) and math.isnan(w):
            if not (isinstance(g, float) and math.isnan(g)):
                return False
        elif (
            g != w
            or type(g) is not type(w)
            or (isinstance(w, float) and math.copysign(1, g) != math.copysign(1, w))
        ):
            return False
    return True


@settings(max_examples=600, deadline=None)
@given(hs.sampled_from(ALL_DTYPES), hs.sampled_from(ALL_DTYPES), hs.data())
def test_convert_matches_exact_rules(
    source: st.DType, target: st.DType, data: hs.DataObject
) -> None:
    shape = data.draw(hs.sampled_from([(0,), (5,), (2, 3), ()]))
    array = data.draw(arrays(source, shape))
    t = st.Tensor.from_numpy(array)
    before = t.to_le_bytes()
    values = python_values(t)
    bad, want = expected_convert(values, target)
    if bad is not None:
        with pytest.raises(st.RangeError) as caught:
            t.convert(target)
        index = list(np.unravel_index(bad, shape)) if shape else []
        assert str([int(i) for i in index]) in str(caught.value)
    else:
        result = t.convert(target)
        assert result.dtype is target and result.shape == shape
        assert same_values(python_values(result), want)
    assert t.to_le_bytes() == before


def test_spec_examples() -> None:
    with pytest.raises(st.RangeError, match="not an integer"):
        st.tensor([1.0, 1.5], D.F64).convert(D.I32)
    with pytest.raises(st.RangeError, match=r"\[0\].*I8"):
        st.tensor([300], D.I32).convert(D.I8)
    with pytest.raises(st.RangeError):
        st.tensor([math.nan], D.F32).convert(D.I32)
    with pytest.raises(st.RangeError, match="BOOL"):
        st.tensor([2], D.I32).convert(D.BOOL)
    with pytest.raises(st.RangeError, match="BOOL"):
        st.tensor([0.5], D.F32).convert(D.BOOL)
    assert st.tensor([0, 1], D.U8).convert(D.BOOL).tolist() == [False, True]
    assert st.tensor([-0.0, 1.0], D.F16).convert(D.BOOL).tolist() == [False, True]
    assert st.tensor([True, False], D.BOOL).convert(D.BF16).tolist() == [1.0, 0.0]
    with pytest.raises(st.RangeError, match="overflows F16"):
        st.tensor([65520.0], D.F64).convert(D.F16)
    assert st.tensor([65519.99], D.F64).convert(D.F16).tolist() == [65504.0]
    assert st.tensor([math.inf, -math.inf], D.F64).convert(D.F16).tolist() == [math.inf, -math.inf]


def test_f8_e4m3_rounding_rule() -> None:
    assert st.tensor([464.0, -464.0, 456.0], D.F32).convert(D.F8_E4M3).tolist() == [
        448.0,
        -448.0,
        448.0,
    ]
    with pytest.raises(st.RangeError):
        st.tensor([464.00003], D.F32).convert(D.F8_E4M3)
    with pytest.raises(st.RangeError):
        st.tensor([math.inf], D.F32).convert(D.F8_E4M3)
    with pytest.raises(st.RangeError):
        st.tensor([465], D.I32).convert(D.F8_E4M3)
    assert st.tensor([464], D.I64).convert(D.F8_E4M3).tolist() == [448.0]
    assert math.isnan(st.tensor([math.nan], D.F64).convert(D.F8_E4M3).tolist()[0])
    with pytest.raises(st.RangeError):
        st.tensor([61440.0], D.F32).convert(D.F8_E5M2)
    assert st.tensor([61439.0], D.F32).convert(D.F8_E5M2).tolist() == [57344.0]


def test_no_double_rounding() -> None:
    """Values that land exactly on a midpoint after a first rounding to F32 or F64."""
    f64 = 1 + 2.0**-8 + 2.0**-40  # above the BF16 midpoint 1 + 2**-8
    assert st.tensor([f64], D.F64).convert(D.BF16).tolist() == [1 + 2.0**-7]
    assert st.tensor([-f64], D.F64).convert(D.BF16).tolist() == [-(1 + 2.0**-7)]
    assert st.tensor([1 + 2.0**-11 + 2.0**-40], D.F64).convert(D.F16).tolist() == [1 + 2.0**-10]
    big = 2**40 + 2**32 + 1
    assert st.tensor([big], D.I64).convert(D.BF16).tolist() == [float(2**40 + 2**33)]
    assert st.tensor([2**60 + 2**36 + 1], D.I64).convert(D.F32).tolist() == [float(2**60 + 2**37)]
    assert st.tensor([2**64 - 1], D.U64).convert(D.F32).tolist() == [2.0**64]
    assert st.tensor([2**63 + 2**10 + 1], D.U64).convert(D.F64).tolist() == [float(2**63 + 2**11)]
    assert st.tensor([-(2**63)], D.I64).convert(D.F8_E5M2 if False else D.BF16).tolist() == [
        -(2.0**63)
    ]
    f32 = np.float32(1 + 2.0**-8 + 2.0**-20)
    assert st.Tensor.from_numpy(np.array([f32])).convert(D.F8_E4M3).tolist() == [1.0]


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from([D.F32, D.F16, D.BF16, D.F8_E4M3, D.F8_E5M2]), hs.integers(-(2**64), 2**64))
def test_integers_round_once(target: st.DType, value: int) -> None:
    source = D.I64 if -(2**63) <= value < 2**63 else D.U64 if 0 <= value < 2**64 else None
    if source is None:
        return
    t = st.tensor([value], source)
    try:
        want = round_exact(target, value)
    except st.RangeError:
        with pytest.raises(st.RangeError):
            t.convert(target)
        return
    assert t.convert(target).tolist() == [want]


@settings(max_examples=300, deadline=None)
@given(
    hs.sampled_from([D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64]),
    hs.floats(allow_nan=True),
)
def test_floats_into_integers(target: st.DType, value: float) -> None:
    t = st.tensor([value], D.F64)
    fits = (
        math.isfinite(value)
        and value.is_integer()
        and int(target.min.value) <= int(value) <= int(target.max.value)
    )
    if fits:
        assert t.convert(target).tolist() == [int(value)]
    else:
        with pytest.raises(st.RangeError, match=r"\[0\]"):
            t.convert(target)


def test_integer_bounds_exactly() -> None:
    assert st.tensor([2.0**63 - 1024], D.F64).convert(D.I64).tolist() == [2**63 - 1024]
    with pytest.raises(st.RangeError):
        st.tensor([2.0**63], D.F64).convert(D.I64)
    assert st.tensor([-(2.0**63)], D.F64).convert(D.I64).tolist() == [-(2**63)]
    with pytest.raises(st.RangeError):
        st.tensor([2.0**64], D.F64).convert(D.U64)
    with pytest.raises(st.RangeError, match=r"\[1\]"):
        st.tensor([0, -1], D.I64).convert(D.U64)
    with pytest.raises(st.RangeError, match=r"\[0\]"):
        st.tensor([2**63], D.U64).convert(D.I64)
    assert st.tensor([2**63 - 1], D.U64).convert(D.I64).tolist() == [2**63 - 1]
    assert st.tensor([-1], D.I8).convert(D.I64).tolist() == [-1]


def test_convert_identity_strings_and_views() -> None:
    t = st.tensor([[1, 2, 3], [4, 5, 6]], D.I32)
    assert t.convert(D.I32) is t
    assert t.convert("F64").dtype is D.F64
    view = t.transpose()[::-1]
    converted = view.convert(D.I16)
    assert converted.tolist() == view.tolist() and converted.is_contiguous
    with pytest.raises(st.DTypeError):
        t.convert("int")
    with pytest.raises(st.DTypeError):
        t.convert(3)


def test_from_numpy_with_dtype_converts() -> None:
    assert st.Tensor.from_numpy(np.array([1.0, 2.0]), D.I8).tolist() == [1, 2]
    with pytest.raises(st.RangeError):
        st.Tensor.from_numpy(np.array([1.5]), D.I8)
    assert st.Tensor.from_numpy(np.array([0.1]), D.BF16).tolist() == [
        float(round_exact(D.BF16, 0.1))
    ]
    wide = np.array([3.0e38], dtype=np.float32)
    with pytest.raises(st.RangeError):
        st.Tensor.from_numpy(wide, D.F16)
    assert st.Tensor.from_numpy(wide, D.BF16).dtype is D.BF16
    assert float(ml_dtypes.bfloat16(3.0e38)) == st.Tensor.from_numpy(wide, D.BF16).tolist()[0]
