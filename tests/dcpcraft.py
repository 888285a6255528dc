"""Distributed checkpoints laid out by hand with torch's own classes, and edits of real ones.

``craft`` writes a folder the way ``torch.distributed.checkpoint``'s file writer does --
each chunk or item a ``torch.save`` archive appended to a ``.distcp`` file, and a
``.metadata`` pickling DCP's own ``Metadata``, ``TensorStorageMetadata``,
``MetadataIndex`` and ``_StorageInfo`` objects -- for layouts one process cannot ask DCP
for (a large tensor split by columns across files). ``load``/``save`` read and rewrite a
test-written ``.metadata`` so hostile variants can be made from real ones. Imported only
by tests that have torch.
"""

from __future__ import annotations

import io
import itertools
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (offsets, sizes)


def archive(value: object) -> bytes:
    """``torch.save(value)``'s bytes (a tensor is cloned: only its own storage is saved)."""
    buffer = io.BytesIO()
    torch.save(value.clone() if isinstance(value, torch.Tensor) else value, buffer)
    return buffer.getvalue()


def append(folder: Path, file_name: str, data: bytes) -> _StorageInfo:
    """Append ``data`` to ``folder/file_name``; the span it now occupies."""
    path = folder / file_name
    offset = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as handle:
        handle.write(data)
    return _StorageInfo(file_name, offset, len(data))


def craft(
    folder: Path,
    tensors: dict[str, tuple[torch.Tensor, Sequence[Box]]],
    items: dict[str, object] | None = None,
    files: int = 2,
) -> Path:
    """A DCP folder holding ``tensors`` (each cut into the given boxes, chunk ``i`` in
    file ``__{i % files}_0.distcp``) and the non-tensor ``items``."""
    folder.mkdir(parents=True)
    described: dict[str, Any] = {}
    storage: dict[MetadataIndex, _StorageInfo] = {}
    for name, (full, boxes) in tensors.items():
        chunks = []
        for index, (offsets, sizes) in enumerate(boxes):
            part = full[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))]
            span = append(folder, f"__{index % files}_0.distcp", archive(part))
            storage[MetadataIndex(name, offsets, index)] = span
            chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        described[name] = TensorStorageMetadata(
            TensorProperties(dtype=full.dtype), full.size(), chunks
        )
    for name, value in (items or {}).items():
        storage[MetadataIndex(name)] = append(folder, "__0_0.distcp", archive(value))
        described[name] = BytesStorageMetadata()
    save(folder, Metadata(described, storage_data=storage, version="1.0.0"))
    return folder


def load(folder: Path) -> Any:
    """The ``.metadata`` of a folder this test session wrote."""
    with open(folder / ".metadata", "rb") as handle:
        return pickle.load(handle)


def save(folder: Path, metadata: object) -> None:
    """Write ``metadata`` as ``.metadata`` (protocol 4, as DCP's writer does)."""
    with open(folder / ".metadata", "wb") as handle:
        pickle.dump(metadata, handle, protocol=4)


def rows(dims: Sequence[int], cuts: Sequence[int]) -> list[Box]:
    """Boxes splitting dim 0 at ``cuts`` (whole along the other dims)."""
    edges = [0, *cuts, dims[0]]
    rest = tuple(dims[1:])
    return [((a, *([0] * len(rest))), (b - a, *rest)) for a, b in itertools.pairwise(edges)]


def columns(dims: Sequence[int], cuts: Sequence[int]) -> list[Box]:
    """Boxes splitting dim 1 at ``cuts`` (of a rank-2 tensor)."""
    edges = [0, *cuts, dims[1]]
    return [((0, a), (dims[0], b - a)) for a, b in itertools.pairwise(edges)]
