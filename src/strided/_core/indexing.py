"""One parser of index expressions, used by reads (``t[...]``) and updates alike.

``normalize`` turns a user index into a tuple that NumPy applies as *basic* indexing
only: ints, slices, ``None`` and at most one ``...``. Anything NumPy would treat as
advanced indexing (bools, lists, arrays) is refused up front, because those copy and
because a bool would silently become a mask. The returned tuple always contains an
Ellipsis, so even all-int indices give a rank-0 *view* rather than a NumPy scalar.
"""

from __future__ import annotations

import operator
from types import EllipsisType
from typing import Any

import numpy as np

from .errors import IndexingError, LimitError
from .limits import MAX_RANK, int_text

__all__ = ["apply", "normalize", "normalize_axis"]

_PLAIN = (int, slice, type(None), EllipsisType)


def normalize(index: object) -> tuple[Any, ...]:
    """Validate ``index`` and return it as a NumPy basic-index tuple ending in ``...``.

    The trailing Ellipsis is only added when the index has none; a second Ellipsis in
    the caller's index is left for NumPy to reject (IndexingError via ``apply``).
    """
    items = index if type(index) is tuple else (index,)
    has_ellipsis = False
    for item in items:
        kind = type(item)
        if kind is int or kind is slice or item is None:
            continue
        if item is Ellipsis:
            has_ellipsis = True
            continue
        # Rare kinds take the slow path: NumPy ints, objects with __index__, or junk.
        return _normalize_slow(items)
    return items if has_ellipsis else (*items, Ellipsis)


def _normalize_slow(items: tuple[object, ...]) -> tuple[Any, ...]:
    result: list[Any] = []
    for item in items:
        if isinstance(item, _PLAIN) and not isinstance(item, bool):
            result.append(item)
        elif isinstance(item, (bool, np.bool_)):
            raise IndexingError(
                f"index: bools are not indices (found {item!r}); use ints or slices"
            )
        elif isinstance(item, (list, tuple, np.ndarray, str, bytes, dict, set)):
            raise IndexingError(
                f"index: only ints, slices, None and ... are supported, found {type(item).__name__}"
            )
        else:
            try:
                result.append(operator.index(item))  # type: ignore[arg-type]
            except Exception:
                raise IndexingError(
                    f"index: only ints, slices, None and ... are supported, "
                    f"found {type(item).__name__}"
                ) from None
    if Ellipsis not in result:
        result.append(Ellipsis)
    return tuple(result)


def apply(array: np.ndarray, key: tuple[Any, ...]) -> np.ndarray:
    """Apply a normalized key to a NumPy array, translating NumPy's errors."""
    try:
        view = array[key]
    except Exception as error:  # slices may hold objects whose __index__ raises anything
        new_axes = sum(1 for item in key if item is None)
        if array.ndim + new_axes > MAX_RANK:
            raise LimitError(f"index: result would exceed MAX_RANK ({MAX_RANK})") from None
        raise IndexingError(f"index {_describe(key)}: {error}") from None
    if view.ndim > MAX_RANK:
        raise LimitError(f"index: result rank {view.ndim} exceeds MAX_RANK ({MAX_RANK})")
    return view  # type: ignore[no-any-return]


def _describe(key: tuple[Any, ...]) -> str:
    try:
        parts = [_item_text(item) for item in key]
    except Exception:  # a hostile __repr__ must not replace our error with its own
        return "(unprintable)"
    if parts and parts[-1] == "..." and key.count(Ellipsis) == 1:
        parts.pop()
    text = "[" + ", ".join(parts) + "]"
    return text if len(text) <= 80 else text[:77] + "..."


def _item_text(item: object) -> str:
    if item is Ellipsis:
        return "..."
    if isinstance(item, slice):
        start = "" if item.start is None else str(item.start)
        stop = "" if item.stop is None else str(item.stop)
        return f"{start}:{stop}" + ("" if item.step is None else f":{item.step}")
    return repr(item)


def normalize_axis(axis: object, ndim: int, what: str) -> int:
    """``axis`` as a non-negative int below ``ndim`` (negatives count from the end)."""
    if isinstance(axis, (bool, np.bool_)):
        raise IndexingError(f"{what}: axis must be an int, found bool")
    try:
        value = operator.index(axis)  # type: ignore[arg-type]
    except Exception:  # a hostile __index__ may raise anything
        raise IndexingError(f"{what}: axis must be an int, found {type(axis).__name__}") from None
    if not -ndim <= value < ndim:
        raise IndexingError(f"{what}: axis {int_text(value)} is out of range for rank {ndim}")
    return value % ndim if ndim else value
