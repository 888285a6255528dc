"""Exact rounding and shortest text of the float dtypes (strided._core.floats).

Oracles: every finite value of the 8- and 16-bit dtypes enumerated from their bit
patterns (nearest wins, ties to the even bit pattern); NumPy's single-step float64 ->
float32 conversion; Python's correctly rounded int / Fraction -> float and repr().
"""

from __future__ import annotations

import bisect
import functools
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core import floats as _floats
from strided._core.floats import parse_float, round_exact, shortest_text

D = st.DType
FLOATS = [D.F16, D.BF16, D.F32, D.F64, D.F8_E4M3, D.F8_E5M2]
SMALL = [D.F16, D.BF16, D.F8_E4M3, D.F8_E5M2]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def from_bits(dtype: st.DType, bits: int) -> float:
    return float(np.array([bits], UINT[dtype.itemsize]).view(dtype.numpy)[0])


def every_value(dtype: st.DType) -> tuple[np.ndarray, np.ndarray]:
    """Every bit pattern of an 8/16-bit dtype and its value as float64."""
    patterns = np.arange(2 ** (8 * dtype.itemsize), dtype=UINT[dtype.itemsize])
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on signalling NaN patterns
        return patterns, patterns.view(dtype.numpy).astype(np.float64)


# -- the brute-force reference rounder -------------------------------------------------


@functools.cache
def _table(dtype: st.DType) -> tuple[list[Fraction], list[bool]]:
    """Non-negative finite values ascending (with their evenness), plus the value one
    step past the largest: infinity's place (even) or, for F8_E4M3, a virtual 480
    (odd), as if the format went on."""
    patterns, values = every_value(dtype)
    keep = np.isfinite(values) & (patterns < 2 ** (8 * dtype.itemsize - 1))
    fractions = [Fraction(float(v)) for v in values[keep]]
    even = [int(b) % 2 == 0 for b in patterns[keep]]
    if dtype is D.F8_E4M3:
        fractions.append(Fraction(480))
        even.append(False)
    else:
        top = fractions[-1]
        step = top - fractions[-2]
        fractions.append(top + step)  # 2**(emax + 1), where infinity sits
        even.append(True)
    return fractions, even


def reference_round(dtype: st.DType, value: Fraction) -> float | None:
    """Nearest finite value, ties to even; None when it would be past the largest."""
    table, even = _table(dtype)
    magnitude = abs(value)
    if magnitude >= table[-1]:
        return None
    i = bisect.bisect_left(table, magnitude)
    if table[i] == magnitude:
        result = table[i]
    else:
        low, high = table[i - 1], table[i]
        if magnitude - low < high - magnitude or (
            magnitude - low == high - magnitude and even[i - 1]
        ):
            result = low
        else:
            result = high
    if i == len(table) - 1 and result == table[-1]:
        return None
    return -float(result) if value < 0 else float(result)


def reference_round_wide(dtype: st.DType, value: Fraction) -> float | None:
    """An independent exact rounder for F32 and F64 (significand loop over Fractions)."""
    precision, emin, emax = {D.F32: (24, -126, 127), D.F64: (53, -1022, 1023)}[dtype]
    magnitude = abs(value)
    if magnitude == 0:
        return 0.0
    exponent = 0
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    unit = Fraction(2) ** (max(exponent, emin) - precision + 1)
    scaled = magnitude / unit
    significand = math.floor(scaled)
    rest = scaled - significand
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and significand % 2):
        significand += 1
    result = significand * unit
    if result >= Fraction(2) ** (emax + 1):
        return None
    return -float(result) if value < 0 else float(result)


def reference(dtype: st.DType, value: Fraction) -> float | None:
    if dtype in (D.F32, D.F64):
        return reference_round_wide(dtype, value)
    return reference_round(dtype, value)


def ours(dtype: st.DType, value: int | float | Fraction) -> float | None:
    try:
        return round_exact(dtype, value)
    except st.RangeError:
        return None


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a == b and math.copysign(1, a) == math.copysign(1, b)) or (a != a and b != b)


# -- strategies ------------------------------------------------------------------------


