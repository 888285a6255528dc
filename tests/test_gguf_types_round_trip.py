"""GGUF -> safetensors -> GGUF restores every key's type and value.

``convert`` to safetensors writes each key's canonical text and one ``__gguf_types__``
record of the keys that are not plain strings; ``convert`` back to GGUF types them
again. Oracle: ``gguf.GGUFReader`` on the original and the round-tripped file (types as
gguf-py reads them, values as ``field.contents()``), and ``safetensors`` for the middle.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFValueType as T
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from tests.gguf_oracle import read_kvs, write_reference

safetensors = pytest.importorskip("safetensors")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

KVS: list[tuple[str, Any, T, T | None]] = [
    ("general.name", "tiny", T.STRING, None),
    ("llama.context_length", 8192, T.UINT32, None),
    ("llama.rope.freq_base", 10000.5, T.FLOAT32, None),
    ("llama.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32, None),
    ("x.f64", 0.1, T.FLOAT64, None),
    ("x.i8", -5, T.INT8, None),
    ("x.u64", 2**63 + 11, T.UINT64, None),
    ("x.i64", -(2**62), T.INT64, None),
    ("x.u16", 65535, T.UINT16, None),
    ("x.flag", True, T.BOOL, None),
    ("x.number_text", "4096", T.STRING, None),  # a STRING that looks like a number stays one
    ("tokenizer.ggml.tokens", ["<s>", "a\nb", '"q"', "\\", "日本"], T.ARRAY, T.STRING),
    ("tokenizer.ggml.scores", [0.0, -1.5, 0.1, float("inf"), -0.0], T.ARRAY, T.FLOAT32),
    ("tokenizer.ggml.token_type", [1, 2, 3, 6, 1], T.ARRAY, T.INT32),
    ("x.nest", [[0.1, 0.25], [3.0]], T.ARRAY, T.ARRAY),
    ("x.flags", [True, False], T.ARRAY, T.BOOL),
]


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN, -0.0 told from 0.0."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return type(a) is type(b) and a == b


def round_trip(tmp_path: Path, kvs: list[tuple[str, Any, T, T | None]]) -> tuple[Path, Path, Path]:
    source = tmp_path / "source.gguf"
    write_reference(source, kvs, {"w.weight": np.arange(8, dtype=np.float32).reshape(2, 4)})
    middle = tmp_path / "middle.safetensors"
    back = tmp_path / "back.gguf"
    assert main(["convert", str(source), str(middle)]) == 0
    assert main(["convert", str(middle), str(back)]) == 0
    return source, middle, back


def test_every_key_comes_back_with_its_type_and_value(tmp_path: Path) -> None:
    source, middle, back = round_trip(tmp_path, KVS)
    before = {key: (kind, value) for key, kind, value in read_kvs(source)}
    after = {key: (kind, value) for key, kind, value in read_kvs(back)}
    assert set(after) >= set(before) - {"general.alignment"}
    for key, (kind, value) in before.items():
        if key == "general.alignment":
            continue
        assert after[key][0] == kind, key
        assert same(after[key][1], value), key
    # The middle file: every key's text, and the record of the non-STRING ones.
    with safetensors.safe_open(str(middle), "np") as file:
        metadata = file.metadata()
    record = json.loads(metadata["__gguf_types__"])
    assert record["llama.context_length"] == "UINT32"
    assert record["x.nest"] == "ARRAY[ARRAY[FLOAT32]]"
    assert "general.name" not in record and "x.number_text" not in record
    assert metadata["llama.attention.layer_norm_rms_epsilon"] == "1e-05"
    # The record is a file's record, not the model's: digests and diff ignore it.
    digests = {st.open_checkpoint(p).metadata_digest() for p in (source, middle, back)}
    assert len(digests) == 1
    assert main(["diff", str(source), str(middle)]) == 0


def test_safetensors_to_safetensors_keeps_the_record(tmp_path: Path) -> None:
    _, middle, _ = round_trip(tmp_path, KVS)
    again = tmp_path / "again.safetensors"
    back = tmp_path / "again.gguf"
    assert main(["convert", str(middle), str(again)]) == 0
    assert main(["convert", str(again), str(back)]) == 0
    kinds = {key: kind for key, kind, _ in read_kvs(back)}
    assert kinds["llama.context_length"] == "UINT32"
    assert kinds["tokenizer.ggml.scores"] == "ARRAY[FLOAT32]"


def test_a_record_that_lies_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "lying.safetensors"
    metadata = {"format": "pt", "n": "not a number", "__gguf_types__": '{"n":"UINT32"}'}
    safetensors_numpy.save_file({"w": np.ones(2, np.float32)}, str(path), metadata=metadata)
    with pytest.raises(st.FormatError, match="UINT32 needs an integer"):
        st.save(tmp_path / "out.gguf", path)
    assert not (tmp_path / "out.gguf").exists()
    broken = tmp_path / "broken.safetensors"
    metadata = {"format": "pt", "__gguf_types__": "[1, 2"}
    safetensors_numpy.save_file({"w": np.ones(2, np.float32)}, str(broken), metadata=metadata)
    with pytest.raises(st.FormatError, match="__gguf_types__"):
        st.save(tmp_path / "out.gguf", broken)


@settings(max_examples=40, deadline=None)
@given(
    values=hs.lists(hs.floats(width=32, allow_nan=True), min_size=1, max_size=6),
    number=hs.integers(-(2**31), 2**31 - 1),
)
def test_any_float32_array_and_int32_come_back_bit_for_bit(
    tmp_path_factory: pytest.TempPathFactory, values: list[float], number: int
) -> None:
    folder = tmp_path_factory.mktemp("types")
    kvs = [("x.values", values, T.ARRAY, T.FLOAT32), ("x.number", number, T.INT32, None)]
    source, _, back = round_trip(folder, kvs)
    before = dict((key, value) for key, _, value in read_kvs(source))
    after = dict((key, (kind, value)) for key, kind, value in read_kvs(back))
    assert after["x.number"] == ("INT32", number)
    assert after["x.values"][0] == "ARRAY[FLOAT32]"
    found = np.array(after["x.values"][1], np.float32)
    expected = np.array(before["x.values"], np.float32)
    # Bit for bit, but a NaN's sign and payload: the canonical text of every NaN is "nan".
    assert np.array_equal(np.isnan(found), np.isnan(expected))
    plain = ~np.isnan(expected)
    assert np.array_equal(found[plain].view(np.uint32), expected[plain].view(np.uint32))
