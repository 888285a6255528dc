"""Exact JSON text in and out, against ``json.dumps(a.tolist())`` / ``json.loads`` + ``np.array``.

Throughput is in values per second (the harness prints G; 0.05 G = 50 M values/s). The
references are neither typed nor shortest for F32 (``tolist`` widens to F64 digits),
nor strict; strided's rows are exact and validate every entry.

The large ``to_json`` row compares with ``orjson.dumps(array, OPT_SERIALIZE_NUMPY)``: the
same F32 values written by C code as shortest F32 digits, but as JSON numbers (no quotes,
no dtype or shape, ``null`` for NaN and infinities). Peak memory (tracemalloc) of both
is printed first, against the size of strided's text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, optional, peak_bytes

COUNT = 1_000_000


def rows() -> Iterator[Row]:
    rng = np.random.default_rng(0)
    arrays = {
        "F32": rng.standard_normal(COUNT).astype(np.float32),
        "I64": rng.integers(-(2**63), 2**63 - 1, COUNT, dtype=np.int64),
    }
    for name, array in arrays.items():
        t = st.Tensor.from_numpy(array)
        text = t.to_json()
        reference = json.dumps(array.tolist())
        yield Row(
            f"to_json {name} 1M",
            t.to_json,
            {"json.dumps(tolist)": lambda array=array: json.dumps(array.tolist())},
            unit="values",
            scale=COUNT,
        )
        yield Row(
            f"from_json {name} 1M",
            lambda text=text: st.Tensor.from_json(text),
            {
                "json.loads+np.array": lambda reference=reference, dtype=array.dtype: np.array(
                    json.loads(reference), dtype=dtype
                )
            },
            unit="values",
            scale=COUNT,
        )
    bf16 = st.Tensor.from_numpy(arrays["F32"]).convert(st.DType.BF16)
    wide = bf16.numpy().astype(np.float32)
    yield Row(
        "to_json BF16 1M",
        bf16.to_json,
        {"json.dumps(tolist)": lambda: json.dumps(wide.tolist())},
        unit="values",
        scale=COUNT,
    )
    raw = bytes(10**8)  # zero pages, shared without copying: printing must not read them
    huge = st.Tensor.from_le_bytes(st.DType.U8, [10**4, 10**4], raw)
    as_numpy = np.frombuffer(raw, dtype=np.uint8).reshape(10**4, 10**4)
    yield Row("repr U8 [10000, 10000]", lambda: repr(huge), {"numpy": lambda: repr(as_numpy)})

    yield from _large_to_json()


def _large_to_json() -> Iterator[Row]:
    orjson: Any = optional("orjson")
    array = np.random.default_rng(1).standard_normal((3000, 3900)).astype(np.float32)
    tensor = st.Tensor.from_numpy(array)
    label = f"to_json F32 11.7M ({array.nbytes / 2**20:.1f} MiB)"
    peak, text = peak_bytes(tensor.to_json)
    assert isinstance(text, str)
    line = f"peak memory, {label}: strided {peak / 2**20:.0f} MiB ({peak / len(text):.2f}x its text"
    references = {}
    if orjson is not None:

        def reference() -> object:
            return orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY)

        theirs, raw = peak_bytes(reference)
        assert isinstance(raw, bytes)
        line += f" of {len(text) / 2**20:.0f} MiB) | orjson {theirs / 2**20:.0f} MiB"
        references["orjson.dumps(array)"] = reference
    else:
        line += ")"
    print(line, flush=True)
    del text
    yield Row(label, tensor.to_json, references)
