"""Metadata floats keep their stored type at every depth.

A NumPy ``float32``/``float16`` scalar in a pickle (written by ``torch.save``) and the
floats of a nested GGUF ``ARRAY[ARRAY[FLOAT32]]`` (written by ``gguf.GGUFWriter``)
have the canonical text of their stored type (``0.1``, never
``0.10000000149011612``) in the metadata digest, ``hash``, ``diff`` and ``convert``,
while ``Checkpoint.metadata`` still holds plain Python floats of the exact stored
values. Expected texts come from NumPy's shortest digits (``np.format_float_*`` with
``unique=True``) laid out as Python's ``repr``, cross-checked against
``str(st.Scalar(...))``; digests from ``hashlib``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import torch
from gguf import GGUFWriter
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from strided.jobs._metadata_text import canonical

# -- the definition, recomputed --------------------------------------------------------------


def shortest(value: Any) -> str:
    """A NumPy float scalar's shortest round-trip digits in its own type, as Python's
    ``repr`` lays a float out (``0.1``, ``1e-05``, ``1e+20``, ``-0.0``, ``inf``)."""
    if np.isnan(value):
        return "nan"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "-0.0" if np.signbit(value) else "0.0"
    scientific = np.format_float_scientific(abs(value), unique=True, trim="-")
    mantissa, exponent = scientific.split("e")
    digits, exp = mantissa.replace(".", ""), int(exponent)
    if -4 <= exp < 16:
        if exp >= len(digits) - 1:
            body = digits + "0" * (exp - len(digits) + 1) + ".0"
        elif exp >= 0:
            body = digits[: exp + 1] + "." + digits[exp + 1 :]
        else:
            body = "0." + "0" * (-exp - 1) + digits
    else:
        fraction = "." + digits[1:] if len(digits) > 1 else ""
        body = f"{digits[0]}{fraction}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return ("-" if value < 0 else "") + body


def escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def digest_of(texts: dict[str, str]) -> str:
    lines = "".join(
        f"{escaped(key)}\t{escaped(texts[key])}\n"
        for key in sorted(texts, key=lambda k: k.encode("utf-8"))
    )
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def json_texts(texts: list[str]) -> str:
    return json.dumps(texts, ensure_ascii=False, separators=(",", ":"))


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(list(args))
    return status, out.getvalue()


# -- NumPy scalars in a torch.save pickle ------------------------------------------------------


def test_shortest_agrees_with_strided_scalar_text() -> None:
    for value in (0.1, 1e-5, 3.3, 65504.0, 1e-20, -0.0, 2.0**-149):
        assert shortest(np.float32(value)) == str(st.Scalar(st.DType.F32, float(np.float32(value))))
        half = np.float16(value)
        assert shortest(half) == str(st.Scalar(st.DType.F16, float(half)))


def _scalars() -> dict[str, Any]:
    return {
        "lr": np.float32(0.1),
        "eps": np.float32(1e-5),
        "half": np.float16(0.1),
        "brain": ml_dtypes.bfloat16(0.1),
        "wide": np.float64(0.1),
        "plain": 0.1,
        "f32_nan": np.float32("nan"),
        "f32_tiny": np.float32(2.0**-149),
    }


def test_numpy_float_scalars_in_a_torch_pickle_keep_their_type(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    scalars = _scalars()
    torch.save({"w": torch.ones(2), **scalars}, path)
    expected = {
        "lr": "0.1",
        "eps": "1e-05",
        "half": "0.1",
        "brain": "0.1",
        "wide": "0.1",
        "plain": "0.1",
        "f32_nan": "nan",
        "f32_tiny": "1e-45",
    }
    for key in ("lr", "eps", "half", "f32_nan", "f32_tiny"):
        assert expected[key] == shortest(scalars[key])
    assert str(st.Scalar(st.DType.BF16, float(scalars["brain"]))) == expected["brain"]
    with st.open_checkpoint(path) as checkpoint:
        metadata = checkpoint.metadata
        assert checkpoint.metadata_digest() == digest_of(expected)
        types = checkpoint.metadata_types
    # The plain-Python view: floats of exactly the stored values.
    for key, value in scalars.items():
        assert isinstance(metadata[key], float)
        if key != "f32_nan":
            assert metadata[key] == float(value)
    assert np.isnan(metadata["f32_nan"])
    assert types == {
        "lr": "F32", "eps": "F32", "half": "F16", "brain": "BF16", "wide": "F64",
        "plain": "F64", "f32_nan": "F32", "f32_tiny": "F32",
    }  # fmt: skip
    status, out = run("hash", str(path))
    assert status == 0
    assert f"{digest_of(expected)}  *metadata*" in out.splitlines()


@settings(max_examples=25, deadline=None)
@given(bits=hs.integers(0, 2**32 - 1), half_bits=hs.integers(0, 2**16 - 1))
def test_any_float32_or_float16_scalar_has_the_text_of_its_type(
    tmp_path_factory: pytest.TempPathFactory, bits: int, half_bits: int
) -> None:
    single = np.uint32(bits).view(np.float32)
    half = np.uint16(half_bits).view(np.float16)
    path = tmp_path_factory.mktemp("s") / "s.pt"
    torch.save({"w": torch.zeros(1), "single": single, "half": half}, path)
    expected = {"single": shortest(single), "half": shortest(half)}
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata_digest() == digest_of(expected)
        values = checkpoint.metadata
    for key, value in (("single", single), ("half", half)):
        assert isinstance(values[key], float)
        assert np.array_equal(np.float64(values[key]), np.float64(value), equal_nan=True)


def test_a_pickle_and_its_safetensors_copy_agree_on_float32_metadata(tmp_path: Path) -> None:
    """convert writes the F32 text, and diff finds both sides' metadata equal."""
    source = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2), "lr": np.float32(0.1), "wd": np.float16(0.01)}, source)
    out = tmp_path / "model.safetensors"
    assert run("convert", str(source), str(out))[0] == 0
    with safetensors.safe_open(str(out), "np") as opened:
        stored = opened.metadata()
    assert stored["lr"] == "0.1" and stored["wd"] == shortest(np.float16(0.01)) == "0.01"
    handwritten = tmp_path / "hand.safetensors"
    weights = {"w": st.Tensor.from_numpy(np.ones(2, np.float32))}
    st.save_safetensors(handwritten, weights, {"lr": "0.1", "wd": "0.01"})
    status, report = run("diff", str(source), str(handwritten), "--json")
    assert status == 0, report
    assert json.loads(report)["same"] is True


