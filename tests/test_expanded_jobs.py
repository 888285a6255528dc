"""Checkpoint jobs on PyTorch ``expand`` views: refused past 2^20-fold, exact when allowed.

A zero-stride view stores a few bytes and describes a tensor up to MAX_ELEMENTS long.
Every job (hash, verify, diff, convert, inspect --full, on any engine) refuses one whose
logical size exceeds its stored bytes more than MAX_EXPANSION-fold before reading any
data, naming the file and the tensor; with ``--allow-expanded`` the results are those of
the logical values. torch writes the files and is the oracle, with hashlib, NumPy and the
safetensors library; memory is measured in a child process.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.limits import MAX_EXPANSION
from strided.cli import main

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

OVER = MAX_EXPANSION + 1  # rows of a 3-element row: 12 stored bytes, 12 * OVER logical


def expanded_state() -> dict[str, Any]:
    return {
        # 12 stored bytes, (2^20 + 1) x 12 logical: refused without the flag.
        "rows": torch.tensor([1.5, -2.0, 3.25]).expand(OVER, 3),
        # Exactly 2^20-fold: processed without the flag.
        "edge": torch.tensor([-7], dtype=torch.int32).expand(MAX_EXPANSION),
        "plain": torch.arange(6, dtype=torch.int16).reshape(2, 3),
        "flags": torch.tensor([True, False]),
    }


@pytest.fixture
def expanded(tmp_path: Path) -> Path:
    path = tmp_path / "expanded.pt"
    torch.save(expanded_state(), path)
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def logical(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    """What torch.load gives, as contiguous NumPy arrays (the logical values)."""
    loaded = torch.load(path, weights_only=True)
    return {name: np.ascontiguousarray(t.numpy()) for name, t in loaded.items()}


_NAMES = {np.float32: "F32", np.int32: "I32", np.int16: "I16", np.bool_: "BOOL"}


def reference_digest(array: np.ndarray[Any, Any]) -> str:
    """SHA-256 of the header text and the logical little-endian bytes, by hand."""
    dtype = _NAMES[array.dtype.type]
    header = f'{{"dtype":"{dtype}","shape":[{",".join(map(str, array.shape))}]}}'
    return hashlib.sha256(header.encode() + array.tobytes()).hexdigest()


def reference_checkpoint_digest(digests: dict[str, str]) -> str:
    lines = "".join(f"{name}\t{digests[name]}\n" for name in sorted(digests))
    return hashlib.sha256(lines.encode()).hexdigest()


# -- stored bytes --------------------------------------------------------------------------


def test_info_reports_stored_bytes_and_logical_size(expanded: Path) -> None:
    with st.open_checkpoint(expanded) as checkpoint:
        rows, edge, plain = (
            checkpoint.info("rows"),
            checkpoint.info("edge"),
            checkpoint.info("plain"),
        )
    assert rows == st.TensorInfo("rows", "F32", st.Shape((OVER, 3)), 12)
    assert rows.logical_len == OVER * 12
    assert (edge.byte_len, edge.logical_len) == (4, 4 * MAX_EXPANSION)
    assert plain.byte_len == plain.logical_len == 12


@settings(max_examples=40, deadline=None)
@given(
    dims=hs.lists(hs.integers(0, 5), min_size=1, max_size=3),
    strides=hs.lists(hs.integers(0, 4), min_size=3, max_size=3),
    offset=hs.integers(0, 3),
)
def test_stored_bytes_cover_every_distinct_element(
    dims: list[int], strides: list[int], offset: int
) -> None:
    strides = strides[: len(dims)]
    reach = (
        offset + sum((d - 1) * s for d, s in zip(dims, strides, strict=True)) if all(dims) else 0
    )
    storage = torch.arange(reach + 1, dtype=torch.float64)
    view = torch.as_strided(storage, dims, strides, offset)
    positions = {
        offset + sum(i * s for i, s in zip(index, strides, strict=True))
        for index in np.ndindex(*dims)
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "view.pt"
        torch.save({"v": view}, path)
        with st.open_checkpoint(path) as checkpoint:
            stored = checkpoint.info("v").byte_len
    numel = math.prod(dims)
    assert len(positions) * 8 <= stored <= numel * 8
    if len(positions) == numel:  # nothing repeats: stored is the logical size
        assert stored == numel * 8
    else:  # within the extent of the distinct elements, and of the axes that move
        assert stored <= (max(positions) - min(positions) + 1) * 8
        moving = math.prod(d for d, s in zip(dims, strides, strict=True) if s)
        assert stored <= moving * 8


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_an_expand_of_a_block_stores_exactly_the_block(tmp_path: Path, fmt: str) -> None:
    block = torch.arange(12, dtype=torch.float32).reshape(3, 1, 4)
    path = tmp_path / "block.pt"
    torch.save({"e": block.expand(3, 1000, 4)}, path, _use_new_zipfile_serialization=fmt == "zip")
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.info("e").byte_len == 48
        assert checkpoint.info("e").logical_len == 48 * 1000


def test_inspect_shows_stored_bytes(expanded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "inspect", str(expanded), "--json")
    assert status == 0
    document = json.loads(out)
    rows = {row["name"]: row for row in document["tensors"]}
    assert rows["rows"]["bytes"] == 12 and rows["rows"]["numel"] == OVER * 3
    assert rows["edge"]["bytes"] == 4
    assert document["totals"]["bytes"] == 12 + 4 + 12 + 2


# -- refused without --allow-expanded ----------------------------------------------------------


REFUSING = [
    (["hash"], 1),
    (["hash", "--jobs", "2"], 1),
    (["hash", "--json"], 1),
    (["verify"], 1),
    (["inspect", "--full"], 1),
    (["inspect", "--full", "--jobs", "2"], 1),
    (["convert", "@out.safetensors"], 1),
    (["convert", "@shards", "--max-shard-size", "1MB"], 1),
    (["convert", "@out.npy", "--name", "rows"], 1),
    (["convert", "@out.json", "--name", "rows"], 1),
    (["diff", "@dense.safetensors"], 2),  # trouble with the input, as diff reports it
]


@pytest.mark.parametrize(("command", "status"), REFUSING)
def test_each_job_refuses_an_expanded_view(
    expanded: Path, capsys: pytest.CaptureFixture[str], command: list[str], status: int
) -> None:
    folder = expanded.parent
    safetensors_numpy.save_file(logical(expanded), str(folder / "dense.safetensors"))
    args = [command[0], str(expanded)]
    args += [str(folder / a[1:]) if a.startswith("@") else a for a in command[1:]]
    found, _, err = cli(capsys, *args)
    assert found == status
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (
        f"strided: {expanded}: tensor 'rows': logical size {OVER * 12} bytes is more than "
        "2^20 x its 12 stored bytes (an expanded view); pass --allow-expanded "
        "(allow_expanded=True) to process it"
    )
    assert not any(
        path.name.startswith("out") or path.name == "shards" for path in folder.iterdir()
    )


def test_checkpoint_digest_refuses_unless_allowed(expanded: Path) -> None:
    with st.open_checkpoint(expanded) as checkpoint:
        with pytest.raises(st.LimitError, match=r"tensor 'rows': logical size .* 2\^20"):
            checkpoint.digest()
        found = checkpoint.digest(allow_expanded=True)
    digests = {name: reference_digest(array) for name, array in logical(expanded).items()}
    assert found == reference_checkpoint_digest(digests)


def test_a_view_at_the_factor_is_processed_without_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "edge.pt"
    state = expanded_state()
    torch.save({"edge": state["edge"], "plain": state["plain"]}, path)
    status, out, err = cli(capsys, "hash", str(path), "--json")
    assert status == 0, err
    document = json.loads(out)
    values = logical(path)
    for name, array in values.items():
        assert document["tensors"][name]["digest"] == reference_digest(array)
    assert document["digest"] == reference_checkpoint_digest(
        {name: reference_digest(array) for name, array in values.items()}
    )
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.digest() == document["digest"]
    # One element more than 2^20-fold is refused.
    torch.save({"over": torch.tensor([-7], dtype=torch.int32).expand(OVER)}, path)
    status, _, err = cli(capsys, "hash", str(path))
    assert status == 1 and "tensor 'over': logical size 4194308 bytes" in err


# -- allowed: the logical values, exactly ------------------------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_hash_allowed_is_the_digest_of_the_logical_bytes(
    expanded: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    status, out, err = cli(
        capsys, "hash", str(expanded), "--json", "--allow-expanded", "--jobs", jobs
    )
    assert status == 0, err
    document = json.loads(out)
    digests = {name: reference_digest(array) for name, array in logical(expanded).items()}
    assert {name: entry["digest"] for name, entry in document["tensors"].items()} == digests
    assert document["digest"] == reference_checkpoint_digest(digests)
    # verify checks the manifest against digests computed in its own scan
    manifest = expanded.parent / "manifest.sha256"
    status, text, _ = cli(capsys, "hash", str(expanded), "--allow-expanded")
    manifest.write_text(text)
    args = ["verify", str(expanded), "--manifest", str(manifest), "--jobs", jobs]
    status, out, err = cli(capsys, *args, "--allow-expanded")
    assert status == 0, out + err
    assert out.strip().splitlines()[-1].endswith("clean, digests match")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_inspect_full_allowed_gives_exact_statistics(
    expanded: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    args = ["inspect", str(expanded), "--full", "--json", "--jobs", jobs, "--allow-expanded"]
    status, out, err = cli(capsys, *args)
    assert status == 0, err
    rows = {row["name"]: row for row in json.loads(out)["tensors"]}
    values = logical(expanded)
    for name in ("rows", "edge", "plain"):
        array = values[name]
        row = rows[name]
        assert row["sampled"] == array.size and row["exact"] is True
        assert float(row["min"]) == array.min() and float(row["max"]) == array.max()
        assert float(row["mean"]) == math.fsum(array.astype(np.float64).ravel()) / array.size
        assert (row["nan"], row["inf"]) == (0, 0)
    assert rows["rows"]["bytes"] == 12


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_convert_allowed_writes_the_logical_values(
    expanded: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    values = logical(expanded)
    out = expanded.parent / "out.safetensors"
    status, _, err = cli(
        capsys, "convert", str(expanded), str(out), "--jobs", jobs, "--allow-expanded"
    )
    assert status == 0, err
    written = safetensors_numpy.load_file(str(out))
    assert written.keys() == values.keys()
    for name, array in values.items():
        assert written[name].dtype == array.dtype and np.array_equal(written[name], array)
    # With a conversion (run by the worker processes when there are several).
    half = expanded.parent / "half.safetensors"
    args = ["convert", str(expanded), str(half), "--dtype", "F16", "--jobs", jobs]
    status, _, err = cli(capsys, *args, "--allow-expanded")
    assert status == 0, err
    reference = torch.load(expanded, weights_only=True)["rows"].to(torch.float16).contiguous()
    assert np.array_equal(safetensors_numpy.load_file(str(half))["rows"], reference.numpy())


def test_convert_allowed_to_npy_and_json(
    expanded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = logical(expanded)
    npy = expanded.parent / "rows.npy"
    args = ["convert", str(expanded), str(npy), "--name", "rows", "--allow-expanded"]
    assert cli(capsys, *args)[0] == 0
    assert np.array_equal(np.load(npy), values["rows"])
    document = expanded.parent / "edge.json"
    assert cli(capsys, "convert", str(expanded), str(document), "--name", "edge")[0] == 0
    with st.open_checkpoint(document) as checkpoint:
        assert np.array_equal(checkpoint["edge"].numpy(), values["edge"])


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_diff_allowed_against_the_dense_values(
    expanded: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    values = logical(expanded)
    dense = expanded.parent / "dense.safetensors"
    safetensors_numpy.save_file(values, str(dense))
    args = ["diff", str(expanded), str(dense), "--json", "--jobs", jobs, "--ignore-metadata"]
    status, out, err = cli(capsys, *args, "--allow-expanded")
    assert status == 0, err
    entries = json.loads(out)["tensors"]
    assert {name: entry["status"] for name, entry in entries.items()} == dict.fromkeys(
        values, "identical"
    )
    changed = dict(values, rows=values["rows"].copy())
    changed["rows"][MAX_EXPANSION, 1] = 0.5
    safetensors_numpy.save_file(changed, str(dense))
    status, out, err = cli(capsys, *args, "--allow-expanded")
    assert status == 1, err
    entry = json.loads(out)["tensors"]["rows"]
    assert entry["status"] == "differs" and entry["count"] == 1
    assert entry["first"] == {"index": [MAX_EXPANSION, 1], "a": "-2.0", "b": "0.5"}


def test_dask_engine_refuses_and_allows(expanded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    status, _, err = cli(capsys, "hash", str(expanded), "--scheduler", "local:1")
    assert status == 1 and "tensor 'rows'" in err and "--allow-expanded" in err
    local = cli(capsys, "hash", str(expanded), "--allow-expanded")
    remote = cli(capsys, "hash", str(expanded), "--allow-expanded", "--scheduler", "local:1")
    assert remote == local and local[0] == 0


# -- a 1.5 KB file claiming 32 GiB: refused at once, in little memory ----------------------------


REFUSED = """
    import contextlib, io, json, sys, tracemalloc
    from strided.cli import main
    from strided.cli import _convert, _diff, _hash, _inspect, _verify  # imports before measuring
    path, out = sys.argv[1], sys.argv[2]
    commands = {"hash": ["hash", path], "hash --jobs 2": ["hash", path, "--jobs", "2"],
                "verify": ["verify", path], "inspect --full": ["inspect", path, "--full"],
                "convert": ["convert", path, out], "diff": ["diff", path, path]}
    tracemalloc.start()  # NumPy's buffers included
    report = {}
    for label, command in commands.items():
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            report[label] = [main(command), err.getvalue()]
    report["peak"] = tracemalloc.get_traced_memory()[1]
    print(json.dumps(report))
