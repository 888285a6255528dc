"""The base of Tensor and its method mixins: their shared private surface, declared once
for type checkers, and the MemoryError guard every public method gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.memory import guard_methods

if TYPE_CHECKING:
    import numpy as np

    from .._core.dtype import DType
    from .tensor import Tensor

__all__ = ["TensorInternals"]


class TensorInternals:
    """Base of Tensor's mixins: to mypy, Tensor's private surface; at run time, the one
    place that guards every public method of Tensor and its mixins against MemoryError
    (``_core.memory.guard_methods``: it becomes LimitError)."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        guard_methods(cls)

    if TYPE_CHECKING:
        _array: np.ndarray

        @property
        def _dtype(self) -> DType: ...

        @classmethod
        def _adopt(cls, array: np.ndarray, dtype: DType) -> Tensor: ...

        @classmethod
        def _wrap(cls, array: np.ndarray) -> Tensor: ...

        @classmethod
        def _adopt_flat(cls, flat: np.ndarray, dims: tuple[int, ...]) -> Tensor: ...