@hs.composite
def near_midpoints(draw: hs.DrawFn, dtype: st.DType) -> Fraction:
    """Values on, or a hair off, the midpoint between two neighbours of ``dtype``."""
    table, _ = _table(dtype) if dtype in SMALL else (None, None)
    if table is not None:
        i = draw(hs.integers(1, len(table) - 1))
        low, high = table[i - 1], table[i]
    else:
        largest = {D.F32: 0x7F7F_FFFF, D.F64: 0x7FEF_FFFF_FFFF_FFFF}[dtype]
        bits = draw(hs.integers(0, largest))
        low = Fraction(from_bits(dtype, bits))
        above = from_bits(dtype, bits + 1)
        # Past the largest finite value, infinity sits where 2**(emax + 1) would be.
        if math.isfinite(above):
            high = Fraction(above)
        else:
            high = Fraction(2) ** (128 if dtype is D.F32 else 1024)
    middle = (low + high) / 2
    nudge = Fraction(draw(hs.integers(-3, 3)), 2 ** draw(hs.integers(1, 200)))
    value = middle + nudge * (high - low)
    return -value if draw(hs.booleans()) else value


def exact_values(dtype: st.DType) -> hs.SearchStrategy[Fraction]:
    return hs.one_of(
        near_midpoints(dtype),
        hs.fractions(max_denominator=10**30),
        hs.integers(-(2**140), 2**140).map(Fraction),
        hs.floats(allow_nan=False, allow_infinity=False).map(Fraction),
    )


# -- rounding --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@settings(max_examples=300, deadline=None)
@given(data=hs.data())
def test_round_exact_matches_reference(dtype: st.DType, data: hs.DataObject) -> None:
    value = data.draw(exact_values(dtype))
    expected = reference(dtype, value)
    assert same(ours(dtype, value), expected)
    if value.denominator == 1:
        assert same(ours(dtype, value.numerator), expected)
    as_float = exactly_float(value)
    if as_float is not None:
        assert same(ours(dtype, as_float), expected)


def exactly_float(value: Fraction) -> float | None:
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if Fraction(as_float) == value else None


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@settings(max_examples=200, deadline=None)
@given(data=hs.data())
def test_decimal_text_rounds_once(dtype: st.DType, data: hs.DataObject) -> None:
    value = data.draw(exact_values(dtype))
    assume(value != 0)
    digits = data.draw(hs.integers(1, 40))
    if data.draw(hs.booleans()):
        text = _exact_text(value)
        assume(text is not None)
    else:
        assume(abs(value) < 2**1000)
        text = f"{float(value):.{digits}e}"
    expected = reference(dtype, Fraction(text))
    if expected == 0 and text.startswith("-"):
        expected = -0.0  # the Fraction of "-0.0e+00" has lost its sign
    assert same(_parse_or_none(dtype, text), expected)


def _exact_text(value: Fraction) -> str | None:
    """The exact decimal of a dyadic Fraction (None if it is not dyadic or too long)."""
    den = value.denominator
    if den & (den - 1):
        return None
    power = den.bit_length() - 1
    if power > 400:
        return None
    digits = abs(value.numerator) * 5**power
    return f"{'-' if value < 0 else ''}{digits}e-{power}"


def _parse_or_none(dtype: st.DType, text: str) -> float | None:
    try:
        return parse_float(dtype, text)
    except st.RangeError:
        return None


@settings(max_examples=500, deadline=None)
@given(hs.floats(allow_nan=False, allow_infinity=False))
@example(1 + 2**-11 + 2**-40)  # F32 would round this to the F16 midpoint 1 + 2**-11
@example(65519.99999999999)
def test_numpy_f16_and_f32_conversions_round_once(x: float) -> None:
    """The fast paths through np.float16 / np.float32 equal the exact integer rounder."""
    for dtype in (D.F16, D.F32):
        fmt = _floats._FORMATS[dtype]
        slow = None
        if x != 0:
            magnitude, _ = _floats._round_ratio(fmt, *abs(x).as_integer_ratio())
            slow = None if magnitude is None else math.copysign(magnitude, x)
        else:
            slow = x
        assert same(ours(dtype, x), slow)


