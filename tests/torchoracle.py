"""torch.load as the oracle, in a child process, for files the tests wrote themselves.

``Oracle`` starts one child (torch is imported once) that loads each path it is sent with
``torch.load(path, weights_only=..., map_location="cpu")`` and answers with
``flatten(value, stem)``: the value named the way strided names checkpoints, ``{name:
entry}`` in walk order, where a tensor (or a NumPy array) is ``("tensor", dtype name,
shape, little-endian row-major bytes)`` and a plain leaf ``("meta", value)``; or
``("twice", name)`` when two values get one name, or ``("refused", message)`` when
torch.load fails. ``flatten`` is written from what the objects are (``vars`` of a
Namespace, ``str`` of a key, a complex, a path, a device, a dtype; sets sorted by their
items' text), not from strided's code; tests also call it on objects they hold.
"""

from __future__ import annotations

import argparse
import pathlib
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

TORCH_NAMES = {
    torch.bool: "BOOL", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.uint8: "U8", torch.uint16: "U16", torch.uint32: "U32",
    torch.uint64: "U64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float32: "F32", torch.float64: "F64", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2", torch.float8_e8m0fnu: "F8_E8M0",
}  # fmt: skip
NUMPY_NAMES = {
    "bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
    "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16",
    "bfloat16": "BF16", "float32": "F32", "float64": "F64", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
}  # fmt: skip


def array_entry(value: np.ndarray[Any, Any]) -> tuple[str, str, tuple[int, ...], bytes]:
    """A NumPy array as an entry: its bytes little-endian (swapped bit for bit), row-major."""
    if value.dtype.byteorder == ">":
        value = value.byteswap().view(value.dtype.newbyteorder("<"))
    return (
        "tensor",
        NUMPY_NAMES[value.dtype.name],
        value.shape,
        np.ascontiguousarray(value).tobytes(),
    )


def _tensor_entry(value: torch.Tensor) -> tuple[str, str, tuple[int, ...], bytes]:
    flat = value.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return ("tensor", TORCH_NAMES[value.dtype], tuple(value.shape), raw)


def _container(value: object) -> bool:
    kinds = (dict, list, tuple, set, frozenset, argparse.Namespace)
    return isinstance(value, kinds) and not isinstance(value, torch.Size)


def _children(value: Any) -> list[tuple[object, object]]:
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return [(key if type(key) is str else str(key), item) for key, item in value.items()]
    if isinstance(value, (set, frozenset)):
        return list(enumerate(sorted(value, key=str)))
    return list(enumerate(value))


def _leaf(value: object) -> tuple[Any, ...] | None:
    if isinstance(value, torch.Tensor):
        return _tensor_entry(value)
    if isinstance(value, np.ndarray):
        return array_entry(value)
    if isinstance(value, np.generic):
        kind = value.dtype.kind
        plain = bool(value) if kind == "b" else int(value) if kind in "iu" else float(value)  # type: ignore[arg-type]
        return ("meta", plain)
    if isinstance(value, np.dtype):
        return ("meta", value.name)
    if isinstance(value, torch.Size):
        return ("meta", list(value))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, complex, pathlib.PurePath)):
        return ("meta", str(value))
    if value is None or type(value) in (bool, int, float, str):
        return ("meta", value)
    return None  # bytes, bytearray: not reported


class _Twice(Exception):
    pass


def flatten(root: object, stem: str) -> Any:
    """``{name: entry}`` of ``root`` (see the module docstring), or ``("twice", name)``."""
    out: dict[str, tuple[Any, ...]] = {}

    def walk(value: object, name: str) -> None:
        if _container(value):
            for key, item in _children(value):
                walk(item, f"{name}.{key}" if name else str(key))
            return
        found = _leaf(value)
        if found is None:
            return
        if name in out:
            raise _Twice(name)
        out[name] = found

    try:
        walk(root, "" if _container(root) else stem)
    except _Twice as twice:
        return ("twice", str(twice))
    return out


def serve() -> None:
    """The child's loop: a path and a weights_only flag per line, a pickled answer each."""
    for line in sys.stdin.buffer:
        path, weights_only = line.decode().rstrip("\n").rsplit("\t", 1)
        try:
            loaded = torch.load(path, weights_only=weights_only == "1", map_location="cpu")
            answer = flatten(loaded, Path(path).stem)
        except Exception as exc:
            answer = ("refused", f"{type(exc).__name__}: {exc}"[:500])
        data = pickle.dumps(answer)
        sys.stdout.buffer.write(struct.pack("<Q", len(data)) + data)
        sys.stdout.buffer.flush()


class Oracle:
    """One child process answering ``load(path, weights_only)``."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        code = f"import sys; sys.path.insert(0, {root!r}); import tests.torchoracle as o; o.serve()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def load(self, path: Path, weights_only: bool) -> Any:
        """What torch.load gives for ``path``, flattened (or why it refused)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{path}\t{int(weights_only)}\n".encode())
        self.process.stdin.flush()
        size = struct.unpack("<Q", self.process.stdout.read(8))[0]
        # The child is this test suite's own code, answering about files the test wrote.
        return pickle.loads(self.process.stdout.read(size))

    def close(self) -> None:
        """End the child."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()
