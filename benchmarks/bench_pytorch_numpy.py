"""PyTorch checkpoints holding NumPy arrays: strided's reader against ``torch.load``.

``torch.load(weights_only=True)`` refuses these files; the reference is
``torch.load(weights_only=False)``, which runs NumPy's own unpickling (on files this
benchmark wrote). A 100 MiB dict of NumPy arrays (25 F32 arrays of 1024 x 1024) is
``torch.save``'d with the default protocol 2 (each array's bytes stored as latin-1
text, which both readers must copy) and with ``pickle_protocol=4`` (stored as bytes:
strided views them in the mapped file, zero-copy). Each timed call opens the file and
reads one element of every array. PyTorch runs with 2 threads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from strided.io.torch._pytorch import open_pytorch

from ._harness import Row, optional

_ARRAYS = 25  # of 1024 x 1024 F32 = 4 MiB each: 100 MiB in all
_MIB = 1 << 20


def _strided(path: str) -> Callable[[], object]:
    def run() -> object:
        opened = open_pytorch(path)
        return sum(float(opened.get(name).numpy().reshape(-1)[0]) for name in opened)

    return run


def _torch(torch: Any, path: str) -> Callable[[], object]:
    def run() -> object:
        loaded = torch.load(path, weights_only=False, map_location="cpu")
        return sum(float(array.reshape(-1)[0]) for array in loaded["arrays"].values())

    return run


def rows() -> Iterator[Row]:
    torch: Any = optional("torch")
    if torch is None:
        print("PyTorch is not installed: nothing to compare with (and no file to write)")
        return
    torch.set_num_threads(2)
    folder = tempfile.mkdtemp(prefix="strided-bench-")
    try:
        generator = np.random.default_rng(0)
        value = {
            "arrays": {
                f"a{index}": generator.standard_normal((1024, 1024), dtype=np.float32)
                for index in range(_ARRAYS)
            },
            "step": np.int64(1000),
        }
        for protocol in (2, 4):
            path = os.path.join(folder, f"numpy-{protocol}.pt")
            torch.save(value, path, pickle_protocol=protocol)
            size = os.path.getsize(path) // _MIB
            yield Row(
                f"NumPy arrays, protocol {protocol}, {size} MiB: open + 1 element of each",
                _strided(path),
                {"torch.load(weights_only=False)": _torch(torch, path)},
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
