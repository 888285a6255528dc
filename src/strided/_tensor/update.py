"""Tensor methods for functional updates: ``with_slice``, ``with_index_path`` and ``.at``.

A tensor never changes, so "assigning" builds a new one: the source is copied once into
fresh C-contiguous memory, the selection is found on that copy with the same index
parser that serves ``t[...]`` (``_core.indexing``), and the replacement is written into it.
Everything that can fail (the index, the replacement's dtype, value and shape) is
checked against the source *before* the copy is made, so an error costs no allocation
and, like every error, changes nothing.

Overlap needs no care: the replacement is read from its own storage, which is immutable,
while the writes go to the fresh copy, which nothing else can see yet. So
``t.with_slice(slice(1, None), t[:-1])`` equals NumPy's result when the right-hand side
is copied first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .._core import indexing as _indexing
from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, IndexingError, LimitError, ShapeError
from .._core.limits import MAX_RANK
from .._core.memory import guard_methods
from .._core.scalar import Scalar
from .base import TensorInternals

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["AtIndexer", "AtUpdate", "UpdateMethods"]


class UpdateMethods(TensorInternals):
    """Mixin of Tensor: functional updates (with_slice, with_index_path, .at)."""

    __slots__ = ()

    def with_slice(self, index: object, replacement: object) -> Tensor:
        """A new contiguous tensor equal to this one with ``self[index]`` replaced.

        ``index`` is any basic index ``t[index]`` accepts (IndexingError otherwise).
        ``replacement`` is a Tensor of the same dtype (DTypeError otherwise) or a
        scalar-like (Python number, string, Scalar) converted exactly as
        ``Scalar(dtype, value)`` (RangeError / FormatError / DTypeError as that raises).
        It broadcasts into exactly the selection's shape as NumPy assignment does:
        trailing axes align, size-1 axes stretch, extra leading size-1 axes are dropped;
        it can never grow the selection (ShapeError). A rank-0 replacement fills it.

        The result never shares storage with either input; the source is copied once.
        The replacement may be a view of the source's own storage (overlap is safe).
        """
        key = _indexing.normalize(index)
        return _update(cast("Tensor", self), (key,), replacement, "with_slice")

    def with_index_path(self, path: Sequence[object], replacement: object) -> Tensor:
        """``with_slice`` through successive indices: replace ``self[a][b][c]`` for ``[a, b, c]``.

        ``path`` is a list (or tuple) of index expressions; each applies to the view the
        previous one selected, exactly as chained ``t[a][b][c]`` reads do, and they are
        composed into one selection of one fresh copy of the payload (also when the
        source is a non-contiguous view). An empty path selects the whole tensor. A path
        longer than MAX_RANK is LimitError; a path that is not a list or tuple is
        IndexingError. ``replacement`` follows the ``with_slice`` rules.
        """
        if not isinstance(path, (list, tuple)):
            raise IndexingError(
                f"with_index_path: path must be a list of index expressions, "
                f"found {type(path).__name__}"
            )
        if len(path) > MAX_RANK:
            raise LimitError(
                f"with_index_path: path of {len(path)} steps exceeds MAX_RANK ({MAX_RANK})"
            )
        keys = tuple(_indexing.normalize(step) for step in path)
        return _update(cast("Tensor", self), keys, replacement, "with_index_path")

    @property
    def at(self) -> AtIndexer:
        """Functional updates in JAX's spelling: ``t.at[index].set(value)``.

        ``t.at[index].set(value)`` is ``t.with_slice(index, value)``: it returns a new
        tensor and ``t`` is unchanged. NumPy's in-place assignments map to it like this:

        ====================  ==========================================
        NumPy (in place)      strided (returns a new tensor)
        ====================  ==========================================
        ``x[i] = v``          ``x = x.at[i].set(v)``
        ``x[i, j] = v``       ``x = x.at[i, j].set(v)``
        ``x[1:3] = 0``        ``x = x.at[1:3].set(0)``
        ``x[::-1] = y``       ``x = x.at[::-1].set(y)``
        ``x[..., 0] = "1.5"`` ``x = x.at[..., 0].set("1.5")``
        ``x[a][b] = v``       ``x = x.with_index_path([a, b], v)``
        ====================  ==========================================

        >>> import strided as st
        >>> x = st.tensor([[1, 2], [3, 4]], "I32")
        >>> y = x.at[0].set(st.tensor([7, 8], "I32"))
        >>> y.tolist(), x.tolist()
        ([[7, 8], [3, 4]], [[1, 2], [3, 4]])
        >>> x.at[:, 1].set(0).tolist()
        [[1, 0], [3, 0]]

        The index is validated when subscripted (IndexingError), the replacement when
        ``set`` is called; the errors are those of ``with_slice``.
        """
        return AtIndexer(cast("Tensor", self))


@guard_methods
class AtIndexer:
    """``t.at``: subscript it with a basic index to get an ``AtUpdate``."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self._tensor = tensor

    def __getitem__(self, index: object) -> AtUpdate:
        key = _indexing.normalize(index)
        # Validate now, so t.at[bad] fails where it is written; set() reuses the view.
        selected = _indexing.apply(self._tensor._array, key)
        return AtUpdate(self._tensor, key, selected)

    def __repr__(self) -> str:
        return f"<at indexer of a {self._tensor.dtype.name} tensor of shape {self._tensor.shape}>"


