"""GGUF quantization: every type strided writes, against ``gguf.quants.quantize``.

4M float32 values per type, as a (1024, 4096) array of normally distributed values
(seed 0), made before timing. strided's row is ``quantize(rows, TYPE, name)`` (the
kernel ``save_gguf`` and ``convert`` write through); the reference is
``gguf.quants.quantize(rows, GGMLQuantizationType.TYPE)`` on the same array. Both are
single-threaded NumPy code, warm (one untimed call first). Throughput is in values
(elements) per second.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from strided.io.gguf._quantize import quantize

from ._harness import Row, optional

_SHAPE = (1024, 4096)
_TYPES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4")


def _reference(quants: Any, rows: np.ndarray, kind: Any) -> Callable[[], object]:
    def run() -> object:
        # The reference warns on its own divisions by zero (log2 of a zero block).
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return quants.quantize(rows, kind)

    return run


def _ours(rows: np.ndarray, name: str) -> Callable[[], object]:
    return lambda: quantize(rows, name, "bench")


def rows() -> Iterator[Row]:
    gguf: Any = optional("gguf")
    if gguf is None:
        print("gguf is not installed: no reference to compare with")
        return
    import gguf.quants

    values = np.random.default_rng(0).standard_normal(_SHAPE, dtype=np.float32)
    for name in _TYPES:
        yield Row(
            f"quantize 4M elements, {name}",
            _ours(values, name),
            {"gguf.quants": _reference(gguf.quants, values, gguf.GGMLQuantizationType[name])},
            unit="elem",
            scale=values.size,
        )
