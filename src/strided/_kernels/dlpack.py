"""DLPack capsules for CPU tensors: export (``__dlpack__``) and import (``from_dlpack``).

The capsules are made and consumed by NumPy's own DLPack C code, and strided only sets
the fields NumPy cannot: it exports an unsigned-integer view of the same width, then
writes the real DLPack type code (bfloat16, the 8-bit floats) into the not yet shared
``DLTensor`` through ``ctypes``, along with the ``IS_COPIED`` flag. On import it does the
reverse before NumPy reads the capsule. The C code this reuses runs the capsule
destructor and the deleter exactly once, saves an exception in flight and takes the GIL
when a consumer frees its tensor from another thread; Python callbacks in their place
would run with an exception set when a capsule dies during unwinding, and replace that
exception with a SystemError.

Layout of the structs: ``dlpack.h`` (DLPack 1.x; the ABI is stable across minor
versions, which only add type codes and flags).
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError, LimitError
from .._core.limits import MAX_RANK
from .._core.storage import fresh_view

__all__ = ["CPU_DEVICE", "export_capsule", "import_array"]

CPU_DEVICE = (1, 0)
"""``(kDLCPU, 0)``: every tensor lives in host memory."""

_READ_ONLY = 1 << 0
_IS_COPIED = 1 << 1

# DLPack type codes (dlpack.h ``DLDataTypeCode``); the 8-bit float codes are DLPack 1.1.
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6
_CODE: dict[DType, int] = {
    DType.BOOL: _BOOL,
    DType.I8: _INT,
    DType.I16: _INT,
    DType.I32: _INT,
    DType.I64: _INT,
    DType.U8: _UINT,
    DType.U16: _UINT,
    DType.U32: _UINT,
    DType.U64: _UINT,
    DType.F16: _FLOAT,
    DType.F32: _FLOAT,
    DType.F64: _FLOAT,
    DType.BF16: _BFLOAT,
    DType.F8_E4M3: 10,  # kDLFloat8_e4m3fn
    DType.F8_E5M2: 12,  # kDLFloat8_e5m2
    DType.F8_E8M0: 14,  # kDLFloat8_e8m0fnu
}
# NumPy's exporter and importer know none of these: they travel as unsigned bits.
_PATCHED = frozenset({DType.BF16, DType.F8_E4M3, DType.F8_E5M2, DType.F8_E8M0})
_DTYPE_OF = {(code, dtype.itemsize * 8): dtype for dtype, code in _CODE.items()}


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Versioned(ctypes.Structure):
    """``DLManagedTensorVersioned``; the unversioned ``DLManagedTensor`` starts with its
    ``DLTensor``."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_api = ctypes.pythonapi
_get_name = _api.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_VERSIONED, _UNVERSIONED = b"dltensor_versioned", b"dltensor"


def _structs(capsule: object) -> tuple[_Versioned | None, _DLTensor]:
    """The managed struct (None for an unversioned capsule) and its DLTensor."""
    name = _get_name(capsule) if type(capsule).__name__ == "PyCapsule" else None
    if name not in (_VERSIONED, _UNVERSIONED):
        found = repr(name.decode("ascii", "replace")) if name else type(capsule).__name__
        raise FormatError(f"from_dlpack: expected a DLPack capsule, found {found}")
    address = _get_pointer(capsule, name)
    if name == _UNVERSIONED:
        return None, _DLTensor.from_address(address)
    managed = _Versioned.from_address(address)
    return managed, managed.dl_tensor


# -- export ----------------------------------------------------------------------------


def export_capsule(
    array: np.ndarray,
    dtype: DType,
    stream: object,
    max_version: object,
    dl_device: object,
    copy: object,
) -> object:
    """The DLPack capsule of a tensor's array (see ``InteropMethods.__dlpack__``)."""
    if stream is not None:
        raise ValueError(f"__dlpack__: stream must be None for a CPU tensor, found {stream!r}")
    _check_device(dl_device)
    if copy is not None and copy is not True and copy is not False:
        raise ValueError(f"__dlpack__: copy must be True, False or None, found {copy!r}")
    versioned = _versioned(max_version)
    if copy is False:
        if not versioned:
            raise BufferError(
                "__dlpack__: copy=False shares read-only memory, which only a versioned "
                "(DLPack >= 1.0) capsule can mark read-only; this consumer asked for an "
                "unversioned one (max_version None or below (1, 0)). Use the default copy"
            )
        source = _shared_view(array)
    else:
        source = np.array(array, order="C", copy=True)
    if dtype in _PATCHED:
        source = source.view(f"<u{dtype.itemsize}")
    capsule = source.__dlpack__(max_version=(1, 0) if versioned else None)
    managed, tensor = _structs(capsule)
    tensor.dtype.code = _CODE[dtype]
    if managed is not None:
        if copy is not False:
            managed.flags |= _IS_COPIED
        if dtype in _PATCHED and dtype is not DType.BF16:
            managed.minor = max(managed.minor, 1)  # the 8-bit float codes are DLPack 1.1
    return capsule


