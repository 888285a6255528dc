"""Writing GGUF: ``st.save_gguf`` and ``strided convert ... out.gguf``.

Every file written is read back by the reference ``gguf.GGUFReader`` (names, ggml
types, shapes, stored bytes, key/values with their types, in order) and by strided;
plain float conversions are checked against ``gguf.quants.quantize``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as T
from gguf import quants
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from tests.gguf_oracle import read_kvs, read_tensors, scale_overflows, write_reference

PLAIN = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@hs.composite
def named_arrays(draw: hs.DrawFn) -> dict[str, np.ndarray]:
    count = draw(hs.integers(1, 4))
    out = {}
    for i in range(count):
        kind = draw(hs.sampled_from(sorted(PLAIN)))
        shape = tuple(draw(hs.lists(hs.integers(1, 5), min_size=1, max_size=4)))
        bits = draw(hs.binary(min_size=8 * math.prod(shape), max_size=8 * math.prod(shape)))
        dtype = np.dtype(PLAIN[kind])
        data = np.frombuffer(bits[: dtype.itemsize * math.prod(shape)], dtype=dtype)
        out[f"t{i}.{kind.lower()}"] = data.reshape(shape)
    return out


@settings(max_examples=40, deadline=None)
@given(arrays=named_arrays(), transpose=hs.booleans())
def test_save_gguf_keeps_every_tensor_bit_for_bit(
    tmp_path_factory: pytest.TempPathFactory, arrays: dict[str, np.ndarray], transpose: bool
) -> None:
    path = tmp_path_factory.mktemp("w") / "t.gguf"
    tensors = {}
    for name, array in arrays.items():
        tensor = st.Tensor.from_numpy(array)
        tensors[name] = tensor.transpose() if transpose and array.ndim == 2 else tensor
    st.save_gguf(path, tensors)
    found = read_tensors(path)
    assert list(found) == list(tensors)
    for name, tensor in tensors.items():
        kind, shape, data = found[name]
        assert kind == tensor.dtype.name and shape == tuple(tensor.shape)
        assert data == np.ascontiguousarray(tensor.numpy()).tobytes()
    with st.open_checkpoint(path) as back:
        for name, tensor in tensors.items():
            assert back[name].digest() == tensor.digest()


def test_metadata_values_take_the_documented_types(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    metadata: dict[str, Any] = {
        "general.architecture": "llama",
        "llama.block_count": 32,
        "neg": -5,
        "big": 2**40,
        "huge": 2**63,
        "eps": 1e-5,
        "wide": np.float64(0.1),
        "small": np.uint16(7),
        "flag": True,
        "tokens": ["a", "ü", ""],
        "ids": [1, -2, 3],
        "scores": [0.5, -1.25],
        "bools": [True, False],
        "u8s": np.array([1, 2, 255], dtype=np.uint8),
        "nested": [[1, 2], [3]],
        "empty": [],
    }
    st.save_gguf(path, {"w": st.Tensor.from_numpy(np.zeros((2, 4), np.float32))}, metadata)
    kvs = read_kvs(path)
    assert [key for key, _, _ in kvs] == list(metadata)
    types = {key: kind for key, kind, _ in kvs}
    assert types == {
        "general.architecture": "STRING",
        "llama.block_count": "UINT32",
        "neg": "INT32",
        "big": "INT64",
        "huge": "UINT64",
        "eps": "FLOAT32",
        "wide": "FLOAT64",
        "small": "UINT16",
        "flag": "BOOL",
        "tokens": "ARRAY[STRING]",
        "ids": "ARRAY[INT32]",
        "scores": "ARRAY[FLOAT32]",
        "bools": "ARRAY[BOOL]",
        "u8s": "ARRAY[UINT8]",
        "nested": "ARRAY[ARRAY[INT32]]",
        "empty": "ARRAY",  # the reference lists no element type for an empty array
    }
    assert st.open_gguf(path).metadata_types["empty"] == "ARRAY[INT32]"
    values = {key: value for key, _, value in kvs}
    assert values["eps"] == float(np.float32(1e-5)) and values["huge"] == 2**63
    assert values["tokens"] == ["a", "ü", ""] and values["u8s"] == [1, 2, 255]
    with st.open_checkpoint(path) as back:
        assert back.metadata["nested"] == [[1, 2], [3]]
        assert back.metadata["wide"] == 0.1


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({"k": 2**70}, st.FormatError),
        ({"k": None}, st.FormatError),
        ({"k": b"bytes"}, st.FormatError),
        ({"k": [1, "a"]}, st.FormatError),
        ({"k": 1e300}, st.FormatError),
        ({"split.count": 2}, st.FormatError),
        ({"": "empty key"}, st.FormatError),
        ({"general.alignment": 48}, st.FormatError),
    ],
)
def test_metadata_that_does_not_fit_writes_nothing(
    tmp_path: Path, metadata: dict[str, Any], error: type[Exception]
) -> None:
    path = tmp_path / "m.gguf"
    with pytest.raises(error):
        st.save_gguf(path, {"w": st.Tensor.from_numpy(np.zeros(4, np.float32))}, metadata)
    assert list(tmp_path.iterdir()) == []


def test_names_of_64_bytes_are_refused_and_63_kept(tmp_path: Path) -> None:
    zeros = st.Tensor.from_numpy(np.zeros(4, np.float32))
    st.save_gguf(tmp_path / "ok.gguf", {"n" * 63: zeros})
    assert list(read_tensors(tmp_path / "ok.gguf")) == ["n" * 63]
    with pytest.raises(st.FormatError, match="1 to 63 bytes"):
        st.save_gguf(tmp_path / "long.gguf", {"é" * 32: zeros})
    assert not (tmp_path / "long.gguf").exists()


def test_alignment_key_pads_the_data(tmp_path: Path) -> None:
    path = tmp_path / "a.gguf"
    tensors = {
        "a": st.Tensor.from_numpy(np.arange(3, dtype=np.float32)),
        "b": st.Tensor.from_numpy(np.arange(5, dtype=np.int16)),
    }
    st.save_gguf(path, tensors, {"general.alignment": 256})
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    assert reader.alignment == 256
    assert all(t.data_offset % 256 == 0 for t in reader.tensors)
    assert [t.data.tolist() for t in reader.tensors] == [[0, 1, 2], [0, 1, 2, 3, 4]]


RULES = {
    "blk.0.attn_q.weight": ((8, 4), "F16"),
    "blk.0.attn_norm.weight": ((4,), "F32"),
    "blk.0.ffn_gate_inp.weight": ((8, 4), "F32"),
    "pos_embd.weight": ((8, 4), "F32"),
    "blk.0.ffn_norm.weight": ((2, 4), "F32"),
    "blk.0.ssm_conv1d.weight": ((2, 4), "F32"),
    "token_types.weight": ((2, 4), "F32"),
    "output.bias": ((8, 4), "F32"),
    "blk.0.ffn_down_exps.weight": ((2, 2, 4), "F16"),
    "rope_freqs.weight": ((4,), "F32"),
}


def rule_tensors() -> dict[str, st.Tensor]:
    rng = np.random.default_rng(5)
    out = {
        name: st.Tensor.from_numpy(rng.standard_normal(shape).astype(np.float32))
        for name, (shape, _) in RULES.items()
    }
    out["ids"] = st.Tensor.from_numpy(np.arange(4, dtype=np.int32))
    return out


@pytest.mark.parametrize("target", ["F16", "BF16"])
def test_one_type_for_all_follows_the_llama_cpp_rules(tmp_path: Path, target: str) -> None:
    path = tmp_path / "r.gguf"
    tensors = rule_tensors()
    st.save_gguf(path, tensors, {"general.architecture": "llama"}, types=target)
    found = read_tensors(path)
    oracle_type = {"F16": Q.F16, "BF16": Q.BF16}[target]
    for name, (shape, expected) in RULES.items():
        kind, got_shape, data = found[name]
        expected = target if expected == "F16" else expected
        assert (kind, got_shape) == (expected, shape), name
        values = tensors[name].numpy()
        assert data == quants.quantize(values, oracle_type if kind == target else Q.F32).tobytes()
    assert found["ids"][0] == "I32"
    kvs = dict((key, (kind, value)) for key, kind, value in read_kvs(path))
    assert kvs["general.file_type"] == ("UINT32", {"F16": 1, "BF16": 32}[target])


@settings(max_examples=60, deadline=None)
@given(
    bits=hs.lists(hs.integers(0, 2**32 - 1), min_size=8, max_size=64).filter(
        lambda b: len(b) % 8 == 0
    ),
    target=hs.sampled_from(["F16", "BF16"]),
)
def test_f32_to_plain_floats_matches_gguf_quantize(
    tmp_path_factory: pytest.TempPathFactory, bits: list[int], target: str
) -> None:
    values = np.array(bits, dtype=np.uint32).view(np.float32).reshape(-1, 8)
    with np.errstate(all="ignore"):  # the reference's overflow and NaN warnings
        expected = quants.quantize(values, Q.F16 if target == "F16" else Q.BF16)
    narrow = np.float16 if target == "F16" else ml_dtypes.bfloat16
    overflow = np.isfinite(values) & np.isinf(expected.view(narrow).astype(np.float32))
    path = tmp_path_factory.mktemp("q") / "q.gguf"
    tensors = {"blk.0.attn_k.weight": st.Tensor.from_numpy(values)}
    if overflow.any():
        # The reference rounds a finite value beyond the type's range to infinity;
        # strided refuses it, as Tensor.convert does.
        with pytest.raises(st.RangeError, match="attn_k"):
            st.save_gguf(path, tensors, types=target)
        assert not path.exists()
        return
    st.save_gguf(path, tensors, types=target)
    _, _, data = read_tensors(path)["blk.0.attn_k.weight"]
    got = np.frombuffer(data, dtype=np.uint16)
    want = expected.view(np.uint16).reshape(-1)
    nan = np.isnan(values.reshape(-1))
    # Finite values and infinities: the reference's bits exactly. NaN stays NaN (the
    # reference sets its own payload bits).
    assert np.array_equal(got[~nan], want[~nan])
    back = got.view(narrow)
    assert np.isnan(back[nan].astype(np.float32)).all()


def test_unwritable_dtypes_are_dtype_errors(tmp_path: Path) -> None:
    for array in (np.zeros(3, np.uint8), np.zeros(3, np.bool_), np.zeros(3, np.uint32)):
        with pytest.raises(st.DTypeError, match="no ggml type"):
            st.save_gguf(tmp_path / "u.gguf", {"u": st.Tensor.from_numpy(array)})
    with pytest.raises(st.DTypeError):
        st.save_gguf(tmp_path / "u.gguf", {"u": np.zeros(3)})  # type: ignore[dict-item]
    assert list(tmp_path.iterdir()) == []


def test_explicit_types_per_tensor(tmp_path: Path) -> None:
    path = tmp_path / "e.gguf"
    tensors = {
        "a": st.Tensor.from_numpy(np.arange(4, dtype=np.float32)),
        "b": st.Tensor.from_numpy(np.arange(4, dtype=np.float32)),
    }
    st.save_gguf(path, tensors, types={"a": "BF16"})
    found = read_tensors(path)
    assert found["a"][0] == "BF16" and found["b"][0] == "F32"
    assert "general.file_type" not in [key for key, _, _ in read_kvs(path)]
    with pytest.raises(st.FormatError):
        st.save_gguf(path, tensors, types={"c": "F16"})
    with pytest.raises(st.DTypeError):
        ints = {"i": st.Tensor.from_numpy(np.arange(4, dtype=np.int32))}
        st.save_gguf(path, ints, types={"i": "F16"})


# -- convert --------------------------------------------------------------------------------

F16_KVS: list[tuple[str, Any, T, T | None]] = [
    ("llama.context_length", 4096, T.UINT32, None),
    ("llama.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32, None),
    ("t.i64", -(2**63), T.INT64, None),
    ("t.u8", 255, T.UINT8, None),
    ("t.f64", 0.1, T.FLOAT64, None),
    ("t.bool", True, T.BOOL, None),
    ("tokenizer.chat_template", "{% for m in messages %}{{ m }}{% endfor %}", T.STRING, None),
    ("tokenizer.ggml.tokens", ["<s>", "ü", "▁the"], T.ARRAY, T.STRING),
    ("tokenizer.ggml.scores", [0.0, -1.5, 2.25], T.ARRAY, T.FLOAT32),
    ("tokenizer.ggml.token_type", [1, 2, 3], T.ARRAY, T.INT32),
    ("general.file_type", 1, T.UINT32, None),
]


def f16_model(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    tensors = {
        "token_embd.weight": rng.standard_normal((16, 64)).astype(np.float16),
        "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((64, 64)).astype(np.float16),
        "blk.0.ffn_gate_inp.weight": rng.standard_normal((4, 64)).astype(np.float16),
        "output.weight": rng.standard_normal((16, 64)).astype(np.float16),
    }
    write_reference(path, F16_KVS, tensors)
    return tensors


@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_gguf_to_gguf_keeps_key_values_in_order_with_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    source = tmp_path / "f16.gguf"
    tensors = f16_model(source)
    out = tmp_path / "out.gguf"
    status, printed, err = cli(capsys, "convert", str(source), str(out), "--dtype", dtype)
    assert status == 0, err
    assert printed.strip().endswith("5 tensors")
    before, after = read_kvs(source), read_kvs(out)
    file_type = {"F32": 0, "BF16": 32}[dtype]
    expected = [
        (key, kind, file_type if key == "general.file_type" else value)
        for key, kind, value in before
    ]
    assert after == expected
    found = read_tensors(out)
    assert list(found) == list(tensors)
    # Weights take the type; the norm and the gate input keep their stored type.
    assert found["blk.0.attn_norm.weight"][0] == "F32"
    assert found["blk.0.ffn_gate_inp.weight"][0] == "F16"
    assert found["blk.0.attn_q.weight"][0] == dtype
    oracle = {"F32": Q.F32, "BF16": Q.BF16}[dtype]
    q = tensors["blk.0.attn_q.weight"].astype(np.float32)
    assert found["blk.0.attn_q.weight"][2] == quants.quantize(q, oracle).tobytes()
    assert found["blk.0.ffn_gate_inp.weight"][2] == tensors["blk.0.ffn_gate_inp.weight"].tobytes()


def test_convert_drops_the_layout_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "a.gguf"
    from gguf import GGUFWriter

    writer = GGUFWriter(str(source), "llama")
    writer.add_custom_alignment(64)
    writer.add_key_value("split.count", 1, T.UINT16)
    writer.add_tensor("w", np.arange(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "b.gguf"
    assert cli(capsys, "convert", str(source), str(out))[0] == 0
    assert [key for key, _, _ in read_kvs(out)] == ["general.architecture"]
    assert read_tensors(out)["w"][2] == np.arange(4, dtype=np.float32).tobytes()


def test_safetensors_round_trip_through_gguf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    arrays = {
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((8, 32)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(32).astype(ml_dtypes.bfloat16),
        "model.embed_tokens.weight": rng.standard_normal((4, 32)).astype(np.float16),
        "position_ids": np.arange(6, dtype=np.int64).reshape(1, 6),
    }
    source = tmp_path / "a.safetensors"
    safetensors.numpy.save_file(arrays, str(source), metadata={"format": "pt", "note": "hi"})
    middle, back = tmp_path / "m.gguf", tmp_path / "b.safetensors"
    assert cli(capsys, "convert", str(source), str(middle))[0] == 0
    assert read_kvs(middle) == [("note", "STRING", "hi")]
    for name, (kind, shape, data) in read_tensors(middle).items():
        assert (shape, data) == (arrays[name].shape, arrays[name].tobytes())
        assert kind == {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}.get(
            str(arrays[name].dtype), "I64"
        )
    assert cli(capsys, "convert", str(middle), str(back))[0] == 0
    again = safetensors.numpy.load_file(str(back))
    assert {k: v.tobytes() for k, v in again.items()} == {k: v.tobytes() for k, v in arrays.items()}
    with st.open_checkpoint(source) as a, st.open_checkpoint(back) as b:
        assert a.digest() == b.digest() and a.metadata_digest() == b.metadata_digest()


def test_output_is_the_same_for_every_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(2)
    tensors = {
        f"blk.{i}.ffn_up.weight": st.Tensor.from_numpy(
            rng.standard_normal((64, 4096 + 512 * i)).astype(np.float32)
        )
        for i in range(3)
    }
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, tensors)
    outputs = []
    for jobs in ("1", "3"):
        out = tmp_path / f"o{jobs}.gguf"
        status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", "F16",
                             "--jobs", jobs)  # fmt: skip
        assert status == 0, err
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_a_value_beyond_the_type_names_the_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.ones((4, 8), np.float32)
    values[2, 3] = 1e6
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, {"blk.0.attn_v.weight": st.Tensor.from_numpy(values)})
    out = tmp_path / "o.gguf"
    status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", "F16")
    assert status == 1
    assert "attn_v.weight" in err and "[2, 3]" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.safetensors"]


def test_keep_exempts_matching_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "f16.gguf"
    f16_model(source)
    out = tmp_path / "o.gguf"
    status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", "F32",
                         "--keep", "output.*", "--keep", "token_embd.*")  # fmt: skip
    assert status == 0, err
    found = read_tensors(out)
    assert found["output.weight"][0] == "F16" and found["token_embd.weight"][0] == "F16"
    assert found["blk.0.attn_q.weight"][0] == "F32"
    status, _, err = cli(capsys, "convert", str(source), str(tmp_path / "x.safetensors"),
                         "--keep", "x")  # fmt: skip
    assert status == 2 and "--keep" in err


def test_quantized_source_tensors_are_dequantized_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((8, 64)).astype(np.float32)
    blocks = quants.quantize(weight, Q.Q8_0)
    source = tmp_path / "q.gguf"
    norm = "blk.0.attn_norm.weight"
    write_reference(source, [], {"blk.0.attn_q.weight": blocks, norm: blocks},
                    raw_types={"blk.0.attn_q.weight": Q.Q8_0, norm: Q.Q8_0})  # fmt: skip
    out = tmp_path / "o.gguf"
    assert cli(capsys, "convert", str(source), str(out), "--dtype", "F16")[0] == 0
    found = read_tensors(out)
    exact = quants.dequantize(blocks, Q.Q8_0)
    assert found["blk.0.attn_q.weight"][:2] == ("F16", (8, 64))
    assert found["blk.0.attn_q.weight"][2] == quants.quantize(exact, Q.F16).tobytes()
    # Not a weight the rules convert: copied block for block.
    assert found[norm] == ("Q8_0", (8, 64), blocks.tobytes())


# -- block types ----------------------------------------------------------------------------

BLOCKS = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4"]
F32_VALUES = hs.one_of(
    hs.floats(-1e4, 1e4, width=32),
    hs.sampled_from([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 3e38, -3e38, 65504.0]),
    hs.integers(0, 2**31 - 1)
    .map(lambda b: float(np.uint32(b & 0x7F7FFFFF).view(np.float32)))
    .filter(lambda x: x <= 3e38),  # the kernels' own tests cover the top binade
)


@settings(max_examples=40, deadline=None)
@given(
    kind=hs.sampled_from(BLOCKS),
    rows=hs.integers(1, 3),
    data=hs.data(),
)
def test_block_types_are_bit_identical_to_gguf_quantize(
    tmp_path_factory: pytest.TempPathFactory, kind: str, rows: int, data: hs.DataObject
) -> None:
    size = 256 if kind.startswith("TQ") else 32 * data.draw(hs.integers(1, 3))
    values = np.array(data.draw(hs.lists(F32_VALUES, min_size=rows * size,
                                          max_size=rows * size)), dtype=np.float32)  # fmt: skip
    values = values.reshape(rows, size)
    path = tmp_path_factory.mktemp("b") / "b.gguf"
    with np.errstate(all="ignore"):
        expected = quants.quantize(values, Q[kind])
    tensors = {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values)}
    if scale_overflows(expected, kind, rows).any():
        # The reference stores an infinite scale: strided refuses the block.
        with pytest.raises(st.RangeError, match="overflows F16"):
            st.save_gguf(path, tensors, types=kind)
        assert not path.exists()
        return
    st.save_gguf(path, tensors, types=kind)
    found = read_tensors(path)["blk.0.ffn_up.weight"]
    assert found == (kind, (rows, size), expected.tobytes())
    with st.open_checkpoint(path) as back, np.errstate(all="ignore"):
        assert np.array_equal(
            back["blk.0.ffn_up.weight"].numpy(), quants.dequantize(expected, Q[kind])
        )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_block_with_nan_or_infinity_names_the_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: float
) -> None:
    values = np.ones((4, 64), np.float32)
    values[3, 40] = bad
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, {"blk.1.attn_output.weight": st.Tensor.from_numpy(values)})
    out = tmp_path / "o.gguf"
    status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", "Q8_0")
    assert status == 1
    assert "attn_output.weight" in err and "row 3" in err and "column 40" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.safetensors"]
    with pytest.raises(st.RangeError, match="attn_output"):
        st.save_gguf(out, {"blk.1.attn_output.weight": st.Tensor.from_numpy(values)}, types="Q4_0")


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_a_block_whose_f16_scale_overflows_is_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The reference writes an infinite scale (the block reads back as inf/NaN); strided
    names the tensor, the row and the block, exits 1 and leaves no file behind."""
    values = np.random.default_rng(5).standard_normal((4, 64)).astype(np.float32)
    values[2, 37] = -1e7  # block 1 of row 2: a scale of about 1e7 / 127 or more
    with np.errstate(all="ignore"):
        scale = quants.quantize(values, Q[kind]).view(np.uint8).reshape(4, 2, -1)[2, 1, :2]
    assert np.isinf(scale.view(np.float16)[0])
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values)})
    out = tmp_path / "o.gguf"
    status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", kind)
    assert status == 1
    assert "ffn_up.weight" in err and "row 2, block 1 (columns 32-63" in err
    assert "overflows F16" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.safetensors"]
    with pytest.raises(st.RangeError, match=r"ffn_up\.weight.*row 2, block 1 .*overflows F16"):
        st.save_gguf(out, {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values)}, types=kind)
    assert not out.exists()


