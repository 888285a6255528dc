"""The one format table: safetensors framing is checked before zip, pickle and JSON.

A safetensors header length is any number, so its first bytes can look like another
format's magic: ``0x80`` then a protocol byte (a pickle), ``{`` or whitespace then ``{``
(JSON), ``PK\\x03\\x04`` (a zip). Every such file must read as the safetensors file it is,
through every reader and command, exactly as the reference library reads it.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from safetensors import safe_open

import strided as st
from strided.cli import main
from strided.io._detect import FORMATS, detect

# Header lengths whose first bytes mimic another format: 0x80 + protocol 2..5 (pickle),
# '{' (JSON), whitespace + '{' (JSON), and a few more of each residue.
TRICKY_LENGTHS = [
    0x0280,
    0x0380,
    0x0480,
    0x0580,
    128,
    123,
    123 + 256 * 5,
    0x7B20,
    0x7B09,
    0x7B0A,
    0x7B0D,
]


def tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "a.weight": rng.standard_normal((3, 5)).astype(np.float32),
        "b.bias": np.arange(4, dtype=np.int16),
    }


def crafted(path: Path, length: int, arrays: dict[str, np.ndarray] | None = None) -> Path:
    """A valid safetensors file whose header is exactly ``length`` bytes long."""
    arrays = tensors() if arrays is None else arrays
    entries: dict[str, object] = {}
    offset = 0
    names = {np.dtype(np.float32): "F32", np.dtype(np.int16): "I16"}
    for name, array in arrays.items():
        size = array.nbytes
        entries[name] = {
            "dtype": names[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    entries["__metadata__"] = {"pad": ""}
    bare = len(json.dumps(entries, separators=(",", ":")).encode())
    if bare <= length:
        entries["__metadata__"] = {"pad": "x" * (length - bare)}
    else:  # too short for metadata: trailing spaces pad it, as the reference writer does
        del entries["__metadata__"]
    header = json.dumps(entries, separators=(",", ":")).encode()
    assert len(header) <= length, f"length {length} is too short for the header"
    header += b" " * (length - len(header))
    data = b"".join(array.tobytes() for array in arrays.values())
    path.write_bytes(struct.pack("<Q", length) + header + data)
    return path


@pytest.mark.parametrize("length", TRICKY_LENGTHS)
def test_tricky_header_lengths_open_as_safetensors(tmp_path: Path, length: int) -> None:
    small = {"b.bias": tensors()["b.bias"]} if length < 200 else None
    path = crafted(tmp_path / "model.bin", length, small)
    head = path.read_bytes()[:16]
    assert detect(head, path.stat().st_size, str(path)).name == "safetensors"
    expected = safetensors.numpy.load_file(str(path))  # the reference reads it
    assert len(expected) == (1 if small else 2)
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.format == "safetensors"
        assert sorted(ckpt) == sorted(expected)
        for name, array in expected.items():
            np.testing.assert_array_equal(ckpt[name].numpy(), array)
        assert ckpt.metadata == (safe_open(str(path), "np").metadata() or {})
    loaded = st.load_safetensors(path)
    for name, array in expected.items():
        np.testing.assert_array_equal(loaded[name].numpy(), array)


@pytest.mark.parametrize("length", [0x0280, 123 + 256, 0x7B20])
def test_tricky_header_lengths_through_every_command(
    tmp_path: Path, length: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = crafted(tmp_path / "model.safetensors", length)
    plain = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file(tensors(), str(plain), metadata={"pad": "x"})
    for command in (["inspect"], ["verify"], ["hash"], ["inspect", "--json"]):
        assert main([*command, str(path)]) == 0, command
    capsys.readouterr()
    assert main(["hash", str(path)]) == 0
    first = capsys.readouterr().out
    assert main(["hash", str(plain)]) == 0
    second = capsys.readouterr().out

    # Every tensor digest and the checkpoint's match a plain file's (the padding
    # metadata differs, so its line does too).
    def digests(out: str) -> list[str]:
        return [line.split()[0] for line in out.splitlines() if "*metadata*" not in line]

    assert len(digests(first)) == 3
    assert digests(first) == digests(second)
    out = tmp_path / "out.safetensors"
    assert main(["convert", str(path), str(out)]) == 0
    assert main(["diff", str(path), str(out)]) == 0
    reread = safetensors.numpy.load_file(str(out))
    for name, array in tensors().items():
        np.testing.assert_array_equal(reread[name], array)


@pytest.mark.parametrize("length", [0x0280, 123, 0x7B09])
def test_tricky_shards_of_an_index_and_a_folder(tmp_path: Path, length: int) -> None:
    arrays = tensors()
    first = {"a.weight": arrays["a.weight"]}
    crafted(tmp_path / "model-00001-of-00002.safetensors", length, first)
    safetensors.numpy.save_file(
        {"b.bias": arrays["b.bias"]}, str(tmp_path / "model-00002-of-00002.safetensors")
    )
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.bias": "model-00002-of-00002.safetensors",
    }
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for source in (index, tmp_path):
        with st.open_checkpoint(source) as ckpt:
            assert ckpt.format == "safetensors"
            for name, array in arrays.items():
                np.testing.assert_array_equal(ckpt[name].numpy(), array)


def test_header_length_that_spells_zip_magic(tmp_path: Path) -> None:
    length = 0x04034B50  # the bytes b"PK\x03\x04": 67 MB of header
    path = crafted(tmp_path / "model.safetensors", length)
    assert path.read_bytes()[:4] == b"PK\x03\x04"
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.format == "safetensors"
        np.testing.assert_array_equal(ckpt["b.bias"].numpy(), tensors()["b.bias"])


def test_framing_needs_the_header_to_fit_the_file(tmp_path: Path) -> None:
    # A JSON text is never taken for safetensors framing, and a length past the end of
    # the file fails the framing check (so such a file goes to the next entries).
    assert detect(b'{"dtype":"F32",', 100, "x").name == "json"
    assert detect(b"  \n{", 4, "x").name == "json"
    head = struct.pack("<Q", 64) + b"{"
    assert detect(head, 8 + 64, "x").name == "safetensors"
    # A file framed as safetensors that fails only the framing is named for it.
    with pytest.raises(st.FormatError, match="runs past the end of the 71-byte file"):
        detect(head, 8 + 63, "x")
    with pytest.raises(st.LimitError, match="header length 100000001 exceeds the cap"):
        detect(struct.pack("<Q", 100_000_001) + b"{", 1 << 30, "x")
    with pytest.raises(st.FormatError, match="tried gguf, safetensors, zip, npy, pickle, json"):
        detect(struct.pack("<Q", 64) + b"[", 100, "x")
    assert detect(b"\x80\x02}q\x00", 100, "x").name == "pickle"
    assert [entry.name for entry in FORMATS] == [
        "gguf",
        "safetensors",
        "zip",
        "npy",
        "pickle",
        "json",
    ]


def test_index_over_the_cap_is_refused_at_its_size(tmp_path: Path) -> None:
    from strided.io._common import MAX_INDEX_BYTES

    index = tmp_path / "model.safetensors.index.json"
    with index.open("wb") as file:
        file.write(b'{"weight_map": {')
        file.truncate(MAX_INDEX_BYTES + 1)  # sparse: nothing of it is ever parsed
    tracemalloc.start()
    try:
        with pytest.raises(st.LimitError, match="exceeds the cap"):
            st.open_checkpoint(index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # refused at its size: none of its 100 MB was read


def test_unrecognized_file_names_what_was_tried(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"hello world, not a checkpoint")
    with pytest.raises(st.FormatError, match="tried gguf"):
        st.open_checkpoint(path)


@pytest.mark.parametrize("length", [0x0280, 123 + 256, 0x7B20])
def test_tricky_header_lengths_over_http(tmp_path: Path, length: int) -> None:
    pytest.importorskip("httpx")
    from tests.httpserver import FileServer

    crafted(tmp_path / "model.safetensors", length)
    server = FileServer(tmp_path)
    try:
        with st.open_checkpoint(server.url("model.safetensors")) as ckpt:
            assert ckpt.format == "safetensors"
            for name, array in tensors().items():
                np.testing.assert_array_equal(ckpt[name].numpy(), array)
    finally:
        server.close()
