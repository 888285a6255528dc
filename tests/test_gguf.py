"""GGUF: files written by the ``gguf`` package's writer load equal (metadata of every type,
1-D to 4-D tensors, zero-copy dtypes, Q8_0/Q4_0 dequantized exactly as gguf.quants does)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import gguf
import gguf.quants as gq
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES

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


@pytest.mark.parametrize("kind", [Q.Q8_1, Q.Q8_K, Q.Q1_0])
def test_types_the_reference_cannot_decode_are_listed_but_not_read(
    tmp_path: Path, kind: Any
) -> None:
    block_size, block_bytes = GGML_QUANT_SIZES[kind]
    stored = np.arange(2 * block_bytes, dtype=np.uint8).reshape(2, block_bytes)
    path = write_gguf(tmp_path / "o.gguf", lambda w: w.add_tensor("o", stored, raw_dtype=kind))
    handle = st.open_gguf(path)
    assert handle.info("o") == (kind.name, st.Shape((2, block_size)))
    for dequantize in (False, True):
        with pytest.raises(st.DTypeError, match=kind.name):
            handle.get("o", dequantize=dequantize)
    with pytest.raises(st.DTypeError, match=kind.name):
        handle.inspect("o")
    assert handle.raw("o").to_le_bytes() == stored.tobytes()


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


# -- every block type, raw bytes, inspection, closing ---------------------------------

QUANTIZED = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_S",
    "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0",
    "TQ2_0", "MXFP4", "NVFP4",
)  # fmt: skip


def bits_of(values: Any) -> bytes:
    return np.ascontiguousarray(values, dtype=np.float32).tobytes()


@pytest.fixture(scope="module")
def every_type(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """One tensor of each dequantizable type, random blocks (NaN scales included)."""
    rng = np.random.default_rng(11)
    stored: dict[str, np.ndarray] = {}

    def build(writer: gguf.GGUFWriter) -> None:
        for name in QUANTIZED:
            block_size, block_bytes = GGML_QUANT_SIZES[Q[name]]
            rows = 3 if block_size == 256 else 5
            blocks = rng.integers(0, 256, (2, rows, 3 * block_bytes), dtype=np.uint8)
            stored[name] = blocks
            writer.add_tensor(name, blocks, raw_dtype=Q[name])
        writer.add_tensor("plain", np.arange(6, dtype=np.float32).reshape(2, 3))

    return write_gguf(tmp_path_factory.mktemp("types") / "all.gguf", build), stored


def test_every_type_dequantizes_bit_identically(
    every_type: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, stored = every_type
    handle = st.open_gguf(path)
    for name, blocks in stored.items():
        block_size = GGML_QUANT_SIZES[Q[name]][0]
        shape = (2, blocks.shape[1], 3 * block_size)
        assert handle.info(name) == (name, st.Shape(shape))
        with np.errstate(all="ignore"):
            expected = gq.dequantize(blocks, Q[name])
        with np.errstate(all="raise"):
            got = handle.get(name, dequantize=True)
        assert got.dtype is st.DType.F32 and got.shape == shape
        assert got.to_le_bytes() == bits_of(expected), name
        assert not got.numpy().flags.writeable


def test_raw_is_the_stored_bytes_zero_copy(
    every_type: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, stored = every_type
    handle = st.open_gguf(path)
    plain = handle.get("plain")
    for name, blocks in stored.items():
        raw = handle.raw(name)
        assert raw.dtype is st.DType.U8 and raw.shape == (blocks.size,)
        assert raw.to_le_bytes() == blocks.tobytes()
        assert raw.shares_storage(plain) and not raw.numpy().flags.writeable
    assert handle.raw("plain").to_le_bytes() == plain.to_le_bytes()
    copied = st.open_gguf(path, copy=True).raw("Q4_K")
    assert not copied.shares_storage(plain) and copied.to_le_bytes() == stored["Q4_K"].tobytes()


def assert_same_inspection(a: st.TensorInspection, b: st.TensorInspection) -> None:
    for field in a.__dataclass_fields__:
        left, right = getattr(a, field), getattr(b, field)
        if field == "mean" and left is not None and left != left:
            assert right is not None and right != right
        else:
            assert left == right, field


@pytest.mark.parametrize("strategy", ["head", "spread"])
@pytest.mark.parametrize("samples", [0, 1, 7, 300, 100_000])
def test_inspect_equals_inspecting_the_dequantized_tensor(
    every_type: tuple[Path, dict[str, np.ndarray]], strategy: str, samples: int
) -> None:
    handle = st.open_gguf(every_type[0])
    options = st.TensorInspectionOptions(samples, strategy)
    for name in (*QUANTIZED, "plain"):
        expected = handle.get(name, dequantize=True).inspect(options)
        assert_same_inspection(handle.inspect(name, options), expected)
    assert_same_inspection(handle.inspect("Q6_K"), handle.get("Q6_K", True).inspect())
    with pytest.raises(st.DTypeError, match="TensorInspectionOptions"):
        handle.inspect("Q6_K", {"max_samples": 3})  # type: ignore[arg-type]


def test_inspect_decodes_only_the_sampled_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strided.io.gguf import _ggml

    blocks = np.random.default_rng(3).integers(0, 256, (512, 4 * 210), dtype=np.uint8)
    path = write_gguf(tmp_path / "q.gguf", lambda w: w.add_tensor("q", blocks, raw_dtype=Q.Q6_K))
    handle = st.open_gguf(path)
    decoded: list[int] = []
    real = _ggml.decode_into

    def counting(kind: Any, chosen: np.ndarray, out: np.ndarray) -> None:
        decoded.append(chosen.shape[0])
        real(kind, chosen, out)

    monkeypatch.setattr(_ggml, "decode_into", counting)
    head = handle.inspect("q", st.TensorInspectionOptions(600, "head"))
    assert sum(decoded) == 3 and head.sampled == 600  # 600 values: 3 blocks of 256
    decoded.clear()
    spread = handle.inspect("q", st.TensorInspectionOptions(100, "spread"))
    assert sum(decoded) == 100 and spread.sampled == 100  # 2048 blocks, one per sample


def test_close_and_with(every_type: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, stored = every_type
    with st.open_gguf(path) as handle:
        kept = handle.get("Q8_0", dequantize=True)
        view = handle.get("plain")
        raw = handle.raw("Q4_0")
    for call in (
        lambda: handle.get("plain"),
        lambda: handle.raw("Q4_0"),
        lambda: handle.info("plain"),
        lambda: handle.inspect("Q8_0"),
    ):
        with pytest.raises(st.FormatError, match="closed"):
            call()
    handle.close()  # closing twice is fine
    assert handle.keys() == [] and "plain" not in handle
    # Tensors handed out stay valid: each holds the mapping it views.
    assert view.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert raw.to_le_bytes() == stored["Q4_0"].tobytes()
    with np.errstate(all="ignore"):
        assert kept.to_le_bytes() == bits_of(gq.dequantize(stored["Q8_0"], Q.Q8_0))


def test_metadata_types_match_the_reference_reader(
    model: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path = model[0]
    types = st.open_gguf(path).metadata_types
    for key, field in gguf.GGUFReader(str(path)).fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's header pseudo-fields
        names = [t.name for t in field.types]
        text = names[-1]
        for _ in names[:-1]:
            text = f"ARRAY[{text}]"
        assert types[key] == text, key
    assert types["t.f32"] == "FLOAT32" and types["t.nested"] == "ARRAY[ARRAY[INT32]]"
    assert types["t.strs"] == "ARRAY[STRING]" and types["t.bools"] == "ARRAY[BOOL]"


def test_f32_metadata_prints_as_its_shortest_text(tmp_path: Path) -> None:
    def build(writer: gguf.GGUFWriter) -> None:
        writer.add_float32("eps", 1e-05)
        writer.add_array("many", [0.1, 3.3])  # floats are written as FLOAT32

    path = write_gguf(tmp_path / "f.gguf", build)
    handle = st.open_gguf(path)
    eps = handle.metadata["eps"]
    assert eps == float(np.float32(1e-05)) and repr(eps) == "9.999999747378752e-06"
    assert handle.metadata_types["eps"] == "FLOAT32"
    assert str(st.Scalar(st.DType.F32, eps)) == "1e-05"
    assert handle.metadata_types["many"] == "ARRAY[FLOAT32]"
    assert [str(st.Scalar(st.DType.F32, v)) for v in handle.metadata["many"]] == ["0.1", "3.3"]


# -- hostile block claims ------------------------------------------------------------


def crafted(dims: list[int], type_id: int, data: bytes) -> bytes:
    name = b"t"
    info = len(name).to_bytes(8, "little") + name + len(dims).to_bytes(4, "little")
    info += b"".join(d.to_bytes(8, "little") for d in dims)
    info += type_id.to_bytes(4, "little") + (0).to_bytes(8, "little")
    head = b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + bytes(8) + info
    return head + bytes(-len(head) % 32) + data


@pytest.mark.parametrize(
    ("dims", "type_id", "data", "error", "message"),
    [
        ([255], 12, bytes(144), st.FormatError, "block size"),  # Q4_K: 255 % 256
        ([32, 2**20], 2, bytes(18 * 7), st.FormatError, "past the end"),  # Q4_0, 2**20 blocks
        ([2**25 * 256], 14, bytes(210), st.FormatError, "past the end"),  # Q6_K, 2**25 blocks
        ([256, 3], 23, bytes(136 * 3 - 1), st.FormatError, "past the end"),  # one byte short
        ([64, 2**20, 2**7], 40, bytes(36), st.FormatError, "past the end"),  # NVFP4, 2**33
        ([64, 2**20, 2**10], 40, bytes(36), st.LimitError, "MAX_ELEMENTS"),  # NVFP4, 2**36
    ],
)
def test_hostile_block_claims_allocate_nothing(
    tmp_path: Path,
    dims: list[int],
    type_id: int,
    data: bytes,
    error: type[Exception],
    message: str,
) -> None:
    path = tmp_path / "h.gguf"
    path.write_bytes(crafted(dims, type_id, data))
    tracemalloc.start()
    try:
        with pytest.raises(error, match=message):
            st.open_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_an_empty_quantized_tensor(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(crafted([256, 0], 14, b""))
    handle = st.open_gguf(path)
    got = handle.get("t", dequantize=True)
    assert got.shape == (0, 256) and got.dtype is st.DType.F32 and got.tolist() == []
    assert handle.raw("t").shape == (0,)
    assert_same_inspection(handle.inspect("t"), got.inspect())


def test_a_whole_tensor_at_the_end_of_the_file_reads(tmp_path: Path) -> None:
    blocks = np.random.default_rng(1).integers(0, 256, (3, 136), dtype=np.uint8)
    path = tmp_path / "end.gguf"
    path.write_bytes(crafted([256, 3], 23, blocks.tobytes()))
    got = st.open_gguf(path).get("t", dequantize=True)
    with np.errstate(all="ignore"):
        assert got.to_le_bytes() == bits_of(gq.dequantize(blocks, Q.IQ4_XS))


def test_metadata_types_of_mixed_and_empty_nested_arrays(tmp_path: Path) -> None:
    def text(value: str) -> bytes:
        return len(value).to_bytes(8, "little") + value.encode()

    def u32(value: int) -> bytes:
        return value.to_bytes(4, "little")

    def array(item_type: int, items: list[bytes]) -> bytes:
        return u32(item_type) + len(items).to_bytes(8, "little") + b"".join(items)

    mixed = array(9, [array(5, [u32(1)]), array(8, [text("a")])])
    pairs = [
        text("mixed") + u32(9) + mixed,
        text("empty") + u32(9) + array(9, []),
        text("same") + u32(9) + array(9, [array(6, [u32(0)]), array(6, [])]),
    ]
    head = b"GGUF" + u32(3) + bytes(8) + len(pairs).to_bytes(8, "little") + b"".join(pairs)
    path = tmp_path / "m.gguf"
    path.write_bytes(head)
    handle = st.open_gguf(path)
    assert handle.metadata == {"mixed": [[1], ["a"]], "empty": [], "same": [[0.0], []]}
    assert handle.metadata_types == {
        "mixed": "ARRAY[ARRAY]",
        "empty": "ARRAY[ARRAY]",
        "same": "ARRAY[ARRAY[FLOAT32]]",
    }
