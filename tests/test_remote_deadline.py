"""Slow servers cannot hold strided: an overall deadline per request, a minimum rate for
streamed tensor bytes.

A server on 127.0.0.1 drips its answer a byte every 0.3 s (each read well inside the
one-second timeout, so per-read timeouts alone would wait for hours). The open or job
runs in a child process with a generous bound on its running time, so a server that
still holds it fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import strided as st
from strided.io import _http

from .httpserver import Behaviour, FileServer

pytest.importorskip("httpx")  # the remote extra; without it URLs are refused by name

SOURCE = str(Path(st.__file__).parent.parent)
BOUND = 15.0  # seconds: far beyond the one-second limit, far below what a drip takes
MIB = 1 << 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slow")
    values = np.arange(5 * MIB // 8, dtype=np.float32)  # 2.5 MiB: three streamed pieces
    st.save_safetensors(root / "model.safetensors", {"w": st.tensor(values, st.DType.F32)})
    return root


@pytest.fixture(scope="module")
def served(folder: Path) -> Iterator[FileServer]:
    server = FileServer(folder)
    yield server
    server.close()


@pytest.fixture
def server(served: FileServer) -> FileServer:
    served.behave = Behaviour()
    served.reset()
    return served


def in_child(url: str, action: str) -> dict[str, Any]:
    """Open ``url`` with ``timeout=1`` in a child process and run ``action`` (statements
    using ``ckpt``): what was raised (type, whether an OSError, filename, message) and
    how many seconds it all took. Fails the test if the child is still held after twice
    ``BOUND``."""
    code = textwrap.dedent(
        """
        import json, sys, time
        import strided as st
        start = time.monotonic()
        found = {"error": None}
        try:
            with st.open_checkpoint(sys.argv[1], timeout=1) as ckpt:
                exec(sys.argv[2])
        except Exception as error:
            found = {
                "error": type(error).__name__,
                "oserror": isinstance(error, OSError),
                "filename": getattr(error, "filename", None),
                "message": str(error),
            }
        found["seconds"] = time.monotonic() - start
        print(json.dumps(found))
        """
    )
    env = dict(os.environ, PYTHONPATH=SOURCE)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, url, action],
            capture_output=True,
            text=True,
            timeout=2 * BOUND,
            env=env,
            check=True,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server still held the reader after {2 * BOUND:g} s")
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_a_dripping_body_cannot_hold_an_open(server: FileServer) -> None:
    server.behave.drip = 0.3  # the 4 KiB probe alone would take 20 minutes
    url = server.url("model.safetensors")
    found = in_child(url, "pass")
    assert found["error"] == "TimeoutError" and found["oserror"]
    assert found["filename"] == url
    assert "no complete answer within 1 s" in found["message"]
    assert found["seconds"] < BOUND
    assert len(server.requests) == 1  # a timeout is not retried


def test_dripping_response_headers_cannot_hold_an_open(server: FileServer) -> None:
    server.behave.drip_headers = 0.3  # 4 KB of headers: 20 minutes
    url = server.url("model.safetensors")
    found = in_child(url, "pass")
    assert found["error"] == "TimeoutError" and found["filename"] == url
    assert "no complete answer within 1 s" in found["message"]
    assert found["seconds"] < BOUND


def test_a_streamed_tensor_below_the_minimum_rate_is_abandoned(server: FileServer) -> None:
    server.behave.drip = 0.3
    server.behave.drip_after = 1  # the header comes at once; the tensor's bytes drip
    url = server.url("model.safetensors")
    for action in ("ckpt.digest()", "ckpt['w']"):
        server.reset()
        found = in_child(url, action)
        assert found["error"] == "TimeoutError" and found["filename"] == url
        assert f"fewer than {_http.MIN_RATE} bytes in 1 s" in found["message"]
        assert found["seconds"] < BOUND
        assert len(server.requests) == 2  # the probe, then the first piece


def test_the_minimum_rate_holds_across_the_pieces_of_a_stream(server: FileServer) -> None:
    """40 KiB/s in 32 KiB pieces: each piece comes within the one-second limit, but no
    second of the stream brings 64 KiB."""
    server.behave.rate = 40 << 10
    url = server.url("model.safetensors")
    small_pieces = "from strided.io import _http\n_http.STREAM_CHUNK = 1 << 15\n"
    found = in_child(url, small_pieces + "ckpt.digest()")
    assert found["error"] == "TimeoutError" and found["filename"] == url
    assert f"fewer than {_http.MIN_RATE} bytes in 1 s" in found["message"]
    assert found["seconds"] < BOUND


def test_dripping_headers_of_a_streamed_piece_are_abandoned(server: FileServer) -> None:
    server.behave.drip_headers = 0.3
    server.behave.drip_after = 1
    url = server.url("model.safetensors")
    found = in_child(url, "ckpt.digest()")
    assert found["error"] == "TimeoutError" and found["filename"] == url
    assert found["seconds"] < BOUND


def test_a_slow_but_steady_stream_is_read_whole(server: FileServer, folder: Path) -> None:
    """512 KiB/s: each 1 MiB piece takes two seconds, twice the limit, yet every second
    brings more than the minimum rate; streams have no overall deadline."""
    server.behave.rate = 512 << 10
    with st.open_checkpoint(folder / "model.safetensors") as local:
        expected = local.digest()
    with st.open_checkpoint(server.url("model.safetensors"), timeout=1) as remote:
        assert remote.digest() == expected
    assert server.sent >= 5 * MIB // 2  # every byte came at the slow rate


def test_a_slow_but_steady_header_request_within_the_deadline_is_read(
    server: FileServer,
) -> None:
    server.behave.drip = 0.0002  # the 4 KiB probe in a second or two, under 64 KiB/s
    with st.open_checkpoint(server.url("model.safetensors"), timeout=10) as ckpt:
        assert ckpt.info("w").shape == (5 * MIB // 8,)
