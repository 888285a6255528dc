"""Tensor's constructors: ``from_le_bytes``, ``from_scalars``, ``zeros``, ``full``,
``scalar`` and ``from_numpy``.

Each checks its shape (MAX_RANK, MAX_ELEMENTS) before it allocates and goes through the
class's one way in (``_wrap``, ``_adopt``, ``_adopt_flat``); what is shared and what is
copied is said per method.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, SupportsIndex

import numpy as np

from .._core.dtype import DType, as_dtype, finite_range
from .._core.errors import DTypeError
from .._core.limits import check_dims
from .._core.scalar import Scalar
from .base import TensorInternals
from .construct import check_numpy_input, shaped, storage_from_bytes, storage_from_values
from .interop import foreign_hint

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["FactoryMethods"]


class FactoryMethods(TensorInternals):
    """Mixin of Tensor: its public constructors (classmethods)."""

    __slots__ = ()

    @classmethod
    def from_le_bytes(
        cls, dtype: DType | str, shape: Iterable[SupportsIndex], data: object
    ) -> Tensor:
        """A tensor over packed little-endian bytes (``len(data) == numel * itemsize``).

        Memory that can never change is shared without copying: ``bytes``, a read-only
        ``mmap``, and read-only ``memoryview``s over those. Everything else is copied
        first: ``bytearray``, writable mmaps, NumPy arrays (even read-only ones, which
        their owner can make writable again), ``array.array``, and read-only memoryviews
        over any of these. BOOL bytes other than 0 and 1 are FormatError, so bytes
        round-trip exactly.
        """
        dt = as_dtype(dtype)
        dims = check_dims(shape)
        return cls._wrap(shaped(storage_from_bytes(dt, dims, data), dims))

    @classmethod
    def from_scalars(
        cls, dtype: DType | str, shape: Iterable[SupportsIndex], values: Iterable[object]
    ) -> Tensor:
        """A tensor of ``values`` (flat, row-major), each converted exactly as ``Scalar(dtype, v)``.

        The count must equal the shape's element count (ShapeError; at most ``numel + 1``
        values are taken). The result is allocated first (LimitError at once when it
        cannot be), then filled block by block, so a bad value raises as ``Scalar`` does
        before a wrong count is noticed. The values are copied.
        """
        dt = as_dtype(dtype)
        dims = check_dims(shape)
        return cls._adopt_flat(storage_from_values(dt, dims, values), dims)

    @classmethod
    def zeros(cls, dtype: DType | str, shape: Iterable[SupportsIndex]) -> Tensor:
        """A tensor of zeros (``false`` for BOOL); RangeError for F8_E8M0, which has no zero."""
        dt = as_dtype(dtype)
        dims = check_dims(shape)
        if finite_range(dt)[0] > 0:  # no zero among the values: full raises RangeError
            return cls.full(dt, dims, 0)
        return cls._adopt(np.zeros(dims, dtype=dt.numpy), dt)

    @classmethod
    def full(cls, dtype: DType | str, shape: Iterable[SupportsIndex], value: object) -> Tensor:
        """A tensor with every element ``Scalar(dtype, value)``."""
        dt = as_dtype(dtype)
        dims = check_dims(shape)
        exact = Scalar(dt, value).value
        return cls._adopt(np.full(dims, exact, dtype=dt.numpy), dt)

    @classmethod
    def scalar(cls, value: Scalar) -> Tensor:
        """A rank-0 tensor holding ``value``."""
        if not isinstance(value, Scalar):
            raise DTypeError(f"Tensor.scalar: expected a Scalar, found {type(value).__name__}")
        return cls.full(value.dtype, (), value)

    @classmethod
    def from_numpy(cls, array: object, dtype: DType | str | None = None) -> Tensor:
        """A copy of a NumPy array (later writes to ``array`` do not show).

        With ``dtype``, values are converted under the ``convert`` rules (exact or
        RangeError). Non-native byte order is converted on copy. Anything but an
        ndarray or NumPy scalar is DTypeError; for a PyTorch tensor or a JAX array the
        message names ``Tensor.from_dlpack``, which takes those.
        """
        hint = foreign_hint(array)
        if hint is not None:
            raise DTypeError(f"from_numpy: expected a numpy.ndarray, found {hint}")
        source = check_numpy_input(array)
        own = DType.from_numpy(source.dtype)
        copied = np.array(source, dtype=own.numpy, order="C", copy=True)
        if own is DType.BOOL:
            # NumPy bools may hold any non-zero byte; store canonical 0/1 bytes so that
            # bytes, text and pickles round-trip.
            copied = copied.view(np.uint8) != 0
        result = cls._adopt(copied, own)
        if dtype is None:
            return result
        return result.convert(as_dtype(dtype))
