"""NumPy arrays, scalars and dtypes inside a pickle, understood as data (never imported).

NumPy pickles an array as ``numpy.core.multiarray._reconstruct(numpy.ndarray, (0,),
b'b')`` (``numpy._core`` in NumPy 2) followed by ``BUILD`` with the state ``(1, shape,
dtype, fortran, raw bytes)``; with protocol 5 as ``numpy._core.numeric._frombuffer(buffer,
dtype, shape, order)``. A dtype is ``numpy.dtype(code, False, True)`` followed by
``BUILD (3, byteorder, None, None, None, elsize, alignment, flags)``, where ``code`` is a
type code (``'f4'``) or, for ``ml_dtypes``' types, the type's global. A scalar is
``numpy.core.multiarray.scalar(dtype, raw bytes)``.

The rules here only check what the file says and hold it:

* ``NumpyDType``: a dtype from the closed allow-list (the numeric dtypes strided has a
  ``DType`` for, ``ml_dtypes.bfloat16`` and the 8-bit floats among them), with its byte
  order. Object, string, structured, void, datetime and complex dtypes are FormatErrors
  naming them. On its own, a dtype is data: its NumPy name (``"float32"``).
* ``ArrayRef``: an array's dtype, dims, order and raw bytes, validated before anything
  views them (the dtype allow-list, the dims against the limits, the byte length equal
  to dims x itemsize, with Python ints). ``array_values`` then views the bytes (zero-copy
  when they are a read-only view of the pickle; see ``_ops``' bytes opcodes),
  converting big-endian ones on copy; Fortran-ordered bytes give the right logical
  values (a transposed view).
* ``scalar``: the exact plain Python number (a bool as a bool, an int as an int, an
  F64 scalar as a float, a narrower float as the float of the same value that keeps its
  type: ``np.float32(0.1)`` is an ``F32Float``, see ``_core.stored_float``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..._core.dtype import DType
from ..._core.errors import DataError, FormatError, LimitError
from ..._core.limits import check_dims
from ..._core.storage import seal
from ..._core.stored_float import stored_float
from .._budget import OBJECT_BYTES
from ._data import Global, describe

if TYPE_CHECKING:
    from ._machine import Machine

__all__ = [
    "ML_DTYPES",
    "ML_UNSUPPORTED",
    "ArrayRef",
    "NumpyDType",
    "array_values",
    "frombuffer",
    "make_dtype",
    "reconstruct",
    "scalar",
]

# NumPy's type codes (as ``dtype.__reduce__`` writes them) of strided's dtypes.
_CODES = {
    "b1": DType.BOOL, "i1": DType.I8, "i2": DType.I16, "i4": DType.I32, "i8": DType.I64,
    "u1": DType.U8, "u2": DType.U16, "u4": DType.U32, "u8": DType.U64,
    "f2": DType.F16, "f4": DType.F32, "f8": DType.F64,
}  # fmt: skip
# What the other kinds of code are, so a refusal can say why.
_KINDS = {
    "c": "complex", "O": "object", "U": "string", "S": "bytes string", "a": "bytes string",
    "V": "void (structured)", "M": "datetime", "m": "timedelta", "f": "float", "i": "int",
    "u": "unsigned int", "b": "bool",
}  # fmt: skip
# ml_dtypes' scalar types that name a dtype strided has, and the ones it has not.
ML_DTYPES = {
    "bfloat16": DType.BF16,
    "float8_e4m3fn": DType.F8_E4M3,
    "float8_e5m2": DType.F8_E5M2,
    "float8_e8m0fnu": DType.F8_E8M0,
}
ML_UNSUPPORTED = [
    "int2",
    "int4",
    "uint2",
    "uint4",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
]
_ORDERS = ("<", ">", "|", "=")


class NumpyDType:
    """A ``numpy.dtype`` of one of strided's dtypes: its ``DType`` and byte order.

    Made by ``numpy.dtype(code, False, True)`` (native byte order until ``BUILD`` gives
    its state); ``name`` is NumPy's name for it (``"float32"``, ``"bfloat16"``).
    """

    __slots__ = ("built", "dtype", "order")

    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.order = "="
        self.built = False

    @property
    def name(self) -> str:
        """NumPy's name of the dtype (``np.dtype(...).name``)."""
        return str(self.dtype.numpy.name)

    @property
    def swapped(self) -> bool:
        """True when the elements are stored big-endian (and are wider than a byte)."""
        return self.order == ">" and self.dtype.itemsize > 1

    def build(self, m: Machine, state: object) -> None:
        """``BUILD``: the state ``(3, order, None, None, None, elsize, alignment, flags)``.

        Version 4 adds a ninth item (metadata, None). Fields, names or a subarray make a
        structured dtype: a FormatError. ``elsize`` and ``alignment`` are -1 (NumPy's
        own types) or the element size (``ml_dtypes``).
        """
        if self.built:
            raise FormatError("the dtype is given a state twice")
        if type(state) is not tuple or len(state) not in (8, 9):
            raise FormatError(f"a dtype state must be a tuple of 8 items, found {describe(state)}")
        version, order, subarray, names, fields, elsize, alignment, flags = state[:8]
        if (version, len(state)) not in ((3, 8), (4, 9)) or (len(state) == 9 and state[8]):
            raise FormatError(f"dtype state version {describe(version)} is not 3 or 4")
        if order not in _ORDERS:
            raise FormatError(f"dtype byte order {describe(order)} is not one of < > | =")
        if subarray is not None or names is not None or fields is not None:
            raise FormatError("a structured dtype (with fields or a subarray) is not supported")
        size = self.dtype.itemsize
        for what, value in (("element size", elsize), ("alignment", alignment)):
            if type(value) is not int or value not in (-1, size):
                raise FormatError(f"dtype {what} {describe(value)} is not -1 or {size}")
        if type(flags) is not int:
            raise FormatError(f"dtype flags {describe(flags)} are not an int")
        self.order = order
        self.built = True


