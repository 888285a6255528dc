"""PyTorch checkpoints: strided's pickle-free reader against ``torch.load``.

A ~200 MiB ``torch.save`` checkpoint (50 F32 tensors of 1024 x 1024, zip format, and the
same in the legacy format) and one of 20,000 small tensors (where the pickle dominates)
are written to a temporary folder before timing. Each timed call opens the file and
touches every tensor: one element of each, or a full pass (NumPy's ``max`` over each
tensor's elements, the same kernel for both sides, so the rows compare loading only).
References: ``torch.load(weights_only=True)`` and, for the zip format,
``torch.load(mmap=True, weights_only=True)``. PyTorch runs with 2 threads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from strided.io.torch._pytorch import open_pytorch

from ._harness import Row, optional, touched

_TENSORS = 50  # of 1024 x 1024 F32 = 4 MiB each: 200 MiB in all
_SMALL = 20_000
_MIB = 1 << 20


def _strided(path: str, full: bool) -> Callable[[], object]:
    def run() -> object:
        opened = open_pytorch(path)
        return touched((opened.get(name).numpy() for name in opened), full)

    return run


def _torch(torch: Any, path: str, full: bool, mmap: bool) -> Callable[[], object]:
    def run() -> object:
        loaded = torch.load(path, weights_only=True, map_location="cpu", mmap=mmap)
        return touched((tensor.numpy() for tensor in loaded.values()), full)

    return run


def _references(torch: Any, path: str, full: bool, zipped: bool) -> dict[str, Any]:
    if torch is None:
        return {}
    found = {"torch.load": _torch(torch, path, full, mmap=False)}
    if zipped:
        found["torch.load mmap"] = _torch(torch, path, full, mmap=True)
    return found


def rows() -> Iterator[Row]:
    torch: Any = optional("torch")
    if torch is None:
        print("PyTorch is not installed: nothing to compare with (and no file to read)")
        return
    torch.set_num_threads(2)
    folder = tempfile.mkdtemp(prefix="strided-bench-")
    try:
        generator = torch.Generator().manual_seed(0)
        big = {
            f"layers.{i}.weight": torch.randn(1024, 1024, generator=generator)
            for i in range(_TENSORS)
        }
        small = {f"blocks.{i}.bias": torch.full((16,), float(i)) for i in range(_SMALL)}
        paths = {
            "zip": os.path.join(folder, "big.pt"),
            "legacy": os.path.join(folder, "big-legacy.pt"),
            "small": os.path.join(folder, "small.pt"),
        }
        torch.save(big, paths["zip"])
        torch.save(big, paths["legacy"], _use_new_zipfile_serialization=False)
        torch.save(small, paths["small"])
        del big, small
        size = os.path.getsize(paths["zip"]) // _MIB
        for fmt in ("zip", "legacy"):
            path, zipped = paths[fmt], fmt == "zip"
            yield Row(
                f"{fmt} {size} MiB: open + 1 element of each",
                _strided(path, full=False),
                _references(torch, path, False, zipped),
            )
            yield Row(
                f"{fmt} {size} MiB: open + full pass over each",
                _strided(path, full=True),
                _references(torch, path, True, zipped),
            )
        yield Row(
            f"zip, {_SMALL} small tensors: open + 1 element",
            _strided(paths["small"], full=False),
            _references(torch, paths["small"], False, True),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
