"""Crafted hostile safetensors, GGUF and .npy files: each gets its typed error, none
allocates memory in proportion to a size it claims, and mutated valid files (Hypothesis)
only ever raise DataError subclasses."""

from __future__ import annotations

import json
import re
import struct
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import gguf.quants as gq
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st

# -- builders ----------------------------------------------------------------------------------


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def safetensors_bytes(
    header: dict[str, Any] | bytes, data: bytes = b"", length: int | None = None
) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return u64(len(text) if length is None else length) + text + data


def entry(dtype: str = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def gstr(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return u64(len(raw)) + raw


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + u32(vtype) + payload


def tinfo(
    name: str | bytes, dims: list[int], type_id: int = 0, offset: int = 0, n_dims: int | None = None
) -> bytes:
    count = len(dims) if n_dims is None else n_dims
    return gstr(name) + u32(count) + b"".join(u64(d) for d in dims) + u32(type_id) + u64(offset)


def gguf_bytes(
    kvs: list[bytes] = (),  # type: ignore[assignment]
    tensors: list[bytes] = (),  # type: ignore[assignment]
    data: bytes = b"",
    version: int = 3,
    counts: tuple[int, int] | None = None,
    alignment: int = 32,
) -> bytes:
    tensor_count, kv_count = counts if counts else (len(tensors), len(kvs))
    head = b"GGUF" + u32(version) + u64(tensor_count) + u64(kv_count)
    head += b"".join(kvs) + b"".join(tensors)
    return head + bytes(-len(head) % alignment) + data


def npy_bytes(
    header: str | bytes, data: bytes = b"", version: bytes = b"\x01\x00", length: int | None = None
) -> bytes:
    text = header.encode("latin-1") if isinstance(header, str) else header
    size = len(text) if length is None else length
    width = 2 if version == b"\x01\x00" else 4
    return b"\x93NUMPY" + version + size.to_bytes(width, "little") + text + data


def npy_header(descr: Any = "'<f4'", fortran: Any = "False", shape: Any = "(2,)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


F4 = np.array([1.0, 2.0], "<f4").tobytes()
HUGE = 2**64 - 1

# (id, file bytes, error type, message fragment)
SAFETENSORS: list[tuple[str, bytes, type[Exception], str]] = [
    ("empty file", b"", st.FormatError, "too short"),
    ("seven bytes", b"\x01" * 7, st.FormatError, "too short"),
    ("header length 2**64-1", u64(HUGE) + b"{}", st.LimitError, "exceeds the cap"),
    ("header length just over the cap", u64(100_000_001) + b"{}", st.LimitError, "cap"),
    ("header length past the file", u64(99_999_999) + b"{}", st.FormatError, "past the end"),
    ("header not starting with {", safetensors_bytes(b' {"a":1}'), st.FormatError, "begin with"),
    ("header is a JSON array", safetensors_bytes(b"[]"), st.FormatError, "begin with"),
    ("invalid UTF-8", safetensors_bytes(b'{"\xff":1}'), st.FormatError, "UTF-8"),
    ("truncated JSON", safetensors_bytes(b'{"a":{"dtype":"F32"'), st.FormatError, "invalid JSON"),
    (
        "repeated tensor name",
        safetensors_bytes(
            b'{"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
            b'"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
            b"\x00\x00\x80\x3f",
        ),
        st.FormatError,
        "more than once",
    ),
    (
        "repeated field",
        safetensors_bytes(
            b'{"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"\x00"
        ),
        st.FormatError,
        "more than once",
    ),
    (
        "nesting 100000 deep",
        safetensors_bytes(b'{"__metadata__":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        st.FormatError,
        "nested deeper",
    ),
    ("NaN token", safetensors_bytes(b'{"__metadata__":{"a":NaN}}'), st.FormatError, "NaN"),
    (
        "lone surrogate name",
        safetensors_bytes(b'{"\\ud800":{}}'),
        st.FormatError,
        "invalid JSON text",
    ),
    ("unknown dtype", safetensors_bytes({"a": entry("F128")}, F4), st.FormatError, "unknown dtype"),
    ("dtype not a string", safetensors_bytes({"a": entry(7)}, F4), st.FormatError, "unknown dtype"),
    ("extra field", safetensors_bytes({"a": {**entry(), "x": 1}}, F4), st.FormatError, "exactly"),
    (
        "missing field",
        safetensors_bytes({"a": {"dtype": "F32", "shape": [2]}}, F4),
        st.FormatError,
        "exactly",
    ),
    ("entry not an object", safetensors_bytes({"a": [1, 2]}, F4), st.FormatError, "object"),
    ("float dim", safetensors_bytes({"a": entry(shape=[2.0])}, F4), st.FormatError, "int"),
    ("bool dim", safetensors_bytes({"a": entry(shape=[True, 2])}, F4), st.FormatError, "bool"),
    (
        "negative dim",
        safetensors_bytes({"a": entry(shape=[-2])}, F4),
        st.FormatError,
        "non-negative",
    ),
    (
        "shape not a list",
        safetensors_bytes({"a": {**entry(), "shape": "2"}}, F4),
        st.FormatError,
        "list",
    ),
    (
        "rank 33",
        safetensors_bytes({"a": entry(shape=[1] * 33, offsets=[0, 4])}),
        st.LimitError,
        "MAX_RANK",
    ),
    (
        "dims whose product wraps int64 to 0",
        safetensors_bytes({"a": entry(shape=[2**32, 2**32], offsets=[0, 0])}),
        st.LimitError,
        "MAX_ELEMENTS",
    ),
    (
        "empty but huge",
        safetensors_bytes({"a": entry(shape=[0, 2**40], offsets=[0, 0])}),
        st.LimitError,
        "MAX_ELEMENTS",
    ),
    (
        "5000-digit dim",
        safetensors_bytes(
            b'{"a":{"dtype":"U8","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,1]}}'
        ),
        st.FormatError,
        "invalid JSON",
    ),
    (
        "offsets of three",
        safetensors_bytes({"a": entry(offsets=[0, 4, 8])}, F4),
        st.FormatError,
        "two ints",
    ),
    (
        "float offset",
        safetensors_bytes({"a": entry(offsets=[0, 8.0])}, F4),
        st.FormatError,
        "two ints",
    ),
    (
        "negative offset",
        safetensors_bytes({"a": entry(offsets=[-8, 0])}, F4),
        st.FormatError,
        "begin",
    ),
    (
        "begin after end",
        safetensors_bytes({"a": entry(shape=[0], offsets=[8, 0])}, F4),
        st.FormatError,
        "begin",
    ),
    ("span mismatch", safetensors_bytes({"a": entry(shape=[3])}, F4), st.FormatError, "needs 12"),
    (
        "offset far past the end",
        safetensors_bytes({"a": entry(offsets=[2**62, 2**62 + 8])}, F4),
        st.FormatError,
        "past",
    ),
    (
        "overlapping tensors",
        safetensors_bytes({"a": entry(), "b": entry(shape=[1], offsets=[4, 8])}, F4),
        st.FormatError,
        "overlaps",
    ),
    ("gap", safetensors_bytes({"a": entry(shape=[1], offsets=[4, 8])}, F4), st.FormatError, "gap"),
    ("trailing bytes", safetensors_bytes({"a": entry()}, F4 + b"\x00"), st.FormatError, "trailing"),
    (
        "metadata value not a string",
        safetensors_bytes({"__metadata__": {"k": 1}}),
        st.FormatError,
        "string",
    ),
    (
        "metadata not an object",
        safetensors_bytes({"__metadata__": ["k"]}),
        st.FormatError,
        "object",
    ),
    (
        "BOOL byte 2",
        safetensors_bytes({"a": entry("BOOL", [2], [0, 2])}, b"\x01\x02"),
        st.FormatError,
        "BOOL byte 1",
    ),
]

ALIGN = kv("general.alignment", 4, u32(64))
GGUF: list[tuple[str, bytes, type[Exception], str]] = [
    ("empty file", b"", st.FormatError, "magic"),
    ("bad magic", b"GGML" + bytes(20), st.FormatError, "not a GGUF"),
    ("version 1", gguf_bytes(version=1), st.FormatError, "version 1"),
    ("big-endian version", gguf_bytes(version=3 << 24), st.FormatError, "big-endian"),
    ("truncated counts", b"GGUF" + u32(3) + u64(0), st.FormatError, "key-value count"),
    ("tensor count 2**63", gguf_bytes(counts=(2**63, 0)), st.FormatError, "tensor infos"),
    ("kv count 2**64-1", gguf_bytes(counts=(0, HUGE)), st.FormatError, "key-value pairs"),
    (
        "key length 2**64-1",
        gguf_bytes([u64(HUGE) + b"k"], counts=(0, 1)),
        st.FormatError,
        "exceeds",
    ),
    (
        "key length past the file",
        gguf_bytes([u64(1000) + b"k" * 20], counts=(0, 1)),
        st.FormatError,
        "remain",
    ),
    (
        "string of 2**40 bytes",
        gguf_bytes([kv("a", 8, u64(2**40) + b"x" * 8)]),
        st.LimitError,
        "exceeds",
    ),
    (
        "string past the file",
        gguf_bytes([kv("a", 8, u64(4096) + b"x" * 8)]),
        st.FormatError,
        "remain",
    ),
    (
        "array of 2**62 UINT8",
        gguf_bytes([kv("a", 9, u32(0) + u64(2**62) + b"\x00" * 8)]),
        st.FormatError,
        "remain",
    ),
    (
        "array of 2**61 strings",
        gguf_bytes([kv("a", 9, u32(8) + u64(2**61) + b"\x00" * 64)]),
        st.FormatError,
        "remain",
    ),
    (
        "string array item past the file",
        gguf_bytes([kv("a", 9, u32(8) + u64(2) + gstr("ok") + u64(999) + b"x" * 16)]),
        st.FormatError,
        "a'[1] needs 999 bytes",
    ),
    (
        "string array item of 2**63 bytes",
        gguf_bytes([kv("a", 9, u32(8) + u64(1) + u64(2**63) + b"x" * 16)]),
        st.LimitError,
        "exceeds",
    ),
    (
        "invalid UTF-8 in a string array",
        gguf_bytes([kv("a", 9, u32(8) + u64(1) + gstr(b"\xff\xfe"))]),
        st.FormatError,
        "not UTF-8",
    ),
    (
        "arrays nested three deep",
        gguf_bytes([kv("a", 9, u32(9) + u64(1) + u32(9) + u64(1) + u32(0) + u64(1) + b"\x00")]),
        st.FormatError,
        "nested",
    ),
    (
        "unknown value type",
        gguf_bytes([kv("a", 13, b"\x00" * 8)]),
        st.FormatError,
        "unknown value type",
    ),
    (
        "unknown element type",
        gguf_bytes([kv("a", 9, u32(99) + u64(1) + b"\x00" * 8)]),
        st.FormatError,
        "element type",
    ),
    ("bool value 2", gguf_bytes([kv("a", 7, b"\x02")]), st.FormatError, "BOOL value 2"),
    (
        "bool array value 7",
        gguf_bytes([kv("a", 9, u32(7) + u64(2) + b"\x01\x07")]),
        st.FormatError,
        "BOOL value 7",
    ),
    (
        "repeated key",
        gguf_bytes([kv("a", 0, b"\x01"), kv("a", 0, b"\x02")]),
        st.FormatError,
        "more than once",
    ),
    ("empty key", gguf_bytes([kv("", 0, b"\x01")]), st.FormatError, "empty"),
    ("invalid UTF-8 string", gguf_bytes([kv("a", 8, gstr(b"\xc3\x28"))]), st.FormatError, "UTF-8"),
    (
        "alignment 0",
        gguf_bytes([kv("general.alignment", 4, u32(0))]),
        st.FormatError,
        "power of two",
    ),
    (
        "alignment 48",
        gguf_bytes([kv("general.alignment", 4, u32(48))]),
        st.FormatError,
        "power of two",
    ),
    (
        "alignment as UINT64",
        gguf_bytes([kv("general.alignment", 10, u64(32))]),
        st.FormatError,
        "UINT32",
    ),
    ("n_dims 0", gguf_bytes(tensors=[tinfo("t", [])]), st.FormatError, "n_dims is 0"),
    ("n_dims 5", gguf_bytes(tensors=[tinfo("t", [1] * 5)]), st.FormatError, "n_dims is 5"),
    (
        "n_dims 2**32-1",
        gguf_bytes(tensors=[tinfo("t", [1], n_dims=2**32 - 1)]),
        st.FormatError,
        "n_dims is 4294967295",
    ),
    (
        "dims whose product wraps",
        gguf_bytes(tensors=[tinfo("t", [2**32, 2**32])]),
        st.LimitError,
        "MAX_ELEMENTS",
    ),
    ("dim 2**64-1", gguf_bytes(tensors=[tinfo("t", [HUGE])]), st.LimitError, "MAX_ELEMENTS"),
    (
        "retired type id 4",
        gguf_bytes(tensors=[tinfo("t", [32], 4)]),
        st.FormatError,
        "unknown ggml type",
    ),
    (
        "unknown type id",
        gguf_bytes(tensors=[tinfo("t", [32], 1000)]),
        st.FormatError,
        "unknown ggml type",
    ),
    (
        "Q8_0 dim not a block multiple",
        gguf_bytes(tensors=[tinfo("t", [33], 8)], data=bytes(64)),
        st.FormatError,
        "block size",
    ),
    (
        "misaligned offset",
        gguf_bytes(tensors=[tinfo("t", [1], 0, 4)], data=bytes(64)),
        st.FormatError,
        "multiple",
    ),
    (
        "tensor past the file",
        gguf_bytes(tensors=[tinfo("t", [1000])], data=bytes(64)),
        st.FormatError,
        "past the end",
    ),
    (
        "huge offset",
        gguf_bytes(tensors=[tinfo("t", [1], 0, 2**63)], data=bytes(64)),
        st.FormatError,
        "past the end",
    ),
    (
        "overlapping tensors",
        gguf_bytes(tensors=[tinfo("a", [8]), tinfo("b", [8], 0, 0)], data=bytes(64)),
        st.FormatError,
        "overlap",
    ),
    (
        "repeated tensor name",
        gguf_bytes(tensors=[tinfo("a", [1]), tinfo("a", [1], 0, 32)], data=bytes(64)),
        st.FormatError,
        "unique",
    ),
    (
        "tensor name of 65 bytes",
        gguf_bytes(tensors=[tinfo("n" * 65, [1])], data=bytes(32)),
        st.FormatError,
        "exceeds 64",
    ),
    (
        "empty tensor name",
        gguf_bytes(tensors=[tinfo("", [1])], data=bytes(32)),
        st.FormatError,
        "non-empty",
    ),
    (
        "aligned data past a custom alignment",
        gguf_bytes([ALIGN], [tinfo("t", [16])], bytes(8), alignment=64),
        st.FormatError,
        "past",
    ),
]

NPY: list[tuple[str, bytes, type[Exception], str]] = [
    ("empty file", b"", st.FormatError, "too short"),
    ("bad magic", b"\x93NUMPX\x01\x00" + bytes(10), st.FormatError, "magic"),
    (
        "version 4.0",
        npy_bytes(npy_header(), F4, version=b"\x04\x00"),
        st.FormatError,
        "version 4.0",
    ),
    (
        "version 1.1",
        npy_bytes(npy_header(), F4, version=b"\x01\x01"),
        st.FormatError,
        "version 1.1",
    ),
    (
        "header length 2**32-1",
        npy_bytes(npy_header(), F4, b"\x02\x00", 2**32 - 1),
        st.LimitError,
        "cap",
    ),
    ("header length past the file", npy_bytes("{}", length=9000), st.FormatError, "past the end"),
    ("code in the header", npy_bytes("__import__('os').system('true')"), st.FormatError, "literal"),
    ("header a list", npy_bytes("['<f4', False, (2,)]", F4), st.FormatError, "exactly"),
    ("extra key", npy_bytes(npy_header()[:-1] + "'x': 1}", F4), st.FormatError, "exactly"),
    ("missing key", npy_bytes("{'descr': '<f4', 'shape': (2,)}", F4), st.FormatError, "exactly"),
    (
        "repeated key",
        npy_bytes("{'descr': '<i4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", F4),
        st.FormatError,
        "repeats a key",
    ),
    ("object dtype", npy_bytes(npy_header("'|O'"), bytes(16)), st.DTypeError, "'|O'"),
    ("structured dtype", npy_bytes(npy_header("[('a', '<f4')]"), F4), st.DTypeError, "structured"),
    ("datetime dtype", npy_bytes(npy_header("'<M8[ns]'"), bytes(16)), st.DTypeError, "M8"),
    ("complex dtype", npy_bytes(npy_header("'<c8'"), bytes(16)), st.DTypeError, "c8"),
    ("void dtype (bfloat16)", npy_bytes(npy_header("'<V2'"), bytes(4)), st.DTypeError, "V2"),
    ("unicode dtype", npy_bytes(npy_header("'<U2'"), bytes(16)), st.DTypeError, "U2"),
    ("fortran_order 1", npy_bytes(npy_header(fortran="1"), F4), st.FormatError, "fortran_order"),
    ("shape a list", npy_bytes(npy_header(shape="[2]"), F4), st.FormatError, "tuple"),
    ("negative dim", npy_bytes(npy_header(shape="(-2,)"), F4), st.FormatError, "non-negative"),
    ("bool dim", npy_bytes(npy_header(shape="(True, 2)"), F4), st.FormatError, "bool"),
    ("float dim", npy_bytes(npy_header(shape="(2.0,)"), F4), st.FormatError, "int"),
    ("huge claimed shape", npy_bytes(npy_header(shape="(2**40,)"), F4), st.FormatError, "literal"),
    (
        "shape over MAX_ELEMENTS",
        npy_bytes(npy_header(shape="(1099511627776,)"), F4),
        st.LimitError,
        "MAX_ELEMENTS",
    ),
    (
        "shape wrapping int64",
        npy_bytes(npy_header(shape="(4294967296, 4294967296)"), b""),
        st.LimitError,
        "MAX_ELEMENTS",
    ),
    (
        "data shorter than claimed",
        npy_bytes(npy_header(shape="(2**33,)".replace("2**33", str(2**33))), F4),
        st.FormatError,
        "needs",
    ),
    ("trailing bytes", npy_bytes(npy_header(), F4 + b"\x00"), st.FormatError, "needs 8"),
    ("BOOL byte 5", npy_bytes(npy_header("'|b1'"), b"\x00\x05"), st.FormatError, "BOOL byte 1"),
    ("non-ASCII header", npy_bytes(npy_header("'<f4'") + "é", F4), st.FormatError, "ASCII"),
    ("parentheses 5000 deep", npy_bytes("(" * 5000 + ")" * 5000, F4), st.FormatError, "literal"),
    (
        "9000-digit dim",
        npy_bytes(npy_header(shape="(" + "9" * 9000 + ",)"), F4),
        st.FormatError,
        "literal",
    ),
]


def gguf_loader(path: Path) -> None:
    handle = st.open_gguf(path)
    for name in handle.keys():
        handle.get(name, dequantize=True).to_le_bytes()


def safetensors_loader(path: Path) -> None:
    for tensor in st.load_safetensors(path).values():
        tensor.to_le_bytes()


def npy_loader(path: Path) -> None:
    st.load_npy(path).to_le_bytes()


CASES = (
    [("safetensors", safetensors_loader, *case) for case in SAFETENSORS]
    + [("gguf", gguf_loader, *case) for case in GGUF]
    + [("npy", npy_loader, *case) for case in NPY]
)


def test_there_are_enough_crafted_files() -> None:
    assert len(SAFETENSORS) >= 25 and len(GGUF) >= 25 and len(NPY) >= 25


@pytest.mark.parametrize(
    ("kind", "loader", "name", "content", "error", "fragment"),
    CASES,
    ids=[f"{case[0]}: {case[2]}" for case in CASES],
)
def test_crafted_file_raises_its_typed_error_without_allocating(
    tmp_path: Path,
    kind: str,
    loader: Callable[[Path], None],
    name: str,
    content: bytes,
    error: type[Exception],
    fragment: str,
) -> None:
    path = tmp_path / f"hostile.{kind}"
    path.write_bytes(content)
    with pytest.raises(error, match=re.escape(fragment)) as caught:
        loader(path)
    assert str(path) in str(caught.value)  # the message names the file
    # Measured on a second run, after one-time costs (imports, regex compiles, caches).
    tracemalloc.start()
    try:
        with pytest.raises(error):
            loader(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(content) + (1 << 20), f"peak {peak} bytes for a {len(content)}-byte file"
    assert path.read_bytes() == content  # the file is left as it was


def test_too_many_metadata_values(tmp_path: Path) -> None:
    from strided.io.gguf._file import MAX_METADATA_VALUES

    count = MAX_METADATA_VALUES + 1
    path = tmp_path / "many.gguf"
    path.write_bytes(gguf_bytes([kv("a", 9, u32(0) + u64(count) + bytes(count))]))
    tracemalloc.start()
    try:
        with pytest.raises(st.LimitError, match="more than"):
            st.open_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_index_file_hostile_json(tmp_path: Path) -> None:
    deep = tmp_path / "deep.safetensors.index.json"
    deep.write_bytes(b'{"metadata":' + b"[" * 50_000 + b"]" * 50_000 + b', "weight_map": {}}')
    with pytest.raises(st.FormatError, match="nested deeper"):
        st.open_safetensors(deep)
    infinity = tmp_path / "inf.safetensors.index.json"
    infinity.write_bytes(b'{"metadata": {"total_size": Infinity}, "weight_map": {}}')
    with pytest.raises(st.FormatError, match="Infinity"):
        st.open_safetensors(infinity)


# -- fuzzing: mutated valid files raise only DataError subclasses ----------------------------------

INTERESTING = [
    0,
    1,
    2,
    7,
    8,
    31,
    32,
    33,
    63,
    64,
    255,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**63 - 1,
    2**63,
    HUGE,
]


def valid_safetensors() -> tuple[bytes, int]:
    tensors = {
        "w": st.Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "b": st.tensor([True, False, True], "BOOL"),
        "h": st.Tensor.from_le_bytes("BF16", [4], bytes(range(8))),
        "e": st.Tensor.zeros("I64", (0, 3)),
    }
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "v.safetensors"
        st.save_safetensors(path, tensors, metadata={"format": "pt"})
        data = path.read_bytes()
    return data, 8 + int.from_bytes(data[:8], "little")


def valid_gguf() -> tuple[bytes, int]:
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "v.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_uint32("n", 7)
        writer.add_string("s", "text")
        writer.add_array("a", [1, 2, 3])
        writer.add_array("strs", ["x", "yy"])
        writer.add_array("nested", [[1], [2, 3]])
        writer.add_bool("flag", True)
        writer.add_tensor("f", np.arange(6, dtype=np.float32).reshape(2, 3))
        writer.add_tensor("h", np.arange(4, dtype=np.float16))
        values = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
        for kind in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
            writer.add_tensor(kind.name, gq.quantize(values, kind), raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        data = path.read_bytes()
    return data, len(data) - 32 * 6


def valid_npy() -> tuple[bytes, int]:
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4)))
    data = buffer.getvalue()
    return data, 10 + int.from_bytes(data[8:10], "little")


@hs.composite
def mutated(draw: hs.DrawFn, valid: tuple[bytes, int]) -> bytes:
    original, header_end = valid
    data = bytearray(original)
    for _ in range(draw(hs.integers(1, 3))):
        if not data:
            break
        limit = len(data) - 1 if draw(hs.booleans()) else min(len(data) - 1, header_end)
        pos = draw(hs.integers(0, limit))
        action = draw(hs.sampled_from(["byte", "int32", "int64", "truncate", "insert", "delete"]))
        if action == "byte":
            data[pos] = draw(hs.integers(0, 255))
        elif action in ("int32", "int64"):
            width = 4 if action == "int32" else 8
            value = draw(hs.sampled_from(INTERESTING)) % (1 << (8 * width))
            data[pos : pos + width] = value.to_bytes(width, "little")
        elif action == "truncate":
            del data[pos:]
        elif action == "insert":
            data[pos:pos] = draw(hs.binary(min_size=1, max_size=16))
        else:
            del data[pos : pos + draw(hs.integers(1, 16))]
    return bytes(data)


JSON_VALUES = hs.recursive(
    hs.none()
    | hs.booleans()
    | hs.sampled_from([*INTERESTING, -1, -(2**63)])
    | hs.floats()
    | hs.text(max_size=6),
    lambda inner: (
        hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@hs.composite
def header_edits(draw: hs.DrawFn, valid: tuple[bytes, int]) -> bytes:
    """A well-formed file whose header JSON has one field replaced, added or removed."""
    original, header_end = valid
    header = json.loads(original[8:header_end])
    name = draw(hs.sampled_from(sorted(header)))
    target = header[name]
    field = draw(hs.sampled_from([*sorted(target), "extra"]))
    if draw(hs.integers(0, 4)) == 0:
        target.pop(field, None)
    else:
        target[field] = draw(JSON_VALUES)
    text = json.dumps(header).encode()
    return u64(len(text)) + text + original[header_end:]


VALID = {"safetensors": valid_safetensors(), "gguf": valid_gguf(), "npy": valid_npy()}
LOADERS = {"safetensors": safetensors_loader, "gguf": gguf_loader, "npy": npy_loader}


def test_the_fuzz_seeds_are_valid(tmp_path: Path) -> None:
    for kind, (data, _) in VALID.items():
        path = tmp_path / f"seed.{kind}"
        path.write_bytes(data)
        LOADERS[kind](path)


@pytest.fixture(scope="module")
def fuzz_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "input"


def only_data_errors(path: Path, kind: str, data: bytes) -> None:
    path.write_bytes(data)
    try:
        LOADERS[kind](path)
    except st.DataError:
        pass


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(data=mutated(VALID["safetensors"]))
def test_fuzz_safetensors_bytes(fuzz_path: Path, data: bytes) -> None:
    only_data_errors(fuzz_path, "safetensors", data)


@FUZZ
@given(data=header_edits(VALID["safetensors"]))
def test_fuzz_safetensors_header_edits(fuzz_path: Path, data: bytes) -> None:
    only_data_errors(fuzz_path, "safetensors", data)


@FUZZ
@given(data=mutated(VALID["gguf"]))
def test_fuzz_gguf(fuzz_path: Path, data: bytes) -> None:
    only_data_errors(fuzz_path, "gguf", data)


@FUZZ
@given(data=mutated(VALID["npy"]))
def test_fuzz_npy(fuzz_path: Path, data: bytes) -> None:
    only_data_errors(fuzz_path, "npy", data)
