"""``strided convert``'s rules for every destination format: nothing left behind when
killed, one overwrite rule for files and folders, and errors naming things once."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import strided as st
from strided.cli._text import tensor_error
from strided.io import _shards

ENV = {**os.environ, "PYTHONPATH": str(Path(st.__file__).resolve().parent.parent)}


def strided(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "strided", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)


def _sparse_source(path: Path, mib: int) -> Path:
    """One F32 tensor ``w`` of ``mib`` MiB of zeros, written sparse (no time to make it)."""
    count = (mib << 20) // 4
    header = json.dumps({"w": {"dtype": "F32", "shape": [count], "data_offsets": [0, 4 * count]}})
    data = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(data)) + data)
        handle.truncate(8 + len(data) + 4 * count)
    return path


def _random_source(path: Path, count: int) -> Path:
    """One F32 tensor ``w`` of ``count`` random values (slow to format as text)."""
    values = np.random.default_rng(5).standard_normal(count).astype(np.float32)
    st.save_safetensors(path, {"w": st.Tensor.from_numpy(values)})
    return path


@pytest.mark.parametrize("target", ["out.npy", "out.json"])
def test_a_killed_convert_leaves_nothing_for_npy_and_json(tmp_path: Path, target: str) -> None:
    if target == "out.npy":
        source = _sparse_source(tmp_path / "big.safetensors", 512)
    else:
        source = _random_source(tmp_path / "big.safetensors", 1 << 22)
    command = [sys.executable, "-m", "strided", "convert", str(source), str(tmp_path / target)]
    command += ["--dtype", "F64"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    deadline = time.monotonic() + 120
    while not any(name.endswith(".tmp") for name in os.listdir(tmp_path)):
        assert process.poll() is None, "convert ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.stderr is not None
    process.stderr.close()
    deadline = time.monotonic() + 30
    while sorted(os.listdir(tmp_path)) != ["big.safetensors"]:
        assert time.monotonic() < deadline, os.listdir(tmp_path)
        time.sleep(0.02)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src.safetensors"
    tensors = {
        "a": st.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)),
        "b": st.Tensor.from_numpy(np.array([1.5, -2.0], np.float32)),
    }
    st.save_safetensors(path, tensors, metadata={"format": "pt"})
    return path


State = dict[str, "bytes | State"]


def _state(folder: Path) -> State:
    """Every entry under ``folder``: a file's bytes, a folder's own state."""
    return {
        entry.name: _state(entry) if entry.is_dir() else entry.read_bytes()
        for entry in sorted(folder.iterdir())
    }


_DESTINATIONS = [
    ("out.safetensors", []),
    ("out.npy", ["--name", "a"]),
    ("out.json", ["--name", "a"]),
    ("shards", ["--max-shard-size", "16B"]),
]


@pytest.mark.parametrize(("name", "extra"), _DESTINATIONS)
def test_an_existing_destination_is_refused_without_overwrite(
    tmp_path: Path, source: Path, name: str, extra: list[str]
) -> None:
    target = tmp_path / name
    first = strided("convert", str(source), str(target), *extra, "--dtype", "F16")
    assert first.returncode == 0, first.stderr
    before = _state(tmp_path)
    again = strided("convert", str(source), str(target), *extra)
    assert again.returncode == 1
    assert (
        again.stderr
        == f"strided: {target}: "
        + ("the folder exists and is not empty" if name == "shards" else "already exists")
        + " (--overwrite replaces it)\n"
    )
    assert _state(tmp_path) == before


@pytest.mark.parametrize(("name", "extra"), _DESTINATIONS)
def test_overwrite_replaces_the_destination_whole(
    tmp_path: Path, source: Path, name: str, extra: list[str]
) -> None:
    target = tmp_path / name
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert strided("convert", str(source), str(fresh / name), *extra).returncode == 0
    expected = _state(fresh)[name]
    # What is there first differs in content and, for the folder, in its files.
    older = ["--dtype", "F16"] + (["--max-shard-size", "5GB"] if name == "shards" else extra)
    assert strided("convert", str(source), str(target), *older).returncode == 0
    assert _state(tmp_path)[name] != expected
    result = strided("convert", str(source), str(target), *extra, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert _state(tmp_path)[name] == expected
    assert sorted(os.listdir(tmp_path)) == sorted(["src.safetensors", "fresh", name])


def test_overwrite_never_replaces_a_folder_by_a_file_or_a_foreign_folder(
    tmp_path: Path, source: Path
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(source.read_bytes())
    (folder / "config.json").write_text("{}")
    before = _state(tmp_path)
    shards = ["--max-shard-size", "16B", "--overwrite"]
    refused = strided("convert", str(source), str(folder), *shards)
    assert refused.returncode == 1
    assert "'config.json'" in refused.stderr and "not replaced" in refused.stderr
    as_file = tmp_path / "dir.safetensors"
    as_file.mkdir()
    assert strided("convert", str(source), str(as_file), "--overwrite").returncode == 1
    a_file = tmp_path / "file"
    a_file.write_bytes(b"keep")
    assert strided("convert", str(source), str(a_file), *shards).returncode == 1
    assert _state(tmp_path) == {**before, "dir.safetensors": {}, "file": b"keep"}


def test_an_empty_folder_counts_as_absent(tmp_path: Path, source: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    result = strided("convert", str(source), str(folder), "--max-shard-size", "16B")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(folder)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]


def test_the_portable_exchange_swaps_two_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where Linux's one-step exchange is missing, two renames do the same swap."""
    for linux in (True, False):
        new, old = tmp_path / "new", tmp_path / "old"
        new.mkdir()
        old.mkdir()
        (new / "n").write_text("new")
        (old / "o").write_text("old")
        if not linux:
            monkeypatch.setattr(sys, "platform", "elsewhere")
        _shards._exchange(str(new), str(old))
        assert _state(tmp_path) == {"new": {"o": b"old"}, "old": {"n": b"new"}}
        for folder in (new, old):
            for entry in folder.iterdir():
                entry.unlink()
            folder.rmdir()


