"""What the reference ``gguf`` package sees in a GGUF file, for comparison with strided.

``read_kvs`` gives the key/values in file order as (key, type text, value), the type
text spelled as ``GGUFFile.metadata_types`` spells it (``UINT32``, ``ARRAY[STRING]``);
``read_tensors`` gives name -> (ggml type name, row-major shape, stored bytes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

__all__ = ["read_kvs", "read_tensors", "write_reference"]


def read_kvs(path: Path | str) -> list[tuple[str, str, Any]]:
    reader = GGUFReader(str(path))
    found = []
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        kinds = [GGUFValueType(t).name for t in field.types]
        text = kinds[-1]
        for _ in kinds[:-1]:
            text = f"ARRAY[{text}]"
        found.append((field.name, text, field.contents()))
    return found


def read_tensors(path: Path | str) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    reader = GGUFReader(str(path))
    return {
        tensor.name: (
            tensor.tensor_type.name,
            tuple(int(d) for d in tensor.shape[::-1]),
            np.ascontiguousarray(tensor.data).tobytes(),
        )
        for tensor in reader.tensors
    }


def write_reference(
    path: Path,
    kvs: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]],
    tensors: dict[str, np.ndarray],
    raw_types: dict[str, Any] | None = None,
    split_max_tensors: int = 0,
) -> None:
    """A GGUF file (or split parts, ``split_max_tensors`` tensors per part) written by
    ``gguf.GGUFWriter``; ``raw_types`` name -> GGMLQuantizationType for stored blocks."""
    writer = GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    for key, value, kind, sub in kvs:
        writer.add_key_value(key, value, kind, sub)
    for name, array in tensors.items():
        raw = (raw_types or {}).get(name)
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
