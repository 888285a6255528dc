"""The part of Tensor its method mixins rely on, declared once for type checkers."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from ._dtype import DType
    from ._tensor import Tensor

__all__ = ["TensorInternals"]


class TensorInternals:
    """Base of Tensor's mixins: at run time empty; to mypy, Tensor's private surface."""

    __slots__ = ()

    if TYPE_CHECKING:
        _array: np.ndarray

        @property
        def _dtype(self) -> DType: ...

        @classmethod
        def _adopt(cls, array: np.ndarray, dtype: DType) -> Tensor: ...

        @classmethod
        def _wrap(cls, array: np.ndarray) -> Tensor: ...
