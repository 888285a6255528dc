"""Exact arithmetic, sums and matmul, against NumPy (unchecked) and PyTorch.

PyTorch runs with as many threads as NumPy's BLAS (``torch_like_numpy``), so matmul
compares like with like; NumPy's element-wise operations, like strided's, use one thread
whatever that count is, while PyTorch's may use all of them. Every operand of a reference
is built before its timed call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import strided as st

from ._harness import Row, torch_like_numpy

N = 4 * 1024 * 1024


def rows() -> Iterator[Row]:
    torch: Any = torch_like_numpy()
    rng = np.random.default_rng(0)

    def refs(
        numpy_fn: Callable[[], object], torch_fn: Callable[[], object] | None = None
    ) -> dict[str, Callable[[], object]]:
        found = {"numpy": numpy_fn}
        if torch is not None and torch_fn is not None:
            found["torch"] = torch_fn
        return found

    def tt(array: np.ndarray) -> Any:
        return torch.from_numpy(array.copy()) if torch is not None else None

    f32 = rng.standard_normal(N).astype(np.float32)
    g32 = rng.standard_normal(N).astype(np.float32)
    a, b, ta, tb = st.Tensor.from_numpy(f32), st.Tensor.from_numpy(g32), tt(f32), tt(g32)
    yield Row("F32 add 4M", lambda: a + b, refs(lambda: f32 + g32, lambda: ta + tb))

    for name, dtype, bound in (("I32", np.int32, 2**30), ("I64", np.int64, 2**62)):
        x = rng.integers(-bound, bound, N, dtype=dtype)
        y = rng.integers(-bound, bound, N, dtype=dtype)
        sx, sy, tx, ty = st.Tensor.from_numpy(x), st.Tensor.from_numpy(y), tt(x), tt(y)
        yield Row(
            f"{name} add 4M checked (vs unchecked)",
            lambda sx=sx, sy=sy: sx + sy,
            refs(lambda x=x, y=y: x + y, lambda tx=tx, ty=ty: tx + ty),
        )
    x32 = rng.integers(-(2**30), 2**30, N, dtype=np.int32)
    s32, t32 = st.Tensor.from_numpy(x32), tt(x32)
    yield Row("I32 add scalar 4M checked", lambda: s32 + 7, refs(lambda: x32 + 7, lambda: t32 + 7))
    m32 = rng.integers(-(2**15), 2**15, N, dtype=np.int32)
    sm32, tm32 = st.Tensor.from_numpy(m32), tt(m32)
    yield Row(
        "I32 mul 4M checked", lambda: sm32 * sm32, refs(lambda: m32 * m32, lambda: tm32 * tm32)
    )

    f64 = rng.standard_normal(N)
    s64, t64 = st.Tensor.from_numpy(f64), tt(f64)
    sf32 = st.Tensor.from_numpy(f32)
    yield Row("F32 sum 4M (1 ulp)", lambda: sf32.sum(), refs(lambda: f32.sum(), lambda: ta.sum()))
    yield Row("F64 sum 4M (exact)", lambda: s64.sum(), refs(lambda: f64.sum(), lambda: t64.sum()))
    yield Row(
        "F64 exact sum 4M vs math.fsum",
        lambda: s64.sum(),
        {"fsum(tolist)": lambda: math.fsum(f64.tolist())},
    )
    centered = f64 - f64.mean()
    sc = st.Tensor.from_numpy(np.concatenate([centered, -centered]))
    cancelling = sc.numpy()
    yield Row("F64 exact sum 8M cancelling to 0", lambda: sc.sum(), refs(lambda: cancelling.sum()))
    rows2d = rng.standard_normal((2048, 2048))
    sr, tr = st.Tensor.from_numpy(rows2d), tt(rows2d)
    yield Row(
        "F64 sum axis=1 2048x2048",
        lambda: sr.sum(axis=1),
        refs(lambda: rows2d.sum(axis=1), lambda: tr.sum(dim=1)),
    )
    i64 = rng.integers(-(2**40), 2**40, N, dtype=np.int64)
    si64, ti64 = st.Tensor.from_numpy(i64), tt(i64)
    yield Row("I64 sum 4M", lambda: si64.sum(), refs(lambda: i64.sum(), lambda: ti64.sum()))
    i32 = rng.integers(-(2**20), 2**20, N, dtype=np.int32)
    si32, ti32 = st.Tensor.from_numpy(i32), tt(i32)
    yield Row(
        "I32 sum 4M", lambda: si32.sum(), refs(lambda: i32.sum(dtype=np.int64), lambda: ti32.sum())
    )

    for size in (256, 1024, 2048):
        p = rng.standard_normal((size, size)).astype(np.float32)
        q = rng.standard_normal((size, size)).astype(np.float32)
        sp, sq, tp, tq = st.Tensor.from_numpy(p), st.Tensor.from_numpy(q), tt(p), tt(q)
        yield Row(
            f"matmul F32 {size}",
            lambda sp=sp, sq=sq: sp @ sq,
            refs(lambda p=p, q=q: p @ q, lambda tp=tp, tq=tq: tp @ tq),
            unit="FLOP",
            scale=2.0 * size**3,
        )
    # Values in {-1, 0, 1}: every product entry fits I8, so the exact result exists.
    p8 = rng.choice(np.array([-1, 0, 0, 1], dtype=np.int8), (512, 512))
    q8 = rng.choice(np.array([-1, 0, 0, 1], dtype=np.int8), (512, 512))
    sp8, sq8, tp8, tq8 = st.Tensor.from_numpy(p8), st.Tensor.from_numpy(q8), tt(p8), tt(q8)
    yield Row(
        "matmul I8 512 (exact)",
        lambda: sp8 @ sq8,
        refs(lambda: p8 @ q8, lambda: tp8 @ tq8),
        unit="OP",
        scale=2.0 * 512**3,
    )
    p32 = rng.integers(-(2**31), 2**31, (256, 256), dtype=np.int64).astype(np.int32)
    sp32 = st.Tensor.from_numpy(p32)
    eye = np.eye(256, dtype=np.int32)
    ones = st.Tensor.from_numpy(eye)
    yield Row(
        "matmul I32 256 full-range (exact, limbs)",
        lambda: sp32 @ ones,
        refs(lambda: p32 @ eye),
        unit="OP",
        scale=2.0 * 256**3,
    )
