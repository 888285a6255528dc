"""``strided inspect`` output: long metadata arrays summarized readably (and marked as
summaries in JSON), statistics of one JSON type, and a table that says when it samples."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFValueType as T

import strided as st
from strided.cli import main

from .test_metadata_integrity import SCORES, VOCAB, f32_text, write_gguf


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    entries = [
        ("tokenizer.ggml.tokens", VOCAB, T.ARRAY, T.STRING),
        ("tokenizer.ggml.scores", SCORES, T.ARRAY, T.FLOAT32),
        ("tokenizer.ggml.token_type", [1] * len(VOCAB), T.ARRAY, T.INT32),
        ("t.short", [0.1, 2.5], T.ARRAY, T.FLOAT32),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32, None),
    ]
    return write_gguf(tmp_path_factory.mktemp("vocab") / "vocab.gguf", entries)


def test_table_summarizes_long_arrays(vocabulary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = cli(capsys, "inspect", str(vocabulary)).splitlines()
    shown = {line.split(": ", 1)[0].strip(): line.split(": ", 1)[1] for line in lines[1:7]}
    # JSON-quoted strings, escaped for the terminal; as many as fit one line, then "…".
    quoted = ", ".join(json.dumps(token, ensure_ascii=False) for token in VOCAB[:6])
    assert shown["tokenizer.ggml.tokens"].startswith(f"100,000 strings: {quoted}, ")
    assert shown["tokenizer.ggml.tokens"].endswith(", …")
    scores = ", ".join(f32_text(score) for score in SCORES[:4])
    assert shown["tokenizer.ggml.scores"].startswith(f"100,000 floats: {scores}, ")
    assert shown["tokenizer.ggml.token_type"].startswith("100,000 integers: 1, 1, 1, ")
    assert shown["t.short"] == "2 floats: 0.1, 2.5"
    assert shown["llama.attention.layer_norm_rms_epsilon"] == "1e-05"
    assert all(len(text) <= 100 for text in shown.values())
    assert lines[-1] == "1 tensor, 12 parameters, 48 B"


def test_json_marks_summaries(vocabulary: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metadata = json.loads(cli(capsys, "inspect", str(vocabulary), "--json"))["metadata"]
    assert metadata["tokenizer.ggml.tokens"] == {
        "$summary": "array",
        "type": "ARRAY[STRING]",
        "length": 100_000,
        "first": VOCAB[:16],
    }
    assert metadata["tokenizer.ggml.scores"] == {
        "$summary": "array",
        "type": "ARRAY[FLOAT32]",
        "length": 100_000,
        "first": [float(f32_text(score)) for score in SCORES[:16]],
    }
    assert metadata["t.short"] == [0.1, 2.5]  # short arrays stay arrays
    assert metadata["llama.attention.layer_norm_rms_epsilon"] == 1e-05
    full = json.loads(cli(capsys, "inspect", str(vocabulary), "--json", "--full-metadata"))
    assert full["metadata"]["tokenizer.ggml.tokens"] == VOCAB
    assert full["metadata"]["tokenizer.ggml.scores"][:3] == [float(f32_text(x)) for x in SCORES[:3]]


def test_statistics_are_text_and_the_table_says_when_it_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.safetensors"
    arrays = {
        "big": np.tile(np.array([0.0, 0.0, 1.0], np.float32), 2000),  # sampled: 1,024 of 6,000
        "third": np.array([0.0, 0.0, 1.0], np.float64),  # every element: mean 1/3
        "ids": np.arange(5, dtype=np.int64),
        "inf": np.array([np.inf, 1.0], np.float32),
    }
    st.save_safetensors(path, {name: st.Tensor.from_numpy(a) for name, a in arrays.items()})
    rows = {row["name"]: row for row in json.loads(cli(capsys, "inspect", str(path), "--json"))
            ["tensors"]}  # fmt: skip
    for row in rows.values():
        assert all(type(row[stat]) is str for stat in ("min", "max", "mean")), row
    assert rows["third"]["mean"] == repr(1 / 3) and rows["ids"]["mean"] == "2.0"
    assert rows["inf"]["mean"] == "inf" and rows["inf"]["max"] == "inf"
    assert rows["big"]["mean"] == repr(341 / 1024)  # the head samples' mean
    table = cli(capsys, "inspect", str(path)).splitlines()
    header = _cells(table[1])
    assert header[4:7] == ["min (sampled)", "max (sampled)", "mean (sampled)"]
    cells = {_cells(line)[0]: _cells(line) for line in table[2:-1]}
    assert cells["third"][6] == "0.333333" and cells["big"][6] == f"{341 / 1024:.6g}"
    assert cells["big"][-1] == "sampled 1,024 of 6,000"
    assert table[-1].startswith("4 tensors, ")
    full = cli(capsys, "inspect", str(path), "--full").splitlines()
    assert _cells(full[1])[4:7] == ["min", "max", "mean"]
    assert {_cells(line)[0]: _cells(line) for line in full[2:-1]}["third"][6] == "0.333333"


def _cells(line: str) -> list[Any]:
    """A table line's cells (separated by two or more spaces)."""
    return re.split(r"\s{2,}", line.strip())
