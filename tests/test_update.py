"""Functional updates: with_slice, with_index_path and .at[...].set against NumPy.

The oracle is NumPy's copy-then-assign: copy the source, assign into the selection,
compare. Every error test checks that neither the source nor the replacement changed.
"""

from __future__ import annotations

import doctest
import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import arrays, basic_indices, laid_out


def view_key(index: Any) -> tuple[Any, ...]:
    """``index`` as a tuple that makes NumPy return a view even when it is all ints."""
    items = index if type(index) is tuple else (index,)
    if not any(item is Ellipsis for item in items):
        items = (*items, Ellipsis)
    return items


@hs.composite
def fitting_shapes(draw: hs.DrawFn, target: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that NumPy assignment broadcasts into ``target`` without growing it."""
    keep = draw(hs.integers(0, len(target)))
    trailing = tuple(dim if draw(hs.booleans()) else 1 for dim in target[len(target) - keep :])
    return (1,) * draw(hs.integers(0, 2)) + trailing


@hs.composite
def replacements(
    draw: hs.DrawFn, dtype: st.DType, target: tuple[int, ...]
) -> tuple[Any, np.ndarray, bool]:
    """(replacement for strided, the NumPy array to assign, whether bytes must match exactly)."""
    kind = draw(hs.sampled_from(("tensor", "scalar", "text", "python")))
    if kind == "tensor":
        values = draw(arrays(dtype, draw(fitting_shapes(target))))
        return st.Tensor.from_numpy(values), values, True
    value = st.Tensor.from_numpy(draw(arrays(dtype, ()))).item()
    expected = np.array(value.value, dtype=dtype.numpy)
    if kind == "text":
        return str(value), expected, False
    if kind == "python":
        return value.value, expected, False
    return value, expected, False


def assert_result(result: st.Tensor, expected: np.ndarray, bitwise: bool) -> None:
    assert result.dtype is st.DType.from_numpy(expected.dtype)
    assert result.shape == expected.shape
    assert result.is_contiguous
    if bitwise:
        assert result.to_le_bytes() == expected.tobytes()
    else:  # NaN payloads of scalars are not kept, so compare as Scalars do
        assert result == st.Tensor.from_numpy(expected)


# -- differential tests against NumPy ---------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_with_slice_matches_numpy_copy_then_assign(data: hs.DataObject) -> None:
    tensor, view = data.draw(laid_out())
    before = tensor.to_le_bytes()
    index = data.draw(basic_indices(view.shape))
    selection = view[view_key(index)].shape
    replacement, values, bitwise = data.draw(replacements(tensor.dtype, selection))

    expected = view.copy()
    expected[view_key(index)][...] = values
    result = tensor.with_slice(index, replacement)

    assert_result(result, expected, bitwise)
    assert tensor.to_le_bytes() == before
    assert not result.shares_storage(tensor)
    assert tensor.at[index].set(replacement) == result


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_with_index_path_matches_numpy_chained_assign(data: hs.DataObject) -> None:
    tensor, view = data.draw(laid_out())
    before = tensor.to_le_bytes()
    path: list[Any] = []
    expected = view.copy()
    selected = expected
    for _ in range(data.draw(hs.integers(0, 4))):
        step = data.draw(basic_indices(selected.shape))
        path.append(step)
        selected = selected[view_key(step)]
    replacement, values, bitwise = data.draw(replacements(tensor.dtype, selected.shape))
    selected[...] = values  # a view of views of ``expected``: writes land in it

    result = tensor.with_index_path(path, replacement)

    assert_result(result, expected, bitwise)
    assert tensor.to_le_bytes() == before
    assert tensor.with_index_path(tuple(path), replacement) == result


@settings(max_examples=150, deadline=None)
@given(hs.data())
def test_replacement_sharing_the_source_storage(data: hs.DataObject) -> None:
    tensor, view = data.draw(laid_out())
    before = tensor.to_le_bytes()
    index = data.draw(basic_indices(view.shape))
    selected_view = view[view_key(index)]
    # The replacement reads the source's own storage, reversed along every axis.
    flip = (slice(None, None, -1),) * selected_view.ndim
    replacement = tensor[index][flip] if selected_view.ndim else tensor[index]

    expected = view.copy()
    expected[view_key(index)][...] = selected_view[flip].copy()  # NumPy with the rhs copied
    result = tensor.with_slice(index, replacement)

    assert result.to_le_bytes() == expected.tobytes()
    assert tensor.to_le_bytes() == before
    assert replacement.shares_storage(tensor)


def test_shifted_self_assignment_copies_the_right_hand_side_first() -> None:
    t = st.tensor([0, 1, 2, 3, 4, 5], "I32")
    assert t.with_slice(slice(1, None), t[:-1]).tolist() == [0, 0, 1, 2, 3, 4]
    assert t.with_slice(slice(None, -1), t[1:]).tolist() == [1, 2, 3, 4, 5, 5]
    assert t.with_slice(slice(None), t[::-1]).tolist() == [5, 4, 3, 2, 1, 0]
    assert t.tolist() == [0, 1, 2, 3, 4, 5]


# -- fixed cases ------------------------------------------------------------------------


def test_the_at_docstring_examples_run() -> None:
    at = st.Tensor.at
    assert isinstance(at, property)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(at.fget, "at", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False).attempted >= 4
    assert runner.summarize(verbose=False).failed == 0
    assert "x[i] = v" in (at.__doc__ or "") and "x.at[i].set(v)" in (at.__doc__ or "")


def test_update_results_are_fresh_contiguous_tensors() -> None:
    base = st.Tensor.from_numpy(np.arange(12, dtype=np.int16).reshape(3, 4))
    source = base.transpose()[::-1]  # shape [4, 3], strides (-1, 4)
    assert not source.is_contiguous
    result = source.with_slice((0, 0), 100)
    expected = base.numpy().T[::-1].copy()
    expected[0, 0] = 100
    assert result.is_contiguous
    assert result.strides == (3, 1)
    assert result.offset == 0
    assert result.storage_byte_len == result.byte_len
    assert np.array_equal(result.numpy(), expected)
    assert not result.numpy().flags.writeable
    assert base.tolist() == np.arange(12).reshape(3, 4).tolist()


def test_scalar_like_replacements_convert_exactly() -> None:
    t = st.Tensor.zeros("F32", (3,))
    assert t.with_slice(1, "0.1").get([1]) == st.Scalar(st.DType.F32, 0.1)
    assert t.with_slice(1, 0.1).get([1]) == st.Scalar(st.DType.F32, 0.1)
    assert t.with_slice(..., "-0.0").to_le_bytes() == np.full(3, -0.0, np.float32).tobytes()
    assert math.isnan(t.with_slice(0, "nan").get([0]).value)
    b = st.Tensor.zeros("BF16", (2,))
    third = st.Scalar(st.DType.BF16, 1 / 3)
    assert b.with_slice(0, 1 / 3).get([0]) == third
    u = st.Tensor.zeros("U64", (2,))
    assert u.with_slice(0, 2**64 - 1).tolist() == [2**64 - 1, 0]
    i = st.Tensor.zeros("I64", (2,))
    assert i.with_slice(1, "-9223372036854775808").tolist() == [0, -(2**63)]
    assert i.with_slice(1, True).tolist() == [0, 1]
    assert i.with_slice(0, 3.0).tolist() == [3, 0]
    assert i.with_slice(0, st.Scalar(st.DType.I64, 7)).tolist() == [7, 0]
    flags = st.Tensor.zeros("BOOL", (2,))
    assert flags.with_slice(1, "true").tolist() == [False, True]
    e4 = st.Tensor.zeros("F8_E4M3", (2,))
    assert e4.with_slice(0, 464).tolist() == [448.0, 0.0]


def test_broadcasting_into_the_selection() -> None:
    t = st.Tensor.zeros("I8", (2, 3, 4))
    row = st.tensor([1, 2, 3, 4], "I8")
    expected = np.zeros((2, 3, 4), np.int8)
    expected[:, 1] = [1, 2, 3, 4]
    assert np.array_equal(t.with_slice((slice(None), 1), row).numpy(), expected)
    column = st.tensor([[5], [6], [7]], "I8")
    expected = np.zeros((2, 3, 4), np.int8)
    expected[1] = [[5], [6], [7]]
    assert np.array_equal(t.with_slice(1, column).numpy(), expected)
    leading_ones = st.Tensor.full("I8", (1, 1, 1, 3, 4), 9)
    assert t.with_slice(0, leading_ones).tolist()[0] == [[9] * 4] * 3
    assert t.with_slice(..., st.Tensor.full("I8", (), -1)).tolist() == [[[-1] * 4] * 3] * 2


def test_rank_zero_and_empty_selections() -> None:
    s = st.Tensor.full("F64", (), 1.5)
    assert s.with_slice((), 2.5).tolist() == 2.5
    assert s.with_slice(..., st.Tensor.full("F64", (1, 1), 3.5)).tolist() == 3.5
    assert s.with_slice(None, st.tensor([4.5], "F64")).tolist() == 4.5
    assert s.tolist() == 1.5
    t = st.tensor([1, 2, 3], "U8")
    assert t.with_slice(slice(2, 1), st.Tensor.zeros("U8", (0,))).tolist() == [1, 2, 3]
    assert t.with_slice(slice(2, 1), st.tensor([9], "U8")).tolist() == [1, 2, 3]
    empty = st.Tensor.zeros("U8", (0, 3))
    assert empty.with_slice(..., 5).shape == (0, 3)


def test_index_path_composes_one_selection() -> None:
    base = st.Tensor.from_numpy(np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    source = base[::-1, :, ::-2]
    path = [slice(None), 1, (None, slice(1, None))]
    result = source.with_index_path(path, st.tensor([[-1]], "I32"))
    expected = base.numpy()[::-1, :, ::-2].copy()
    expected[:][1][None, 1:] = -1  # t[:][1] is t[1]
    assert np.array_equal(result.numpy(), expected)
    assert source.with_index_path([], 0).tolist() == [[[0] * 2] * 3] * 2
    steps = [0] + [...] * 31  # exactly MAX_RANK steps is allowed
    assert source.with_index_path(steps, 7).tolist()[0] == [[7] * 2] * 3


def test_numpy_ints_and_index_objects_are_accepted() -> None:
    t = st.tensor([1, 2, 3], "I16")
    assert t.with_slice(np.int64(-1), 0).tolist() == [1, 2, 0]
    assert t.at[st.Scalar(st.DType.I8, 0)].set(0).tolist() == [0, 2, 3]


# -- errors: typed, and nothing changes --------------------------------------------------


def snapshot(*tensors: st.Tensor) -> list[bytes]:
    return [t.to_le_bytes() for t in tensors]


SOURCE = st.Tensor.from_numpy(np.arange(12, dtype=np.int8).reshape(3, 4)).transpose()  # [4, 3]


@pytest.mark.parametrize(
    ("replacement", "error"),
    [
        (st.tensor([1, 2, 3], "I16"), st.DTypeError),
        (st.tensor([1.0, 2.0, 3.0], "F32"), st.DTypeError),
        (st.Scalar(st.DType.U8, 1), st.DTypeError),
        (np.array([1, 2, 3], np.int8), st.DTypeError),
        ([1, 2, 3], st.DTypeError),
        ((1, 2, 3), st.DTypeError),
        (None, st.DTypeError),
        (b"\x01", st.DTypeError),
        (1 + 2j, st.DTypeError),
        (300, st.RangeError),
        (-129, st.RangeError),
        (1.5, st.RangeError),
        (float("nan"), st.RangeError),
        ("300", st.RangeError),
        ("1.0", st.FormatError),
        ("abc", st.FormatError),
        ("", st.FormatError),
        (st.tensor([1, 2], "I8"), st.ShapeError),  # wrong trailing size
        (st.tensor([[1, 2, 3], [4, 5, 6]], "I8"), st.ShapeError),  # grows the selection
        (st.tensor([[[1, 2, 3]], [[1, 2, 3]]], "I8"), st.ShapeError),  # leading axis not 1
        (st.Tensor.zeros("I8", (0,)), st.ShapeError),  # cannot stretch 0 to 3
        (st.Tensor.zeros("I8", (4,)), st.ShapeError),
    ],
)
def test_bad_replacements_raise_and_change_nothing(
    replacement: Any, error: type[Exception]
) -> None:
    tensors = [SOURCE, *([replacement] if isinstance(replacement, st.Tensor) else [])]
    before = snapshot(*tensors)
    raw = replacement.copy() if isinstance(replacement, np.ndarray) else None
    with pytest.raises(error) as caught:
        SOURCE.with_slice(1, replacement)  # selection shape [3]
    assert "with_slice" in str(caught.value)
    with pytest.raises(error):
        SOURCE.at[1].set(replacement)
    with pytest.raises(error):
        SOURCE.with_index_path([slice(None), 1], replacement)  # selection shape [3] too
    assert snapshot(*tensors) == before
    if raw is not None:
        assert np.array_equal(raw, replacement)


@pytest.mark.parametrize(
    ("index", "error"),
    [
        (4, st.IndexingError),
        (-5, st.IndexingError),
        ((0, 3), st.IndexingError),
        ((0, 0, 0), st.IndexingError),
        (slice(None, None, 0), st.IndexingError),
        ((..., ...), st.IndexingError),
        (True, st.IndexingError),
        (np.bool_(False), st.IndexingError),
        ([0, 1], st.IndexingError),
        (np.array([0]), st.IndexingError),
        (1.0, st.IndexingError),
        ("0", st.IndexingError),
        ((None,) * 31, st.LimitError),
    ],
)
def test_bad_selectors_raise_and_change_nothing(index: Any, error: type[Exception]) -> None:
    replacement = st.Tensor.full("I8", (), 1)
    before = snapshot(SOURCE, replacement)
    with pytest.raises(error):
        SOURCE.with_slice(index, replacement)
    with pytest.raises(error):
        SOURCE.at[index]
    with pytest.raises(error):
        SOURCE.with_index_path([slice(None), index], replacement)
    assert snapshot(SOURCE, replacement) == before


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ([0] + [...] * 32, st.LimitError),
        ((...,) * 33, st.LimitError),
        ([None] * 31, st.LimitError),  # the composed selection would pass MAX_RANK
        ([0, 0, 0], st.IndexingError),  # the third step indexes a rank-0 view
        ([0, 5], st.IndexingError),
        ([slice(None), True], st.IndexingError),
        (0, st.IndexingError),
        ("01", st.IndexingError),
        (None, st.IndexingError),
        (iter([0]), st.IndexingError),
        ({0: 1}, st.IndexingError),
    ],
)
def test_bad_paths_raise_and_change_nothing(path: Any, error: type[Exception]) -> None:
    replacement = st.Tensor.full("I8", (), 1)
    before = snapshot(SOURCE, replacement)
    with pytest.raises(error):
        SOURCE.with_index_path(path, replacement)
    assert snapshot(SOURCE, replacement) == before


def test_errors_are_raised_before_the_payload_is_copied() -> None:
    big = st.Tensor.from_le_bytes("F32", (2048, 2048), bytes(2048 * 2048 * 4))  # 16 MiB
    bad = st.Tensor.zeros("F32", (3,))
    tracemalloc.start()
    try:
        for call in (
            lambda: big.with_slice(0, bad),
            lambda: big.with_slice(0, "1e39"),
            lambda: big.with_slice(0, st.Tensor.zeros("F64", (1,))),
            lambda: big.with_index_path([0, 5000], 1.0),
        ):
            with pytest.raises(st.DataError):
                call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_successful_update_copies_the_payload_once() -> None:
    source = st.Tensor.from_le_bytes("F32", (2048, 2048), bytes(2048 * 2048 * 4)).transpose()
    row = st.Tensor.zeros("F32", (2048,))
    tracemalloc.start()
    try:
        result = source.with_index_path([slice(None, None, -1), 3], row)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.byte_len == 2048 * 2048 * 4
    assert peak < result.byte_len + (1 << 20)


def test_helpers_are_plain_pending_objects() -> None:
    t = st.tensor([1, 2], "I32")
    assert "I32" in repr(t.at) and "I32" in repr(t.at[0])
    pending = t.at[0]
    assert pending.set(5).tolist() == [5, 2]
    assert pending.set(6).tolist() == [6, 2]
    assert t.tolist() == [1, 2]
    with pytest.raises(TypeError, match="at"):
        t[0] = 5  # type: ignore[index]
