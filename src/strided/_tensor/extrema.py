"""Tensor methods for the comparison reductions: min, max, argmin, argmax, any, all,
count_nonzero, and mean (exact, in ``_kernels.mean``).

Each is one NumPy reduction over the tensor's own view (no copy of the input; argmin
and argmax of a large tensor copy one cache-sized block at a time, ``_kernels.argfind``), with the
axis rules of ``sum``: ``axis`` None (every axis), an int or a tuple, negative values
counted from the end, a bad or repeated axis IndexingError. ``axis=None`` without
``keepdims`` gives a Scalar, anything else a new contiguous Tensor.

These compare values and never compute new ones, but the storage-only FP8 dtypes
support no element-wise comparison either (``DType``), so they are DTypeError here as
well, with the same hint: convert to F32 first (exactly). Selection and joining
(``take``, masks, ``where``, ``concatenate``, ``stack``) work for every dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import ShapeError
from .._core.indexing import normalize_axis
from .._core.scalar import Scalar
from .._kernels.argfind import arg_extreme
from .._kernels.mean import mean_of
from .arith import check_arithmetic
from .base import TensorInternals
from .reduce import normalize_axes

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["StatsMethods"]

Axis = int | tuple[int, ...] | None


class StatsMethods(TensorInternals):
    """Mixin of Tensor: min, max, argmin, argmax, any, all, count_nonzero and mean."""

    __slots__ = ()

    def min(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """The smallest element (``axis=None``: a Scalar) or the smallest along ``axis``.

        NaN propagates (any NaN makes the result NaN), as NumPy's ``min``; the sign of a
        zero result between -0.0 and 0.0 is NumPy's. Defined for BOOL, integers and
        F16/BF16/F32/F64; FP8 is DTypeError. Reducing an axis of length zero is a
        ShapeError (there is no identity), as NumPy's ValueError.
        """
        return self._extreme(np.minimum.reduce, "min", axis, keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """The largest element (``axis=None``: a Scalar) or the largest along ``axis``.

        The rules of ``min``: NaN propagates, FP8 is DTypeError, an empty reduction is
        ShapeError.
        """
        return self._extreme(np.maximum.reduce, "max", axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Scalar | Tensor:
        """The index of the first smallest element, as I64 (NumPy's ``argmin``).

        ``axis=None`` counts in the flattened row-major order and gives an I64 Scalar;
        an int ``axis`` gives an I64 Tensor (tuples are IndexingError, as in NumPy). The
        first NaN, if any, wins. FP8 is DTypeError; an empty reduction is ShapeError.
        """
        return self._arg(np.argmin, "argmin", axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Scalar | Tensor:
        """The index of the first largest element, as I64 (NumPy's ``argmax``).

        The rules of ``argmin``: the first NaN wins, FP8 is DTypeError, an empty
        reduction is ShapeError.
        """
        return self._arg(np.argmax, "argmax", axis, keepdims)

    def any(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """Whether any element is nonzero (true, or NaN, or any value but +-0), as BOOL.

        Empty reductions give false, as NumPy. FP8 is DTypeError.
        """
        return self._logical(np.logical_or.reduce, "any", axis, keepdims)

    def all(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """Whether every element is nonzero (NaN counts as nonzero; -0.0 as zero), as BOOL.

        Empty reductions give true, as NumPy. FP8 is DTypeError.
        """
        return self._logical(np.logical_and.reduce, "all", axis, keepdims)

    def count_nonzero(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """How many elements are nonzero, as I64 (NumPy gives its intp, int64 here).

        NaN is nonzero and -0.0 is zero. FP8 is DTypeError.
        """
        check_arithmetic("count_nonzero", self._dtype)
        mask = _nonzero(self._array, self._dtype)
        return self._count_true(mask, axis, keepdims, "count_nonzero")

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Scalar | Tensor:
        """The arithmetic mean of all elements (a Scalar) or along ``axis`` (a Tensor).

        Computed from the exact sum, never through one that overflowed (the mean of
        ``[F16 max, F16 max]`` is F16 max). F64, integer and BOOL inputs give F64,
        correctly rounded (the exact mean rounded once); F16/BF16/F32 give their own
        dtype within one ulp of the exact mean (almost always correctly rounded). An
        exact zero mean is +0.0. Any NaN, or infinities of both signs, give NaN; one
        infinity sign gives that infinity. The mean of nothing is NaN, without the
        warning NumPy gives. FP8 is DTypeError (convert to F32 first).
        """
        dtype = self._dtype
        check_arithmetic("mean", dtype)
        result_dtype = dtype if dtype.is_float else DType.F64
        axes = normalize_axes(axis, self._array.ndim, "mean")
        values = mean_of(self._array, dtype, axes, bool(keepdims))
        return self._finish(values, result_dtype, axis is None and not keepdims)

    # -- the shared machinery --------------------------------------------------------

    if TYPE_CHECKING:

        def _count_true(
            self, mask: np.ndarray, axis: object, keepdims: bool, what: str
        ) -> Scalar | Tensor: ...

    def _extreme(self, reduce: Any, what: str, axis: object, keepdims: bool) -> Scalar | Tensor:
        dtype = self._dtype
        check_arithmetic(what, dtype)
        array = self._array
        axes = normalize_axes(axis, array.ndim, what)
        _refuse_empty(array, axes, what)
        with np.errstate(all="ignore"):  # NaN compares "invalid" in some dtypes
            found = reduce(array, axis=axes, keepdims=bool(keepdims))
        return self._finish(found, dtype, axis is None and not keepdims)

    def _arg(self, find: Any, what: str, axis: object, keepdims: bool) -> Scalar | Tensor:
        dtype = self._dtype
        check_arithmetic(what, dtype)
        array = self._array
        single = None if axis is None else normalize_axis(axis, array.ndim, what)
        _refuse_empty(array, None if single is None else (single,), what)
        with np.errstate(all="ignore"):
            found = arg_extreme(find, array, single, bool(keepdims))
        return self._finish(found, DType.I64, axis is None and not keepdims)

    def _logical(self, reduce: Any, what: str, axis: object, keepdims: bool) -> Scalar | Tensor:
        dtype = self._dtype
        check_arithmetic(what, dtype)
        mask = _nonzero(self._array, dtype)
        axes = normalize_axes(axis, mask.ndim, what)
        found = reduce(mask, axis=axes, keepdims=bool(keepdims))
        return self._finish(found, DType.BOOL, axis is None and not keepdims)

    def _finish(self, found: Any, dtype: DType, scalar: bool) -> Scalar | Tensor:
        """A NumPy result as a Scalar (``scalar``) or a new tensor of ``dtype``."""
        if scalar:
            return Scalar._trusted(dtype, np.asarray(found).reshape(-1)[0])
        return self._adopt(np.asarray(found), dtype)


def _refuse_empty(array: np.ndarray, axes: tuple[int, ...] | None, what: str) -> None:
    """ShapeError when the reduction has no element to choose from (NumPy: ValueError).

    ``axes`` None means the flattened array (argmin/argmax without an axis).
    """
    empty = array.size == 0 if axes is None else any(array.shape[i] == 0 for i in axes)
    if empty:
        raise ShapeError(
            f"{what}: nothing to reduce (shape {list(array.shape)}, reduced axes "
            f"{'all' if axes is None else list(axes)}); {what} of no elements is undefined"
        )


def _nonzero(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Where the elements are nonzero, as a bool array (NaN is nonzero, -0.0 is zero)."""
    if dtype is DType.BOOL:
        return array
    with np.errstate(all="ignore"):
        return np.asarray(array != 0)
