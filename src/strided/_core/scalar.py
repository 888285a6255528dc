"""Scalar: an exact, typed, immutable value, with exact parsing and shortest text."""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, NoReturn

import numpy as np

from .dtype import DType, bind_scalar, finite_range, ml_dtypes_module
from .errors import DTypeError, FormatError, LimitError, RangeError
from .floats import MAX_DIGITS, parse_float, round_exact, shortest_text
from .scalar_format import format_scalar

__all__ = ["Scalar", "parse_value", "to_value"]

PyValue = bool | int | float
"""The exact Python value of a scalar: bool for BOOL, int for integers, float for floats."""

_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT_RANGE = {dtype: finite_range(dtype) for dtype in DType if dtype.is_integer} | {
    DType.BOOL: (0, 1)
}
_BOOL_TEXT = {"true": True, "1": True, "false": False, "0": False}


@functools.cache
def _ml_scalar_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """ml_dtypes' integer and float scalar types (asked for only once one is met).

    ml_dtypes scalars are NumPy scalars but not np.floating / np.integer subclasses.
    """
    found = vars(ml_dtypes_module()).items()
    ints = tuple(t for name, t in found if name.startswith(("int", "uint")) and isinstance(t, type))
    floats = tuple(
        t for name, t in found if name.startswith(("float", "bfloat")) and isinstance(t, type)
    )
    return ints, floats


def parse_value(dtype: DType, text: object) -> PyValue:
    """Parse scalar text into the exact Python value of ``dtype`` (see ``Scalar.parse``)."""
    if not isinstance(text, str):
        raise FormatError(f"{dtype.name} text must be a str, found {type(text).__name__}")
    if dtype.is_float:
        return parse_float(dtype, text)
    if dtype is DType.BOOL:
        found = _BOOL_TEXT.get(text.lower()) if len(text) <= 5 else None
        if found is None:
            raise FormatError(f"BOOL text must be true, false, 1 or 0, found {text[:40]!r}")
        return found
    # The digit cap is checked before anything scans the text: a long string costs nothing.
    if len(text) > MAX_DIGITS + 1 or len(text.lstrip("+-")) > MAX_DIGITS:
        raise LimitError(f"{dtype.name} text has more than {MAX_DIGITS} digits")
    if _INT_RE.fullmatch(text) is None:
        raise FormatError(f"malformed {dtype.name} text {text[:40]!r}; expected [+-]?[0-9]+")
    try:
        number = int(text)
    except ValueError:  # only if the process lowered sys.set_int_max_str_digits
        raise LimitError(f"{dtype.name} text has too many digits") from None
    return _fit_int(dtype, number)


def to_value(dtype: DType, value: object) -> PyValue:
    """Convert a constructor argument to the exact Python value of ``dtype``."""
    if isinstance(value, str):
        return parse_value(dtype, value)
    if isinstance(value, Scalar):
        if value.dtype is not dtype:
            raise DTypeError(
                f"expected a {dtype.name} value, found a Scalar of dtype {value.dtype.name}"
            )
        return value.value
    number = _exact_number(value)
    if dtype.is_float:
        return round_exact(dtype, number)
    if isinstance(number, Fraction):  # from np.longdouble
        if number.denominator != 1:
            raise RangeError(f"{float(number)!r} is not an integer, so it is not {dtype.name}")
        number = number.numerator
    elif isinstance(number, float):
        if not number.is_integer():  # NaN and infinities included
            raise RangeError(f"{number!r} is not an integer, so it is not {dtype.name}")
        number = int(number)
    return _fit_int(dtype, number)


def _exact_number(value: object) -> int | float | Fraction:
    """The exact number a non-text argument stands for; DTypeError for other types."""
    if type(value) is int or type(value) is float:
        return value
    # bool, IntEnum, np.float64 and other subclasses: the base type's value, exactly
    # (int.__int__ / float.__float__ directly, so an overridden __int__ cannot interfere).
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, np.generic):
        kind = value.dtype.kind
        if kind == "b":
            return int(bool(value))
        # NumPy's own kinds need no look-up; only a scalar of another kind (ml_dtypes'
        # are mostly "V") can be one of ml_dtypes'. Looking those up imports ml_dtypes,
        # which a caller holding such a scalar has done already.
        ml_ints, ml_floats = ((), ()) if kind in "iuf" else _ml_scalar_types()
        if kind in "iu" or isinstance(value, ml_ints):
            return int(value)
        if kind == "f" or isinstance(value, ml_floats):
            if value.dtype.itemsize > 8 and np.isfinite(value) and value != 0:
                return Fraction(*value.as_integer_ratio())  # type: ignore[attr-defined]
            return float(value)
    raise DTypeError(
        "a Scalar value must be a bool, int, float, str, Scalar or NumPy scalar, "
        f"found {type(value).__name__}"
    )


_NAN_HASH = 0x5CA1A7
"""The hash of every NaN Scalar (hash(nan) is per object, so the value's cannot serve)."""


