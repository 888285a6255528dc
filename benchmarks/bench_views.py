"""View creation and construction, against NumPy and PyTorch.

``st.tensor`` from nested Python lists is compared with ``numpy.array`` of the same lists
(setting the dtype); the peak memory it allocates (tracemalloc) is printed against the
result's size first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, peak_bytes, torch_like_numpy


def rows() -> Iterator[Row]:
    torch: Any = torch_like_numpy()
    array = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    t = st.Tensor.from_numpy(array)
    tt = torch.from_numpy(array.copy()) if torch else None

    def refs(numpy_fn, torch_fn):  # type: ignore[no-untyped-def]
        found = {"numpy": numpy_fn}
        if tt is not None:
            found["torch"] = torch_fn
        return found

    yield Row(
        "view t[1:3, ::2]", lambda: t[1:3, ::2], refs(lambda: array[1:3, ::2], lambda: tt[1:3, ::2])
    )
    yield Row(
        "view t.transpose()", lambda: t.transpose(), refs(lambda: array.transpose(), lambda: tt.t())
    )
    yield Row(
        "view t.reshape(32, 128)",
        lambda: t.reshape(32, 128),
        refs(lambda: array.reshape(32, 128), lambda: tt.reshape(32, 128)),
    )
    for label, size in (("1 KiB", 1 << 10), ("64 MiB", 64 << 20)):
        data = bytes(size)
        count = size // 4
        yield Row(
            f"from_le_bytes F32 {label} (bytes)",
            lambda data=data, count=count: st.Tensor.from_le_bytes(st.DType.F32, (count,), data),
            {"numpy": lambda data=data: np.frombuffer(data, dtype="<f4")},
        )

    yield from _nested_rows()


def _nested_rows() -> Iterator[Row]:
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((1000, 1000)).tolist()
    ints = rng.integers(-(2**31), 2**31, (1000, 1000)).tolist()
    cases = (("F64", floats, np.float64), ("F32", floats, np.float32), ("I32", ints, np.int32))
    for name, values, numpy_dtype in cases:
        peak, result = peak_bytes(lambda values=values, name=name: st.tensor(values, name))
        assert isinstance(result, st.Tensor)
        print(
            f"peak memory, tensor(1000x1000 list, {name}): {peak / 2**20:.1f} MiB, "
            f"{peak / result.byte_len:.2f}x the result",
            flush=True,
        )
        yield Row(
            f"tensor(1000x1000 list, {name})",
            lambda values=values, name=name: st.tensor(values, name),
            {"np.array": lambda values=values, dt=numpy_dtype: np.array(values, dtype=dt)},
        )
