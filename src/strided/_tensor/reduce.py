"""Tensor methods for sum and matmul.

Integer sums are exact: axis sums accumulate in a 64-bit type (exact for up to 2**31
terms), 64-bit integers as 32-bit high and low halves; full sums and very long rows are
``_summation.int_total``'s Python ints. Float sums live in ``_summation``, products in
``_matmul``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, IndexingError, RangeError, ShapeError
from .._core.indexing import normalize_axis
from .._core.limits import check_dims
from .._core.scalar import Scalar
from .._core.shape import Shape
from .._kernels.checked import first_index, int_range
from .._kernels.convert import cast, widen
from .._kernels.matmul import MatmulOverflow, matmul_arrays
from .._kernels.summation import EXACT_TERMS, float_row_sums, float_sum, int_total
from .arith import ArithMethods, check_arithmetic
from .base import TensorInternals

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["ReduceMethods", "normalize_axes"]

_M32 = 0xFFFFFFFF
_add = np.add.reduce


class ReduceMethods(TensorInternals):
    """Mixin of Tensor: sum and matmul."""

    __slots__ = ()

    def sum(
        self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
    ) -> Scalar | Tensor:
        """The sum of all elements as a Scalar, or along ``axis`` (an int or a tuple) as a Tensor.

        Integer sums are exact or RangeError (the first output element that does not fit
        the dtype is named). F64 sums are correctly rounded (the value of ``math.fsum``);
        F16/BF16/F32 sums are within one ulp of correctly rounded; float overflow gives
        infinity. An empty sum is zero, and an exact zero is +0.0. With ``keepdims`` the
        reduced axes stay with size 1 (``axis=None`` then gives a tensor of shape
        ``[1, ...]``). A BOOL sum counts the true elements into I64 (as NumPy's sum of
        bools gives int64; a count never exceeds MAX_ELEMENTS). FP8 is DTypeError; a bad
        or repeated axis is IndexingError.
        """
        dtype = self._dtype
        check_arithmetic("sum", dtype)
        array = self._array
        if dtype is DType.BOOL:
            return self._count_true(array, axis, keepdims, "sum")
        return self._sum(array, dtype, axis, keepdims)

    def _count_true(
        self, mask: np.ndarray, axis: object, keepdims: bool, what: str
    ) -> Scalar | Tensor:
        """How many elements of a bool array are true, as an I64 Scalar or tensor."""
        if axis is None and not keepdims:
            return Scalar._trusted(DType.I64, int(np.count_nonzero(mask)))
        axes = normalize_axes(axis, mask.ndim, what)
        counts = np.count_nonzero(mask, axis=axes, keepdims=bool(keepdims))
        return self._adopt(np.asarray(counts, dtype=np.int64), DType.I64)

    def _sum(
        self, array: np.ndarray, dtype: DType, axis: object, keepdims: bool
    ) -> Scalar | Tensor:
        if axis is None:
            total = _sum_all(array, dtype)
            if not keepdims:
                return total
            return self._adopt(np.full((1,) * array.ndim, total.value, dtype=dtype.numpy), dtype)
        axes = normalize_axes(axis, array.ndim, "sum")
        result = _sum_axes(array, dtype, axes, bool(keepdims))
        if keepdims:
            result = result.reshape([1 if i in axes else d for i, d in enumerate(array.shape)])
        return self._adopt(result, dtype)

    def matmul(self, other: Tensor) -> Tensor:
        """NumPy's ``matmul``: batch axes broadcast, 1-D operands get an axis added and removed.

        Same dtype required (DTypeError). F32/F64 go through BLAS; F16/BF16 accumulate in
        F32 and round once; integer products are exact or RangeError naming the first
        output element that does not fit. BOOL and FP8 are DTypeError; rank-0 operands and
        mismatched inner dims are ShapeError.
        """
        if not isinstance(other, ArithMethods):
            return _matmul_scalar(self, other)
        return _matmul(self, other)

    def __matmul__(self, other: object) -> Tensor:
        if not isinstance(other, ArithMethods):
            return _matmul_scalar(self, other)
        return _matmul(self, other)

    def __rmatmul__(self, other: object) -> Tensor:
        return _matmul_scalar(self, other)


# -- sums -------------------------------------------------------------------------------------


def normalize_axes(axis: object, ndim: int, what: str) -> tuple[int, ...]:
    """An int or a tuple (or list) of axes as non-negative ints, None as every axis;
    IndexingError when one is out of range or repeated (NumPy refuses a repeated axis too)."""
    if axis is None:
        return tuple(range(ndim))

    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(normalize_axis(item, ndim, what) for item in items)
    if len(set(axes)) != len(axes):
        raise IndexingError(f"{what}: repeated axis in {list(axes)}")
    return axes


def _sum_all(array: np.ndarray, dtype: DType) -> Scalar:
    if dtype.is_float:
        return Scalar._trusted(dtype, float_sum(array, dtype))
    total = int_total(np.ascontiguousarray(array).reshape(-1), dtype)
    lo, hi = int_range(dtype)
    if not lo <= total <= hi:
        raise RangeError(f"sum: the sum {total} does not fit {dtype.name} ({lo} to {hi})")
    return Scalar._trusted(dtype, total)


def _sum_axes(array: np.ndarray, dtype: DType, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    kept = [i for i in range(array.ndim) if i not in axes]
    out_shape = tuple(array.shape[i] for i in kept)
    length = math.prod(array.shape[i] for i in axes)
    count = math.prod(out_shape)
    if count == 0:
        return np.zeros(out_shape, dtype=dtype.numpy)
    if not axes:
        return np.array(array, dtype=dtype.numpy, order="C", copy=True)
    if dtype.is_float:
        rows = np.transpose(array, [*kept, *axes]).reshape(count, length)
        sums = float_row_sums(rows if dtype is DType.F64 else _widen_rows(rows, dtype), dtype)
        return cast(sums.reshape(out_shape), dtype.numpy)
    try:
        return _int_sum_axes(array, dtype, axes, out_shape, length)
    except _Overflow as overflow:
        index = list(overflow.index)
        if keepdims:
            for axis in sorted(axes):
                index.insert(axis, 0)
        lo, hi = int_range(dtype)
        raise RangeError(
            f"sum: the sum at index {index} is {overflow.value}, which does not fit "
            f"{dtype.name} ({lo} to {hi})"
        ) from None


class _Overflow(Exception):
    def __init__(self, index: tuple[int, ...], value: int) -> None:
        self.index = index
        self.value = value


def _widen_rows(rows: np.ndarray, dtype: DType) -> np.ndarray:
    return widen(np.ascontiguousarray(rows), dtype)


def _int_sum_axes(
    array: np.ndarray, dtype: DType, axes: tuple[int, ...], out_shape: tuple[int, ...], length: int
) -> np.ndarray:
    lo, hi = int_range(dtype)
    if length > EXACT_TERMS:
        return _int_sum_axes_python(array, dtype, axes, out_shape)
    if dtype.itemsize <= 4:
        wide = np.int64 if dtype.is_signed else np.uint64
        sums = _add(array, axis=axes, dtype=wide)
        values = sums
        fits = (sums >= lo) & (sums <= hi)
    else:
        # Exact 64-bit sums from 32-bit halves: total = high * 2**32 + low.
        high = _add(array >> 32, axis=axes)
        low = _add(array & _M32, axis=axes)
        top = high + (low >> 32)  # the total's bits above 32, exactly
        bottom = low & _M32
        limit = 2**31 if dtype.is_signed else 2**32
        fits = (top < limit) & (top >= (-limit if dtype.is_signed else 0))
        values = (top << 32) | bottom
    if not np.all(fits):
        index = first_index(~np.asarray(fits).reshape(out_shape))
        raise _Overflow(index, _exact_at(array, axes, index))
    return np.asarray(values).reshape(out_shape).astype(dtype.numpy)


def _exact_at(array: np.ndarray, axes: tuple[int, ...], index: tuple[int, ...]) -> int:
    kept = [i for i in range(array.ndim) if i not in axes]
    selector: list[Any] = [slice(None)] * array.ndim
    for axis, i in zip(kept, index, strict=True):
        selector[axis] = i
    return sum(int(v) for v in np.asarray(array[tuple(selector)]).reshape(-1).tolist())


def _int_sum_axes_python(
    array: np.ndarray, dtype: DType, axes: tuple[int, ...], out_shape: tuple[int, ...]
) -> np.ndarray:
    """More than 2**31 terms per output (so at most a few outputs): exact Python totals."""
    kept = [i for i in range(array.ndim) if i not in axes]
    rows = np.transpose(array, [*kept, *axes]).reshape(math.prod(out_shape), -1)
    lo, hi = int_range(dtype)
    totals = []
    for i in range(rows.shape[0]):
        total = int_total(np.ascontiguousarray(rows[i]), dtype)
        if not lo <= total <= hi:
            raise _Overflow(tuple(int(j) for j in np.unravel_index(i, out_shape)), total)
        totals.append(total)
    return np.array(totals, dtype=dtype.numpy).reshape(out_shape)


# -- matmul -----------------------------------------------------------------------------------


def _matmul_scalar(tensor: Any, other: object) -> Tensor:
    """A scalar-like operand of ``@``: validated as a value of the dtype, then refused."""
    check_arithmetic("matmul", tensor._dtype)
    if isinstance(other, np.ndarray):
        raise DTypeError("matmul: wrap a numpy.ndarray with Tensor.from_numpy first")
    Scalar(tensor._dtype, other)
    raise ShapeError("matmul: a scalar operand has rank 0; matmul needs rank 1 or more")


def _matmul(left: Any, right: Any) -> Tensor:
    dtype = left._dtype
    if right._dtype is not dtype:
        raise DTypeError(
            f"matmul: dtypes differ ({dtype.name} and {right._dtype.name}); convert one side first"
        )
    check_arithmetic("matmul", dtype)
    if dtype is DType.BOOL:
        raise DTypeError("matmul: not defined for BOOL; convert to an integer dtype first")
    a, b = left._array, right._array
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must have rank 1 or more, found a rank-0 tensor")
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b[:, np.newaxis] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: shapes {list(a.shape)} and {list(b.shape)} do not match "
            f"({a2.shape[-1]} columns on the left, {b2.shape[-2]} rows on the right)"
        )

    try:
        batch = Shape(a2.shape[:-2]).broadcast(b2.shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"matmul: batch axes of {list(a.shape)} and {list(b.shape)} cannot be broadcast"
        ) from None
    check_dims((*batch, a2.shape[-2], b2.shape[-1]), "matmul")
    try:
        product = matmul_arrays(a2, b2, dtype)
    except MatmulOverflow as overflow:
        index = list(overflow.index)
        if b.ndim == 1:
            del index[-1]
        if a.ndim == 1:
            del index[-2 if b.ndim > 1 else -1]
        raise RangeError(overflow.message(tuple(index))) from None
    if b.ndim == 1:
        product = product[..., 0]
    if a.ndim == 1:
        product = product[..., 0, :] if b.ndim > 1 else product[..., 0]
    result: Tensor = left._adopt(product, dtype)
    return result
