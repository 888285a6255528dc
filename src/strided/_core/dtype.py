"""DType: the closed set of element types, their names, NumPy mapping and ranges."""

from __future__ import annotations

import enum
import functools
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .errors import DTypeError
from .limits import describe

if TYPE_CHECKING:
    from .scalar import Scalar

__all__ = [
    "FLOAT_LAYOUTS",
    "FROM_ML_DTYPES",
    "DType",
    "FloatLayout",
    "as_dtype",
    "bind_scalar",
    "finfo",
    "finite_range",
    "ml_dtypes_module",
]

# Scalar is built on DType (``scalar`` imports this module), so ``DType.min``/``max``
# cannot import it without a loop: ``scalar`` hands its class over here when it is
# imported, and ``strided.DType`` is resolved through ``scalar`` so that has happened.
_SCALAR: list[type[Scalar]] = []


def bind_scalar(cls: type[Scalar]) -> None:
    """Record the Scalar class that ``DType.min`` and ``DType.max`` return."""
    _SCALAR[:] = [cls]


def _scalar_class() -> type[Scalar]:
    if not _SCALAR:
        raise DTypeError("DType.min/max need strided's Scalar: import strided first")
    return _SCALAR[0]


class _DTypeMeta(enum.EnumMeta):
    def __getitem__(cls, name: str) -> Any:
        # DType["x"] would raise KeyError; every failure of ours is a DataError.
        try:
            return super().__getitem__(name)
        except KeyError:
            raise DTypeError(f"unknown dtype name {describe(name)}") from None


class DType(enum.Enum, metaclass=_DTypeMeta):
    """An element type. ``name`` is the canonical text, the same names safetensors uses.

    The 8-bit floats are storage-only: they can be built, viewed, updated, printed,
    written, read, inspected, compared with ``==`` and converted, but arithmetic and
    element-wise comparisons on them are a ``DTypeError`` (convert to F32 first).
    ``F8_E4M3`` (``ml_dtypes.float8_e4m3fn``) has no infinity; ``F8_E5M2`` is
    ``ml_dtypes.float8_e5m2``; ``F8_E8M0`` (``ml_dtypes.float8_e8m0fnu``, the scale type
    of MX formats) holds only the powers of two 2**-127 ... 2**127 and NaN: no zero, no
    sign, no infinity. A value that is not exactly one of those (0, 3.0, -1.0, 2.0**128,
    infinity) is a ``RangeError`` when converted into F8_E8M0, so
    ``Tensor.zeros(F8_E8M0, ...)`` is one too; text is read as the nearest F64 first (as
    ``float()`` reads it), which must then be one of those values.
    """

    BOOL = "BOOL"
    I8 = "I8"
    I16 = "I16"
    I32 = "I32"
    I64 = "I64"
    U8 = "U8"
    U16 = "U16"
    U32 = "U32"
    U64 = "U64"
    F16 = "F16"
    BF16 = "BF16"
    F32 = "F32"
    F64 = "F64"
    F8_E4M3 = "F8_E4M3"
    F8_E5M2 = "F8_E5M2"
    F8_E8M0 = "F8_E8M0"

    # Members are singletons compared by identity, so the identity hash agrees with
    # equality; Enum's own __hash__ is Python code, and DTypes key hot dict lookups.
    __hash__ = object.__hash__

    @property
    def numpy(self) -> np.dtype[Any]:
        """The little-endian NumPy dtype (BF16 and the 8-bit floats through ``ml_dtypes``).

        Asking for the type of BF16 or an 8-bit float imports ``ml_dtypes`` (once).
        """
        try:
            return _NUMPY[self]
        except KeyError:
            return _ml_numpy(self)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _FACTS[self].itemsize

    @property
    def is_float(self) -> bool:
        """True for the floating-point dtypes, FP8 included."""
        return self in _FLOATS

    @property
    def is_integer(self) -> bool:
        """True for the signed and unsigned integer dtypes (not BOOL)."""
        return self in _INTEGERS

    @property
    def is_signed(self) -> bool:
        """True for signed integers and the floats that have a sign (all but F8_E8M0)."""
        return self in _SIGNED

    @property
    def is_storage_only(self) -> bool:
        """True for the 8-bit floats, which support no arithmetic."""
        return self in _STORAGE_ONLY

    @property
    def min(self) -> Scalar:
        """The smallest finite value, as a Scalar (``false`` for BOOL, 2**-127 for F8_E8M0)."""
        return _scalar_class()(self, _FACTS[self].min)

    @property
    def max(self) -> Scalar:
        """The largest finite value, as a Scalar (``true`` for BOOL)."""
        return _scalar_class()(self, _FACTS[self].max)

    @classmethod
    def parse(cls, text: object) -> DType:
        """Parse a canonical name (``"I16"``) or NumPy name (``"int16"``), any case.

        Type codes such as ``"f4"`` or ``"<i2"`` and anything else are DTypeError.
        """
        if not isinstance(text, str):
            raise DTypeError(f"dtype name must be a string, found {type(text).__name__}")
        found = _BY_NAME.get(text.upper()) if text.isascii() else None
        if found is None:
            raise DTypeError(f"unknown dtype {text[:40]!r}; expected one of {_NAMES}")
        return found

    @classmethod
    def from_numpy(cls, dtype: object) -> DType:
        """The DType of a NumPy dtype; byte order is ignored (data is converted on copy)."""
        try:
            np_dtype = np.dtype(dtype)  # type: ignore[call-overload]
        except Exception:
            np_dtype = _ml_dtypes_name(dtype)
        try:
            little = np_dtype.newbyteorder("<")
            found = _BY_NUMPY.get(little)
            if found is None and little.name in _ML_NAMES:
                # An ml_dtypes dtype (or one named like it): ml_dtypes is loaded already.
                found = _by_numpy_all().get(little)
        except Exception:  # structured and other dtypes without a byte order
            found = None
        if found is None:
            raise DTypeError(f"NumPy dtype {np_dtype} has no strided equivalent")
        return found

    @classmethod
    def _missing_(cls, value: object) -> DType:
        # DType("x") would raise ValueError: parse instead (DTypeError when unknown).
        return cls.parse(value)

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.name


