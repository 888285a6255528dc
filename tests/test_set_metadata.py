"""``strided set-metadata``: key/values changed, types kept, tensors untouched.

GGUF results are read back by ``gguf.GGUFReader``, safetensors results by the reference
``safetensors`` library; the checkpoint digest is compared before and after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from gguf import GGUFValueType as T
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from tests.gguf_oracle import read_kvs, read_tensors, write_reference

KVS: list[tuple[str, Any, T, T | None]] = [
    ("llama.context_length", 4096, T.UINT32, None),
    ("llama.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32, None),
    ("t.flag", False, T.BOOL, None),
    ("tokenizer.chat_template", "old", T.STRING, None),
    ("tokenizer.ggml.token_type", [1, 2], T.ARRAY, T.INT32),
]
TENSORS = {
    "token_embd.weight": np.arange(64, dtype=np.float32).reshape(2, 32),
    "blk.0.attn_norm.weight": np.ones(32, dtype=np.float16),
}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    write_reference(path, KVS, TENSORS)
    return path


def digest(path: Path) -> str:
    with st.open_checkpoint(path) as checkpoint:
        return checkpoint.digest()


def test_gguf_keys_change_in_place_keeping_types_and_tensors(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, tensors = digest(model), read_tensors(model)
    status, _, err = cli(capsys, "set-metadata", str(model), "llama.context_length=8192",
                         "tokenizer.chat_template={{ messages }}", "t.flag=true",
                         "tokenizer.ggml.token_type=[3, 4, 5]", "general.name=[not json",
                         "--delete", "llama.attention.layer_norm_rms_epsilon")  # fmt: skip
    assert status == 0, err
    assert read_kvs(model) == [
        ("general.architecture", "STRING", "llama"),
        ("llama.context_length", "UINT32", 8192),
        ("t.flag", "BOOL", True),
        ("tokenizer.chat_template", "STRING", "{{ messages }}"),
        ("tokenizer.ggml.token_type", "ARRAY[INT32]", [3, 4, 5]),
        ("general.name", "STRING", "[not json"),
    ]
    assert read_tensors(model) == tensors
    assert digest(model) == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["m.gguf"]


def test_new_keys_take_the_type_given(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(capsys, "set-metadata", str(model), "a=7", "b=[1.5, -2]",
                         "--type", "f32")  # fmt: skip
    assert status == 0, err
    assert read_kvs(model)[-2:] == [("a", "FLOAT32", 7.0), ("b", "ARRAY[FLOAT32]", [1.5, -2.0])]
    status, _, err = cli(capsys, "set-metadata", str(model), "c=65535", "--type", "u16")
    assert status == 0 and read_kvs(model)[-1] == ("c", "UINT16", 65535)
    # Deleting a key and setting it again gives it a new type.
    status, _, err = cli(
        capsys, "set-metadata", str(model), "c=x", "--delete", "c", "--type", "str"
    )
    assert status == 0 and read_kvs(model)[-1] == ("c", "STRING", "x")


@pytest.mark.parametrize(
    "args",
    [
        ["llama.context_length=-1"],
        ["llama.context_length=4294967296"],
        ["llama.context_length=1.5"],
        ["t.flag=maybe"],
        ["llama.attention.layer_norm_rms_epsilon=1e39"],
        ["tokenizer.ggml.token_type=[1, 2.5]"],
        ["tokenizer.ggml.token_type=[1, 2"],
        ["tokenizer.ggml.token_type=3"],
        ["n=300", "--type", "u8"],
        ["llama.context_length=1", "--type", "i32"],
        ["general.alignment=64"],
        ["split.count=2"],
        ["--delete", "split.no"],
        ["--delete", "no.such.key"],
        ["ok=1", "general.alignment=64"],
    ],
)
def test_a_value_that_does_not_fit_changes_nothing(
    model: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    before = model.read_bytes()
    status, _, err = cli(capsys, "set-metadata", str(model), *args)
    assert status == 1 and err.startswith("strided: ") and err.count("\n") == 1
    assert model.read_bytes() == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["m.gguf"]


@settings(max_examples=30, deadline=None)
@given(text=hs.text(hs.characters(codec="utf-8"), max_size=300))
def test_any_chat_template_round_trips(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    folder = tmp_path_factory.mktemp("t")
    path = folder / "m.gguf"
    write_reference(path, KVS, TENSORS)
    before = digest(path)
    out = folder / "out.gguf"
    assert main(["set-metadata", str(path), f"tokenizer.chat_template={text}", "-o", str(out)]) == 0
    kvs = {key: (kind, value) for key, kind, value in read_kvs(out)}
    assert kvs["tokenizer.chat_template"] == ("STRING", text)
    assert digest(out) == before and read_tensors(out) == read_tensors(path)


def test_output_elsewhere_must_be_free(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = model.parent / "o.gguf"
    out.write_bytes(b"keep")
    edit = ["a=b", "--type", "str", "-o", str(out)]
    status, _, err = cli(capsys, "set-metadata", str(model), *edit)
    assert status == 1 and "--overwrite" in err and out.read_bytes() == b"keep"
    assert cli(capsys, "set-metadata", str(model), *edit, "--overwrite")[0] == 0
    assert read_kvs(out)[-1] == ("a", "STRING", "b")
    status, _, err = cli(capsys, "set-metadata", str(model))
    assert status == 2


def test_safetensors_metadata_changes_and_tensors_do_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.safetensors"
    arrays = {"b": np.arange(6, dtype=np.int16).reshape(2, 3), "a": np.ones(5, np.float32)}
    safetensors.numpy.save_file(arrays, str(path), metadata={"format": "pt", "old": "x"})
    before = digest(path)
    status, _, err = cli(capsys, "set-metadata", str(path), "note=ü 1", "--delete", "old")
    assert status == 0, err
    with safetensors.safe_open(str(path), "np") as reference:
        assert reference.metadata() == {"format": "pt", "note": "ü 1"}
        for name, array in arrays.items():
            assert reference.get_tensor(name).tobytes() == array.tobytes()
    assert digest(path) == before
    unchanged = path.read_bytes()
    status, _, err = cli(capsys, "set-metadata", str(path), "n=1", "--type", "u32")
    assert status == 1 and "strings" in err and path.read_bytes() == unchanged
    status, _, err = cli(capsys, "set-metadata", str(path), "--delete", "missing")
    assert status == 1 and path.read_bytes() == unchanged


def test_other_formats_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(3))
    status, _, err = cli(capsys, "set-metadata", str(path), "a=b")
    assert status == 1 and "GGUF and safetensors" in err
