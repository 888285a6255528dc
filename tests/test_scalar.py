"""Scalar: construction, exact parsing, canonical text, equality, immutability.

NumPy is the oracle for integer ranges and for the shortest digits of F16/F32/F64;
round trips are checked over random bit patterns of every float dtype.
"""

from __future__ import annotations

import copy
import math
import pickle
import sys
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

D = st.DType
S = st.Scalar
FLOATS = [d for d in D if d.is_float]
INTEGERS = [d for d in D if d.is_integer]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def from_bits(dtype: st.DType, bits: int) -> float:
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on signalling NaN patterns
        return float(np.array([bits], UINT[dtype.itemsize]).view(dtype.numpy)[0])


def significant_digits(text: str) -> int:
    mantissa = text.lower().split("e")[0].lstrip("-+").replace(".", "")
    return len(mantissa.strip("0")) or 1


# -- construction ----------------------------------------------------------------------


def test_construction_basics() -> None:
    assert S(D.I8, 5).value == 5
    assert S(D.I8, True).value == 1 and type(S(D.I8, True).value) is int
    assert S(D.BOOL, True).value is True
    assert S(D.BOOL, 0).value is False
    assert S(D.BOOL, 1.0).value is True
    assert S(D.F32, 1).value == 1.0 and type(S(D.F32, 1).value) is float
    assert S(D.F32, False).value == 0.0
    assert S(D.I64, 3.0).value == 3
    assert S(D.I16, "-7") == S(D.I16, -7)
    assert S(D.F32, "0.1") == S(D.F32, 0.1)
    assert S(D.F32, S(D.F32, 2.5)) == S(D.F32, 2.5)
    assert S(D.F32, 0.1).value == float(np.float32(0.1))
    assert S(D.F64, -0.0).value == 0.0 and math.copysign(1, S(D.F64, -0.0).value) < 0


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_edges_match_numpy(dtype: st.DType) -> None:
    info = np.iinfo(dtype.numpy)
    low, high = int(info.min), int(info.max)
    for value in (low, high, 0):
        assert S(dtype, value).value == value
        assert S.parse(dtype, str(value)).value == value
        assert S(dtype, np.array(value, dtype.numpy)[()]).value == value
    for value in (low - 1, high + 1, 2**64, -(2**64), 10**5000):
        with pytest.raises(st.RangeError):
            S(dtype, value)
    for text in (str(low - 1), str(high + 1)):
        with pytest.raises(st.RangeError):
            S.parse(dtype, text)
    assert dtype.min == S(dtype, low) and dtype.max == S(dtype, high)