def test_a_q8_0_scale_that_rounds_to_65504_is_written_as_the_reference_writes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """amax / 127 just below 65520 rounds (half to even) to F16's 65504: it fits, and
    the file holds gguf.quants.quantize's bytes; 65520 x 127 itself is refused."""
    values = np.ones((2, 64), dtype=np.float32)
    edge = np.float32(65520.0 * 127)
    values[1, 33] = np.nextafter(edge, np.float32(0))
    path = tmp_path / "fits.gguf"
    st.save_gguf(path, {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values)}, types="Q8_0")
    kind, shape, data = read_tensors(path)["blk.0.ffn_up.weight"]
    assert kind == "Q8_0" and shape == (2, 64)
    assert data == quants.quantize(values, Q.Q8_0).tobytes()
    assert np.frombuffer(data, np.uint8).reshape(4, 34)[3, :2].view(np.float16)[0] == 65504
    values[1, 33] = edge
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values)})
    status, _, err = cli(
        capsys, "convert", str(source), str(tmp_path / "o.gguf"), "--dtype", "Q8_0"
    )
    assert status == 1 and "row 1, block 1" in err and "65520.0" in err
    assert not (tmp_path / "o.gguf").exists()


def test_rows_that_are_not_whole_blocks_fall_back_to_f16(tmp_path: Path) -> None:
    path = tmp_path / "f.gguf"
    rng = np.random.default_rng(4)
    tensors = {
        "blk.0.attn_q.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "blk.0.attn_k.weight": rng.standard_normal((4, 48)).astype(np.float32),
        "blk.0.attn_v.weight": rng.standard_normal(64).astype(np.float32),
    }
    st.save_gguf(path, {k: st.Tensor.from_numpy(v) for k, v in tensors.items()}, types="Q8_0")
    found = read_tensors(path)
    assert found["blk.0.attn_q.weight"][2] == quants.quantize(tensors["blk.0.attn_q.weight"],
                                                               Q.Q8_0).tobytes()  # fmt: skip
    assert found["blk.0.attn_k.weight"][:2] == ("F16", (4, 48))
    assert found["blk.0.attn_v.weight"][0] == "F32"
    assert ("general.file_type", "UINT32", 7) in read_kvs(path)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_f16_gguf_to_q8_0_keeps_key_values_in_order_with_types(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    source = tmp_path / "f16.gguf"
    tensors = f16_model(source)
    out = tmp_path / "q8.gguf"
    status, _, err = cli(capsys, "convert", str(source), str(out), "--dtype", "Q8_0",
                         "--jobs", jobs)  # fmt: skip
    assert status == 0, err
    expected = [
        (key, kind, 7 if key == "general.file_type" else value)
        for key, kind, value in read_kvs(source)
    ]
    assert read_kvs(out) == expected
    found = read_tensors(out)
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "output.weight"):
        values = tensors[name].astype(np.float32)
        assert found[name] == ("Q8_0", values.shape, quants.quantize(values, Q.Q8_0).tobytes())
    assert found["blk.0.attn_norm.weight"][0] == "F32"
    assert found["blk.0.ffn_gate_inp.weight"][0] == "F16"
    # A Q8_0 source converted to Q8_0 again is copied block for block.
    again = tmp_path / "again.gguf"
    assert cli(capsys, "convert", str(out), str(again), "--dtype", "Q8_0")[0] == 0
    assert read_tensors(again) == found


