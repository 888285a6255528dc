"""Scalars as numbers: exact ordering (Fraction is the oracle), float/int/index, format.

Values are drawn as random bit patterns of every dtype, so NaNs, infinities, signed zeros
and subnormals all occur.
"""

from __future__ import annotations

import decimal
import math
import operator
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import ALL_DTYPES, arrays

D = st.DType
S = st.Scalar
_ORDER = (operator.lt, operator.le, operator.gt, operator.ge)


@hs.composite
def scalars(draw: hs.DrawFn, dtypes: list[st.DType] = ALL_DTYPES) -> st.Scalar:
    dtype = draw(hs.sampled_from(dtypes))
    return st.Tensor.from_numpy(draw(arrays(dtype, ()))).item()


def _key(value: Any) -> tuple[int, Fraction] | None:
    """An exact sort key (None for NaN): infinities below / above every Fraction."""
    if isinstance(value, S):
        value = value.value
    if isinstance(value, np.generic):
        # ml_dtypes' floats are kind "V", not np.floating
        value = float(value) if value.dtype.kind in "fV" else int(value)
    elif isinstance(value, Decimal):
        if value.is_nan():
            return None
        if value.is_infinite():
            return (-1 if value.is_signed() else 1, Fraction(0))
        return (0, Fraction(value))
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return (1 if value > 0 else -1, Fraction(0))
    return (0, Fraction(value))


_NUMPY_NUMBERS = hs.one_of(
    hs.integers(-(2**63), 2**63 - 1).map(np.int64),
    hs.integers(0, 2**64 - 1).map(np.uint64),
    hs.floats(width=16).map(np.float16),
    hs.floats(width=32).map(np.float32),
    hs.floats().map(np.float64),
    hs.booleans().map(np.bool_),
)


def _numbers() -> hs.SearchStrategy[Any]:
    return hs.one_of(
        hs.integers(-(2**70), 2**70),
        hs.floats(allow_nan=True, allow_infinity=True),
        hs.fractions(),
        hs.booleans(),
        hs.decimals(allow_nan=True, allow_infinity=True),  # sNaN included
        _NUMPY_NUMBERS,
    )


def _others() -> hs.SearchStrategy[Any]:
    return _numbers() | scalars()


@settings(max_examples=400, deadline=None)
@given(scalars(), _others())
def test_ordering_is_exact(scalar: st.Scalar, other: Any) -> None:
    mine, theirs = _key(scalar), _key(other)
    for compare in _ORDER:
        expected = mine is not None and theirs is not None and compare(mine, theirs)
        assert compare(scalar, other) is expected, (compare, scalar, other)
        # and reflected: other <op> scalar
        assert compare(other, scalar) is (
            mine is not None and theirs is not None and compare(theirs, mine)
        )


def test_ordering_examples() -> None:
    assert S(D.F32, 0.1) > 0.1 and not S(D.F32, 0.1) <= 0.1
    assert S(D.F64, 0.1) == S(D.F64, 0.1) and S(D.F64, 0.1) <= 0.1 <= S(D.F64, 0.1)
    assert S(D.F32, 0.1) > Fraction(1, 10) and S(D.F16, 0.1) < Fraction(1, 10)
    nan = S(D.F32, "nan")
    assert not (nan < 1 or nan <= 1 or nan > 1 or nan >= 1 or nan <= nan)
    assert nan == nan  # equality stays structural
    assert S(D.F32, "-inf") < -(10**400) and S(D.F8_E5M2, "inf") > 10**400
    assert S(D.BOOL, True) > S(D.BOOL, False) and S(D.BOOL, True) == S(D.BOOL, 1)
    assert S(D.BOOL, True) >= 1 and S(D.BOOL, False) < 0.5
    assert S(D.U64, 2**64 - 1) > 2.0**64 - 2048 and S(D.I64, 2**53 + 1) > 2.0**53
    assert S(D.F32, 1.0) <= S(D.F64, 1.0) and S(D.F32, 1.0) != S(D.F64, 1.0)
    assert S(D.F32, -0.0) <= S(D.F32, 0.0) and S(D.F32, -0.0) != S(D.F32, 0.0)
    assert S(D.I8, 3) < np.float32(3.5) and np.int64(4) > S(D.I8, 3)
    assert sorted([S(D.I8, 3), S(D.F32, -1.5), S(D.U8, 0)]) == [
        S(D.F32, -1.5),
        S(D.U8, 0),
        S(D.I8, 3),
    ]
    assert S(D.F32, 0.1) > Decimal("0.1") and S(D.F64, 0.1) >= Decimal.from_float(0.1) > Decimal(
        "0.1"
    )
    for other in ("1", None, [1], 1j, np.complex64(1)):
        with pytest.raises(TypeError):
            _ = S(D.I8, 1) < other  # type: ignore[operator]


