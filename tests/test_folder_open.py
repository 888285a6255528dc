"""A folder holding exactly one checkpoint file opens as that file.

Model folders from the Hugging Face hub hold one weights file beside ``config.json``,
``tokenizer.json`` and friends; those JSON files are not checkpoints and do not count.
Each file is written by its format's own library (safetensors, gguf, torch, NumPy) and
the folder must give the tensors that library wrote, bit for bit.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import torch

import strided as st
from strided.cli import main
from tests.gguf_oracle import write_reference

ARRAYS = {
    "model.embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
    "model.norm.weight": np.array([1.5, -2.0, 0.25], dtype=np.float16),
}


def _safetensors(folder: Path) -> str:
    safetensors.numpy.save_file(ARRAYS, str(folder / "model.safetensors"))
    return "safetensors"


def _gguf(folder: Path) -> str:
    write_reference(folder / "model.gguf", [], ARRAYS)
    return "gguf"


def _torch(legacy: bool) -> Callable[[Path], str]:
    def write(folder: Path) -> str:
        state = {name: torch.from_numpy(array.copy()) for name, array in ARRAYS.items()}
        torch.save(state, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
        return "pytorch"

    return write


def _torchscript(folder: Path) -> str:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Parameter(torch.from_numpy(ARRAYS["model.embed.weight"]))
            self.norm = torch.nn.Parameter(torch.from_numpy(ARRAYS["model.norm.weight"]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    with warnings.catch_warnings():  # torch.jit.script is deprecated; its archives are real
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Net()), str(folder / "model.pt"))
    return "torchscript"


def _npz(folder: Path) -> str:
    np.savez(folder / "weights.npz", **ARRAYS)
    return "npz"


WRITERS = {
    "safetensors": _safetensors,
    "gguf": _gguf,
    "torch-zip": _torch(legacy=False),
    "torch-legacy": _torch(legacy=True),
    "npz": _npz,
}
TORCHSCRIPT_NAMES = {"embed": "model.embed.weight", "norm": "model.norm.weight"}


def _beside(folder: Path) -> None:
    """The non-checkpoint files a model folder holds."""
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {}}))
    (folder / "generation_config.json").write_text('  {"bos_token_id": 1}')
    (folder / "tokenizer.model").write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00")
    (folder / "README.md").write_text("# a model\n")


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_a_folder_with_one_checkpoint_opens_as_that_file(tmp_path: Path, fmt: str) -> None:
    kind = WRITERS[fmt](tmp_path)
    _beside(tmp_path)
    with st.open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.format == kind
        assert sorted(checkpoint) == sorted(ARRAYS)
        for name, array in ARRAYS.items():
            tensor = checkpoint[name].numpy()
            assert tensor.dtype == array.dtype and tensor.shape == array.shape
            assert tensor.tobytes() == array.tobytes()
    assert main(["hash", str(tmp_path)]) == 0


def test_a_torchscript_archive_alone_opens(tmp_path: Path) -> None:
    assert _torchscript(tmp_path) == "torchscript"
    _beside(tmp_path)
    with st.open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.format == "torchscript"
        assert sorted(checkpoint) == sorted(TORCHSCRIPT_NAMES)
        for name, source in TORCHSCRIPT_NAMES.items():
            assert checkpoint[name].numpy().tobytes() == ARRAYS[source].tobytes()


@pytest.mark.parametrize("fmt", ["torch-zip", "torch-legacy", "torchscript"])
def test_the_command_line_names_the_format_the_checkpoint_names(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TorchScript archive is ``"torchscript"``, not ``"pytorch"``: in ``format``, in
    inspect's header and ``--json``, and in scan's line and ``--json``."""
    kind = _torchscript(tmp_path) if fmt == "torchscript" else WRITERS[fmt](tmp_path)
    path = str(next(tmp_path.iterdir()))
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.format == kind
        assert repr(checkpoint) == f"Checkpoint({path!r}, format={kind!r}, 2 tensors)"
    capsys.readouterr()
    assert main(["inspect", path]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{path} ({kind})"
    assert main(["inspect", "--json", path]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == kind
    assert main(["scan", path]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: {kind}, ")
    assert main(["scan", "--json", path]) == 0
    assert [file["format"] for file in json.loads(capsys.readouterr().out)["files"]] == [kind]


def test_pytorch_shards_open_through_their_one_index(tmp_path: Path) -> None:
    weight_map = {}
    for number, (name, array) in enumerate(ARRAYS.items(), 1):
        shard = f"pytorch_model-{number:05d}-of-00002.bin"
        torch.save({name: torch.from_numpy(array.copy())}, tmp_path / shard)
        weight_map[name] = shard
    index = {"metadata": {"total_size": 54}, "weight_map": weight_map}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    _beside(tmp_path)
    with st.open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.format == "pytorch" and sorted(checkpoint) == sorted(ARRAYS)
        for name, array in ARRAYS.items():
            assert checkpoint[name].numpy().tobytes() == array.tobytes()


@pytest.mark.parametrize("fmt", ["npy", "json"])
def test_single_tensor_files_count_too(tmp_path: Path, fmt: str) -> None:
    array = ARRAYS["model.embed.weight"]
    if fmt == "npy":
        np.save(tmp_path / "w.npy", array)
    else:
        (tmp_path / "w.json").write_text(st.Tensor.from_numpy(array).to_json())
    _beside(tmp_path)
    with st.open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.format == fmt and list(checkpoint) == ["w"]
        assert checkpoint["w"].numpy().tobytes() == array.tobytes()


def test_two_checkpoint_files_are_named_not_guessed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _torch(legacy=False)(tmp_path)
    _npz(tmp_path)
    _beside(tmp_path)
    named = r"2 checkpoint files.*pytorch_model\.bin.*weights\.npz"
    with pytest.raises(st.FormatError, match=named):
        st.open_checkpoint(tmp_path)
    assert main(["inspect", str(tmp_path)]) == 1
    assert "open one of them" in capsys.readouterr().err


def test_a_folder_of_json_alone_is_no_checkpoint(tmp_path: Path) -> None:
    _beside(tmp_path)
    with pytest.raises(st.FormatError):
        st.open_checkpoint(tmp_path)


def test_shards_still_open_as_one_checkpoint(tmp_path: Path) -> None:
    first = dict(list(ARRAYS.items())[:1])
    second = dict(list(ARRAYS.items())[1:])
    safetensors.numpy.save_file(first, str(tmp_path / "model-00001-of-00002.safetensors"))
    safetensors.numpy.save_file(second, str(tmp_path / "model-00002-of-00002.safetensors"))
    _beside(tmp_path)
    with st.open_checkpoint(tmp_path) as checkpoint:
        assert checkpoint.format == "safetensors" and sorted(checkpoint) == sorted(ARRAYS)
