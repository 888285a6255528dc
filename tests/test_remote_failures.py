"""Connections that cannot be made fail at once; dropped ones are retried, a bounded
number of times; a URL that does not parse is a FormatError naming it; the
environment's proxy is still used."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as hs

import strided as st
from strided.io import _http

from .httpserver import Behaviour, FileServer

pytest.importorskip("httpx")  # the remote extra; without it URLs are refused by name

SOURCE = str(Path(st.__file__).parent.parent)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FileServer]:
    root = tmp_path_factory.mktemp("failures")
    st.save_safetensors(root / "small.safetensors", {"w": st.tensor([1.0, 2.0], "F32")})
    server = FileServer(root)
    yield server
    server.close()


@pytest.fixture
def server(served: FileServer, monkeypatch: pytest.MonkeyPatch) -> FileServer:
    monkeypatch.setattr(_http, "BACKOFF_SECONDS", 0.01)
    served.behave = Behaviour()
    served.reset()
    return served


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_refused_connection_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # With retries, the first one alone would wait BACKOFF_SECONDS (then 2x, 4x).
    monkeypatch.setattr(_http, "BACKOFF_SECONDS", 5.0)
    url = f"http://127.0.0.1:{free_port()}/model.safetensors"
    start = time.monotonic()
    with pytest.raises(ConnectionRefusedError, match="connection refused") as caught:
        st.open_checkpoint(url, timeout=5)
    assert time.monotonic() - start < _http.BACKOFF_SECONDS
    assert caught.value.filename == url
    assert "attempts" not in str(caught.value)


def test_a_failed_name_lookup_fails_at_once() -> None:
    url = "http://no-such-host.invalid/model.safetensors"  # .invalid never resolves
    with pytest.raises(OSError, match="name lookup failed") as caught:
        st.open_checkpoint(url, timeout=5)
    assert caught.value.filename == url
    assert "attempts" not in str(caught.value)


def test_dropped_connections_are_retried(server: FileServer) -> None:
    server.behave.drops = _http.RETRIES  # the last attempt is answered
    with st.open_checkpoint(server.url("small.safetensors"), timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]
    assert len(server.requests) == _http.RETRIES + 1


def test_dropped_connections_are_retried_a_bounded_number_of_times(server: FileServer) -> None:
    server.behave.drops = 100
    url = server.url("small.safetensors")
    with pytest.raises(OSError, match=f"after {_http.RETRIES + 1} attempts") as caught:
        st.open_checkpoint(url, timeout=5)
    assert caught.value.filename == url
    assert len(server.requests) == _http.RETRIES + 1


BAD_URLS = [
    "http://[::1",
    "https://[::1/model.safetensors",
    "http://[v1.x]/model.safetensors",
    "http:///model.safetensors",
    "https://:443/model.safetensors",
    "http://127.0.0.1:99999/model.safetensors",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_url_that_does_not_parse_is_a_format_error(url: str) -> None:
    with pytest.raises(st.FormatError) as caught:
        st.open_checkpoint(url, timeout=5)
    assert str(caught.value).startswith(f"{url}: ")


@given(hs.text(hs.characters(exclude_characters="]"), max_size=30))
def test_an_unclosed_ipv6_host_is_a_format_error(rest: str) -> None:
    url = "http://[" + rest
    with pytest.raises(st.FormatError, match="not a valid URL") as caught:
        st.open_checkpoint(url, timeout=5)
    assert str(caught.value).startswith(f"{url}: ")


@pytest.mark.parametrize("extra", [[], ["--token", "t"]])
def test_the_command_line_reports_a_bad_url_on_one_line(extra: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strided", "inspect", "http://[::1", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=SOURCE),
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == "strided: http://[::1: not a valid URL (Invalid IPv6 URL)\n"
    assert done.stdout == ""


def test_the_environment_proxy_is_used(server: FileServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every thread's client honours ``HTTP_PROXY``: the server answers as the proxy for
    a host that does not exist."""
    for name in ("ALL_PROXY", "NO_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
    url = "http://model.invalid/small.safetensors"
    with st.open_checkpoint(url, timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]
    assert server.requests and all(path == url for path, _ in server.requests)
