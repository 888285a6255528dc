"""``strided.set_metadata``, the Python face of ``strided set-metadata``.

Python values are stored with the type ``types`` gives, the existing key's or
llama.cpp's, read back by ``gguf.GGUFReader`` and ``safetensors``; a value that does
not fit its type is a FormatError and leaves the file as it was; the report is what
``set-metadata --json`` prints, and the function writes the bytes the command writes.
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from tests.gguf_oracle import read_kvs, read_tensors, write_reference
from tests.test_set_metadata import KVS, TENSORS


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    write_reference(path, KVS, TENSORS)
    return path


def digest(path: Path) -> str:
    with st.open_checkpoint(path) as checkpoint:
        return checkpoint.digest()


def test_python_values_take_their_types(model: Path) -> None:
    before, tensors = digest(model), read_tensors(model)
    report = st.set_metadata(
        model,
        {
            "llama.context_length": 8192,  # existing UINT32
            "t.flag": True,  # existing BOOL
            "tokenizer.ggml.token_type": (3, 4, 5),  # existing ARRAY[INT32]
            "general.name": "[not json",  # llama.cpp's STRING
            "n.u16": 65535,
            "n.f64": 2,  # an int for a float type
            "n.list": [1.5, -2.0],
            "n.words": ["a", "b"],
        },
        delete=["llama.attention.layer_norm_rms_epsilon"],
        types={"n.u16": "u16", "n.f64": "FLOAT64", "n.list": "f32", "n.words": "STRING"},
    )
    assert read_kvs(model) == [
        ("general.architecture", "STRING", "llama"),
        ("llama.context_length", "UINT32", 8192),
        ("t.flag", "BOOL", True),
        ("tokenizer.chat_template", "STRING", "old"),
        ("tokenizer.ggml.token_type", "ARRAY[INT32]", [3, 4, 5]),
        ("general.name", "STRING", "[not json"),
        ("n.u16", "UINT16", 65535),
        ("n.f64", "FLOAT64", 2.0),
        ("n.list", "ARRAY[FLOAT32]", [1.5, -2.0]),
        ("n.words", "ARRAY[STRING]", ["a", "b"]),
    ]
    assert read_tensors(model) == tensors and digest(model) == before
    assert report.ok and report.tensors_unchanged
    assert (report.path, report.format) == (str(model), "gguf")
    assert report.deleted == ["llama.attention.layer_norm_rms_epsilon"]
    kinds = {key: kind for key, kind, _ in read_kvs(model)}
    assert report.set == {key: kinds[key] for key in report.set}
    assert list(report.set)[:2] == ["llama.context_length", "t.flag"] and len(report.set) == 8
    assert json.loads(report.to_json()) == {
        "path": str(model),
        "format": "gguf",
        "set": report.set,
        "deleted": report.deleted,
        "tensors_unchanged": True,
    }


@pytest.mark.parametrize(
    ("values", "types", "delete"),
    [
        ({"llama.context_length": "4096"}, None, ()),  # text is not a UINT32
        ({"llama.context_length": -1}, None, ()),
        ({"llama.context_length": 2**32}, None, ()),
        ({"llama.context_length": 1.0}, None, ()),
        ({"llama.context_length": True}, None, ()),
        ({"t.flag": 1}, None, ()),
        ({"t.flag": "true"}, None, ()),
        ({"tokenizer.chat_template": 5}, None, ()),
        ({"tokenizer.ggml.token_type": [1, 2.5]}, None, ()),
        ({"tokenizer.ggml.token_type": 3}, None, ()),
        ({"llama.attention.layer_norm_rms_epsilon": 1e39}, None, ()),
        ({"n": 300}, {"n": "u8"}, ()),
        ({"n": 1}, None, ()),  # a new key that is not llama.cpp's needs a type
        ({"n": 1}, {"n": "u33"}, ()),
        ({"n": 1}, {"m": "u8"}, ()),  # a type for a key not set
        ({"llama.context_length": 1}, {"llama.context_length": "i32"}, ()),
        ({"general.alignment": 64}, None, ()),
        ({"": 1}, None, ()),
        ({}, None, ()),
        ({}, None, ("no.such.key",)),
        ({}, None, ("split.count",)),
    ],
)
def test_a_value_that_does_not_fit_is_a_format_error_and_changes_nothing(
    model: Path, values: dict[str, Any], types: dict[str, str] | None, delete: tuple[str, ...]
) -> None:
    before = model.read_bytes()
    with pytest.raises(st.FormatError):
        st.set_metadata(model, values, delete, types)
    assert model.read_bytes() == before
    assert sorted(p.name for p in model.parent.iterdir()) == ["m.gguf"]


INTEGER_TYPES = {"u8": (0, 2**8 - 1), "i8": (-(2**7), 2**7 - 1), "u16": (0, 2**16 - 1),
                 "i16": (-(2**15), 2**15 - 1), "u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1),
                 "u64": (0, 2**64 - 1), "i64": (-(2**63), 2**63 - 1)}  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(hs.sampled_from(sorted(INTEGER_TYPES)), hs.integers(-(2**65), 2**65), hs.booleans())
def test_an_integer_is_stored_exactly_when_its_type_holds_it(
    tmp_path_factory: pytest.TempPathFactory, name: str, value: int, array: bool
) -> None:
    path = tmp_path_factory.mktemp("int") / "m.gguf"
    write_reference(path, KVS, TENSORS)
    low, high = INTEGER_TYPES[name]
    given_value: Any = [value, low] if array else value
    if not low <= value <= high:
        before = path.read_bytes()
        with pytest.raises(st.FormatError):
            st.set_metadata(path, {"n": given_value}, types={"n": name})
        assert path.read_bytes() == before
        return
    stored = f"{'UINT' if name[0] == 'u' else 'INT'}{name[1:]}"  # GGUF's spelling
    report = st.set_metadata(path, {"n": given_value}, types={"n": stored})
    kind = f"ARRAY[{stored}]" if array else stored
    assert report.set == {"n": kind}
    assert read_kvs(path)[-1] == ("n", kind, given_value)


def test_the_report_is_what_the_command_prints_and_the_bytes_what_it_writes(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = model.parent / "out.gguf"
    report = st.set_metadata(
        model, {"a.b": 5, "llama.context_length": 100, "c": [1, 2]}, ["t.flag"],
        {"a.b": "u32", "c": "u32"}, out,
    )  # fmt: skip
    written = out.read_bytes()
    out.unlink()
    status = main(["set-metadata", str(model), "a.b=5", "llama.context_length=100", "c=[1, 2]",
                   "--delete", "t.flag", "--type", "u32", "-o", str(out), "--json"])  # fmt: skip
    assert status == 0 and report.ok
    assert capsys.readouterr().out == report.to_json() + "\n"
    assert out.read_bytes() == written
    with pytest.raises(FileExistsError):
        st.set_metadata(model, {"a.b": 6}, types={"a.b": "u32"}, output=out)
    assert st.set_metadata(model, {"a.b": 6}, types={"a.b": "u32"}, output=out, overwrite=True).ok


def test_safetensors_values_are_strings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    safetensors.numpy.save_file(arrays, str(path), metadata={"old": "1", "keep": "k"})
    before = digest(path)
    for values, types in (({"n": 1}, None), ({"n": "1"}, {"n": "u32"})):
        with pytest.raises(st.FormatError):
            st.set_metadata(path, values, types=types)
    report = st.set_metadata(path, {"new": "x", "keep": "y"}, delete="old", types={"new": "str"})
    with safetensors.safe_open(str(path), "np") as found:
        assert found.metadata() == {"keep": "y", "new": "x"}
        assert np.array_equal(found.get_tensor("w"), arrays["w"])
    assert digest(path) == before
    assert (report.format, report.set, report.deleted) == (
        "safetensors",
        {"new": "STRING", "keep": "STRING"},
        ["old"],
    )
    copy = tmp_path / "copy.safetensors"
    safetensors.numpy.save_file(arrays, str(copy), metadata={"old": "1", "keep": "k"})
    expected = st.set_metadata(copy, {"new": "x", "keep": "y"}, delete=["old"])
    copy.write_bytes(b"")
    safetensors.numpy.save_file(arrays, str(copy), metadata={"old": "1", "keep": "k"})
    assert main(["set-metadata", str(copy), "new=x", "keep=y", "--delete", "old", "--json"]) == 0
    assert capsys.readouterr().out == expected.to_json() + "\n"


def test_the_docstring_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(st.set_metadata, "set_metadata", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
