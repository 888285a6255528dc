"""Nested Python lists into storage: shape first, then allocation, then the values.

The shape is read from the first element of each level (a cheap walk, however large the
list), checked against the limits and allocated before any element is converted, so a
list too large for memory fails at once with a LimitError naming its size instead of
after a walk over every leaf (``[[0.0] * 2**16] * 2**17`` holds 2**33 leaves through
shared rows). Filling then walks every container, checking that each is a list or tuple
of the length the shape says (a ragged list is a ShapeError naming the index of the
first container, or value, that does not fit), and converts the values in blocks of
about ``BLOCK`` elements, in row-major order, so the temporaries of a conversion stay
small whatever the size of the result.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import LimitError, ShapeError
from .._core.limits import MAX_RANK, check_dims, describe
from .construct import BLOCK, allocate, bulk_numbers, exact_values, leaf_types

__all__ = ["blocks", "check_values", "probe_shape", "row_blocks", "storage_from_nested"]

_CONTAINERS = (list, tuple)
_EXACT_CONTAINERS = frozenset({list, tuple})
_MISSING = object()


def probe_shape(values: object, what: str = "tensor") -> tuple[int, ...]:
    """The shape nested lists claim, read from the first element of each level.

    Lists and tuples (and their subclasses) nest; anything else is a value. The first
    element is taken as iteration gives it. Nesting deeper than MAX_RANK is LimitError;
    the shape is checked against MAX_ELEMENTS (LimitError). Nothing else is verified here:
    ``row_blocks`` checks every container against the shape.
    """
    dims: list[int] = []
    item = values
    while isinstance(item, _CONTAINERS):
        if len(dims) >= MAX_RANK:
            raise LimitError(f"{what}: nesting deeper than MAX_RANK ({MAX_RANK})")
        dims.append(len(item))
        if not dims[-1]:
            break  # an empty level: nothing below it, so the shape ends here
        item = next(iter(item), _MISSING)
        if item is _MISSING:
            raise ShapeError(
                f"{what}: ragged nesting at {[0] * (len(dims) - 1)}: "
                f"len() says {dims[-1]} items but iteration gives none"
            )
    return check_dims(dims, what)


def row_blocks(values: object, dims: tuple[int, ...], what: str = "tensor") -> Iterator[list[Any]]:
    """The innermost containers of ``values``, in row-major order, in lists (blocks).

    Every container on the way is checked against ``dims`` (ShapeError naming its index
    when it is not a list or tuple, or has another length); the rows handed out are exact
    lists or tuples of ``dims[-1]`` items (a subclass is replaced by the list its
    iteration gives). The values inside the rows are not checked. ``dims`` has rank >= 1
    and is what ``probe_shape`` read from ``values``.
    """
    rank = len(dims)
    if rank == 1:
        yield _rows([values], 0, dims, what)
        return
    if rank == 2:
        yield _rows(_items(values, dims, [], what), 0, dims, what)
        return
    # A stack of [items of a container, index of the next item], for the containers at
    # depth 0 .. rank - 3: the items of the deepest ones are the parents of rows.
    stack: list[list[Any]] = [[_items(values, dims, [], what), 0]]
    row = 0  # the flat row number of the next row
    while stack:
        frame = stack[-1]
        items, index = frame
        if index == len(items):
            stack.pop()
            continue
        frame[1] = index + 1
        depth = len(stack)  # of the child
        child = items[index]
        want = dims[depth]
        if type(child) not in _EXACT_CONTAINERS or len(child) != want:
            child = _items(child, dims, [entry[1] - 1 for entry in stack], what)
        if depth < rank - 2:
            stack.append([child, 0])
            continue
        yield _rows(child, row, dims, what)
        row += want


def blocks(values: object, dims: tuple[int, ...], what: str) -> Iterator[tuple[int, list[Any]]]:
    """``row_blocks`` regrouped into blocks of ``BLOCK // width`` rows (at least one).

    Yields ``(start, rows)``: the flat index of the block's first element and its rows,
    so a conversion's temporaries are bounded by the block, not by the tensor. Nothing is
    yielded for a shape without elements (its containers are still checked).
    """
    width = dims[-1]
    per = max(1, BLOCK // width) if width else 0
    pending: list[Any] = []  # fewer than ``per`` rows, not yet handed out
    start = 0
    for rows in row_blocks(values, dims, what):
        if not width:
            continue
        taken = 0
        if pending:
            taken = per - len(pending)
            pending += rows[:taken]
            if len(pending) < per:
                continue
            yield start, pending
            start += per * width
        while len(rows) - taken >= per:
            yield start, rows[taken : taken + per]
            start += per * width
            taken += per
        pending = rows[taken:]
    if pending:
        yield start, pending


def check_values(rows: list[Any], start: int, dims: tuple[int, ...], what: str) -> None:
    """ShapeError naming the first value in ``rows`` that is a list or tuple (nested
    deeper than the shape); ``start`` is the flat index of the first one."""
    width = dims[-1]
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            if isinstance(value, _CONTAINERS):
                raise ShapeError(
                    f"{what}: ragged nesting at {_where(start + r * width + c, dims)}: "
                    f"expected a value (shape {list(dims)}), found a {type(value).__name__}"
                )


def storage_from_nested(dtype: DType, values: object) -> tuple[tuple[int, ...], np.ndarray]:
    """The shape of nested lists ``values`` and a fresh flat array of their values, each
    converted as ``Scalar(dtype, v)``.

    Raises LimitError (too deep, too many elements, or more memory than can be
    allocated: all before any value is converted), ShapeError (ragged, naming the first
    offending index), and the error ``Scalar(dtype, v)`` raises for the first value, in
    row-major order, that does not convert. Values are converted in blocks in
    row-major order and checks happen as the walk reaches them, so when a list is both
    ragged and holds a bad value, the problem met first is the one raised.
    """
    dims = probe_shape(values)
    out = allocate(dtype, dims, "tensor")
    if not dims:
        out[:] = exact_values(dtype, [values])
        return dims, out
    for start, rows in blocks(values, dims, "tensor"):
        count = len(rows) * dims[-1]
        types = leaf_types(rows)
        block = None if types is None else bulk_numbers(dtype, rows, types, count)
        if block is None:
            check_values(rows, start, dims, "tensor")
            block = exact_values(dtype, [value for row in rows for value in row])
        out[start : start + count] = block
    return dims, out


def _items(container: object, dims: tuple[int, ...], path: list[int], what: str) -> Any:
    """The items of the container at ``path``: a list or tuple of ``dims[len(path)]``."""
    want = dims[len(path)]
    if not isinstance(container, _CONTAINERS):
        raise ShapeError(
            f"{what}: ragged nesting at {path}: expected a list of {want} (shape "
            f"{list(dims)}), found {type(container).__name__} {describe(container)}"
        )
    items = container if type(container) in _EXACT_CONTAINERS else list(container)
    if len(items) != want:
        raise ShapeError(
            f"{what}: ragged nesting at {path}: expected a list of {want} (shape "
            f"{list(dims)}), found a {type(container).__name__} of {len(items)}"
        )
    return items


def _rows(rows: Any, first: int, dims: tuple[int, ...], what: str) -> list[Any]:
    """``rows`` checked as rows of ``dims[-1]`` (``first``: the flat row number of rows[0])."""
    if set(map(type, rows)) <= _EXACT_CONTAINERS and set(map(len, rows)) <= {dims[-1]}:
        return rows if type(rows) is list else list(rows)  # the common case, checked in C
    return [_items(row, dims, _where(first + r, dims[:-1]), what) for r, row in enumerate(rows)]


def _where(flat: int, dims: tuple[int, ...]) -> list[int]:
    """The multi-index of flat position ``flat`` in ``dims`` (``[]`` for no dims)."""
    return [int(i) for i in np.unravel_index(flat, dims)] if dims else []
