"""A tensor's logical row-major elements as a stream of bounded 1-D pieces.

Whole-tensor jobs (digests, exact statistics, comparisons, copies) read every element
in logical row-major order without ever holding a second full copy: memory that is
already C-contiguous is handed out as views (any length), while strided views
(transposed, reversed, Fortran-order) are copied ``max_bytes`` at a time. A range
``[start, stop)`` of flat logical positions can be asked for, so a large tensor can be
split into chunks that separate processes read independently.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["PIECE_BYTES", "VIEW_BYTES", "pieces"]

# Copies of strided memory are at most this big.
PIECE_BYTES = 1 << 22
# Views of contiguous memory are handed out in steps of this size (no copy is made;
# the bound only keeps progress reports and per-piece temporaries of callers regular).
VIEW_BYTES = 1 << 26


def pieces(
    array: np.ndarray[Any, Any],
    start: int = 0,
    stop: int | None = None,
    max_bytes: int = PIECE_BYTES,
    view_bytes: int = VIEW_BYTES,
) -> Iterator[np.ndarray[Any, Any]]:
    """The flat logical elements ``[start, stop)`` of ``array``, as 1-D pieces in order.

    Pieces of contiguous memory are read-only views of at most ``view_bytes``; pieces
    of strided memory are fresh contiguous copies of at most ``max_bytes`` (one element
    at least). Concatenated, the pieces equal ``array.reshape(-1)[start:stop]``.
    """
    size = int(array.size)
    stop = size if stop is None else min(stop, size)
    if start >= stop:
        return
    if array.ndim == 0:
        array = array.reshape(1)
    itemsize = max(array.itemsize, 1)
    if array.flags.c_contiguous:
        flat = array.reshape(-1)
        step = max(view_bytes // itemsize, 1)
        for begin in range(start, stop, step):
            yield flat[begin : min(begin + step, stop)]
        return
    yield from _strided(array, start, stop, max(max_bytes // itemsize, 1), view_bytes)


def _strided(
    array: np.ndarray[Any, Any], start: int, stop: int, limit: int, view_bytes: int
) -> Iterator[np.ndarray[Any, Any]]:
    """Pieces of a non-contiguous array of rank >= 1, at most ``limit`` elements each."""
    if array.ndim == 1:
        for begin in range(start, stop, limit):
            yield np.ascontiguousarray(array[begin : min(begin + limit, stop)])
        return
    inner = array.size // array.shape[0]
    rows_per_piece = limit // inner
    row = start // inner
    last = (stop - 1) // inner
    while row <= last:
        low = max(start - row * inner, 0)
        high = min(stop - row * inner, inner)
        if low == 0 and high == inner and rows_per_piece > 1:
            # A run of whole rows, copied together.
            end = min(row + rows_per_piece, stop // inner)
            yield np.ascontiguousarray(array[row:end]).reshape(-1)
            row = end
            continue
        # A partial row, or rows too long for one piece: descend into the row.
        yield from pieces(array[row], low, high, limit * array.itemsize, view_bytes)
        row += 1