@guard_methods
class AtUpdate:
    """``t.at[index]``: a pending functional update; ``set`` builds the new tensor."""

    __slots__ = ("_key", "_selected", "_tensor")

    def __init__(self, tensor: Tensor, key: tuple[Any, ...], selected: np.ndarray) -> None:
        self._tensor = tensor
        self._key = key
        self._selected = selected

    def set(self, replacement: object) -> Tensor:
        """A new tensor with the selection replaced; the same as ``t.with_slice(index, v)``."""
        return _update(self._tensor, (self._key,), replacement, "at[...].set", self._selected)

    def __repr__(self) -> str:
        shape = self._tensor.shape
        return f"<pending update of a {self._tensor.dtype.name} tensor of shape {shape}>"


def _update(
    source: Tensor,
    keys: tuple[tuple[Any, ...], ...],
    replacement: object,
    op: str,
    selected: np.ndarray | None = None,
) -> Tensor:
    """Copy ``source`` once and write ``replacement`` into ``source[k0][k1]...``.

    ``selected`` is that selection on the source when the caller already applied the
    keys (``.at``); either way every check runs before the copy is made.
    """
    array = source._array
    dtype = source._dtype
    if selected is None:
        selected = array
        for key in keys:
            selected = _indexing.apply(selected, key)
    values = _replacement_array(replacement, dtype, op)
    _check_fits(values.shape, selected.shape, op)
    result = array.copy()  # C order and owns its data: the one copy of the payload
    target = result
    for key in keys:
        target = target[key]  # cannot fail: the same keys passed on the same shape above
    # Same dtype, so this is a plain element copy; ``values`` lives in other memory.
    target[...] = values
    return type(source)._adopt(result, dtype)


def _replacement_array(replacement: object, dtype: DType, op: str) -> np.ndarray:
    # Every Tensor is an UpdateMethods; testing the mixin avoids a circular import.
    if isinstance(replacement, UpdateMethods):
        found = replacement._dtype
        if found is not dtype:
            raise DTypeError(
                f"{op}: replacement is {found.name} but the tensor is {dtype.name}; "
                f"convert it first"
            )
        return replacement._array
    if isinstance(replacement, (list, tuple, np.ndarray)):
        raise DTypeError(
            f"{op}: replacement must be a Tensor or a scalar, found {type(replacement).__name__}"
            f" (wrap it with st.tensor(values, {dtype.name!r}))"
        )
    try:
        value = Scalar(dtype, replacement).value
    except DataError as error:
        raise type(error)(f"{op}: replacement {error}") from None
    return np.array(value, dtype=dtype.numpy)


def _check_fits(have: tuple[int, ...], want: tuple[int, ...], op: str) -> None:
    """NumPy's assignment rule: ``have`` broadcasts into ``want`` without growing it."""
    if have == want or not have:  # the common cases: same shape, or a scalar fill
        return
    extra = len(have) - len(want)
    fits = extra <= 0 or all(dim == 1 for dim in have[:extra])
    if fits:
        trailing = have[extra:] if extra > 0 else have
        fits = all(h in (1, w) for h, w in zip(trailing[::-1], want[::-1], strict=False))
    if not fits:
        raise ShapeError(
            f"{op}: replacement of shape {list(have)} cannot broadcast into the "
            f"selection of shape {list(want)}"
        )