class _Facts(NamedTuple):
    """What strided knows about one DType; every other module reads it from here."""

    numpy_name: str  # the NumPy dtype's name, which is also its scalar type's name
    ml_dtypes: bool  # the type is ml_dtypes' (imported when first needed), not NumPy's
    itemsize: int  # bytes per element
    kind: str  # "bool", "int" or "float"
    signed: bool
    storage_only: bool  # no arithmetic: the 8-bit floats
    min: Any  # the smallest finite value (bool, int or float)
    max: Any  # the largest finite value


_F = _Facts
_MAX_F32 = float.fromhex("0x1.fffffep127")
_MAX_BF16 = float.fromhex("0x1.fep127")
_MAX_F64 = sys.float_info.max

# The one table of dtype facts. F8_E4M3 has no infinity and spends its top pattern on
# NaN, so its largest value is 448; F8_E8M0 is only the powers of two 2**-127 ... 2**127
# and NaN: no zero, no sign, no infinity. The types NumPy lacks are named, not held:
# ml_dtypes takes about a second to import, so it is loaded when one is first needed.
# fmt: off
_FACTS: dict[DType, _Facts] = {
    # NumPy name, from ml_dtypes, bytes, kind, signed, storage only, min, max
    DType.BOOL:    _F("bool",           False, 1, "bool",  False, False, False,      True),
    DType.I8:      _F("int8",           False, 1, "int",   True,  False, -(2**7),    2**7 - 1),
    DType.I16:     _F("int16",          False, 2, "int",   True,  False, -(2**15),   2**15 - 1),
    DType.I32:     _F("int32",          False, 4, "int",   True,  False, -(2**31),   2**31 - 1),
    DType.I64:     _F("int64",          False, 8, "int",   True,  False, -(2**63),   2**63 - 1),
    DType.U8:      _F("uint8",          False, 1, "int",   False, False, 0,          2**8 - 1),
    DType.U16:     _F("uint16",         False, 2, "int",   False, False, 0,          2**16 - 1),
    DType.U32:     _F("uint32",         False, 4, "int",   False, False, 0,          2**32 - 1),
    DType.U64:     _F("uint64",         False, 8, "int",   False, False, 0,          2**64 - 1),
    DType.F16:     _F("float16",        False, 2, "float", True,  False, -65504.0,   65504.0),
    DType.BF16:    _F("bfloat16",       True,  2, "float", True,  False, -_MAX_BF16, _MAX_BF16),
    DType.F32:     _F("float32",        False, 4, "float", True,  False, -_MAX_F32,  _MAX_F32),
    DType.F64:     _F("float64",        False, 8, "float", True,  False, -_MAX_F64,  _MAX_F64),
    DType.F8_E4M3: _F("float8_e4m3fn",  True,  1, "float", True,  True,  -448.0,     448.0),
    DType.F8_E5M2: _F("float8_e5m2",    True,  1, "float", True,  True,  -57344.0,   57344.0),
    DType.F8_E8M0: _F("float8_e8m0fnu", True,  1, "float", False, True,  2.0**-127,  2.0**127),
}
# fmt: on
FROM_ML_DTYPES = frozenset(d for d, facts in _FACTS.items() if facts.ml_dtypes)
"""The dtypes whose NumPy type ``ml_dtypes`` defines (asking for it imports ml_dtypes)."""