# -- equality and hash against plain numbers -------------------------------------------


@hs.composite
def _spellings(draw: hs.DrawFn, scalar: st.Scalar) -> Any:
    """A plain number built from the scalar's value: an exact spelling or a near miss."""
    value = scalar.value
    finite = not isinstance(value, float) or math.isfinite(value)
    forms: list[Any] = [value, float(value), np.float64(value), Decimal(value)]
    if finite:
        exact = Fraction(value)
        step = Fraction(draw(hs.sampled_from([-1, 1])), 2 ** draw(hs.integers(0, 1100)))
        forms += [exact, exact + step, Decimal(value) + Decimal("1e-800")]
        if scalar.dtype.is_float:
            forms.append(Decimal(str(scalar)))  # the shortest text: exact only sometimes
        if exact.denominator == 1:
            forms += [int(exact), int(exact) + draw(hs.sampled_from([-1, 1]))]
        if abs(exact) < 2**63:
            forms.append(np.int64(math.trunc(exact)))
    if scalar.dtype.numpy.kind == "V" or scalar.dtype in (D.F16, D.F32):
        forms.append(scalar.dtype.numpy.type(value))  # its own NumPy / ml_dtypes scalar
    return draw(hs.sampled_from(forms))


def _equal_numbers(mine: Any, theirs: Any) -> bool:
    a, b = _key(mine), _key(theirs)
    return a is not None and b is not None and a == b


@settings(max_examples=600, deadline=None)
@given(hs.data(), scalars())
def test_equality_with_numbers_is_exact(data: hs.DataObject, scalar: st.Scalar) -> None:
    """Against Fraction as the oracle; near misses are a 2**-1100 step or a text rounding."""
    other = data.draw(_spellings(scalar) | _numbers())
    expected = _equal_numbers(scalar, other)
    assert (scalar == other) is expected, (scalar, other)
    assert (scalar != other) is not expected
    assert bool(other == scalar) is expected and bool(other != scalar) is not expected
    if expected:
        assert hash(scalar) == hash(other)


@settings(max_examples=300, deadline=None)
@given(scalars())
def test_hash_is_the_value_hash(scalar: st.Scalar) -> None:
    value = scalar.value
    if isinstance(value, float) and math.isnan(value):
        assert hash(scalar) == hash(S(D.F64, "nan")) == hash(S(D.BF16, "-nan"))
    else:
        assert hash(scalar) == hash(value) == hash(Decimal(value))
        assert {value: "number"}[scalar] == "number" and {scalar: "scalar"}[value] == "scalar"


