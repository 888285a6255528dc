"""Checkpoints whose loading runs code, written by the tests for ``strided scan``.

Every payload only touches a sentinel file the test names (``touch SENTINEL`` or
``open(SENTINEL, "w")``). Writing them runs nothing: ``pickle`` only records what each
``__reduce__`` names. They are loaded only in a child process (``python -m
tests.payloads LOADER PATH``), by the loader that would run them: ``torch.load(path,
weights_only=False)``, ``np.load(path, allow_pickle=True)`` (every member read), or
``dcp_to_torch_save`` for a distributed checkpoint.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


class Call:
    """Pickles as ``function(*args)``: what unpickling it runs."""

    def __init__(self, function: Callable[..., Any], *args: object) -> None:
        self.function = function
        self.args = args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[object, ...]]:
        return self.function, self.args


def payloads(sentinel: Path) -> dict[str, tuple[Call, str]]:
    """Each payload touching ``sentinel``, and the global its pickle names."""
    import torch.jit.unsupported_tensor_ops as unsupported
    import torch.utils.collect_env as collect_env

    touch = f"touch {sentinel}"
    create = f"open({str(sentinel)!r}, 'w').close()"
    return {
        "system": (Call(os.system, touch), f"{os.system.__module__}.system"),
        "open": (Call(open, str(sentinel), "w"), f"{open.__module__}.open"),  # io.open
        "exec": (Call(exec, create), "builtins.exec"),
        "collect_env": (Call(collect_env.run, touch), "torch.utils.collect_env.run"),
        "exec_wrapper": (
            Call(unsupported.execWrapper, create, {}, {}),
            "torch.jit.unsupported_tensor_ops.execWrapper",
        ),
    }


def torch_file(path: Path, payload: Call) -> Path:
    """A ``torch.save`` zip whose state dict also holds ``payload``."""
    import torch

    torch.save({"w": torch.arange(4.0), "extra": payload}, path)
    return path


def bare_pickle(path: Path, payload: Call, protocol: int = 4) -> Path:
    """A file that is one pickle (``.pkl``, ``.pickle``, a ``.bin``)."""
    path.write_bytes(pickle.dumps({"extra": payload}, protocol=protocol))
    return path


def npz_file(path: Path, payload: Call, compress: bool) -> Path:
    """An ``.npz`` with a plain member and an object-array member holding ``payload``."""
    save = np.savez_compressed if compress else np.savez
    save(path, w=np.arange(3.0), extra=np.array([payload, 1], dtype=object))
    return path


def npy_file(path: Path, payload: Call) -> Path:
    """An object-array ``.npy`` holding ``payload``."""
    np.save(path, np.array([payload], dtype=object), allow_pickle=True)
    return path


def dcp_item(folder: Path, payload: Call) -> Path:
    """A distributed checkpoint with a tensor and a ``BYTE_IO`` item ``extra`` holding
    ``payload`` (laid out as DCP's writer lays it out, by ``dcpcraft``)."""
    import torch

    from tests import dcpcraft

    weight = torch.arange(6.0).reshape(2, 3)
    return dcpcraft.craft(folder, {"w": (weight, [((0, 0), (2, 3))])}, {"extra": payload}, 1)


def dcp_metadata(folder: Path, source: Path, payload: Call) -> Path:
    """A copy of the DCP folder ``source`` whose ``.metadata`` is a pickle of ``payload``."""
    shutil.copytree(source, folder)
    (folder / ".metadata").write_bytes(pickle.dumps(payload, protocol=4))
    return folder


def torchscript_constants(path: Path, source: Path, sentinel: Path) -> Path:
    """A copy of the TorchScript archive ``source`` whose ``constants.pkl`` names
    ``posix.system`` (torch.jit.load reads it with its own unpickler, so this one is not
    run; it proves the member is scanned)."""
    touch = pickle.dumps(Call(os.system, f"touch {sentinel}"), protocol=2)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename.endswith("/constants.pkl"):
                data = touch
            new.writestr(info, data)
    return path


def _load(loader: str, path: str) -> None:
    """Load ``path`` the way ``loader`` names (the child side); errors are ignored:
    what matters is whether the payload ran."""
    warnings.simplefilter("ignore")
    try:
        if loader == "torch":
            import torch

            torch.load(path, weights_only=False, map_location="cpu")
        elif loader == "numpy":
            loaded = np.load(path, allow_pickle=True)
            if hasattr(loaded, "files"):
                for name in loaded.files:
                    loaded[name]
        else:
            from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

            dcp_to_torch_save(path, io.BytesIO())
    except Exception as error:  # the payload has run (or not) by now
        print(f"{type(error).__name__}: {error}"[:200], file=sys.stderr)


if __name__ == "__main__":
    _load(sys.argv[1], sys.argv[2])