@pytest.mark.parametrize(
    ("dtype", "value", "error"),
    [
        (D.I8, 300, st.RangeError),
        (D.I8, -129, st.RangeError),
        (D.U8, -1, st.RangeError),
        (D.U64, 2**64, st.RangeError),
        (D.BOOL, 2, st.RangeError),
        (D.BOOL, -1, st.RangeError),
        (D.BOOL, 0.5, st.RangeError),
        (D.I32, 2.5, st.RangeError),
        (D.I32, math.nan, st.RangeError),
        (D.I32, math.inf, st.RangeError),
        (D.I64, 2.0**63, st.RangeError),
        (D.I32, np.float32(0.5), st.RangeError),
        (D.I8, np.int64(128), st.RangeError),
        (D.F32, 1e39, st.RangeError),
        (D.F32, 2**128, st.RangeError),
        (D.F16, 65520, st.RangeError),
        (D.F8_E4M3, 465, st.RangeError),
        (D.F8_E4M3, math.inf, st.RangeError),
        (D.F8_E4M3, -math.inf, st.RangeError),
        (D.F8_E5M2, 61440.0, st.RangeError),
        (D.F32, None, st.DTypeError),
        (D.F32, [1.0], st.DTypeError),
        (D.F32, (1,), st.DTypeError),
        (D.F32, 1j, st.DTypeError),
        (D.F32, np.complex64(1), st.DTypeError),
        (D.F32, b"1", st.DTypeError),
        (D.F32, bytearray(b"1"), st.DTypeError),
        (D.F32, Fraction(1, 3), st.DTypeError),
        (D.F32, object(), st.DTypeError),
        (D.F32, np.array(1.0), st.DTypeError),
        (D.F32, np.datetime64(1, "s"), st.DTypeError),
        (D.F32, S(D.F64, 1.0), st.DTypeError),
        (D.I32, S(D.I64, 1), st.DTypeError),
        (D.I8, "300", st.RangeError),
        (D.I8, "1.0", st.FormatError),
        (D.BOOL, "2", st.FormatError),
    ],
)
def test_construction_errors(dtype: st.DType, value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        S(dtype, value)


def test_dtype_must_be_a_dtype() -> None:
    for bad in ("F32", None, np.float32, np.dtype("f4"), 1):
        with pytest.raises(st.DTypeError):
            S(bad, 1)  # type: ignore[arg-type]
        with pytest.raises(st.DTypeError):
            S.parse(bad, "1")  # type: ignore[arg-type]


def test_numpy_and_ml_dtypes_scalars_keep_their_exact_value() -> None:
    assert S(D.F32, np.float32(0.1)).value == float(np.float32(0.1))
    assert S(D.F64, np.float32(0.1)).value == float(np.float32(0.1))
    assert S(D.BF16, np.float32(0.1)) == S(D.BF16, float(np.float32(0.1)))
    assert S(D.BF16, ml_dtypes.bfloat16(1.5)).value == 1.5
    assert S(D.F8_E4M3, ml_dtypes.float8_e4m3fn(448)).value == 448.0
    assert S(D.F8_E5M2, ml_dtypes.float8_e5m2(-3)).value == -3.0
    assert S(D.I64, np.int64(-5)).value == -5
    assert S(D.U64, np.uint64(2**64 - 1)).value == 2**64 - 1
    assert S(D.BOOL, np.bool_(True)).value is True
    assert S(D.I8, np.bool_(True)).value == 1
    assert S(D.F16, np.float16(65504)).value == 65504.0
    third = np.longdouble(1) / np.longdouble(3)  # more precision than F64 on most hosts
    assert S(D.F64, third).value == float(Fraction(*third.as_integer_ratio()))
    assert S(D.I64, np.longdouble(2**62)).value == 2**62
    assert math.isnan(S(D.F32, np.float64("nan")).value)
    assert S(D.F32, np.float64(-0.0)) == S(D.F32, -0.0)
    for dtype in (D.F64, D.F32, D.BF16):  # values are plain Python floats, never np.float64
        assert type(S(dtype, np.float64(1.5)).value) is float
    assert type(S(D.I64, np.float64(2.0)).value) is int
    assert type(S(D.I64, np.uint8(2)).value) is int


def test_floats_round_directly_not_through_f32() -> None:
    x = 1 + 2**-8 + 2**-30  # float32 would round this onto a BF16 midpoint
    assert S(D.BF16, x).value == 1 + 2**-7
    assert S(D.F32, 2**60 + 2**36 + 1).value == 2**60 + 2**37
    assert S.parse(D.F32, "1.000000059604644775390625000001").value == 1 + 2**-23
    assert S(D.F8_E4M3, 464).value == 448.0
    assert S(D.F8_E4M3, -464).value == -448.0
    assert S(D.F16, 65519).value == 65504.0
    assert math.isnan(S(D.F8_E4M3, math.nan).value)


# -- parsing ---------------------------------------------------------------------------

INVALID_EVERYWHERE = [
    "", "+", "-", " 1", "1 ", "\t1", "1\n", "0x10", "1_000", "1__0", "١", "١٢", "1,5",
    "infinity", "Infinity", "-infinity", "in f", "nan(0)", "1e", "e1", ".", "1.2.3", "++1",
    "--1", "+-1", "None", "true1", "０", "1e1.5", "0b1", "0o7",
]  # fmt: skip
INVALID_FOR_INTEGERS = ["1.0", "1.", ".5", "1e5", "1E5", "nan", "inf", "-inf", "true", "false"]
INVALID_FOR_BOOL = ["2", "-1", "+1", "01", "00", "1.0", "yes", "t", "f", "True ", "nan", "tru"]


@pytest.mark.parametrize("dtype", list(D), ids=str)
@pytest.mark.parametrize("text", INVALID_EVERYWHERE)
def test_parse_malformed_everywhere(dtype: st.DType, text: str) -> None:
    with pytest.raises(st.FormatError):
        S.parse(dtype, text)
    with pytest.raises(st.FormatError):
        S(dtype, text)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize("text", INVALID_FOR_INTEGERS)
def test_parse_malformed_integers(dtype: st.DType, text: str) -> None:
    with pytest.raises(st.FormatError):
        S.parse(dtype, text)


@pytest.mark.parametrize("text", INVALID_FOR_BOOL)
def test_parse_malformed_bool(text: str) -> None:
    with pytest.raises(st.FormatError):
        S.parse(D.BOOL, text)


@pytest.mark.parametrize("dtype", list(D), ids=str)
@pytest.mark.parametrize("text", [1, 1.0, b"1", None, ["1"], np.str_("1").encode()])
def test_parse_non_str_is_format_error(dtype: st.DType, text: object) -> None:
    with pytest.raises(st.FormatError):
        S.parse(dtype, text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dtype", "text"),
    [(D.I8, "128"), (D.I8, "-129"), (D.U8, "-1"), (D.U8, "256"), (D.U16, "65536"),
     (D.I16, "-32769"), (D.U32, "4294967296"), (D.I32, "2147483648"),
     (D.I64, "9223372036854775808"), (D.U64, "18446744073709551616"), (D.U64, "-0000001"),
     (D.F32, "1e39"), (D.F32, "-3.5e38"), (D.F64, "1e309"), (D.F16, "65520"),
     (D.F8_E4M3, "465"), (D.F8_E4M3, "inf"), (D.F8_E4M3, "-INF"), (D.F8_E5M2, "61440"),
     (D.BF16, "1e39")],
)  # fmt: skip
def test_parse_out_of_range(dtype: st.DType, text: str) -> None:
    with pytest.raises(st.RangeError):
        S.parse(dtype, text)


@pytest.mark.parametrize(
    ("dtype", "text", "value"),
    [(D.I8, "-128", -128), (D.I8, "+127", 127), (D.U8, "-0", 0), (D.U8, "0007", 7),
     (D.I64, "-9223372036854775808", -(2**63)), (D.U64, "18446744073709551615", 2**64 - 1),
     (D.BOOL, "true", True), (D.BOOL, "TRUE", True), (D.BOOL, "fAlSe", False),
     (D.BOOL, "1", True), (D.BOOL, "0", False), (D.F32, "1", 1.0), (D.F32, "1.", 1.0),
     (D.F32, ".5", 0.5), (D.F32, "1e5", 1e5), (D.F32, "-2.5E-3", float(np.float32(-2.5e-3))),
     (D.F32, "1e-50", 0.0), (D.F32, "-1e-50", -0.0), (D.F32, "+inf", math.inf),
     (D.F32, "-Inf", -math.inf), (D.F16, "65519", 65504.0), (D.F8_E4M3, "464", 448.0),
     (D.F8_E4M3, "-464.0", -448.0), (D.F8_E5M2, "61439.99", 57344.0)],
)  # fmt: skip
def test_parse_values(dtype: st.DType, text: str, value: float) -> None:
    got = S.parse(dtype, text)
    assert got == S(dtype, value)
    assert type(got.value) is type(S(dtype, value).value)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("text", ["nan", "NaN", "+nan", "-nan", "NAN"])
def test_parse_nan(dtype: st.DType, text: str) -> None:
    assert math.isnan(S.parse(dtype, text).value)


def test_digit_limits() -> None:
    """At most 4300 digits (Python's own int-from-str limit); more is LimitError."""
    assert S.parse(D.I64, "0" * 4299 + "7").value == 7
    assert S.parse(D.I64, "-" + "0" * 4299 + "7").value == -7
    with pytest.raises(st.RangeError):
        S.parse(D.I64, "9" * 4300)
    for text in ("0" * 4300 + "7", "+" + "1" * 4301, "1" * 10**6, "x" * 10**6):
        with pytest.raises(st.LimitError):
            S.parse(D.I64, text)
    assert S.parse(D.F32, "0." + "0" * 4290 + "1e4291").value == 1.0
    for text in ("0." + "0" * 4300 + "1", "1" * 10**6, "1e" + "0" * 4300 + "1"):
        with pytest.raises(st.LimitError):
            S.parse(D.F32, text)
    for text in ("1e999999999999999999", "9" * 4000):
        with pytest.raises(st.RangeError):
            S.parse(D.F64, text)
    assert S.parse(D.F64, "1e-999999999999999999") == S(D.F64, 0.0)


def test_parse_does_not_depend_on_int_max_str_digits() -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(st.LimitError):
            S.parse(D.I64, "1" * 700)
        assert S.parse(D.F64, "1" * 700 + "e-700") == S(D.F64, float("1" * 700 + "e-700"))
    finally:
        sys.set_int_max_str_digits(old)


# -- text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scalar", "text"),
    [(S(D.F32, 0.1), "0.1"), (S(D.F32, 3), "3.0"), (S(D.F32, 1e-5), "1e-05"),
     (S(D.F32, 1e20), "1e+20"), (S(D.F32, -0.0), "-0.0"), (S(D.F32, "inf"), "inf"),
     (S(D.F32, "-inf"), "-inf"), (S(D.F32, "-nan"), "nan"), (S(D.F32, 16777216), "16777216.0"),
     (S(D.F64, 0.1), "0.1"), (S(D.BF16, 0.1), "0.1"), (S(D.F16, 0.1), "0.1"),
     (S(D.I8, -5), "-5"), (S(D.U64, 2**64 - 1), "18446744073709551615"),
     (S(D.BOOL, True), "true"), (S(D.BOOL, 0), "false"), (S(D.F8_E4M3, 448), "450.0")],
)  # fmt: skip
def test_str(scalar: st.Scalar, text: str) -> None:
    assert str(scalar) == text