def _exact_pair(value: PyValue, other: object) -> tuple[Any, Any] | None:
    """``value`` and ``other`` as two numbers Python compares exactly, or None.

    None when ``other`` is not a plain number (so the comparison is NotImplemented).
    Python compares int, float and Fraction exactly among themselves; a Decimal is
    compared as a Decimal, against the Scalar's value converted exactly (so a Decimal's
    huge exponent costs nothing and the context's traps never fire). A NaN on either
    side of a Decimal comparison gives a pair of float NaNs: every comparison False,
    where Decimal's own ordering would raise InvalidOperation.
    """
    if isinstance(other, Scalar):
        return value, other._value
    if isinstance(other, Fraction):
        return value, other
    if isinstance(other, Decimal):
        if other.is_nan() or value != value:
            return math.nan, math.nan
        return Decimal.from_float(value), other
    try:
        return value, _exact_number(other)
    except DTypeError:
        return None


def _fit_int(dtype: DType, number: int) -> PyValue:
    low, high = _INT_RANGE[dtype]
    if not low <= number <= high:
        shown = (
            str(number)
            if number.bit_length() <= 200
            else f"an integer of {number.bit_length()} bits"
        )
        raise RangeError(f"{shown} is out of range for {dtype.name} ({low} to {high})")
    return bool(number) if dtype is DType.BOOL else number


def _check_dtype(dtype: object) -> DType:
    if not isinstance(dtype, DType):
        raise DTypeError(f"dtype must be a DType, found {type(dtype).__name__}")
    return dtype


def _cast_for(dtype: DType) -> type:
    if dtype is DType.BOOL:
        return bool
    return float if dtype.is_float else int


_CAST: dict[DType, Any] = {dtype: _cast_for(dtype) for dtype in DType}


def _no_arithmetic(self: Scalar, *other: object) -> Any:
    """Scalars have no arithmetic; others' operators (a Tensor's) still get their turn."""
    if other and not isinstance(other[0], (int, float, complex, Fraction, Scalar, np.generic)):
        return NotImplemented
    raise DTypeError(
        f"{self!r} has no arithmetic: compute on its exact Python value s.value, or on "
        f"tensors (Tensor.scalar(s), or t + s)"
    )


