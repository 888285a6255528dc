"""View creation and zero-copy construction, against NumPy and PyTorch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

import strided as st

from ._harness import Row, optional


def rows() -> Iterator[Row]:
    torch = optional("torch")
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
