"""Inspection: a bounded summary of a tensor that never copies or materializes its storage.

``inspect`` reads at most ``k = min(max_samples, MAX_INSPECTION_SAMPLES, numel)``
logical elements. Flat row-major positions are chosen by the strategy and gathered
through the view's own shape and strides (index arrays from ``np.unravel_index``),
which visits only the requested elements: the cost is O(k) in time and memory whatever
the tensor's size, layout or storage (a memory-mapped file stays unread but for the
sampled elements).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError
from .._core.limits import MAX_INSPECTION_SAMPLES, describe, int_text, to_dim
from .._core.scalar import Scalar
from .._core.shape import Shape
from .base import TensorInternals
from .construct import python_values

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["InspectMethods", "TensorInspection", "TensorInspectionOptions"]

STRATEGIES = ("head", "spread")


@dataclass(frozen=True, slots=True, repr=False)
class TensorInspectionOptions:
    """How ``Tensor.inspect`` samples: ``max_samples`` elements chosen by ``strategy``.

    ``strategy`` is ``"head"`` (the first elements in logical row-major order) or
    ``"spread"`` (``k`` evenly spaced logical positions ``i * numel // k``). At most
    MAX_INSPECTION_SAMPLES (65536) elements are read whatever ``max_samples`` says.

    Validated on construction, so an invalid options object cannot exist:
    ``max_samples`` must be a non-negative int (``bool``, floats and negatives are
    ShapeError, as for dims); an unknown or non-string strategy is FormatError.
    """

    max_samples: int = 1024
    strategy: str = "head"

    def __post_init__(self) -> None:
        count = to_dim(self.max_samples, "TensorInspectionOptions.max_samples")
        object.__setattr__(self, "max_samples", count)
        if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
            raise FormatError(
                f"TensorInspectionOptions.strategy must be 'head' or 'spread', "
                f"found {describe(self.strategy)}"
            )

    def __repr__(self) -> str:
        # int_text: a huge max_samples is legal, and repr() of it would raise.
        return (
            f"TensorInspectionOptions(max_samples={int_text(self.max_samples)}, "
            f"strategy={self.strategy!r})"
        )


@dataclass(frozen=True, slots=True)
class TensorInspection:
    """The result of ``Tensor.inspect``: layout facts, the samples, and statistics over them.

    ``samples`` is a tuple of ``(flat_index, Scalar)`` in increasing logical row-major
    order (built on first read: the statistics need no Python object per sample);
    ``sampled`` is their count and ``complete`` says every element was read.
    The statistics cover the samples only. ``min`` / ``max`` ignore NaN and are None
    when no non-NaN sample exists; between zeros of both signs ``min`` is ``-0.0`` and
    ``max`` is ``0.0`` (IEEE 754-2019 minimum / maximum). ``nan_count`` and
    ``inf_count`` are 0 for non-float dtypes; ``zero_count`` counts ``false`` for BOOL
    and both zeros for floats. ``mean`` is the F64 mean of the non-NaN samples (BOOL as
    0 / 1; integer sums exact, float sums correctly rounded before the division; NaN
    when they hold both infinities), None when there is none.
    """

    dtype: DType
    shape: Shape
    strides: tuple[int, ...]
    numel: int
    byte_len: int
    storage_byte_len: int
    is_contiguous: bool
    samples: tuple[tuple[int, Scalar], ...]
    sampled: int
    complete: bool
    min: Scalar | None
    max: Scalar | None
    nan_count: int
    inf_count: int
    zero_count: int
    mean: float | None


class InspectMethods(TensorInternals):
    """Mixin of Tensor: ``inspect``."""

    __slots__ = ()

    def inspect(self, options: TensorInspectionOptions | None = None) -> TensorInspection:
        """A bounded summary: layout facts plus statistics over a few sampled elements.

        Reads at most ``min(options.max_samples, MAX_INSPECTION_SAMPLES, numel)``
        elements in logical row-major order through shape and strides, never copying
        or materializing the storage (views, memory-mapped files and huge tensors cost
        the same). ``options`` defaults to ``TensorInspectionOptions()`` (1024 samples,
        ``"head"``); anything other than options or None is DTypeError.
        """
        return _inspect(cast("Tensor", self), checked_options(options))


_DEFAULT = TensorInspectionOptions()


def checked_options(options: object) -> TensorInspectionOptions:
    """``options``, the default options for None; DTypeError for anything else."""
    if options is None:
        return _DEFAULT
    if not isinstance(options, TensorInspectionOptions):
        raise DTypeError(
            f"inspect: options must be TensorInspectionOptions or None, "
            f"found {type(options).__name__}"
        )
    return options


def _inspect(tensor: Tensor, options: TensorInspectionOptions) -> TensorInspection:
    array = tensor._array
    positions = sample_positions(options, array.size)
    layout = (tensor.strides, tensor.byte_len, tensor.storage_byte_len, tensor.is_contiguous)
    return inspection(tensor._dtype, tensor.shape, positions, _gather(array, positions), layout)


def sample_positions(options: TensorInspectionOptions, numel: int) -> np.ndarray:
    """The flat logical positions ``inspect`` reads from ``numel`` elements, increasing."""
    count = min(options.max_samples, MAX_INSPECTION_SAMPLES, numel)
    return _positions(options.strategy, count, numel)


def inspection(
    dtype: DType,
    shape: Shape,
    positions: np.ndarray,
    values: np.ndarray,
    layout: tuple[tuple[int, ...], int, int, bool],
) -> TensorInspection:
    """The inspection of a tensor from its ``values`` (a fresh array) at ``positions``.

    ``layout`` is the tensor's (strides, byte_len, storage_byte_len, is_contiguous).
    """
    strides, byte_len, storage_byte_len, is_contiguous = layout
    count = int(positions.size)
    samples: Any = _Pending(positions, values, dtype)
    return TensorInspection(
        dtype=dtype,
        shape=shape,
        strides=strides,
        numel=shape.numel,
        byte_len=byte_len,
        storage_byte_len=storage_byte_len,
        is_contiguous=is_contiguous,
        samples=samples,
        sampled=count,
        complete=count == shape.numel,
        **_statistics(values, dtype),
    )


class _Pending:
    """Gathered samples not yet turned into ``(flat_index, Scalar)`` pairs.

    ``positions`` and ``values`` are fresh small arrays (a gather copies), so a pending
    result holds no reference to the tensor's storage.
    """

    __slots__ = ("dtype", "positions", "values")

    def __init__(self, positions: np.ndarray, values: np.ndarray, dtype: DType) -> None:
        self.positions = positions
        self.values = values
        self.dtype = dtype

    def build(self) -> tuple[tuple[int, Scalar], ...]:
        exact = python_values(self.values, self.dtype)
        # Scalars straight through their slots, with C-level loops: a Python call per
        # sample would cost more than everything else inspect does.
        scalars = list(map(_new, repeat(Scalar, len(exact))))
        deque(map(_set_dtype, scalars, repeat(self.dtype)), maxlen=0)
        deque(map(_set_value, scalars, map(_CAST[self.dtype], exact)), maxlen=0)
        return tuple(zip(self.positions.tolist(), scalars, strict=True))


class _LazySamples:
    """``TensorInspection.samples``: stored in the field's slot, built on first read."""

    def __init__(self, slot: Any) -> None:
        self._slot = slot

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self._slot.__get__(obj, owner)
        if type(value) is _Pending:
            value = value.build()
            self._slot.__set__(obj, value)
        return value

    def __set__(self, obj: object, value: object) -> None:
        self._slot.__set__(obj, value)


# The dataclass keeps ``samples`` as a field (its __init__, __eq__, __repr__, __hash__ and
# pickling all read it through this descriptor); only its storage is deferred.
setattr(TensorInspection, "samples", _LazySamples(TensorInspection.__dict__["samples"]))  # noqa: B010
_new = object.__new__
_set_dtype = Scalar.__dict__["_dtype"].__set__
_set_value = Scalar.__dict__["_value"].__set__
_CAST = {
    dtype: bool if dtype is DType.BOOL else float if dtype.is_float else int for dtype in DType
}


def _gather(array: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The elements at flat logical ``positions``, touching only those elements.

    Index arrays from ``np.unravel_index`` address the view through its own shape and
    strides. Over a memory-mapped file each sample still faults in its page, and the
    kernel's read-ahead maps neighbouring pages too: "head" touches a few pages, while
    "spread" over a huge file can map a large part of it (the bytes are not copied).
    """
    if array.ndim == 0:
        gathered = array.reshape(1)[positions]
    elif array.ndim == 1:
        gathered = array[positions]
    else:
        gathered = array[np.unravel_index(positions, array.shape)]
    return gathered  # type: ignore[no-any-return]


def _positions(strategy: str, count: int, numel: int) -> np.ndarray:
    """Flat logical indices to read, increasing."""
    steps = np.arange(count, dtype=np.int64)
    if strategy == "head" or count == 0:
        return steps
    # numel <= MAX_ELEMENTS (2**34) and count <= 2**16, so the product fits in int64.
    return steps * numel // count


def _statistics(values: np.ndarray, dtype: DType) -> dict[str, Any]:
    if dtype.is_float:
        # Widening is exact; errstate because ml_dtypes flags NaN payloads as "invalid".
        with np.errstate(invalid="ignore"):
            wide = values.astype(np.float64)
        return _float_statistics(wide, dtype)
    if values.size == 0:
        extremes: tuple[Scalar | None, Scalar | None] = (None, None)
        mean = None
    else:
        low, high = values.min(), values.max()
        extremes = (Scalar._trusted(dtype, low), Scalar._trusted(dtype, high))
        # Python ints: an I64/U64 sum of 65536 samples can exceed 64 bits, and int / int
        # is correctly rounded.
        mean = sum(values.astype(np.uint8).tolist() if dtype is DType.BOOL else values.tolist())
        mean = mean / values.size
    return {
        "min": extremes[0],
        "max": extremes[1],
        "nan_count": 0,
        "inf_count": 0,
        "zero_count": int(np.count_nonzero(values == 0)),
        "mean": mean,
    }


def _float_statistics(values: np.ndarray, dtype: DType) -> dict[str, Any]:
    nan = np.isnan(values)
    real = values[~nan]  # every sample but NaN, infinities included
    stats: dict[str, Any] = {
        "min": None,
        "max": None,
        "nan_count": int(np.count_nonzero(nan)),
        "inf_count": int(np.count_nonzero(np.isinf(real))),
        "zero_count": int(np.count_nonzero(real == 0)),
        "mean": None,
    }
    if real.size:
        low, high = float(real.min()), float(real.max())
        if low == 0.0:  # NumPy may return either zero; prefer -0.0 when present
            low = -0.0 if np.signbit(real[real == 0]).any() else 0.0
        if high == 0.0:
            high = 0.0 if not np.signbit(real[real == 0]).all() else -0.0
        stats["min"] = Scalar._trusted(dtype, low)
        stats["max"] = Scalar._trusted(dtype, high)
        stats["mean"] = _float_mean(real)
    return stats


def _float_mean(real: np.ndarray) -> float:
    """The mean of non-NaN float64 values: a correctly rounded sum, divided once."""
    positive = bool(np.any(real == math.inf))
    negative = bool(np.any(real == -math.inf))
    if positive and negative:
        return math.nan
    if positive or negative:
        return math.inf if positive else -math.inf
    finite = real.tolist()
    try:
        return math.fsum(finite) / len(finite)
    except OverflowError:
        # A partial sum passed the F64 range; scaling by 2**-17 is exact for all but
        # subnormal-sized values and keeps any sum of 65536 samples finite.
        scaled = math.fsum(value * 2.0**-17 for value in finite)
        return scaled / len(finite) * 2.0**17