def test_repr() -> None:
    assert repr(S(D.F32, 0.1)) == "Scalar(F32, 0.1)"
    assert repr(S(D.BOOL, 1)) == "Scalar(BOOL, true)"
    assert repr(S(D.I16, -3)) == "Scalar(I16, -3)"
    assert repr(S(D.F8_E5M2, "nan")) == "Scalar(F8_E5M2, nan)"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@settings(max_examples=300, deadline=None)
@given(data=hs.data())
def test_float_text_round_trips_and_is_shortest(dtype: st.DType, data: hs.DataObject) -> None:
    bits = data.draw(hs.integers(0, 2 ** (8 * dtype.itemsize) - 1))
    value = from_bits(dtype, bits)
    scalar = S(dtype, value)
    text = str(scalar)
    assert S.parse(dtype, text) == scalar
    assert S(dtype, text) == scalar
    if dtype in (D.F64, D.F8_E8M0):  # F8_E8M0 text is read through F64
        assert text == repr(value)
    if not math.isfinite(value) or dtype is D.F8_E8M0:
        return
    if dtype in (D.F16, D.F32, D.F64):
        numpy_text = np.format_float_scientific(dtype.numpy.type(value), unique=True)
        assert significant_digits(text) <= significant_digits(numpy_text)
    else:  # ml_dtypes' repr is not shortest; beat NumPy's float32 digits at least
        numpy_text = np.format_float_scientific(np.float32(value), unique=True)
        assert significant_digits(text) <= significant_digits(numpy_text)