"""


def test_a_huge_expand_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.pt"
    torch.save({"zeros": torch.zeros(1).expand(2**33)}, path)  # 32 GiB of F32 from 4 bytes
    assert path.stat().st_size < 2000
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(REFUSED),
            str(path),
            str(tmp_path / "o.safetensors"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    peak = report.pop("peak")
    message = (
        f"strided: {path}: tensor 'zeros': logical size {2**35} bytes is more than 2^20 x its "
        "4 stored bytes (an expanded view); pass --allow-expanded (allow_expanded=True) to "
        "process it\n"
    )
    expected = {"hash": 1, "hash --jobs 2": 1, "verify": 1, "inspect --full": 1, "convert": 1,
                "diff": 2}  # fmt: skip
    assert report == {command: [status, message] for command, status in expected.items()}
    assert peak < 16 << 20, peak
    assert not (tmp_path / "o.safetensors").exists()


ALLOWED = """
    import contextlib, io, json, sys, tracemalloc
    from strided.cli import main
    from strided.cli import _convert, _diff, _hash, _inspect, _verify  # imports before measuring
    path, folder = sys.argv[1], sys.argv[2]
    commands = {"hash": ["hash", path], "inspect --full": ["inspect", path, "--full"],
                "convert": ["convert", path, folder + "/copy.safetensors"],
                "convert --dtype": ["convert", path, folder + "/h.safetensors", "--dtype", "F16"],
                "diff": ["diff", path, folder + "/copy.safetensors"]}
    tracemalloc.start()  # NumPy's buffers included
    report = {}
    for label, command in commands.items():
        tracemalloc.reset_peak()
        with contextlib.redirect_stdout(io.StringIO()):
            status = main([*command, "--allow-expanded"])
        report[label] = [status, tracemalloc.get_traced_memory()[1]]
    print(json.dumps(report))
