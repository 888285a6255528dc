"""Whole pickled models (``torch.save(model)``): strided's lenient open against ``torch.load``.

Two models are saved to a temporary folder before timing: a ~100 MiB one (24 linear
layers of 1024 x 1024 in a ModuleList, a LayerNorm, a buffer, an output layer tied to
the first) and one of 1,000 small blocks (3,000 modules: the pickle dominates). Each
timed call opens the file and touches every tensor of the state dict (one element of
each, or NumPy's ``max`` over each, the same kernel for both sides). strided opens with
``lenient=True`` (nothing is imported or run); the reference is
``torch.load(weights_only=False, mmap=True)`` followed by ``model.state_dict()``, which
imports the classes and runs the pickle. PyTorch runs with 2 threads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from strided.io.torch._pytorch import open_pytorch

from ._harness import Row, optional, touched

_LAYERS = 24  # of 1024 x 1024 F32 = 4 MiB each
_BLOCKS = 1000
_MIB = 1 << 20


def _strided(path: str, full: bool) -> Callable[[], object]:
    def run() -> object:
        opened = open_pytorch(path, lenient=True)
        return touched((opened.get(name).numpy() for name in opened), full)

    return run


def _torch(torch: Any, path: str, full: bool) -> Callable[[], object]:
    def run() -> object:
        model = torch.load(path, weights_only=False, map_location="cpu", mmap=True)
        return touched((tensor.detach().numpy() for tensor in model.state_dict().values()), full)

    return run


def _models(torch: Any) -> dict[str, Any]:
    """The two models, built of torch's own classes (a bare ``nn.Module`` holds the
    parts), so ``torch.load`` can import every class the pickles name."""
    nn = torch.nn
    big = nn.Module()
    big.layers = nn.ModuleList([nn.Linear(1024, 1024) for _ in range(_LAYERS)])
    big.norm = nn.LayerNorm(1024)
    big.register_buffer("steps", torch.arange(16))
    big.out = nn.Linear(1024, 1024, bias=False)
    big.out.weight = big.layers[0].weight
    many = nn.Module()
    many.blocks = nn.ModuleList(
        nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.ReLU()) for _ in range(_BLOCKS)
    )
    return {"big": big, "many": many}


def rows() -> Iterator[Row]:
    torch: Any = optional("torch")
    if torch is None:
        print("PyTorch is not installed: nothing to compare with (and no file to read)")
        return
    torch.set_num_threads(2)
    torch.manual_seed(0)
    folder = tempfile.mkdtemp(prefix="strided-bench-")
    try:
        paths = {}
        for name, model in _models(torch).items():
            paths[name] = os.path.join(folder, f"{name}.pt")
            torch.save(model, paths[name])
        size = os.path.getsize(paths["big"]) // _MIB
        for full, what in ((False, "1 element of each"), (True, "full pass over each")):
            yield Row(
                f"whole model {size} MiB, lenient: open + {what}",
                _strided(paths["big"], full),
                {"torch.load(weights_only=False, mmap)": _torch(torch, paths["big"], full)},
            )
        yield Row(
            f"whole model of {3 * _BLOCKS} modules, lenient: open + 1 element",
            _strided(paths["many"], False),
            {"torch.load(weights_only=False, mmap)": _torch(torch, paths["many"], False)},
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
