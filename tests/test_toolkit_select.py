"""Selection and joining: take, boolean masks, where, concatenate and stack, against
NumPy over every dtype (FP8 included) and every layout, and their errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import ALL_DTYPES, arrays
from .test_toolkit import bits_equal, edge_arrays, laid_out

D = st.DType
INT_DTYPES = [D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64]


def same(found: st.Tensor, expected: np.ndarray, dtype: st.DType) -> None:
    assert isinstance(found, st.Tensor) and found.dtype is dtype
    assert found.is_contiguous
    bits_equal(found, np.asarray(expected))


# -- take -------------------------------------------------------------------------------------


@hs.composite
def index_sets(draw: hs.DrawFn, length: int) -> tuple[Any, np.ndarray]:
    """Valid indices for an axis of ``length`` (negatives too): as a Python int, nested
    lists, or an integer tensor of any integer dtype (possibly a reversed view)."""
    if length == 0:
        return [], np.zeros(0, dtype=np.int64)
    kind = draw(hs.sampled_from(["int", "list", "tensor"]))
    if kind == "int":
        value = draw(hs.integers(-length, length - 1))
        return value, np.array(value)
    shape = draw(hs.lists(hs.integers(0, 3), max_size=3).map(tuple))
    count = math.prod(shape)
    if kind == "list":
        values = draw(hs.lists(hs.integers(-length, length - 1), min_size=count, max_size=count))
        nested = np.array(values, dtype=np.int64).reshape(shape).tolist()
        return nested, np.array(nested, dtype=np.int64)  # [[]] and [] differ only here
    dtype = draw(hs.sampled_from(INT_DTYPES))
    low = -min(length, 2 ** (8 * dtype.itemsize - 1)) if dtype.is_signed else 0
    high = min(length, dtype.max.value + 1) - 1
    values = draw(hs.lists(hs.integers(low, high), min_size=count, max_size=count))
    chosen = np.array(values, dtype=dtype.numpy).reshape(shape)
    tensor = st.Tensor.from_numpy(chosen[::-1].copy())[::-1] if chosen.ndim else None
    return (tensor if tensor is not None else st.Tensor.from_numpy(chosen)), chosen


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_take_matches_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    tensor, view = data.draw(laid_out(dtype, max_rank=3))
    axis = data.draw(hs.none() | hs.integers(-view.ndim, view.ndim - 1)) if view.ndim else None
    length = view.size if axis is None else view.shape[axis]
    indices, chosen = data.draw(index_sets(length))
    found = tensor.take(indices, axis=axis)
    same(found, np.take(view, chosen.astype(np.intp), axis=axis), dtype)
    assert not found.shares_storage(tensor)


def test_take_is_an_embedding_lookup() -> None:
    table = st.tensor([[0.0, 0.5], [1.0, 1.5], [2.0, -0.0], [3.0, math.nan]], D.F16)
    rows = table.take([[3, 0], [-2, 2]], axis=0)
    assert rows.shape == (2, 2, 2)
    assert rows[1, 0].tolist() == [2.0, -0.0] and math.isnan(rows[0, 0, 1].item().value)
    assert table.take(st.tensor([1], D.U8), axis=0).tolist() == [[1.0, 1.5]]
    assert table.take(1, axis=1).tolist()[:3] == [0.5, 1.5, -0.0]
    assert table.take(-1).item().value != table.take(-1).item().value  # NaN, flattened
    assert table.T.take([0, 1], axis=0).shape == (2, 4)


def test_take_errors_name_the_first_bad_index() -> None:
    t = st.Tensor.zeros(D.F32, (4, 3))
    with pytest.raises(st.IndexingError, match=r"index 3 at position \[1\] .* axis 1 of length 3"):
        t.take([0, 3, 7], axis=1)
    with pytest.raises(st.IndexingError, match=r"index -5 at position \[0, 1\] .* length 4"):
        t.take([[1, -5], [9, 0]], axis=0)
    with pytest.raises(st.IndexingError, match=r"index 12 at position \[\] .*flattened"):
        t.take(12)
    with pytest.raises(st.IndexingError, match="300"):
        t.take(st.tensor([1, 300], D.U16), axis=0)
    with pytest.raises(st.IndexingError, match="out of range"):
        t.take([2**64])
    with pytest.raises(st.IndexingError):
        st.Tensor.zeros(D.I8, (0,)).take([0])
    with pytest.raises(st.IndexingError, match="axis 2"):
        t.take([0], axis=2)
    for bad in (st.tensor([True], D.BOOL), st.tensor([0.0], D.F32), [1.0], [True], "0"):
        with pytest.raises(st.DTypeError, match="take"):
            t.take(bad, axis=0)
    with pytest.raises(st.DTypeError, match="from_numpy"):
        t.take(np.array([0]))
    with pytest.raises(st.ShapeError):
        t.take([[0], [1, 2]])
    assert t.take([], axis=0).shape == (0, 3)


# -- masks ------------------------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(hs.data())
def test_boolean_masks_match_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    tensor, view = data.draw(laid_out(dtype, max_rank=3))
    rank = data.draw(hs.integers(0, view.ndim))
    flags = data.draw(arrays(D.BOOL, view.shape[:rank]))
    mask = st.Tensor.from_numpy(flags)
    if data.draw(hs.booleans()) and rank >= 2:
        mask = st.Tensor.from_numpy(flags.T.copy()).T  # a transposed view as the mask
    found = tensor[mask]
    same(found, view[flags], dtype)
    assert found == tensor.slice(mask)


def test_mask_errors() -> None:
    t = st.tensor([[1, 2, 3], [4, 5, 6]], D.I32)
    assert t[t.gt(2)].tolist() == [3, 4, 5, 6]
    assert t[st.tensor([False, True], D.BOOL)].tolist() == [[4, 5, 6]]
    for bad in (st.tensor([True], D.BOOL), st.tensor([[True, False]], D.BOOL), t.gt(2).T):
        with pytest.raises(st.IndexingError, match="mask of shape"):
            t[bad]
    with pytest.raises(st.IndexingError, match="take"):
        t[st.tensor([0, 1], D.I64)]
    with pytest.raises(st.IndexingError):
        t[[True, False]]
    with pytest.raises(st.IndexingError):
        t[st.tensor([True, False], D.BOOL), 0]


# -- where ------------------------------------------------------------------------------------


@hs.composite
def broadcastable(draw: hs.DrawFn) -> tuple[tuple[int, ...], ...]:
    """Three shapes that broadcast together (each drops leading axes or has 1s)."""
    out = draw(hs.lists(hs.integers(0, 3), max_size=3).map(tuple))
    found = []
    for _ in range(3):
        rank = draw(hs.integers(0, len(out)))
        tail = out[len(out) - rank :]
        found.append(tuple(1 if draw(hs.booleans()) else d for d in tail))
    return tuple(found)


@settings(max_examples=250, deadline=None)
@given(hs.data())
def test_where_matches_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    cond_shape, a_shape, b_shape = data.draw(broadcastable())
    flags = data.draw(arrays(D.BOOL, cond_shape))
    a = data.draw(edge_arrays(dtype, a_shape))
    b = data.draw(edge_arrays(dtype, b_shape))
    b_tensor = (
        st.Tensor.from_numpy(b[::-1].copy())[::-1] if b.ndim == 1 else st.Tensor.from_numpy(b)
    )
    found = st.where(st.Tensor.from_numpy(flags), st.Tensor.from_numpy(a), b_tensor)
    same(found, np.where(flags, a, b), dtype)


def test_where_with_scalars_and_errors() -> None:
    cond = st.tensor([True, False, True], D.BOOL)
    x = st.tensor([1.5, -0.0, math.inf], D.F16)
    assert st.where(cond, x, 0).tolist() == [1.5, 0.0, math.inf]
    assert st.where(cond, "-1", x).tolist() == [-1.0, -0.0, -1.0]
    assert st.where(cond, st.Scalar(D.F16, 2), x).tolist() == [2.0, -0.0, 2.0]
    f8 = st.Tensor.full(D.F8_E4M3, (3,), 448.0)
    assert st.where(cond, f8, 0.5).tolist() == [448.0, 0.5, 448.0]
    with pytest.raises(st.DTypeError, match="dtypes differ"):
        st.where(cond, x, x.convert(D.F32))
    with pytest.raises(st.DTypeError, match="cond"):
        st.where(x, x, x)
    with pytest.raises(st.DTypeError, match="cond"):
        st.where([True], x, x)
    with pytest.raises(st.DTypeError, match="a or b"):
        st.where(cond, 1, 2)
    with pytest.raises(st.RangeError):
        st.where(cond, st.tensor([1, 2, 3], D.I8), 300)
    with pytest.raises(st.RangeError):
        st.where(cond, st.tensor([1, 2, 3], D.I8), 1.5)
    with pytest.raises(st.ShapeError, match="broadcast"):
        st.where(cond, x, st.Tensor.zeros(D.F16, (2,)))
    with pytest.raises(st.DTypeError, match="from_numpy"):
        st.where(cond, x, np.zeros(3))


# -- concatenate and stack --------------------------------------------------------------------


@settings(max_examples=250, deadline=None)
@given(hs.data())
def test_concatenate_and_stack_match_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(ALL_DTYPES))
    first, view = data.draw(laid_out(dtype, max_rank=3))
    count = data.draw(hs.integers(1, 4))
    tensors, views = [first], [view]
    axis = data.draw(hs.integers(-view.ndim, view.ndim - 1)) if view.ndim else 0
    for _ in range(count - 1):
        shape = list(view.shape)
        if view.ndim:
            shape[axis] = data.draw(hs.integers(0, 3))
        other = data.draw(edge_arrays(dtype, tuple(shape)))
        tensors.append(st.Tensor.from_numpy(other))
        views.append(other)
    if view.ndim:
        same(st.concatenate(tensors, axis=axis), np.concatenate(views, axis=axis), dtype)
    else:
        with pytest.raises(st.ShapeError, match="rank-0"):
            st.concatenate(tensors)
    same_shape = [t for t in tensors if t.shape == first.shape]
    new_axis = data.draw(hs.integers(-view.ndim - 1, view.ndim))
    stacked = st.stack(same_shape, axis=new_axis)
    same(
        stacked,
        np.stack(
            [views[i] for i, t in enumerate(tensors) if t.shape == first.shape], axis=new_axis
        ),
        dtype,
    )


def test_join_errors() -> None:
    a = st.Tensor.zeros(D.F32, (2, 3))
    with pytest.raises(st.DTypeError, match="tensor 2 is F64"):
        st.concatenate([a, a, a.convert(D.F64)])
    with pytest.raises(st.DTypeError, match="tensor 1 is I8"):
        st.stack([a, st.Tensor.zeros(D.I8, (2, 3))])
    with pytest.raises(st.ShapeError, match=r"tensor 1 .* axis 1 \(2 != 3\)"):
        st.concatenate([a, st.Tensor.zeros(D.F32, (2, 2))], axis=0)
    with pytest.raises(st.ShapeError, match="tensor 1 has rank 1"):
        st.concatenate([a, st.Tensor.zeros(D.F32, (3,))])
    with pytest.raises(st.ShapeError, match=r"tensor 2 .* \(axis 0: 3 != 2\)"):
        st.stack([a, a, a.T])
    for join in (st.concatenate, st.stack):
        with pytest.raises(st.ShapeError, match="at least one"):
            join([])
        with pytest.raises(st.DTypeError, match="list or tuple"):
            join(a)
        with pytest.raises(st.DTypeError, match="item 1"):
            join([a, 1.0])
    with pytest.raises(st.IndexingError):
        st.concatenate([a, a], axis=2)
    with pytest.raises(st.IndexingError):
        st.stack([a, a], axis=3)
    assert st.concatenate((a, a), axis=-1).shape == (2, 6)
    assert st.stack((a, a), axis=-1).shape == (2, 3, 2)


def test_join_limits_are_checked_before_allocating() -> None:
    wide = st.Tensor.zeros(D.U8, (0, 2**34))  # legal: no elements, dims within the cap
    with pytest.raises(st.LimitError, match="MAX_ELEMENTS"):
        st.concatenate([wide, wide], axis=1)
    with pytest.raises(st.LimitError, match="MAX_ELEMENTS"):
        st.stack([wide, wide])
    deep = st.Tensor.zeros(D.U8, (1,) * st.MAX_RANK)
    with pytest.raises(st.LimitError, match="MAX_RANK"):
        st.stack([deep])
    assert st.concatenate([deep, deep]).shape[0] == 2


def test_take_and_mask_limits_are_checked_before_allocating() -> None:
    t = st.Tensor.zeros(D.F32, (3, 5))
    huge = st.Tensor.zeros(D.I64, (0, 2**34))  # legal: no elements
    with pytest.raises(st.LimitError, match="MAX_ELEMENTS"):
        t.take(huge, axis=1)
    deep = st.Tensor.zeros(D.I64, (1,) * st.MAX_RANK)
    assert st.Tensor.zeros(D.F32, (3,)).take(deep).ndim == st.MAX_RANK
    with pytest.raises(st.LimitError, match="MAX_RANK"):
        t.take(deep, axis=0)
    full_rank = st.Tensor.zeros(D.U8, (1,) * st.MAX_RANK)
    with pytest.raises(st.LimitError, match="MAX_RANK"):
        full_rank[st.Tensor.full(D.BOOL, (), True)]
    assert full_rank[st.Tensor.full(D.BOOL, (1,), True)].shape == full_rank.shape
