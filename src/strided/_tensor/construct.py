"""Turning caller input (bytes, Python values, nested lists) into validated NumPy storage.

Every function here checks shape limits before it allocates, and returns a NumPy array
that nobody else holds (or that is backed by an immutable buffer), ready to be adopted
as a tensor's storage.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from itertools import islice
from typing import Any

import numpy as np

from .._core.dtype import FROM_ML_DTYPES, DType
from .._core.errors import DataError, DTypeError, FormatError, LimitError, ShapeError
from .._core.limits import check_dims
from .._core.scalar import Scalar
from .._core.shape import Shape
from .._core.storage import borrow, seal
from .._kernels.convert import convert_array

__all__ = [
    "BLOCK",
    "allocate",
    "bulk_numbers",
    "convert_values",
    "exact_values",
    "leaf_types",
    "python_values",
    "shaped",
    "storage_from_bytes",
    "storage_from_values",
]


def shaped(storage: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous view of flat ``storage`` with ``dims`` (its base is ``storage``).

    Empty shapes get the same element strides as ``Shape.strides()`` (NumPy's reshape
    would report all zeros, which reads like a broadcast view).
    """
    if 0 not in dims:
        return storage.reshape(dims)
    itemsize = storage.itemsize
    strides = tuple(step * itemsize for step in Shape(dims).strides())
    return np.ndarray(dims, dtype=storage.dtype, buffer=storage, strides=strides)


def storage_from_bytes(dtype: DType, dims: tuple[int, ...], data: object) -> np.ndarray:
    """A flat array over ``data``: shared when the buffer is immutable, copied otherwise.

    Only ``bytes``, a read-only ``mmap``, and read-only ``memoryview``s over those are
    shared; everything else (``bytearray``, writable mmaps, NumPy arrays even when
    read-only, ``array.array``, and memoryviews over any of these) is copied.
    """
    if isinstance(data, (str, int, float)) or data is None:
        raise FormatError(
            f"from_le_bytes: expected a bytes-like object, found {type(data).__name__}"
        )
    if isinstance(data, np.ndarray) and not data.dtype.hasobject and data.dtype.fields is None:
        # Arrays of every dtype (bfloat16 has no buffer format) give their raw bytes;
        # an array is never shared, since its owner can make it writable again.
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8).copy()
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # ValueError: NumPy arrays of types with no buffer form
        raise FormatError(
            f"from_le_bytes: expected a bytes-like object, found {type(data).__name__}"
        ) from None
    if "O" in view.format:
        raise FormatError("from_le_bytes: a buffer of Python objects is not bytes")
    numel = 1
    for dim in dims:
        numel *= dim
    expected = numel * dtype.itemsize
    if view.nbytes != expected:
        raise FormatError(
            f"from_le_bytes: shape {list(dims)} of {dtype.name} needs {expected} bytes, "
            f"found {view.nbytes}"
        )
    if not view.c_contiguous:
        raise FormatError("from_le_bytes: the buffer must be contiguous")
    raw = np.frombuffer(view.cast("B") if view.format != "B" else view, dtype=np.uint8)
    if dtype is DType.BOOL:
        bad = np.flatnonzero(raw > 1)
        if bad.size:
            first = int(bad[0])
            raise FormatError(f"from_le_bytes: BOOL byte {first} is {int(raw[first])}, not 0 or 1")
    if not _immutable(data, view):
        return seal(raw.view(dtype.numpy).copy())
    if type(data) is bytes:
        # NumPy keeps the bytes object itself as the base: nothing to write or release.
        return np.frombuffer(data, dtype=dtype.numpy)
    return borrow(view).view(dtype.numpy)


def _immutable(data: object, view: memoryview) -> bool:
    """Whether the memory behind ``data`` can never change: share it then, else copy."""
    if not view.readonly:
        return False
    # A memoryview's .obj is whatever exports the memory (a memoryview of a memoryview
    # names the original exporter); a read-only view of mutable memory is still mutable.
    for _ in range(8):
        if type(data) is bytes:
            return True
        if type(data) is mmap.mmap:
            with memoryview(data) as probe:  # ACCESS_READ mappings export read-only
                return probe.readonly
        if type(data) is not memoryview:
            return False
        data = data.obj
    return False


