"""safetensors: interop with the reference library both ways, zero-copy loading, FP8/BF16,
sharded checkpoints, strided views through the writer, and atomic saving."""

from __future__ import annotations

import json
import os
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as sn
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from tests.strategies import arrays, shapes

NUMPY_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64,
]  # fmt: skip


def write_raw(path: Path, header: dict[str, Any] | bytes, data: bytes = b"") -> Path:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def spec(dtype: str, array: np.ndarray) -> Any:
    return safetensors.TensorSpec(
        dtype=dtype, shape=list(array.shape), data_ptr=array.ctypes.data, data_len=array.nbytes
    )


def logical(t: st.Tensor) -> np.ndarray:
    return np.array(t.numpy())


# -- interop: the reference writes, strided reads ------------------------------------------


@pytest.mark.parametrize("np_dtype", NUMPY_DTYPES)
def test_reference_files_load_equal(tmp_path: Path, np_dtype: Any) -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, size=2 * 3 * 4 * np.dtype(np_dtype).itemsize, dtype=np.uint8)
    values = (
        raw.view(np_dtype).reshape(2, 3, 4)
        if np_dtype is not np.bool_
        else raw.reshape(2, 3, 4) % 2 == 1
    )
    tensors = {
        "w": values,
        "scalar": np.array(7, dtype=np_dtype),
        "empty": np.zeros((0, 5), np_dtype),
    }
    path = tmp_path / "ref.safetensors"
    sn.save_file(tensors, str(path), metadata={"format": "np", "ü": "ß"})
    loaded = st.load_safetensors(path)
    assert sorted(loaded) == sorted(tensors)
    for name, array in tensors.items():
        t = loaded[name]
        assert t.dtype is st.DType.from_numpy(np_dtype)
        assert t.shape == array.shape
        assert t.to_le_bytes() == array.tobytes()
    assert st.open_safetensors(path).metadata == {"format": "np", "ü": "ß"}


@pytest.mark.parametrize(
    ("ref_name", "dtype"),
    [
        ("bfloat16", st.DType.BF16),
        ("float8_e4m3fn", st.DType.F8_E4M3),
        ("float8_e5m2", st.DType.F8_E5M2),
    ],
)
def test_bf16_and_fp8_written_by_the_byte_api_load_zero_copy(
    tmp_path: Path, ref_name: str, dtype: st.DType
) -> None:
    bits = (
        np.arange(256, dtype=np.uint8)
        if dtype.itemsize == 1
        else np.arange(0, 65536, 97, dtype=np.uint16)
    )
    array = bits.view(dtype.numpy)
    path = tmp_path / "x.safetensors"
    safetensors.serialize_file({"x": spec(ref_name, array)}, str(path))
    loaded = st.load_safetensors(path)["x"]
    assert loaded.dtype is dtype
    assert loaded.to_le_bytes() == array.tobytes()
    assert not loaded.numpy().flags.writeable
    assert loaded.storage_byte_len == path.stat().st_size  # a view of the whole mapping
    # And back: strided writes it, the reference reads the same bytes.
    out = tmp_path / "y.safetensors"
    st.save_safetensors(out, {"x": loaded})
    ((name, info),) = safetensors.deserialize(out.read_bytes())
    assert (name, info["dtype"], info["shape"]) == ("x", dtype.name, [array.size])
    assert bytes(info["data"]) == array.tobytes()


def test_tensors_of_one_file_share_the_mapping_and_are_read_only(tmp_path: Path) -> None:
    path = tmp_path / "a.safetensors"
    sn.save_file({"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 2))}, str(path))
    loaded = st.load_safetensors(path)
    assert loaded["a"].shares_storage(loaded["b"])
    for t in loaded.values():
        assert not t.numpy().flags.writeable
        with pytest.raises(ValueError):
            t.numpy()[...] = 0
        assert t.storage_byte_len == path.stat().st_size


def test_unaligned_offsets_give_the_right_values(tmp_path: Path) -> None:
    data = b"\x07" + np.array([1.5, -2.25, 3.0], "<f4").tobytes() + np.array([9], "<i8").tobytes()
    header = {
        "u": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "f": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]},
        "i": {"dtype": "I64", "shape": [], "data_offsets": [13, 21]},
    }
    path = write_raw(
        tmp_path / "u.safetensors", b'{"__metadata__":{}, ' + json.dumps(header).encode()[1:], data
    )
    loaded = st.load_safetensors(path)
    assert loaded["f"].tolist() == [1.5, -2.25, 3.0]
    assert loaded["i"].shape == () and loaded["i"].item().value == 9
    assert loaded["u"].tolist() == [7]


