"""What the command line reads: one interface over every file format strided knows.

A ``Source`` lists tensor names, describes each from the header alone (dtype name and
shape), and hands out zero-copy tensors; nothing here reads tensor data until asked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._dtype import DType
from ._errors import FormatError
from ._shape import Shape
from ._tensor import Tensor

__all__ = ["Entry", "Source", "open_source"]


@dataclass(frozen=True)
class Entry:
    """One tensor as its header describes it."""

    name: str
    dtype: str  # a strided dtype name, or a GGUF type name such as "Q8_0"
    shape: Shape
    byte_len: int
    readable: bool  # False for GGUF types that only dequantize can read


@dataclass
class Source:
    """An opened file (or sharded checkpoint) of one or more tensors."""

    path: str
    format: str
    entries: list[Entry]
    metadata: dict[str, Any] = field(default_factory=dict)
    _load: Any = None  # name -> Tensor

    def tensor(self, name: str) -> Tensor:
        """The tensor ``name`` (zero-copy where the format allows)."""
        return self._load(name)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)


def detect_format(path: str) -> str:
    """The format of ``path`` by its name: safetensors, gguf, npy or json."""
    lowered = path.lower()
    if os.path.isdir(path) or lowered.endswith((".safetensors", ".safetensors.index.json")):
        return "safetensors"
    for suffix in ("gguf", "npy", "json"):
        if lowered.endswith("." + suffix):
            return suffix
    raise FormatError(
        "unknown file type (expected .safetensors, .safetensors.index.json, a directory "
        "of shards, .gguf, .npy or .json)"
    )


def open_source(path: str) -> Source:
    """Open ``path`` by its format; reads headers only (JSON files are read whole)."""
    kind = detect_format(path)
    if kind == "safetensors":
        return _safetensors(path)
    if kind == "gguf":
        return _gguf(path)
    if kind == "npy":
        return _single(path, "npy", _load_npy(path))
    text = Path(path).read_bytes()
    return _single(path, "json", Tensor.from_json(text))


def _entry(name: str, tensor: Tensor) -> Entry:
    return Entry(name, tensor.dtype.name, tensor.shape, tensor.byte_len, True)


def _single(path: str, kind: str, tensor: Tensor) -> Source:
    name = Path(path).stem
    return Source(path, kind, [_entry(name, tensor)], {}, lambda _name: tensor)


def _load_npy(path: str) -> Tensor:
    from .io import load_npy

    return load_npy(path)


def _safetensors(path: str) -> Source:
    from .io import open_safetensors
    from .io._safetensors_header import DTYPE_BITS

    handle = open_safetensors(path)
    entries = []
    for name in handle.keys():
        dtype_name, shape = handle.info(name)
        bits = DTYPE_BITS[dtype_name][1]  # also sized for dtypes strided cannot hold (F4...)
        readable = dtype_name in _DTYPES
        entries.append(Entry(name, dtype_name, shape, shape.numel * bits // 8, readable))
    return Source(path, "safetensors", entries, dict(handle.metadata), handle.get)


def _gguf(path: str) -> Source:
    from .io import open_gguf
    from .io._ggml import DEQUANTIZABLE, GGML_TYPES, ZERO_COPY

    sizes = {kind.name: (kind.block_size, kind.block_bytes) for kind in GGML_TYPES.values()}
    handle = open_gguf(path)
    entries = []
    for name in handle.keys():
        type_name, shape = handle.info(name)
        block_size, block_bytes = sizes[type_name]
        byte_len = shape.numel // block_size * block_bytes
        # Only zero-copy types are sampled: a quantized tensor would be decoded whole.
        entries.append(Entry(name, type_name, shape, byte_len, type_name in ZERO_COPY))

    def load(name: str) -> Tensor:
        type_name, _shape = handle.info(name)
        return handle.get(name, dequantize=type_name in DEQUANTIZABLE)

    return Source(path, "gguf", entries, dict(handle.metadata), load)


_DTYPES = {dtype.name: dtype for dtype in DType}
