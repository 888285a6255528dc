"""Split GGUF models: parts written by ``gguf.GGUFWriter`` read as one checkpoint, parts
that disagree refused naming the part, ``--max-shard-size`` writing llama.cpp's layout
(every part read by ``gguf.GGUFReader``), and converting a split model merging it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFValueType as T
from gguf import GGUFWriter

import strided as st
from strided.cli import main
from tests.gguf_oracle import read_kvs, read_tensors, write_reference

KVS: list[tuple[str, Any, T, T | None]] = [
    ("llama.context_length", 4096, T.UINT32, None),
    ("tokenizer.ggml.tokens", ["a", "b", "ü"], T.ARRAY, T.STRING),
]


def model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        f"blk.{i}.attn_q.weight": rng.standard_normal((8, 32)).astype(np.float32) for i in range(3)
    } | {"output_norm.weight": rng.standard_normal(32).astype(np.float16)}


@pytest.fixture
def split(tmp_path: Path) -> Path:
    folder = tmp_path / "split"
    folder.mkdir()
    write_reference(folder / "m.gguf", KVS, model(), split_max_tensors=1)
    return folder


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_reference_split_parts_open_as_one_checkpoint(split: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in split.iterdir()) == [
        f"m-0000{i}-of-00004.gguf" for i in range(1, 5)
    ]
    single = tmp_path / "single.gguf"
    write_reference(single, KVS, model())
    for path in (split / "m-00001-of-00004.gguf", split):
        with st.open_checkpoint(path) as checkpoint, st.open_checkpoint(single) as whole:
            assert list(checkpoint) == list(model())
            for name, array in model().items():
                assert checkpoint[name].numpy().tobytes() == array.tobytes()
            assert checkpoint.digest() == whole.digest()
            assert checkpoint.metadata_digest() == whole.metadata_digest()
            assert checkpoint.metadata["split.count"] == 4


def test_a_later_part_alone_points_at_the_first(split: Path) -> None:
    with pytest.raises(st.FormatError, match=r"m-00001-of-00004\.gguf"):
        st.open_checkpoint(split / "m-00003-of-00004.gguf")
    assert len(st.open_gguf(split / "m-00003-of-00004.gguf").keys()) == 1


def test_a_missing_part_is_named(split: Path) -> None:
    (split / "m-00003-of-00004.gguf").unlink()
    with pytest.raises(st.FormatError, match=r"m-00003-of-00004\.gguf.*missing"):
        st.open_checkpoint(split / "m-00001-of-00004.gguf")


def write_part(
    path: Path, number: int, count: int, total: int, tensors: dict[str, np.ndarray]
) -> None:
    writer = GGUFWriter(str(path), "llama")
    writer.add_key_value("split.no", number, T.UINT16)
    writer.add_key_value("split.count", count, T.UINT16)
    writer.add_key_value("split.tensors.count", total, T.INT32)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ((1, 3, 2, {"b": np.ones(2, np.float32)}), "m-00002-of-00002.gguf: says it is part 2 of 3"),
        ((0, 2, 2, {"b": np.ones(2, np.float32)}), "m-00002-of-00002.gguf: says it is part 1 of 2"),
        ((1, 2, 3, {"b": np.ones(2, np.float32)}), "m-00002-of-00002.gguf: says .*3 tensors"),
        ((1, 2, 2, {"a": np.ones(2, np.float32)}), "m-00002-of-00002.gguf: tensor 'a' is also in"),
        ((1, 2, 2, {"b": np.ones(2, np.float32), "c": np.ones(1, np.float32)}), "hold 3 tensors"),
    ],
)
def test_parts_that_disagree_are_refused_naming_the_part(
    tmp_path: Path, second: tuple[int, int, int, dict[str, np.ndarray]], message: str
) -> None:
    write_part(tmp_path / "m-00001-of-00002.gguf", 0, 2, 2, {"a": np.zeros(2, np.float32)})
    write_part(tmp_path / "m-00002-of-00002.gguf", *second)
    with pytest.raises(st.FormatError, match=message):
        st.open_checkpoint(tmp_path / "m-00001-of-00002.gguf")
    with pytest.raises(st.FormatError, match=message):
        st.open_checkpoint(tmp_path)


def test_a_first_part_under_another_name_is_refused(tmp_path: Path) -> None:
    write_part(tmp_path / "renamed.gguf", 0, 2, 2, {"a": np.zeros(2, np.float32)})
    with pytest.raises(st.FormatError, match=r"NAME-00001-of-00002\.gguf"):
        st.open_checkpoint(tmp_path / "renamed.gguf")


def test_a_folder_of_two_models_is_ambiguous(split: Path) -> None:
    shutil.copy(split / "m-00001-of-00004.gguf", split / "n-00001-of-00004.gguf")
    with pytest.raises(st.FormatError, match="one model"):
        st.open_checkpoint(split)


def test_max_shard_size_writes_the_llama_cpp_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "m.gguf"
    write_reference(source, KVS, model())
    out = tmp_path / "out" / "q.gguf"
    out.parent.mkdir()
    status, printed, err = cli(capsys, "convert", str(source), str(out), "--dtype", "F16",
                               "--max-shard-size", "1000B", "--jobs", "2")  # fmt: skip
    assert status == 0, err
    assert "4 tensors in 3 parts" in printed
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == [f"q-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    source_kvs = read_kvs(source)
    everything: dict[str, Any] = {}
    for number, name in enumerate(names):
        kvs = read_kvs(out.parent / name)
        split = [("split.no", "UINT16", number), ("split.count", "UINT16", 3),
                 ("split.tensors.count", "INT32", 4)]  # fmt: skip
        if number == 0:
            expected = [kv for kv in source_kvs if kv[0] != "general.file_type"]
            assert kvs == [*expected, ("general.file_type", "UINT32", 1), *split]
        else:
            assert kvs == split
        everything |= read_tensors(out.parent / name)
    assert list(everything) == list(model())
    # 8 x 32 F16 weights are 512 bytes: one per part, the F16 norm (64 bytes) beside the last.
    assert list(read_tensors(out.parent / names[0])) == list(model())[:1]
    assert list(read_tensors(out.parent / names[2])) == list(model())[2:]
    merged = tmp_path / "merged.gguf"
    status, _, err = cli(capsys, "convert", str(out.parent / names[0]), str(merged))
    assert status == 0, err
    assert read_tensors(merged) == everything
    assert all(not key.startswith("split.") for key, _, _ in read_kvs(merged))
    direct = tmp_path / "direct.gguf"
    assert cli(capsys, "convert", str(source), str(direct), "--dtype", "F16")[0] == 0
    assert merged.read_bytes() == direct.read_bytes()


def test_split_targets_must_be_free(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "m.gguf"
    write_reference(source, KVS, model())
    (tmp_path / "q-00002-of-00004.gguf").write_bytes(b"keep")
    status, _, err = cli(capsys, "convert", str(source), str(tmp_path / "q.gguf"),
                         "--max-shard-size", "1KB")  # fmt: skip
    assert status == 1 and "q-00002-of-00004.gguf" in err and "--overwrite" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "q-00002-of-00004.gguf"]
    assert (tmp_path / "q-00002-of-00004.gguf").read_bytes() == b"keep"
