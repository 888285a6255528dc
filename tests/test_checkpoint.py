"""open_checkpoint: formats recognized by their first bytes, one Mapping face for all."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import gguf
import gguf.quants as gq
import numpy as np
import pytest

import strided as st

STRIDED = str(Path(sys.executable).parent / "strided")
VALUES = st.tensor([[1.5, -2.0, 0.25], [3.0, 4.0, -0.0]], st.DType.F32)


def write_gguf(path: Path, quantized: bool = True) -> np.ndarray:
    rng = np.random.default_rng(7)
    # Q4_K blocks of 144 bytes: random quants and sub-scales under modest F16 scales.
    blocks = rng.integers(0, 256, (4, 144), dtype=np.uint8)
    blocks[:, 0:2] = np.float16(0.01).reshape(1).view(np.uint8)
    blocks[:, 2:4] = np.float16(0.02).reshape(1).view(np.uint8)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-05)
    writer.add_array("scales", [0.1, 0.2])
    writer.add_tensor("plain", VALUES.numpy().copy())
    if quantized:
        writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return gq.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """One file per format, each under a name that says nothing (or lies) about it."""
    made = {}
    made["safetensors"] = tmp_path / "model.bin"
    st.save_safetensors(made["safetensors"], {"w": VALUES}, metadata={"k": "v"})
    made["npy"] = tmp_path / "weights.ckpt"
    st.save_npy(made["npy"], VALUES)
    made["json"] = tmp_path / "tensor.safetensors"
    made["json"].write_text(VALUES.to_json())
    made["gguf"] = tmp_path / "x.npz"
    write_gguf(made["gguf"])
    return made


@pytest.mark.parametrize("kind", ["safetensors", "npy", "json", "gguf"])
def test_the_format_comes_from_the_first_bytes(files: dict[str, Path], kind: str) -> None:
    with st.open_checkpoint(files[kind]) as ckpt:
        assert ckpt.format == kind
        assert isinstance(ckpt, Mapping)
        name = "plain" if kind == "gguf" else "w" if kind == "safetensors" else files[kind].stem
        assert name in ckpt and ckpt.keys() and next(iter(ckpt)) == name
        assert ckpt[name] == VALUES
        info = ckpt.info(name)
        assert info == st.TensorInfo(name, "F32", st.Shape((2, 3)), 24)
        assert ckpt.readable(name)
        assert ckpt.inspect(name).max == st.Scalar(st.DType.F32, 4.0)
        with pytest.raises(KeyError):
            ckpt["missing"]
        with pytest.raises(KeyError):
            ckpt.info("missing")
        assert ckpt.get("missing") is None  # Mapping.get
        assert str(files[kind]) == ckpt.path


def test_folder_and_index_of_shards(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    st.save_safetensors(folder / "a.safetensors", {"a": VALUES})
    st.save_safetensors(folder / "b.safetensors", {"b": VALUES.neg()})
    index = folder / "anything.json"
    index.write_text(json.dumps({"weight_map": {"a": "a.safetensors", "b": "b.safetensors"}}))
    for path in (folder, index):
        ckpt = st.open_checkpoint(path)
        assert ckpt.format == "safetensors" and sorted(ckpt) == ["a", "b"]
        assert ckpt["b"] == VALUES.neg()


def test_unknown_bytes_are_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x00\x01garbage that is no checkpoint")
    with pytest.raises(st.FormatError, match="not a checkpoint"):
        st.open_checkpoint(path)
    with pytest.raises(FileNotFoundError):
        st.open_checkpoint(tmp_path / "absent")


def test_close_and_copy(files: dict[str, Path]) -> None:
    ckpt = st.open_checkpoint(files["safetensors"])
    kept = ckpt["w"]
    ckpt.close()
    ckpt.close()
    assert kept == VALUES
    with pytest.raises(st.FormatError, match="closed"):
        ckpt["w"]
    copied = st.open_checkpoint(files["safetensors"], copy=True)["w"]
    assert copied == VALUES and not copied.shares_storage(
        st.open_checkpoint(files["safetensors"])["w"]
    )


def test_quantized_gguf_through_the_door(files: dict[str, Path]) -> None:
    expected = write_gguf(files["gguf"])
    with st.open_checkpoint(files["gguf"]) as ckpt:
        info = ckpt.info("q")
        assert info.dtype == "Q4_K" and info.shape == (4, 256) and info.byte_len == 4 * 144
        assert ckpt.readable("q")
        values = ckpt["q"]
        assert values.dtype is st.DType.F32
        assert np.array_equal(values.numpy().view(np.uint32), expected.view(np.uint32))
        options = st.TensorInspectionOptions(max_samples=100, strategy="spread")
        assert ckpt.inspect("q", options) == values.inspect(options)
        assert ckpt.metadata["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-05))
        shown = ckpt.display_metadata()
        assert repr(shown["llama.attention.layer_norm_rms_epsilon"]) == "1e-05"
        assert [repr(v) for v in shown["scales"]] == ["0.1", "0.2"]


def test_the_command_line_shows_quantized_statistics_and_short_floats(
    files: dict[str, Path],
) -> None:
    write_gguf(files["gguf"])
    result = subprocess.run(
        [STRIDED, "inspect", str(files["gguf"]), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    rows = {row["name"]: row for row in document["tensors"]}
    assert (
        rows["q"]["dtype"] == "Q4_K"
        and rows["q"]["min"] is not None
        and rows["q"]["sampled"] == 1024
    )
    assert '"llama.attention.layer_norm_rms_epsilon": 1e-05' in result.stdout
    table = subprocess.run(
        [STRIDED, "inspect", str(files["gguf"])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "llama.attention.layer_norm_rms_epsilon: 1e-05" in table.stdout


def test_long_metadata_arrays_are_summarized_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(1000)])
    writer.add_tensor("plain", VALUES.numpy().copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    short = json.loads(
        subprocess.run(
            [STRIDED, "inspect", str(path), "--json"], capture_output=True, text=True, check=True
        ).stdout
    )
    assert short["metadata"]["tokenizer.ggml.tokens"]["length"] == 1000
    assert short["metadata"]["tokenizer.ggml.tokens"]["first"][:2] == ["tok0", "tok1"]
    full = json.loads(
        subprocess.run(
            [STRIDED, "inspect", str(path), "--json", "--full-metadata"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert len(full["metadata"]["tokenizer.ggml.tokens"]) == 1000


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_through_the_door(tmp_path: Path, save: object) -> None:
    path = tmp_path / "model.safetensors"  # the name lies; the bytes decide
    arrays = {"a": np.arange(6, dtype=np.int16).reshape(2, 3), "b.c": np.float32(2.5)}
    with open(path, "wb") as file:
        save(file, **arrays)  # type: ignore[operator]
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.format == "npz" and list(ckpt) == ["a", "b.c"]
        assert ckpt.info("a") == st.TensorInfo("a", "I16", st.Shape((2, 3)), 12)
        for name, array in arrays.items():
            assert ckpt[name] == st.Tensor.from_numpy(array)


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_pytorch_through_the_door(tmp_path: Path, zipped: bool) -> None:
    path = tmp_path / "model.safetensors"  # the name lies; the bytes decide
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    state = {"state_dict": {"w": weight, "tied": weight, "ids": torch.arange(5)}, "epoch": 3}
    torch.save(state, path, _use_new_zipfile_serialization=zipped)
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.format == "pytorch"
        assert list(ckpt) == ["state_dict.w", "state_dict.tied", "state_dict.ids"]
        assert ckpt.metadata == {"epoch": 3}
        assert ckpt.info("state_dict.w") == st.TensorInfo(
            "state_dict.w", "F32", st.Shape((3, 4)), 48
        )
        assert ckpt["state_dict.w"].tolist() == weight.tolist()
        assert ckpt["state_dict.w"].shares_storage(ckpt["state_dict.tied"])
        assert ckpt["state_dict.ids"].dtype is st.DType.I64
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(
        json.dumps(
            {
                "weight_map": {
                    n: path.name for n in ["state_dict.w", "state_dict.tied", "state_dict.ids"]
                }
            }
        )
    )
    with st.open_checkpoint(index) as ckpt:
        assert ckpt.format == "pytorch" and len(ckpt) == 3
