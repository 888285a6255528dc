"""A small threaded HTTP server for the remote-checkpoint tests, with Range support.

``FileServer(folder)`` serves the files of ``folder`` on 127.0.0.1 (a free port) in a
background thread. It answers ``Range: bytes=A-B`` with 206 and ``Content-Range``,
counts requests and body bytes sent, records every request's path and headers, and
can misbehave on demand (``behave``): ignore Range, send more bytes than asked, state
a wrong ``Content-Range``, redirect, stall the body, fail with 503 a few times, drop
connections, drip the headers or the body a byte at a time, or send at a fixed rate. It
also serves as an HTTP proxy: a request for an absolute URL is answered with the file
its path names.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
_PIECE = 1 << 16


@dataclass
class Behaviour:
    """How the server misbehaves (all off by default)."""

    ignore_range: bool = False  # answer 200 with the whole file
    extra_bytes: int = 0  # append this many bytes beyond the range (Content-Length omitted)
    shift_range: int = 0  # state a Content-Range shifted by this many bytes
    unsatisfiable: bool = False  # answer 416 to every range, stating the true size
    stall: float = 0.0  # send the headers, then wait this long before the body
    failures: int = 0  # answer 503 to this many requests first
    drops: int = 0  # close the connection without an answer for this many requests first
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location
    drip: float = 0.0  # send the body one byte every this many seconds
    drip_headers: float = 0.0  # send the status line and (padded) headers likewise
    drip_after: int = 0  # drip only from this request on (counting from 0)
    rate: int = 0  # send bodies at this many bytes a second


class FileServer:
    """Serves ``folder`` on 127.0.0.1; ``url(name)``, ``requests``, ``sent``, ``close()``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.behave = Behaviour()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sent = 0
        self.ports: set[int] = set()  # client ports seen: one per connection
        self.lock = threading.Lock()
        server = self

        class Handler(_Handler):
            owner = server

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        """The URL of file ``name``."""
        return f"http://127.0.0.1:{self.port}/{name}"

    def reset(self) -> None:
        """Forget the requests counted so far."""
        with self.lock:
            self.requests.clear()
            self.ports.clear()
            self.sent = 0

    def close(self) -> None:
        """Stop serving and wait for the server thread."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a refused or timed-out transfer) is what tests do.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FileServer
    slow = False  # whether this request drips (set per request)
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        owner = self.owner
        behave = owner.behave
        with owner.lock:
            owner.requests.append((self.path, dict(self.headers.items())))
            owner.ports.add(self.client_address[1])
            self.slow = len(owner.requests) > behave.drip_after
            dropping = behave.drops > 0
            failing = not dropping and behave.failures > 0
            behave.drops -= dropping
            behave.failures -= failing
        if dropping:
            self.close_connection = True  # hang up without a word
            return
        if failing:
            self._empty(503)
            return
        if self.path in behave.redirects:
            self._empty(302, {"Location": behave.redirects[self.path]})
            return
        target = owner.folder / urlsplit(self.path).path.lstrip("/")
        if not target.is_file():
            self._empty(404)
            return
        size = target.stat().st_size
        found = _RANGE.fullmatch(self.headers.get("Range", ""))
        if found is None or behave.ignore_range:
            self._send(200, target, 0, size, {"Content-Length": str(size)})
            return
        begin = int(found.group(1))
        end = min(int(found.group(2)) + 1 if found.group(2) else size, size)
        if begin >= size or behave.unsatisfiable:
            self._empty(416, {"Content-Range": f"bytes */{size}"})
            return
        shift = behave.shift_range
        headers = {"Content-Range": f"bytes {begin + shift}-{end - 1 + shift}/{size}"}
        if behave.extra_bytes:
            headers["Connection"] = "close"  # the body ends when the connection does
        else:
            headers["Content-Length"] = str(end - begin)
        self._send(206, target, begin, end, headers)

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(
        self, status: int, target: Path, begin: int, end: int, headers: dict[str, str]
    ) -> None:
        """Send bytes ``[begin, end)`` of ``target`` (plus any extra bytes), a piece at a time."""
        behave = self.owner.behave
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if behave.drip_headers and self.slow:
            self.send_header("X-Padding", "p" * 4000)  # a long wait, dripped
        try:
            self.end_headers()
            if behave.stall:
                self.wfile.flush()
                time.sleep(behave.stall)
            if behave.drip and self.slow:
                piece, wait = 1, behave.drip
            elif behave.rate:
                piece, wait = max(behave.rate // 16, 1), 1 / 16
            else:
                piece, wait = _PIECE, 0.0
            with target.open("rb") as file:
                file.seek(begin)
                for start in range(begin, end, piece):
                    self._write(file.read(min(piece, end - start)))
                    if wait:
                        time.sleep(wait)
            if behave.extra_bytes:
                self._write(b"\0" * behave.extra_bytes)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if "Content-Length" not in headers:
            self.close_connection = True

    def flush_headers(self) -> None:
        # The status line and headers: at once, or a byte at a time when asked to drip.
        head = b"".join(getattr(self, "_headers_buffer", []))
        self._headers_buffer = []
        pause = self.owner.behave.drip_headers if self.slow else 0.0
        if not pause:
            self.wfile.write(head)
            return
        for at in range(len(head)):
            self.wfile.write(head[at : at + 1])
            time.sleep(pause)

    def _write(self, piece: bytes) -> None:
        # Counted first: the client may have the bytes before ``write`` returns here.
        with self.owner.lock:
            self.owner.sent += len(piece)
        self.wfile.write(piece)
