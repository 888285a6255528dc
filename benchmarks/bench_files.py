"""Tensor files: strided's memory-mapped loaders against the reference libraries.

A ~200 MiB safetensors file (and a small one, to show that load time does not grow
with the file) is written to a temporary folder. Lazy handles are compared with lazy
handles (``open_safetensors`` with ``safe_open``) and load-everything calls with each
other (``load_safetensors`` with ``load_file``); every row reads each byte of each
tensor it gets, so a memory-mapped view and a copy in memory do the same work. Peak
RSS growth of each operation is measured in a fresh subprocess (``ru_maxrss`` after
minus before, imports excluded) and printed before the rows; mapped pages that are
read count in RSS (they are the shared, reclaimable page cache, but RSS shows them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

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
elif case == "strided-load-read":
    kept = st.load_safetensors(path)
    for t in kept.values():
        np.bitwise_or.reduce(t.numpy().reshape(-1).view(np.uint64))
elif case == "reference-load-read":
    kept = safetensors.numpy.load_file(path)
    for a in kept.values():
        np.bitwise_or.reduce(a.reshape(-1).view(np.uint64))
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
        ("load all (strided maps, reads nothing)", "strided-load", "reference-load"),
        ("load all, read every byte", "strided-load-read", "reference-load-read"),
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


def _touch(array: np.ndarray) -> int:
    """Read every byte of ``array`` (an OR over its 64-bit words), as a consumer would."""
    words = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    usable = words.size - words.size % 8
    return int(np.bitwise_or.reduce(words[:usable].view(np.uint64), initial=0))


def _lazy_rows(path: str, size: int, safetensors: Any) -> Iterator[Row]:
    """Lazy against lazy: strided's mapped handle and ``safe_open``, reading what they return."""

    def ours_one() -> object:
        return _touch(st.open_safetensors(path).get("layer.7").numpy())

    def ours_all() -> object:
        handle = st.open_safetensors(path)
        return [_touch(handle.get(name).numpy()) for name in handle.keys()]

    refs_one: dict[str, Callable[[], object]] = {}
    refs_all: dict[str, Callable[[], object]] = {}
    if safetensors is not None:

        def theirs_one() -> object:
            with safetensors.safe_open(path, "np") as handle:
                return _touch(handle.get_tensor("layer.7"))

        def theirs_all() -> object:
            with safetensors.safe_open(path, "np") as handle:
                return [_touch(handle.get_tensor(name)) for name in handle.keys()]

        refs_one["safe_open"] = theirs_one
        refs_all["safe_open"] = theirs_all
    yield Row(f"lazy open + get 1, read it ({size // _MIB} MiB)", ours_one, refs_one)
    yield Row(f"lazy open + get all {_TENSORS}, read them ({size // _MIB} MiB)", ours_all, refs_all)


def _eager_rows(path: str, size: int, numpy_api: Any) -> Iterator[Row]:
    """Load-everything calls against ``load_file``, both reading every byte of every tensor."""

    def ours() -> object:
        return [_touch(t.numpy()) for t in st.load_safetensors(path).values()]

    refs: dict[str, Callable[[], object]] = {}
    if numpy_api is not None:
        refs["load_file"] = lambda: [_touch(a) for a in numpy_api.load_file(path).values()]
    label = f"{size // _MIB} MiB" if size >= _MIB else f"{size // 1024} KiB"
    yield Row(f"load_safetensors all {_TENSORS}, read them ({label})", ours, refs)


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
        yield from _lazy_rows(big, size, safetensors)
        yield from _eager_rows(big, size, numpy_api)
        yield from _eager_rows(small, os.path.getsize(small), numpy_api)
        array = np.arange(16 * _MIB // 4, dtype=np.float32).reshape(-1, 1024)
        npy = os.path.join(folder, "a.npy")
        np.save(npy, array)
        yield Row(
            "load_npy 16 MiB, read it",
            lambda: _touch(st.load_npy(npy).numpy()),
            {
                "numpy mmap": lambda: _touch(np.load(npy, mmap_mode="r")),
                "numpy": lambda: _touch(np.load(npy)),
            },
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