@pytest.mark.parametrize("dtype", [*INTEGERS, D.BOOL], ids=str)
@settings(max_examples=100, deadline=None)
@given(data=hs.data())
def test_integer_text_round_trips(dtype: st.DType, data: hs.DataObject) -> None:
    low, high = (0, 1) if dtype is D.BOOL else (int(dtype.min), int(dtype.max))
    scalar = S(dtype, data.draw(hs.integers(low, high)))
    assert S.parse(dtype, str(scalar)) == scalar
    assert str(scalar) == (str(scalar.value).lower() if dtype is D.BOOL else str(scalar.value))


# -- equality, conversions, immutability -----------------------------------------------


def test_equality_and_hash() -> None:
    assert S(D.F32, 1.0) == S(D.F32, 1)
    assert S(D.F32, 1.0) != S(D.F64, 1.0)
    assert S(D.I8, 1) != S(D.I16, 1)
    assert S(D.I8, 1) != S(D.BOOL, 1)
    assert S(D.F32, -0.0) != S(D.F32, 0.0)
    assert S(D.F32, "nan") == S(D.F32, "-nan") == S(D.F32, math.nan)
    assert S(D.F32, "nan") != S(D.F64, "nan")
    assert hash(S(D.F32, "nan")) == hash(S(D.F32, float("nan")))
    assert len({S(D.F32, "nan"), S(D.F32, "nan"), S(D.F32, -0.0), S(D.F32, 0.0)}) == 3
    assert hash(S(D.I64, 7)) == hash(S(D.I64, "7"))
    # against plain numbers: exact value (tests/test_scalar_number.py); text never equal
    assert S(D.I8, 1) == 1 and 1 == S(D.I8, 1)  # noqa: SIM300
    assert S(D.BOOL, True) == True  # noqa: E712
    assert S(D.F32, 0.5) == 0.5 and S(D.F32, 0.5) == np.float32(0.5)
    assert S(D.F32, 0.5) != "0.5" and S(D.I8, 1) != "1"
    assert S(D.I8, 1) < S(D.I8, 2)  # ordering is numeric (tests/test_scalar_number.py)


