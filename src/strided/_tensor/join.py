"""Tensors made from several: ``concatenate`` (along an existing axis), ``stack`` (a new
axis) and ``where`` (elementwise choice between two).

Both check everything before allocating: a non-empty sequence of tensors, one dtype (no
promotion), matching shapes (the error names the first tensor and axis that differ),
and the result's rank and element count against MAX_RANK and MAX_ELEMENTS. Then one
NumPy call copies the inputs' own views (any layout) into a new contiguous tensor.
Joining computes nothing, so every dtype works, FP8 included, bits copied exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, LimitError, ShapeError
from .._core.indexing import normalize_axis
from .._core.limits import MAX_RANK, check_dims
from .._core.memory import guard_function
from .._core.scalar import Scalar
from .._core.shape import Shape
from .tensor import Tensor

__all__ = ["concatenate", "stack", "where"]


@guard_function
def concatenate(tensors: Iterable[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along an existing ``axis`` (NumPy's ``concatenate``).

    ``tensors`` is a non-empty list or tuple of tensors of rank 1 or more with one dtype
    (DTypeError otherwise: no promotion) and equal dims except along ``axis`` (ShapeError
    naming the first tensor and axis that differ). ``axis`` may be negative; out of
    range is IndexingError. The result is a new contiguous tensor.
    """
    arrays, dtype = _arrays(tensors, "concatenate")
    first = arrays[0].shape
    if not first:
        raise ShapeError("concatenate: rank-0 tensors cannot be concatenated; use stack")
    at = normalize_axis(axis, len(first), "concatenate")
    for i, array in enumerate(arrays):
        shape = array.shape
        if len(shape) != len(first):
            raise ShapeError(
                f"concatenate: tensor {i} has rank {len(shape)}, tensor 0 has rank {len(first)}"
            )
        for k, (have, want) in enumerate(zip(shape, first, strict=True)):
            if k != at and have != want:
                raise ShapeError(
                    f"concatenate: tensor {i} has shape {list(shape)}, which differs from "
                    f"tensor 0's {list(first)} in axis {k} ({have} != {want})"
                )
    total = sum(array.shape[at] for array in arrays)
    check_dims((*first[:at], total, *first[at + 1 :]), "concatenate")
    return Tensor._adopt(np.concatenate(arrays, axis=at), dtype)


@guard_function
def stack(tensors: Iterable[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along a new ``axis`` (NumPy's ``stack``).

    ``tensors`` is a non-empty list or tuple of tensors of one dtype (DTypeError otherwise)
    and one shape (ShapeError naming the first tensor and axis that differ). ``axis``
    counts in the result's rank (``-1`` appends the new axis last); out of range is
    IndexingError; the result's rank is at most MAX_RANK (LimitError). A new contiguous
    tensor.
    """
    arrays, dtype = _arrays(tensors, "stack")
    first = arrays[0].shape
    if len(first) + 1 > MAX_RANK:
        raise LimitError(f"stack: the result's rank {len(first) + 1} exceeds MAX_RANK ({MAX_RANK})")
    at = normalize_axis(axis, len(first) + 1, "stack")
    for i, array in enumerate(arrays):
        if array.shape != first:
            raise ShapeError(
                f"stack: tensor {i} has shape {list(array.shape)}, tensor 0 has shape "
                f"{list(first)}{_first_difference(array.shape, first)}"
            )
    check_dims((*first[:at], len(arrays), *first[at:]), "stack")
    return Tensor._adopt(np.stack(arrays, axis=at), dtype)


def _first_difference(shape: tuple[int, ...], first: tuple[int, ...]) -> str:
    if len(shape) != len(first):
        return f" (rank {len(shape)} != {len(first)})"
    k = next(k for k, (a, b) in enumerate(zip(shape, first, strict=True)) if a != b)
    return f" (axis {k}: {shape[k]} != {first[k]})"


def _arrays(tensors: object, what: str) -> tuple[list[np.ndarray], Any]:
    """The tensors' arrays and their one dtype, checked."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise DTypeError(
            f"{what}: expected a list or tuple of tensors, found {type(tensors).__name__}"
        )
    if not tensors:
        raise ShapeError(f"{what}: needs at least one tensor, found an empty sequence")
    dtype = None
    arrays = []
    for i, item in enumerate(tensors):
        if not isinstance(item, Tensor):
            raise DTypeError(f"{what}: item {i} is a {type(item).__name__}, not a Tensor")
        if dtype is None:
            dtype = item.dtype
        elif item.dtype is not dtype:
            raise DTypeError(
                f"{what}: tensor {i} is {item.dtype.name}, tensor 0 is {dtype.name}; "
                f"convert first (no promotion)"
            )
        arrays.append(item._array)
    return arrays, dtype


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
    if isinstance(value, Tensor):
        return value._array
    if isinstance(value, np.ndarray):
        raise DTypeError("where: wrap a numpy.ndarray with Tensor.from_numpy first")
    return np.asarray(Scalar(dtype, value).value, dtype=dtype.numpy)
