"""Writing real distributed checkpoints with ``torch.distributed.checkpoint`` for the tests.

Run as a script in child processes, so torch's process groups and threads never live in
the test process:

* ``python dcpwrite.py single FOLDER [--opaque]``: one process, no process group;
* ``python dcpwrite.py rank RANK PORT FOLDER``: one of two ranks of a gloo group on
  127.0.0.1 saving FSDP2-sharded parameters (uneven splits: 7 rows over 2 ranks, 3
  rows, 1 row), their Adam state, DTensors split along dim 0 and dim 1 (odd sizes),
  a replicated one, a 0-d and an empty tensor, and non-tensor items.

Each also writes ``FOLDER.pt``, the reference consolidation
(``torch.distributed.checkpoint.format_utils.dcp_to_torch_save``).
``write_single`` and ``write_two_ranks`` start and join those children from a test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve()
_TIMEOUT = 240


class Opaque:
    """An object only its own code can rebuild (a non-tensor item that is not data)."""

    def __init__(self) -> None:
        self.value = 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run(commands: list[list[str]]) -> None:
    """Start every command, wait for all; any failure stops the others and raises."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    children = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for command in commands
    ]
    failures = []
    try:
        for child in children:
            output, _ = child.communicate(timeout=_TIMEOUT)
            if child.returncode:
                failures.append(output.decode(errors="replace")[-3000:])
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if failures:
        raise RuntimeError("a DCP writer failed:\n" + "\n".join(failures))


def write_single(folder: Path, opaque: bool = False) -> Path:
    """A one-process DCP folder (and ``folder.pt``, unless ``opaque``)."""
    extra = ["--opaque"] if opaque else []
    _run([[sys.executable, str(_HERE), "single", str(folder), *extra]])
    return folder


def write_two_ranks(folder: Path) -> Path:
    """A DCP folder written by two ranks of a gloo group (and ``folder.pt``)."""
    port = str(_free_port())
    _run([[sys.executable, str(_HERE), "rank", str(rank), port, str(folder)] for rank in (0, 1)])
    return folder


def _single(folder: str, opaque: bool) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    generator = torch.Generator().manual_seed(5)
    state = {
        "model": {
            "w": torch.randn(6, 4, generator=generator),
            "h": torch.randn(3, 5, generator=generator).to(torch.float16),
            "b": torch.randn(5, generator=generator).to(torch.bfloat16),
            "ids": torch.arange(-3, 4, dtype=torch.int64),
            "scale": torch.tensor(0.25, dtype=torch.float64),
            "empty": torch.zeros(0, 3),
            "mask": torch.tensor([True, False, True]),
        },
        "step": 11,
        "tag": "single",
        "cfg": {"lr": 0.5, "betas": (0.9, 0.95), "none": None},
    }
    if opaque:
        state["opaque"] = Opaque()
    dcp.save(state, checkpoint_id=folder)
    if not opaque:
        dcp_to_torch_save(folder, folder + ".pt")


def _rank(rank: int, port: str, folder: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.up = torch.nn.Linear(5, 7)  # 7 rows: 4 + 3
                self.down = torch.nn.Linear(7, 3, bias=False).to(torch.bfloat16)  # 2 + 1
                self.gate = torch.nn.Linear(7, 1, bias=False)  # 1 row: 1 + 0

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                hidden = self.up(x)
                return self.down(hidden.to(torch.bfloat16)).float().sum() + self.gate(hidden).sum()

        model = Model()
        for part in (model.up, model.down, model.gate, model):
            fully_shard(part, mesh=mesh)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        model(torch.randn(2, 5)).backward()
        optimizer.step()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        generator = torch.Generator().manual_seed(1)
        wide = torch.randn(5, 6, generator=generator).to(torch.float16)
        odd = torch.randn(3, 5, generator=generator)
        state = {
            "model": model_state,
            "optim": optimizer_state,
            "cols": distribute_tensor(wide, mesh, [Shard(1)]),  # 3 + 3 columns
            "odd_cols": distribute_tensor(odd, mesh, [Shard(1)]),  # 3 + 2 columns
            "ids": distribute_tensor(torch.arange(9, dtype=torch.int64), mesh, [Shard(0)]),
            "same": distribute_tensor(torch.full((3,), 2.0), mesh, [Replicate()]),
            "zero_d": torch.tensor(2.5),
            "empty": torch.zeros(0, 4),
            "step": 7,
            "name": "two ranks",
            "cfg": {"lr": 0.01, "betas": (0.9, 0.99), "layers": [1, 2, 3]},
        }
        dcp.save(state, checkpoint_id=folder)
        dist.barrier()
        if rank == 0:
            dcp_to_torch_save(folder, folder + ".pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "single":
        _single(sys.argv[2], "--opaque" in sys.argv[3:])
    else:
        _rank(int(sys.argv[2]), sys.argv[3], sys.argv[4])


def cached(base: Path, name: str, write: object) -> Path:
    """``write(base / name)`` once per test session (a marker file says it is done), so
    test modules share one folder instead of starting torch writers again."""
    folder = base / name
    done = base / f"{name}.done"
    if not done.exists():
        write(folder)  # type: ignore[operator]
        done.write_text("")
    return folder
