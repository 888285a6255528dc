"""GGUF dequantization: every block type strided decodes, against ``gguf.quants``.

One GGUF file holds a (1024, 4096) tensor of random blocks (4M values; random bytes
include NaN and infinite scales) of each type. strided's row is ``get(name,
dequantize=True)`` on the open file; the reference is ``gguf.quants.dequantize`` on the
same blocks, shaped as the ``gguf`` reader hands them out (one row of blocks per tensor
row). Both are warm: the first call (the reference builds its lattice tables then) is
not timed. Throughput is in values (elements) per second.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, optional

_SHAPE = (1024, 4096)
_TYPES = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_S",
    "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0",
    "TQ2_0", "MXFP4", "NVFP4",
)  # fmt: skip


def _reference(quants: Any, blocks: np.ndarray, kind: Any) -> Callable[[], object]:
    def run() -> object:
        with np.errstate(all="ignore"):
            return quants.dequantize(blocks, kind)

    return run


def _write(path: str, gguf: Any, blocks: dict[str, np.ndarray]) -> None:
    writer = gguf.GGUFWriter(path, "bench")
    for name, data in blocks.items():
        writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def rows() -> Iterator[Row]:
    gguf: Any = optional("gguf")
    if gguf is None:
        print("gguf is not installed: no reference to compare with")
        return
    from gguf.constants import GGML_QUANT_SIZES

    rng = np.random.default_rng(0)
    blocks = {}
    for name in _TYPES:
        block_size, block_bytes = GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        row_bytes = _SHAPE[1] // block_size * block_bytes
        blocks[name] = rng.integers(0, 256, (_SHAPE[0], row_bytes), dtype=np.uint8)
    numel = _SHAPE[0] * _SHAPE[1]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "quants.gguf")
        _write(path, gguf, blocks)
        with st.open_gguf(path) as handle:
            for name in _TYPES:
                kind = gguf.GGMLQuantizationType[name]
                yield Row(
                    f"dequantize {name} (1024, 4096)",
                    lambda name=name: handle.get(name, dequantize=True),
                    {"gguf.quants": _reference(gguf.quants, blocks[name], kind)},
                    unit="elem",
                    scale=numel,
                )
