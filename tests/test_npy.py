""".npy: files NumPy writes load equal (C and Fortran order, big-endian, 0-d, empty, every
version), zero-copy where the bytes allow it; save_npy writes what numpy.load reads."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from tests.strategies import arrays, shapes

NUMPY_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64,
]  # fmt: skip


def sample(np_dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape)) if shape else 1
    raw = rng.integers(0, 256, size=count * np.dtype(np_dtype).itemsize, dtype=np.uint8)
    if np.dtype(np_dtype) == np.bool_:
        return (raw % 2 == 1).reshape(shape)
    return raw.view(np_dtype).reshape(shape)


def same_bits(t: st.Tensor, array: np.ndarray) -> bool:
    expected = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
    return t.shape == array.shape and t.to_le_bytes() == expected.tobytes()


@pytest.mark.parametrize("np_dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
def test_c_order_files_load_zero_copy(
    tmp_path: Path, np_dtype: Any, shape: tuple[int, ...]
) -> None:
    array = sample(np_dtype, shape)
    path = tmp_path / "a.npy"
    np.save(path, array)
    t = st.load_npy(path)
    assert t.dtype is st.DType.from_numpy(np_dtype)
    assert same_bits(t, array)
    assert t.is_contiguous and not t.numpy().flags.writeable
    assert t.storage_byte_len == path.stat().st_size  # a view of the mapped file


@pytest.mark.parametrize("np_dtype", [np.int16, np.float32, np.uint64, np.bool_])
def test_fortran_order_gives_logical_values_without_copying(tmp_path: Path, np_dtype: Any) -> None:
    array = np.asfortranarray(sample(np_dtype, (2, 3, 4), seed=1))
    path = tmp_path / "f.npy"
    np.save(path, array)
    t = st.load_npy(path)
    assert same_bits(t, array)
    assert not t.is_contiguous
    assert t.storage_byte_len == path.stat().st_size
    assert t.tolist() == array.tolist()


@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("np_dtype", [">i2", ">u4", ">f2", ">f4", ">f8", ">i8"])
def test_big_endian_is_converted(tmp_path: Path, np_dtype: str, fortran: bool) -> None:
    array = sample(np.dtype(np_dtype).newbyteorder("<"), (3, 4), seed=2).astype(np_dtype)
    if fortran:
        array = np.asfortranarray(array)
    path = tmp_path / "b.npy"
    np.save(path, array)
    t = st.load_npy(path)
    assert t.dtype is st.DType.from_numpy(np_dtype)
    assert same_bits(t, array)
    assert t.is_contiguous and t.storage_byte_len == array.nbytes  # a converted copy


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_every_format_version(tmp_path: Path, version: tuple[int, int]) -> None:
    array = np.arange(10, dtype=np.float32).reshape(2, 5)
    path = tmp_path / "v.npy"
    with open(path, "wb") as file:
        np.lib.format.write_array(file, array, version=version)
    np.testing.assert_array_equal(st.load_npy(path).numpy(), array)


# The ml_dtypes types: NumPy would write them as opaque void types.
NO_NPY_NAME = ["BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"]


@settings(max_examples=40, deadline=None)
@given(data=hs.data())
def test_views_round_trip_through_save_npy(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from([d for d in st.DType if d.name not in NO_NPY_NAME]))
    shape = data.draw(shapes(min_rank=0, max_rank=3, max_dim=4))
    tensor = st.Tensor.from_numpy(data.draw(arrays(dtype, shape)))
    view = tensor
    if tensor.ndim and data.draw(hs.booleans()):
        view = tensor.transpose()
    if view.ndim and view.shape[0] > 1 and data.draw(hs.booleans()):
        view = view[::-2]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.npy")
        st.save_npy(path, view)
        loaded = np.load(path, allow_pickle=False)
        assert loaded.dtype == view.dtype.numpy and loaded.shape == view.shape
        assert loaded.tobytes() == view.to_le_bytes()
        assert st.load_npy(path) == view
        header_end = 10 + int.from_bytes(Path(path).read_bytes()[8:10], "little")
        assert header_end % 64 == 0  # data aligned as NumPy aligns it


@pytest.mark.parametrize("dtype", NO_NPY_NAME)
def test_dtypes_without_an_npy_name_are_refused(tmp_path: Path, dtype: str) -> None:
    with pytest.raises(st.DTypeError, match=dtype):
        st.save_npy(tmp_path / "x.npy", st.Tensor.full(dtype, (2,), 1))
    assert list(tmp_path.iterdir()) == []


def test_save_npy_refuses_non_tensors_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "keep.npy"
    st.save_npy(target, st.tensor([1, 2], "I32"))
    before = target.read_bytes()
    with pytest.raises(st.DTypeError):
        st.save_npy(target, np.zeros(3))  # type: ignore[arg-type]
    assert target.read_bytes() == before and len(list(tmp_path.iterdir())) == 1


def test_save_npy_overwrites_atomically(tmp_path: Path) -> None:
    target = tmp_path / "x.npy"
    st.save_npy(target, st.tensor([1, 2], "I32"))
    st.save_npy(target, st.tensor([[1.5]], "F64"))
    np.testing.assert_array_equal(np.load(target), [[1.5]])
    assert [p.name for p in tmp_path.iterdir()] == ["x.npy"]


def test_path_errors_are_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        st.load_npy(tmp_path / "missing.npy")
    with pytest.raises(IsADirectoryError):
        st.load_npy(tmp_path)
    with pytest.raises(FileNotFoundError):
        st.save_npy(tmp_path / "no" / "x.npy", st.tensor([1], "I8"))
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(IsADirectoryError):
        st.save_npy(tmp_path / "folder.npy", st.tensor([1], "I8"))
    assert [p.name for p in tmp_path.iterdir()] == ["folder.npy"]  # no temporary left


def test_paths_may_be_bytes_but_not_other_objects(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    st.save_npy(os.fsencode(path), st.tensor([1, 2], st.DType.I8))
    assert st.load_npy(os.fsencode(path)).tolist() == [1, 2]
    for bad in (3, None, 1.5):
        with pytest.raises(st.FormatError, match="expected a path"):
            st.load_npy(bad)  # type: ignore[arg-type]
        with pytest.raises(st.FormatError, match="expected a path"):
            st.open_safetensors(bad)  # type: ignore[arg-type]
        with pytest.raises(st.FormatError, match="expected a path"):
            st.open_gguf(bad)  # type: ignore[arg-type]
