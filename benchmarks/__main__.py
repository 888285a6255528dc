"""Run every benchmark module (or those named): ``python -m benchmarks [views arith ...]``."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks

from ._harness import report


def main(names: list[str]) -> None:
    found = sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name.startswith("bench_")
    )
    for name in names or found:
        if name not in found:
            raise SystemExit(f"unknown benchmark {name!r}; choose from {found}")
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"benchmarks.bench_{name}")
        report(module.rows())


if __name__ == "__main__":
    main(sys.argv[1:])
