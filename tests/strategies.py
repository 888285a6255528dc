"""Hypothesis strategies shared by the test modules: shapes, dtypes, values and indices."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as hs

import strided as st

ALL_DTYPES = list(st.DType)
COMPUTE_DTYPES = [d for d in st.DType if not d.is_storage_only]


def shapes(
    min_rank: int = 0, max_rank: int = 4, max_dim: int = 5
) -> hs.SearchStrategy[tuple[int, ...]]:
    """Shapes of rank ``min_rank..max_rank`` with dims ``0..max_dim``."""
    return hs.lists(hs.integers(0, max_dim), min_size=min_rank, max_size=max_rank).map(tuple)


def dtypes(include_storage_only: bool = True) -> hs.SearchStrategy[st.DType]:
    """Any DType (optionally without the storage-only FP8 types)."""
    return hs.sampled_from(ALL_DTYPES if include_storage_only else COMPUTE_DTYPES)


@hs.composite
def arrays(draw: hs.DrawFn, dtype: st.DType, shape: tuple[int, ...]) -> np.ndarray:
    """A NumPy array of ``dtype`` whose bytes are random (so every bit pattern occurs)."""
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype is st.DType.BOOL:
        raw = draw(hs.binary(min_size=count, max_size=count))
        return (np.frombuffer(raw, dtype=np.uint8) & 1).astype(np.bool_).reshape(shape)
    raw = draw(hs.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    return np.frombuffer(raw, dtype=dtype.numpy).reshape(shape).copy()


@hs.composite
def basic_indices(draw: hs.DrawFn, shape: tuple[int, ...]) -> Any:
    """A valid basic index for ``shape``: ints (negative too), slices (any step), None, ..."""
    items: list[Any] = []
    axis = 0
    used_ellipsis = False
    # Items after an Ellipsis index the *last* axes, so once one is placed the rest must
    # run through to the final axis.
    while axis < len(shape) and (used_ellipsis or draw(hs.booleans())):
        choice = draw(hs.integers(0, 9))
        if choice <= 1 and shape[axis] > 0:
            items.append(draw(hs.integers(-shape[axis], shape[axis] - 1)))
            axis += 1
        elif choice == 2:
            items.append(None)
        elif choice == 3 and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            axis = len(shape) - draw(hs.integers(0, len(shape) - axis))
        else:
            bound = shape[axis] + 2
            start = draw(hs.none() | hs.integers(-bound, bound))
            stop = draw(hs.none() | hs.integers(-bound, bound))
            step = draw(hs.none() | hs.integers(-3, 3).filter(bool))
            items.append(slice(start, stop, step))
            axis += 1
    if len(items) == 1 and draw(hs.booleans()):
        return items[0]
    return tuple(items)


LAYOUTS = ("contiguous", "transposed", "reversed", "stepped")


@hs.composite
def laid_out(
    draw: hs.DrawFn, max_rank: int = 4, dtype: st.DType | None = None, max_dim: int = 4
) -> tuple[st.Tensor, np.ndarray]:
    """A tensor in one of four layouts (contiguous, transposed, reversed, stepped) and the
    NumPy view holding the same logical values."""
    dtype = dtype if dtype is not None else draw(dtypes())
    shape = draw(shapes(0, max_rank, max_dim))
    layout = draw(hs.sampled_from(LAYOUTS))
    if layout == "transposed":
        base = draw(arrays(dtype, shape[::-1]))
        tensor, view = st.Tensor.from_numpy(base).transpose(), base.T
    elif layout == "reversed":
        base = draw(arrays(dtype, shape))
        key = (slice(None, None, -1),) * len(shape)
        tensor, view = st.Tensor.from_numpy(base)[key], base[(*key, ...)]
    elif layout == "stepped":
        base = draw(arrays(dtype, tuple(2 * dim for dim in shape)))
        key = (slice(None, None, -2),) * len(shape)
        tensor, view = st.Tensor.from_numpy(base)[key], base[(*key, ...)]
    else:
        view = draw(arrays(dtype, shape))
        tensor = st.Tensor.from_numpy(view)
    assert tensor.shape == view.shape
    assert tensor.to_le_bytes() == view.tobytes()
    return tensor, view
