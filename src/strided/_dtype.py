"""DType: the closed set of element types, their names, NumPy mapping and ranges."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ._errors import DTypeError
from ._limits import describe

if TYPE_CHECKING:
    from ._scalar import Scalar

__all__ = ["DType", "as_dtype"]


class _DTypeMeta(enum.EnumMeta):
    def __getitem__(cls, name: str) -> Any:
        # DType["x"] would raise KeyError; every failure of ours is a DataError.
        try:
            return super().__getitem__(name)
        except KeyError:
            raise DTypeError(f"unknown dtype name {describe(name)}") from None


class DType(enum.Enum, metaclass=_DTypeMeta):
    """An element type. ``name`` is the canonical text, the same names safetensors uses.

    ``F8_E4M3`` and ``F8_E5M2`` are storage-only: they can be built, viewed, updated,
    written, read and converted, but arithmetic on them is a ``DTypeError``.
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

    # Members are singletons compared by identity, so the identity hash agrees with
    # equality; Enum's own __hash__ is Python code, and DTypes key hot dict lookups.
    __hash__ = object.__hash__

    @property
    def numpy(self) -> np.dtype[Any]:
        """The little-endian NumPy dtype (BF16 and FP8 through ``ml_dtypes``)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _NUMPY[self].itemsize

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
        """True for signed integers and floats."""
        return self in _SIGNED

    @property
    def is_storage_only(self) -> bool:
        """True for the 8-bit floats, which support no arithmetic."""
        return self in (DType.F8_E4M3, DType.F8_E5M2)

    @property
    def min(self) -> Scalar:
        """The smallest finite value, as a Scalar (``false`` for BOOL)."""
        from ._scalar import Scalar

        return Scalar(self, _range(self)[0])

    @property
    def max(self) -> Scalar:
        """The largest finite value, as a Scalar (``true`` for BOOL)."""
        from ._scalar import Scalar

        return Scalar(self, _range(self)[1])

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
            raise DTypeError(f"not a NumPy dtype: {describe(dtype)}") from None
        try:
            found = _BY_NUMPY.get(np_dtype.newbyteorder("<"))
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


_NUMPY: dict[DType, np.dtype[Any]] = {
    DType.BOOL: np.dtype(np.bool_),
    DType.I8: np.dtype("<i1"),
    DType.I16: np.dtype("<i2"),
    DType.I32: np.dtype("<i4"),
    DType.I64: np.dtype("<i8"),
    DType.U8: np.dtype("<u1"),
    DType.U16: np.dtype("<u2"),
    DType.U32: np.dtype("<u4"),
    DType.U64: np.dtype("<u8"),
    DType.F16: np.dtype("<f2"),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.F32: np.dtype("<f4"),
    DType.F64: np.dtype("<f8"),
    DType.F8_E4M3: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.F8_E5M2: np.dtype(ml_dtypes.float8_e5m2),
}
_FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64, DType.F8_E4M3, DType.F8_E5M2})
_SIGNED_INTS = frozenset({DType.I8, DType.I16, DType.I32, DType.I64})
_INTEGERS = _SIGNED_INTS | {DType.U8, DType.U16, DType.U32, DType.U64}
_SIGNED = _SIGNED_INTS | _FLOATS

_NUMPY_NAMES = {
    "bool": DType.BOOL,
    "int8": DType.I8,
    "int16": DType.I16,
    "int32": DType.I32,
    "int64": DType.I64,
    "uint8": DType.U8,
    "uint16": DType.U16,
    "uint32": DType.U32,
    "uint64": DType.U64,
    "float16": DType.F16,
    "bfloat16": DType.BF16,
    "float32": DType.F32,
    "float64": DType.F64,
    "float8_e4m3fn": DType.F8_E4M3,
    "float8_e5m2": DType.F8_E5M2,
}
_BY_NAME = {d.name: d for d in DType} | {k.upper(): v for k, v in _NUMPY_NAMES.items()}
_BY_NUMPY = {np_dtype: d for d, np_dtype in _NUMPY.items()}
_NAMES = ", ".join(d.name for d in DType)


def _range(dtype: DType) -> tuple[int | float | bool, int | float | bool]:
    if dtype is DType.BOOL:
        return False, True
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy)
        return int(info.min), int(info.max)
    finfo = ml_dtypes.finfo(dtype.numpy)  # type: ignore[no-untyped-call]
    return float(finfo.min), float(finfo.max)


def as_dtype(dtype: object) -> DType:
    """A DType given as itself or by name (``DType.parse`` rules); DTypeError otherwise."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return DType.parse(dtype)
    raise DTypeError(f"expected a DType, found {type(dtype).__name__}")
