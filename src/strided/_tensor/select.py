"""Selection that copies: ``t.take(indices, axis)`` and boolean masks ``t[mask]`` (``where``
is in ``join``, beside the other functions that build a tensor from several).

Every path validates first (dtypes, shapes, every index against the axis length, the
result against MAX_RANK and MAX_ELEMENTS) and then makes one NumPy call on the tensors'
own views, whose result becomes a new contiguous tensor. Selection never computes a
value, so it works for every dtype, the storage-only FP8 ones included, and copies bits
exactly (NaN payloads and -0.0 too).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, IndexingError
from .._core.indexing import normalize_axis
from .._core.limits import MAX_RANK, check_dims, describe, int_text
from .._core.memory import guard_function
from .._kernels.checked import first_index
from .base import TensorInternals
from .construct import allocate, leaf_types
from .nested import blocks, check_values, probe_shape

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["SelectMethods", "masked"]


class SelectMethods(TensorInternals):
    """Mixin of Tensor: ``take``."""

    __slots__ = ()

    def take(self, indices: object, axis: int | None = None) -> Tensor:
        """Elements at ``indices`` along ``axis``, as ``numpy.take`` (an embedding lookup).

        ``indices`` is an integer Tensor (any integer dtype), nested lists of ints, or an
        int; negative indices count from the end. The result has shape
        ``shape[:axis] + indices.shape + shape[axis + 1:]``; ``axis=None`` takes from the
        flattened row-major elements. An index out of range is IndexingError naming the
        first bad one (its position in ``indices``, its value and the axis length); a
        BOOL or float index tensor is DTypeError; a bad axis IndexingError. The result is
        a new contiguous tensor (a copy); every dtype works, FP8 included.
        """
        array = self._array
        if axis is None:
            source, at = array.reshape(-1), 0  # reshape copies only a non-contiguous view
            place = "the flattened tensor"
        else:
            at = _axis(axis, array.ndim)
            source, place = array, f"axis {at}"
        length = source.shape[at]
        chosen = _index_array(indices, length, place)
        if not 0 < chosen.size <= length or source.ndim + chosen.ndim > MAX_RANK + 1:
            # Otherwise the result is no larger than the source, which is within the caps.
            check_dims((*source.shape[:at], *chosen.shape, *source.shape[at + 1 :]), "take")
        try:
            # NumPy checks intp indices itself (negatives included), the cheapest way;
            # other integer dtypes were checked before their conversion to intp.
            taken = np.take(source, chosen, axis=at)
        except IndexError as error:
            _check_range(chosen, length, place)  # names the first bad index
            raise IndexingError(f"take: {error}") from None
        return self._adopt(taken, self._dtype)


def _axis(axis: object, ndim: int) -> int:
    if type(axis) is int and -ndim <= axis < ndim:
        return axis % ndim
    return normalize_axis(axis, ndim, "take")


def _index_array(indices: object, length: int, place: str) -> np.ndarray:
    """``indices`` as an integer array (a Tensor's own, int64 for Python ints), each one
    checked to lie in ``-length <= i < length``."""
    if isinstance(indices, TensorInternals):
        dtype = indices._dtype
        if not dtype.is_integer:
            raise DTypeError(f"take: indices must have an integer dtype, found {dtype.name}")
        chosen = indices._array
        if chosen.dtype == np.intp:
            return chosen  # range-checked by np.take itself (see take)
    elif isinstance(indices, np.ndarray):
        raise DTypeError("take: wrap a numpy.ndarray of indices with Tensor.from_numpy first")
    elif isinstance(indices, (list, tuple)):
        chosen = _list_indices(indices, length, place)
    else:
        chosen = _list_indices([indices], length, place).reshape(())
    _check_range(chosen, length, place)
    return chosen if chosen.dtype == np.intp else chosen.astype(np.intp)  # in range: exact


def _list_indices(indices: list[Any] | tuple[Any, ...], length: int, place: str) -> np.ndarray:
    dims = probe_shape(indices, "take")
    chosen = allocate(DType.I64, dims, "take")
    for start, rows in blocks(indices, dims, "take"):
        count = len(rows) * dims[-1]
        if leaf_types(rows) == _INT_ONLY:
            try:
                chosen[start : start + count] = np.array(rows, dtype=np.int64).reshape(-1)
                continue  # the bulk path; _check_range checks every index afterwards
            except OverflowError:
                pass  # an int beyond 64 bits: the value-by-value path names it
        check_values(rows, start, dims, "take")
        for i, leaf in enumerate(leaf for row in rows for leaf in row):
            value = _as_index(leaf)
            if not -length <= value < length:
                raise IndexingError(
                    f"take: index {int_text(value)} at position "
                    f"{list(_unravel(start + i, dims))} is out of range for {place} of "
                    f"length {length}"
                )
            chosen[start + i] = value
    return chosen.reshape(dims)


_INT_ONLY = frozenset({int})


def _as_index(value: object) -> int:
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_, float, str, bytes)):
        raise DTypeError(
            f"take: indices must be ints, found {type(value).__name__} {describe(value)}"
        )
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except Exception:  # a hostile __index__ may raise anything
        raise DTypeError(f"take: indices must be ints, found {type(value).__name__}") from None


def _unravel(flat: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, dims)) if dims else ()


def _check_range(chosen: np.ndarray, length: int, place: str) -> None:
    """IndexingError naming the first index outside ``-length <= i < length``."""
    if chosen.size == 0 or (-length <= chosen.min() and chosen.max() < length):
        return
    position = first_index(np.asarray((chosen < -length) | (chosen >= length)))
    raise IndexingError(
        f"take: index {int(chosen[position])} at position {list(position)} is out of range "
        f"for {place} of length {length}"
    )


# -- masks ------------------------------------------------------------------------------------


def _masked(tensor: Tensor, mask: Tensor) -> Tensor:
    """``tensor[mask]`` for a BOOL tensor ``mask`` covering the leading axes (a copy)."""
    if mask.dtype is not DType.BOOL:
        raise IndexingError(
            f"index: a {mask.dtype.name} tensor is not an index; only a BOOL tensor is a mask "
            f"(use take for integer indices)"
        )
    shape, cover = tensor._array.shape, mask._array.shape
    if shape[: len(cover)] != cover:
        raise IndexingError(
            f"index: mask of shape {list(cover)} does not match the leading axes of "
            f"shape {list(shape)}"
        )
    check_dims((int(np.count_nonzero(mask._array)), *shape[len(cover) :]), "index")
    return tensor._adopt(tensor._array[mask._array], tensor._dtype)


masked = guard_function(_masked, "index")