# The NumPy dtypes known so far: NumPy's own from the start, ml_dtypes' once loaded.
_NUMPY: dict[DType, np.dtype[Any]] = {
    d: np.dtype(getattr(np, facts.numpy_name)).newbyteorder("<")
    for d, facts in _FACTS.items()
    if not facts.ml_dtypes
}
_FLOATS = frozenset(d for d, facts in _FACTS.items() if facts.kind == "float")
_INTEGERS = frozenset(d for d, facts in _FACTS.items() if facts.kind == "int")
_SIGNED = frozenset(d for d, facts in _FACTS.items() if facts.signed)
_STORAGE_ONLY = frozenset(d for d, facts in _FACTS.items() if facts.storage_only)

_BY_NAME: dict[str, DType] = {d.name: d for d in DType} | {
    facts.numpy_name.upper(): d for d, facts in _FACTS.items()
}
_BY_NUMPY = {np_dtype: d for d, np_dtype in _NUMPY.items()}
_ML_NAMES = frozenset(_FACTS[d].numpy_name for d in FROM_ML_DTYPES)
_NAMES = ", ".join(d.name for d in DType)


@functools.cache
def ml_dtypes_module() -> ModuleType:
    """The ``ml_dtypes`` module, imported on first use.

    It takes about a second to load, which a command that reads only NumPy's own dtypes
    (an F32 checkpoint's hash) would otherwise pay for nothing; this is the one place
    strided imports it.
    """
    import ml_dtypes

    return ml_dtypes


def _ml_numpy(dtype: DType) -> np.dtype[Any]:
    """The NumPy dtype of a type ml_dtypes defines, imported and remembered on first use."""
    facts = _FACTS[dtype]
    found: np.dtype[Any] = np.dtype(getattr(ml_dtypes_module(), facts.numpy_name))
    found = found.newbyteorder("<")
    _NUMPY[dtype] = found
    return found


@functools.cache
def _by_numpy_all() -> dict[np.dtype[Any], DType]:
    """Every DType by its NumPy dtype, ml_dtypes' included (this imports ml_dtypes)."""
    return {d.numpy: d for d in DType}


def _ml_dtypes_name(dtype: object) -> np.dtype[Any]:
    """``np.dtype(dtype)`` for the name of an ml_dtypes type such as ``"bfloat16"``.

    NumPy knows those names only once ml_dtypes is imported. DTypeError for anything
    else that NumPy refused.
    """
    if isinstance(dtype, str) and dtype in _ML_NAMES:
        ml_dtypes_module()
        return np.dtype(dtype)
    raise DTypeError(f"not a NumPy dtype: {describe(dtype)}")


def finfo(dtype: DType) -> Any:
    """The machine limits of a float dtype: NumPy's ``finfo``, or ml_dtypes' for its types.

    Only the latter imports ml_dtypes. ValueError for a dtype that is not a float.
    """
    if dtype in FROM_ML_DTYPES:
        info: Any = ml_dtypes_module().finfo  # untyped
        return info(dtype.numpy)
    return np.finfo(dtype.numpy)


def finite_range(dtype: DType) -> tuple[Any, Any]:
    """``(min, max)``: the smallest and largest finite values as Python bool/int/float."""
    facts = _FACTS[dtype]
    return facts.min, facts.max


def as_dtype(dtype: object) -> DType:
    """A DType given as itself or by name (``DType.parse`` rules); DTypeError otherwise."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return DType.parse(dtype)
    raise DTypeError(f"expected a DType, found {type(dtype).__name__}")


class FloatLayout(NamedTuple):
    """The bit layout of a rounding float dtype and the bounds of its finite values."""

    bits: int  # storage width
    exponent_bits: int
    mantissa_bits: int  # stored significand bits (the implicit leading bit not included)
    emin: int  # exponent of the smallest normal value
    emax: int  # exponent of the largest finite value
    max_significand: int  # significand (as an integer) of the largest finite value
    has_inf: bool

    @property
    def precision(self) -> int:
        """Significand bits, the implicit leading bit included."""
        return self.mantissa_bits + 1


# The one table of float layouts (F8_E8M0, only powers of two, does not round and has
# none). F8_E4M3 (float8_e4m3fn) spends its top significand at the top exponent on NaN,
# so its largest finite value is 0b1110 * 2**5 = 448 rather than 480.
# fmt: off
FLOAT_LAYOUTS: dict[DType, FloatLayout] = {
    #                         bits  exp  mant  emin   emax  max significand  inf
    DType.F64:     FloatLayout(64,  11,  52,   -1022, 1023, 2**53 - 1,       True),
    DType.F32:     FloatLayout(32,  8,   23,   -126,  127,  2**24 - 1,       True),
    DType.F16:     FloatLayout(16,  5,   10,   -14,   15,   2**11 - 1,       True),
    DType.BF16:    FloatLayout(16,  8,   7,    -126,  127,  2**8 - 1,        True),
    DType.F8_E4M3: FloatLayout(8,   4,   3,    -6,    8,    0b1110,          False),
    DType.F8_E5M2: FloatLayout(8,   5,   2,    -14,   15,   0b111,           True),
}
# fmt: on
