"""The command line as a person runs it: whole processes, interpreter start-up included.

Start-up first: ``strided --help``, ``--version`` and ``hash`` of a small file (F32 and
F16, then BF16: a safetensors hash streams the stored bytes, so neither loads
``ml_dtypes``) against ``python -c "import numpy"`` and an ``np.load`` one-liner (what
any NumPy tool pays).
Then a ~200 MiB checkpoint: ``strided inspect`` lists every tensor with sampled
statistics; the reference one-liner only prints names, dtypes and shapes through
``safetensors.safe_open``.
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


def _start_up_rows(strided: str, folder: str) -> Iterator[Row]:
    import numpy as np

    import strided as st

    small = os.path.join(folder, "small.safetensors")
    values = np.arange(4096, dtype=np.float32).reshape(64, 64)
    st.save_safetensors(small, {"w": st.Tensor.from_numpy(values), "b": st.tensor([1.0], "F16")})
    small_bf16 = os.path.join(folder, "small-bf16.safetensors")
    st.save_safetensors(small_bf16, {"w": st.Tensor.from_numpy(values).convert("BF16")})
    array = os.path.join(folder, "small.npy")
    np.save(array, values)
    references = {
        "import numpy": lambda: _run(sys.executable, "-c", "import numpy"),
        "np.load one-liner": lambda: _run(sys.executable, "-c", _NP_LOAD, array),
    }
    yield Row("strided --help", lambda: _run(strided, "--help"), references)
    yield Row("strided --version", lambda: _run(strided, "--version"), references)
    yield Row("strided hash (16 KiB safetensors)", lambda: _run(strided, "hash", small), references)
    yield Row(
        "strided hash (8 KiB BF16 safetensors)",
        lambda: _run(strided, "hash", small_bf16),
        references,
    )


_NP_LOAD = "import sys, numpy as np; print(np.load(sys.argv[1]).sum())"


def rows() -> Iterator[Row]:
    strided = str(Path(sys.executable).with_name("strided"))
    folder = tempfile.mkdtemp(prefix="strided-bench-cli-")
    try:
        yield from _start_up_rows(strided, folder)
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
