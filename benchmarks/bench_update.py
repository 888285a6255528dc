"""Functional updates (with_slice, .at[...].set, with_index_path) against copy-then-assign.

NumPy's reference is what a NumPy user writes to keep the original: ``b = a.copy();
b[i] = v``. PyTorch's is ``clone`` then assign; JAX's is ``a.at[i].set(v)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, optional, torch_like_numpy


def _copy_then_assign(array: np.ndarray, index: Any, value: Any) -> Callable[[], object]:
    def run() -> object:
        copy = array.copy()
        copy[index] = value
        return copy

    return run


def _references(array: np.ndarray, index: Any, value: Any) -> dict[str, Callable[[], object]]:
    found: dict[str, Callable[[], object]] = {"numpy": _copy_then_assign(array, index, value)}
    torch: Any = torch_like_numpy()
    if torch is not None:
        tt = torch.from_numpy(array.copy())
        tv = torch.from_numpy(np.asarray(value).copy()) if np.ndim(value) else value.item()

        def torch_run() -> object:
            copy = tt.clone()
            copy[index] = tv
            return copy

        found["torch"] = torch_run
    jax = optional("jax")
    if jax is not None:
        ja = jax.numpy.asarray(array)
        jv = jax.numpy.asarray(value)
        found["jax"] = lambda: ja.at[index].set(jv).block_until_ready()
    return found


def rows() -> Iterator[Row]:
    large = np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024)
    row = np.full(1024, -1.0, dtype=np.float32)
    t_large = st.Tensor.from_numpy(large)
    t_row = st.Tensor.from_numpy(row)
    yield Row(
        "with_slice row of [1024,1024] F32",
        lambda: t_large.with_slice(5, t_row),
        _references(large, 5, row),
    )
    yield Row(
        "at[5].set(row) [1024,1024] F32",
        lambda: t_large.at[5].set(t_row),
        _references(large, 5, row),
    )
    transposed = np.ascontiguousarray(large.T).T  # same values, column-major layout
    t_transposed = st.Tensor.from_numpy(np.ascontiguousarray(large.T)).transpose()
    yield Row(
        "with_slice row of transposed [1024,1024] F32",
        lambda: t_transposed.with_slice(5, t_row),
        _references(transposed, 5, row),
    )
    yield Row(
        "with_index_path [::-1][5] of [1024,1024] F32",
        lambda: t_large.with_index_path([slice(None, None, -1), 5], t_row),
        {"numpy": _copy_then_assign(large, (slice(None, None, -1), 5), row)},
    )
    small = np.arange(16, dtype=np.float32).reshape(4, 4)
    t_small = st.Tensor.from_numpy(small)
    yield Row(
        "with_slice one element of [4,4] F32 (float)",
        lambda: t_small.with_slice((1, 2), 7.0),
        _references(small, (1, 2), np.float32(7.0)),
    )
    seven = st.Tensor.full("F32", (), 7.0)
    yield Row(
        "with_slice one element of [4,4] F32 (tensor)",
        lambda: t_small.with_slice((1, 2), seven),
        _references(small, (1, 2), np.float32(7.0)),
    )
