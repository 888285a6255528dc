"""The command line on a ~200 MiB checkpoint, against a one-liner with the reference library.

Both sides are whole processes (interpreter start-up included), as a person runs them:
``strided inspect`` lists every tensor with sampled statistics; the reference one-liner
only prints names, dtypes and shapes through ``safetensors.safe_open``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ._harness import Row, optional
from .bench_files import _TENSORS, _write_file

_REFERENCE = (
    "import sys\n"
    "from safetensors import safe_open\n"
    "with safe_open(sys.argv[1], 'np') as f:\n"
    "    for k in f.keys():\n"
    "        s = f.get_slice(k)\n"
    "        print(k, s.get_dtype(), s.get_shape())\n"
)


def _run(*command: str) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def rows() -> Iterator[Row]:
    strided = str(Path(sys.executable).with_name("strided"))
    folder = tempfile.mkdtemp(prefix="strided-bench-cli-")
    try:
        path = os.path.join(folder, "big.safetensors")
        _write_file(path, _TENSORS, 1024)
        size = os.path.getsize(path) >> 20
        references = {}
        if optional("safetensors") is not None:
            references["safe_open one-liner"] = lambda: _run(sys.executable, "-c", _REFERENCE, path)
        references["python -c pass"] = lambda: _run(sys.executable, "-c", "pass")
        yield Row(
            f"strided inspect ({size} MiB, {_TENSORS} tensors)",
            lambda: _run(strided, "inspect", path),
            references,
        )
        yield Row(
            f"strided inspect --json --strategy spread ({size} MiB)",
            lambda: _run(strided, "inspect", path, "--json", "--strategy", "spread"),
            references,
        )
        yield Row(
            f"strided verify ({size} MiB, every element)", lambda: _run(strided, "verify", path), {}
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
