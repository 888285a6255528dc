"""Shape: dims arithmetic only (no storage, no limits of its own)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, SupportsIndex

from .errors import IndexingError, ShapeError
from .limits import describe, full_int_text, int_text, to_dim
from .memory import guard_methods

__all__ = ["Shape"]


@guard_methods
class Shape(tuple[int, ...]):
    """An immutable, hashable sequence of non-negative ints, outermost first.

    A ``tuple`` subclass, so ``t.shape == (2, 3)`` holds and NumPy accepts it as a shape.
    Dims must be ints (or have ``__index__``); ``bool``, floats and negatives are
    ShapeError. Shape is pure arithmetic: MAX_RANK and MAX_ELEMENTS apply where tensors
    are made, not here.
    """

    __slots__ = ()

    def __new__(cls, dims: Iterable[SupportsIndex] = ()) -> Shape:
        if isinstance(dims, Shape):
            return dims
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
            raise ShapeError(f"shape must be a sequence of ints, found {type(dims).__name__}")
        values = _listed(dims, "shape", ShapeError)
        return tuple.__new__(cls, [to_dim(d, f"shape[{i}]") for i, d in enumerate(values)])

    @classmethod
    def _trusted(cls, dims: tuple[int, ...]) -> Shape:
        """Wrap dims that are already validated Python ints (no checks: internal use)."""
        return tuple.__new__(cls, dims)

    @classmethod
    def scalar(cls) -> Shape:
        """The rank-0 shape ``[]``."""
        return _SCALAR

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (tuple(self),)

    @property
    def dims(self) -> tuple[int, ...]:
        """The dims as a plain tuple."""
        return tuple(self)

    @property
    def ndim(self) -> int:
        """The rank; 0 for a scalar."""
        return len(self)

    @property
    def numel(self) -> int:
        """The product of the dims: 1 for a scalar, 0 if any dim is 0."""
        product = 1
        for dim in self:
            product *= dim
        return product

    def checked_numel(self, limit: int = 2**63 - 1) -> int | None:
        """The element count, or ``None`` when it exceeds ``limit`` (an int, else ShapeError).

        A scalar shape counts one element, so ``Shape().checked_numel(0)`` is None.
        """
        limit = to_dim(limit, "checked_numel: limit")
        if 0 in self:
            return 0
        product = 1
        for dim in self:
            product *= dim
            if product > limit:
                return None
        return product if product <= limit else None

    def strides(self, order: str = "C") -> tuple[int, ...]:
        """Element strides of a contiguous layout: ``"C"`` row-major, ``"F"`` column-major."""
        dims = _order_dims(self, order)
        result = []
        step = 1
        for dim in reversed(dims):
            result.append(step)
            step *= max(dim, 1)
        result.reverse()
        return tuple(result) if order == "C" else tuple(reversed(result))

    def reshape(self, dims: Iterable[SupportsIndex]) -> Shape:
        """The shape ``dims`` with at most one ``-1`` inferred; element counts must match."""
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
            raise ShapeError(
                f"reshape: shape must be a sequence of ints, found {type(dims).__name__}"
            )
        raw = _listed(dims, "reshape", ShapeError)
        wanted: list[int] = []
        infer_at = -1
        for i, value in enumerate(raw):
            if not isinstance(value, bool) and _is_minus_one(value):
                if infer_at >= 0:
                    raise ShapeError(f"reshape: at most one -1 is allowed, found {_text(raw)}")
                infer_at = i
                wanted.append(1)
            else:
                wanted.append(to_dim(value, f"reshape: dim {i}"))
        known = 1
        for dim in wanted:
            known *= dim
        total = self.numel
        if infer_at >= 0:
            if known == 0 or total % known:
                raise ShapeError(
                    f"reshape: {int_text(total)} elements cannot become shape {_text(raw)}"
                )
            wanted[infer_at] = total // known
        elif known != total:
            raise ShapeError(
                f"reshape: {int_text(total)} elements cannot become shape {_text(wanted)} "
                f"({int_text(known)} elements)"
            )
        return Shape._trusted(tuple(wanted))

    def broadcast(self, other: Iterable[SupportsIndex]) -> Shape:
        """NumPy's broadcast of two shapes (align right; equal, or 1; missing counts as 1)."""
        right = Shape(other)
        rank = max(len(self), len(right))
        left_dims = (1,) * (rank - len(self)) + tuple(self)
        right_dims = (1,) * (rank - len(right)) + tuple(right)
        result = []
        for a, b in zip(left_dims, right_dims, strict=True):
            if a == b or b == 1:
                result.append(a)
            elif a == 1:
                result.append(b)
            else:
                raise ShapeError(
                    f"shapes {_text(self)} and {_text(right)} cannot be broadcast together"
                )
        return Shape._trusted(tuple(result))

    def unravel(self, flat_index: SupportsIndex, order: str = "C") -> tuple[int, ...]:
        """The multi-index of ``flat_index`` (bounds-checked)."""
        index = _as_index(flat_index, "unravel: flat index")
        total = self.numel
        if not 0 <= index < total:
            raise IndexingError(
                f"unravel: flat index {int_text(index)} out of range for {int_text(total)} elements"
            )
        strides = self.strides(order)
        result = []
        for stride, dim in zip(strides, self, strict=True):
            result.append((index // stride) % dim)
        return tuple(result)

    def ravel(self, multi_index: Iterable[SupportsIndex], order: str = "C") -> int:
        """The flat index of ``multi_index`` (bounds-checked; negatives are errors)."""
        if not isinstance(multi_index, Iterable):
            raise IndexingError(f"ravel: expected a sequence of {len(self)} ints")
        items = _listed(multi_index, "ravel", IndexingError)
        indices = [_as_index(i, "ravel: index") for i in items]
        if len(indices) != len(self):
            raise IndexingError(f"ravel: expected {len(self)} indices, found {len(indices)}")
        flat = 0
        for axis, (index, dim, stride) in enumerate(
            zip(indices, self, self.strides(order), strict=True)
        ):
            if not 0 <= index < dim:
                raise IndexingError(
                    f"ravel: index {int_text(index)} out of range for axis {axis} of size "
                    f"{int_text(dim)}"
                )
            flat += index * stride
        return flat

    def __str__(self) -> str:
        """``[2, 3]``: every dim in full (error messages shorten dims past 64 bits)."""
        return "[" + ", ".join(map(full_int_text, self)) + "]"

    def __repr__(self) -> str:
        return f"Shape({self})"


_SCALAR = Shape._trusted(())


def _text(dims: Iterable[object]) -> str:
    """Dims for an error message: ints past 64 bits are shortened to ``<N-bit int>``."""
    return "[" + ", ".join(describe(d) for d in dims) + "]"


def _listed(values: object, what: str, error: type[Exception]) -> list[Any]:
    """``list(values)``, turning a hostile iterator's own exception into ``error``."""
    try:
        return list(values)  # type: ignore[call-overload, no-any-return]
    except Exception as found:
        raise error(f"{what}: cannot read the values ({type(found).__name__})") from None


def _order_dims(shape: Shape, order: str) -> tuple[int, ...]:
    if order == "C":
        return tuple(shape)
    if order == "F":
        return tuple(reversed(shape))
    raise ShapeError(f"order must be 'C' or 'F', found {order!r}")


def _is_minus_one(value: object) -> bool:
    try:
        return int(value.__index__()) == -1  # type: ignore[attr-defined]
    except Exception:
        return False


def _as_index(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise IndexingError(f"{what} must be an int, found bool")
    try:
        return int(value.__index__())  # type: ignore[attr-defined]
    except Exception:
        raise IndexingError(f"{what} must be an int, found {type(value).__name__}") from None