def test_equality_with_numbers_examples() -> None:
    assert S(D.F32, 0.1) != 0.1 and S(D.F64, 0.1) == 0.1 and S(D.F32, 0.5) == 0.5
    assert S(D.F32, -0.0) == 0 and 0.0 == S(D.F32, -0.0)  # noqa: SIM300
    assert S(D.F32, -0.0) == Decimal("-0")
    nan = S(D.F32, "nan")
    for other in (math.nan, Decimal("NaN"), Decimal("sNaN"), Decimal("-sNaN"), np.float32("nan")):
        assert nan != other and not (nan == other) and other != nan  # noqa: SIM201
    assert S(D.F64, 2.0**63) == 2**63 and S(D.F64, 2.0**63) != 2**63 + 1
    assert S(D.U64, 2**64 - 1) != float(2**64) and S(D.U64, 2**64 - 1) == 2**64 - 1
    assert S(D.I64, 2**53 + 1) != 2.0**53 and S(D.I64, 2**53 + 1) == Decimal(2**53 + 1)
    assert S(D.F64, 0.1) == Fraction(0.1) and S(D.F64, 0.1) != Fraction(1, 10)
    assert S(D.F64, 0.1) != Decimal("0.1") and S(D.F64, 0.1) == Decimal.from_float(0.1)
    assert S(D.BF16, 1.5) == 1.5 and S(D.BF16, 0.1) != 0.1 and S(D.BF16, 0.1) == 0.10009765625
    assert S(D.F16, 65504) == 65504 and S(D.F16, 0.1) == np.float16(0.1) and S(D.F16, 0.1) != 0.1
    assert S(D.F8_E4M3, 448) == 448 and S(D.F8_E5M2, "inf") == math.inf == Decimal("Inf")
    assert S(D.F8_E8M0, 2.0**-127) == Fraction(1, 2**127) and S(D.F8_E8M0, 1.0) == True  # noqa: E712
    assert S(D.BOOL, True) == 1 and S(D.BOOL, False) == 0.0 and S(D.BOOL, True) != 2
    assert S(D.F64, 1e308) != Decimal("1e999999999") and S(D.F64, 1e308) < Decimal("1e999999999")
    assert S(D.F64, 5e-324) > Decimal("1e-999999999") > S(D.F64, -0.0)
    assert S(D.I8, 3) == np.int8(3) and np.uint64(3) == S(D.I8, 3)
    assert S(D.F64, 1) == np.longdouble(1) and S(D.F64, 0.5) != np.longdouble(0.5) + 2**-60
    # Not transitive across dtypes: each Scalar equals the number, not the other Scalar.
    assert S(D.F32, 1.0) == 1 == S(D.F64, 1.0) and S(D.F32, 1.0) != S(D.F64, 1.0)
    # Anything else is not equal (and never raises).
    for other in ("1", b"1", None, [1], (1,), 1 + 0j, np.complex64(1), st.tensor(1, D.I8)):
        assert S(D.I8, 1) != other and not (S(D.I8, 1) == other)  # noqa: SIM201
        assert other != S(D.I8, 1)


def test_a_reduction_compares_with_a_number() -> None:
    t = st.tensor([[-1.5, 0.0], [-0.0, -2.0]], D.F32)
    assert t.max() == 0 and t.min() == -2 and t.min() != -2.5 and t.sum() == Fraction(-7, 2)
    assert st.tensor([0.1], D.F32).max() != 0.1 and st.tensor([0.1], D.F32).max() > 0.1
    assert st.tensor([3, 4], D.I64).argmax() == 1 and st.tensor([True], D.BOOL).all() == True  # noqa: E712
    assert st.tensor([math.nan, 1.0], D.F64).max() != math.nan


def test_hash_agrees_with_equality() -> None:
    assert hash(S(D.F32, "nan")) == hash(S(D.F32, "-nan")) == hash(S(D.F8_E5M2, "nan"))
    assert {S(D.F32, 1.0), S(D.F64, 1.0), S(D.F32, 1.0)} == {S(D.F32, 1.0), S(D.F64, 1.0)}
    # A Scalar and an equal number are one dict key / set member.
    assert {1: "one"}[S(D.F32, 1.0)] == "one" and {S(D.I8, 0): "zero"}[0.0] == "zero"
    assert len({S(D.F32, 0.5), 0.5, Fraction(1, 2), Decimal("0.5")}) == 1
    assert S(D.F32, 0.1) not in {0.1} and S(D.F64, 0.1) in {0.1}
    # Unequal Scalars may share a hash: -0.0 and 0.0 are two set members all the same.
    assert hash(S(D.F32, -0.0)) == hash(S(D.F32, 0.0)) and len({S(D.F32, -0.0), S(D.F32, 0.0)}) == 2


