"""GGUF metadata is charged to the open's one parse budget before it is built.

A GGUF header is tiny beside what Python builds from it: one byte of an INT8 array
becomes a list slot and an int object (about 40 bytes). The reader charges each array
before it makes the list, so a 16 MB header can no longer build 600 MB of ints.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import strided as st
from tests.budgetchild import opened_in_child


def int8_array_gguf(path: Path, count: int, value: int = -100) -> Path:
    key = b"x.values"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    header += struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 1, count)
    path.write_bytes(header + struct.pack("<b", value) * count)
    return path


def test_a_header_of_small_ints_cannot_build_gigabytes(tmp_path: Path) -> None:
    # 16 M INT8 values outside Python's small-int cache: 16 MB of header that would
    # become about 600 MB of list and int objects.
    path = int8_array_gguf(tmp_path / "ints.gguf", (1 << 24) - 16)
    found = opened_in_child(path)
    assert str(found["outcome"]).startswith("LimitError"), found
    assert "x.values" in str(found["outcome"])
    assert int(str(found["grew_kib"])) < 150 * 1024, found  # far below the 600 MB it claims


def test_metadata_within_the_budget_opens_with_its_values(tmp_path: Path) -> None:
    path = int8_array_gguf(tmp_path / "small.gguf", 1000, value=-7)
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.metadata["x.values"] == [-7] * 1000
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(path))
    assert [int(v) for v in reader.fields["x.values"].contents()] == [-7] * 1000


def test_the_budget_grows_with_the_header(tmp_path: Path) -> None:
    # The same values as UINT8 cost only their list slots (0..255 are shared ints),
    # and the budget allows 16 bytes per header byte: a 4 M-entry array opens.
    key = b"x.bytes"
    count = 1 << 22
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    header += struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 0, count)
    path = tmp_path / "bytes.gguf"
    path.write_bytes(header + bytes(range(256)) * (count // 256))
    with st.open_checkpoint(path) as ckpt:
        values = ckpt.metadata["x.bytes"]
    assert len(values) == count and values[:3] == [0, 1, 2] and values[-1] == 255
