""".npz: archives np.savez / np.savez_compressed write read equal to np.load bit for bit
(every shared dtype, rank 0, empty, Fortran order, big-endian, many members, dotted and
slashed names); stored members are zero-copy views of the mapping; hostile archives raise
typed errors with bounded memory; mutated archives raise only DataError subclasses."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tempfile
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io import NpzFile, load_npz, open_npz
from tests.strategies import arrays, shapes
from tests.zipcraft import Ends, Entry, bomb, build, deflate_raw, zip64_extra

NUMPY_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64,
]  # fmt: skip
SAVERS = {"stored": np.savez, "deflated": np.savez_compressed}


def sample(np_dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape)) if shape else 1
    raw = rng.integers(0, 256, size=count * np.dtype(np_dtype).itemsize, dtype=np.uint8)
    if np.dtype(np_dtype) == np.bool_:
        return (raw % 2 == 1).reshape(shape)
    return raw.view(np_dtype).reshape(shape)


def same_bits(t: st.Tensor, array: np.ndarray) -> bool:
    expected = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
    return (
        t.dtype is st.DType.from_numpy(expected.dtype)
        and t.shape == array.shape
        and t.to_le_bytes() == expected.tobytes()
    )


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def assert_matches_numpy(path: Path, loaded: dict[str, st.Tensor]) -> None:
    with np.load(path, allow_pickle=False) as expected:
        assert list(loaded) == list(expected.keys())
        for name, tensor in loaded.items():
            assert same_bits(tensor, expected[name]), name


# -- what NumPy writes ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SAVERS)
def test_every_dtype_and_shape_reads_as_np_load(tmp_path: Path, kind: str) -> None:
    arrays_by_name = {}
    for i, np_dtype in enumerate(NUMPY_DTYPES):
        for j, shape in enumerate([(), (0,), (3, 0, 2), (5,), (2, 3, 4)]):
            arrays_by_name[f"{np.dtype(np_dtype).name}_{j}"] = sample(np_dtype, shape, i + j)
    path = tmp_path / "all.npz"
    SAVERS[kind](path, **arrays_by_name)
    assert_matches_numpy(path, load_npz(path))
    assert_matches_numpy(path, load_npz(path, copy=True))


@pytest.mark.parametrize("kind", SAVERS)
def test_fortran_order_and_big_endian_give_logical_values(tmp_path: Path, kind: str) -> None:
    members = {
        "fortran": np.asfortranarray(sample(np.int16, (2, 3, 4), 1)),
        "fortran_bool": np.asfortranarray(sample(np.bool_, (3, 5), 2)),
        "big": sample(np.float32, (3, 4), 3).astype(">f4"),
        "big_fortran": np.asfortranarray(sample(np.uint64, (4, 3), 4).astype(">u8")),
        "big_f16": sample(np.float16, (7,), 5).astype(">f2"),
    }
    path = tmp_path / "layouts.npz"
    SAVERS[kind](path, **members)
    loaded = load_npz(path)
    assert_matches_numpy(path, loaded)
    assert loaded["fortran"].tolist() == members["fortran"].tolist()
    if kind == "stored":
        assert not loaded["fortran"].is_contiguous  # a transposed view, not a copy
        assert loaded["fortran"].storage_byte_len == path.stat().st_size


@pytest.mark.parametrize("kind", SAVERS)
def test_many_members_and_names_with_dots_and_slashes(tmp_path: Path, kind: str) -> None:
    members = {f"layer.{i}/w.b": np.full((2,), i, dtype=np.int32) for i in range(300)}
    members["ünï/cödé"] = np.arange(3.0)
    members["x.npy"] = np.zeros(1)  # stored as x.npy.npy: the tensor is named x.npy
    path = tmp_path / "many.npz"
    SAVERS[kind](path, **members)
    loaded = load_npz(path)
    assert list(loaded) == list(members)
    assert_matches_numpy(path, loaded)


def test_positional_arrays_get_numpys_names(tmp_path: Path) -> None:
    path = tmp_path / "pos.npz"
    np.savez(path, np.arange(2), np.ones(3))
    assert list(load_npz(path)) == ["arr_0", "arr_1"]


@settings(max_examples=40, deadline=None)
@given(data=hs.data())
def test_round_trips_through_numpy(data: hs.DataObject) -> None:
    dtype = data.draw(
        hs.sampled_from(
            [d for d in st.DType if d.name not in ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0")]
        )
    )
    count = data.draw(hs.integers(1, 4))
    members = {}
    for i in range(count):
        array = data.draw(arrays(dtype, data.draw(shapes(min_rank=0, max_rank=3, max_dim=4))))
        if array.ndim > 1 and data.draw(hs.booleans()):
            array = np.asfortranarray(array)
        if array.dtype.itemsize > 1 and data.draw(hs.booleans()):
            array = array.astype(array.dtype.newbyteorder(">"))
        members[f"t{i}"] = array
    buffer = io.BytesIO()
    data.draw(hs.sampled_from(list(SAVERS.values())))(buffer, **members)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.npz"
        path.write_bytes(buffer.getvalue())
        loaded = load_npz(path)
        for name, array in members.items():
            assert same_bits(loaded[name], array)  # bits, so NaN payloads count too


# -- the file object -------------------------------------------------------------------------


def test_stored_members_are_views_of_one_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.npz"
    np.savez(path, a=np.arange(4, dtype=np.int32), b=np.ones(3))
    loaded = load_npz(path)
    assert loaded["a"].shares_storage(loaded["b"])
    assert loaded["a"].storage_byte_len == path.stat().st_size
    assert not loaded["a"].numpy().flags.writeable
    copied = load_npz(path, copy=True)
    assert not copied["a"].shares_storage(loaded["a"])


def test_deflated_members_are_inflated_into_their_own_memory(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez_compressed(path, a=np.arange(1000, dtype=np.int64))
    tensor = load_npz(path)["a"]
    header = len(npy(np.arange(1000, dtype=np.int64))) - 8000
    assert tensor.storage_byte_len == header + 8000  # exactly header + data
    assert not tensor.numpy().flags.writeable
    with pytest.raises(ValueError):
        tensor.numpy().flags.writeable = True


def test_copies_are_independent_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "w.npz"
    np.savez(path, w=np.array([1.0, 2.0], dtype="<f4"))
    mapped = load_npz(path)["w"]
    copied = load_npz(path, copy=True)["w"]
    lazy_copy = open_npz(path, copy=True).get("w")
    data = bytearray(path.read_bytes())
    at = data.find(np.array([1.0, 2.0], dtype="<f4").tobytes())
    data[at : at + 8] = np.array([5.0, 6.0], dtype="<f4").tobytes()
    with open(path, "r+b") as file:
        file.write(data)  # rewritten in place (the CRC is no longer checked for stored data)
    assert mapped.tolist() == [5.0, 6.0]  # the documented contract of a mapping
    assert copied.tolist() == [1.0, 2.0] and lazy_copy.tolist() == [1.0, 2.0]


def test_the_lazy_file(tmp_path: Path) -> None:
    path = tmp_path / "lazy.npz"
    np.savez_compressed(path, w=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.zeros(2))
    with open_npz(path) as opened:
        assert isinstance(opened, NpzFile)
        assert opened.keys() == ["w", "b"] and len(opened) == 2 and "w" in opened
        assert list(opened) == ["w", "b"]
        assert opened.path == str(path) and opened.metadata == {}
        dtype, shape = opened.info("w")
        assert dtype == "F32" and shape == (2, 3)
        assert opened.get("w").tolist() == [[0, 1, 2], [3, 4, 5]]
        inspection = opened.inspect("w")
        assert inspection == opened.get("w").inspect()
        assert repr(opened) == f"NpzFile({str(path)!r}, 2 tensors)"
        for missing in ("nope", 3, None):
            with pytest.raises(st.IndexingError):
                opened.get(missing)  # type: ignore[arg-type]
        kept = opened.get("b")
    assert len(opened) == 0 and opened.keys() == []
    with pytest.raises(st.IndexingError):
        opened.get("w")
    opened.close()  # twice is fine
    assert kept.tolist() == [0.0, 0.0]


def test_paths(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_npz(tmp_path / "missing.npz")
    with pytest.raises(IsADirectoryError):
        open_npz(tmp_path)
    with pytest.raises(st.FormatError, match="expected a path"):
        open_npz(3)  # type: ignore[arg-type]
    path = tmp_path / "b.npz"
    np.savez(path, a=np.arange(2))
    assert load_npz(bytes(path))["a"].tolist() == [0, 1]


def sparse_style(save: Callable[..., None], path: Path, format_member: np.ndarray) -> None:
    """The members ``scipy.sparse.save_npz`` writes for a CSR matrix (scipy not needed)."""
    save(
        path,
        indices=np.array([0, 2, 1], dtype=np.int32),
        indptr=np.array([0, 2, 2, 3], dtype=np.int32),
        format=format_member,
        shape=np.array([3, 4]),
        data=np.array([1.5, -2.0, 3.25]),
    )


@pytest.mark.parametrize("kind", SAVERS)
@pytest.mark.parametrize(
    ("format_member", "reason"),
    [
        (np.array("csr"), "string array (<U3): no strided dtype"),
        (np.array(b"csr"), "bytes array (|S3): no strided dtype"),
    ],
)
def test_a_scipy_sparse_file_reads_all_but_its_format_string(
    tmp_path: Path, kind: str, format_member: np.ndarray, reason: str
) -> None:
    path = tmp_path / "sparse.npz"
    sparse_style(SAVERS[kind], path, format_member)
    with open_npz(path) as opened:
        assert opened.keys() == ["indices", "indptr", "shape", "data"]
        assert opened.unreadable == {"format": reason}
        opened.unreadable.clear()  # a fresh dict each time
        assert opened.unreadable == {"format": reason}
        with pytest.raises(st.IndexingError, match=re.escape(f"'format' is unreadable: {reason}")):
            opened.get("format")
        with pytest.raises(st.IndexingError):
            opened.info("format")
    assert opened.unreadable == {}  # closed
    loaded = load_npz(path)
    with np.load(path, allow_pickle=False) as expected:
        assert str(expected["format"]) == "csr" or bytes(expected["format"]) == b"csr"
        for name, tensor in loaded.items():
            assert same_bits(tensor, expected[name]), name
    with st.open_checkpoint(path) as ckpt:
        assert list(ckpt) == ["indices", "indptr", "shape", "data"] and "format" not in ckpt
        assert ckpt.unreadable == {"format": reason}
        assert ckpt["data"].tolist() == [1.5, -2.0, 3.25]
        assert ckpt.inspect("indptr").max == st.Scalar(st.DType.I32, 3)
        with pytest.raises(KeyError):
            ckpt["format"]
    assert ckpt.unreadable == {}


def structured() -> np.ndarray:
    return np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))])


UNREADABLE: list[tuple[str, Callable[[], np.ndarray], str]] = [
    ("object", lambda: np.array([{"a": 1}, None], dtype=object),
     "object array (|O): pickled, never unpickled"),
    ("structured", structured, "structured array: no strided dtype"),
    ("complex", lambda: np.ones(2, dtype=np.complex64), "complex array (<c8): no strided dtype"),
    ("datetime", lambda: np.array(["2020-01-02"], dtype="M8[D]"),
     "datetime array (<M8[D]): no strided dtype"),
    ("timedelta", lambda: np.array([5], dtype=">m8[ns]"),
     "timedelta array (>m8[ns]): no strided dtype"),
    ("void", lambda: np.zeros(2, dtype="V5"), "void array (|V5): no strided dtype"),
    ("strings", lambda: np.asfortranarray(np.array([["ab", "c"], ["", "def"]])),
     "string array (<U3): no strided dtype"),
    ("longdouble", lambda: np.ones(2, dtype=np.longdouble),
     f"float array ({np.dtype(np.longdouble).str}): no strided dtype"),
]  # fmt: skip


@pytest.mark.parametrize("kind", SAVERS)
@pytest.mark.parametrize(
    ("make", "reason"), [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE]
)
def test_members_of_dtypes_strided_lacks_are_listed_not_fatal(
    tmp_path: Path, kind: str, make: Callable[[], np.ndarray], reason: str
) -> None:
    path = tmp_path / "mixed.npz"
    SAVERS[kind](path, before=np.arange(3, dtype=np.int8), odd=make(), after=np.ones(2))
    with open_npz(path) as opened:
        assert opened.keys() == ["before", "after"]
        assert opened.unreadable == {"odd": reason}
        assert opened.get("after").tolist() == [1.0, 1.0]
    assert list(load_npz(path)) == ["before", "after"]


def unreadable_member(size: int) -> tuple[bytes, bytes]:
    """(content, stream) of a deflated ``<U1`` member of ``size`` data bytes whose stream
    holds only the first 12,000 bytes, then a corrupt block: reading its data fails."""
    head = header_of(np.zeros(size // 4, dtype="<U1"))
    content = head + bytes(size)
    encoder = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = encoder.compress(content[:12_000]) + encoder.flush(zlib.Z_FULL_FLUSH)
    return content, stream + b"\x07" + bytes(7)  # a block of the reserved type 3


def test_an_unreadable_members_data_is_never_inflated(tmp_path: Path) -> None:
    content, stream = unreadable_member(1 << 20)
    path = tmp_path / "lazy.npz"
    path.write_bytes(
        build([Entry("s.npy", content, method=8, data=stream), Entry("a.npy", F32, method=8)])
    )
    assert load_npz(path)["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert open_npz(path).unreadable == {"s": "string array (<U1): no strided dtype"}


def test_inspect_lists_unreadable_members(tmp_path: Path) -> None:
    path = tmp_path / "sparse.npz"
    sparse_style(np.savez_compressed, path, np.array("csr"))
    strided = [sys.executable, "-m", "strided", "inspect", str(path)]
    table = subprocess.run(strided, capture_output=True, text=True, timeout=120, check=True)
    assert "format  unreadable: string array (<U3): no strided dtype" in table.stdout
    assert "indptr" in table.stdout and "4 tensors" in table.stdout
    found = subprocess.run(
        [*strided, "--json"], capture_output=True, text=True, timeout=120, check=True
    )
    document = json.loads(found.stdout)
    assert document["unreadable"] == {"format": "string array (<U3): no strided dtype"}
    assert [row["name"] for row in document["tensors"]] == ["indices", "indptr", "shape", "data"]
    only = subprocess.run(
        [*strided, "--json", "--name", "ind*"], capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    document = json.loads(only.stdout)
    assert document["unreadable"] == {} and len(document["tensors"]) == 2


def test_other_formats_have_no_unreadable_members(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    st.save_safetensors(path, {"a": st.tensor([1], st.DType.I8)})
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.unreadable == {}


# -- hostile archives ------------------------------------------------------------------------

F32 = npy(np.arange(4, dtype="<f4"))


def header_of(array: np.ndarray) -> bytes:
    data = npy(array)
    return data[: len(data) - array.nbytes]


def header_claiming(shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def header_with(descr: object, fortran: object, shape: object) -> bytes:
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": fortran, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)  # type: ignore[arg-type]
    return buffer.getvalue()


def object_array_member() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return buffer.getvalue()


def zipfile_with(method: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        archive.writestr("a.npy", F32)
    return buffer.getvalue()


def hidden_member() -> bytes:
    # "b.npy"'s local header and data lie inside "a.npy"'s data.
    inner = build([Entry("b.npy", F32)])[: 30 + 5 + len(F32)]
    return build([Entry("a.npy", F32 + inner), Entry("b.npy", F32, offset=30 + 5 + len(F32))])


def bomb_member(size_claim: int) -> bytes:
    head = header_of(np.zeros(4, dtype="<f4"))  # claims 16 data bytes
    stream = bomb(len(head) + (1 << 30), head)  # but inflates to 1 GiB
    return build([Entry("x.npy", b"", method=8, data=stream, size=size_claim, crc=0)])


HOSTILE: list[tuple[str, bytes, type[Exception], str]] = [
    ("member not .npy", build([Entry("a.txt", F32)]), st.FormatError, "must be named NAME.npy"),
    ("descr NumPy never writes", build([Entry("a.npy", header_with("hello", False, (2,)))]),
     st.DTypeError, "dtype 'hello' is not supported"),
    ("a unit on a float", build([Entry("a.npy", header_with("<f8[ns]", False, (2,)))]),
     st.DTypeError, "dtype '<f8[ns]' is not supported"),
    ("fields that are not fields", build([Entry("a.npy", header_with([1, 2], False, (2,)))]),
     st.DTypeError, "neither a dtype nor a list of fields"),
    ("string array, bad fortran_order", build([Entry("a.npy", header_with("<U3", 1, (0,)))]),
     st.FormatError, "fortran_order must be True or False"),
    ("string array, shape not a tuple", build([Entry("a.npy", header_with("<U3", False, [0]))]),
     st.FormatError, "shape must be a tuple"),
    ("string array, negative dim", build([Entry("a.npy", header_with("<U3", False, (-1,)))]),
     st.FormatError, "shape"),
    ("string array, huge shape", build([Entry("a.npy", header_with("|S1", False, (2**40,)))]),
     st.LimitError, "shape"),
    ("string array shorter than its header",
     build([Entry("a.npy", header_with("<U3", False, (5,)) + bytes(12), method=8)]),
     st.FormatError, "needs 60 data bytes, the member holds 12"),
    ("object array, corrupt stream in its header",
     build([Entry("a.npy", object_array_member(), method=8,
                  data=deflate_raw(object_array_member())[:20])]),
     st.FormatError, "ends inside the .npy header"),
    ("encrypted member", build([Entry("a.npy", F32, flags=1)]), st.FormatError, "encrypted"),
    ("duplicate names", build([Entry("a.npy", F32), Entry("a.npy", F32)]), st.FormatError,
     "appears twice"),
    ("overlapping members", hidden_member(), st.FormatError, "overlap"),
    ("bzip2 member", zipfile_with(zipfile.ZIP_BZIP2), st.FormatError, "method 12"),
    ("lzma member", zipfile_with(zipfile.ZIP_LZMA), st.FormatError, "method 14"),
    ("member past the end", build([Entry("a.npy", F32, size=10**9, csize=10**9)]),
     st.FormatError, "run past the member area"),
    ("lying zip64 end record", build([Entry("a.npy", F32)], Ends(zip64=True, zip64_count=7)),
     st.FormatError, "contradicts"),
    ("2**32 entries in a 100-byte file",
     build([], Ends(zip64=True, count=0xFFFF, zip64_count=2**32)), st.FormatError,
     "4294967296 entries need"),
    ("stored member shorter than its header", build([Entry("a.npy", F32[:-4])]),
     st.FormatError, "needs 16 data bytes, the member holds 12"),
    ("deflated member shorter than its header", build([Entry("a.npy", F32[:-4], method=8)]),
     st.FormatError, "needs 16 data bytes, the member holds 12"),
    ("deflated stream ends in the header",
     build([Entry("a.npy", F32, method=8, data=deflate_raw(F32[:40]))]), st.FormatError,
     "ends inside the .npy header"),
    ("huge shape in a small member", build([Entry("a.npy", header_claiming((9999999,)))]),
     st.FormatError, "needs 79999992 data bytes, the member holds 0"),
    ("huge deflated claim", build([Entry("a.npy", header_claiming((2**33,)), method=8)]),
     st.FormatError, "needs 68719476736 data bytes, the member holds 0"),
    ("bomb: the directory believes the stream", bomb_member((1 << 30) + 128), st.FormatError,
     "needs 16 data bytes"),
    ("bad magic inside", build([Entry("a.npy", b"\x93NUMPX" + F32[6:])]), st.FormatError,
     "bad magic"),
    ("zip64 size field short", build([Entry("a.npy", F32, size=0xFFFFFFFF,
                                            central_extra=zip64_extra(1, widths=(2,)))]),
     st.FormatError, "zip64 field is too short"),
    ("empty file", b"", st.FormatError, "too short for a zip"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "error", "fragment"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_hostile_archives_raise_typed_errors_in_bounded_memory(
    tmp_path: Path, content: bytes, error: type[Exception], fragment: str
) -> None:
    path = tmp_path / "hostile.npz"
    path.write_bytes(content)
    with pytest.raises(error, match=re.escape(fragment)) as caught:
        load_npz(path)
    assert str(path) in str(caught.value)
    tracemalloc.start()
    try:
        with pytest.raises(error):
            load_npz(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(content) + (2 << 20), f"peak {peak} for {len(content)} bytes"


# Errors that only reading the data finds: open_npz succeeds, get raises.
LATE: list[tuple[str, bytes, str]] = [
    ("bomb: the directory claims the header's 16 bytes", bomb_member(128 + 16),
     "holds more bytes"),
    ("truncated deflate stream",
     build([Entry("a.npy", F32, method=8, data=deflate_raw(F32)[:-3])]), "deflate stream"),
    ("CRC mismatch", build([Entry("a.npy", F32, method=8, crc=zlib.crc32(F32) ^ 1)]),
     "CRC-32"),
    ("bytes after the stream", build([Entry("a.npy", F32, method=8,
                                            data=deflate_raw(F32) + b"\0")]), "bytes follow"),
    ("BOOL byte 7", build([Entry("b.npy", npy(np.zeros(3, bool))[:-1] + b"\x07")]),
     "BOOL byte 2 is 7"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "fragment"), [c[1:] for c in LATE], ids=[c[0] for c in LATE])
def test_hostile_data_is_found_when_read(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "late.npz"
    path.write_bytes(content)
    opened = open_npz(path)
    (name,) = opened.keys()
    tracemalloc.start()
    try:
        with pytest.raises(st.FormatError, match=re.escape(fragment)) as caught:
            opened.get(name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(caught.value)
    assert peak < 4 << 20, f"peak {peak}"
    with pytest.raises(st.FormatError, match=re.escape(fragment)):
        load_npz(path)


def test_the_bomb_header_is_valid_and_small() -> None:
    head = header_of(np.zeros(4, dtype="<f4"))
    assert len(head) == 128  # the claims bomb_member's cases rely on


# -- fuzzing ---------------------------------------------------------------------------------

INTERESTING = [0, 1, 0x7F, 0xFF, 0xFFFF, 0xFFFFFFFF, 2**31, 2**32, 2**63 - 1, 2**64 - 1]


def valid_archive(save: Callable[..., None]) -> bytes:
    buffer = io.BytesIO()
    save(
        buffer,
        a=np.arange(6, dtype="<i4").reshape(2, 3),
        b=np.asfortranarray(np.ones((2, 2), dtype=">f8")),
        c=np.array([True, False]),
    )
    return buffer.getvalue()


VALID = {"stored": valid_archive(np.savez), "deflated": valid_archive(np.savez_compressed)}


@hs.composite
def mutated(draw: hs.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(hs.integers(1, 3))):
        if not data:
            break
        pos = draw(hs.integers(0, len(data) - 1))
        action = draw(hs.sampled_from(["byte", "int16", "int32", "int64", "cut", "insert", "del"]))
        if action == "byte":
            data[pos] = draw(hs.integers(0, 255))
        elif action.startswith("int"):
            width = int(action[3:]) // 8
            value = draw(hs.sampled_from(INTERESTING)) % (1 << (8 * width))
            data[pos : pos + width] = value.to_bytes(width, "little")
        elif action == "cut":
            del data[pos:]
        elif action == "insert":
            data[pos:pos] = draw(hs.binary(min_size=1, max_size=16))
        else:
            del data[pos : pos + draw(hs.integers(1, 16))]
    return bytes(data)


@pytest.fixture(scope="module")
def fuzz_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "input.npz"


def test_the_fuzz_seeds_are_valid(fuzz_path: Path) -> None:
    for data in VALID.values():
        fuzz_path.write_bytes(data)
        assert_matches_numpy(fuzz_path, load_npz(fuzz_path))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=hs.sampled_from(list(VALID.values())).flatmap(mutated))
def test_fuzz_npz(fuzz_path: Path, data: bytes) -> None:
    fuzz_path.write_bytes(data)
    try:
        load_npz(fuzz_path)
    except st.DataError:
        pass
