"""Merged checkpoints behind the reader protocol, and the memory a merged checkpoint
written as GGUF holds: one merged tensor at a time, measured in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import strided as st
from strided.io._reader import Reader
from strided.jobs._merge import _MergeReader

_SIDE = 2048  # each weight is 2048 x 2048 F32: 16 MiB
_COUNT = 3


def _write_model(folder: Path) -> None:
    """A base of ``_COUNT`` large F32 weights, a rank-4 adapter changing every one of
    them, and a second base for ``merge_linear``."""
    rng = np.random.default_rng(11)
    for stem in ("base", "other"):
        st.save_safetensors(
            str(folder / f"{stem}.safetensors"),
            {
                f"layers.{i}.weight": st.Tensor.from_numpy(
                    rng.standard_normal((_SIDE, _SIDE), np.float32)
                )
                for i in range(_COUNT)
            },
            {"source": stem},
        )
    adapter = folder / "ad"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8})
    )
    factors = {}
    for i in range(_COUNT):
        factors[f"base_model.model.layers.{i}.lora_A.weight"] = rng.standard_normal(
            (4, _SIDE), np.float32
        )
        factors[f"base_model.model.layers.{i}.lora_B.weight"] = rng.standard_normal(
            (_SIDE, 4), np.float32
        )
    st.save_safetensors(
        str(adapter / "adapter_model.safetensors"),
        {name: st.Tensor.from_numpy(value) for name, value in factors.items()},
    )


_CHILD = """
import sys, tracemalloc
import strided as st
import strided.jobs._save, strided.jobs._merge, strided.jobs._gguf_export, strided.io.gguf
folder, kind, writer, dtype = sys.argv[1:5]
dtype = None if dtype == "-" else dtype
if kind == "lora":
    merged = st.merge_lora(folder + "/base.safetensors", folder + "/ad")
else:
    merged = st.merge_linear(
        [folder + "/base.safetensors", folder + "/other.safetensors"], ["0.25", "0.75"]
    )
tracemalloc.start()  # NumPy's buffers are traced; the mapped base files are not
with merged:
    if writer == "save":
        st.save(folder + "/out.gguf", merged, dtype=dtype, overwrite=True)
    else:
        st.save_gguf(folder + "/out.gguf", merged, types=dtype)
print(tracemalloc.get_traced_memory()[1])
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("merged")
    _write_model(folder)
    return folder


@pytest.mark.parametrize(
    ("kind", "writer", "dtype"),
    [
        ("lora", "save", "-"),
        ("lora", "save", "F16"),
        ("lora", "save", "Q8_0"),
        ("lora", "save_gguf", "-"),
        ("lora", "save_gguf", "F16"),
        ("linear", "save", "F16"),
    ],
)
def test_a_merged_checkpoint_written_as_gguf_holds_one_merged_tensor_at_a_time(
    model: Path, kind: str, writer: str, dtype: str
) -> None:
    """Peak traced memory of the write, in a child: at most 1.5 x the largest tensor
    plus 8 MiB (bounded chunks, kernel blocks), where holding two merged tensors at once
    (the previous one still cached or referenced while the next is computed) needs at
    least 2 x. The file written holds the merged values (gguf's own reader)."""
    found = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), kind, writer, dtype],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    peak = int(found.stdout.split()[-1])
    largest = _SIDE * _SIDE * 4
    assert peak <= largest * 3 // 2 + (8 << 20), (peak >> 20, largest >> 20)
    if dtype == "Q8_0":
        return  # the values are those of the quantizer, checked in test_quantize
    sources = [str(model / "base.safetensors")]
    if kind == "lora":
        merged = st.merge_lora(sources[0], str(model / "ad"))
    else:
        merged = st.merge_linear([*sources, str(model / "other.safetensors")], ["0.25", "0.75"])
    reader = gguf.GGUFReader(str(model / "out.gguf"))
    written = {tensor.name: np.asarray(tensor.data) for tensor in reader.tensors}
    with merged:
        assert list(written) == list(merged)
        for name in merged:
            expected = merged[name].numpy()
            if dtype == "F16":
                expected = expected.astype(np.float16)  # round to nearest even, as convert
            assert written[name].dtype == expected.dtype
            assert np.array_equal(written[name].view(np.uint8), expected.view(np.uint8))


def test_a_merged_checkpoint_speaks_the_reader_protocol(model: Path) -> None:
    """The merge is a Reader like every format's: its facts, metadata and inspection
    are the merged tensors' own, it names no imports and no unreadable members, and a
    closed merge refuses to be read or written (FormatError)."""
    assert issubclass(_MergeReader, Reader)
    base = str(model / "base.safetensors")
    with st.open_checkpoint(base) as opened:
        expected_metadata = opened.metadata
        infos = {name: opened.info(name) for name in opened}
    merged = st.merge_lora(base, str(model / "ad"))
    assert merged.format == "merged" and merged.path == base
    assert merged.metadata == expected_metadata == {"source": "base"}
    assert {name: merged.info(name) for name in merged} == infos
    assert merged.imports == () and merged.unreadable == {}
    options = st.TensorInspectionOptions(max_samples=7, strategy="spread")
    tensor = merged["layers.1.weight"]
    assert merged.inspect("layers.1.weight", options) == tensor.inspect(options)
    merged.close()
    with pytest.raises(st.FormatError, match="closed"):
        merged["layers.0.weight"]
    with pytest.raises(st.FormatError, match="closed"):
        st.save(str(model / "closed.safetensors"), merged)
    assert tensor.numpy().shape == (_SIDE, _SIDE)  # tensors already read stay valid
