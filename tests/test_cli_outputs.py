"""What the command line prints: tables that fit the terminal, counts that agree with
their nouns, honest warnings, and help that states its defaults."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from gguf import GGUFReader
from gguf import GGUFValueType as T

from strided.cli import main
from tests.gguf_oracle import write_reference

LONG = ".".join(f"block_{i}.sub_module_{i}" for i in range(12)) + ".weight"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def long_names(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    arrays = {LONG: np.arange(6, dtype=np.float32), "short": np.ones(2, np.float16)}
    safetensors.numpy.save_file(arrays, str(path))
    return path


def _on_a_terminal(path: Path, columns: int) -> str:
    """What ``strided inspect PATH`` prints to a real terminal (a pseudo-terminal) of
    COLUMNS columns."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-m", "strided", "inspect", str(path)],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
    ) as child:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert child.wait(timeout=120) == 0
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_table_fits_the_terminal_width(
    long_names: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(LONG) > 200
    for columns in (None, "60"):  # a pipe: whole names, whatever COLUMNS says
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        status, out, _ = cli(capsys, "inspect", str(long_names))
        assert status == 0 and any(LONG in line for line in out.splitlines())
    lines = _on_a_terminal(long_names, 160).splitlines()
    assert max(len(line) for line in lines) <= 160
    table = lines[lines.index(next(line for line in lines if line.startswith("name"))) + 1 :]
    pieces = []
    for line in table:
        pieces.append(line.split("  ")[0])
        if "F32" in line:
            break
    assert "".join(pieces) == LONG  # wrapped, never cut
    # a sane minimum: names keep a usable column
    assert "short" in _on_a_terminal(long_names, 10)


def test_an_empty_checkpoint_prints_no_table_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.gguf"
    write_reference(path, [("general.name", "x", T.STRING, None)], {})
    status, out, _ = cli(capsys, "inspect", str(path))
    assert status == 0
    assert not any(line.startswith("name") for line in out.splitlines())
    assert out.splitlines()[-1].startswith("0 tensors")


def test_name_matching_nothing_says_so(
    long_names: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for extra in ([], ["--json"]):
        status, out, err = cli(capsys, "inspect", str(long_names), "--name", "nothing*", *extra)
        assert status == 1 and out == ""
        assert "no tensor matches 'nothing*'" in err and err.count("\n") == 1


def test_short_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for option in ("-V", "--version"):
        with pytest.raises(SystemExit) as stop:
            main([option])
        assert stop.value.code == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("strided ")


@pytest.mark.parametrize("dst", ["one.safetensors", "one.gguf"])
def test_one_tensor_is_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dst: str
) -> None:
    src = tmp_path / "src.safetensors"
    safetensors.numpy.save_file({"w": np.ones((2, 32), np.float32)}, str(src))
    status, out, _ = cli(capsys, "convert", str(src), str(tmp_path / dst))
    assert status == 0 and out.rstrip().endswith(": 1 tensor")


def _architecture(path: Path) -> Any:
    field = GGUFReader(str(path)).fields.get("general.architecture")
    return None if field is None else field.contents()


def test_gguf_without_architecture_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "model.safetensors"
    arrays = {"model.layers.0.self_attn.q_proj.weight": np.ones((4, 32), np.float32)}
    safetensors.numpy.save_file(arrays, str(src), metadata={"format": "pt"})
    out = tmp_path / "model.gguf"
    status, _, err = cli(capsys, "convert", str(src), str(out))
    assert status == 0
    assert _architecture(out) is None  # the reference reader agrees: llama.cpp has no model
    assert "warning" in err and "general.architecture" in err and "llama.cpp will not load" in err
    # From a GGUF that names its architecture, the key is copied and nothing is said.
    again = tmp_path / "again.gguf"
    write_reference(tmp_path / "llama.gguf", [], {"token_embd.weight": arrays[next(iter(arrays))]})
    status, _, err = cli(capsys, "convert", str(tmp_path / "llama.gguf"), str(again))
    assert status == 0 and _architecture(again) == "llama" and "warning" not in err


def test_help_states_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    for command, expected in (
        ("inspect", ["head (default)", "spread", "default 1024"]),
        ("hash", ["*metadata*", "*checkpoint*"]),
    ):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for phrase in expected:
            assert phrase in text, (command, phrase)
