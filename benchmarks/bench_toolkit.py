"""The toolkit against NumPy: a max over an axis, an embedding lookup with ``take``, a
concatenation, and the exact mean (against NumPy's rounded one). Goal: within 1.5x of
NumPy for max, take and concatenate; each reference runs on the same data, built before
its timed call."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

import strided as st

from ._harness import Row


def rows() -> Iterator[Row]:
    rng = np.random.default_rng(0)

    scores = rng.standard_normal((1024, 4096)).astype(np.float32)
    ts = st.Tensor.from_numpy(scores)
    yield Row(
        "F32 max axis=1 [1024, 4096]",
        lambda: ts.max(axis=1),
        {"numpy": lambda: scores.max(axis=1)},
    )
    yield Row(
        "F32 argmax axis=1 [1024, 4096]",
        lambda: ts.argmax(axis=1),
        {"numpy": lambda: scores.argmax(axis=1)},
    )

    table = rng.standard_normal((30522, 384)).astype(np.float32)
    tokens = rng.integers(0, 30522, 512, dtype=np.int64)
    tt, ti, token_list = st.Tensor.from_numpy(table), st.Tensor.from_numpy(tokens), tokens.tolist()
    yield Row(
        "F32 take 512 rows of [30522, 384]",
        lambda: tt.take(ti, axis=0),
        {"numpy": lambda: np.take(table, tokens, axis=0)},
    )
    yield Row(
        "F32 take 512 rows, indices as a list",
        lambda: tt.take(token_list, axis=0),
        {"numpy": lambda: np.take(table, token_list, axis=0)},
    )

    parts = [rng.standard_normal((512, 384)).astype(np.float32) for _ in range(8)]
    tparts = [st.Tensor.from_numpy(p) for p in parts]
    yield Row(
        "F32 concatenate 8 x [512, 384]",
        lambda: st.concatenate(tparts),
        {"numpy": lambda: np.concatenate(parts)},
    )
    yield Row(
        "F32 stack 8 x [512, 384]",
        lambda: st.stack(tparts),
        {"numpy": lambda: np.stack(parts)},
    )

    mask = scores > 0
    tm = st.Tensor.from_numpy(mask)
    yield Row("F32 mask [1024, 4096]", lambda: ts[tm], {"numpy": lambda: scores[mask]})
    yield Row(
        "F32 where [1024, 4096]",
        lambda: st.where(tm, ts, 0.0),
        {"numpy": lambda: np.where(mask, scores, np.float32(0.0))},
    )
    yield Row(
        "F32 mean axis=1 [1024, 4096] (1 ulp)",
        lambda: ts.mean(axis=1),
        {"numpy": lambda: scores.mean(axis=1)},
    )
    f64 = rng.standard_normal((256, 4096))
    t64 = st.Tensor.from_numpy(f64)
    yield Row(
        "F64 mean axis=1 [256, 4096] (exact)",
        lambda: t64.mean(axis=1),
        {"numpy": lambda: f64.mean(axis=1)},
    )
