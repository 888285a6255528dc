"""Shape: dims arithmetic, both orders, and its errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import strided as st

from .strategies import shapes


def test_shape_is_a_tuple_numpy_accepts() -> None:
    shape = st.Shape((2, 3))
    assert shape == (2, 3)
    assert shape[0] == 2
    assert isinstance(shape, tuple)
    assert np.zeros(shape).shape == (2, 3)
    assert hash(shape) == hash((2, 3))


def test_scalar_shape() -> None:
    assert st.Shape() == st.Shape.scalar() == ()
    assert st.Shape().ndim == 0
    assert st.Shape().numel == 1
    assert str(st.Shape()) == "[]"


def test_text() -> None:
    assert str(st.Shape((2, 3))) == "[2, 3]"
    assert repr(st.Shape((2, 3))) == "Shape([2, 3])"


def test_properties() -> None:
    shape = st.Shape((2, 0, 5))
    assert shape.dims == (2, 0, 5)
    assert shape.ndim == 3
    assert shape.numel == 0


def test_numel_is_exact_beyond_64_bits() -> None:
    shape = st.Shape((2**32, 2**32, 2))
    assert shape.numel == 2**65
    assert shape.checked_numel() is None
    assert shape.checked_numel(limit=2**66) == 2**65
    assert st.Shape((2**40, 0)).checked_numel() == 0


def test_no_limits_of_its_own() -> None:
    assert st.Shape((1,) * 100).ndim == 100


@pytest.mark.parametrize("dims", [(True,), (2.0,), (-1,), ("2",), (None,), ((2,),)])
def test_bad_dims_are_shape_errors(dims: tuple[object, ...]) -> None:
    with pytest.raises(st.ShapeError):
        st.Shape(dims)  # type: ignore[arg-type]


@pytest.mark.parametrize("dims", [3, "23", None, 2.5])
def test_non_sequences_are_shape_errors(dims: object) -> None:
    with pytest.raises(st.ShapeError):
        st.Shape(dims)  # type: ignore[arg-type]


def test_accepts_index_objects() -> None:
    assert st.Shape((np.int64(2), np.uint8(3))) == (2, 3)
    assert all(type(d) is int for d in st.Shape((np.int64(2),)))


def test_strides_both_orders() -> None:
    assert st.Shape((2, 3, 5)).strides() == (15, 5, 1)
    assert st.Shape((2, 3, 5)).strides("F") == (1, 2, 6)
    assert st.Shape().strides() == ()
    with pytest.raises(st.ShapeError):
        st.Shape((2,)).strides("K")


@given(shapes())
def test_strides_match_numpy(dims: tuple[int, ...]) -> None:
    shape = st.Shape(dims)
    if shape.numel == 0:
        return  # NumPy reports all-zero strides for empty arrays
    for order in "CF":
        expected = np.zeros(dims, dtype=np.int8, order=order).strides  # type: ignore[call-overload]
        for axis, dim in enumerate(dims):
            if dim > 1:
                assert shape.strides(order)[axis] == expected[axis]


def test_reshape() -> None:
    shape = st.Shape((2, 3, 4))
    assert shape.reshape((4, -1)) == (4, 6)
    assert shape.reshape([24]) == (24,)
    assert st.Shape((0, 3)).reshape((3, 0)) == (3, 0)
    with pytest.raises(st.ShapeError, match="24 elements cannot become shape"):
        shape.reshape((5, 5))
    with pytest.raises(st.ShapeError):
        shape.reshape((-1, -1))
    with pytest.raises(st.ShapeError):
        shape.reshape((5, -1))
    with pytest.raises(st.ShapeError):
        shape.reshape((-2, 12))
    with pytest.raises(st.ShapeError):
        st.Shape((0, 3)).reshape((0, -1))


@given(shapes(), shapes())
def test_broadcast_matches_numpy(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(st.ShapeError):
            st.Shape(a).broadcast(b)
        return
    assert st.Shape(a).broadcast(b) == expected
    assert st.Shape(b).broadcast(st.Shape(a)) == expected


def test_broadcast_error_names_both() -> None:
    with pytest.raises(st.ShapeError, match=r"\[2, 3\].*\[4\]"):
        st.Shape((2, 3)).broadcast((4,))


@given(shapes(min_rank=1), hs.data())
def test_unravel_ravel_match_numpy(dims: tuple[int, ...], data: hs.DataObject) -> None:
    shape = st.Shape(dims)
    if shape.numel == 0:
        with pytest.raises(st.IndexingError):
            shape.unravel(0)
        return
    flat = data.draw(hs.integers(0, shape.numel - 1))
    for order in "CF":
        multi = shape.unravel(flat, order)
        assert multi == tuple(int(i) for i in np.unravel_index(flat, dims, order=order))  # type: ignore[call-overload]
        assert shape.ravel(multi, order) == flat


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("unravel", (6,)),
        ("unravel", (-1,)),
        ("unravel", (True,)),
        ("unravel", (1.0,)),
        ("ravel", ((2, 0),)),
        ("ravel", ((0, -1),)),
        ("ravel", ((0,),)),
        ("ravel", ((0, 0, 0),)),
        ("ravel", (("a", 0),)),
        ("ravel", (5,)),
    ],
)
def test_unravel_ravel_bounds(call: str, args: tuple[object, ...]) -> None:
    with pytest.raises(st.IndexingError):
        getattr(st.Shape((2, 3)), call)(*args)


def test_pickle_and_immutability() -> None:
    shape = st.Shape((2, 3))
    again = pickle.loads(pickle.dumps(shape))
    assert again == shape
    assert type(again) is st.Shape
    with pytest.raises(AttributeError):
        shape.ndim = 3  # type: ignore[misc]