def test_numpy_float_keys_and_set_items_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "keys.pt"
    torch.save({"w": torch.ones(1), "d": {np.float32(0.5): 1}, "s": {np.float32(0.25)}}, path)
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata == {"d.0.5": 1, "s.0": 0.25}
        assert checkpoint.metadata_types == {"d.0.5": "int", "s.0": "F32"}


def test_metadata_copies_and_pickles_keep_the_stored_type(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(1), "lr": np.float32(0.1)}, path)
    with st.open_checkpoint(path) as checkpoint:
        value = checkpoint.metadata["lr"]
        again = pickle.loads(pickle.dumps(checkpoint.metadata))
        shown = checkpoint.display_metadata()
    assert value == float(np.float32(0.1)) and value + 0 == value
    assert again == {"lr": value} and canonical(again["lr"]) == "0.1"
    assert shown == {"lr": 0.1}


# -- nested GGUF arrays -------------------------------------------------------------------------

NEST = [[0.1, 0.2, 3.3], [1e-5, -0.0, float("inf")], [1e20]]


def _write_nested(path: Path) -> None:
    writer = GGUFWriter(str(path), "llama")
    writer.add_array("t.nest", NEST)
    writer.add_array("t.flat", [0.1, 1e-7])
    writer.add_float32("t.eps", 1e-5)
    writer.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _nest_text() -> str:
    inner = [json_texts([shortest(np.float32(x)) for x in row]) for row in NEST]
    return json_texts(inner)


def test_nested_float32_arrays_keep_their_type(tmp_path: Path) -> None:
    path = tmp_path / "nest.gguf"
    _write_nested(path)
    expected = {
        "general.architecture": "llama",
        "t.nest": _nest_text(),
        "t.flat": json_texts(["0.1", "1e-07"]),
        "t.eps": "1e-05",
    }
    rows = [
        '[\\"0.1\\",\\"0.2\\",\\"3.3\\"]',
        '[\\"1e-05\\",\\"-0.0\\",\\"inf\\"]',
        '[\\"1e+20\\"]',
    ]
    assert expected["t.nest"] == "[" + ",".join(f'"{row}"' for row in rows) + "]"
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata_digest() == digest_of(expected)
        assert checkpoint.metadata_types["t.nest"] == "ARRAY[ARRAY[FLOAT32]]"
        nest = checkpoint.metadata["t.nest"]
        shown = checkpoint.display_metadata()["t.nest"]
    assert nest == [[float(np.float32(x)) for x in row] for row in NEST]
    assert all(isinstance(x, float) for row in nest for x in row)
    assert shown == [[0.1, 0.2, 3.3], [1e-5, -0.0, float("inf")], [1e20]]
    status, out = run("hash", str(path))
    assert status == 0 and f"{digest_of(expected)}  *metadata*" in out.splitlines()
    # GGUF -> safetensors: the nest's string is its canonical text, and diff agrees.
    copy = tmp_path / "nest.safetensors"
    assert run("convert", str(path), str(copy))[0] == 0
    with safetensors.safe_open(str(copy), "np") as opened:
        assert opened.metadata()["t.nest"] == expected["t.nest"]
    status, report = run("diff", str(path), str(copy), "--json")
    assert status == 0, report


def test_gguf_float32_values_write_back_as_float32(tmp_path: Path) -> None:
    """A GGUF's metadata handed to save_gguf keeps FLOAT32 values and nests FLOAT32."""
    path = tmp_path / "nest.gguf"
    _write_nested(path)
    with st.open_checkpoint(path) as checkpoint:
        metadata = checkpoint.metadata
    out = tmp_path / "again.gguf"
    weights = {"token_embd.weight": st.Tensor.from_numpy(np.zeros((2, 4), np.float32))}
    st.save_gguf(out, weights, metadata)
    with st.open_checkpoint(out) as back:
        types = back.metadata_types
        assert back.metadata_digest() == st.open_checkpoint(path).metadata_digest()
    assert types["t.eps"] == "FLOAT32" and types["t.flat"] == "ARRAY[FLOAT32]"
    assert types["t.nest"] == "ARRAY[ARRAY[FLOAT32]]"