def test_block_type_needs_a_gguf_destination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "s.safetensors"
    st.save_safetensors(source, {"w": st.Tensor.from_numpy(np.ones((2, 32), np.float32))})
    status, _, err = cli(capsys, "convert", str(source), str(tmp_path / "o.safetensors"),
                         "--dtype", "Q8_0")  # fmt: skip
    assert status == 2 and ".gguf" in err


_CHILD = """
import json, sys, tracemalloc
from strided.cli import main
tracemalloc.start()  # NumPy's buffers are traced too
status = main(["convert", sys.argv[1], sys.argv[2], "--dtype", sys.argv[3]])
print(json.dumps({"status": status, "peak": tracemalloc.get_traced_memory()[1]}))
"""


@pytest.mark.parametrize("dtype", ["Q8_0", "BF16"])
def test_conversion_memory_stays_far_below_one_tensor(tmp_path: Path, dtype: str) -> None:
    import json
    import subprocess
    import sys

    # One 64 MiB F16 tensor: its F32 values alone would be 128 MiB.
    values = np.random.default_rng(6).standard_normal((4096, 8192), dtype=np.float32)
    source = tmp_path / "big.gguf"
    st.save_gguf(source, {"blk.0.ffn_up.weight": st.Tensor.from_numpy(values.astype(np.float16))})
    del values
    found = subprocess.run(
        [sys.executable, "-c", _CHILD, str(source), str(tmp_path / "o.gguf"), dtype],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    result = json.loads(found.stdout.splitlines()[-1])
    assert result["status"] == 0
    assert result["peak"] < 48 * 2**20, result  # the F16 tensor alone is 64 MiB