@settings(max_examples=300, deadline=None)
@given(bits=hs.integers(0, 0x7BFF), nudge=hs.integers(-(2**20), 2**20))
@example(bits=0x7BFF, nudge=0)  # 65520: the overflow midpoint
def test_f16_fast_path_near_every_midpoint(bits: int, nudge: int) -> None:
    low = from_bits(D.F16, bits)
    high = min(from_bits(D.F16, bits + 1), 65536.0)  # infinity sits where 2**16 would be
    x = (low + high) / 2 + nudge * 2.0**-70 * max(high, 2.0**-14)
    assert same(ours(D.F16, x), reference(D.F16, Fraction(x)))


def test_double_rounding_cases() -> None:
    # Just above a BF16 midpoint; rounding through float32 first would land on the
    # midpoint and break the tie downward (to 1.0). strided rounds once, upward.
    x = 1 + 2**-8 + 2**-30
    assert float(np.float32(x)) == 1 + 2**-8  # the float32 step lands on the midpoint
    assert round_exact(D.BF16, x) == 1 + 2**-7
    assert float(st.Scalar(D.BF16, x)) == 1 + 2**-7
    assert st.Tensor.from_numpy(np.array([x])).convert(D.BF16).get([0]).value == 1 + 2**-7
    # An int just above an F32 midpoint; float() rounds it onto the midpoint first.
    n = 2**60 + 2**36 + 1
    assert float(np.float32(float(n))) == 2**60
    assert round_exact(D.F32, n) == 2**60 + 2**37
    assert round_exact(D.F32, n - 1) == 2**60  # the midpoint itself: ties to even
    # Decimal text just above the F32 midpoint 1 + 2**-24; as F64 it is the midpoint.
    text = "1.000000059604644775390625000001"
    assert float(np.float32(float(text))) == 1.0
    assert parse_float(D.F32, text) == 1 + 2**-23
    assert parse_float(D.F32, "1.000000059604644775390625") == 1.0
    assert parse_float(D.F32, "1.000000059604644775390624999999") == 1.0
    # And for F16, NumPy's direct conversion gets it right (no float32 step).
    y = 1 + 2**-11 + 2**-40
    assert round_exact(D.F16, y) == float(np.float16(y)) == 1 + 2**-10


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        (D.F8_E4M3, 448, 448.0),
        (D.F8_E4M3, 464, 448.0),
        (D.F8_E4M3, Fraction(464), 448.0),
        (D.F8_E4M3, -464.0, -448.0),
        (D.F8_E4M3, Fraction(929, 2), None),
        (D.F8_E4M3, 465, None),
        (D.F8_E4M3, math.inf, None),
        (D.F8_E4M3, -math.inf, None),
        (D.F8_E5M2, 57344, 57344.0),
        (D.F8_E5M2, 61439, 57344.0),
        (D.F8_E5M2, 61440, None),
        (D.F8_E5M2, math.inf, math.inf),
        (D.F16, 65519, 65504.0),
        (D.F16, 65519.999, 65504.0),
        (D.F16, 65520, None),
        (D.F16, -65520.0, None),
        (D.F16, 2.0**-25, 0.0),  # half the smallest subnormal: ties to even, zero
        (D.F16, -(2.0**-25), -0.0),
        (D.F16, 2.0**-25 + 2.0**-60, 2.0**-24),
        (D.F32, 2.0**-150, 0.0),
        (D.F32, 3 * 2.0**-150, 2.0**-148),
        (D.F32, Fraction(2**128 - 2**103), None),
        (D.F32, Fraction(2**128 - 2**103 - 1), float(np.finfo(np.float32).max)),
        (D.BF16, 2.0**-134, 0.0),  # half of 2**-133, the smallest BF16 subnormal
        (D.BF16, 2.0**-134 + 2.0**-150, 2.0**-133),
        (D.BF16, 3.39e38, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
        (D.BF16, 3.4e38, None),
        (D.F64, 10**400, None),
        (D.F64, Fraction(1, 10**400), 0.0),
        (D.F64, Fraction(-1, 10**400), -0.0),
        (D.F64, -0.0, -0.0),
        (D.F32, -0.0, -0.0),
        (D.BF16, -0.0, -0.0),
        (D.F8_E4M3, 0, 0.0),
    ],
)
def test_round_exact_edges(
    dtype: st.DType, value: int | float | Fraction, expected: float | None
) -> None:
    assert same(ours(dtype, value), expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_and_huge_inputs(dtype: st.DType) -> None:
    assert math.isnan(round_exact(dtype, math.nan))
    with pytest.raises(st.RangeError):
        round_exact(dtype, 10**5000)  # refused by magnitude before any big shift
    with pytest.raises(st.RangeError):
        round_exact(dtype, Fraction(-(10**5000), 3))
    assert same(round_exact(dtype, Fraction(-1, 10**5000)), -0.0)


def test_round_exact_refuses_non_float_dtypes() -> None:
    with pytest.raises(st.DTypeError):
        round_exact(D.I32, 1.0)


# -- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "+", "-", ".", "e5", "1e", "1e+", "1_0", " 1", "1 ", "0x10", "infinity", "-Infinity",
     "in f", "nan(1)", "1.2.3", "1e5.0", "١", "1\n", "\t1", "++1", "1,5", "1d5", "None"],
)  # fmt: skip
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_parse_float_malformed(dtype: st.DType, text: str) -> None:
    with pytest.raises(st.FormatError):
        parse_float(dtype, text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1.0), ("1.", 1.0), (".5", 0.5), ("1e5", 1e5), ("-2.5E-3", -0.0025), ("+0", 0.0),
     ("-0", -0.0), ("-0.0e10", -0.0), ("InF", math.inf), ("-inf", -math.inf), ("+INF", math.inf),
     ("1e-999999999999", 0.0), ("-1e-999999999999", -0.0), ("0e999999999999", 0.0),
     ("00000001.5000000", 1.5)],
)  # fmt: skip
def test_parse_float_accepts(text: str, expected: float) -> None:
    for dtype in FLOATS:  # None where out of range: 1e5 in F16, inf in F8_E4M3
        assert same(_parse_or_none(dtype, text), ours(dtype, expected))
    assert same(parse_float(D.F64, text), expected)


