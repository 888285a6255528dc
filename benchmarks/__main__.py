"""Run every benchmark module (or those named): ``python -m benchmarks [views arith ...]``.

``-k TEXT`` (repeatable) keeps only the rows whose name contains one of the texts, e.g.
``python -m benchmarks arith -k "I32 add" -k "F32 sum"``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks

from ._harness import blas_threads, report


def main(arguments: list[str]) -> None:
    names: list[str] = []
    keep: list[str] = []
    items = iter(arguments)
    for item in items:
        if item == "-k":
            keep.append(next(items, ""))
        else:
            names.append(item)
    found = sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name.startswith("bench_")
    )
    print(f"NumPy's BLAS threads: {blas_threads()} (PyTorch is set to the same)", flush=True)
    for name in names or found:
        if name not in found:
            raise SystemExit(f"unknown benchmark {name!r}; choose from {found}")
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"benchmarks.bench_{name}")
        rows = module.rows()
        if keep:
            rows = (row for row in rows if any(text in row.name for text in keep))
        report(rows)


if __name__ == "__main__":
    main(sys.argv[1:])
