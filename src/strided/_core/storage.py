"""The memory boundary of tensor storage: who owns a tensor's bytes, and read-only views.

Every tensor's storage array is a read-only array whose ``base`` is a ``ReadOnlyMemory``
(memory computed here, ``seal``; immutable memory borrowed from a caller or a mapped
file, ``borrow``) or a ``bytes`` object. ``fresh_view`` is how an array leaves a tensor
(NumPy, DLPack): a new array over the same memory that shares no array object with it.
"""

from __future__ import annotations

from typing import Any, NoReturn, SupportsIndex

import numpy as np

__all__ = ["ReadOnlyMemory", "borrow", "fresh_view", "seal"]


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