@pytest.mark.parametrize("text", ["nan", "NaN", "+nan", "-NAN"])
def test_parse_float_nan(text: str) -> None:
    for dtype in FLOATS:
        assert math.isnan(parse_float(dtype, text))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_parse_float_out_of_range_and_limits(dtype: st.DType) -> None:
    for text in ("1e999999999999", "-1e400", "1" * 400):
        with pytest.raises(st.RangeError):
            parse_float(dtype, text)
    with pytest.raises(st.LimitError):
        parse_float(dtype, "1" * 4301)
    with pytest.raises(st.LimitError):
        parse_float(dtype, "1" * 10**6)
    with pytest.raises(st.LimitError):
        parse_float(dtype, "0." + "0" * 4299 + "1")
    assert parse_float(dtype, "0." + "0" * 4290 + "1e4291") == 1.0


def test_parse_float_out_of_range_narrow() -> None:
    with pytest.raises(st.RangeError):
        parse_float(D.F32, "1e39")
    assert parse_float(D.F32, "1e-50") == 0.0
    with pytest.raises(st.RangeError):
        parse_float(D.F8_E4M3, "inf")
    with pytest.raises(st.RangeError):
        parse_float(D.F8_E4M3, "464.0000000000000000000000001")
    assert parse_float(D.F8_E4M3, "464") == 448.0
    # 2**128 - 2**103 is the F32 overflow midpoint (ties away from the odd largest
    # value): at it, RangeError; a hair below it, the largest finite value.
    midpoint = 2**128 - 2**103
    with pytest.raises(st.RangeError):
        parse_float(D.F32, f"{midpoint}.000")
    largest = float(np.finfo(np.float32).max)
    assert parse_float(D.F32, f"{midpoint - 1}.99999999999999999999") == largest


