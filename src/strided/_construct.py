"""Turning caller input (bytes, Python values, nested lists) into validated NumPy storage.

Every function here checks shape limits before it allocates, and returns a NumPy array
that nobody else holds (or that is backed by an immutable buffer), ready to be adopted
as a tensor's storage.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from typing import Any, NoReturn, SupportsIndex

import numpy as np

from ._convert import convert_array
from ._dtype import DType
from ._errors import DataError, DTypeError, FormatError, LimitError, ShapeError
from ._limits import MAX_RANK, check_dims
from ._scalar import Scalar
from ._shape import Shape

__all__ = [
    "NumericRows",
    "ReadOnlyMemory",
    "borrow",
    "fresh_view",
    "nested_shape",
    "python_values",
    "seal",
    "shaped",
    "storage_from_bytes",
    "storage_from_values",
]


class ReadOnlyMemory:
    """Base of the private objects that own a tensor storage's memory.

    Every storage array's ``base`` is one of these or a ``bytes`` object. The owner
    offers its memory (``_size`` bytes at ``_address``) to NumPy only as a read-only
    ``__array_interface__``, a fresh dict on each access (a stored one could be edited
    to claim writable memory): arrays made from it cannot be made writable, and it has
    no buffer of its own to write through or release. It is built in ``__new__`` (so
    calling ``__init__`` again changes nothing) and refuses to be pickled or copied,
    since a copy would claim the same memory.
    """

    __slots__ = ("_address", "_size")
    _address: int
    _size: int

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {
            "shape": (self._size,),
            "typestr": "|u1",
            "data": (self._address, True),
            "version": 3,
        }

    def __getstate__(self) -> NoReturn:
        raise TypeError("a tensor's storage cannot be pickled or copied; pickle the tensor")

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError("a tensor's storage cannot be pickled or copied; pickle the tensor")


class _SealedMemory(ReadOnlyMemory):
    """The owner of a computed tensor's memory: it keeps the one writable array (which
    owns the memory) private, so no public attribute leads back to writable memory."""

    __slots__ = ("_owned",)
    _owned: np.ndarray

    def __new__(cls, owned: np.ndarray) -> _SealedMemory:
        self = object.__new__(cls)
        self._owned = owned
        self._address = owned.__array_interface__["data"][0]
        self._size = owned.nbytes
        return self


class _BorrowedMemory(ReadOnlyMemory):
    """The owner of shared immutable memory other than a whole ``bytes`` object (a
    read-only mmap, a memoryview of one or of ``bytes``): it holds the memoryview that
    keeps the memory alive (and a mapping open) privately, since a memoryview reachable
    from a tensor could be ``release()``d, and the mapping then closed, under it."""

    __slots__ = ("_view",)
    _view: memoryview

    def __new__(cls, view: memoryview, raw: np.ndarray) -> _BorrowedMemory:
        self = object.__new__(cls)
        self._view = view
        self._address = raw.__array_interface__["data"][0]
        self._size = raw.nbytes
        return self


def seal(owned: np.ndarray) -> np.ndarray:
    """Flat read-only storage over a C-contiguous array that nobody else holds.

    The storage is a read-only uint8 array over a ``_SealedMemory`` that keeps ``owned``
    private, viewed as ``owned``'s dtype: NumPy refuses to make it, or any view of it,
    writable again, and its ``base`` chain never reaches a writable array. No bytes are
    copied.
    """
    return np.asarray(_SealedMemory(owned)).view(owned.dtype)


def borrow(view: memoryview) -> np.ndarray:
    """Flat read-only uint8 storage over the immutable memory ``view`` exports (``view``
    is C-contiguous; it is kept, privately, for as long as the storage lives)."""
    raw = np.frombuffer(view.cast("B") if view.format != "B" else view, dtype=np.uint8)
    return np.asarray(_BorrowedMemory(view, raw))


def fresh_view(array: np.ndarray) -> np.ndarray:
    """A new read-only array over a tensor array's elements, sharing no array object
    with any tensor.

    It is built on a new flat array over the storage's owner (``bytes`` or a
    ``ReadOnlyMemory``), not on the shared storage array: reshaping, retyping or
    ``__setstate__`` on what a caller gets (or on its ``.base``) then touches only
    arrays nobody else holds, and can neither change nor free a tensor's memory.
    """
    if not array.size:  # indexing an empty array may leave its pointer past the end
        empty = np.frombuffer(b"", dtype=np.uint8)
        return np.ndarray(array.shape, array.dtype, strides=array.strides, buffer=empty)
    owner: Any = array.base.base  # type: ignore[union-attr]
    if isinstance(owner, ReadOnlyMemory):
        flat, begin = np.asarray(owner), owner._address
    else:  # bytes
        flat = np.frombuffer(owner, dtype=np.uint8)
        begin = flat.__array_interface__["data"][0]
    start = array.__array_interface__["data"][0] - begin
    return np.ndarray(array.shape, array.dtype, buffer=flat, offset=start, strides=array.strides)


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
    return np.asarray(_BorrowedMemory(view, raw)).view(dtype.numpy)


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

    Python ints, floats and bools (``NumericRows``, or a list of them) are converted in
    bulk when the bulk result is provably the exact one; anything else, and any bulk
    conversion that fails or cannot be proven exact, goes value by value.
    """
    numel = 1
    for dim in dims:
        numel *= dim
    if isinstance(values, NumericRows):
        fast = _bulk_numbers(dtype, values, numel)
        if fast is not None:
            return fast
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise FormatError(
            f"from_scalars: values must be an iterable, found {type(values).__name__}"
        )
    # Take at most numel + 1 items, so an endless or huge iterable cannot exhaust memory.
    taken = list(islice(values, numel + 1))
    if len(taken) != numel:
        found = f"more than {numel}" if len(taken) > numel else str(len(taken))
        raise ShapeError(f"from_scalars: shape {list(dims)} needs {numel} values, found {found}")
    if not isinstance(values, NumericRows):
        types = set(map(type, taken))
        if types <= _NUMBERS:
            fast = _bulk_numbers(dtype, NumericRows([taken], frozenset(types)), numel)
            if fast is not None:
                return fast
    exact = [Scalar(dtype, value).value for value in taken]
    return np.array(
        exact, dtype=dtype.numpy if dtype.is_integer or dtype is DType.BOOL else np.float64
    ).astype(dtype.numpy, copy=False)