def test_conversions() -> None:
    assert int(S(D.F32, -2.5)) == -2
    assert int(S(D.F64, 2.0**80)) == 2**80
    assert int(S(D.BOOL, True)) == 1
    assert float(S(D.I64, -3)) == -3.0
    assert float(S(D.BOOL, True)) == 1.0
    assert bool(S(D.F32, -0.0)) is False
    assert bool(S(D.F32, "nan")) is True
    assert bool(S(D.I8, 0)) is False
    for special in ("nan", "inf", "-inf"):
        with pytest.raises(st.RangeError):
            int(S(D.F32, special))
    assert [10, 20, 30][S(D.U8, 2)] == 30
    assert np.arange(5)[S(D.I64, -1)] == 4
    for not_index in (S(D.F32, 1.0), S(D.BOOL, True)):
        with pytest.raises(st.DTypeError):
            [1, 2][not_index]  # type: ignore[index]


def test_properties() -> None:
    scalar = S(D.F16, 0.1)
    assert scalar.dtype is D.F16
    assert scalar.value == float(np.float16(0.1))
    assert type(S(D.U64, 1).value) is int
    assert type(S(D.BOOL, 1).value) is bool


def test_immutable() -> None:
    scalar = S(D.I8, 1)
    for name in ("value", "dtype", "_value", "_dtype", "other"):
        with pytest.raises(AttributeError):
            setattr(scalar, name, 2)
        with pytest.raises(AttributeError):
            delattr(scalar, name)
    assert not hasattr(scalar, "__dict__")
    assert scalar == S(D.I8, 1)


@pytest.mark.parametrize(
    "scalar",
    [S(D.F32, 0.1), S(D.F8_E4M3, "nan"), S(D.F64, -0.0), S(D.BOOL, True), S(D.U64, 2**64 - 1),
     S(D.BF16, "-inf"), S(D.F8_E5M2, 57344)],
)  # fmt: skip
def test_pickle_and_copy(scalar: st.Scalar) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(scalar, protocol))
        assert back == scalar and str(back) == str(scalar)
    assert copy.copy(scalar) == scalar
    assert copy.deepcopy(scalar) == scalar
    assert copy.deepcopy([scalar])[0] == scalar


def test_trusted_constructor() -> None:
    """The internal fast path used for tensor element reads."""
    array = np.array([1.5, -0.0], ml_dtypes.bfloat16)
    made = S._trusted(D.BF16, array[0])
    assert made == S(D.BF16, 1.5) and type(made.value) is float
    assert S._trusted(D.BF16, array[1].item()) == S(D.BF16, -0.0)
    assert S._trusted(D.I64, np.int64(3)) == S(D.I64, 3) and type(S._trusted(D.I64, 3).value) is int
    assert S._trusted(D.BOOL, np.bool_(False)).value is False
    assert S._trusted(D.F8_E4M3, np.array([448], ml_dtypes.float8_e4m3fn)[0]) == D.F8_E4M3.max


# -- fuzz ------------------------------------------------------------------------------

ANYTHING = hs.one_of(
    hs.from_type(type).flatmap(hs.from_type).filter(lambda v: not isinstance(v, type)),
    hs.text(),
    hs.text(alphabet="0123456789+-.eEinfatrubxINF_ ١", max_size=30),
    hs.integers(),
    hs.floats(),
    hs.binary(),
    hs.fractions(),
    hs.complex_numbers(),
    hs.none(),
    hs.lists(hs.integers(), max_size=3),
    hs.sampled_from([np.float32(1.5), np.int8(3), np.bool_(True), np.uint64(2**64 - 1),
                     np.float16("nan"), np.longdouble("1e4000"), np.complex128(1),
                     np.datetime64("NaT"), np.array([1]), np.str_("7"), np.bytes_(b"7")]),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(dtype=hs.sampled_from(list(D)), value=ANYTHING)
def test_fuzz_only_data_errors_escape(dtype: st.DType, value: object) -> None:
    for make in (S, S.parse):
        try:
            scalar = make(dtype, value)
        except st.DataError:
            continue
        assert scalar.dtype is dtype
        assert S.parse(dtype, str(scalar)) == scalar