# -- shortest text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "value", "text"),
    [
        (D.F32, float(np.float32(0.1)), "0.1"),
        (D.F32, 16777216.0, "16777216.0"),
        (D.F32, float(np.float32(1e20)), "1e+20"),
        (D.F32, float(np.float32(1e16)), "1e+16"),
        (D.F32, float(np.float32(1e15)), "1000000000000000.0"),
        (D.F32, float(np.float32(1e-5)), "1e-05"),
        (D.F32, float(np.float32(1e-4)), "0.0001"),
        (D.F32, 3.0, "3.0"),
        (D.F32, -0.0, "-0.0"),
        (D.F32, 0.0, "0.0"),
        (D.F32, math.inf, "inf"),
        (D.F32, -math.inf, "-inf"),
        (D.F32, math.nan, "nan"),
        (D.F32, 2.0**-149, "1e-45"),
        (D.F64, 0.1, "0.1"),
        (D.F64, 1e300, "1e+300"),
        (D.F64, 5e-324, "5e-324"),
        (D.BF16, round_exact(D.BF16, 0.1), "0.1"),
        (D.BF16, 1.0, "1.0"),
        (D.BF16, -3.0, "-3.0"),
        (D.BF16, round_exact(D.BF16, 1e20), "1e+20"),
        (D.F16, 65504.0, "65500.0"),
        (D.F16, 2.0**-24, "6e-08"),
        (D.F8_E4M3, 448.0, "450.0"),  # "450" parses back to 448: two digits suffice
        (D.F8_E4M3, 2.0**-9, "0.002"),
        (D.F8_E5M2, 57344.0, "60000.0"),
        (D.F8_E5M2, -(2.0**-16), "-2e-05"),
    ],
)
def test_shortest_text_examples(dtype: st.DType, value: float, text: str) -> None:
    assert shortest_text(dtype, value) == text


def significant_digits(text: str) -> int:
    mantissa = text.lower().split("e")[0].lstrip("-+").replace(".", "")
    return len(mantissa.lstrip("0").rstrip("0")) or 1


def brute_force_shortest(dtype: st.DType, value: float) -> tuple[int, Fraction]:
    """Digit count and closest decimal of the shortest round-tripping text, by search
    over a window of decimals with the enumeration rounder."""
    exact = Fraction(value)
    exp10 = math.floor(math.log10(abs(value)))
    for count in range(1, 20):
        unit = Fraction(10) ** (exp10 - count + 1)
        centre = math.floor(exact / unit)
        fits = [
            d * unit
            for d in range(centre - 3, centre + 4)
            if same(reference(dtype, d * unit), value)
        ]
        if fits:
            return count, min(fits, key=lambda f: (abs(f - exact), (f / unit) % 2))
    raise AssertionError("no round-tripping text")


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_every_small_value_round_trips_shortest(dtype: st.DType) -> None:
    """All 256 / 65536 bit patterns: text parses back, and is never longer than NumPy's
    (F16) or than ml_dtypes' repr digits when those round-trip."""
    for value in every_value(dtype)[1].tolist():
        text = shortest_text(dtype, value)
        assert same(parse_float(dtype, text), value)
        if dtype is D.F16 and math.isfinite(value):
            numpy_text = np.format_float_scientific(np.float16(value), unique=True)
            assert significant_digits(text) <= significant_digits(numpy_text)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
@settings(max_examples=150, deadline=None)
@given(data=hs.data())
def test_shortest_is_shortest_and_closest(dtype: st.DType, data: hs.DataObject) -> None:
    bits = data.draw(hs.integers(0, 2 ** (8 * dtype.itemsize) - 1))
    value = from_bits(dtype, bits)
    assume(math.isfinite(value) and value != 0)
    text = shortest_text(dtype, value)
    count, closest = brute_force_shortest(dtype, value)
    assert significant_digits(text) == count
    assert Fraction(text) == closest


@settings(max_examples=400, deadline=None)
@given(bits=hs.integers(0, 2**32 - 1))
def test_f32_shortest_matches_numpy_and_search(bits: int) -> None:
    value = from_bits(D.F32, bits)
    assume(math.isfinite(value) and value != 0)
    text = shortest_text(D.F32, value)
    assert parse_float(D.F32, text) == value
    numpy_text = np.format_float_scientific(np.float32(value), unique=True)
    assert significant_digits(text) <= significant_digits(numpy_text)
    digits, exp10 = _floats._search_shortest.__wrapped__(D.F32, abs(value))
    assert Fraction(text) == Fraction(("-" if value < 0 else "") + digits) * Fraction(10) ** (
        exp10 - len(digits) + 1
    )


@settings(max_examples=300, deadline=None)
@given(x=hs.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0))
@example(2.0**-1074)
@example(2.0**1023)
@example(9007199254740993.0)
def test_generic_search_reproduces_python_repr(x: float) -> None:
    """The generic digit search (used for BF16/FP8) gives exactly repr() on F64."""
    digits, exp10 = _floats._search_shortest.__wrapped__(D.F64, abs(x))
    assert _floats.render(x < 0, digits, exp10) == repr(x)
