"""Hostile HTTP servers: every misbehaviour is refused early, naming the URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import strided as st
from strided.cli import main
from strided.io import _http

from .httpserver import Behaviour, FileServer

pytest.importorskip("httpx")  # the remote extra; without it URLs are refused by name

BIG = 16 << 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    values = st.tensor(np.zeros(BIG // 4, dtype=np.float32), st.DType.F32)
    st.save_safetensors(root / "big.safetensors", {"w": values})
    st.save_safetensors(root / "small.safetensors", {"w": st.tensor([1.0, 2.0], "F32")})
    # A header length past the cap, followed by a little JSON.
    (root / "huge-header.safetensors").write_bytes(
        (200_000_000).to_bytes(8, "little") + b"{" + b" " * 8000
    )
    return root


@pytest.fixture(scope="module")
def servers(folder: Path) -> Iterator[tuple[FileServer, FileServer]]:
    first, second = FileServer(folder), FileServer(folder)
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def server(servers: tuple[FileServer, FileServer], monkeypatch: pytest.MonkeyPatch) -> FileServer:
    monkeypatch.setattr(_http, "BACKOFF_SECONDS", 0.01)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    for each in servers:
        each.behave = Behaviour()
        each.reset()
    return servers[0]


def test_a_server_ignoring_range_is_refused_without_downloading(server: FileServer) -> None:
    server.behave.ignore_range = True
    url = server.url("big.safetensors")
    connection = _http.Connection(url, timeout=5)
    with pytest.raises(st.FormatError, match=f"{url}: .*ignores Range"):
        connection.probe(url, 4096)
    connection.close()
    # The client stops after one network read past the 4 KiB asked for.
    assert connection.received <= 4096 + (1 << 17)
    with pytest.raises(st.FormatError, match="ignores Range"):
        st.open_checkpoint(url, timeout=5)
    assert server.sent < BIG // 2  # what the socket buffers took before the client left


def test_a_small_whole_file_answer_is_accepted(server: FileServer) -> None:
    server.behave.ignore_range = True
    with st.open_checkpoint(server.url("small.safetensors"), timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]


def test_more_bytes_than_asked_are_refused(server: FileServer) -> None:
    server.behave.extra_bytes = 100
    url = server.url("small.safetensors")
    with pytest.raises(st.FormatError, match=f"{url}: the server sent more than"):
        st.open_checkpoint(url, timeout=5)


def test_a_wrong_content_range_is_refused(server: FileServer) -> None:
    server.behave.shift_range = 1
    url = server.url("small.safetensors")
    with pytest.raises(st.FormatError, match=f"{url}: Content-Range .* differs"):
        st.open_checkpoint(url, timeout=5)


def test_416_for_a_file_that_has_bytes_is_refused(server: FileServer) -> None:
    server.behave.unsatisfiable = True  # "no byte of the range exists", for a 2-tensor file
    url = server.url("small.safetensors")
    with pytest.raises(OSError, match="HTTP 416") as caught:
        st.open_checkpoint(url, timeout=5)
    assert caught.value.filename == url
    connection = _http.Connection(url, timeout=5)
    try:
        with pytest.raises(OSError, match="HTTP 416"):  # never b"" for bytes that exist
            connection.read(url, 0, 10, 200)
    finally:
        connection.close()


def test_a_redirect_loop_is_an_error(server: FileServer) -> None:
    server.behave.redirects = {"/a": "/b", "/b": "/a"}
    url = server.url("a")
    with pytest.raises(st.FormatError, match=f"{url}: redirect loop"):
        st.open_checkpoint(url, timeout=5)
    assert len(server.requests) == 2


def test_at_most_five_redirects_are_followed(server: FileServer) -> None:
    hops = [f"/r{i}" for i in range(7)]
    server.behave.redirects = dict(zip(hops, [*hops[1:], "/small.safetensors"], strict=True))
    with pytest.raises(st.FormatError, match="more than 5 redirects"):
        st.open_checkpoint(server.url("r0"), timeout=5)
    with st.open_checkpoint(server.url("r2"), timeout=5) as ckpt:  # five hops
        assert ckpt["w"].tolist() == [1.0, 2.0]


def test_the_token_never_crosses_to_another_origin(
    servers: tuple[FileServer, FileServer], server: FileServer
) -> None:
    other = servers[1]
    server.behave.redirects = {
        "/here": "/small.safetensors",
        "/away": other.url("small.safetensors"),
    }
    with st.open_checkpoint(server.url("here"), token="s3cret", timeout=5):
        pass
    assert [h.get("Authorization") for _, h in server.requests] == ["Bearer s3cret"] * 2
    server.reset()
    with st.open_checkpoint(server.url("away"), token="s3cret", timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]
    assert server.requests[0][1].get("Authorization") == "Bearer s3cret"
    assert other.requests and all("Authorization" not in h for _, h in other.requests)


def test_a_stalled_body_times_out_naming_the_url(server: FileServer) -> None:
    server.behave.stall = 3.0
    url = server.url("small.safetensors")
    with pytest.raises(TimeoutError, match="timed out") as caught:
        st.open_checkpoint(url, timeout=0.2)
    assert caught.value.filename == url


def test_server_errors_are_retried(server: FileServer) -> None:
    server.behave.failures = 2
    with st.open_checkpoint(server.url("small.safetensors"), timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]
    assert len(server.requests) == 2 + 1  # two 503s, then the probe (it holds the file)


def test_persistent_server_errors_end_in_an_oserror(server: FileServer) -> None:
    server.behave.failures = 100
    url = server.url("small.safetensors")
    with pytest.raises(OSError, match="HTTP 503") as caught:
        st.open_checkpoint(url, timeout=5)
    assert caught.value.filename == url
    assert len(server.requests) == _http.RETRIES + 1


def test_a_missing_file_is_file_not_found(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url("nothing.safetensors")
    with pytest.raises(FileNotFoundError) as caught:
        st.open_checkpoint(url, timeout=5)
    assert caught.value.filename == url
    assert main(["inspect", url]) == 1
    assert capsys.readouterr().err == f"strided: {url}: HTTP 404 Not Found\n"


def test_a_header_length_past_the_cap_is_refused_before_asking(server: FileServer) -> None:
    url = server.url("huge-header.safetensors")
    with pytest.raises(st.LimitError, match="header length 200000000 exceeds"):
        st.open_checkpoint(url, timeout=5)
    assert [h["Range"] for _, h in server.requests] == ["bytes=0-4095"]


def test_a_dropped_connection_is_retried(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = _http.Connection._body

    def flaky(self: _http.Connection, *args: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise self._httpx.ReadError("connection reset")
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_http.Connection, "_body", flaky)
    with st.open_checkpoint(server.url("small.safetensors"), timeout=5) as ckpt:
        assert ckpt["w"].tolist() == [1.0, 2.0]
    assert len(calls) == 2


def test_a_gguf_length_past_the_file_is_refused_before_asking(
    server: FileServer, folder: Path
) -> None:
    # One key whose string value claims 60 MiB (under the string cap) in a 5 KiB file.
    head = b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little")
    head += (1).to_bytes(8, "little") + (3).to_bytes(8, "little") + b"key"
    head += (8).to_bytes(4, "little") + (60 << 20).to_bytes(8, "little")
    (folder / "liar.gguf").write_bytes(head + b"x" * 5000)
    url = server.url("liar.gguf")
    with pytest.raises(st.FormatError, match=f"{url}: value of 'key' needs 62914560 bytes"):
        st.open_checkpoint(url, timeout=5)
    assert [h["Range"] for _, h in server.requests] == ["bytes=0-4095"]


def test_remote_bool_bytes_are_checked(server: FileServer, folder: Path) -> None:
    path = folder / "bool.safetensors"
    st.save_safetensors(path, {"m": st.tensor([True, False, True], "BOOL")})
    data = bytearray(path.read_bytes())
    data[-2] = 2
    path.write_bytes(bytes(data))
    with st.open_checkpoint(server.url("bool.safetensors"), timeout=5) as ckpt:
        for read in (lambda: ckpt["m"], lambda: ckpt.inspect("m"), ckpt.digest):
            with pytest.raises(st.FormatError, match="BOOL byte 1 is 2"):
                read()
