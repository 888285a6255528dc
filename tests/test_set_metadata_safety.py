"""``strided set-metadata`` made safe: llama.cpp's types for its known keys, strict
number text, symbolic links kept, and concurrent edits that never corrupt a file.

The known-key table is checked against gguf-py itself: rebuilt from its source, and
sample keys written by its own ``GGUFWriter.add_*`` methods. Results are read back by
``gguf.GGUFReader``; concurrency runs real ``strided`` processes.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFValueType as T
from gguf import GGUFWriter

import strided as st
from strided.cli import main
from strided.jobs._gguf_keys import KNOWN_KEYS, known_types
from tests.gguf_known_keys import derived
from tests.gguf_oracle import read_kvs, read_tensors, write_reference

KVS: list[tuple[str, Any, T, T | None]] = [
    ("tokenizer.chat_template", "old", T.STRING, None),
]
TENSORS = {"token_embd.weight": np.arange(64, dtype=np.float32).reshape(2, 32)}
ROOT = str(Path(__file__).resolve().parent.parent)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    write_reference(path, KVS, TENSORS)
    return path


def kvs(path: Path) -> dict[str, tuple[str, Any]]:
    return {key: (kind, value) for key, kind, value in read_kvs(path)}


# -- the table, against gguf-py ---------------------------------------------------------


def test_the_carried_table_is_what_gguf_py_writes() -> None:
    assert derived() == KNOWN_KEYS
    assert KNOWN_KEYS["{arch}.context_length"] == "UINT32"
    assert KNOWN_KEYS["tokenizer.ggml.bos_token_id"] == "UINT32"


_SAMPLES = {"int": 4, "float": 0.5, "bool": True, "str": "x"}


def _scalar_methods() -> list[tuple[str, Any]]:
    """Every ``add_*`` method of one plain int/float/bool/str parameter, with a value."""
    found = []
    for name, method in inspect.getmembers(GGUFWriter, inspect.isfunction):
        if not name.startswith("add_") or name in ("add_string", "add_bool"):
            continue
        params = list(inspect.signature(method).parameters.values())[1:]
        if len(params) == 1 and params[0].annotation in _SAMPLES:
            found.append((name, _SAMPLES[params[0].annotation]))
    return found


def test_gguf_py_writes_each_sampled_key_with_the_tables_type(tmp_path: Path) -> None:
    methods = _scalar_methods()
    assert len(methods) > 100  # the sample covers most of gguf-py's writers
    checked = 0
    for name, value in methods:
        writer = GGUFWriter(str(tmp_path / "w.gguf"), "qwen2")
        getattr(writer, name)(value)
        for key, field in writer.kv_data[0].items():
            if key == "general.architecture":
                continue
            assert field.type.name in known_types(key, "qwen2"), (name, key)
            checked += 1
        writer.close()
    assert checked > 100


# -- types of new keys -------------------------------------------------------------------


def test_known_keys_take_llama_cpps_type(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(capsys, "set-metadata", str(model), "llama.context_length=8192",
                         "llama.rope.freq_base=1e6", "tokenizer.ggml.bos_token_id=1",
                         "tokenizer.ggml.add_bos_token=true", "general.name=tiny",
                         "llama.attention.head_count_kv=[8, 4]", "llama.attention.head_count=8",
                         "general.base_model.0.name=base")  # fmt: skip
    assert status == 0, err
    found = kvs(model)
    assert found["llama.context_length"] == ("UINT32", 8192)
    assert found["llama.rope.freq_base"] == ("FLOAT32", 1e6)
    assert found["tokenizer.ggml.bos_token_id"] == ("UINT32", 1)
    assert found["tokenizer.ggml.add_bos_token"] == ("BOOL", True)
    assert found["general.name"] == ("STRING", "tiny")
    assert found["llama.attention.head_count_kv"] == ("ARRAY[INT32]", [8, 4])
    assert found["llama.attention.head_count"] == ("UINT32", 8)
    assert found["general.base_model.0.name"] == ("STRING", "base")


@pytest.mark.parametrize(
    "args",
    [
        ["my.key=1"],  # unknown: needs --type
        ["qwen2.context_length=8192"],  # another architecture's key: unknown in this file
        ["llama.context_length=8192", "--type", "f32"],  # contradicts llama.cpp's type
        ["llama.context_length=" + "1" * 21],
        ["llama.context_length=" + "9" * 5000],  # past Python's int-text limit
        ["llama.attention.head_count_kv=[" + "1" * 21 + "]"],
        ["llama.rope.freq_base=1_000.5"],
        ["llama.rope.freq_base= 1.5"],
        ["llama.rope.freq_base=infinity"],
        ["llama.rope.freq_base=NaN"],
        ["llama.rope.freq_base=+inf"],
        ["llama.rope.freq_base=0x10"],
        ["my.count=1_000", "--type", "u32"],
    ],
)
def test_refused_values_change_nothing(
    model: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    before = model.read_bytes()
    status, _, err = cli(capsys, "set-metadata", str(model), *args)
    assert status == 1 and err.startswith("strided: ") and err.count("\n") == 1, err
    assert model.read_bytes() == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["m.gguf"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("nan", float("nan")), ("inf", float("inf")), ("-inf", float("-inf")),
     ("1e-5", np.float32(1e-5)), ("-0.0", -0.0), (".5", 0.5), ("2.", 2.0)],
)  # fmt: skip
def test_float_text_spelled_as_documented(
    model: Path, capsys: pytest.CaptureFixture[str], text: str, expected: float
) -> None:
    status, _, err = cli(capsys, "set-metadata", str(model), f"llama.rope.freq_base={text}")
    assert status == 0, err
    kind, value = kvs(model)["llama.rope.freq_base"]
    assert kind == "FLOAT32"
    assert np.float32(value).tobytes() == np.float32(expected).tobytes()


def test_twenty_digits_fit_a_u64(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    top = str(2**64 - 1)
    assert len(top) == 20
    status, _, err = cli(capsys, "set-metadata", str(model), f"n={top}", "--type", "u64")
    assert status == 0, err
    assert kvs(model)["n"] == ("UINT64", 2**64 - 1)


def test_no_token_option(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["set-metadata", str(model), "general.name=x", "--token", "t"])
    assert stop.value.code == 2
    assert "--token" not in capsys.readouterr().out


# -- symbolic links ----------------------------------------------------------------------


def test_a_symlinks_target_is_edited_and_the_link_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "blobs"
    store.mkdir()
    target = store / "abc123"
    write_reference(target, KVS, TENSORS)
    before = st.open_checkpoint(target).digest()
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    link = snapshot / "model.gguf"
    link.symlink_to(os.path.relpath(target, snapshot))
    status, _, err = cli(capsys, "set-metadata", str(link), "tokenizer.chat_template=new")
    assert status == 0, err
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert kvs(target)["tokenizer.chat_template"] == ("STRING", "new")
    assert st.open_checkpoint(link).digest() == before
    assert sorted(p.name for p in store.iterdir()) == ["abc123"]
    assert sorted(p.name for p in snapshot.iterdir()) == ["model.gguf"]


# -- concurrent edits --------------------------------------------------------------------


def _edit(path: Path, template: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
    command = [sys.executable, "-m", "strided", "set-metadata", str(path),
               f"tokenizer.chat_template={template}"]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_concurrent_edits_never_corrupt_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    # A large vocabulary makes parsing the header slow and a large tensor makes copying
    # slow, so one edit often renames its result while the other is still working; the
    # two templates differ in length, so the data region moves between versions.
    vocabulary = [f"token{i}" for i in range(60_000)]
    kvs_in = [*KVS, ("tokenizer.ggml.tokens", vocabulary, T.ARRAY, T.STRING)]
    big = {"w": np.random.default_rng(3).standard_normal((2048, 1024)).astype(np.float32)}
    write_reference(path, kvs_in, big)
    before = st.open_checkpoint(path).digest()
    tensors = read_tensors(path)
    templates = ("A" * 7, "B" * 4099)
    outcomes = set()
    for round_ in range(12):
        first = _edit(path, templates[round_ % 2])
        time.sleep(0.02 * (round_ % 6))  # stagger the second start across the rounds
        second = _edit(path, templates[1 - round_ % 2])
        results = [(p.wait(timeout=300), p.stderr.read().decode()) for p in (first, second)]
        for process in (first, second):
            assert process.stdout is not None and process.stderr is not None
            process.stdout.close()
            process.stderr.close()
        statuses = sorted(status for status, _ in results)
        assert statuses in ([0, 0], [0, 1]), results
        for status, err in results:
            assert status == 0 or "another writer replaced" in err, err
        outcomes.add(tuple(statuses))
        found = kvs(path)
        assert found["tokenizer.chat_template"][1] in templates
        assert found["tokenizer.ggml.tokens"][1][:3] == vocabulary[:3]
        assert read_tensors(path) == tensors
        assert st.open_checkpoint(path).digest() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
