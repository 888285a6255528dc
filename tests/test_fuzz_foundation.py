"""Arbitrary Python objects as indices, shapes, dtypes and values: only DataError escapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

leaves = (
    hs.none()
    | hs.booleans()
    | hs.integers(-(2**70), 2**70)
    | hs.floats(allow_nan=True, allow_infinity=True)
    | hs.text(max_size=8)
    | hs.binary(max_size=8)
    | hs.just(Ellipsis)
    | hs.builds(
        slice,
        hs.none() | hs.integers(-5, 5),
        hs.none() | hs.integers(-5, 5),
        hs.none() | hs.integers(-3, 3),
    )
    | hs.builds(slice, hs.floats(), hs.text(max_size=2))
    | hs.just(np.int64(1))
    | hs.just(np.bool_(True))
    | hs.just(np.array([0, 1]))
    | hs.just(object())
    | hs.complex_numbers(allow_nan=False)
)
objects = hs.recursive(
    leaves,
    lambda inner: (
        hs.lists(inner, max_size=4)
        | hs.tuples(inner, inner)
        | hs.dictionaries(hs.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=8,
)

T = st.Tensor.from_numpy(np.arange(24, dtype=np.int16).reshape(2, 3, 4))


@settings(max_examples=300)
@given(objects)
def test_any_index_gives_a_view_or_an_indexing_error(index: Any) -> None:
    before = T.to_le_bytes()
    try:
        view = T[index]
    except (st.IndexingError, st.LimitError):
        pass
    else:
        assert view.shares_storage(T)
    try:
        T.get(index)
    except (st.IndexingError, st.LimitError):
        pass
    assert before == T.to_le_bytes()


# No deadline: the first BF16/FP8 example loads ml_dtypes (about a second), which strided
# does only when such a type is first needed.
@settings(max_examples=300, deadline=None)
@given(objects, hs.sampled_from(list(st.DType)))
def test_any_shape_gives_a_tensor_or_a_data_error(shape: Any, dtype: st.DType) -> None:
    for build in (
        lambda: st.Tensor.zeros(dtype, shape),
        lambda: st.Tensor.from_le_bytes(dtype, shape, b"\0" * 8),
        lambda: T.reshape(shape),
        lambda: T.transpose(shape),
        lambda: T.broadcast_to(shape),
        lambda: st.Shape(shape),
    ):
        try:
            build()
        except st.DataError:
            pass


@settings(max_examples=300)
@given(objects, hs.sampled_from(list(st.DType)))
def test_any_value_gives_a_tensor_or_a_data_error(values: Any, dtype: st.DType) -> None:
    for build in (
        lambda: st.tensor(values, dtype),
        lambda: st.Tensor.full(dtype, (2,), values),
        lambda: st.Tensor.from_scalars(dtype, (1,), [values]),
        lambda: st.Tensor.from_scalars(dtype, (2,), values),
        lambda: st.Tensor.from_le_bytes(dtype, (1,), values),
        lambda: st.Tensor.from_numpy(values),
    ):
        try:
            build()
        except st.DataError:
            pass


@given(objects)
def test_any_dtype_name_gives_a_dtype_or_a_dtype_error(name: Any) -> None:
    try:
        st.DType.parse(name)
    except st.DTypeError:
        pass
    try:
        st.Tensor.zeros(name, (1,))
    except st.DTypeError:
        pass


@given(objects)
def test_setitem_is_always_a_type_error(index: Any) -> None:
    with pytest.raises(TypeError):
        T[index] = 0  # type: ignore[index]