# -- bulk conversion of Python numbers ------------------------------------------------

_NUMBERS = frozenset({int, float, bool})
_CONTAINERS = frozenset({list, tuple})
# NumPy rounds a Python float (a double) once, correctly, into these dtypes.
_DIRECT_FLOATS = (DType.F64, DType.F32, DType.F16)
_EXACT_INTS = 2.0**53  # below this magnitude every int is exactly a float64


class NumericRows:
    """The leaves of regular nested lists whose innermost lists hold only Python numbers.

    ``rows`` are the innermost lists or tuples (all of one length; the containers above
    them are exactly lists or tuples too), ``types`` the leaf types found (a subset of
    int, float, bool: exact types, no subclasses). Iterating yields the leaves in
    row-major order, as the value-by-value path takes them; ``storage_from_values``
    converts the rows in bulk instead.
    """

    __slots__ = ("rows", "types")

    def __init__(self, rows: list[Any], types: frozenset[type]) -> None:
        self.rows = rows
        self.types = types

    def __iter__(self) -> Iterator[object]:
        return chain.from_iterable(self.rows)


def _bulk_numbers(dtype: DType, values: NumericRows, numel: int) -> np.ndarray | None:
    """The exact flat array of ``values`` in ``dtype``, or None to go value by value.

    None whenever a value does not convert (out of range, not integral, overflow: the
    value-by-value path then raises its own error) or exactness is not proven.
    """
    try:
        with np.errstate(all="ignore"):  # every conversion below is checked explicitly
            flat = _convert_rows(dtype, values.rows, values.types)
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
    if dtype in _ML_DTYPES:
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN payloads as "invalid"
            return array.astype(np.float32).tolist()
    return array.tolist()


# The ml_dtypes types, whose tolist() gives their own scalars rather than Python floats.
_ML_DTYPES = frozenset(dtype for dtype in DType if dtype.numpy.kind == "V")


def nested_shape(values: object) -> tuple[tuple[int, ...], Iterable[object]]:
    """The shape and row-major leaves of nested lists/tuples, without recursion.

    The leaves are a list, or ``NumericRows`` when every container is exactly a list or
    tuple and every leaf exactly an int, float or bool (then they convert in bulk).
    """
    dims: list[int] = []
    level: list[object] = [values]
    plain = True  # every container so far is exactly a list or a tuple
    while True:
        sequences = [isinstance(item, (list, tuple)) for item in level]
        if not any(sequences):
            return check_dims(dims), level
        if not all(sequences):
            raise ShapeError(f"tensor: ragged nesting at depth {len(dims)}")
        lengths = {len(item) for item in level}  # type: ignore[arg-type]
        if len(lengths) != 1:
            raise ShapeError(
                f"tensor: ragged nesting at depth {len(dims)}: lengths {sorted(lengths)[:4]}"
            )
        if len(dims) >= MAX_RANK:
            raise LimitError(f"tensor: nesting deeper than MAX_RANK ({MAX_RANK})")
        dims.append(lengths.pop())
        if dims[-1] == 0:
            # An empty level: nothing below it, so the remaining shape is what we have.
            return check_dims(dims), []
        plain = plain and set(map(type, level)) <= _CONTAINERS
        types = _leaf_types(level) if plain else None
        if types is not None:
            # The next level would be all leaves: no sequence there, so this is the shape.
            return check_dims(dims), NumericRows(level, types)
        level = [leaf for item in level for leaf in item]  # type: ignore[attr-defined]


def _leaf_types(rows: list[Any]) -> frozenset[type] | None:
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
