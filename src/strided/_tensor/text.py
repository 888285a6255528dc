"""Tensor methods for canonical text: to_dict/to_json/from_dict/from_json, str and repr.

Printing follows NumPy's nested layout with each element's canonical ``Scalar`` text.
Past ``_SUMMARY_THRESHOLD`` elements an axis longer than ``2 * _EDGE_ITEMS`` shows its
first and last ``_EDGE_ITEMS`` entries around ``...``; at high rank even those edges
can be many (6**k), so outer axes are thinned to one entry each side, then one, until
at most ``_PRINT_BUDGET`` elements remain. Only the printed elements are read (one
gather through the view's strides), so printing costs the same for any size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._kernels import json_doc as _json
from .._kernels.bulk_format import format_flat
from .base import TensorInternals

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["TextMethods"]

_SUMMARY_THRESHOLD = 1000
_EDGE_ITEMS = 3
_PRINT_BUDGET = 4096


class TextMethods(TensorInternals):
    """Mixin of Tensor: canonical text: to_dict/to_json/from_dict/from_json, str and repr."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """``{"dtype": "I16", "shape": [2, 3], "data": ["0", ...]}``, keys in that order.

        ``data`` is flat, in logical row-major order (views included), each entry the
        canonical ``str`` of the element's Scalar (floats: the shortest text that reads
        back to the same value in the dtype; ``nan``, ``inf``, ``-0.0`` spelled out).
        """
        array = self._array
        return _json.document(self._dtype, array.reshape(-1), array.shape)

    def to_json(self) -> str:
        """``to_dict()`` as compact JSON text, with no spaces.

        ``Tensor.from_json(t.to_json()) == t`` bit for bit, every NaN read back as the
        one quiet NaN.
        """
        array = self._array
        return _json.dumps(self._dtype, array.reshape(-1), array.shape)

    @classmethod
    def from_dict(cls, obj: object) -> Tensor:
        """Build a tensor from ``to_dict``'s form, strictly.

        Exactly the keys ``dtype``, ``shape`` and ``data``. ``dtype``: the canonical name
        as ``to_json`` writes it (``"I16"``, not ``"int16"``), else DTypeError. ``shape``:
        a list of non-negative ``int`` (no bool, float or str: ShapeError; beyond
        MAX_RANK or MAX_ELEMENTS: LimitError), checked before anything is sized.
        ``data``: a list of exactly ``numel`` strings (its length is checked before any
        entry is converted), each parsed as by ``Scalar.parse``: a number instead of a
        string or malformed text is FormatError, a value that does not fit the dtype
        RangeError, too many digits LimitError, each naming the entry's index. Other
        problems (not a dict, missing or extra keys) are FormatError.
        """
        dtype, dims, flat = _json.from_document(obj)
        return cls._wrap(cls._adopt(flat, dtype)._array.reshape(dims))

    @classmethod
    def from_json(cls, text: str | bytes) -> Tensor:
        """Build a tensor from ``to_json``'s text (``str`` or UTF-8 ``bytes``), strictly.

        The rules of ``from_dict``, plus: the text must be JSON (FormatError otherwise);
        bytes must be valid UTF-8; a repeated key is an error, not last-wins; ``NaN``
        and ``Infinity`` tokens are not JSON; more than 64 ``[``/``{`` is refused before
        parsing (a tensor document has three), so nesting never recurses. Work and
        memory are bounded by the text's length, whatever shape it claims.
        """
        dtype, dims, flat = _json.loads(text)
        return cls._wrap(cls._adopt(flat, dtype)._array.reshape(dims))

    def __repr__(self) -> str:
        array = self._array
        dims = ", ".join(map(str, array.shape))
        data = _layout(array, self._dtype, False)
        return f"Tensor(dtype={self._dtype.name}, shape=[{dims}], data={data})"

    def __str__(self) -> str:
        """NumPy's ``str`` layout with canonical texts: ``[[0 0 0]\\n [0 0 3]]``.

        Elements are right-aligned to the widest printed text; rows are not wrapped at
        a line width (NumPy's are). BOOL prints ``true``/``false``.
        """
        return _layout(self._array, self._dtype, True)


# -- printing ------------------------------------------------------------------------


def _layout(array: np.ndarray, dtype: DType, aligned: bool) -> str:
    if array.size == 0:
        return "[]"
    if array.ndim == 0:
        return format_flat(array.reshape(1), dtype)
    plan = _plan(array.shape, array.size > _SUMMARY_THRESHOLD)
    picks = [
        np.concatenate((np.arange(head), np.arange(dim - tail, dim)))
        for (head, tail), dim in zip(plan, array.shape, strict=True)
    ]
    # Fancy indexing with an open mesh reads exactly the printed elements.
    printed = array[np.ix_(*picks)]
    texts = format_flat(printed.reshape(-1), dtype).split(",")
    if aligned:
        width = max(map(len, texts))
        texts = [text.rjust(width) for text in texts]
    cells = np.empty(len(texts), dtype=object)
    cells[:] = texts
    return _nest(cells.reshape(printed.shape), plan, array.shape, 0, aligned)


def _plan(dims: tuple[int, ...], summarize: bool) -> list[tuple[int, int]]:
    """Per axis (head, tail): how many entries print at each end; fewer than the dim
    means an ellipsis between them."""
    plan = [
        (_EDGE_ITEMS, _EDGE_ITEMS) if summarize and dim > 2 * _EDGE_ITEMS else (dim, 0)
        for dim in dims
    ]
    axis = 0
    while axis < len(plan) and _count(plan) > _PRINT_BUDGET:
        shown = sum(plan[axis])
        if shown > 2:
            plan[axis] = (1, 1)
        elif shown == 2:
            plan[axis] = (1, 0)
        else:
            axis += 1
    return plan


def _count(plan: list[tuple[int, int]]) -> int:
    total = 1
    for head, tail in plan:
        total *= head + tail
    return total


def _nest(
    cells: np.ndarray, plan: list[tuple[int, int]], dims: tuple[int, ...], axis: int, aligned: bool
) -> str:
    head, tail = plan[axis]
    last = axis == len(dims) - 1
    if last:
        items = [str(cell) for cell in cells.tolist()]
    else:
        items = [_nest(child, plan, dims, axis + 1, aligned) for child in cells]
    if head + tail < dims[axis]:
        items.insert(head, "...")
    if not aligned:
        return "[" + ", ".join(items) + "]"
    if last:
        return "[" + " ".join(items) + "]"
    separator = "\n" * (len(dims) - axis - 1) + " " * (axis + 1)
    return "[" + separator.join(items) + "]"