def test_decimal_comparisons_ignore_the_context_traps() -> None:
    with decimal.localcontext() as context:
        context.traps[decimal.FloatOperation] = True
        context.traps[decimal.InvalidOperation] = True
        context.prec = 3
        exact = Decimal.from_float(0.1)  # the value of F64's 0.1, every digit
        assert S(D.F64, 0.1) < Decimal("0.1000000000000000056") and S(D.F64, 0.1) == exact
        assert S(D.F64, 12345.5) > Decimal("12345") and S(D.F64, 12345.5) != Decimal("12346")
        for nan in (Decimal("NaN"), Decimal("-sNaN")):
            for compare in (*_ORDER, operator.eq):
                assert compare(S(D.F32, 1.0), nan) is False and compare(nan, S(D.F32, 1.0)) is False
            assert compare(S(D.F32, "nan"), Decimal(1)) is False


@settings(max_examples=300, deadline=None)
@given(scalars())
def test_number_conversions(scalar: st.Scalar) -> None:
    value = scalar.value
    if scalar.dtype.is_float:
        assert float(scalar) == value or math.isnan(value)
        if math.isfinite(value):
            assert int(scalar) == int(value)  # truncation toward zero
            assert Fraction(int(scalar)) == math.trunc(Fraction(value))
        else:
            with pytest.raises(st.RangeError):
                int(scalar)
        with pytest.raises(st.DTypeError):
            operator.index(scalar)
    else:
        assert float(scalar) == float(int(value)) and int(scalar) == int(value)
        if scalar.dtype is D.BOOL:
            with pytest.raises(st.DTypeError):
                operator.index(scalar)
        else:
            assert operator.index(scalar) == value


def test_index_and_truncation_examples() -> None:
    assert int(S(D.F32, -2.75)) == -2 and int(S(D.F64, 2.5)) == 2
    assert float(S(D.U64, 2**64 - 1)) == 2.0**64  # the nearest float, as float(int)
    assert range(10)[S(D.I16, -1)] == 9


# -- format ------------------------------------------------------------------------------


def test_format_examples() -> None:
    tenth = S(D.F32, 0.1)
    assert format(tenth, ".20f") == "0.10000000149011611938"
    assert format(tenth, ".20f") == format(float(np.float32(0.1)), ".20f")
    assert format(tenth, "") == str(tenth) == "0.1" and f"{tenth}" == "0.1"
    assert format(tenth, ">6") == "   0.1" and format(tenth, "+") == "+0.1"
    assert format(S(D.F16, 65504), ",") == "65,500.0"  # str(): shortest text in F16
    assert format(S(D.F16, 65504), ",.1f") == "65,504.0"
    assert format(S(D.F64, 562949953421312.1), ".0%") == "56294995342131212%"
    assert format(S(D.F32, "-0.0"), "z") == "0.0" and format(S(D.F32, "-0.0"), "") == "-0.0"
    assert format(S(D.F32, "nan"), ".3f") == "nan" and format(S(D.F32, "-inf"), "e") == "-inf"
    assert format(S(D.I64, 2**63 - 1), ".0f") == "9223372036854775807"
    assert format(S(D.U64, 2**64 - 1), ".3e") == "1.845e+19"
    assert format(S(D.U64, 2**64 - 1), "e") == format(2.0**64, "e") == "1.844674e+19"
    assert format(S(D.I64, -(2**63) + 1), "_.0f") == "-9_223_372_036_854_775_807"
    assert format(S(D.I64, 2**62 + 1), ">+25.2e") == "                +4.61e+18"
    assert format(S(D.I64, 5), "e") == format(5, "e")
    with pytest.raises(st.FormatError):
        format(S(D.I64, 5), ".2")  # as int: no precision without a float type
    assert format(S(D.I32, 255), "#x") == "0xff" and format(S(D.I32, -1234567), ",") == "-1,234,567"
    assert format(S(D.BOOL, True), "") == "true" and format(S(D.BOOL, False), ">6") == " false"
    for bad in ("d", "Q", ".3s", "abc"):
        with pytest.raises(st.FormatError):
            format(tenth, bad)
    with pytest.raises(st.FormatError):
        format(S(D.BOOL, True), "d")
    with pytest.raises(st.LimitError):
        format(tenth, "999999999")


