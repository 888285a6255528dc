"""Hostile distributed checkpoints: each a FormatError or LimitError naming the problem,
raised before anything outside the folder is read, without running anything, quickly and
in bounded memory (measured in a child process).

Each folder is a real one (written by ``torch.distributed.checkpoint`` in a child, or
laid out with torch's own DCP classes) whose ``.metadata`` or ``.distcp`` bytes are
then edited.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

import strided as st
from strided.cli import main
from tests.budgetchild import opened_in_child

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from tests import dcpcraft, dcpwrite  # noqa: E402


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dcpwrite.cached(tmp_path_factory.getbasetemp(), "dcp-single", dcpwrite.write_single)


@pytest.fixture
def copy(single: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(single, folder)
    return folder


@pytest.fixture
def split(tmp_path: Path) -> Path:
    """``w`` (F32 [7, 5]) split into rows 0-3 and 4-6 across two files."""
    full = torch.arange(35, dtype=torch.float32).reshape(7, 5)
    return dcpcraft.craft(tmp_path / "split", {"w": (full, dcpcraft.rows(full.shape, [4]))})


def _span(metadata: Any, fqn: str) -> Any:
    return next(info for index, info in metadata.storage_data.items() if index.fqn == fqn)


def _refused(folder: Path, kind: type[st.DataError], *words: str) -> str:
    with pytest.raises(kind) as caught:
        st.open_checkpoint(folder)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize(
    "path", ["../outside.distcp", "/etc/passwd", "sub/__0_0.distcp", "..", "C:evil", "a\\b", ""]
)
def test_a_span_outside_the_folder_is_refused_before_reading(copy: Path, path: str) -> None:
    # A valid file where "../outside.distcp" points: it must not be opened.
    shutil.copy(copy / "__0_0.distcp", copy.parent / "outside.distcp")
    metadata = dcpcraft.load(copy)
    _span(metadata, "model.w").relative_path = path
    dcpcraft.save(copy, metadata)
    _refused(copy, st.FormatError, "plain file name", "model.w")


def test_a_missing_distcp_file_is_named(copy: Path) -> None:
    os.remove(copy / "__0_0.distcp")
    _refused(copy, st.FormatError, "__0_0.distcp", "not in the folder")


@pytest.mark.parametrize("field", ["offset", "length"])
def test_a_span_past_the_end_of_its_file(copy: Path, field: str) -> None:
    size = (copy / "__0_0.distcp").stat().st_size
    metadata = dcpcraft.load(copy)
    setattr(_span(metadata, "model.h"), field, size + 10)
    dcpcraft.save(copy, metadata)
    _refused(copy, st.FormatError, "model.h", "runs past the end", "__0_0.distcp")


def _move(metadata: Any, fqn: str, index: int, offsets: tuple[int, ...], sizes: tuple[int, ...]):
    """Give chunk ``index`` of ``fqn`` new offsets and sizes (and its span the new key)."""
    chunk = metadata.state_dict_metadata[fqn].chunks[index]
    key = next(
        key for key in metadata.storage_data
        if key.fqn == fqn and tuple(key.offset) == tuple(chunk.offsets)
    )  # fmt: skip
    span = metadata.storage_data.pop(key)
    metadata.storage_data[dcpcraft.MetadataIndex(fqn, offsets, index)] = span
    chunk.offsets, chunk.sizes = torch.Size(offsets), torch.Size(sizes)


@pytest.mark.parametrize(
    ("offsets", "sizes", "words"),
    [
        ((3, 0), (4, 5), ("overlap", "element [3, 0]")),
        ((5, 0), (2, 5), ("gap", "element [4, 0]")),
        ((4, 1), (3, 4), ("gap", "element [4, 0]")),
        ((4, 0), (4, 5), ("reaches past dim 0",)),
        ((4, 0), (3, 6), ("reaches past dim 1",)),
    ],
)
def test_chunks_must_cover_the_tensor_exactly_once(
    split: Path, offsets: tuple[int, ...], sizes: tuple[int, ...], words: tuple[str, ...]
) -> None:
    metadata = dcpcraft.load(split)
    _move(metadata, "w", 1, offsets, sizes)
    dcpcraft.save(split, metadata)
    _refused(split, st.FormatError, "'w'", *words)


def test_a_chunk_of_another_dtype_is_refused_when_read(
    split: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metadata = dcpcraft.load(split)
    metadata.state_dict_metadata["w"].properties.dtype = torch.float16
    dcpcraft.save(split, metadata)
    checkpoint = st.open_checkpoint(split)  # the archives are read when needed
    with pytest.raises(st.FormatError, match=r"holds a F32 tensor of shape .4, 5.*says F16"):
        checkpoint["w"]
    assert main(["verify", str(split)]) == 1
    assert "F16" in capsys.readouterr().err


def test_a_chunk_of_another_shape_is_refused_when_read(split: Path) -> None:
    metadata = dcpcraft.load(split)
    metadata.state_dict_metadata["w"].size = torch.Size([5, 7])
    _move(metadata, "w", 0, (0, 0), (4, 7))
    _move(metadata, "w", 1, (4, 0), (1, 7))
    dcpcraft.save(split, metadata)
    checkpoint = st.open_checkpoint(split)
    with pytest.raises(st.FormatError, match=r"shape \[4, 5\], .metadata says F32 \[4, 7\]"):
        checkpoint["w"]
    with pytest.raises(st.FormatError, match="'w'"):
        checkpoint.digest()


class _Evil:
    def __init__(self, sentinel: Path) -> None:
        self.sentinel = sentinel

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.sentinel}",))


def test_a_metadata_naming_os_system_runs_nothing(copy: Path, tmp_path: Path) -> None:
    sentinel = tmp_path / "ran"
    metadata = dcpcraft.load(copy)
    metadata.planner_data = {"x": _Evil(sentinel)}
    dcpcraft.save(copy, metadata)
    _refused(copy, st.FormatError, "system", "not an allowed global")
    assert not sentinel.exists()


def test_an_item_naming_os_system_is_unreadable_and_runs_nothing(copy: Path, tmp_path: Path):
    sentinel = tmp_path / "ran"
    metadata = dcpcraft.load(copy)
    span = dcpcraft.append(copy, "__0_0.distcp", dcpcraft.archive(_Evil(sentinel)))
    metadata.storage_data[dcpcraft.MetadataIndex("evil")] = span
    metadata.state_dict_metadata["evil"] = dcpcraft.BytesStorageMetadata()
    dcpcraft.save(copy, metadata)
    checkpoint = st.open_checkpoint(copy)
    assert "system" in checkpoint.unreadable["evil"]
    assert not sentinel.exists()


def test_transformed_spans_are_refused_by_name(copy: Path) -> None:
    metadata = dcpcraft.load(copy)
    _span(metadata, "model.w").transform_descriptors = ["stream.zstd/1"]
    dcpcraft.save(copy, metadata)
    _refused(copy, st.FormatError, "stream.zstd/1", "transforms")


def test_a_folder_written_as_safetensors_is_refused_by_name(tmp_path: Path) -> None:
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from torch.distributed.checkpoint.filesystem import FileSystemWriter, SerializationFormat

    folder = tmp_path / "st"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        writer = FileSystemWriter(folder, serialization_format=SerializationFormat.SAFETENSORS)
        dcp.save({"w": torch.ones(3, 4), "step": 2}, storage_writer=writer)
    _refused(folder, st.FormatError, "SerializationFormat.SAFETENSORS")


def test_a_span_that_is_not_an_archive(copy: Path) -> None:
    span = _span(dcpcraft.load(copy), "model.w")
    with open(copy / span.relative_path, "r+b") as handle:
        handle.seek(span.offset)
        handle.write(b"\0" * 64)
    _refused(copy, st.FormatError, "model.w", "does not begin with a torch.save zip archive")


def test_a_chunk_archive_holding_two_tensors(split: Path) -> None:
    metadata = dcpcraft.load(split)
    two = dcpcraft.archive({"a": torch.zeros(4, 5), "b": torch.zeros(4, 5)})
    key = next(key for key in metadata.storage_data if tuple(key.offset) == (0, 0))
    metadata.storage_data[key] = dcpcraft.append(split, "__0_0.distcp", two)
    dcpcraft.save(split, metadata)
    with pytest.raises(st.FormatError, match="holds 2 tensors, not one"):
        st.open_checkpoint(split)["w"]


def test_a_tensor_without_chunks_or_spans(split: Path) -> None:
    metadata = dcpcraft.load(split)
    metadata.storage_data = {
        key: value for key, value in metadata.storage_data.items() if tuple(key.offset) != (4, 0)
    }
    dcpcraft.save(split, metadata)
    _refused(split, st.FormatError, "no span for 'w' (chunk at [4, 0])")
    metadata.state_dict_metadata["w"].chunks = []
    dcpcraft.save(split, metadata)
    _refused(split, st.FormatError, "'w' has no chunks")


def test_a_size_past_max_elements_is_a_limit_error(split: Path) -> None:
    metadata = dcpcraft.load(split)
    metadata.state_dict_metadata["w"].size = torch.Size([2**40, 2**40])
    dcpcraft.save(split, metadata)
    _refused(split, st.LimitError, "MAX_ELEMENTS")


def test_huge_claims_fail_fast_in_bounded_memory(split: Path, tmp_path: Path) -> None:
    # A 64 GiB tensor of one chunk claimed by a 1.6 KB span.
    metadata = dcpcraft.load(split)
    metadata.state_dict_metadata["w"].size = torch.Size([2**17, 2**17])
    _move(metadata, "w", 0, (0, 0), (2**17, 2**17))
    metadata.state_dict_metadata["w"].chunks.pop()
    dcpcraft.save(split, metadata)
    found = opened_in_child(split)
    assert "FormatError" in str(found["outcome"]) and "cannot be in its span" in str(
        found["outcome"]
    )
    assert int(found["grew_kib"]) < 16 << 10, found  # 16 MiB: nothing sized by the claim
    # 4000 chunks cutting a tensor into 16 million cells: refused before the grid is made.
    crafted = tmp_path / "diagonal"
    shutil.copytree(split, crafted)
    metadata = dcpcraft.load(crafted)
    entry = metadata.state_dict_metadata["w"]
    entry.size = torch.Size([4000, 4000])
    span = next(iter(metadata.storage_data.values()))
    metadata.storage_data = {}
    entry.chunks = []
    for index in range(4000):
        chunk = dcpcraft.ChunkStorageMetadata(torch.Size([index, index]), torch.Size([1, 1]))
        entry.chunks.append(chunk)
        metadata.storage_data[dcpcraft.MetadataIndex("w", (index, index), index)] = span
    dcpcraft.save(crafted, metadata)
    found = opened_in_child(crafted)
    assert "LimitError" in str(found["outcome"]) and "cells" in str(found["outcome"]), found
    assert int(found["grew_kib"]) < 64 << 10, found
