"""Selection that copies: ``t.take(indices, axis)``, boolean masks ``t[mask]`` and ``where``.

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

from ._base import TensorInternals
from ._checked import first_index
from ._construct import nested_shape
from ._dtype import DType
from ._errors import DTypeError, IndexingError, ShapeError
from ._limits import check_dims, describe, int_text
from ._memory import guard_function
from ._scalar import Scalar

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["SelectMethods", "masked", "where"]


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
        from ._tensor import normalize_axis

        array = self._array
        chosen = _index_array(indices)
        if axis is None:
            source, at = array.reshape(-1), 0  # reshape copies only a non-contiguous view
        else:
            at = normalize_axis(axis, array.ndim, "take")
            source = array
        length = source.shape[at]
        _check_range(chosen, length, "take", "the flattened tensor" if axis is None else at)
        dims = (*source.shape[:at], *chosen.shape, *source.shape[at + 1 :])
        check_dims(dims, "take")
        if chosen.dtype != np.intp:
            chosen = chosen.astype(np.intp)  # exact: every index is in range now
        return self._adopt(np.take(source, chosen, axis=at), self._dtype)


def _index_array(indices: object) -> np.ndarray:
    """``indices`` as an integer array (its own dtype for a Tensor, int64 for Python ints)."""
    from ._tensor import Tensor

    if isinstance(indices, Tensor):
        dtype = indices.dtype
        if not dtype.is_integer:
            raise DTypeError(f"take: indices must have an integer dtype, found {dtype.name}")
        return indices._array
    if isinstance(indices, np.ndarray):
        raise DTypeError("take: wrap a numpy.ndarray of indices with Tensor.from_numpy first")
    if isinstance(indices, (list, tuple)):
        dims, leaves = nested_shape(indices)
        values = [_as_index(leaf) for leaf in leaves]
        if any(not -(2**63) <= v < 2**63 for v in values):
            bad = next(i for i, v in enumerate(values) if not -(2**63) <= v < 2**63)
            raise IndexingError(
                f"take: index {int_text(values[bad])} at position {list(_unravel(bad, dims))} "
                f"is out of range"
            )
        return np.array(values, dtype=np.int64).reshape(dims)
    return np.array(_as_index(indices), dtype=np.int64)


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


def _check_range(chosen: np.ndarray, length: int, what: str, axis: object) -> None:
    """IndexingError naming the first index outside ``-length <= i < length``."""
    if chosen.size == 0:
        return
    low, high = int(np.min(chosen)), int(np.max(chosen))
    if -length <= low and high < length:
        return
    bad = (chosen < -length) | (chosen >= length)
    position = first_index(np.asarray(bad))
    where_text = axis if isinstance(axis, str) else f"axis {axis}"
    raise IndexingError(
        f"{what}: index {int(chosen[position])} at position {list(position)} is out of range "
        f"for {where_text} of length {length}"
    )


# -- masks ------------------------------------------------------------------------------------


def _masked(tensor: Any, mask: Any) -> Tensor:
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
    result: Tensor = tensor._adopt(tensor._array[mask._array], tensor._dtype)
    return result


masked = guard_function(_masked, "index")


# -- where ------------------------------------------------------------------------------------


@guard_function
def where(cond: object, a: object, b: object) -> Tensor:
    """Elements of ``a`` where ``cond`` is true, else of ``b`` (NumPy's ``where``).

    ``cond`` is a BOOL Tensor; ``a`` and ``b`` are tensors of one dtype (no promotion:
    DTypeError otherwise), or one of them is a scalar-like (a Scalar of that dtype, a
    Python number or text) converted exactly into the other's dtype. The three shapes
    broadcast NumPy-style (ShapeError otherwise). The result is a new contiguous tensor
    of that dtype, bits copied exactly; every dtype works, FP8 included.
    """
    from ._shape import Shape
    from ._tensor import Tensor

    if not isinstance(cond, Tensor) or cond.dtype is not DType.BOOL:
        found = cond.dtype.name if isinstance(cond, Tensor) else type(cond).__name__
        raise DTypeError(f"where: cond must be a BOOL tensor, found {found}")
    dtype = _common_dtype(a, b)
    left, right = _operand(a, dtype), _operand(b, dtype)
    try:
        dims = Shape(cond._array.shape).broadcast(left.shape).broadcast(right.shape)
    except ShapeError:
        raise ShapeError(
            f"where: shapes {list(cond._array.shape)}, {list(left.shape)} and "
            f"{list(right.shape)} cannot be broadcast together"
        ) from None
    check_dims(dims, "where")
    return Tensor._adopt(np.where(cond._array, left, right), dtype)


def _common_dtype(a: object, b: object) -> DType:
    from ._tensor import Tensor

    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.dtype is not b.dtype:
            raise DTypeError(
                f"where: dtypes differ ({a.dtype.name} and {b.dtype.name}); convert one first"
            )
        return a.dtype
    if isinstance(a, Tensor):
        return a.dtype
    if isinstance(b, Tensor):
        return b.dtype
    raise DTypeError("where: a or b must be a Tensor (its dtype is the result's)")


def _operand(value: object, dtype: DType) -> np.ndarray:
    from ._tensor import Tensor

    if isinstance(value, Tensor):
        return value._array
    if isinstance(value, np.ndarray):
        raise DTypeError("where: wrap a numpy.ndarray with Tensor.from_numpy first")
    return np.asarray(Scalar(dtype, value).value, dtype=dtype.numpy)
