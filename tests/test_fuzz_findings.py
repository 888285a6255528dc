"""Regression tests for what a fuzzing campaign and a review found in the readers and the CLI.

Each test builds the input that broke a promise and checks the promise now holds:
memory bounded by the input (measured), mapped files and ``copy=True``, non-regular
files refused without blocking, NUL bytes in paths, one mapping without a descriptor per
shard, escaped terminal output, repeated ``.npy`` keys, hostile ``dict``/``list``
subclasses, and errors that name the right file.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided._kernels.strict_json import loads_strict

STRIDED = str(Path(sys.executable).parent / "strided")


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tiny_entries_header(count: int) -> bytes:
    """A safetensors header of ``count`` one-byte tensors: the most entries per byte."""
    body = ",".join(
        f'"t{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}' for i in range(count)
    )
    return ("{" + body + "}").encode()


def write_tiny_safetensors(path: Path, count: int) -> int:
    header = tiny_entries_header(count)
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(count))
    return len(header)


def peak_bytes(call: Callable[[], object]) -> int:
    call()  # one-time costs (imports, caches) are not what is measured
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- the JSON depth scan runs in constant memory ---------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        b"[" * 3_000_000 + b"]" * 3_000_000,
        b'["' + b"\\\\" * 2_000_000 + b'"]',
        b"[" + b'"",' * 2_000_000 + b'""]',
        b'["\\"[[[[' * 500_000 + b'"]',
    ],
    ids=["deep", "backslashes", "empty strings", "escaped quotes"],
)
def test_depth_scan_memory_does_not_grow_with_the_document(document: bytes) -> None:
    from strided._kernels import strict_json as _strict_json

    peak = peak_bytes(lambda: _strict_json._check_depth(document, 1 << 30, "doc"))
    assert peak < 4 << 20, peak  # a few arrays of one 64 KiB chunk, whatever the size
    if document.startswith(b"[[["):
        with pytest.raises(st.FormatError, match="nested deeper"):
            loads_strict(document, "doc", 64)


def scalar_depth(text: bytes) -> int:
    """The deepest bracket nesting outside strings, one character at a time.

    A quote opens or closes a string when an even number of backslashes precedes it
    (inside strings that is JSON's rule; outside them JSON has no backslashes at all).
    """
    depth = deepest = run = 0
    inside = False
    for char in text.decode():
        if char == "\\":
            run += 1
            continue
        if char == '"' and run % 2 == 0:
            inside = not inside
        elif not inside and char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not inside and char in "]}":
            depth -= 1
        run = 0
    return deepest


def check_depth_exactly(text: bytes, deepest: int) -> None:
    from strided._kernels import strict_json as _strict_json

    _strict_json._check_depth(text, deepest, "doc")
    if deepest > 0:
        with pytest.raises(st.FormatError, match="nested deeper"):
            _strict_json._check_depth(text, deepest - 1, "doc")


@settings(max_examples=300, deadline=None)
@given(
    pieces=hs.lists(hs.sampled_from(['"', "\\", "[", "]", "{", "}", "a", ","]), max_size=40),
    chunk=hs.sampled_from([1, 2, 3, 5, 1 << 16]),
)
def test_depth_scan_agrees_with_a_character_by_character_scan(
    pieces: list[str], chunk: int
) -> None:
    from strided._kernels import strict_json as _strict_json

    text = "".join(pieces).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_strict_json, "_CHUNK", chunk)  # chunk edges anywhere
        check_depth_exactly(text, scalar_depth(text))


JSON_VALUES = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.text(alphabet='a"\\[]{}\n'),
    lambda inner: (
        hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(alphabet='"\\[{'), inner, max_size=3)
    ),
    max_leaves=30,
)


def json_depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((json_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((json_depth(item) for item in value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, chunk=hs.sampled_from([1, 2, 7, 1 << 16]))
def test_depth_scan_measures_real_json_nesting(value: Any, chunk: int) -> None:
    from strided._kernels import strict_json as _strict_json

    text = json.dumps(value).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_strict_json, "_CHUNK", chunk)
        check_depth_exactly(text, json_depth(value))


def test_from_json_of_many_empty_strings_stays_near_its_input() -> None:
    count = 2_000_000
    document = (
        (b'{"dtype":"F32","shape":[%d],"data":[' % count) + b",".join([b'""'] * count) + b"]}"
    )

    def parse() -> None:
        with pytest.raises(st.FormatError, match="data\\[0\\]"):
            st.Tensor.from_json(document)

    assert peak_bytes(parse) < 8 * len(document)


def test_safetensors_header_of_tiny_entries_stays_within_a_constant_factor(tmp_path: Path) -> None:
    path = tmp_path / "tiny.safetensors"
    size = write_tiny_safetensors(path, 40_000)
    assert len(st.open_safetensors(path)) == 40_000
    # Python objects for ~55-byte entries: about 13x, as the reference library (12x).
    assert peak_bytes(lambda: st.open_safetensors(path)) < 16 * size


def test_tens_of_mib_of_json_under_a_memory_limit(tmp_path: Path) -> None:
    """24 MiB from_json, a 28 MiB header and a 28 MiB index under a 1.5 GiB address space."""
    header = tmp_path / "big.safetensors"
    write_tiny_safetensors(header, 480_000)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        json.dumps({"weight_map": {f"t{i}.weight": "big.safetensors" for i in range(900_000)}})
    )
    result = run_python(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
        import strided as st
        count = 8 << 20
        doc = b'{{"dtype":"F32","shape":[%d],"data":[' % count + b",".join([b'""'] * count) + b"]}}"
        try:
            st.Tensor.from_json(doc)
        except st.FormatError as error:
            print("json", type(error).__name__)
        del doc
        print("header", len(st.open_safetensors({str(header)!r})))
        try:
            st.open_safetensors({str(index)!r})
        except st.DataError as error:
            print("index", type(error).__name__)
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:3] == [
        "json FormatError",
        "header 480000",
        "index FormatError",
    ]


def test_the_command_line_gives_one_line_for_a_huge_index(tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {f"w{i}": "x.safetensors" for i in range(200_000)}}))
    result = subprocess.run(
        [STRIDED, "inspect", str(index)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


# -- memory-mapped files and copy=True --------------------------------------------------------


def test_zero_copy_tensors_view_the_file_and_copies_do_not(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    st.save_safetensors(path, {"w": st.tensor([1.0, 2.0], st.DType.F32)})
    mapped = st.load_safetensors(path)["w"]
    copied = st.load_safetensors(path, copy=True)["w"]
    lazy_copy = st.open_safetensors(path, copy=True).get("w")
    assert not mapped.shares_storage(copied)
    # Rewriting the file in place shows in the mapped tensor (the documented contract),
    # never in the copies.
    data = bytearray(path.read_bytes())
    data[-8:] = np.array([5.0, 6.0], dtype="<f4").tobytes()
    with open(path, "r+b") as file:
        file.write(data)
    assert mapped.tolist() == [5.0, 6.0]
    assert copied.tolist() == [1.0, 2.0] and lazy_copy.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("kind", ["safetensors", "npy", "gguf", "checkpoint"])
def test_copy_true_survives_truncation(tmp_path: Path, kind: str) -> None:
    """Truncating a mapped file kills the process on access (SIGBUS); copies are safe."""
    values = st.tensor([[1.5, -2.0], [3.0, 4.0]], st.DType.F32)
    if kind == "gguf":
        import gguf

        path = tmp_path / "m.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_tensor("w", values.numpy().copy())
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tensor = st.open_gguf(path, copy=True).get("w")
    elif kind == "npy":
        path = tmp_path / "m.npy"
        st.save_npy(path, values)
        tensor = st.load_npy(path, copy=True)
    else:
        path = tmp_path / "m.safetensors"
        st.save_safetensors(path, {"w": values})
        if kind == "checkpoint":
            tensor = st.open_checkpoint(path, copy=True)["w"]
        else:
            tensor = st.load_safetensors(path, copy=True)["w"]
    os.truncate(path, 0)
    assert tensor == values


# -- paths that hang or leak ------------------------------------------------------------------


@pytest.mark.parametrize(
    "reader",
    [
        "st.load_safetensors",
        "st.open_safetensors",
        "st.open_gguf",
        "st.load_npy",
        "st.open_checkpoint",
    ],
)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, reader: str) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    result = run_python(
        f"""
        import strided as st
        try:
            {reader}({str(fifo)!r})
        except st.FormatError as error:
            print("refused:", error)
        """,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    assert "not a regular file" in result.stdout


def test_the_command_line_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    result = subprocess.run(
        [STRIDED, "inspect", str(fifo)], capture_output=True, text=True, timeout=20, check=False
    )
    assert result.returncode == 1 and "not a regular file" in result.stderr


READERS: list[Callable[[Any], object]] = [
    st.load_safetensors,
    st.open_safetensors,
    st.open_gguf,
    st.load_npy,
    st.open_checkpoint,
]


@pytest.mark.parametrize("reader", READERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", ["bad\0name.safetensors", b"bad\0name.npy"])
def test_a_nul_byte_in_a_path_is_a_format_error(reader: Callable[[Any], object], path: Any) -> None:
    with pytest.raises(st.FormatError, match="NUL"):
        reader(path)


@pytest.mark.parametrize("path", ["out\0.safetensors", b"out\0.npy"])
def test_writers_refuse_a_nul_byte_too(path: Any) -> None:
    tensor = st.tensor([1], st.DType.I8)
    with pytest.raises(st.FormatError, match="NUL"):
        st.save_safetensors(path, {"t": tensor})
    with pytest.raises(st.FormatError, match="NUL"):
        st.save_npy(path, tensor)


def test_thousands_of_shards_within_the_open_file_limit(tmp_path: Path) -> None:
    tensor = st.tensor([1.0, 2.0], st.DType.F32)
    for i in range(1100):
        st.save_safetensors(tmp_path / f"model-{i:05d}.safetensors", {f"w{i}": tensor})
    result = run_python(
        f"""
        import os, resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
        import strided as st
        tensors = st.load_safetensors({str(tmp_path)!r})
        opened = st.open_checkpoint({str(tmp_path)!r})
        print(len(tensors), len(opened), opened["w1099"].tolist(), len(os.listdir("/proc/self/fd")))
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    count, opened, *rest = result.stdout.split()
    assert (count, opened) == ("1100", "1100")
    assert int(rest[-1]) < 64  # the mappings hold no descriptors


def test_mapped_arrays_cannot_be_made_writable(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    st.save_safetensors(path, {"w": st.tensor([1.0, 2.0], st.DType.F32)})
    array = st.load_safetensors(path)["w"].numpy()
    for candidate in (array, array.base):
        if isinstance(candidate, np.ndarray):
            with pytest.raises(ValueError):
                candidate.flags.writeable = True
    assert st.load_safetensors(path)["w"].tolist() == [1.0, 2.0]


# -- terminal injection -----------------------------------------------------------------------

HOSTILE_TEXT = "evil\x1b]0;pwned\x07\x1b[2J\rname\u202e\x9b31m"


def test_inspect_escapes_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "evil.safetensors"
    st.save_safetensors(
        path,
        {HOSTILE_TEXT: st.tensor([1.0], st.DType.F32)},
        metadata={HOSTILE_TEXT: HOSTILE_TEXT},
    )
    for args in ([], ["--group"]):
        out = subprocess.run(
            [STRIDED, "inspect", str(path), *args], capture_output=True, timeout=60, check=False
        )
        assert out.returncode == 0, out.stderr
        text = out.stdout.decode("utf-8")
        for char in text:
            assert char == "\n" or char.isprintable(), repr(char)
        assert "evil\\x1b]0;pwned\\x07\\x1b[2J\\rname\\u202e\\x9b31m" in text
    verify = subprocess.run(
        [STRIDED, "verify", str(path)], capture_output=True, timeout=60, check=False
    )
    assert all(char == "\n" or char.isprintable() for char in verify.stdout.decode())


def test_error_lines_escape_control_characters(tmp_path: Path) -> None:
    path = tmp_path / f"bad{HOSTILE_TEXT[4:9]}.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\x1b[2J}")
    result = subprocess.run(
        [STRIDED, "inspect", str(path)], capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert all(char == "\n" or char.isprintable() for char in result.stderr.decode())


# -- smaller findings -------------------------------------------------------------------------


def npy_with_header(header: str) -> bytes:
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


@pytest.mark.parametrize(
    "spelling",
    [
        "'shape': (2,), u'shape': (2,)",
        "'shape': (2,), 'sha' 'pe': (2,)",
        "\"shape\": (2,), 'shape': (2,)",
    ],
)
def test_npy_repeated_keys_are_compared_by_value(tmp_path: Path, spelling: str) -> None:
    path = tmp_path / "dup.npy"
    header = "{'descr': '<i4', 'fortran_order': False, " + spelling + "}"
    path.write_bytes(npy_with_header(header) + np.arange(2, dtype="<i4").tobytes())
    with pytest.raises(st.FormatError, match="repeats a key"):
        st.load_npy(path)


def test_npy_python2_longs_read_as_numpy_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "py2.npy"
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }"
    path.write_bytes(npy_with_header(header) + np.arange(6, dtype="<i4").tobytes())
    with pytest.warns(UserWarning):
        expected = np.load(path)
    assert st.load_npy(path).tolist() == expected.tolist()
    # A quoted "2L" is not a number: the header is still refused.
    path.write_bytes(
        npy_with_header("{'descr': '<i4', 'fortran_order': False, 'shape': ('2L',), }") + bytes(8)
    )
    with pytest.raises(st.FormatError):
        st.load_npy(path)


def test_safetensors_metadata_null_is_no_metadata(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    header = b'{"__metadata__":null,"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    path = tmp_path / "null.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + np.float32(2.5).tobytes())
    assert load_file(str(path))["w"].tolist() == [2.5]  # the reference reads it
    assert st.open_safetensors(path).metadata == {}
    assert st.load_safetensors(path)["w"].tolist() == [2.5]
    for bad in (b"[]", b'""', b"0", b"false"):
        other = header.replace(b"null", bad)
        path.write_bytes(struct.pack("<Q", len(other)) + other + np.float32(2.5).tobytes())
        with pytest.raises(st.FormatError, match="__metadata__"):
            st.open_safetensors(path)


class ExplodingDict(dict[str, Any]):
    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def keys(self) -> Any:
        raise RuntimeError("boom")


class ExplodingList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        raise RuntimeError("boom")


class EndlessList(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        while True:
            yield "1"

    def __len__(self) -> int:
        return 2


class LyingKey(str):
    def __hash__(self) -> int:
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    "document",
    [
        ExplodingDict(dtype="I8", shape=[2], data=["1", "2"]),
        {"dtype": "I8", "shape": [2], "data": ExplodingList(["1", "2"])},
        {"dtype": "I8", "shape": ExplodingList([2]), "data": ["1", "2"]},
        {"dtype": "I8", "shape": [2], "data": EndlessList()},
        {"dtype": LyingKey("I8"), "shape": [2], "data": ["1", "2"]},
        {LyingKey("dtype"): "I8", "shape": [2], "data": ["1", "2"]},
    ],
    ids=["dict", "data list", "shape list", "endless data", "dtype str", "key str"],
)
def test_from_dict_hostile_subclasses_raise_data_errors(document: Any) -> None:
    with pytest.raises(st.DataError):
        st.Tensor.from_dict(document)


def test_plain_subclasses_still_work() -> None:
    class Named(dict[str, Any]):
        pass

    class Items(list[Any]):
        pass

    tensor = st.Tensor.from_dict(Named(dtype="I8", shape=Items([2]), data=Items(["1", "-2"])))
    assert tensor.tolist() == [1, -2]


def test_a_directory_destination_is_named(tmp_path: Path) -> None:
    source = tmp_path / "a.safetensors"
    st.save_safetensors(source, {"w": st.tensor([1.0], st.DType.F32)})
    target = tmp_path / "out.safetensors"
    target.mkdir()
    result = subprocess.run(
        [STRIDED, "convert", str(source), str(target)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert str(target) in result.stderr and ".tmp" not in result.stderr
    with pytest.raises(IsADirectoryError) as caught:
        st.save_safetensors(target, {"w": st.tensor([1.0], st.DType.F32)})
    assert caught.value.filename == str(target)
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors", "out.safetensors"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_failing_stdout_is_named(tmp_path: Path) -> None:
    source = tmp_path / "a.safetensors"
    st.save_safetensors(source, {f"w{i}": st.tensor([1.0], st.DType.F32) for i in range(400)})
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [STRIDED, "inspect", str(source)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.startswith("strided: <stdout>:") and str(source) not in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_atomic_write_leaves_the_umask_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(mask: int) -> int:
        raise AssertionError("the process-wide umask must not change")

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", forbidden)
        path = tmp_path / "m.safetensors"
        st.save_safetensors(path, {"w": st.tensor([1.0], st.DType.F32)})
        plain = tmp_path / "plain"
        plain.write_bytes(b"")
        assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o640
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_convert_dtype_leaves_integer_tensors_alone(tmp_path: Path) -> None:
    source = tmp_path / "m.safetensors"
    ids = st.Tensor.from_numpy(np.arange(512, dtype=np.int64))
    mask = st.tensor([True, False], st.DType.BOOL)
    st.save_safetensors(
        source, {"position_ids": ids, "mask": mask, "w": st.tensor([0.1], st.DType.F32)}
    )
    target = tmp_path / "bf16.safetensors"
    result = subprocess.run(
        [STRIDED, "convert", str(source), str(target), "--dtype", "BF16"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = st.load_safetensors(target)
    assert out["position_ids"] == ids and out["mask"] == mask
    assert out["w"].dtype is st.DType.BF16
    usage = subprocess.run(
        [STRIDED, "convert", str(source), str(target), "--dtype", "I32"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2 and "float" in usage.stderr


# -- size-stressed fuzzing --------------------------------------------------------------------

STRESS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@STRESS
@given(count=hs.integers(1, 20_000), cut=hs.integers(0, 64), junk=hs.binary(max_size=8))
def test_fuzz_many_tiny_entries(
    tmp_path_factory: pytest.TempPathFactory, count: int, cut: int, junk: bytes
) -> None:
    path = tmp_path_factory.mktemp("tiny") / "t.safetensors"
    header = tiny_entries_header(count)
    header = header[: len(header) - cut] + junk if cut or junk else header
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(count))
    try:
        opened = st.open_checkpoint(path)
    except st.DataError:
        return
    assert len(opened) == count


@STRESS
@given(depth=hs.integers(1, 200_000), opener=hs.sampled_from("[{"), tail=hs.binary(max_size=4))
def test_fuzz_deep_json_documents(depth: int, opener: str, tail: bytes) -> None:
    closer = "]" if opener == "[" else "}"
    text = (opener * depth + closer * depth).encode() + tail
    with pytest.raises(st.DataError):
        st.Tensor.from_json(text)


@STRESS
@given(depth=hs.integers(1, 3), count=hs.integers(0, 1 << 40), vtype=hs.integers(0, 13))
def test_fuzz_deep_gguf_metadata_arrays(
    tmp_path_factory: pytest.TempPathFactory, depth: int, count: int, vtype: int
) -> None:
    """Arrays of arrays with claimed counts: refused or read, never a stray exception."""
    payload = b""
    for _ in range(depth):
        payload = struct.pack("<IQ", 9, 1) + payload
    body = struct.pack("<I", 9) + payload + struct.pack("<IQ", vtype, count) + bytes(16)
    key = b"k"
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + body
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    path.write_bytes(data)
    try:
        st.open_gguf(path)
    except st.DataError:
        pass
