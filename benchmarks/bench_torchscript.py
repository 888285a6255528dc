"""TorchScript archives: strided's reader (code never run) against ``torch.jit.load``.

A scripted model of 24 blocks (a 1024 x 1024 F32 ``Linear`` and a ``LayerNorm`` each,
about 96 MiB) and a traced model of 400 small blocks (where data.pkl and the code
dominate) are saved with ``torch.jit.save`` to a temporary folder before timing. Each
timed call opens the archive and touches one element of every state-dict tensor.
Reference: ``torch.jit.load(path).state_dict()`` (which compiles the archive's code).
PyTorch runs with 2 threads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from strided.io.torch._torchscript import open_torchscript

from ._harness import Row, optional

_BIG_BLOCKS = 24
_SMALL_BLOCKS = 400
_MIB = 1 << 20


def _strided(path: str) -> Callable[[], object]:
    def run() -> object:
        opened = open_torchscript(path)
        return sum(float(opened.get(name).numpy().reshape(-1)[0]) for name in opened)

    return run


def _torch(torch: Any, path: str) -> Callable[[], object]:
    def run() -> object:
        state = torch.jit.load(path, map_location="cpu").state_dict()
        return sum(float(tensor.reshape(-1)[0]) for tensor in state.values())

    return run


def _model(torch: Any, blocks: int, width: int) -> Any:
    nn = torch.nn
    return nn.Sequential(
        *(nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width)) for _ in range(blocks))
    ).eval()


def rows() -> Iterator[Row]:
    torch: Any = optional("torch")
    if torch is None:
        print("PyTorch is not installed: nothing to compare with (and no file to read)")
        return
    torch.set_num_threads(2)
    folder = tempfile.mkdtemp(prefix="strided-bench-")
    try:
        torch.manual_seed(0)
        big, small = os.path.join(folder, "big.pt"), os.path.join(folder, "small.pt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.script/trace are deprecated
            torch.jit.script(_model(torch, _BIG_BLOCKS, 1024)).save(big)
            model = _model(torch, _SMALL_BLOCKS, 16)
            torch.jit.trace(model, torch.ones(2, 16)).save(small)
        size = os.path.getsize(big) // _MIB
        yield Row(
            f"scripted {size} MiB: open + 1 element of each",
            _strided(big),
            {"torch.jit.load": _torch(torch, big)},
        )
        yield Row(
            f"traced, {_SMALL_BLOCKS} blocks: open + 1 element of each",
            _strided(small),
            {"torch.jit.load": _torch(torch, small)},
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
