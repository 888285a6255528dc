"""A tiny timing harness: every row times strided and its references in one run.

Each ``bench_*.py`` module defines ``rows()`` yielding ``Row``s; ``python -m benchmarks``
runs them all (or those named on the command line) and prints one table.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import os
import subprocess
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    """One measured operation: strided's callable and the references it is compared with."""

    name: str
    strided: Callable[[], object]
    references: dict[str, Callable[[], object]] = field(default_factory=dict)
    unit: str = "time"  # "time", or a throughput label computed by ``scale``
    scale: float | None = None  # work per call (e.g. FLOPs or values) for throughput


def _repeat_count(fn: Callable[[], object], budget: float) -> tuple[int, float]:
    """Calls per timing round so that a round lasts about ``budget / 5`` (and its time)."""
    fn()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > budget / 5 or number >= 1 << 22:
            return number, elapsed / number
        number *= 4


def _round(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def best_times(fns: list[Callable[[], object]], budget: float = 0.25) -> list[float]:
    """Best-of-five per-call time of each callable, their rounds interleaved.

    Every callable gets a repeat count that fills about ``budget / 5`` per round; the
    rounds then alternate between the callables (strided, reference, strided, ...), so
    on a shared machine a burst of outside load hits both sides of a ratio alike.
    """
    counts = [_repeat_count(fn, budget) for fn in fns]
    best = [first for _, first in counts]
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(4):
            for i, (fn, (number, _)) in enumerate(zip(fns, counts, strict=True)):
                best[i] = min(best[i], _round(fn, number))
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def per_call_seconds(fn: Callable[[], object], budget: float = 0.25) -> float:
    """Best-of-five per-call time, with the repeat count chosen to fill ``budget`` seconds."""
    return best_times([fn], budget)[0]


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

    Rows with a ``scale`` also show each side's throughput. strided and its references
    are timed in interleaved rounds (``best_times``).
    """
    for row in rows:
        ours, *others = best_times([row.strided, *row.references.values()])
        parts = [f"{row.name:<44} strided {format_seconds(ours)}"]
        if row.scale:
            parts.append(format_rate(row.scale / ours, row.unit))
        for label, theirs in zip(row.references, others, strict=True):
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


def blas_threads() -> int:
    """The thread count of the BLAS NumPy loaded (OpenBLAS), else the env setting or core count.

    Read through OpenBLAS's own ``*_get_num_threads`` entry point (the library is found in
    ``/proc/self/maps``), so it matches what NumPy's matmul really uses.
    """
    import numpy  # noqa: F401  (loads the BLAS library)

    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        paths = set()
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in (
            "openblas_get_num_threads",
            "openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads64_",
        ):
            getter = getattr(library, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_int
                return max(1, int(getter()))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return os.cpu_count() or 1


def torch_like_numpy() -> object | None:
    """PyTorch (when installed) with its intra-op thread count set to NumPy's BLAS count."""
    torch: Any = optional("torch")
    if torch is not None:
        torch.set_num_threads(blas_threads())
    return torch


def peak_bytes(fn: Callable[[], object]) -> tuple[int, object]:
    """``(peak traced bytes allocated while fn runs, its result)``, by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, result


@dataclass
class Measured:
    """One run of a command: wall seconds, the peak anonymous memory of its process
    tree (bytes; 0 where ``/proc`` is missing), its exit status and its stdout."""

    seconds: float
    peak: int
    returncode: int
    stdout: str


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant, from ``/proc`` (just ``pid`` elsewhere)."""
    found, index = [pid], 0
    while index < len(found):
        current = found[index]
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                found += [int(child) for child in children.read().split()]
        except OSError:
            pass
        index += 1
    return found


def anonymous_bytes(pid: int) -> int:
    """A process's anonymous resident memory (``RssAnon``), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_measured(command: list[str]) -> Measured:
    """Run ``command`` (stderr discarded), sampling its tree's memory every 2 ms."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, sum(anonymous_bytes(pid) for pid in process_tree(process.pid)))
        time.sleep(0.002)
    seconds = time.perf_counter() - start
    output = process.stdout.read().decode() if process.stdout else ""
    return Measured(seconds, peak, process.returncode, output)


def touched(arrays: Iterable[Any], full: bool = False) -> float:
    """The sum of one element of each array (of each array's maximum with ``full``):
    what a timed read returns, so every array is really read."""
    total = 0.0
    for array in arrays:
        total += float(array.max()) if full else float(array.reshape(-1)[0])
    return total
