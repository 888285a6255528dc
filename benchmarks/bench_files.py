"""Tensor files: strided's memory-mapped loaders against the reference libraries.

A ~200 MiB safetensors file (and a 2 MiB one, to show that load time does not grow with
the file) is written to a temporary folder. Timed rows: open + read one tensor, and
load every tensor. Peak RSS growth of each operation is measured in a fresh subprocess
(``ru_maxrss`` after minus before, imports excluded) and printed before the rows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import numpy as np

import strided as st

from ._harness import Row, optional

_TENSORS = 50  # of 1024 x 1024 F32 = 4 MiB each: 200 MiB in all
_MIB = 1 << 20

_RSS_SCRIPT = """
import resource, sys
import numpy as np
import strided as st
import safetensors
import safetensors.numpy


def peak():
    # VmHWM after a reset through clear_refs (Linux), else the process's ru_maxrss.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


try:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets the high-water mark to the current RSS
except OSError:
    pass
path, case = sys.argv[1], sys.argv[2]
before = peak()
if case == "strided-load":
    kept = st.load_safetensors(path)
elif case == "strided-one":
    kept = st.open_safetensors(path).get("layer.7")
elif case == "reference-load":
    kept = safetensors.numpy.load_file(path)
elif case == "reference-one":
    with safetensors.safe_open(path, "np") as handle:
        kept = handle.get_tensor("layer.7")
print(peak() - before)
"""


def _write_file(path: str, count: int, rows: int) -> None:
    tensors = {
        f"layer.{i}": st.Tensor.from_numpy(np.full((rows, 1024), i, dtype=np.float32))
        for i in range(count)
    }
    st.save_safetensors(path, tensors, metadata={"format": "np"})


def _peak_rss_growth(path: str, case: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, path, case],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    return max(0, int(done.stdout.strip())) / _MIB


def _print_rss(path: str, size: int) -> None:
    for label, ours, theirs in (
        ("load all", "strided-load", "reference-load"),
        ("open + get one", "strided-one", "reference-one"),
    ):
        mine = _peak_rss_growth(path, ours)
        reference = _peak_rss_growth(path, theirs)
        print(
            f"peak RSS growth, {label} ({size / _MIB:.0f} MiB file): "
            f"strided {mine:7.2f} MiB ({100 * mine * _MIB / size:.2f}% of the file) "
            f"| safetensors {reference:7.2f} MiB",
            flush=True,
        )


def rows() -> Iterator[Row]:
    safetensors = optional("safetensors")
    folder = tempfile.mkdtemp(prefix="strided-bench-")
    try:
        big = os.path.join(folder, "big.safetensors")
        small = os.path.join(folder, "small.safetensors")
        _write_file(big, _TENSORS, 1024)
        _write_file(small, _TENSORS, 10)
        size = os.path.getsize(big)
        numpy_api = None
        if safetensors is not None:
            import safetensors.numpy as numpy_api

            _print_rss(big, size)

        def refs_one(path: str) -> dict[str, object]:
            if numpy_api is None:
                return {}

            def reference() -> object:
                with safetensors.safe_open(path, "np") as handle:  # type: ignore[attr-defined]
                    return handle.get_tensor("layer.7")

            return {"safetensors": reference}

        def refs_all(path: str) -> dict[str, object]:
            return {} if numpy_api is None else {"safetensors": lambda: numpy_api.load_file(path)}

        yield Row(
            f"open_safetensors + get 1 ({size // _MIB} MiB)",
            lambda: st.open_safetensors(big).get("layer.7"),
            refs_one(big),  # type: ignore[arg-type]
        )
        yield Row(
            f"load_safetensors all {_TENSORS} ({size // _MIB} MiB)",
            lambda: st.load_safetensors(big),
            refs_all(big),  # type: ignore[arg-type]
        )
        yield Row(
            f"load_safetensors all {_TENSORS} ({os.path.getsize(small) // _MIB} MiB)",
            lambda: st.load_safetensors(small),
            refs_all(small),  # type: ignore[arg-type]
        )
        array = np.arange(16 * _MIB // 4, dtype=np.float32).reshape(-1, 1024)
        npy = os.path.join(folder, "a.npy")
        np.save(npy, array)
        yield Row(
            "load_npy 16 MiB",
            lambda: st.load_npy(npy),
            {
                "numpy mmap": lambda: np.load(npy, mmap_mode="r"),
                "numpy": lambda: np.load(npy),
            },
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