class ArrayRef:
    """A NumPy array held as data: its dtype, dims, order and raw bytes.

    Made empty by ``_reconstruct`` and filled by ``BUILD`` (``built`` says whether it
    was), or made whole by ``_frombuffer``. ``raw`` is ``bytes`` (a copy, as protocol 2
    stores the bytes as latin-1 text) or a read-only ``memoryview`` of the pickle's own
    bytes (a ``BINBYTES`` argument in a pickle read in place), whose length has been
    checked against the dims.
    """

    __slots__ = ("built", "dims", "dtype", "fortran", "raw", "swapped")

    def __init__(self) -> None:
        self.built = False
        self.dims: tuple[int, ...] = ()
        self.dtype = DType.U8
        self.fortran = False
        self.raw: bytes | memoryview = b""
        self.swapped = False

    def fill(self, dims: object, dtype: object, fortran: object, raw: object) -> None:
        """Validate and hold the array's parts (the checks come before anything views them)."""
        if type(dtype) is not NumpyDType:
            raise FormatError(f"the array's dtype is {describe(dtype)}, not a NumPy dtype")
        if type(fortran) is not bool:
            raise FormatError(f"the array's order flag is {describe(fortran)}, not a bool")
        if type(dims) is not tuple or any(type(dim) is not int for dim in dims):
            raise FormatError(f"the array's shape is {describe(dims)}, not a tuple of ints")
        try:
            shape = check_dims(dims, "array shape")
        except LimitError:
            raise
        except DataError as exc:
            raise FormatError(str(exc)) from None
        if type(raw) is not bytes and type(raw) is not memoryview:
            raise FormatError(f"the array's data is {describe(raw)}, not bytes")
        assert isinstance(raw, (bytes, memoryview))
        numel = 1
        for dim in shape:
            numel *= dim
        expected = numel * dtype.dtype.itemsize
        if len(raw) != expected:
            raise FormatError(
                f"the array's data holds {len(raw)} bytes, its shape {list(shape)} of "
                f"{dtype.name} needs {expected}"
            )
        self.dims, self.dtype, self.fortran, self.raw = shape, dtype.dtype, fortran, raw
        self.swapped = dtype.swapped
        self.built = True

    def build(self, m: Machine, state: object) -> None:
        """``BUILD``: the state ``(version, shape, dtype, fortran, raw bytes)``."""
        if self.built:
            raise FormatError("the array is given a state twice")
        if type(state) is not tuple or len(state) != 5:
            raise FormatError(f"an array state must be a tuple of 5 items, found {describe(state)}")
        version, dims, dtype, fortran, raw = state
        if version != 1 or type(version) is not int:
            raise FormatError(f"array state version {describe(version)} is not 1")
        self.fill(dims, dtype, fortran, raw)


