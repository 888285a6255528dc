"""Checkpoint jobs on a ~200 MiB checkpoint: hash, diff, verify and convert.

References: ``hashlib.sha256`` over the same file bytes (for ``hash``), reading both
files whole (for ``diff`` of two equal checkpoints) and the reference ``safetensors``
library's load + save (for ``convert``). strided runs its command line in this process
(``--jobs 2`` starts its worker processes inside the timed call). The files are written
to a temporary folder before anything is timed.

Peak memory is measured once per operation in a fresh process: the largest anonymous
resident memory (``RssAnon``: heap, not pages of mapped files) of the process and its
workers together, sampled every 2 ms, interpreter and imports included.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator

import numpy as np

import strided as st
from strided.cli import main

from ._harness import Row, optional, run_measured

_TENSORS = 50  # of 1024 x 1024 F32 = 4 MiB each: 200 MiB in all
_MIB = 1 << 20


def _write(path: str) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"model.layers.{i}.weight": st.Tensor.from_numpy(
            rng.standard_normal((1024, 1024), dtype=np.float32)
        )
        for i in range(_TENSORS)
    }
    st.save_safetensors(path, tensors, metadata={"format": "pt"})


def _quiet(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return main(list(args))

    return run


def _hashlib(path: str) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(_MIB)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while count := file.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def _read_both(a: str, b: str) -> int:
    total = 0
    buffer = bytearray(_MIB)
    for path in (a, b):
        with open(path, "rb", buffering=0) as file:
            while count := file.readinto(buffer):
                total += count
    return total


_REFERENCE_CONVERT = (
    "import sys\n"
    "from safetensors.numpy import load_file, save_file\n"
    "save_file(load_file(sys.argv[1]), sys.argv[2], metadata={'format': 'pt'})\n"
)
_REFERENCE_HASH = (
    "import hashlib, sys\n"
    "d = hashlib.sha256()\n"
    "f = open(sys.argv[1], 'rb', buffering=0)\n"
    "b = bytearray(1 << 20)\n"
    "while n := f.readinto(b): d.update(memoryview(b)[:n])\n"
)
_REFERENCE_READ = (
    "import sys\n"
    "b = bytearray(1 << 20)\n"
    "for p in sys.argv[1:]:\n"
    "    f = open(p, 'rb', buffering=0)\n"
    "    while f.readinto(b): pass\n"
)


def _peak(command: list[str]) -> str:
    """Peak anonymous memory of a command's process tree, as text (Linux only)."""
    if not os.path.exists("/proc/self/status"):
        return "n/a"
    return f"{run_measured(command).peak / _MIB:.0f} MiB"


def rows() -> Iterator[Row]:
    folder = tempfile.mkdtemp(prefix="strided-bench-jobs-")
    try:
        a = os.path.join(folder, "a.safetensors")
        b = os.path.join(folder, "b.safetensors")
        _write(a)
        shutil.copyfile(a, b)
        out = os.path.join(folder, "out.safetensors")
        size = os.path.getsize(a)
        mib = size >> 20
        cli = [sys.executable, "-m", "strided"]
        python = [sys.executable, "-c"]
        memory = {
            "hash": _peak([*cli, "hash", a]),
            "hash2": _peak([*cli, "hash", a, "--jobs", "2"]),
            "hashlib": _peak([*python, _REFERENCE_HASH, a]),
            "diff": _peak([*cli, "diff", a, b]),
            "diff2": _peak([*cli, "diff", a, b, "--jobs", "2"]),
            "read": _peak([*python, _REFERENCE_READ, a, b]),
            "verify": _peak([*cli, "verify", a]),
            "convert": _peak([*cli, "convert", a, out]),
            "bf16": _peak([*cli, "convert", a, out, "--dtype", "BF16"]),
        }
        has_safetensors = optional("safetensors") is not None
        if has_safetensors:
            memory["reference"] = _peak([*python, _REFERENCE_CONVERT, a, out])
        print(
            "peak anonymous memory (process tree): "
            + ", ".join(f"{key} {value}" for key, value in memory.items()),
            flush=True,
        )
        hashing = {"hashlib.sha256 (file bytes)": lambda: _hashlib(a)}
        yield Row(f"hash {mib} MiB, 1 job", _quiet("hash", a), hashing, "B", size)
        yield Row(f"hash {mib} MiB, 2 jobs", _quiet("hash", a, "--jobs", "2"), hashing, "B", size)
        reading = {"read both files": lambda: _read_both(a, b)}
        yield Row(f"diff 2 x {mib} MiB equal, 1 job", _quiet("diff", a, b), reading, "B", 2 * size)
        yield Row(
            f"diff 2 x {mib} MiB equal, 2 jobs",
            _quiet("diff", a, b, "--jobs", "2"),
            reading,
            "B",
            2 * size,
        )
        yield Row(f"verify {mib} MiB (exact stats), 1 job", _quiet("verify", a), {}, "B", size)
        yield Row(
            f"verify {mib} MiB (exact stats), 2 jobs",
            _quiet("verify", a, "--jobs", "2"),
            {},
            "B",
            size,
        )
        converting = {}
        if has_safetensors:
            from safetensors.numpy import load_file, save_file

            reference = os.path.join(folder, "reference.safetensors")
            converting["safetensors load_file + save_file"] = lambda: save_file(
                load_file(a), reference, metadata={"format": "pt"}
            )
        yield Row(f"convert {mib} MiB copy", _quiet("convert", a, out), converting, "B", size)
        yield Row(
            f"convert {mib} MiB to BF16, 2 jobs",
            _quiet("convert", a, out, "--dtype", "BF16", "--jobs", "2"),
            {},
            "B",
            size,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