"""


def test_allowed_jobs_stream_an_expand_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "wide.pt"
    logical_bytes = 256 << 20
    torch.save({"w": torch.tensor([1.5, 2.5]).expand(logical_bytes // 8, 2)}, path)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ALLOWED), str(path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for label, (status, peak) in report.items():
        assert status == 0, label
        assert peak < logical_bytes // 4, (label, peak)  # never the logical size
    copied = safetensors_numpy.load_file(str(tmp_path / "copy.safetensors"))["w"]
    assert copied.shape == (logical_bytes // 8, 2) and (copied == [1.5, 2.5]).all()


OVERFLOWING = """
    import contextlib, io, json, sys, tracemalloc
    from strided.cli import main
    from strided.cli import _convert  # imports before measuring
    import strided.jobs._export
    tracemalloc.start()  # NumPy's buffers included
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["convert", sys.argv[1], sys.argv[2], "--dtype", "F16", "--allow-expanded"])
    print(json.dumps([status, err.getvalue(), tracemalloc.get_traced_memory()[1]]))
"""


def test_a_value_that_does_not_fit_is_named_without_converting_the_logical_size(
    tmp_path: Path,
) -> None:
    path = tmp_path / "overflow.pt"
    half = 1 << 23
    torch.save({"w": torch.tensor([[1.0], [1e10]]).expand(2, half)}, path)  # 64 MiB logical
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(OVERFLOWING),
            str(path),
            str(tmp_path / "o.safetensors"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    status, err, peak = json.loads(result.stdout.strip().splitlines()[-1])
    # The message converting the dense values gives: the first element that overflows.
    dense = st.Tensor.from_numpy(np.array([[1.0] * 4, [1e10] * 4], dtype=np.float32))
    with pytest.raises(st.RangeError) as expected:
        dense.convert("F16")
    assert "element [1, 0]" in str(expected.value)
    assert (status, err) == (1, f"strided: {path}: tensor 'w': {expected.value}\n")
    assert peak < 32 << 20, peak  # converting the whole tensor took over 500 MiB
    assert not (tmp_path / "o.safetensors").exists()
