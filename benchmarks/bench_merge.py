"""Merging a LoRA adapter into a ~512 MiB BF16 base, and the exact kernel's own cost.

The base is synthesized: 16 linears of 4096 x 4096 BF16 (32 MiB each) in one
safetensors file, with an r=16 F32 adapter on every one (a PEFT folder written by hand
with PEFT's names). Whole merges run once each in a fresh process (interpreter and
imports included), timed there, with the CPU seconds of its process tree (workers
included, from ``RUSAGE_CHILDREN``: the steadier figure on a busy machine), while this
process samples the peak anonymous memory (``RssAnon``: heap, not pages of mapped files)
of it and its workers every 2 ms:

* strided: ``strided merge-lora BASE ADAPTER OUT`` (``--jobs 1`` and ``2``);
* strided from Python: ``st.save(OUT, st.merge_lora(BASE, ADAPTER), jobs=N)``, the
  command's own writer, which should cost what the command costs;
* PEFT: the modules built on the meta device and loaded from the file
  (``load_state_dict(assign=True)``), ``PeftModel.from_pretrained``,
  ``merge_and_unload`` and ``safetensors.torch.save_file``, on CPU.

The kernel rows compare the exact path (``W + s * (B @ A)`` correctly rounded into
BF16) with plain NumPy ``(W.astype(f32) + s * (B @ A)).astype(bf16)`` on one 2048 x
2048 weight, timed in this process by the harness.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
from collections.abc import Iterator

import numpy as np

import strided as st
from strided._core.dtype import DType
from strided._kernels.exact_affine import low_rank_update

from ._harness import Row, optional, run_measured

_LAYERS = 16
_SIZE = 4096
_RANK = 16
_MIB = 1 << 20

_PEFT = """
import sys, time
start = time.perf_counter()
import torch
from torch import nn
from peft import PeftModel
from safetensors.torch import load_file, save_file
base, adapter, out, layers, size = sys.argv[1:6]
class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(int(size), int(size), bias=False) for _ in range(int(layers))
        )
with torch.device("meta"):
    model = Stack()
model.load_state_dict(load_file(base), assign=True)
model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)
print(time.perf_counter() - start)
"""

_STRIDED = """
import sys, time
start = time.perf_counter()
from strided.cli import main
status = main(sys.argv[1:])
print(time.perf_counter() - start)
sys.exit(status)
"""

_SAVE = """
import sys, time
start = time.perf_counter()
import strided as st
base, adapter, out, jobs = sys.argv[1:5]
with st.merge_lora(base, adapter) as merged:
    st.save(out, merged, jobs=int(jobs))
print(time.perf_counter() - start)
"""


def _base(folder: str) -> tuple[str, str]:
    """The base file and the adapter folder, written once."""
    rng = np.random.default_rng(0)
    bf16 = DType.BF16.numpy
    tensors = {}
    lora = {}
    for i in range(_LAYERS):
        weight = (rng.standard_normal((_SIZE, _SIZE), dtype=np.float32) * 0.02).astype(bf16)
        tensors[f"layers.{i}.weight"] = st.Tensor.from_numpy(weight)
        prefix = f"base_model.model.layers.{i}"
        a = rng.standard_normal((_RANK, _SIZE), dtype=np.float32) * 0.01
        b = rng.standard_normal((_SIZE, _RANK), dtype=np.float32) * 0.01
        lora[f"{prefix}.lora_A.weight"] = st.Tensor.from_numpy(a)
        lora[f"{prefix}.lora_B.weight"] = st.Tensor.from_numpy(b)
    base = os.path.join(folder, "base.safetensors")
    st.save_safetensors(base, tensors, metadata={"format": "pt"})
    adapter = os.path.join(folder, "adapter")
    os.makedirs(adapter)
    st.save_safetensors(os.path.join(adapter, "adapter_model.safetensors"), lora)
    config = {"peft_type": "LORA", "r": _RANK, "lora_alpha": 32, "target_modules": r"layers\.\d+"}
    with open(os.path.join(adapter, "adapter_config.json"), "w") as handle:
        json.dump({**config, "task_type": None, "base_model_name_or_path": None}, handle)
    return base, adapter


def _run(command: list[str]) -> tuple[float, float, int]:
    """Seconds the child reports for its work, the CPU seconds of its process tree
    (user + system), and the tree's peak anonymous memory."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = run_measured(command)
    if found.returncode != 0:
        raise SystemExit(f"benchmark child failed: {command[:4]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(found.stdout.split()[-1]), cpu, found.peak


def rows() -> Iterator[Row]:
    folder = tempfile.mkdtemp(prefix="strided-bench-merge-")
    try:
        base, adapter = _base(folder)
        size = os.path.getsize(base) >> 20
        out = os.path.join(folder, "out.safetensors")
        results = {}
        for jobs in ("1", "2"):
            command = [sys.executable, "-c", _STRIDED, "merge-lora", base, adapter, out]
            results[f"strided merge-lora, {jobs} job(s)"] = _run([*command, "--jobs", jobs])
            os.remove(out)
            command = [sys.executable, "-c", _SAVE, base, adapter, out, jobs]
            results[f"st.save(merge_lora(...)), {jobs} job(s)"] = _run(command)
            os.remove(out)
        if optional("peft") is not None:
            reference = os.path.join(folder, "peft.safetensors")
            command = [sys.executable, "-c", _PEFT, base, adapter, reference]
            results["PEFT merge_and_unload + save_file"] = _run(
                [*command, str(_LAYERS), str(_SIZE)]
            )
        print(
            f"merge r={_RANK} adapter into {size} MiB BF16 base ({_LAYERS} x {_SIZE}^2), "
            "one run each in a fresh process:",
            flush=True,
        )
        for label, (seconds, cpu, peak) in results.items():
            print(
                f"  {label:<38} {seconds:7.2f} s (CPU {cpu:6.2f} s)  peak {peak / _MIB:5.0f} MiB",
                flush=True,
            )
        shutil.rmtree(folder, ignore_errors=True)
        yield from _kernel_rows()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kernel_rows() -> Iterator[Row]:
    rng = np.random.default_rng(1)
    side = 2048
    bf16 = DType.BF16.numpy
    weight = (rng.standard_normal((side, side), dtype=np.float32) * 0.02).astype(bf16)
    a = rng.standard_normal((_RANK, side), dtype=np.float32) * 0.01
    b = rng.standard_normal((side, _RANK), dtype=np.float32) * 0.01
    scale = 2.0

    def exact() -> object:
        return low_rank_update(weight, DType.BF16, b, a, DType.F32, scale, DType.BF16)

    def plain() -> object:
        return (weight.astype(np.float32) + np.float32(scale) * (b @ a)).astype(bf16)

    yield Row(
        f"W + s*(B @ A) {side}^2 BF16, r={_RANK}: exact",
        exact,
        {"NumPy F32 (rounds twice)": plain},
        "elem",
        side * side,
    )
