"""A 1 GiB distributed checkpoint written by two ranks: convert to Hugging Face safetensors,
and hash.

The checkpoint is written once, before anything is timed, by two processes of a gloo
group on 127.0.0.1 (``torch.distributed.checkpoint.save``): 14 FSDP2-sharded 4096 x 4096
F32 weights (split by rows across the ranks) and two tensor-parallel 4096 x 4096 F32
weights (split by columns), 1 GiB in all.

* ``convert``: ``strided convert FOLDER OUT --max-shard-size 500MB`` against what torch
  offers, ``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` then
  ``torch.load`` and ``safetensors.torch.save_file``. Each runs once in a fresh process,
  timed by the wall clock (interpreter and imports included), its peak anonymous
  memory (``RssAnon``, process tree) sampled every 2 ms.
* ``hash``: ``strided hash FOLDER`` (in this process) against ``hashlib.sha256`` over the
  ``.distcp`` files' bytes (the same bytes, plus the archives' few headers), both from
  the page cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from strided.cli import main

from ._harness import Row, format_seconds, optional, run_measured

_LAYERS = 14  # FSDP2 weights of 4096 x 4096 F32 (64 MiB each)
_COLUMNS = 2  # tensor-parallel weights of 4096 x 4096 F32, split by columns
_MIB = 1 << 20

_REFERENCE_CONVERT = """
import sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from safetensors.torch import save_file
folder, out = sys.argv[1], sys.argv[2]
dcp_to_torch_save(folder, out + ".pt")
state = torch.load(out + ".pt", weights_only=True)
flat = {}
pending = [("", state)]
while pending:
    prefix, node = pending.pop()
    for key, value in node.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            pending.append((name, value))
        elif isinstance(value, torch.Tensor):
            flat[name] = value.contiguous()
save_file(flat, out, metadata={"format": "pt"})
"""


def _write_rank(rank: int, port: str, folder: str) -> None:
    """One of the two ranks writing the checkpoint (run in a child process)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        with torch.device("meta"):
            model = torch.nn.Sequential(
                *[torch.nn.Linear(4096, 4096, bias=False) for _ in range(_LAYERS)]
            )
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device="cpu")
        generator = torch.Generator().manual_seed(rank)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.to_local().normal_(generator=generator)
        columns = {
            f"tp.{index}.weight": DTensor.from_local(
                torch.randn(4096, 2048, generator=generator), mesh, [Shard(1)]
            )
            for index in range(_COLUMNS)
        }
        dcp.save({"model": model.state_dict(), **columns, "step": 1000}, checkpoint_id=folder)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _write(folder: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "benchmarks.bench_dcp", "write"]
    children = [
        subprocess.Popen([*command, str(rank), port, folder], env=env, stderr=subprocess.DEVNULL)
        for rank in (0, 1)
    ]
    try:
        for child in children:
            if child.wait(timeout=1800):
                raise RuntimeError("a DCP writer failed")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def _measured(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak anonymous bytes of the process tree) of one run of a command."""
    found = run_measured(command)
    if found.returncode:
        raise RuntimeError(f"{command[:4]} failed")
    return found.seconds, found.peak


def _quiet(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return main(list(args))

    return run


def _hashlib(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(_MIB)
    view = memoryview(buffer)
    for path in paths:
        with open(path, "rb", buffering=0) as file:
            while count := file.readinto(buffer):
                digest.update(view[:count])
    return digest.hexdigest()


def rows() -> Iterator[Row]:
    if optional("torch") is None or optional("safetensors") is None:
        print("bench_dcp: needs torch and safetensors (skipped)")
        return
    folder = tempfile.mkdtemp(prefix="strided-bench-dcp-")
    try:
        checkpoint = os.path.join(folder, "ckpt")
        start = time.perf_counter()
        _write(checkpoint)
        files = sorted(Path(checkpoint).glob("*.distcp"))
        size = sum(path.stat().st_size for path in files)
        print(
            f"written by 2 ranks in {time.perf_counter() - start:.1f} s: "
            f"{size / _MIB:.0f} MiB in {len(files)} .distcp files",
            flush=True,
        )
        ours = [sys.executable, "-m", "strided", "convert", checkpoint]
        ours_seconds, ours_peak = _measured(
            [*ours, os.path.join(folder, "hf"), "--max-shard-size", "500MB"]
        )
        theirs_seconds, theirs_peak = _measured(
            [
                sys.executable,
                "-c",
                _REFERENCE_CONVERT,
                checkpoint,
                os.path.join(folder, "ref.safetensors"),
            ]
        )
        print(
            f"{'convert DCP 1 GiB -> HF safetensors (1 run)':<44} "
            f"strided {format_seconds(ours_seconds)} "
            f"peak {ours_peak / _MIB:.0f} MiB | dcp_to_torch_save + torch.load + save_file "
            f"{format_seconds(theirs_seconds)} peak {theirs_peak / _MIB:.0f} MiB "
            f"ratio {ours_seconds / theirs_seconds:6.2f}x",
            flush=True,
        )
        for name in ("hf", "ref.safetensors", "ref.safetensors.pt"):
            target = os.path.join(folder, name)
            shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.remove(target)
        hash_seconds, hash_peak = _measured([sys.executable, "-m", "strided", "hash", checkpoint])
        print(
            f"strided hash in a fresh process: {format_seconds(hash_seconds)}, "
            f"peak {hash_peak / _MIB:.0f} MiB"
        )
        hashing = {"hashlib.sha256 of the .distcp files": lambda: _hashlib(files)}
        yield Row("hash DCP 1 GiB, 1 job", _quiet("hash", checkpoint), hashing, "B", size)
        yield Row(
            "hash DCP 1 GiB, 2 jobs", _quiet("hash", checkpoint, "--jobs", "2"), hashing, "B", size
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__" and sys.argv[1:2] == ["write"]:
    _write_rank(int(sys.argv[2]), sys.argv[3], sys.argv[4])