def _check_device(dl_device: object) -> None:
    if dl_device is None:
        return
    try:
        matches = _int_pair(dl_device) == CPU_DEVICE
    except Exception:
        raise BufferError(
            f"__dlpack__: dl_device must be a (device_type, device_id) pair, found {dl_device!r}"
        ) from None
    if not matches:
        raise BufferError(
            f"__dlpack__: tensors live in host memory (kDLCPU, device (1, 0)); cannot export "
            f"to device {dl_device!r}"
        )


def _versioned(max_version: object) -> bool:
    if max_version is None:
        return False
    try:
        return _int_pair(max_version)[0] >= 1
    except Exception:
        raise ValueError(
            f"__dlpack__: max_version must be a (major, minor) pair or None, found {max_version!r}"
        ) from None


def _int_pair(value: Any) -> tuple[int, int]:
    first, second = value
    return operator.index(first), operator.index(second)


def _shared_view(array: np.ndarray) -> np.ndarray:
    """A fresh read-only view of the tensor's memory with consumer-safe strides.

    Axes of length 0 or 1 get the contiguous stride (their stride moves nothing), and an
    empty tensor gets contiguous strides throughout. A remaining negative stride is a
    BufferError: PyTorch aborts the process on one, and no consumer can be told apart.
    """
    view = fresh_view(array)
    dims, itemsize = array.shape, array.itemsize
    contiguous = [itemsize] * len(dims)
    for axis in range(len(dims) - 2, -1, -1):
        contiguous[axis] = contiguous[axis + 1] * dims[axis + 1]
    empty = array.size == 0
    strides = tuple(
        want if empty or dim <= 1 else have
        for dim, have, want in zip(dims, array.strides, contiguous, strict=True)
    )
    if any(step < 0 for step in strides):
        raise BufferError(
            f"__dlpack__: copy=False cannot share a view with negative strides (a reversed "
            f"view; element strides {[step // itemsize for step in strides]}): DLPack "
            f"consumers such as PyTorch cannot take them. Use the default copy, or "
            f"t.contiguous() first"
        )
    if strides == view.strides:
        return view
    flat: Any = view.base
    start = view.__array_interface__["data"][0] - flat.__array_interface__["data"][0]
    return np.ndarray(dims, view.dtype, buffer=flat, offset=start, strides=strides)


# -- import ----------------------------------------------------------------------------


class _Exported:
    """Hands one capsule to ``numpy.from_dlpack``."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __dlpack__(self, **kwargs: object) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return CPU_DEVICE


def import_array(source: object) -> np.ndarray:
    """A NumPy array (of a strided dtype) over the memory a DLPack producer exports.

    The array still refers to the producer's memory: the caller copies it. ``source`` is
    an object with ``__dlpack__`` or a capsule.
    """
    capsule = _capsule_of(source)
    managed, tensor = _structs(capsule)
    if managed is not None and managed.major != 1:
        raise FormatError(f"from_dlpack: DLPack version {managed.major}.{managed.minor} is not 1.x")
    if tensor.device_type != 1:
        raise FormatError(
            f"from_dlpack: the data is on DLPack device type {tensor.device_type}, not the "
            f"CPU (1); move it to host memory first (e.g. torch's x.cpu())"
        )
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    dtype = _DTYPE_OF.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        raise DTypeError(
            f"from_dlpack: DLPack type (code {code}, {bits} bits, {lanes} lanes) has no "
            f"strided dtype"
        )
    if not 0 <= tensor.ndim <= MAX_RANK:
        raise LimitError(f"from_dlpack: rank {tensor.ndim} exceeds MAX_RANK ({MAX_RANK})")
    if dtype in _PATCHED:
        tensor.dtype.code = _UINT
    try:
        array = np.from_dlpack(_Exported(capsule))  # type: ignore[arg-type]
    except Exception as error:  # strides that are not whole elements, and the like
        raise FormatError(f"from_dlpack: NumPy cannot read the capsule: {error}") from None
    return array.view(dtype.numpy) if dtype in _PATCHED else array


def _capsule_of(source: object) -> object:
    if type(source).__name__ == "PyCapsule":
        return source
    export = getattr(type(source), "__dlpack__", None)
    if export is None:
        raise DTypeError(
            f"from_dlpack: expected an object with __dlpack__ (a PyTorch tensor, a JAX or "
            f"NumPy array) or a DLPack capsule, found {type(source).__name__}"
        )
    try:
        try:
            return export(source, max_version=(1, 1))
        except TypeError:  # a producer older than DLPack 1.0
            return export(source)
    except Exception as error:
        raise FormatError(
            f"from_dlpack: {type(source).__name__}.__dlpack__ failed: "
            f"{type(error).__name__}: {str(error)[:200]}"
        ) from None