_TYPED_SPECS = hs.builds(
    lambda sign, precision, kind: f"{sign}.{precision}{kind}",
    hs.sampled_from(["", "+", " "]),
    hs.integers(0, 40),
    hs.sampled_from("feE%"),
)


@settings(max_examples=300, deadline=None)
@given(scalars(), _TYPED_SPECS)
def test_format_is_the_exact_value(scalar: st.Scalar, spec: str) -> None:
    """Against Decimal, which formats the exact value independently of float."""
    value = scalar.value
    if scalar.dtype is D.BOOL or (isinstance(value, float) and not math.isfinite(value)):
        return
    if value == 0:  # Decimal writes zero's exponent its own way ("0.0e+1")
        value = 0.0 if math.copysign(1.0, value) > 0 else -0.0
        assert format(scalar, spec) == format(value, spec)
        return
    expected = re.sub(r"([eE][+-])([0-9])$", r"\g<1>0\g<2>", format(Decimal(value), spec))
    assert format(scalar, spec) == expected


_PLAIN_SPECS = hs.builds(
    lambda align, sign, z, zero, width, grouping: f"{align}{sign}{z}{zero}{width}{grouping}",
    hs.sampled_from(["", "<", ">", "^", "=", "*^", "x<"]),
    hs.sampled_from(["", "+", "-", " "]),
    hs.sampled_from(["", "z"]),
    hs.sampled_from(["", "0"]),
    hs.sampled_from(["", "1", "8", "20"]),
    hs.sampled_from(["", ",", "_"]),
)


@settings(max_examples=300, deadline=None)
@given(hs.floats(allow_nan=True, allow_infinity=True), _PLAIN_SPECS)
def test_untyped_specs_match_python_for_f64(value: float, spec: str) -> None:
    """F64's canonical text is Python's repr, so Python's float formatting is the oracle."""
    if spec and spec[0] in "<>^=" and "0" in spec[1:3]:
        return  # "<0" reads as a zero fill only to Python's parser; ambiguous, skipped
    assert format(S(D.F64, value), spec) == format(value, spec)


@settings(max_examples=200, deadline=None)
@given(scalars([D.F16, D.BF16, D.F32, D.F8_E4M3, D.F8_E5M2]), hs.sampled_from([">12", "+", "^9"]))
def test_untyped_specs_pad_the_canonical_text(scalar: st.Scalar, spec: str) -> None:
    text = format(scalar, spec)
    assert text.strip().removeprefix("+") == str(scalar)


# -- no arithmetic ------------------------------------------------------------------------


def test_scalars_have_no_arithmetic_but_tensors_take_them() -> None:
    s = S(D.F32, 0.5)
    for attempt in (
        lambda: s + 1,
        lambda: 1 + s,
        lambda: s * s,
        lambda: s / 2.0,
        lambda: 2**s,
        lambda: -s,
        lambda: abs(s),
        lambda: s - np.float32(1),
    ):
        with pytest.raises(st.DTypeError, match="no arithmetic"):
            attempt()
    t = st.Tensor.full(D.F32, (2,), 1.0)
    assert (s + t).tolist() == [1.5, 1.5] and (t * s).tolist() == [0.5, 0.5]
    with pytest.raises(TypeError):
        _ = s + "1"  # type: ignore[operator]