def _bad_shard_folder(folder: Path) -> Path:
    """A shard folder whose ``a.safetensors`` holds BOOL tensor ``m1`` with a 7 in it."""
    folder.mkdir()
    size = 17 << 20  # a task of its own, so --jobs 2 runs it in a worker
    entries = {
        f"m{i}": {"dtype": "BOOL", "shape": [size], "data_offsets": [size * i, size * (i + 1)]}
        for i in range(2)
    }
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    shard = folder / "a.safetensors"
    with open(shard, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + 2 * size)
        handle.seek(8 + len(header) + size + 5)
        handle.write(b"\x07")
    good = {"x": st.Tensor.from_numpy(np.ones(3, np.float32))}
    st.save_safetensors(folder / "b.safetensors", good)
    return shard


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_failing_job_names_the_file_and_the_tensor_once(tmp_path: Path, jobs: str) -> None:
    folder = tmp_path / "model"
    shard = _bad_shard_folder(folder)
    runs = [
        ["hash", str(folder)],
        ["verify", str(folder)],
        ["inspect", str(folder), "--full"],
        ["convert", str(folder), str(tmp_path / "out.safetensors"), "--dtype", "F16"],
        ["diff", str(folder), str(folder)],
    ]
    for args in runs:
        result = strided(*args, "--jobs", jobs)
        assert result.returncode in (1, 2), (args, result.stderr)
        line = result.stderr
        assert line.count("\n") == 1 and line.startswith("strided: "), line
        assert line.count(str(shard)) == 1 and line.count("'m1'") == 1, (args, line)
        assert "BOOL byte 5 is 7" in line
    assert sorted(os.listdir(tmp_path)) == ["model"]


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("bad byte", "f.st: tensor 'w': bad byte"),
        ("f.st: bad byte", "f.st: tensor 'w': bad byte"),
        ("tensor 'w': bad byte", "f.st: tensor 'w': bad byte"),
        ("f.st: tensor 'w': bad byte", "f.st: tensor 'w': bad byte"),
        ("d/f.st: tensor 'w': bad byte", "d/f.st: tensor 'w': bad byte"),
        ("d/f.st: tensor 'w2': bad", "f.st: tensor 'w': d/f.st: tensor 'w2': bad"),
    ],
)
def test_tensor_error_names_each_once(message: str, expected: str) -> None:
    assert tensor_error("f.st", "w", Exception(message)) == expected