def _dtype_of(code: object) -> DType:
    """The DType a ``numpy.dtype`` code names; FormatError naming any other."""
    if isinstance(code, Global):
        if code.kind == "type" and code.dtype is not None:
            return code.dtype
        raise FormatError(f"{code.name} is not a dtype strided has")
    if type(code) is not str:
        raise FormatError(f"the dtype code is {describe(code)}, not a str")
    found = _CODES.get(code)
    if found is not None:
        return found
    kind = _KINDS.get(code[:1], "unknown")
    raise FormatError(f"a NumPy {kind} dtype ({code[:20]!r}) is not supported")


def make_dtype(m: Machine, args: tuple[Any, ...]) -> NumpyDType:
    """``numpy.dtype(code, False, True)``: a dtype awaiting its state."""
    if len(args) != 3 or type(args[1]) is not bool or type(args[2]) is not bool:
        raise FormatError("expected (code, align, copy)")
    return NumpyDType(_dtype_of(args[0]))


def reconstruct(m: Machine, args: tuple[Any, ...]) -> ArrayRef:
    """``_reconstruct(numpy.ndarray, (0,), b'b')``: an array awaiting its state."""
    if len(args) != 3:
        raise FormatError(f"expected 3 arguments, found {len(args)}")
    cls, shape, _ = args
    if not isinstance(cls, Global) or cls.name != "numpy.ndarray":
        raise FormatError(f"the class is {describe(cls)}, not numpy.ndarray")
    if type(shape) is not tuple:
        raise FormatError(f"the shape is {describe(shape)}, not a tuple")
    m.spend(OBJECT_BYTES, "arrays")
    return ArrayRef()


def frombuffer(m: Machine, args: tuple[Any, ...]) -> ArrayRef:
    """``_frombuffer(buffer, dtype, shape, order)`` (protocol 5): a whole array."""
    if len(args) != 4:
        raise FormatError(f"expected 4 arguments, found {len(args)}")
    raw, dtype, dims, order = args
    if order not in ("C", "F"):
        raise FormatError(f"the order is {describe(order)}, not 'C' or 'F'")
    m.spend(OBJECT_BYTES, "arrays")
    array = ArrayRef()
    array.fill(dims, dtype, order == "F", raw)
    return array


def scalar(m: Machine, args: tuple[Any, ...]) -> bool | int | float:
    """``scalar(dtype, raw bytes)``: the exact plain number the bytes hold."""
    if len(args) != 2:
        raise FormatError(f"expected 2 arguments, found {len(args)}")
    dtype, raw = args
    if type(dtype) is not NumpyDType:
        raise FormatError(f"the dtype is {describe(dtype)}, not a NumPy dtype")
    if type(raw) is not bytes:
        raise FormatError(f"the data is {describe(raw)}, not bytes")
    size = dtype.dtype.itemsize
    if len(raw) != size:
        raise FormatError(f"a {dtype.name} scalar takes {size} bytes, found {len(raw)}")
    if dtype.swapped:
        raw = raw[::-1]
    value = np.frombuffer(raw, dtype=dtype.dtype.numpy)[0]
    if dtype.dtype is DType.BOOL:
        if raw[0] > 1:
            raise FormatError(f"a bool scalar's byte is {raw[0]}, not 0 or 1")
        return bool(value)
    if dtype.dtype.is_float:
        # Exact (float64 holds every value of the narrower floats), and remembering its
        # type, so its canonical text is float32's ``0.1``, not ``0.10000000149011612``.
        return stored_float(dtype.dtype, float(value))
    return int(value)


def array_values(array: ArrayRef) -> np.ndarray[Any, Any]:
    """The array's logical values: a read-only view of its bytes (or a converted copy).

    Big-endian bytes are swapped into a new array; Fortran-ordered bytes are viewed
    transposed, so the values read in row-major order are the array's. BOOL bytes other
    than 0 and 1 are a FormatError.
    """
    dtype = array.dtype
    if array.swapped:
        size = dtype.itemsize
        flat = np.frombuffer(array.raw, dtype=f">u{size}").astype(f"<u{size}")
        flat = seal(flat.view(dtype.numpy))
    else:
        flat = np.frombuffer(array.raw, dtype=dtype.numpy)
    if dtype is DType.BOOL:
        bad = np.flatnonzero(flat.view(np.uint8) > 1)
        if bad.size:
            raise FormatError(f"BOOL element {int(bad[0])} is not 0 or 1")
    if array.fortran:
        return flat.reshape(array.dims[::-1]).T
    return flat.reshape(array.dims)
