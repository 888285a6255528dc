"""Hostile pickles refused within the open's budget: what they cost in a child process.

Two small PyTorch checkpoints whose pickles once built hundreds of MiB (or without end)
before strided refused them, written to a temporary folder before measuring:

* an astral key: ``{k: [None] * 180_000}`` for one key of 16,384 emoji (64 KiB of
  UTF-8), 244 KB; the dotted names ``k.0`` ... each take 64 KiB in CPython;
* a tuple key: one dict key of tuples nested 15 deep, each level 60 memo references to
  the level below (2 KB; its text would have 10**27 characters); and a wide one, two
  levels of 500 references over one 64 KiB text (66 KB, 16 GB of text).

Each file is opened by ``open_checkpoint`` in a child process; the line printed per file
gives its size, the outcome, the child's wall time and the peak anonymous memory of the
child beyond a child that only imports strided, beside the open's allowance (64 MiB +
16 x the pickle bytes). The rows time the same refusal in this process.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator

import strided as st

from ._harness import Row, format_seconds, run_measured

_MIB = 1 << 20
_OPEN = (
    "import sys, strided as st\n"
    "try:\n"
    "    st.open_checkpoint(sys.argv[1])\n"
    "    print('opened')\n"
    "except st.DataError as error:\n"
    "    print(type(error).__name__)\n"
)
_IMPORT = "import strided as st, strided.jobs._checkpoint\n"


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _astral() -> bytes:
    key = "\U0001f600" * 16384
    return b"\x80\x02}" + _text(key) + b"](" + b"N" * 180_000 + b"es."


def _nested(levels: int = 15, width: int = 60) -> bytes:
    key = b")q\x000"
    for level in range(1, levels + 1):
        key += b"(" + (b"h" + bytes([level - 1])) * width + b"tq" + bytes([level]) + b"0"
    return b"\x80\x02}" + key + b"h" + bytes([levels]) + b"Ns."


def _wide(width: int = 500) -> bytes:
    key = _text("k" * 65536) + b"q\x000(" + b"h\x00" * width + b"tq\x010("
    return b"\x80\x02}" + key + b"h\x01" * width + b"tNs."


def _archive(folder: str, name: str, payload: bytes) -> str:
    path = os.path.join(folder, f"{name}.pt")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/data.pkl", payload)
        archive.writestr(f"{name}/byteorder", b"little")
    return path


def _refused(path: str) -> Callable[[], object]:
    def run() -> object:
        try:
            st.open_checkpoint(path)
        except st.LimitError as error:
            return error
        raise SystemExit(f"{path} opened: the budget did not hold")

    return run


def rows() -> Iterator[Row]:
    folder = tempfile.mkdtemp(prefix="strided-bench-hostile-")
    try:
        files = {
            "astral key": _astral(),
            "tuple key nested 15 deep": _nested(),
            "tuple key of 64 KiB texts": _wide(),
        }
        baseline = run_measured([sys.executable, "-c", _IMPORT]).peak
        paths = {}
        for name, payload in files.items():
            path = paths[name] = _archive(folder, name.replace(" ", "-"), payload)
            found = run_measured([sys.executable, "-c", _OPEN, path])
            allowance = (64 << 20) + 16 * len(payload)
            print(
                f"{name}: {os.path.getsize(path) / 1000:.0f} KB file, "
                f"{found.stdout.strip() or 'failed'} in {format_seconds(found.seconds)}, "
                f"peak {max(0, found.peak - baseline) / _MIB:.0f} MiB beyond importing strided "
                f"(allowance {allowance / _MIB:.0f} MiB)",
                flush=True,
            )
        for name, path in paths.items():
            size = os.path.getsize(path) // 1000
            yield Row(f"hostile {name} ({size} KB): refused", _refused(path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
