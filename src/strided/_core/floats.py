"""Exact rounding, parsing and shortest text for the float dtypes.

Every value of every float dtype (F64 down to FP8) is exactly a Python float, so values
travel as Python floats; the exact inputs to rounding (big ints, decimal text) are
handled with integer arithmetic. Rounding is always to nearest, ties to even, done
**once**, directly in the target format: going through an intermediate format (float64
to bfloat16 via float32, as ml_dtypes does; a big int to F32 via ``float()``; decimal
text to F64 then narrowed) can round twice and land one step off.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any

import numpy as np

from .dtype import FLOAT_LAYOUTS, DType, FloatLayout
from .errors import DTypeError, FormatError, LimitError, RangeError
from .limits import MAX_DIGITS

__all__ = [
    "MAX_DIGITS",
    "parse_float",
    "render",
    "round_exact",
    "shortest_text",
    "significand_bits",
]


# Past F8_E4M3's largest finite value (448) rounding goes on as if 480 existed, which
# makes 464 (the midpoint) a tie that goes to even, 448.
_FORMATS = FLOAT_LAYOUTS  # read through _format(), which names a non-float

# NumPy converts a double to float32 (a hardware conversion) and to float16 (its own
# bit-level routine, or a hardware one) with a single correctly rounded step, so these
# are exact. The bound is the midpoint above the largest finite value: at or past it the
# result is infinity (the largest value's significand is odd, so the tie goes up).
_NUMPY_FAST: dict[DType, tuple[type[np.floating[Any]], float]] = {
    DType.F32: (np.float32, float(2**128 - 2**103)),
    DType.F16: (np.float16, 65520.0),
}


def significand_bits(dtype: DType) -> int:
    """The significand bits of a rounding float format, the implicit leading bit included."""
    return _format(dtype).precision


def _format(dtype: DType) -> FloatLayout:
    fmt = _FORMATS.get(dtype)
    if fmt is None:
        raise DTypeError(f"{dtype} is not a float dtype")
    return fmt


def _round_ratio(fmt: FloatLayout, num: int, den: int) -> tuple[float | None, bool]:
    """Round ``num / den`` (both > 0) to ``fmt``: ``(result, was_exact_tie)``.

    The result is None when it lies past the largest finite value.
    """
    lead = num.bit_length() - den.bit_length()  # floor(log2(num / den)), or one more
    if (num << -lead if lead < 0 else num) < (den << lead if lead > 0 else den):
        lead -= 1
    if lead > fmt.emax:  # checked before any shift, so 10**4300 costs nothing
        return None, False
    qexp = max(lead, fmt.emin) - fmt.precision + 1  # exponent of one unit in the last place
    if qexp >= 0:
        den <<= qexp
    else:
        num <<= -qexp
    significand, rem = divmod(num, den)
    tie = 2 * rem == den
    if 2 * rem > den or (tie and significand & 1):
        significand += 1
    top = fmt.emax - fmt.precision + 1
    if qexp > top or (qexp == top and significand > fmt.max_significand):
        return None, tie
    return math.ldexp(significand, qexp), tie


def _describe(value: int | float | Fraction) -> str:
    if isinstance(value, int) and value.bit_length() > 200:
        return f"an integer of {value.bit_length()} bits"  # str() of a huge int may raise
    if isinstance(value, Fraction) and max(abs(value.numerator), value.denominator) > 2**200:
        magnitude = value.numerator.bit_length() - value.denominator.bit_length()
        return f"a fraction of about 2**{magnitude}"
    return repr(value)


def round_exact(dtype: DType, value: int | float | Fraction) -> float:
    """Round an exact value to nearest-even directly in float ``dtype``; return a float.

    NaN stays NaN; infinities stay, except into F8_E4M3 (no infinity: RangeError). A
    finite value that rounds past the largest finite value is RangeError. A negative
    value that rounds to zero gives -0.0; -0.0 is kept. F8_E8M0 does not round: the
    value must be exactly one of its powers of two, or NaN (RangeError otherwise).
    """
    if dtype is DType.F8_E8M0:
        return _power_of_two(value)
    fmt = _format(dtype)
    if isinstance(value, float):
        value = float(value)  # a plain float, not np.float64 or another subclass
        if math.isfinite(value):
            return _round_float(dtype, fmt, value)
        if value != value or fmt.has_inf:
            return value
        raise RangeError(f"{value} has no {dtype.name} representation (it has no infinity)")
    if isinstance(value, Fraction):
        if value.denominator == 1:
            value = value.numerator
        else:
            rounded, _ = _round_ratio(fmt, abs(value.numerator), value.denominator)
            return _signed(dtype, rounded, value < 0, value)
    if -(2**53) <= value <= 2**53:  # exactly a float, so the float path is exact
        return _round_float(dtype, fmt, float(value))
    rounded, _ = _round_ratio(fmt, abs(value), 1)
    return _signed(dtype, rounded, value < 0, value)


_E8M0_EXPONENTS = range(-127, 128)


def _power_of_two(value: int | float | Fraction) -> float:
    """``value`` as an F8_E8M0 value: exactly 2**k with -127 <= k <= 127, or NaN."""
    if isinstance(value, float):
        if value != value:
            return value
        significand, exponent = math.frexp(value)
        if significand == 0.5 and exponent - 1 in _E8M0_EXPONENTS:
            return value
    elif value > 0:
        num, den = (value, 1) if isinstance(value, int) else value.as_integer_ratio()
        if num & (num - 1) == 0 and den & (den - 1) == 0:  # num or den is 1 (lowest terms)
            exponent = num.bit_length() - den.bit_length()
            if exponent in _E8M0_EXPONENTS:
                return math.ldexp(1.0, exponent)
    raise RangeError(
        f"{_describe(value)} is not an F8_E8M0 value (only the powers of two 2**-127 to "
        f"2**127, and nan)"
    )


def _round_float(dtype: DType, fmt: FloatLayout, value: float) -> float:
    if dtype is DType.F64 or value == 0.0:
        return value
    fast = _NUMPY_FAST.get(dtype)
    if fast is not None:
        if abs(value) >= fast[1]:
            raise _out_of_range(dtype, value)
        return float(fast[0](value))
    rounded, _ = _round_ratio(fmt, *abs(value).as_integer_ratio())
    return _signed(dtype, rounded, value < 0, value)


def _signed(
    dtype: DType, rounded: float | None, negative: bool, value: int | float | Fraction
) -> float:
    if rounded is None:
        raise _out_of_range(dtype, value)
    return -rounded if negative else rounded


def _out_of_range(dtype: DType, value: int | float | Fraction) -> RangeError:
    largest = math.ldexp(_FORMATS[dtype].max_significand, _top_exponent(dtype))
    return RangeError(
        f"{_describe(value)} is out of range for {dtype.name} (largest finite {largest!r})"
    )


def _top_exponent(dtype: DType) -> int:
    fmt = _FORMATS[dtype]
    return fmt.emax - fmt.precision + 1


_SPECIAL = {
    "inf": math.inf,
    "+inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
}
# A Python float literal, ASCII digits only, no underscores, no surrounding space.
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_float(dtype: DType, text: str) -> float:
    """Parse float text exactly into float ``dtype`` (the decimal is rounded once).

    Grammar: a Python float literal without underscores or surrounding spaces, or
    ``inf``/``nan`` with an optional sign, any case (``infinity`` is refused). Malformed
    text is FormatError, more than MAX_DIGITS digits LimitError, a finite value that
    rounds past the largest finite value RangeError. F8_E8M0 text is read as the
    nearest F64 (as ``float()`` reads it), which must be one of its values.
    """
    fmt = _FORMATS.get(dtype)
    if fmt is None and dtype is not DType.F8_E8M0:
        raise DTypeError(f"{dtype} is not a float dtype")
    if len(text) > MAX_DIGITS + 4:  # sign, point, 'e', exponent sign: 4 non-digits at most
        raise LimitError(f"{dtype.name} text of {len(text)} characters is too long")
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return round_exact(dtype, special)
    if _FLOAT_RE.fullmatch(text) is None:
        raise FormatError(f"malformed {dtype.name} text {text[:40]!r}")
    if len(text) - sum(text.count(c) for c in "+-.eE") > MAX_DIGITS:
        raise LimitError(f"{dtype.name} text has more than {MAX_DIGITS} digits")
    # float() rounds correctly to F64. Every midpoint between neighbours in a narrower
    # format is itself an F64 value, so rounding the F64 result again lands where
    # rounding the decimal would, unless that F64 result is exactly such a midpoint:
    # only then does the decimal itself decide which way the tie breaks.
    approx = float(text)
    if math.isinf(approx):  # at least 2**1024, beyond every dtype
        raise RangeError(f"{text[:40]!r} is out of range for {dtype.name}")
    if fmt is None:  # F8_E8M0
        return _power_of_two(approx)
    if dtype is DType.F64 or approx == 0.0:  # below 2**-1075: zero in every dtype
        return approx
    rounded, tie = _round_ratio(fmt, *abs(approx).as_integer_ratio())
    if tie:
        rounded, _ = _round_ratio(fmt, *_decimal_ratio(text))
    if rounded is None:
        raise RangeError(f"{text[:40]!r} is out of range for {dtype.name}")
    return -rounded if approx < 0 else rounded


def _decimal_ratio(text: str) -> tuple[int, int]:
    """The exact value of unsigned-magnitude float text as (num, den).

    Only called when float(text) is a midpoint of a narrower format, so the value is
    between 2**-150 and 2**128 and the power of ten stays small.
    """
    mantissa, _, exponent = text.lstrip("+-").lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    try:
        power = int(exponent or "0") - len(fraction)
        digits = int(whole + fraction)
    except ValueError:  # only if the process lowered sys.set_int_max_str_digits
        raise LimitError(f"float text {text[:40]!r} has too many digits") from None
    if power >= 0:
        return digits * 10**power, 1
    return digits, 10**-power


def shortest_text(dtype: DType, value: float) -> str:
    """The canonical text of ``value``, which must be exactly a value of float ``dtype``.

    The fewest significant digits that parse back to ``value`` in ``dtype``, the closest
    such decimal when there are several, in Python's repr style: ``0.1``, ``3.0``,
    ``1e-05``, ``1e+20``, ``-0.0``, ``inf``, ``-inf``, ``nan``. For F64 it is repr(), and
    for F8_E8M0 too (its text is read through F64).
    """
    if not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if value == 0.0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if dtype is DType.F64 or dtype is DType.F8_E8M0:
        return repr(value)
    fast = _NUMPY_FAST.get(dtype)
    if fast is not None:
        # NumPy's Dragon4 in "unique" mode finds the shortest digits for its own dtype.
        text = np.format_float_scientific(fast[0](abs(value)), unique=True, trim="-")
        mantissa, _, exponent = text.partition("e")
        digits = mantissa.replace(".", "").rstrip("0")
        exp10 = int(exponent)
    else:
        digits, exp10 = _search_shortest(dtype, abs(value))
    return render(value < 0, digits, exp10)


@functools.lru_cache(maxsize=1 << 16)  # holds every BF16 value: bulk text stays fast
def _search_shortest(dtype: DType, value: float) -> tuple[str, int]:
    """Shortest round-tripping digits of ``value`` > 0 and the exponent of the first one.

    For each digit count, only the two decimals around the value can be the closest
    that round-trips: the values that round to ``value`` form an interval containing it.
    """
    fmt = _FORMATS[dtype]
    num, den = value.as_integer_ratio()
    exp10 = math.floor(math.log10(value))
    if Fraction(10) ** exp10 > value:  # log10 may be one off near powers of ten
        exp10 -= 1
    elif Fraction(10) ** (exp10 + 1) <= value:
        exp10 += 1
    count = 1
    while True:
        scale = exp10 - count + 1  # candidates are integer multiples of 10**scale
        n, d = (num, den * 10**scale) if scale >= 0 else (num * 10**-scale, den)
        low, rem = divmod(n, d)
        fits = []
        for candidate in (low, low + 1) if rem else (low,):
            cn, cd = (candidate * 10**scale, 1) if scale >= 0 else (candidate, 10**-scale)
            if _round_ratio(fmt, cn, cd)[0] == value:
                fits.append(candidate)
        if fits:
            if len(fits) == 2:  # both round-trip: take the closer, ties to the even one
                prefer_low = 2 * rem < d or (2 * rem == d and low % 2 == 0)
                fits = fits[:1] if prefer_low else fits[1:]
            text = str(fits[0])
            return text.rstrip("0"), scale + len(text) - 1
        count += 1


def render(negative: bool, digits: str, exp10: int) -> str:
    """Python's float ``repr`` layout of ``0.d1d2d3... * 10**(exp10 + 1)``.

    ``digits`` are the significant digits without leading or trailing zeros; Python
    switches to exponent form when the decimal exponent is below -4 or at least 16.
    """
    sign = "-" if negative else ""
    if exp10 < -4 or exp10 >= 16:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{exp10:+03d}"
    if exp10 >= 0:
        whole = digits[: exp10 + 1].ljust(exp10 + 1, "0")
        return f"{sign}{whole}.{digits[exp10 + 1 :] or '0'}"
    return f"{sign}0.{'0' * (-exp10 - 1)}{digits}"