def storage_from_values(
    dtype: DType, dims: tuple[int, ...], values: Iterable[object]
) -> np.ndarray:
    """A flat array of ``values`` converted exactly (as ``Scalar(dtype, v)``).

    The result is allocated first (``allocate``: LimitError when it cannot be), then
    filled from the iterable in blocks of at most ``BLOCK`` values, so the temporaries
    stay small and at most ``numel + 1`` values are ever taken from an endless iterable.
    A block of Python ints, floats and bools converts in bulk when the bulk result is
    provably the exact one; anything else goes value by value. Too few or too many
    values is ShapeError, found when the walk reaches the end (a value that does not
    convert, earlier on, raises first).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise FormatError(
            f"from_scalars: values must be an iterable, found {type(values).__name__}"
        )
    out = allocate(dtype, dims, "from_scalars")
    numel = out.size
    source = iter(values)
    done = 0
    while done < numel:
        block = list(islice(source, min(BLOCK, numel - done)))
        if not block:
            break
        out[done : done + len(block)] = convert_values(dtype, block)
        done += len(block)
    if done < numel or next(source, _END) is not _END:
        found = str(done) if done < numel else f"more than {numel}"
        raise ShapeError(f"from_scalars: shape {list(dims)} needs {numel} values, found {found}")
    return out


def allocate(dtype: DType, dims: tuple[int, ...], what: str) -> np.ndarray:
    """An uninitialized flat array for ``dims`` (limits already checked) of ``dtype``.

    A MemoryError becomes a LimitError naming the shape and the bytes it needs, so a
    result too large for the process fails before any value is converted.
    """
    numel = 1
    for dim in dims:
        numel *= dim
    try:
        return np.empty(numel, dtype=dtype.numpy)
    except MemoryError:
        size = numel * dtype.itemsize
        raise LimitError(
            f"{what}: shape {list(dims)} of {dtype.name} needs {size} bytes "
            f"({size / 2**30:.1f} GiB), more than this process can allocate"
        ) from None


def convert_values(dtype: DType, values: list[Any]) -> np.ndarray:
    """A flat array of ``values``, each converted exactly as ``Scalar(dtype, v)``."""
    types = set(map(type, values))
    if types <= _NUMBERS:
        fast = bulk_numbers(dtype, [values], frozenset(types), len(values))
        if fast is not None:
            return fast
    return exact_values(dtype, values)


def exact_values(dtype: DType, values: list[Any]) -> np.ndarray:
    """A flat array of ``values``, each converted as ``Scalar(dtype, v)``, one by one."""
    exact = [Scalar(dtype, value).value for value in values]
    return np.array(
        exact, dtype=dtype.numpy if dtype.is_integer or dtype is DType.BOOL else np.float64
    ).astype(dtype.numpy, copy=False)


# -- bulk conversion of Python numbers ------------------------------------------------

BLOCK = 1 << 16
"""Values converted at a time when a result is filled block by block."""
_END = object()
_NUMBERS = frozenset({int, float, bool})
# NumPy rounds a Python float (a double) once, correctly, into these dtypes.
_DIRECT_FLOATS = (DType.F64, DType.F32, DType.F16)
_EXACT_INTS = 2.0**53  # below this magnitude every int is exactly a float64


def bulk_numbers(
    dtype: DType, rows: list[Any], types: frozenset[type], numel: int
) -> np.ndarray | None:
    """The exact flat array of the numbers in ``rows`` in ``dtype``, or None.

    ``rows`` are exact lists or tuples, all of one length, of exactly the Python number
    types ``types`` (a subset of int, float, bool). None (go value by value) whenever a
    value does not convert (out of range, not integral, overflow: the value-by-value
    path then raises its own error) or exactness is not proven.
    """
    try:
        with np.errstate(all="ignore"):  # every conversion below is checked explicitly
            flat = _convert_rows(dtype, rows, types)
    except (DataError, OverflowError, ValueError, TypeError):
        return None
    if flat is None or flat.size != numel:
        return None
    return flat


def _convert_rows(dtype: DType, rows: list[Any], types: frozenset[type]) -> np.ndarray | None:
    ints, floats = int in types, float in types
    if dtype.is_float and not ints and dtype in _DIRECT_FLOATS:
        direct = np.array(rows, dtype=dtype.numpy).reshape(-1)
        # An infinity may be a finite value that overflowed: settled on the F64 path.
        if dtype is DType.F64 or not np.isinf(direct).any():
            return direct
    if not floats and not dtype.is_float:
        return _ints_to_int(dtype, rows)
    if not floats:
        if dtype is DType.F64:
            return np.array(rows, dtype=np.float64).reshape(-1)  # ints round once (or raise)
        # Every int of int64 rounds exactly once through convert (no float on the way).
        return convert_array(np.array(rows, dtype=np.int64).reshape(-1), DType.I64, dtype)
    wide = np.array(rows, dtype=np.float64).reshape(-1)
    if ints and dtype is not DType.F64:
        # An int above 2**53 may have been rounded to F64, and rounding again could
        # differ from rounding it once. NaN and infinities can only come from floats.
        finite = np.where(np.isfinite(wide), np.abs(wide), 0.0)
        if wide.size and float(finite.max()) >= _EXACT_INTS:
            return None
    if dtype is DType.F64:
        return wide
    return convert_array(wide, DType.F64, dtype)  # RangeError when a value does not fit


def _ints_to_int(dtype: DType, rows: list[Any]) -> np.ndarray | None:
    """Python ints and bools into an integer dtype or BOOL (OverflowError when out of range)."""
    if dtype is not DType.BOOL:
        return np.array(rows, dtype=dtype.numpy).reshape(-1)  # NumPy refuses out-of-range ints
    small = np.array(rows, dtype=np.int8).reshape(-1)
    if small.size and (int(small.min()) < 0 or int(small.max()) > 1):
        return None
    return small.view(np.bool_)


def python_values(array: np.ndarray, dtype: DType) -> Any:
    """``array.tolist()`` with exact Python values (BF16/FP8 go through F32, exactly)."""
    # ml_dtypes' "V" types give their own scalars from tolist(), not Python floats.
    if dtype in FROM_ML_DTYPES and dtype.numpy.kind == "V":
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN payloads as "invalid"
            return array.astype(np.float32).tolist()
    return array.tolist()


def leaf_types(rows: list[Any]) -> frozenset[type] | None:
    """The types in ``rows`` when they are all exactly int, float or bool, else None."""
    found: set[type] = set()
    for row in rows:
        found.update(map(type, row))
        if not found <= _NUMBERS:
            return None
    return frozenset(found)


def check_numpy_input(array: object) -> np.ndarray:
    """``array`` as an ndarray (NumPy scalars become rank 0), with the tensor limits."""
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise DTypeError(
            f"from_numpy: expected a numpy.ndarray, found {type(array).__name__} "
            "(use st.tensor for Python lists)"
        )
    check_dims(array.shape)
    return array
