"""Tensor construction, properties, reading and views, with NumPy as the oracle."""

from __future__ import annotations

import copy
import mmap
import pickle
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import strided as st

from .strategies import ALL_DTYPES, arrays, basic_indices, dtypes, shapes

F32 = st.DType.F32


def element_strides(array: np.ndarray) -> tuple[int, ...]:
    return tuple(step // array.itemsize for step in array.strides)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


# -- construction -------------------------------------------------------------------


@given(dtypes(), shapes(), hs.data())
def test_from_le_bytes_round_trips(
    dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject
) -> None:
    array = data.draw(arrays(dtype, dims))
    raw = array.tobytes()
    t = st.Tensor.from_le_bytes(dtype, dims, raw)
    assert t.dtype is dtype
    assert t.shape == dims
    assert t.to_le_bytes() == raw
    assert t.is_contiguous
    assert t.strides == st.Shape(dims).strides()
    assert t.byte_len == len(raw) == t.storage_byte_len


def test_from_le_bytes_shares_immutable_buffers() -> None:
    raw = np.arange(6, dtype="<i4").tobytes()
    t = st.Tensor.from_le_bytes(st.DType.I32, (2, 3), raw)
    assert np.shares_memory(t.numpy(), np.frombuffer(raw, dtype=np.uint8))
    view = memoryview(raw)
    t2 = st.Tensor.from_le_bytes(st.DType.I32, (6,), view)
    assert np.shares_memory(t2.numpy(), np.frombuffer(raw, dtype=np.uint8))


def test_from_le_bytes_copies_writable_buffers() -> None:
    buffer = bytearray(np.arange(4, dtype="<i2").tobytes())
    t = st.Tensor.from_le_bytes(st.DType.I16, (4,), buffer)
    buffer[0] = 99
    assert t.tolist() == [0, 1, 2, 3]
    writable_view = memoryview(buffer)
    t2 = st.Tensor.from_le_bytes(st.DType.I16, (4,), writable_view)
    buffer[2] = 77
    assert t2.get([1]).value == 1


def test_from_le_bytes_over_mmap(tmp_path: Any) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(np.arange(8, dtype="<f4").tobytes())
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    t = st.Tensor.from_le_bytes(F32, (2, 4), mapped)
    assert t.numpy().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert not t.numpy().flags.writeable
    with open(path, "r+b") as handle:
        writable = mmap.mmap(handle.fileno(), 0)
    t2 = st.Tensor.from_le_bytes(F32, (8,), writable)
    writable[0:4] = np.float32(9).tobytes()
    assert t2.get([0]).value == 0.0
    writable.close()


@pytest.mark.parametrize(
    ("dtype", "shape", "data", "error"),
    [
        (F32, (2,), b"\0" * 7, st.FormatError),
        (F32, (2,), b"\0" * 9, st.FormatError),
        (F32, (), b"", st.FormatError),
        (st.DType.BOOL, (3,), b"\x00\x01\x02", st.FormatError),
        (st.DType.BOOL, (1,), b"\xff", st.FormatError),
        (F32, (1,), "abcd", st.FormatError),
        (F32, (1,), [0, 0, 0, 0], st.FormatError),
        (F32, (1,), None, st.FormatError),
        ("F33", (1,), b"\0" * 4, st.DTypeError),
        (3, (1,), b"\0" * 4, st.DTypeError),
        (F32, (-1,), b"", st.ShapeError),
    ],
)
def test_from_le_bytes_errors(dtype: Any, shape: Any, data: Any, error: type[Exception]) -> None:
    before = copy.copy(data)
    with pytest.raises(error):
        st.Tensor.from_le_bytes(dtype, shape, data)
    assert data == before


def test_bool_error_names_the_offending_byte() -> None:
    with pytest.raises(st.FormatError, match="byte 2 is 2"):
        st.Tensor.from_le_bytes(st.DType.BOOL, (3,), b"\x00\x01\x02")


@given(dtypes(), shapes(max_rank=3), hs.data())
def test_from_scalars_matches_bytes(
    dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject
) -> None:
    array = data.draw(arrays(dtype, dims))
    values = st.Tensor.from_le_bytes(dtype, dims, array.tobytes()).to_scalars()
    t = st.Tensor.from_scalars(dtype, dims, values)
    assert t == st.Tensor.from_le_bytes(dtype, dims, array.tobytes())
    texts = [str(v) for v in values]
    assert st.Tensor.from_scalars(dtype, dims, texts) == t


def test_from_scalars_converts_exactly() -> None:
    t = st.Tensor.from_scalars(st.DType.I64, [3], [2**63 - 1, "-9223372036854775808", True])
    assert t.tolist() == [2**63 - 1, -(2**63), 1]
    u = st.Tensor.from_scalars(st.DType.U64, [1], [2**64 - 1])
    assert u.tolist() == [2**64 - 1]
    f = st.Tensor.from_scalars(F32, [1], [0.1])
    assert f.numpy()[0] == np.float32(0.1)


@pytest.mark.parametrize(
    ("dtype", "shape", "values", "error"),
    [
        (st.DType.I8, [1], [300], st.RangeError),
        (st.DType.I8, [1], [1.5], st.RangeError),
        (st.DType.I8, [1], ["x"], st.FormatError),
        (st.DType.I8, [2], [1], st.ShapeError),
        (st.DType.I8, [1], [1, 2], st.ShapeError),
        (st.DType.I8, [1], 5, st.FormatError),
        (F32, [1], [st.Scalar(st.DType.F64, 1.0)], st.DTypeError),
        (F32, [1], [1e39], st.RangeError),
    ],
)
def test_from_scalars_errors(
    dtype: st.DType, shape: Any, values: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        st.Tensor.from_scalars(dtype, shape, values)


def test_from_scalars_reads_only_what_it_needs() -> None:
    def endless():  # type: ignore[no-untyped-def]
        while True:
            yield 1

    with pytest.raises(st.ShapeError):
        st.Tensor.from_scalars(st.DType.I8, [3], endless())


def test_zeros_full_scalar() -> None:
    for dtype in ALL_DTYPES:
        if dtype is st.DType.F8_E8M0:  # only powers of two: no zero
            with pytest.raises(st.RangeError, match="not an F8_E8M0 value"):
                st.Tensor.zeros(dtype, (2, 3))
            continue
        z = st.Tensor.zeros(dtype, (2, 3))
        assert z.to_le_bytes() == bytes(6 * dtype.itemsize)
        assert z.dtype is dtype
    full = st.Tensor.full(st.DType.BF16, (2,), 0.1)
    assert full.numpy()[1] == ml_dtypes.bfloat16(0.1)
    with pytest.raises(st.RangeError):
        st.Tensor.full(st.DType.U8, (2,), -1)
    r = st.Tensor.scalar(st.Scalar(st.DType.I16, 7))
    assert r.ndim == 0 and r.item() == st.Scalar(st.DType.I16, 7)
    assert st.Tensor.from_scalars(st.DType.I16, [], [7]) == r
    with pytest.raises(st.DTypeError):
        st.Tensor.scalar(7)  # type: ignore[arg-type]


def test_constructor_is_private() -> None:
    with pytest.raises(TypeError):
        st.Tensor()


@given(dtypes(), shapes(), hs.data())
def test_from_numpy_copies(dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject) -> None:
    array = data.draw(arrays(dtype, dims))
    t = st.Tensor.from_numpy(array)
    assert t.dtype is dtype
    assert same_bits(t.numpy(), array)
    assert not np.shares_memory(t.numpy(), array)


def test_from_numpy_later_writes_do_not_show() -> None:
    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = st.Tensor.from_numpy(array[:, ::-1])
    array[:] = 0
    assert t.tolist() == [[2, 1, 0], [5, 4, 3]]


def test_from_numpy_big_endian_and_scalars() -> None:
    t = st.Tensor.from_numpy(np.arange(3, dtype=">i4"))
    assert t.dtype is st.DType.I32
    assert t.tolist() == [0, 1, 2]
    assert t.to_le_bytes() == np.arange(3, dtype="<i4").tobytes()
    assert st.Tensor.from_numpy(np.float16(1.5)).shape == ()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ([1, 2], st.DTypeError),
        (np.array(["a"]), st.DTypeError),
        (np.array([object()]), st.DTypeError),
        (np.array([1 + 2j]), st.DTypeError),
        (np.zeros((1,) * 33), st.LimitError),
    ],
)
def test_from_numpy_errors(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        st.Tensor.from_numpy(value)


def test_tensor_from_nested_lists() -> None:
    t = st.tensor([[1, 2, 3], [4, 5, 6]], st.DType.I16)
    assert t.shape == (2, 3)
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert st.tensor(5, "I8").shape == ()
    assert st.tensor([], st.DType.F32).shape == (0,)
    assert st.tensor([[], []], st.DType.F32).shape == (2, 0)
    assert st.tensor(["0.1", "inf"], F32).tolist() == [float(np.float32(0.1)), float("inf")]


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ([[1, 2], [3]], st.ShapeError),
        ([[1, 2], 3], st.ShapeError),
        ([300], st.RangeError),
        ([[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]], st.LimitError),
        ([None], st.DTypeError),
    ],
)
def test_tensor_errors(values: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        st.tensor(values, st.DType.I8)


def test_deep_nesting_is_not_a_recursion_error() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(st.LimitError):
        st.tensor(deep, st.DType.I8)


# -- properties and reading -----------------------------------------------------------


def test_properties() -> None:
    t = st.Tensor.from_numpy(np.arange(24, dtype=np.int16).reshape(2, 3, 4))
    assert t.ndim == 3
    assert t.numel == 24
    assert len(t) == 2
    assert not t.is_empty
    assert t.byte_len == 48
    assert t.offset == 0
    assert t.strides == (12, 4, 1)
    assert st.Tensor.zeros(F32, (0, 3)).is_empty
    with pytest.raises(TypeError):
        len(st.tensor(1, F32))


def test_reading() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = st.Tensor.from_numpy(array)
    assert t.get([1, 2]) == st.Scalar(F32, 5.0)
    assert t.get((-1, -3)) == st.Scalar(F32, 3.0)
    assert [s.value for s in t.to_scalars()] == array.reshape(-1).tolist()
    assert t.tolist() == array.tolist()
    assert t[1, 1].item() == st.Scalar(F32, 4.0)
    assert t.to_le_bytes() == array.tobytes()
    assert np.asarray(t).tolist() == array.tolist()
    assert np.shares_memory(np.asarray(t), t.numpy())
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize(
    ("indices", "error"),
    [
        ([2, 0], st.IndexingError),
        ([0, -4], st.IndexingError),
        ([0], st.IndexingError),
        ([0, 0, 0], st.IndexingError),
        ([0, 1.0], st.IndexingError),
        ([True, 0], st.IndexingError),
        (0, st.IndexingError),
        ("01", st.IndexingError),
    ],
)
def test_get_errors(indices: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        st.Tensor.zeros(F32, (2, 3)).get(indices)


def test_item_needs_one_element() -> None:
    with pytest.raises(st.ShapeError):
        st.Tensor.zeros(F32, (2,)).item()


def test_tolist_gives_exact_python_values() -> None:
    for dtype in (st.DType.BF16, st.DType.F8_E4M3, st.DType.F8_E5M2, st.DType.F16):
        t = st.Tensor.from_scalars(dtype, [2], [1.5, -0.25])
        assert t.tolist() == [1.5, -0.25]
        assert all(type(v) is float for v in t.tolist())
    assert st.Tensor.from_scalars(st.DType.BOOL, [2], [True, 0]).tolist() == [True, False]


# -- views ----------------------------------------------------------------------------


@given(dtypes(), shapes(), hs.data())
def test_basic_indexing_matches_numpy(
    dtype: st.DType, dims: tuple[int, ...], data: hs.DataObject
) -> None:
    array = data.draw(arrays(dtype, dims))
    index = data.draw(basic_indices(dims))
    t = st.Tensor.from_numpy(array)
    expected = array[index if isinstance(index, tuple) else (index,)][...]
    view = t[index]
    assert view.shape == expected.shape
    assert same_bits(view.numpy(), expected)
    assert view.shares_storage(t)
    assert view.dtype is dtype
    if expected.size > 1:
        assert view.strides == tuple(
            s for s, n in zip(element_strides(expected), expected.shape, strict=True)
        ) or all(n <= 1 for n in expected.shape)
    assert view == t.slice(index)
    assert view.to_le_bytes() == expected.tobytes()


@given(shapes(min_rank=1), hs.data())
def test_view_offset_and_strides_address_storage(
    dims: tuple[int, ...], data: hs.DataObject
) -> None:
    count = int(np.prod(dims))
    t = st.Tensor.from_numpy(np.arange(count, dtype=np.int64).reshape(dims))
    view = t[data.draw(basic_indices(dims))]
    storage = np.arange(count, dtype=np.int64)
    for flat in range(min(view.numel, 20)):
        multi = np.unravel_index(flat, view.shape) if view.ndim else ()
        position = view.offset + sum(i * s for i, s in zip(multi, view.strides, strict=True))
        assert view.get(tuple(int(i) for i in multi)).value == storage[position]


def test_views_of_views_share_storage() -> None:
    t = st.Tensor.from_numpy(np.arange(60, dtype=np.float32).reshape(3, 4, 5))
    v = t[1:, ::-1][:, 1, None, ::2].transpose()
    assert v.shares_storage(t)
    expected = np.arange(60, dtype=np.float32).reshape(3, 4, 5)[1:, ::-1][:, 1, None, ::2].T
    assert v.tolist() == expected.tolist()
    assert v.strides == element_strides(expected)
    other = st.Tensor.from_numpy(np.arange(60, dtype=np.float32))
    assert not other.shares_storage(t)
    assert t[0:0].shares_storage(t)
    assert not t.shares_storage(t.numpy())


def test_all_int_index_gives_rank_0_view() -> None:
    t = st.Tensor.from_numpy(np.arange(6, dtype=np.int8).reshape(2, 3))
    v = t[1, 2]
    assert v.ndim == 0
    assert v.shares_storage(t)
    assert v.offset == 5
    assert t[np.int64(1)].shape == (3,)


BAD_INDICES: list[Any] = [
    2,
    -3,
    (0, 3),
    (slice(None, None, 0),),
    (0, 0, 0),
    (Ellipsis, Ellipsis),
    True,
    (0, False),
    [0, 1],
    np.array([0]),
    np.array(0),
    1.0,
    "a",
    (slice(0.5, None),),
    {0: 1},
    2**70,
]


@pytest.mark.parametrize("index", BAD_INDICES, ids=repr)
def test_bad_indices_are_indexing_errors(index: Any) -> None:
    t = st.Tensor.from_numpy(np.arange(6, dtype=np.int8).reshape(2, 3))
    before = t.to_le_bytes()
    with pytest.raises(st.IndexingError):
        t[index]
    with pytest.raises(st.IndexingError):
        t.slice(index)
    assert t.to_le_bytes() == before


def test_too_many_new_axes_is_a_limit_error() -> None:
    t = st.Tensor.zeros(F32, (2,))
    assert t[(None,) * 31].ndim == 32
    with pytest.raises(st.LimitError):
        t[(None,) * 32]
    with pytest.raises(st.LimitError):
        t[(None,) * 70]


@given(shapes(), hs.data())
def test_transpose_matches_numpy(dims: tuple[int, ...], data: hs.DataObject) -> None:
    array = np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims)
    t = st.Tensor.from_numpy(array)
    axes = data.draw(hs.permutations(range(len(dims))))
    negative = [a - len(dims) if data.draw(hs.booleans()) else a for a in axes]
    for got, expected in ((t.transpose(), array.T), (t.transpose(negative), array.transpose(axes))):
        assert got.tolist() == expected.tolist()
        assert got.shares_storage(t)
        if expected.size > 1:
            assert got.shape == expected.shape
    if len(dims) >= 2:
        assert t.mT.tolist() == np.swapaxes(array, -1, -2).tolist()
        assert t.mT.shares_storage(t)


@pytest.mark.parametrize(
    ("axes", "error"),
    [
        ((0, 0), st.ShapeError),
        ((0,), st.ShapeError),
        ((0, 2), st.IndexingError),
        ((0, -3), st.IndexingError),
        ((0, 1.0), st.IndexingError),
        (5, st.ShapeError),
    ],
)
def test_transpose_errors(axes: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        st.Tensor.zeros(F32, (2, 3)).transpose(axes)


def test_mT_needs_rank_2() -> None:
    with pytest.raises(st.ShapeError):
        _ = st.Tensor.zeros(F32, (3,)).mT


@given(shapes(), hs.data())
def test_reshape_matches_numpy(dims: tuple[int, ...], data: hs.DataObject) -> None:
    count = int(np.prod(dims))
    array = np.arange(count, dtype=np.int16).reshape(dims)
    t = st.Tensor.from_numpy(array)
    flip = data.draw(hs.booleans()) and len(dims) > 0
    if flip:
        t, array = t[::-1], array[::-1]
    targets = [(count,), (1, count)] + ([(-1,), (count, 1, -1)] if count else [])
    target = data.draw(hs.sampled_from(targets))
    got = t.reshape(target)
    expected = array.reshape(target)
    assert got.tolist() == expected.tolist()
    assert got.is_contiguous
    assert got.shares_storage(t) == t.is_contiguous
    assert t.reshape(*target) == got


def test_reshape_errors() -> None:
    t = st.Tensor.zeros(F32, (2, 3))
    with pytest.raises(st.ShapeError, match="6 elements cannot become shape"):
        t.reshape(4, 2)
    with pytest.raises(st.ShapeError):
        t.reshape(-1, -1)
    with pytest.raises(st.ShapeError):
        t.reshape(2.0, 3)
    with pytest.raises(st.ShapeError):
        t.reshape((True, 6))
    with pytest.raises(st.LimitError):
        st.Tensor.zeros(F32, (0,)).reshape(0, 2**40)
    with pytest.raises(st.LimitError):
        t.reshape((1,) * 31 + (2, 3))


@given(shapes(max_rank=3), shapes(max_rank=4))
def test_broadcast_to_matches_numpy(source: tuple[int, ...], target: tuple[int, ...]) -> None:
    array = np.arange(int(np.prod(source)), dtype=np.int8).reshape(source)
    t = st.Tensor.from_numpy(array)
    try:
        expected = np.broadcast_to(array, target)
    except ValueError:
        with pytest.raises(st.ShapeError):
            t.broadcast_to(target)
        return
    got = t.broadcast_to(target)
    assert got.tolist() == expected.tolist()
    assert got.is_contiguous
    assert 0 not in got.strides or got.numel <= 1 or 1 in got.shape


def test_contiguous() -> None:
    t = st.Tensor.from_numpy(np.arange(6, dtype=np.int8).reshape(2, 3))
    assert t.contiguous() is t
    c = t.mT.contiguous()
    assert c.is_contiguous and not c.shares_storage(t)
    assert c.tolist() == [[0, 3], [1, 4], [2, 5]]


# -- immutability ---------------------------------------------------------------------


def test_setitem_points_at_functional_updates() -> None:
    t = st.Tensor.zeros(F32, (2,))
    with pytest.raises(TypeError, match=r"with_slice.*at\["):
        t[0] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        del t[0]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["dtype", "shape", "strides", "offset", "_array", "anything"])
def test_attributes_cannot_be_assigned(name: str) -> None:
    t = st.Tensor.zeros(F32, (2,))
    with pytest.raises(AttributeError):
        setattr(t, name, None)
    with pytest.raises(AttributeError):
        delattr(t, name)
    assert t.shape == (2,)


def test_numpy_view_is_read_only() -> None:
    for t in (st.Tensor.zeros(F32, (2, 2)), st.Tensor.from_le_bytes(F32, (1,), b"\0" * 4)):
        array = t.numpy()
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 1
        with pytest.raises(ValueError):
            array.flags.writeable = True


def test_pickle_and_copy() -> None:
    t = st.Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))[::-1, 1:3]
    again = pickle.loads(pickle.dumps(t))
    assert again == t
    assert again.is_contiguous
    assert copy.copy(t) == t and copy.deepcopy(t) == t
    for dtype in ALL_DTYPES:
        z = st.Tensor.full(dtype, (2,), 1)
        assert pickle.loads(pickle.dumps(z)) == z
    with pytest.raises(TypeError):
        hash(t)


def test_structural_equality() -> None:
    a = st.Tensor.from_scalars(F32, [3], ["nan", "-0.0", "1"])
    assert a == st.Tensor.from_scalars(F32, [3], ["-nan", "-0.0", "1"])
    assert a != st.Tensor.from_scalars(F32, [3], ["nan", "0.0", "1"])
    assert a != st.Tensor.from_scalars(st.DType.F64, [3], ["nan", "-0.0", "1"])
    assert a != a.reshape(1, 3)
    assert (a == 1) is False
