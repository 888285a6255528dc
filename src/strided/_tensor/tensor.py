"""Tensor: an immutable view (dtype, shape, element strides, offset) over read-only storage.

A Tensor holds one NumPy array, ``_array``: a read-only view whose shape, strides and
offset are the tensor's. Its ``base`` is the flat read-only storage array that every view
of the same data shares (NumPy collapses a view of a view onto the first array whose own
base is not an array), so a view is a new ``_array`` over the same storage and never
copies. Keeping a single slot makes view creation cheap: building a Tensor is one
allocation and one store. Everything is built through ``Tensor._wrap`` (trusted) or the
public constructors, which validate first.

The storage's own base is what holds the memory, and is never writable: ``bytes``, or
a ``ReadOnlyMemory`` owner (computed results, shared read-only mmaps and memoryviews,
memory-mapped files) that offers NumPy only a read-only array interface. Users only
ever get fresh arrays (``numpy()``, ``__array__``) built on a new flat array over that
owner, so neither a tensor's own arrays nor its storage array are reachable from
outside: nothing done to what a user holds can reshape, retype, re-point or free them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NoReturn, SupportsIndex

import numpy as np

from .._core import indexing as _indexing
from .._core.dtype import FROM_ML_DTYPES, DType, as_dtype
from .._core.errors import DTypeError, IndexingError, ShapeError
from .._core.indexing import normalize_axis
from .._core.limits import check_dims
from .._core.memory import guard_function, view_only
from .._core.scalar import Scalar
from .._core.shape import Shape
from .._core.storage import fresh_view, seal
from .._kernels.digest import hash_array
from .arith import ArithMethods
from .construct import (
    python_values,
    shaped,
)
from .extrema import StatsMethods
from .factories import FactoryMethods
from .inspect import InspectMethods
from .interop import InteropMethods
from .nested import storage_from_nested
from .reduce import ReduceMethods
from .select import SelectMethods, masked
from .text import TextMethods
from .update import UpdateMethods

__all__ = ["Tensor", "tensor"]

_SETITEM_HINT = (
    "Tensor is immutable; use t.with_slice(index, value) or t.at[index].set(value), "
    "which return a new tensor"
)


class Tensor(  # type: ignore[misc]  # InteropMethods' __array_ufunc__ replaces None
    FactoryMethods,
    InteropMethods,
    ArithMethods,
    ReduceMethods,
    StatsMethods,
    SelectMethods,
    UpdateMethods,
    TextMethods,
    InspectMethods,
):
    """An immutable, exact, strided tensor.

    Build one with ``st.tensor``, ``Tensor.from_scalars``, ``Tensor.from_le_bytes``,
    ``Tensor.from_numpy``, ``Tensor.zeros``, ``Tensor.full`` or ``Tensor.scalar``; the
    constructor itself is private. Views (indexing, ``transpose``, ``mT``, contiguous
    ``reshape``) share storage and never copy; nothing ever changes a tensor.

    Immutability covers every public path: ``t.numpy()`` and ``numpy.asarray(t)`` give a
    fresh read-only view each time, over a fresh flat array (changing either one's
    ``shape``, ``dtype`` or ``strides`` changes only it), it cannot be made writable,
    and neither can anything reachable from it through public attributes (``.base``,
    ``.base.base``, ``.data``, ``memoryview(...).obj``, the storage owner's
    ``__array_interface__``, which is read-only and rebuilt on each access); nothing
    reachable can free or unmap the memory. What lies outside the contract: chains
    through underscore-prefixed (private) attributes, the ``gc`` module, ``ctypes`` and
    raw pointers, and replacing attributes of strided's own classes. ``bool(t)`` follows
    NumPy: the truth of the only element (NaN is true); more than one element, or none,
    is a ShapeError. Running out of memory in any public method is a LimitError.
    """

    __slots__ = ("_array",)

    _array: np.ndarray

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(
            "Tensor() cannot be called directly; use st.tensor(values, dtype), "
            "Tensor.from_scalars, Tensor.from_le_bytes, Tensor.from_numpy, "
            "Tensor.zeros or Tensor.full"
        )

    # -- the one way in -----------------------------------------------------------

    @classmethod
    def _wrap(cls, array: np.ndarray) -> Tensor:
        """Trusted: ``array`` is a read-only view whose ``base`` is the flat storage.

        The storage is a read-only array whose own base is ``bytes`` or any
        ``ReadOnlyMemory`` owner (a read-only array interface); ``numpy()`` builds its
        fresh arrays on that base. Any such array works; nothing is checked.
        """
        self = _new(cls)
        _set_array(self, array)
        return self

    @property
    def _storage(self) -> np.ndarray:
        return self._array.base  # type: ignore[return-value]

    @property
    def _dtype(self) -> DType:
        try:
            return _DTYPE_OF[self._array.dtype]
        except KeyError:
            return _ml_dtype_of(self._array.dtype)

    @classmethod
    def _adopt(cls, array: np.ndarray, dtype: DType) -> Tensor:
        """Trusted: a freshly computed array that no one else holds becomes a new tensor.

        It is made C-contiguous in ``dtype.numpy`` (copying only when needed) and
        sealed read-only (see ``_core.storage.seal``): neither ``t.numpy()`` nor its base
        can be made writable again.
        """
        # A NumPy result is labelled ``=f4`` where the table says ``<f4``: the same
        # dtype, so it is kept as it is rather than relabelled (which makes a view).
        # np.asarray also turns a NumPy scalar (a shared object) into a new array.
        owned = np.asarray(array)
        if owned.dtype != dtype.numpy:
            owned = owned.astype(dtype.numpy)
        if not (owned.flags.owndata and owned.flags.c_contiguous):
            owned = np.array(owned, order="C")  # a copy (rank 0 stays rank 0)
        return cls._wrap(shaped(seal(owned), owned.shape))

    @classmethod
    def _adopt_flat(cls, flat: np.ndarray, dims: tuple[int, ...]) -> Tensor:
        """Trusted: a fresh flat array that owns its memory (``allocate``'s, filled) and
        that no one else holds becomes a tensor of ``dims``, sealed, without a copy."""
        return cls._wrap(shaped(seal(flat), dims))

    # -- properties ------------------------------------------------------------------

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._dtype

    @property
    def shape(self) -> Shape:
        """The shape (a ``tuple`` subclass)."""
        return Shape._trusted(self._array.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements (not bytes); may be negative."""
        size = self._array.itemsize
        return tuple(step // size for step in self._array.strides)

    @property
    def offset(self) -> int:
        """Element offset of the first logical element into the storage."""
        start = self._array.__array_interface__["data"][0]
        base = self._storage.__array_interface__["data"][0]
        return int(start - base) // self._array.itemsize

    @property
    def ndim(self) -> int:
        """The rank."""
        return self._array.ndim

    @property
    def numel(self) -> int:
        """The logical element count."""
        return self._array.size

    @property
    def is_empty(self) -> bool:
        """True when the tensor holds no elements."""
        return self._array.size == 0

    @property
    def byte_len(self) -> int:
        """``numel * itemsize``: the bytes of the logical elements."""
        return self._array.size * self._array.itemsize

    @property
    def storage_byte_len(self) -> int:
        """Physical bytes of the shared backing buffer."""
        return self._storage.nbytes

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous by NumPy's rule (size-1 axes and empty tensors don't break it)."""
        return bool(self._array.flags.c_contiguous)

    def __len__(self) -> int:
        if not self._array.ndim:
            raise TypeError("len() of a rank-0 tensor")
        return int(self._array.shape[0])

    def __bool__(self) -> bool:
        """NumPy's rule: the truth of the only element, at any rank (rank 0 included).

        An element is true when it is not zero (NaN is true), for every dtype, the
        storage-only ones included. More than one element is ambiguous, and so is none
        (as in NumPy 2): both are ShapeError, a ValueError.
        """
        array = self._array
        if array.size == 1:
            return bool(_scalar_at(array.reshape(-1)[0], self._dtype).value)
        if array.size == 0:
            raise ShapeError(
                "bool: the truth value of an empty tensor is ambiguous; "
                "use `not t.is_empty` to test for elements"
            )
        raise ShapeError(
            f"bool: the truth value of a tensor with more than one element (shape "
            f"{self.shape}) is ambiguous; compare explicitly"
        )

    @view_only
    def __iter__(self) -> Iterator[Tensor]:
        if not self._array.ndim:
            raise TypeError("iteration over a rank-0 tensor")
        for i in range(self._array.shape[0]):
            yield self._wrap(self._array[i, ...])

    # -- reading -------------------------------------------------------------------

    def get(self, indices: Iterable[SupportsIndex]) -> Scalar:
        """The element at ``indices`` (exactly ``ndim`` ints; negatives count from the end)."""
        if isinstance(indices, (str, bytes)) or not isinstance(indices, Iterable):
            raise IndexingError(f"get: expected {self.ndim} ints, found {type(indices).__name__}")
        items = tuple(indices)
        if len(items) != self._array.ndim:
            raise IndexingError(f"get: expected {self.ndim} indices, found {len(items)}")
        for item in items:
            if isinstance(item, (bool, np.bool_)) or not hasattr(item, "__index__"):
                raise IndexingError(f"get: indices must be ints, found {type(item).__name__}")
        view = _indexing.apply(self._array, _indexing.normalize(items))
        return _scalar_at(view[()], self._dtype)

    def item(self) -> Scalar:
        """The only element of a one-element tensor (ShapeError otherwise)."""
        if self._array.size != 1:
            raise ShapeError(f"item: tensor of shape {self.shape} has {self.numel} elements, not 1")
        return _scalar_at(self._array.reshape(-1)[0], self._dtype)

    def to_scalars(self) -> list[Scalar]:
        """Every element as a Scalar, in row-major order."""
        trusted = Scalar._trusted
        dtype = self._dtype
        return [trusted(dtype, v) for v in python_values(self._array.reshape(-1), dtype)]

    def tolist(self) -> Any:
        """Nested Python lists of exact Python values (``bool``, ``int`` or ``float``)."""
        return python_values(self._array, self._dtype)

    def to_le_bytes(self) -> bytes:
        """The logical elements as packed little-endian bytes, row-major."""
        return self._array.tobytes(order="C")

    def digest(self) -> str:
        """SHA-256 hex of ``{"dtype":"F32","shape":[2,3]}`` and the logical row-major bytes.

        Hashes contiguous memory in place and strided views a bounded piece at a time.
        """
        return hash_array(self._dtype.name, self._array.shape, self.numpy())

    def numpy(self) -> np.ndarray:
        """A fresh read-only NumPy view of the tensor (zero-copy: the memory is shared).

        Each call returns a new array over a new flat array of the same memory (its
        ``.base``): changing their ``shape``, ``dtype`` or ``strides``, or even their
        ``__setstate__``, changes only them. Neither can be made writable, nor can
        anything reachable from them through public attributes (see the class docstring).

        Not for handing to PyTorch: ``torch.from_numpy(t.numpy())`` ignores the read-only
        flag (it only warns), so a write through the torch tensor changes this tensor
        and every view of its storage, and crashes on a memory-mapped file. Copy
        instead: ``torch.tensor(t)``, ``torch.from_dlpack(t)``, ``torch.as_tensor(t)``
        or ``np.array(t)`` each give memory the caller owns.
        """
        return fresh_view(self._array)

    # -- views ---------------------------------------------------------------------

    @view_only
    def __getitem__(self, index: object) -> Tensor:
        """Basic indexing: a view sharing storage (see ``slice``)."""
        # The hot path: plain ints, slices and None go straight to NumPy, which both
        # validates and slices; everything else goes through the full parser.
        if type(index) is tuple:
            for item in index:
                if type(item) not in _PLAIN_INDEX:
                    return self.slice(index)
        elif type(index) not in _PLAIN_INDEX:
            return self.slice(index)
        try:
            view = self._array[index]  # type: ignore[call-overload]
        except Exception:
            return self.slice(index)
        # A NumPy scalar means all ints were given (we want a rank-0 view instead).
        if type(view) is not _ndarray or view.ndim > 32:  # 32 == MAX_RANK, inlined: hot path
            return self.slice(index)
        result = _new(Tensor)
        _set_array(result, view)
        return result

    @view_only
    def slice(self, index: object) -> Tensor:
        """``t[index]``: ints (negative allowed), slices with any step, ``None`` and one
        ``...``; a lone index or a tuple. All-int indices give a rank-0 view. Anything
        else (bools, lists, arrays), out-of-range ints and zero steps are IndexingError.

        The one index that copies: a BOOL Tensor ``mask`` whose shape equals the leading
        axes of ``t`` (NumPy's boolean mask). ``t[mask]`` is a new contiguous tensor of
        the selected elements in row-major order, shape ``[count, *t.shape[mask.ndim:]]``;
        a shape mismatch, or a tensor of another dtype, is IndexingError (use ``take``
        for integer indices). Lists of bools are not masks (IndexingError).
        """
        if isinstance(index, Tensor):
            return masked(self, index)
        return self._wrap(_indexing.apply(self._array, _indexing.normalize(index)))

    @view_only
    def transpose(self, axes: Iterable[SupportsIndex] | None = None) -> Tensor:
        """A view with the axes permuted (``None`` reverses them)."""
        if axes is None:
            result = _new(Tensor)
            _set_array(result, self._array.transpose())
            return result
        order = _axes_permutation(axes, self._array.ndim)
        return self._wrap(self._array.transpose(order))

    @property
    def mT(self) -> Tensor:
        """A view with the last two axes swapped (ShapeError below rank 2)."""
        if self._array.ndim < 2:
            raise ShapeError(f"mT: needs rank 2 or more, found rank {self.ndim}")
        return self._wrap(self._array.swapaxes(-1, -2))

    @property
    def T(self) -> Tensor:
        """All axes reversed, as ``transpose()``."""
        return self._wrap(self._array.transpose())

    @view_only  # hot; the materializing path is guarded on its own (_reshaped_copy)
    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in a new shape; at most one ``-1`` is inferred.

        A view when the tensor is contiguous; otherwise a new contiguous tensor in
        row-major order. Accepts ``t.reshape(2, 3)`` and ``t.reshape((2, 3))``.
        """
        dims = shape[0] if len(shape) == 1 and type(shape[0]) is not int else shape
        array = self._array
        # Hot path: plain ints on a non-empty contiguous tensor. With no zero dims the
        # element count is the (already checked) numel, so NumPy's own count check is
        # all the validation needed; anything unusual takes the checked path below.
        if type(dims) is tuple and len(dims) <= 32 and array.size:  # 32 == MAX_RANK
            for dim in dims:
                if type(dim) is not int or dim < -1:
                    break
            else:
                if array.flags.c_contiguous:
                    try:
                        view = array.reshape(dims)
                    except ValueError:
                        pass  # fall through for our own error message
                    else:
                        result = _new(Tensor)
                        _set_array(result, view)
                        return result
        target = self.shape.reshape(dims)
        check_dims(target, "reshape")
        if array.flags.c_contiguous:
            return self._wrap(array.reshape(target))
        return _reshaped_copy(self, target)

    def broadcast_to(self, shape: Iterable[SupportsIndex]) -> Tensor:
        """A new contiguous tensor of ``shape`` by NumPy's broadcasting rule."""
        dims = check_dims(shape, "broadcast_to")
        source = self._array.shape
        fits = len(dims) >= len(source) and all(
            have in (1, want) for have, want in zip(source[::-1], dims[::-1], strict=False)
        )
        if not fits:
            raise ShapeError(f"broadcast_to: shape {self.shape} cannot broadcast to {list(dims)}")
        return self._adopt(np.broadcast_to(self._array, dims).copy(), self._dtype)

    def contiguous(self) -> Tensor:
        """``self`` when already C-contiguous, else a contiguous copy."""
        if self._array.flags.c_contiguous:
            return self
        return self._adopt(self._array.copy(), self._dtype)

    def shares_storage(self, other: object) -> bool:
        """True when both tensors are views of the same storage buffer.

        Storage is the same buffer when it is the same memory: two tensors built
        zero-copy over one ``bytes`` object share it too.
        """
        if not isinstance(other, Tensor):
            return False
        mine, theirs = self._storage, other._storage
        if mine is theirs:
            return True
        return (
            mine.nbytes == theirs.nbytes
            and mine.__array_interface__["data"][0] == theirs.__array_interface__["data"][0]
        )

    # -- immutability and protocols ----------------------------------------------------

    def __setitem__(self, index: object, value: object) -> NoReturn:
        raise TypeError(_SETITEM_HINT)

    def __delitem__(self, index: object) -> NoReturn:
        raise TypeError(_SETITEM_HINT)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Tensor is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Tensor is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle through the validating constructor, as the logical row-major bytes.
        return (_unpickle, (self._dtype.name, tuple(self._array.shape), self.to_le_bytes()))

    def __copy__(self) -> Tensor:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        return self

    def __eq__(self, other: object) -> bool:
        """Structural equality: same dtype, same shape, equal elements (every NaN equal)."""
        if not isinstance(other, Tensor):
            return NotImplemented
        return _structurally_equal(self, other)

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return not _structurally_equal(self, other)

    __hash__ = None  # type: ignore[assignment]


_new = object.__new__
_set_array = Tensor.__dict__["_array"].__set__  # the slot descriptor: no __setattr__ detour
# NumPy's own dtypes from the start; ml_dtypes' join when a tensor of one is first met
# (its array exists, so ml_dtypes is loaded by then, and asking costs nothing).
_DTYPE_OF = {dtype.numpy: dtype for dtype in DType if dtype not in FROM_ML_DTYPES}


def _ml_dtype_of(np_dtype: np.dtype[Any]) -> DType:
    _DTYPE_OF.update({dtype.numpy: dtype for dtype in FROM_ML_DTYPES})
    return _DTYPE_OF[np_dtype]


_PLAIN_INDEX = frozenset({int, slice, type(None)})
_ndarray = np.ndarray


def _copy_in_shape(tensor: Tensor, dims: tuple[int, ...]) -> Tensor:
    return tensor._adopt(tensor._array.reshape(dims), tensor._dtype)


_reshaped_copy = guard_function(_copy_in_shape, "reshape")


def _unpickle(dtype: str, shape: tuple[int, ...], data: bytes) -> Tensor:
    return Tensor.from_le_bytes(DType.parse(dtype), shape, data)


def _scalar_at(value: Any, dtype: DType) -> Scalar:
    if dtype.is_float:
        return Scalar._trusted(dtype, float(value))
    if dtype is DType.BOOL:
        return Scalar._trusted(dtype, bool(value))
    return Scalar._trusted(dtype, int(value))


def _axes_permutation(axes: Iterable[SupportsIndex], ndim: int) -> tuple[int, ...]:
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Iterable):
        raise ShapeError(f"transpose: axes must be a sequence of ints, found {type(axes).__name__}")
    try:
        items = list(axes)
    except Exception as error:  # a hostile __iter__
        raise ShapeError(f"transpose: cannot read the axes ({type(error).__name__})") from None
    order = tuple(normalize_axis(axis, ndim, "transpose") for axis in items)
    if len(order) != ndim or len(set(order)) != ndim:
        raise ShapeError(f"transpose: axes {list(order)} are not a permutation of {ndim} axes")
    return order


def _structurally_equal(a: Tensor, b: Tensor) -> bool:
    if a._dtype is not b._dtype or a._array.shape != b._array.shape:
        return False
    if a._storage is b._storage and a._array.strides == b._array.strides and a.offset == b.offset:
        return True
    left, right = a._array, b._array
    if not a._dtype.is_float:
        return bool(np.array_equal(left, right))
    bits = np.dtype(f"<u{left.itemsize}")
    same_bits = left.view(bits) == right.view(bits)
    with np.errstate(invalid="ignore"):  # ml_dtypes flags signalling NaNs as "invalid"
        both_nan = np.isnan(left) & np.isnan(right)
    return bool(np.all(same_bits | both_nan))


@guard_function
def tensor(values: object, dtype: DType | str) -> Tensor:
    """A tensor from nested Python lists (like ``numpy.array``), converted exactly.

    Each leaf is converted as ``Scalar(dtype, leaf)``: Python numbers, strings (parsed
    exactly) or Scalars of ``dtype``; the values are copied. The shape comes from the
    first element of each level and is checked (deeper than MAX_RANK, over MAX_ELEMENTS,
    or more memory than can be allocated: LimitError) before any leaf is converted; the
    leaves are then converted in row-major order as every container is checked, ragged
    nesting being ShapeError naming the first index that does not fit the shape.
    """
    dt = as_dtype(dtype)
    if isinstance(values, Tensor):
        if values.dtype is not dt:
            raise DTypeError(f"tensor: a {values.dtype.name} tensor is not {dt.name}; use convert")
        return values
    if isinstance(values, np.ndarray):
        return Tensor.from_numpy(values, dt)
    dims, flat = storage_from_nested(dt, values)
    return Tensor._adopt_flat(flat, dims)
