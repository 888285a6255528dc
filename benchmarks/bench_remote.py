"""Remote inspection: ``strided inspect URL`` of a 200 MiB file against downloading it.

A local HTTP server (the tests' range server, on 127.0.0.1) serves a ~200 MiB
safetensors file of 50 tensors. ``strided inspect`` reads the header and 1024 samples
per tensor by range requests; the reference downloads the whole file with one
streaming ``httpx`` GET (what a tool without range reads must do first). Before each
timed row, one run of each side is counted: requests and bytes the server sent.
Over a real network the byte ratio is what matters; on localhost the time ratio
mostly shows the per-request cost against the copy of 200 MiB.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from strided.cli import main

from ._harness import Row, optional
from .bench_files import _TENSORS, _write_file


def _counted(server: object, fn: Callable[[], object]) -> tuple[int, int]:
    """(requests, bytes sent) by the server during one call of ``fn``."""
    server.reset()  # type: ignore[attr-defined]
    fn()
    return len(server.requests), server.sent  # type: ignore[attr-defined]


def rows() -> Iterator[Row]:
    httpx = optional("httpx")
    if httpx is None:
        print("httpx is not installed: pip install 'strided[remote]'")
        return
    from tests.httpserver import FileServer

    folder = tempfile.mkdtemp(prefix="strided-bench-remote-")
    server = FileServer(Path(folder))
    client = httpx.Client()
    try:
        path = os.path.join(folder, "big.safetensors")
        _write_file(path, _TENSORS, 1024)
        size = os.path.getsize(path)
        url = server.url("big.safetensors")

        def inspect() -> object:
            with contextlib.redirect_stdout(io.StringIO()):
                return main(["inspect", url])

        def download() -> object:
            total = 0
            with client.stream("GET", url) as response:
                for piece in response.iter_raw(1 << 20):
                    total += len(piece)
            return total

        ours = _counted(server, inspect)
        theirs = _counted(server, download)
        print(
            f"{'bytes transferred':<44} strided {ours[1]:>11,} B in {ours[0]} requests "
            f"| full download {theirs[1]:>11,} B in {theirs[0]} request "
            f"ratio {ours[1] / theirs[1]:.5f}x",
            flush=True,
        )
        yield Row(
            f"strided inspect URL ({size >> 20} MiB, {_TENSORS} tensors)",
            inspect,
            {"httpx full download": download},
        )
    finally:
        client.close()
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
