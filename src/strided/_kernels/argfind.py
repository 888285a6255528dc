"""argmin and argmax of a large read-only array, a block at a time.

NumPy's argmin/argmax copy a read-only input whole before searching it (they want a
writable C-contiguous array), and tensor arrays are always read-only: on a 16 MiB
tensor that copy, into freshly faulted pages, costs three times the search. Searching
blocks of about ``BLOCK_BYTES`` instead keeps each copy in cache. The result is exactly
NumPy's: the first index of the extreme, and the first NaN wins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["arg_extreme"]

BLOCK_BYTES = 1 << 19  # an L2-sized block; arrays up to twice this are searched whole


def arg_extreme(find: Any, array: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    """``find(array, axis=axis, keepdims=keepdims)`` for ``find`` np.argmin or np.argmax.

    ``array`` is not empty along ``axis`` (the caller refuses that). Copies only
    blocks of ``array``; returns a new intp array (rank 0 for ``axis`` None).
    """
    if array.nbytes <= 2 * BLOCK_BYTES:
        return np.asarray(find(array, axis=axis, keepdims=keepdims))
    if axis is None:
        return _flat(find, array, keepdims)
    split = next((d for d in range(array.ndim) if d != axis and array.shape[d] > 1), None)
    if split is None:  # every other axis has length 1: the search is one long row
        return np.asarray(find(array, axis=axis, keepdims=keepdims))
    count = max(BLOCK_BYTES * array.shape[split] // array.nbytes, 1)
    lead = (slice(None),) * split
    pieces = [
        find(array[(*lead, slice(start, start + count))], axis=axis, keepdims=True)
        for start in range(0, array.shape[split], count)
    ]
    found = np.concatenate(pieces, axis=split)
    return found if keepdims else np.squeeze(found, axis=axis)


def _flat(find: Any, array: np.ndarray, keepdims: bool) -> np.ndarray:
    """The flat (row-major) index of the extreme, one block of the flat array at a time."""
    if not array.flags.c_contiguous:  # flattening copies anyway
        return np.asarray(find(array, axis=None, keepdims=keepdims))
    flat = array.reshape(-1)
    step = max(BLOCK_BYTES // array.itemsize, 1)
    larger = find is np.argmax
    best_index, best = 0, None
    for start in range(0, flat.size, step):
        block = flat[start : start + step]
        index = int(find(block))
        value = block[index]
        if value != value:  # a NaN: the first one wins, and no later block can be earlier
            best_index = start + index
            break
        if best is None or (value > best if larger else value < best):  # ties: earliest
            best_index, best = start + index, value
    found = np.array(best_index, dtype=np.intp)
    return found.reshape((1,) * array.ndim) if keepdims else found
