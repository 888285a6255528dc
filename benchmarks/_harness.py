"""A tiny timing harness: every row times strided and its references in one run.

Each ``bench_*.py`` module defines ``rows()`` yielding ``Row``s; ``python -m benchmarks``
runs them all (or those named on the command line) and prints one table.
"""

from __future__ import annotations

import gc
import importlib.util
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Row:
    """One measured operation: strided's callable and the references it is compared with."""

    name: str
    strided: Callable[[], object]
    references: dict[str, Callable[[], object]] = field(default_factory=dict)
    unit: str = "time"  # "time", or a throughput label computed by ``scale``
    scale: float | None = None  # work per call (e.g. FLOPs or values) for throughput


def per_call_seconds(fn: Callable[[], object], budget: float = 0.25) -> float:
    """Best-of-five per-call time, with the repeat count chosen to fill ``budget`` seconds."""
    fn()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > budget / 5 or number >= 1 << 22:
            break
        number *= 4
    best = elapsed / number
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(4):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best = min(best, (time.perf_counter() - start) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def format_seconds(seconds: float) -> str:
    """Human units: ns, µs, ms or s."""
    for unit, factor in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3)):
        if seconds < factor * 1000:
            return f"{seconds / factor:8.2f} {unit}"
    return f"{seconds:8.2f} s "


def format_rate(per_second: float, unit: str) -> str:
    """A throughput in G or M units per second."""
    if per_second >= 1e9:
        return f"({per_second / 1e9:7.2f} G{unit}/s)"
    return f"({per_second / 1e6:7.1f} M{unit}/s)"


def report(rows: Iterator[Row]) -> None:
    """Time each row and print strided, each reference, and strided/reference ratios.

    Rows with a ``scale`` also show each side's throughput.
    """
    for row in rows:
        ours = per_call_seconds(row.strided)
        parts = [f"{row.name:<44} strided {format_seconds(ours)}"]
        if row.scale:
            parts.append(format_rate(row.scale / ours, row.unit))
        for label, fn in row.references.items():
            theirs = per_call_seconds(fn)
            ratio = ours / theirs if theirs else float("inf")
            parts.append(f"| {label} {format_seconds(theirs)}")
            if row.scale:
                parts.append(format_rate(row.scale / theirs, row.unit))
            parts.append(f"ratio {ratio:6.2f}x")
        print(" ".join(parts), flush=True)


def optional(module: str) -> object | None:
    """Import ``module`` when installed (PyTorch, JAX), else None."""
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.import_module(module)
