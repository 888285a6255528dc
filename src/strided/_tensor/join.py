"""Joining tensors: ``concatenate`` (along an existing axis) and ``stack`` (a new axis).

Both check everything before allocating: a non-empty sequence of tensors, one dtype (no
promotion), matching shapes (the error names the first tensor and axis that differ),
and the result's rank and element count against MAX_RANK and MAX_ELEMENTS. Then one
NumPy call copies the inputs' own views (any layout) into a new contiguous tensor.
Joining computes nothing, so every dtype works, FP8 included, bits copied exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.errors import DTypeError, LimitError, ShapeError
from .._core.limits import MAX_RANK, check_dims
from .._core.memory import guard_function

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["concatenate", "stack"]


@guard_function
def concatenate(tensors: Iterable[Tensor], axis: int = 0) -> Tensor:
    """The tensors joined along an existing ``axis`` (NumPy's ``concatenate``).

    ``tensors`` is a non-empty list or tuple of tensors of rank 1 or more with one dtype
    (DTypeError otherwise: no promotion) and equal dims except along ``axis`` (ShapeError
    naming the first tensor and axis that differ). ``axis`` may be negative; out of
    range is IndexingError. The result is a new contiguous tensor.
    """
    from .tensor import Tensor, normalize_axis

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
    from .tensor import Tensor, normalize_axis

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
    from .tensor import Tensor

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
