"""GGUF: files written by the ``gguf`` package's writer load equal (metadata of every type,
1-D to 4-D tensors, zero-copy dtypes, Q8_0/Q4_0 dequantized exactly as gguf.quants does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import gguf.quants as gq
import numpy as np
import pytest

import strided as st

Q = gguf.GGMLQuantizationType


def write_gguf(path: Path, build: Any, alignment: int | None = None) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    build(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


METADATA: list[tuple[str, str, Any]] = [
    ("add_uint8", "t.u8", 200),
    ("add_int8", "t.i8", -100),
    ("add_uint16", "t.u16", 60000),
    ("add_int16", "t.i16", -30000),
    ("add_uint32", "t.u32", 4_000_000_000),
    ("add_int32", "t.i32", -2_000_000_000),
    ("add_float32", "t.f32", 0.1),
    ("add_uint64", "t.u64", 2**64 - 1),
    ("add_int64", "t.i64", -(2**63)),
    ("add_float64", "t.f64", 0.1),
    ("add_bool", "t.bool", True),
    ("add_bool", "t.false", False),
    ("add_string", "t.str", "héllo, wörld ✓"),
    ("add_array", "t.ints", [1, -2, 3]),
    ("add_array", "t.floats", [0.5, -1.25]),
    ("add_array", "t.strs", ["a", "", "ßß"]),
    ("add_array", "t.bools", [True, False, True]),
    ("add_array", "t.nested", [[1, 2], [3]]),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    tensors = {
        "f32_1d": rng.standard_normal(7).astype(np.float32),
        "f16_2d": rng.standard_normal((3, 5)).astype(np.float16),
        "f64_3d": rng.standard_normal((2, 3, 4)),
        "i8_4d": rng.integers(-128, 128, (2, 1, 3, 2)).astype(np.int8),
        "i16": rng.integers(-(2**15), 2**15, (4, 3)).astype(np.int16),
        "i32": rng.integers(-(2**31), 2**31, (5,)).astype(np.int32),
        "i64": rng.integers(-(2**62), 2**62, (2, 2)).astype(np.int64),
    }

    def build(writer: gguf.GGUFWriter) -> None:
        for method, key, value in METADATA:
            getattr(writer, method)(key, value)
        for name, array in tensors.items():
            writer.add_tensor(name, array)
        bf16 = rng.integers(0, 2**16, (3, 2)).astype(np.uint16)
        tensors["bf16"] = bf16
        writer.add_tensor("bf16", bf16, raw_dtype=Q.BF16)

    path = write_gguf(tmp_path_factory.mktemp("gguf") / "model.gguf", build)
    return path, tensors


def test_metadata_of_every_type(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    handle = st.open_gguf(model[0])
    assert handle.version == 3
    meta = handle.metadata
    assert meta["general.architecture"] == "llama"
    for _, key, value in METADATA:
        if key == "t.f32":
            assert meta[key] == float(np.float32(value))  # the exact F32 value
        elif key == "t.floats":
            assert meta[key] == [0.5, -1.25]
        else:
            assert meta[key] == value and type(meta[key]) is type(value), key
    assert type(meta["t.bools"][0]) is bool
    # A fresh copy each time: mutating it changes nothing.
    meta["t.ints"].append(99)
    meta["t.nested"][0].append(99)
    assert handle.metadata["t.ints"] == [1, -2, 3]
    assert handle.metadata["t.nested"] == [[1, 2], [3]]


def test_tensors_load_equal_and_zero_copy(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, tensors = model
    handle = st.open_gguf(path)
    assert handle.keys() == list(tensors)  # file order
    assert len(handle) == len(tensors) and list(handle) == handle.keys()
    first = handle.get("f32_1d")
    for name, array in tensors.items():
        t = handle.get(name)
        if name == "bf16":
            assert t.dtype is st.DType.BF16
            assert t.to_le_bytes() == array.tobytes()
            assert handle.info(name) == ("BF16", st.Shape(array.shape))
        else:
            assert t.dtype is st.DType.from_numpy(array.dtype)
            np.testing.assert_array_equal(t.numpy(), array)
            assert handle.info(name)[1] == array.shape
        assert t.shares_storage(first)
        assert not t.numpy().flags.writeable
        assert t.storage_byte_len == path.stat().st_size
        assert handle.get(name, dequantize=True) == t  # no effect on plain types
    assert "i32" in handle and "nope" not in handle and 1 not in handle
    with pytest.raises(st.IndexingError, match="no tensor named"):
        handle.get("nope")
    assert "version 3" in repr(handle) and handle.path == str(path)


@pytest.mark.parametrize("kind", [Q.Q8_0, Q.Q4_0])
@pytest.mark.parametrize("shape", [(64,), (3, 32), (2, 2, 96), (2, 1, 2, 64)])
def test_quantized_tensors_dequantize_like_gguf(
    tmp_path: Path, kind: Any, shape: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(4)
    values = (rng.standard_normal(shape) * 3).astype(np.float32)
    blocks = gq.quantize(values, kind)
    path = write_gguf(tmp_path / "q.gguf", lambda w: w.add_tensor("q", blocks, raw_dtype=kind))
    handle = st.open_gguf(path)
    assert handle.info("q") == (kind.name, st.Shape(shape))
    with pytest.raises(st.DTypeError, match="dequantize=True"):
        handle.get("q")
    t = handle.get("q", dequantize=True)
    expected = gq.dequantize(blocks, kind)
    assert t.dtype is st.DType.F32 and t.shape == shape
    assert t.to_le_bytes() == expected.astype(np.float32).tobytes()


def test_large_quantized_tensor_spans_several_chunks(tmp_path: Path) -> None:
    values = np.random.default_rng(5).standard_normal((3, 32 * 50_000)).astype(np.float32)
    blocks = gq.quantize(values, Q.Q8_0)
    path = write_gguf(tmp_path / "big.gguf", lambda w: w.add_tensor("q", blocks, raw_dtype=Q.Q8_0))
    got = st.open_gguf(path).get("q", dequantize=True)
    assert got.to_le_bytes() == gq.dequantize(blocks, Q.Q8_0).tobytes()


@pytest.mark.parametrize("kind", [Q.Q4_1, Q.Q5_0, Q.Q5_1])
def test_other_known_types_are_listed_but_not_read(tmp_path: Path, kind: Any) -> None:
    blocks = gq.quantize(np.ones((2, 32), np.float32), kind)
    path = write_gguf(tmp_path / "o.gguf", lambda w: w.add_tensor("o", blocks, raw_dtype=kind))
    handle = st.open_gguf(path)
    assert handle.info("o") == (kind.name, st.Shape((2, 32)))
    for dequantize in (False, True):
        with pytest.raises(st.DTypeError, match=kind.name):
            handle.get("o", dequantize=dequantize)


def test_custom_alignment_is_honoured(tmp_path: Path) -> None:
    arrays = {"a": np.arange(3, dtype=np.float32), "b": np.arange(5, dtype=np.int16)}

    def build(writer: gguf.GGUFWriter) -> None:
        for name, array in arrays.items():
            writer.add_tensor(name, array)

    path = write_gguf(tmp_path / "a.gguf", build, alignment=256)
    handle = st.open_gguf(path)
    assert handle.metadata["general.alignment"] == 256
    for name, array in arrays.items():
        t = handle.get(name)
        np.testing.assert_array_equal(t.numpy(), array)
        assert t.offset * t.dtype.itemsize % 256 == 0


def test_version_2_files_load(tmp_path: Path) -> None:
    # Version 2 has the same little-endian layout as 3 (u64 counts and lengths).
    path = write_gguf(
        tmp_path / "v.gguf", lambda w: w.add_tensor("x", np.arange(4, dtype=np.float32))
    )
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    handle = st.open_gguf(path)
    assert handle.version == 2
    assert handle.get("x").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_file_without_tensors(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "n.gguf", lambda w: w.add_uint32("k", 1))
    handle = st.open_gguf(path)
    assert handle.keys() == [] and handle.metadata["k"] == 1


def test_path_errors_are_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        st.open_gguf(tmp_path / "missing.gguf")
    with pytest.raises(IsADirectoryError):
        st.open_gguf(tmp_path)