def test_header_may_be_padded_with_trailing_spaces(tmp_path: Path) -> None:
    header = b'{"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}}' + b" " * 9
    path = write_raw(tmp_path / "p.safetensors", header, b"\x01\x00\x02\x00")
    assert st.load_safetensors(path)["a"].tolist() == [1, 2]


def test_empty_file_of_tensors(tmp_path: Path) -> None:
    path = tmp_path / "e.safetensors"
    st.save_safetensors(path, {})
    assert st.load_safetensors(path) == {}
    assert sn.load_file(str(path)) == {}
    assert st.open_safetensors(path).metadata == {}


# -- interop: strided writes, the reference reads ----------------------------------------------


def test_saved_files_are_byte_identical_to_the_reference_writer(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    arrays_by_name = {
        f"t{i}_{np.dtype(d).name}": rng.integers(0, 2, size=(i + 1, 3)).astype(d)
        for i, d in enumerate(NUMPY_DTYPES)
    }
    arrays_by_name["zero_d"] = np.array(1.25, np.float32)
    path = tmp_path / "s.safetensors"
    st.save_safetensors(
        path,
        {k: st.Tensor.from_numpy(v) for k, v in arrays_by_name.items()},
        metadata={"format": "pt"},
    )
    assert path.read_bytes() == sn.save(arrays_by_name, metadata={"format": "pt"})
    loaded = sn.load_file(str(path))
    for name, array in arrays_by_name.items():
        np.testing.assert_array_equal(loaded[name], array)
    with safetensors.safe_open(str(path), "np") as handle:
        assert handle.metadata() == {"format": "pt"}


def test_saved_order_matches_the_reference_for_bf16_and_fp8(tmp_path: Path) -> None:
    parts = {
        "a": np.arange(4, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "b": np.arange(4, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
        "c": np.arange(4, dtype=np.uint16).view(ml_dtypes.bfloat16),
        "d": np.arange(4, dtype=np.float16),
        "e": np.arange(4, dtype=np.int8),
        "f": np.zeros(4, dtype=np.bool_),
        "g": np.arange(4, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu),
    }
    names = {"a": "float8_e4m3fn", "b": "float8_e5m2", "c": "bfloat16", "d": "float16"}
    names |= {"e": "int8", "f": "bool", "g": "float8_e8m0fnu"}
    reference = safetensors.serialize({k: spec(names[k], v) for k, v in parts.items()})
    path = tmp_path / "o.safetensors"
    st.save_safetensors(path, {k: st.Tensor.from_numpy(v) for k, v in parts.items()})
    assert path.read_bytes() == bytes(reference)


def test_views_round_trip_through_the_writer(tmp_path: Path) -> None:
    base = st.Tensor.from_numpy(np.arange(60, dtype=np.int32).reshape(3, 4, 5))
    views = {
        "transposed": base.transpose(),
        "reversed": base[::-1, :, ::-2],
        "sliced": base[1:, 2, 1:4],
        "mt": base.mT,
        "rank0": base[2, 3, 4],
    }
    path = tmp_path / "v.safetensors"
    st.save_safetensors(path, views)
    reference = sn.load_file(str(path))
    ours = st.load_safetensors(path)
    for name, view in views.items():
        np.testing.assert_array_equal(reference[name], np.asarray(view.numpy()))
        assert ours[name] == view


@settings(max_examples=40, deadline=None)
@given(data=hs.data())
def test_random_views_of_every_dtype_round_trip(data: hs.DataObject) -> None:
    import tempfile

    dtype = data.draw(hs.sampled_from(list(st.DType)))
    shape = data.draw(shapes(min_rank=1, max_rank=3, max_dim=4))
    array = data.draw(arrays(dtype, shape))
    tensor = st.Tensor.from_numpy(array)
    view = tensor.transpose() if data.draw(hs.booleans()) else tensor
    if view.ndim and view.shape[0] > 1 and data.draw(hs.booleans()):
        view = view[::-1]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r.safetensors")
        st.save_safetensors(path, {"v": view})
        loaded = st.load_safetensors(path)["v"]
        assert loaded.to_le_bytes() == view.to_le_bytes()
        assert loaded.shape == view.shape and loaded.dtype is view.dtype
        ((_, info),) = safetensors.deserialize(Path(path).read_bytes())
        assert bytes(info["data"]) == np.ascontiguousarray(view.numpy()).tobytes()


def test_large_strided_view_is_written_in_pieces(tmp_path: Path) -> None:
    # Bigger than one write chunk (4 MiB), and a single row bigger than a chunk too.
    array = np.arange(3 * (1 << 20) * 2, dtype=np.float32).reshape(3, 1 << 21)
    view = st.Tensor.from_numpy(array)[:, ::-1]
    wide = st.Tensor.from_numpy(array.reshape(-1))[::-2]
    path = tmp_path / "big.safetensors"
    st.save_safetensors(path, {"view": view, "wide": wide})
    loaded = st.load_safetensors(path)
    np.testing.assert_array_equal(loaded["view"].numpy(), array[:, ::-1])
    np.testing.assert_array_equal(loaded["wide"].numpy(), array.reshape(-1)[::-2])


# -- the lazy handle -------------------------------------------------------------------------


def test_open_safetensors_is_lazy_and_complete(tmp_path: Path) -> None:
    path = tmp_path / "l.safetensors"
    sn.save_file(
        {"b": np.arange(4, dtype=np.float64), "a": np.arange(3, dtype=np.int16)}, str(path)
    )
    handle = st.open_safetensors(path)
    assert handle.keys() == ["b", "a"]  # data order: the reference put F64 first
    assert list(handle) == handle.keys() and len(handle) == 2
    assert "a" in handle and "zz" not in handle and 3 not in handle
    assert handle.info("a") == ("I16", st.Shape((3,)))
    assert handle.metadata == {}
    assert handle.get("a").tolist() == [0, 1, 2]
    assert handle.path == str(path)
    assert "2 tensors" in repr(handle)
    for missing in ("zz", 3, None):
        with pytest.raises(st.IndexingError, match="no tensor named"):
            handle.get(missing)  # type: ignore[arg-type]
    handle.metadata["x"] = "y"
    assert handle.metadata == {}


def test_inspect_goes_through_the_tensor(tmp_path: Path) -> None:
    if not hasattr(st.Tensor, "inspect"):
        pytest.skip("Tensor.inspect not available yet")
    path = tmp_path / "i.safetensors"
    sn.save_file({"a": np.arange(10, dtype=np.float32)}, str(path))
    handle = st.open_safetensors(path)
    found = handle.inspect("a")
    assert found.numel == 10 and found.max.value == 9.0
    options = st.TensorInspectionOptions(max_samples=3)
    assert handle.inspect("a", options).sampled == 3


@pytest.mark.parametrize("copy", [False, True])
def test_inspect_equals_the_inspection_of_what_get_gives(tmp_path: Path, copy: bool) -> None:
    path = tmp_path / "i.safetensors"
    values = {"a": np.arange(60, dtype=np.float32).reshape(6, 10), "b": np.arange(7) % 2 == 0}
    sn.save_file(values, str(path))
    options = st.TensorInspectionOptions(max_samples=5)
    with st.open_safetensors(path, copy=copy) as handle:
        for name in values:
            found = handle.inspect(name, options)
            assert found == handle.get(name).inspect(options)
            expected = values[name].nbytes if copy else path.stat().st_size
            assert found.storage_byte_len == expected
    big = tmp_path / "big.safetensors"
    sn.save_file({"w": np.ones(1 << 20, dtype=np.float32)}, str(big))
    with st.open_safetensors(big, copy=copy) as handle:
        tracemalloc.start()
        try:
            assert handle.inspect("w", options).max.value == 1.0
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < (1 << 20)  # the samples, not a copy of the 4 MiB tensor


@pytest.mark.parametrize(
    ("ref_name", "file_name"),
    [("float8_e4m3fnuz", "F8_E4M3FNUZ"), ("complex64", "C64"), ("float4_e2m1fn_x2", "F4")],
)
def test_dtypes_without_a_strided_equivalent(tmp_path: Path, ref_name: str, file_name: str) -> None:
    array = np.arange(16, dtype=np.uint8)
    path = tmp_path / "x.safetensors"
    # float4_e2m1fn_x2 counts pairs: 16 of them are 32 F4 values in the file.
    shape = {"C64": [2]}.get(file_name, [16])
    file_shape = {"F4": [32]}.get(file_name, shape)
    safetensors.serialize_file(
        {
            "odd": safetensors.TensorSpec(
                dtype=ref_name, shape=shape, data_ptr=array.ctypes.data, data_len=16
            ),
            "ok": spec("uint8", array),
        },
        str(path),
    )
    handle = st.open_safetensors(path)
    assert handle.info("odd") == (file_name, st.Shape(file_shape))
    assert handle.get("ok").tolist() == list(range(16))
    with pytest.raises(st.DTypeError, match=file_name):
        handle.get("odd")
    with pytest.raises(st.DTypeError, match="odd"):
        st.load_safetensors(path)


def test_path_errors_are_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        st.load_safetensors(tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError):
        st.open_safetensors(tmp_path / "missing.safetensors.index.json")


# -- sharded checkpoints ---------------------------------------------------------------------


def make_shards(folder: Path) -> dict[str, np.ndarray]:
    first = {
        "layer.0.w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "embed": np.ones(4, np.int64),
    }
    second = {"layer.1.w": np.full((3,), 2.5, np.float16)}
    sn.save_file(first, str(folder / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    sn.save_file(
        second, str(folder / "model-00002-of-00002.safetensors"), metadata={"format": "pt"}
    )
    weight_map = {name: "model-00001-of-00002.safetensors" for name in first}
    weight_map |= {name: "model-00002-of-00002.safetensors" for name in second}
    index = {"metadata": {"total_size": 62}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return first | second


@pytest.mark.parametrize("via", ["folder", "index"])
def test_sharded_checkpoint_opens_as_one_collection(tmp_path: Path, via: str) -> None:
    expected = make_shards(tmp_path)
    path = tmp_path if via == "folder" else tmp_path / "model.safetensors.index.json"
    loaded = st.load_safetensors(path)
    assert sorted(loaded) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(loaded[name].numpy(), array)
    handle = st.open_safetensors(path)
    assert handle.metadata == {"format": "pt"}
    assert handle.keys()[-1] == "layer.1.w"  # shard order


def _index(folder: Path, weight_map: Any, **extra: Any) -> Path:
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": weight_map, **extra}))
    return path


@pytest.mark.parametrize(
    "bad_file",
    ["../model-00001-of-00002.safetensors", "/etc/passwd", "sub/x.safetensors", "..", "", 3],
)
def test_index_refuses_paths_outside_its_folder(tmp_path: Path, bad_file: Any) -> None:
    make_shards(tmp_path)
    path = _index(tmp_path, {"embed": bad_file})
    with pytest.raises(st.FormatError, match="plain file name"):
        st.open_safetensors(path)


def test_index_errors(tmp_path: Path) -> None:
    make_shards(tmp_path)
    one = "model-00001-of-00002.safetensors"
    with pytest.raises(st.FormatError, match="does not exist"):
        st.open_safetensors(_index(tmp_path, {"embed": "nope.safetensors"}))
    with pytest.raises(st.FormatError, match="does not match weight_map"):
        st.open_safetensors(_index(tmp_path, {"embed": one}))  # layer.0.w not listed
    with pytest.raises(st.FormatError, match="does not match weight_map"):
        st.open_safetensors(_index(tmp_path, {"embed": one, "layer.0.w": one, "ghost": one}))
    with pytest.raises(st.FormatError, match="unexpected keys"):
        st.open_safetensors(_index(tmp_path, {"embed": one}, extra=1))
    with pytest.raises(st.FormatError, match="weight_map"):
        st.open_safetensors(_index(tmp_path, []))
    with pytest.raises(st.FormatError, match="weight_map"):
        st.open_safetensors(_index(tmp_path, {}))
    with pytest.raises(st.FormatError, match="metadata"):
        st.open_safetensors(_index(tmp_path, {"embed": one}, metadata=[1]))
    bad = tmp_path / "dup.safetensors.index.json"
    bad.write_text('{"weight_map": {"embed": "a", "embed": "b"}}')
    with pytest.raises(st.FormatError, match="more than once"):
        st.open_safetensors(bad)


def test_a_name_in_two_shards_is_an_error(tmp_path: Path) -> None:
    sn.save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "a.safetensors"))
    sn.save_file({"w": np.ones(2, np.float32)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(st.FormatError, match="appears in both"):
        st.open_safetensors(tmp_path)


def test_shards_that_disagree_on_metadata(tmp_path: Path) -> None:
    sn.save_file({"a": np.zeros(2)}, str(tmp_path / "a.safetensors"), metadata={"format": "pt"})
    sn.save_file({"b": np.zeros(2)}, str(tmp_path / "b.safetensors"), metadata={"format": "tf"})
    with pytest.raises(st.FormatError, match="disagree"):
        st.open_safetensors(tmp_path)


def test_folder_without_shards(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(st.FormatError, match=r"no \*\.safetensors"):
        st.load_safetensors(tmp_path)


# -- saving: validation and atomicity ----------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize(
    ("tensors", "metadata", "error"),
    [
        ({"": st.tensor([1], "I8")}, None, st.FormatError),
        ({"__metadata__": st.tensor([1], "I8")}, None, st.FormatError),
        ({3: st.tensor([1], "I8")}, None, st.FormatError),
        ({"\ud800": st.tensor([1], "I8")}, None, st.FormatError),
        ({"a": np.zeros(2)}, None, st.DTypeError),
        ([("a", st.tensor([1], "I8"))], None, st.FormatError),
        ({"a": st.tensor([1], "I8")}, {"k": 1}, st.FormatError),
        ({"a": st.tensor([1], "I8")}, {1: "v"}, st.FormatError),
        ({"a": st.tensor([1], "I8")}, {"k": "\udfff"}, st.FormatError),
        ({"a": st.tensor([1], "I8")}, "k=v", st.FormatError),
    ],
)
def test_save_refuses_bad_input_and_changes_nothing(
    tmp_path: Path, tensors: Any, metadata: Any, error: type[Exception]
) -> None:
    target = tmp_path / "keep.safetensors"
    st.save_safetensors(target, {"old": st.tensor([1, 2], "I32")})
    before = snapshot(tmp_path)
    with pytest.raises(error):
        st.save_safetensors(target, tensors, metadata)
    assert snapshot(tmp_path) == before


def test_a_failed_write_leaves_the_target_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strided.io import safetensors as module

    target = tmp_path / "keep.safetensors"
    st.save_safetensors(target, {"old": st.tensor([1, 2], "I32")})
    before = snapshot(tmp_path)

    def explode(file: Any, array: Any) -> None:
        file.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(module, "write_logical", explode)
    with pytest.raises(OSError, match="disk full"):
        st.save_safetensors(target, {"new": st.tensor([3], "I32")})
    assert snapshot(tmp_path) == before


def test_save_into_a_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        st.save_safetensors(tmp_path / "no" / "x.safetensors", {})


def test_saved_file_has_ordinary_permissions(tmp_path: Path) -> None:
    target = tmp_path / "m.safetensors"
    st.save_safetensors(target, {"a": st.tensor([1], "U8")})
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_saving_over_the_file_being_read(tmp_path: Path) -> None:
    # The old file stays mapped (the rename replaces the name, not the mapped inode).
    path = tmp_path / "same.safetensors"
    st.save_safetensors(path, {"a": st.Tensor.from_numpy(np.arange(6, dtype=np.int16))})
    loaded = st.load_safetensors(path)
    st.save_safetensors(path, {"a": loaded["a"][::-1], "b": loaded["a"]})
    again = st.load_safetensors(path)
    assert again["a"].tolist() == [5, 4, 3, 2, 1, 0]
    assert again["b"].tolist() == loaded["a"].tolist() == [0, 1, 2, 3, 4, 5]


def test_e8m0_files_of_the_reference_writer_read_zero_copy(tmp_path: Path) -> None:
    # Every bit pattern: the 255 powers of two and NaN. The reference's NumPy and
    # PyTorch loaders have no F8_E8M0 type, so its Rust parser (deserialize) checks ours.
    every = np.arange(256, dtype=np.uint8)
    path = tmp_path / "e8m0.safetensors"
    safetensors.serialize_file({"scales": spec("float8_e8m0fnu", every.reshape(16, 16))}, str(path))
    handle = st.open_safetensors(path)
    assert handle.info("scales") == ("F8_E8M0", st.Shape([16, 16]))
    scales = handle.get("scales")
    assert scales.dtype is st.DType.F8_E8M0 and scales.to_le_bytes() == every.tobytes()
    values = [float(s) for s in scales.to_scalars()]
    assert values[:255] == [2.0**k for k in range(-127, 128)] and values[255] != values[255]
    out = tmp_path / "out.safetensors"
    st.save_safetensors(out, {"scales": scales[::-1]})
    ((name, info),) = safetensors.deserialize(out.read_bytes())
    assert (name, info["dtype"], info["shape"]) == ("scales", "F8_E8M0", [16, 16])
    assert bytes(info["data"]) == every.reshape(16, 16)[::-1].tobytes()
