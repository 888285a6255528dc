"""Handing a 64 MiB F32 tensor to PyTorch and NumPy.

The reference for every row is what a user would write without the protocols:
``torch.from_numpy(t.numpy())`` (zero-copy over a read-only array; PyTorch warns that it
is not writable, and that warning is silenced here) and ``np.asarray`` of a plain array.
strided's default ``torch.from_dlpack(t)`` copies (64 MiB of memory traffic), so its
ratio against a zero-copy reference is the price of the copy; ``copy=False`` is the
like-for-like comparison.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, torch_like_numpy


def rows() -> Iterator[Row]:
    torch: Any = torch_like_numpy()
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    array = np.arange(16 << 20, dtype=np.float32)  # 64 MiB
    t = st.Tensor.from_numpy(array)
    small = st.Tensor.from_numpy(np.arange(16, dtype=np.float32))
    if torch is not None:
        for label, tensor in (("64 MiB", t), ("64 B", small)):
            reference = {
                "torch.from_numpy(t.numpy())": lambda x=tensor: torch.from_numpy(x.numpy())
            }
            yield Row(
                f"torch.from_dlpack(t) copy {label} F32",
                lambda x=tensor: torch.from_dlpack(x),
                reference,
            )
            yield Row(
                f"torch.from_dlpack copy=False {label} F32",
                lambda x=tensor: torch.from_dlpack(x.__dlpack__(copy=False, max_version=(1, 0))),
                reference,
            )
        yield Row(
            "torch.as_tensor(t) 64 MiB F32",
            lambda: torch.as_tensor(t),
            {"torch.as_tensor(ndarray copy)": lambda: torch.as_tensor(array.copy())},
        )
    yield Row(
        "np.asarray(t) 64 MiB F32", lambda: np.asarray(t), {"numpy": lambda: np.asarray(array)}
    )
    yield Row(
        "np.from_dlpack(t, copy=False) 64 MiB F32",
        lambda: np.from_dlpack(t, copy=False),
        {"np.from_dlpack(ndarray)": lambda: np.from_dlpack(array)},
    )
    yield Row("np.max(t) 64 MiB F32", lambda: np.max(t), {"numpy": lambda: np.max(array)})
