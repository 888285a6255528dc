"""F8_E8M0 (ml_dtypes.float8_e8m0fnu, the MX scale type): the powers of two 2**-127 to
2**127 and NaN, nothing else; storage-only; ml_dtypes is the oracle for the bits."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import strided as st

D = st.DType
E8M0 = "F8_E8M0"
EVERY = bytes(range(256))  # every bit pattern: 2**(b - 127) for b < 255, and NaN


def oracle_values() -> list[float]:
    patterns = np.frombuffer(EVERY, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    values: list[float] = patterns.astype(np.float64).tolist()
    return values


def test_every_bit_pattern_is_a_power_of_two_or_nan() -> None:
    t = st.Tensor.from_le_bytes(E8M0, (256,), EVERY)
    values = [s.value for s in t.to_scalars()]
    assert values[:255] == [2.0**k for k in range(-127, 128)] == oracle_values()[:255]
    assert math.isnan(values[255]) and math.isnan(oracle_values()[255])
    assert t.tolist()[:255] == values[:255]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, 0.5), (1.0, 1.0), (2, 2.0), (True, 1.0), (2.0**-127, 2.0**-127), (2**127, 2.0**127),
     ("0.5", 0.5), ("2", 2.0), ("5.877471754111438e-39", 2.0**-127), ("1.7014118346046923e+38",
     2.0**127), (np.float32(0.25), 0.25), (ml_dtypes.float8_e8m0fnu(4.0), 4.0)],
)  # fmt: skip
def test_exact_powers_of_two_convert(value: object, expected: float) -> None:
    scalar = st.Scalar(D.F8_E8M0, value)
    assert scalar.value == expected and type(scalar.value) is float


@pytest.mark.parametrize(
    "value",
    [0, 0.0, -0.0, False, 3.0, 3, -1.0, -2, 0.75, 2.0**128, 2**128, 2.0**-128, math.inf,
     -math.inf, "0", "0.3", "inf", "-2", "6e-39", "1e999", 2**60 + 1],
)  # fmt: skip
def test_anything_else_is_a_range_error(value: object) -> None:
    with pytest.raises(st.RangeError):
        st.Scalar(D.F8_E8M0, value)


def test_nan_is_a_value() -> None:
    for value in (math.nan, "nan", "-NaN", float("-nan")):
        assert math.isnan(st.Scalar(D.F8_E8M0, value).value)
    assert st.Scalar(D.F8_E8M0, "nan") == st.Scalar(D.F8_E8M0, math.nan)


def test_text_is_the_f64_text_and_round_trips() -> None:
    texts = {0.5: "0.5", 1.0: "1.0", 2.0: "2.0", 2.0**-127: "5.877471754111438e-39"}
    for value, text in texts.items():
        assert str(st.Scalar(D.F8_E8M0, value)) == text
    assert str(st.Scalar(D.F8_E8M0, "nan")) == "nan"
    t = st.Tensor.from_le_bytes(E8M0, (16, 16), EVERY)
    data = t.to_dict()["data"]
    assert data == [str(s) for s in t.to_scalars()]  # bulk text agrees with Scalar text
    assert data[:255] == [repr(v) for v in oracle_values()[:255]]
    assert [st.Scalar.parse(D.F8_E8M0, text) for text in data] == t.to_scalars()
    again = st.Tensor.from_json(t.to_json())
    assert again == t and again.to_le_bytes() == EVERY
    assert repr(st.tensor([0.5, 4.0], E8M0)) == "Tensor(dtype=F8_E8M0, shape=[2], data=[0.5, 4.0])"


@pytest.mark.parametrize("bad", ["0.3", "0", "-0.0", "inf", "-1", "3.4028236692093846e+38"])
def test_json_refuses_other_values_naming_the_entry(bad: str) -> None:
    with pytest.raises(st.RangeError, match=r"data\[1\]"):
        st.Tensor.from_dict({"dtype": E8M0, "shape": [2], "data": ["1.0", bad]})


def test_construction_views_and_updates() -> None:
    with pytest.raises(st.RangeError):
        st.Tensor.zeros(E8M0, (2,))  # no zero
    with pytest.raises(st.RangeError):
        st.tensor([1.0, 3.0], E8M0)
    t = st.Tensor.full(E8M0, (2, 3), 0.25)
    assert t.to_le_bytes() == bytes([125]) * 6
    assert t.T.shape == (3, 2) and t[::-1, 1].tolist() == [0.25, 0.25]
    updated = t.at[0, 1].set(8.0)
    assert updated.tolist() == [[0.25, 8.0, 0.25], [0.25, 0.25, 0.25]]
    with pytest.raises(st.RangeError):
        t.at[0, 1].set(0.3)
    assert t == st.Tensor.from_numpy(np.full((2, 3), 0.25).astype(ml_dtypes.float8_e8m0fnu))
    assert st.Tensor.from_numpy(np.array([4.0], ml_dtypes.float8_e8m0fnu)).dtype is D.F8_E8M0
    found = st.Tensor.from_le_bytes(E8M0, (256,), EVERY).inspect()
    assert found.min == D.F8_E8M0.min and found.max == D.F8_E8M0.max
    assert (found.nan_count, found.zero_count, found.inf_count) == (1, 0, 0)


@pytest.mark.parametrize(
    "op",
    [lambda t: t + t, lambda t: t * 2, lambda t: t.eq(t), lambda t: t.lt(t), lambda t: -t,
     lambda t: abs(t), lambda t: t.sum(), lambda t: t @ t, lambda t: 2 ** t],
)  # fmt: skip
def test_arithmetic_is_a_dtype_error(op: object) -> None:
    t = st.tensor([[1.0, 2.0], [4.0, 0.5]], E8M0)
    with pytest.raises(st.DTypeError, match="convert to F32 first"):
        op(t)  # type: ignore[operator]


def test_convert_into_e8m0_is_exact_or_range_error() -> None:
    powers = [2.0**-127, 0.5, 1.0, 2.0**127, math.nan]  # 2**-127 is subnormal in F32, BF16
    for dtype in ("F64", "F32", "BF16"):
        source = st.tensor(powers, dtype)
        got = source.convert(E8M0)
        expected = np.array(powers).astype(ml_dtypes.float8_e8m0fnu)
        assert got.to_le_bytes() == expected.tobytes()
    for values, dtype, index in [([1.0, 3.0], "F32", 1), ([0.0], "F64", 0), ([-2.0], "F16", 0),
                                 ([math.inf], "F32", 0), ([2, 0], "I32", 1), ([-4], "I8", 0),
                                 ([2**60 + 1], "I64", 0), ([False], "BOOL", 0)]:  # fmt: skip
        with pytest.raises(st.RangeError, match=rf"element \[{index}\]"):
            st.tensor(values, dtype).convert(E8M0)
    assert st.tensor([1, 2**62], "I64").convert(E8M0).tolist() == [1.0, 2.0**62]
    assert st.tensor([2**63], "U64").convert(E8M0).tolist() == [2.0**63]
    assert st.tensor([True], "BOOL").convert(E8M0).tolist() == [1.0]


def test_convert_out_of_e8m0_follows_the_target_rules() -> None:
    t = st.Tensor.from_le_bytes(E8M0, (256,), EVERY)
    patterns = np.frombuffer(EVERY, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    for dtype, numpy_type in (
        ("F32", np.float32),
        ("F64", np.float64),
        ("BF16", ml_dtypes.bfloat16),
    ):
        wide = t.convert(dtype)
        assert wide == st.Tensor.from_numpy(patterns.astype(numpy_type))
    assert st.tensor([2.0, 0.5], E8M0).convert("F16").tolist() == [2.0, 0.5]
    assert st.tensor([2.0**-127], E8M0).convert("F16").tolist() == [0.0]  # rounds to zero
    with pytest.raises(st.RangeError):
        st.tensor([2.0**16], E8M0).convert("F16")  # overflows F16
    assert st.tensor([4.0, 1.0], E8M0).convert("I32").tolist() == [4, 1]
    with pytest.raises(st.RangeError):
        st.tensor([0.5], E8M0).convert("I32")
    with pytest.raises(st.RangeError):
        st.tensor(["nan"], E8M0).convert("U8")


@pytest.mark.parametrize("bits", [0x7C01, 0x7D00, 0x7E00, 0xFD00])
def test_every_f16_nan_converts_to_e8m0_nan_without_a_warning(bits: int) -> None:
    # A signalling F16 NaN (0x7C01, 0x7D00) widened to F64 raises NumPy's "invalid"
    # flag in frexp; the conversion must neither warn nor refuse it.
    array = np.array([bits, 0x4000], dtype=np.uint16).view(np.float16)  # [NaN, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        converted = st.Tensor.from_numpy(array).convert(st.DType.F8_E8M0)
    values = converted.numpy().astype(np.float64)
    assert np.isnan(values[0]) and values[1] == 2.0
