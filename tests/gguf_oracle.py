"""What the reference ``gguf`` package sees in a GGUF file, for comparison with strided.

``read_kvs`` gives the key/values in file order as (key, type text, value), the type
text spelled as ``GGUFFile.metadata_types`` spells it (``UINT32``, ``ARRAY[STRING]``);
``read_tensors`` gives name -> (ggml type name, row-major shape, stored bytes);
``scale_overflows`` says which blocks ``gguf.quants.quantize`` stores with an infinite
F16 scale (a block strided refuses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

__all__ = ["F16_FIELDS", "read_kvs", "read_tensors", "scale_overflows", "write_reference"]

# Byte offsets of each block type's F16 fields (scale d; Q4_1/Q5_1's minimum m too).
F16_FIELDS = {
    "Q8_0": (0,), "Q4_0": (0,), "Q5_0": (0,), "Q4_1": (0, 2), "Q5_1": (0, 2),
    "TQ1_0": (52,), "TQ2_0": (64,), "MXFP4": (),
}  # fmt: skip


def scale_overflows(blocks: np.ndarray, kind: str, n_rows: int) -> np.ndarray:
    """(n_rows, blocks per row) bool: where the reference's bytes ``blocks`` (a
    quantized tensor of ``n_rows`` rows) store an infinite or NaN F16 field."""
    fields = F16_FIELDS.get(kind, ())
    stored = np.ascontiguousarray(blocks).view(np.uint8).reshape(n_rows, -1)
    width = GGML_QUANT_SIZES[GGMLQuantizationType[kind]][1] if fields else 1
    per_block = stored.reshape(n_rows, -1, width)
    found = np.zeros(per_block.shape[:2], dtype=bool)
    for at in fields:
        bits = per_block[:, :, at].astype(np.uint16) | (
            per_block[:, :, at + 1].astype(np.uint16) << 8
        )
        found |= (bits & 0x7FFF) >= 0x7C00
    return found


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
