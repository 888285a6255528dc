"""Writing GGUF: an F16 model re-quantized to Q8_0, against the ``gguf`` package.

The source is an F16 GGUF file of 1 GiB (32 tensors ``blk.N.ffn_up.weight`` of
4096 x 4096, normally distributed, seed 0, plus a 32,000-token vocabulary), written to
a temporary folder before anything is measured. strided runs ``strided convert SRC
out.gguf --dtype Q8_0`` (1 and 2 jobs); the reference reads the file with
``gguf.GGUFReader``, quantizes each tensor with ``gguf.quants.quantize`` and writes them
with ``gguf.GGUFWriter`` (which holds every tensor until it writes).

The 1 GiB conversion runs once per side in a fresh process: its wall time and its peak
anonymous resident memory (``RssAnon``: heap, not pages of mapped files) of the process
and its workers together, sampled every 2 ms, interpreter and imports included (the
goal for strided: 64 MiB plus one tensor, 32 MiB of F16 here). The timed rows convert
the first 256 MiB (8 tensors) in this process, interleaved with the reference.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import strided as st
from strided.cli import main

from ._harness import Row, optional, run_measured

_TENSORS = 32  # of 4096 x 4096 F16 = 32 MiB each: 1 GiB in all
_TIMED = 8
_MIB = 1 << 20

_REFERENCE = (
    "import sys, warnings\n"
    "import numpy as np\n"
    "import gguf\n"
    "warnings.simplefilter('ignore')\n"
    "reader = gguf.GGUFReader(sys.argv[1])\n"
    "writer = gguf.GGUFWriter(sys.argv[2], 'llama')\n"
    "q8 = gguf.GGMLQuantizationType.Q8_0\n"
    "with np.errstate(all='ignore'):\n"
    "    for t in reader.tensors:\n"
    "        rows = np.asarray(t.data, dtype=np.float32)\n"
    "        writer.add_tensor(t.name, gguf.quants.quantize(rows, q8), raw_dtype=q8)\n"
    "writer.write_header_to_file()\n"
    "writer.write_kv_data_to_file()\n"
    "writer.write_tensors_to_file()\n"
    "writer.close()\n"
)


def _write(path: str, count: int) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"blk.{i}.ffn_up.weight": st.Tensor.from_numpy(
            rng.standard_normal((4096, 4096), dtype=np.float32).astype(np.float16)
        )
        for i in range(count)
    }
    vocab = [f"token{i}" for i in range(32000)]
    metadata = {"general.architecture": "llama", "tokenizer.ggml.tokens": vocab}
    st.save_gguf(path, tensors, metadata)


def _measure(command: list[str]) -> str:
    """Wall time and peak anonymous memory of a command's process tree (Linux only)."""
    if not os.path.exists("/proc/self/status"):
        return "n/a"
    found = run_measured(command)
    status = "" if found.returncode == 0 else f", exit {found.returncode}"
    return f"{found.seconds:.1f} s, peak {found.peak / _MIB:.0f} MiB{status}"


def _quiet(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return main(list(args))

    return run


def _reference(gguf: Any, source: str, out: str) -> Callable[[], object]:
    def run() -> object:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = gguf.GGUFReader(source)
            writer = gguf.GGUFWriter(out, "llama")
            q8 = gguf.GGMLQuantizationType.Q8_0
            for tensor in reader.tensors:
                rows = np.asarray(tensor.data, dtype=np.float32)
                writer.add_tensor(tensor.name, gguf.quants.quantize(rows, q8), raw_dtype=q8)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
        return None

    return run


def rows() -> Iterator[Row]:
    folder = tempfile.mkdtemp(prefix="strided-bench-gguf-")
    try:
        big = os.path.join(folder, "f16.gguf")
        _write(big, _TENSORS)
        out = os.path.join(folder, "q8.gguf")
        cli = [sys.executable, "-m", "strided", "convert", big, out, "--dtype", "Q8_0"]
        measured = {
            "strided 1 job": _measure([*cli, "--overwrite"]),
            "strided 2 jobs": _measure([*cli, "--overwrite", "--jobs", "2"]),
        }
        gguf: Any = optional("gguf")
        if gguf is not None:
            measured["gguf-py"] = _measure(
                [sys.executable, "-c", _REFERENCE, big, os.path.join(folder, "ref.gguf")]
            )
        size = os.path.getsize(big)
        print(
            f"convert {size / 2**30:.2f} GiB F16 GGUF -> Q8_0 (once, fresh process): "
            + "; ".join(f"{key} {value}" for key, value in measured.items()),
            flush=True,
        )
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        small = os.path.join(folder, "small.gguf")
        _write(small, _TIMED)
        values = _TIMED * 4096 * 4096
        references = {}
        if gguf is not None:
            references["gguf-py"] = _reference(gguf, small, os.path.join(folder, "ref.gguf"))
        target = os.path.join(folder, "q8.gguf")
        for jobs in ("1", "2"):
            args = ("convert", small, target, "--dtype", "Q8_0", "--overwrite", "--jobs", jobs)
            yield Row(
                f"convert {_TIMED * 32} MiB F16 GGUF -> Q8_0, {jobs} job{'s' * (jobs != '1')}",
                _quiet(*args),
                references,
                unit="elem",
                scale=values,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
