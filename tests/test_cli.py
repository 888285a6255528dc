"""The command line, run as a subprocess (console script and ``python -m strided``)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import strided as st

BIN = Path(sys.executable).parent
STRIDED = str(BIN / "strided")


def run(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "strided", *args] if module else [STRIDED, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    tensors = {
        f"model.layers.{i}.mlp.up_proj.weight": st.Tensor.from_numpy(
            np.full((4, 3), i, dtype=np.float32)
        )
        for i in range(6)
    }
    tensors["model.norm.weight"] = st.Tensor.from_numpy(np.array([1.0, np.nan], dtype=np.float32))
    tensors["ids"] = st.Tensor.from_numpy(np.arange(5, dtype=np.int64))
    st.save_safetensors(path, tensors, metadata={"format": "pt"})
    return path


def test_inspect_lists_every_tensor(checkpoint: Path) -> None:
    for module in (False, True):
        result = run("inspect", str(checkpoint), module=module)
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "model.layers.5.mlp.up_proj.weight" in out
        assert "format: pt" in out
        assert "8 tensors" in out
        assert "[4, 3]" in out


def test_inspect_json_document(checkpoint: Path) -> None:
    result = run("inspect", str(checkpoint), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    rows = {row["name"]: row for row in document["tensors"]}
    assert document["metadata"] == {"format": "pt"}
    assert rows["model.layers.3.mlp.up_proj.weight"]["min"] == "3.0"
    assert rows["model.layers.3.mlp.up_proj.weight"]["mean"] == "3.0"
    assert rows["model.norm.weight"]["nan"] == 1
    assert rows["ids"]["max"] == "4"
    assert rows["ids"]["dtype"] == "I64"
    assert document["totals"] == {
        "tensors": 8,
        "parameters": 6 * 12 + 2 + 5,
        "bytes": 6 * 48 + 8 + 40,
    }


def test_inspect_group_and_name_filter(checkpoint: Path) -> None:
    result = run("inspect", str(checkpoint), "--group", "--json")
    rows = json.loads(result.stdout)["tensors"]
    grouped = [row for row in rows if row["name"] == "model.layers.#.mlp.up_proj.weight"]
    assert len(grouped) == 1 and grouped[0]["count"] == 6
    assert grouped[0]["min"] == "0.0" and grouped[0]["max"] == "5.0"
    table = run("inspect", str(checkpoint), "--group").stdout
    assert "model.layers.#.mlp.up_proj.weight  ×6" in table
    only = json.loads(run("inspect", str(checkpoint), "--name", "*.norm.*", "--json").stdout)
    assert [row["name"] for row in only["tensors"]] == ["model.norm.weight"]


def test_inspect_samples_and_strategy(checkpoint: Path) -> None:
    result = run("inspect", str(checkpoint), "--samples", "2", "--strategy", "spread", "--json")
    rows = {row["name"]: row for row in json.loads(result.stdout)["tensors"]}
    assert rows["ids"]["sampled"] == 2
    assert rows["ids"]["max"] == "2"  # positions 0 and 5 // 2


def test_inspect_other_formats(tmp_path: Path) -> None:
    tensor = st.Tensor.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3))
    npy = tmp_path / "x.npy"
    st.save_npy(npy, tensor)
    text = tmp_path / "x.json"
    text.write_text(tensor.to_json())
    for path in (npy, text):
        result = run("inspect", str(path), "--json")
        assert result.returncode == 0, result.stderr
        (row,) = json.loads(result.stdout)["tensors"]
        assert row["shape"] == [2, 3] and row["max"] == "5"


def test_inspect_gguf(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 2)
    writer.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = run("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (row,) = document["tensors"]
    assert row["shape"] == [3, 4] and row["max"] == "11.0"
    assert document["metadata"]["llama.block_count"] == 2


def test_verify(checkpoint: Path, tmp_path: Path) -> None:
    result = run("verify", str(checkpoint))
    assert result.returncode == 1
    assert "model.norm.weight: 1 NaN, 0 inf" in result.stdout
    clean = tmp_path / "clean.safetensors"
    st.save_safetensors(clean, {"a": st.Tensor.zeros(st.DType.BF16, (100,))})
    result = run("verify", str(clean))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "clean" in result.stdout


def test_convert_round_trips(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    assert run("convert", str(checkpoint), str(out)).returncode == 0
    assert st.load_safetensors(out).keys() == st.load_safetensors(checkpoint).keys()
    single = tmp_path / "one.safetensors"
    st.save_safetensors(single, {"x": st.Tensor.from_numpy(np.array([1.5, -2.0], np.float32))})
    as_json = tmp_path / "one.json"
    assert run("convert", str(single), str(as_json), "--dtype", "F64").returncode == 0
    loaded = st.Tensor.from_json(as_json.read_text())
    assert loaded.dtype is st.DType.F64 and loaded.tolist() == [1.5, -2.0]
    as_npy = tmp_path / "one.npy"
    assert run("convert", str(as_json), str(as_npy)).returncode == 0
    assert np.load(as_npy).tolist() == [1.5, -2.0]


def test_convert_exactness_errors_leave_no_file(tmp_path: Path) -> None:
    source = tmp_path / "big.json"
    source.write_text(st.Tensor.from_scalars(st.DType.F32, [2], [1, 1e6]).to_json())
    target = tmp_path / "small.npy"
    result = run("convert", str(source), str(target), "--dtype", "F16")
    assert result.returncode == 1
    assert "F16" in result.stderr
    assert not target.exists()
    assert os.listdir(tmp_path) == ["big.json"]


def test_convert_many_tensors_to_npy_is_an_error(checkpoint: Path, tmp_path: Path) -> None:
    result = run("convert", str(checkpoint), str(tmp_path / "x.npy"))
    assert result.returncode == 1
    assert "one tensor" in result.stderr


def test_usage_errors_exit_2() -> None:
    for args in ([], ["frobnicate"], ["inspect"], ["inspect", "x", "--samples", "-1"]):
        result = run(*args)
        assert result.returncode == 2, args
    result = run("convert", "a.safetensors", "b.npy", "--dtype", "F33")
    assert result.returncode == 2


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_bad_files_give_one_line_errors(command: str, tmp_path: Path, checkpoint: Path) -> None:
    missing = tmp_path / "missing.safetensors"
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(checkpoint.read_bytes()[:-3])
    hostile = tmp_path / "hostile.safetensors"
    header = b'{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'
    hostile.write_bytes(struct.pack("<Q", len(header)) + header)
    unknown = tmp_path / "file.txt"
    unknown.write_text("hello")
    for path in (missing, truncated, hostile, unknown):
        result = run(command, str(path))
        assert result.returncode == 1, (path, result.stdout)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert str(path) in lines[0]
        assert "Traceback" not in result.stderr


def test_inspect_reads_only_headers_and_samples(tmp_path: Path) -> None:
    """A 512 MiB file (sparse) is listed while the process touches a few MiB of it."""
    size = 512 << 20
    header = json.dumps({"big": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}})
    header_bytes = header.encode() + b" " * (-len(header) % 8)
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header_bytes)) + header_bytes)
        handle.truncate(8 + len(header_bytes) + size)
    probe = (
        "import resource, sys\n"
        "from strided.cli import main\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "status = main(sys.argv[1:])\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print('GROWTH_KIB', after - before)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, "inspect", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    growth_kib = int(result.stdout.split("GROWTH_KIB")[1])
    assert growth_kib < 64 * 1024, growth_kib  # far below the 512 MiB a full read maps in


def _strict_json(text: str) -> object:
    def refuse(token: str) -> object:
        raise ValueError(f"non-JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_group_compares_exact_values(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    tensors = {
        "l.0.big": st.Tensor.from_scalars(st.DType.I64, [1], [2**63 - 2]),
        "l.1.big": st.Tensor.from_scalars(st.DType.I64, [1], [2**63 - 1]),
        "l.0.zero": st.Tensor.from_scalars(st.DType.F64, [1], ["0.0"]),
        "l.1.zero": st.Tensor.from_scalars(st.DType.F64, [1], ["-0.0"]),
        "l.0.mask": st.Tensor.from_scalars(st.DType.BOOL, [2], [True, True]),
        "l.1.mask": st.Tensor.from_scalars(st.DType.BOOL, [2], [False, True]),
    }
    st.save_safetensors(path, tensors)
    result = run("inspect", str(path), "--group", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in _strict_json(result.stdout)["tensors"]}  # type: ignore[index]
    assert rows["l.#.big"]["max"] == str(2**63 - 1)
    assert rows["l.#.zero"]["min"] == "-0.0" and rows["l.#.zero"]["max"] == "0.0"
    assert rows["l.#.mask"]["min"] == "false" and rows["l.#.mask"]["max"] == "true"


def test_json_output_is_strict_json_with_infinities(tmp_path: Path) -> None:
    path = tmp_path / "inf.safetensors"
    values = np.array([np.inf, -np.inf, 1.0], dtype=np.float32)
    st.save_safetensors(path, {"a": st.Tensor.from_numpy(values)})
    result = run("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    (row,) = _strict_json(result.stdout)["tensors"]  # type: ignore[index]
    assert row["mean"] == "nan" and row["inf"] == 2


def test_unreadable_dtypes_still_count_their_bytes(tmp_path: Path) -> None:
    header = json.dumps(
        {
            "a": {"dtype": "F4", "shape": [64], "data_offsets": [0, 32]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [32, 40]},
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "f4.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(40))
    document = _strict_json(run("inspect", str(path), "--json").stdout)
    assert document["totals"]["bytes"] == 40  # type: ignore[index]
    result = run("verify", str(path))
    # Not every tensor was checked: say so, and do not call the file clean.
    assert result.returncode == 1
    assert "a: F4 values not scanned" in result.stdout
    assert "1 of 2 tensors not scanned" in result.stdout and "clean" not in result.stdout


def test_conversion_errors_name_the_tensor_and_end_the_progress_line(tmp_path: Path) -> None:
    source = tmp_path / "two.safetensors"
    st.save_safetensors(
        source,
        {"a": st.tensor([1.0], st.DType.F32), "b": st.tensor([1e6], st.DType.F32)},
    )
    command = [STRIDED, "convert", str(source), str(tmp_path / "x.safetensors"), "--dtype", "F16"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "STRIDED_PROGRESS": "1"},
    )
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("strided: ") and "'b'" in last and "F16" in last
    # The file and the tensor are each named once (no doubled "file: tensor:" prefix).
    assert last.count(str(source)) == 1 and last.count("'b'") == 1, last
    assert not (tmp_path / "x.safetensors").exists()


def test_messages_name_the_file_once(tmp_path: Path, checkpoint: Path) -> None:
    truncated = tmp_path / "t.safetensors"
    truncated.write_bytes(checkpoint.read_bytes()[:20])
    line = run("inspect", str(truncated)).stderr.strip()
    assert line.count(str(truncated)) == 1, line


def test_job_commands_usage_errors_exit_2(checkpoint: Path) -> None:
    for args in (
        ["hash"],
        ["diff", str(checkpoint)],
        ["hash", str(checkpoint), "--jobs", "0"],
        ["verify", str(checkpoint), "--jobs", "many"],
        ["convert", str(checkpoint), "x.npy", "--max-shard-size", "5GB"],
        ["convert", str(checkpoint), "out", "--max-shard-size", "lots"],
    ):
        result = run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_job_commands_run_as_a_module(checkpoint: Path, tmp_path: Path) -> None:
    hashed = run("hash", str(checkpoint), module=True)
    assert hashed.returncode == 0, hashed.stderr
    lines = hashed.stdout.splitlines()
    assert len(lines) == 10 and lines[-1].endswith("  *checkpoint*")
    assert lines[-1].split()[0] == st.open_checkpoint(checkpoint).digest()
    assert lines[-2] == f"{st.open_checkpoint(checkpoint).metadata_digest()}  *metadata*"
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(hashed.stdout)
    result = run("verify", str(checkpoint), "--manifest", str(manifest), "--jobs", "2")
    assert result.returncode == 1  # the NaN in model.norm.weight
    assert "model.norm.weight: 1 NaN, 0 inf, first at [1]" in result.stdout
    assert "digest" not in result.stdout.splitlines()[-1]
    same = run("diff", str(checkpoint), str(checkpoint), module=True)
    assert same.returncode == 0 and same.stdout.splitlines()[-1].endswith("match")


def test_failures_are_the_same_for_any_jobs(tmp_path: Path) -> None:
    """Two bad tensors in separate tasks: every --jobs reports the first one in order."""
    size = 17 << 20  # each tensor is a task of its own (or several)
    entries = {
        f"m{i}": {"dtype": "BOOL", "shape": [size], "data_offsets": [size * i, size * (i + 1)]}
        for i in range(4)
    }
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "bad.safetensors"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + 4 * size)
        for offset in (2 * size - 1, 3 * size):  # the last byte of m1, the first of m3
            handle.seek(8 + len(header) + offset)
            handle.write(b"\x07")
    for command in ("hash", "verify"):
        errors = {run(command, str(path), "--jobs", jobs).stderr for jobs in ("1", "2")}
        assert len(errors) == 1, errors
        (error,) = errors
        assert error.count("\n") == 1 and "'m1'" in error and "'m3'" not in error