class Scalar:
    """An exact, typed, immutable, hashable value of one DType.

    ``Scalar(dtype, value)`` takes a bool, int, float, str (parsed as by ``parse``), a
    Scalar of the same dtype, or a NumPy / ml_dtypes scalar. A bool is the int 0 or 1.
    Integers must fit (``Scalar(I8, 300)`` is RangeError, never 44), floats for an
    integer dtype must be integral and finite (else RangeError), and values for a float
    dtype round to nearest-even directly in that dtype; a finite value that rounds past
    the largest finite value is RangeError. F8_E8M0 does not round: a value that is not
    exactly one of its powers of two 2**-127 ... 2**127 (or NaN) is RangeError. A Scalar
    of another dtype, a non-DType ``dtype``, and any other value type (None, complex,
    bytes, Fraction, lists, 0-d arrays, ...) are DTypeError.

    Equality between Scalars is structural: same dtype and same value, ``-0.0 != 0.0``
    and every NaN equals every NaN. Against a plain number (int, float, bool,
    ``fractions.Fraction``, ``decimal.Decimal``, a NumPy or ml_dtypes number) a Scalar
    compares by exact value, as ordering does: ``t.max() == 0`` works,
    ``Scalar(F32, 0.1) == 0.1`` is False (F32's 0.1 is 0.100000001490116...),
    ``Scalar(F32, -0.0) == 0`` is True, a NaN Scalar equals no number, and huge ints,
    Fractions and Decimals compare exactly (``Scalar(F64, 2.0**63) == 2**63 + 1`` is
    False). Equality with numbers is therefore not transitive across dtypes:
    ``Scalar(F32, 1.0) == 1 == Scalar(F64, 1.0)``, yet the two Scalars differ. Anything
    else (str, None, complex, a Tensor, ...) is not equal. ``hash(s) == hash(s.value)``
    for every non-NaN Scalar, so a Scalar and an equal number share a dict slot (and two
    unequal Scalars such as F32 ``-0.0`` and ``0.0``, or F32 and F64 ``1.0``, may share a
    hash); every NaN Scalar hashes to one fixed constant.

    Ordering (``<``, ``<=``, ``>``, ``>=``) is numeric and exact, against the same plain
    numbers and Scalars of any dtype: ``Scalar(F32, 0.1) > 0.1`` is True; any NaN
    (a NaN Decimal, quiet or signalling, included) compares False and never raises;
    infinities order as usual; BOOL counts as 0 and 1, as Python's bool does. So
    ``Scalar(F32, 1.0) <= Scalar(F64, 1.0)`` holds though the two are not equal.
    Comparisons with Decimals do not depend on the ``decimal`` context (no trap fires).

    As a number: ``float(s)`` is the exact value for floats and the nearest float for
    integers (as ``float(int)``); ``int(s)`` truncates floats toward zero as ``int()``
    does (RangeError for NaN and infinities); ``__index__`` (indexing, ``range``) works
    for integer dtypes only, not BOOL or floats (DTypeError). ``format(s, spec)``
    formats the exact value: ``format(Scalar(F32, 0.1), ".20f")`` shows F32's digits,
    integers take integer specs (``"x"``, ``","``) and, exactly, float ones
    (``".3e"``); a spec with neither a type nor a precision (``">8"``, ``"+"``) pads
    the canonical text ``str(s)``; BOOL formats its text ``true`` / ``false`` with string
    specs. A spec that does not fit is FormatError. Scalars have no arithmetic
    (DTypeError): compute on ``s.value``, or on tensors.
    """

    __slots__ = ("_dtype", "_value")
    _dtype: DType
    _value: PyValue

    def __init__(self, dtype: DType, value: object) -> None:
        object.__setattr__(self, "_dtype", _check_dtype(dtype))
        object.__setattr__(self, "_value", to_value(dtype, value))

    @classmethod
    def parse(cls, dtype: DType, text: str) -> Scalar:
        """Parse scalar text exactly.

        Integers: ``[+-]?[0-9]+`` (ASCII; no ``_``, spaces, ``0x`` or ``1.0``). Floats:
        Python float literals without underscores or surrounding spaces, plus ``inf``,
        ``nan`` with an optional sign, any case (not ``infinity``); the decimal is
        rounded once, directly in ``dtype`` (F8_E8M0 text is read as the nearest F64,
        which must be exactly one of its values). BOOL: ``true``/``false`` (any case), ``1``,
        ``0``. Malformed text (or a non-str) is FormatError, a well-formed value out of
        range RangeError, text with more than MAX_DIGITS (4300) digits LimitError.
        """
        return cls._trusted(_check_dtype(dtype), parse_value(dtype, text))

    @classmethod
    def _trusted(cls, dtype: DType, value: Any) -> Scalar:
        """Wrap a value already exact in ``dtype``, without checks.

        ``value`` may be a Python, NumPy or ml_dtypes scalar (``arr.item()`` or
        ``arr[i]``); it is converted to bool / int / float by dtype kind, not validated.
        """
        # Slot descriptors directly: tensor reads build many Scalars, and this is
        # about twice as fast as object.__setattr__.
        self = _new(cls)
        _set_dtype(self, dtype)
        _set_value(self, _CAST[dtype](value))
        return self

    @property
    def dtype(self) -> DType:
        """The DType."""
        return self._dtype

    @property
    def value(self) -> PyValue:
        """The exact Python value: bool for BOOL, int for integers, float for floats."""
        return self._value

    def __str__(self) -> str:
        value = self._value
        if self._dtype is DType.BOOL:
            return "true" if value else "false"
        if isinstance(value, float):
            return shortest_text(self._dtype, value)
        return str(value)

    def __repr__(self) -> str:
        return f"Scalar({self._dtype.name}, {self})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Scalar):
            if self._dtype is not other._dtype:
                return False
            a, b = self._value, other._value
            if isinstance(a, float):
                if a != a:
                    return b != b
                return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
            return a == b
        pair = _exact_pair(self._value, other)
        return NotImplemented if pair is None else bool(pair[0] == pair[1])

    def __hash__(self) -> int:
        value = self._value
        if value != value:  # hash(nan) is per object; every NaN Scalar must hash alike
            return _NAN_HASH
        # Python's numeric hash: equal to the hash of every equal int, float, Fraction
        # and Decimal, as equality with numbers requires.
        return hash(value)

    def __format__(self, spec: str) -> str:
        return format_scalar(self, spec)

    def __lt__(self, other: object) -> bool:
        pair = _exact_pair(self._value, other)
        return NotImplemented if pair is None else bool(pair[0] < pair[1])

    def __le__(self, other: object) -> bool:
        pair = _exact_pair(self._value, other)
        return NotImplemented if pair is None else bool(pair[0] <= pair[1])

    def __gt__(self, other: object) -> bool:
        pair = _exact_pair(self._value, other)
        return NotImplemented if pair is None else bool(pair[0] > pair[1])

    def __ge__(self, other: object) -> bool:
        pair = _exact_pair(self._value, other)
        return NotImplemented if pair is None else bool(pair[0] >= pair[1])

    def __int__(self) -> int:
        value = self._value
        if isinstance(value, float) and not math.isfinite(value):
            raise RangeError(f"int() of {self!r}: {value} has no integer value")
        return int(value)

    def __float__(self) -> float:
        return float(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __index__(self) -> int:
        if not self._dtype.is_integer:
            raise DTypeError(f"{self!r} cannot be used as an index: only integer dtypes can")
        return int(self._value)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _no_arithmetic
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _no_arithmetic
    __mod__ = __rmod__ = __divmod__ = __rdivmod__ = __pow__ = __rpow__ = _no_arithmetic
    __neg__ = __pos__ = __abs__ = _no_arithmetic

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Scalar is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Scalar is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[type[Scalar], tuple[DType, PyValue]]:
        return (Scalar, (self._dtype, self._value))

    def __copy__(self) -> Scalar:
        return self

    def __deepcopy__(self, memo: object) -> Scalar:
        return self


_new = object.__new__
_set_dtype = Scalar.__dict__["_dtype"].__set__
_set_value = Scalar.__dict__["_value"].__set__
bind_scalar(Scalar)
