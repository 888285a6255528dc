"""HTTP range requests for remote checkpoints: reused clients, checked responses, bounded reads.

A ``Connection`` reads byte ranges of files on one or more URLs, lending each request
an ``httpx.Client`` of its own while it runs (idle clients, and their connections, are
reused across ranges). Every response is distrusted:

* a ``206`` must carry ``Content-Range: bytes B-E/TOTAL`` with exactly the range asked
  for and the file's known size, and a body of exactly that length (a longer body is
  cut off where it passes the length asked for and refused);
* a ``200`` to a Range request means the server ignores ``Range``: its body is read
  only up to the length asked for and refused when it goes on (a huge file is never
  downloaded by accident); it is accepted only when it is a whole file no longer than
  the first bytes asked for;
* redirects are followed by hand, at most ``MAX_REDIRECTS``; the bearer token goes only
  to the origin (scheme, host, port) it belongs to, never across a redirect to another;
* ``Accept-Encoding: identity``, so lengths count bytes; connect and read timeouts;
  5xx answers and dropped connections are retried ``RETRIES`` times with exponential
  backoff; a refused connection or a failed name lookup fails at once;
* time is bounded as a whole, not only per read (``Pace``): a header or sample request
  fails once ``timeout`` seconds (the read timeout) have passed since it started, its
  retries included; a stream of a tensor's bytes (its pieces, each a request) fails
  when a ``timeout``-second window brings fewer than ``MIN_RATE`` x ``timeout`` bytes.
  Both are checked after each read of a body, so a request may end up to one read
  timeout late; a response whose
  status line and headers are not in by then is cut off by a timer that closes the
  client the request holds (no other request uses it). Name resolution is not bounded;
* a URL that does not parse is a FormatError before anything is sent.

Every failure is an OSError (network, HTTP status: ``FileNotFoundError`` for 404,
``PermissionError`` for 401/403, ``TimeoutError``) or a FormatError (a response that
breaks the protocol), each naming the URL. ``httpx`` is the optional extra
``strided[remote]``, imported by name at run time.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import socket
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urljoin, urlsplit

from .._core.errors import FormatError
from .._core.limits import MAX_REDIRECTS

__all__ = [
    "MAX_REDIRECTS",
    "MIN_RATE",
    "TOKENS_VARIABLE",
    "Connection",
    "Pace",
    "is_url",
    "origin",
    "remember_token",
]

RETRIES = 3
BACKOFF_SECONDS = 0.25  # the first retry's wait; doubled for each one after
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
STREAM_CHUNK = 1 << 20  # bytes per range request when a range is streamed
MIN_RATE = 64 << 10  # bytes per second a streamed body must average over each window
HF_ENDPOINT = "https://huggingface.co"
TOKENS_VARIABLE = "STRIDED_REMOTE_TOKENS"  # origin -> token, set by the command line
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIABLE = re.compile(r"bytes \*/(\d+)")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def is_url(path: object) -> bool:
    """Whether ``path`` is an ``http://`` or ``https://`` URL."""
    return isinstance(path, str) and path[:8].lower().startswith(("http://", "https://"))


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the port made explicit (80, 443).

    FormatError naming ``url`` when it does not parse (``http://[::1``) or its port is
    not a port.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise FormatError(f"{url}: not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise FormatError(f"{url}: invalid port") from None
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def remember_token(url: str, token: str) -> None:
    """Let every process of this run (worker processes too) send ``token`` to ``url``'s origin.

    Used by the command line's ``--token``: worker processes open the URL themselves.
    """
    found = _remembered()
    found[_origin_text(url)] = token
    os.environ[TOKENS_VARIABLE] = json.dumps(found)


def _origin_text(url: str) -> str:
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


def _remembered() -> dict[str, str]:
    try:
        found = json.loads(os.environ.get(TOKENS_VARIABLE, "{}"))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _credentials(url: str, token: str | None) -> tuple[tuple[str, str, int], str] | None:
    """The (origin, token) pair for a checkpoint opened at ``url``, or None.

    ``token`` (or one remembered for this origin) belongs to the origin of ``url``;
    otherwise ``HF_TOKEN`` when ``url`` is on the Hugging Face endpoint.
    """
    home = origin(url)
    if token is None:
        token = _remembered().get(_origin_text(url))
    if token is not None:
        return home, token
    hf_token = os.environ.get("HF_TOKEN")
    endpoint = os.environ.get("HF_ENDPOINT") or HF_ENDPOINT
    if hf_token and is_url(endpoint) and origin(endpoint) == home:
        return home, hf_token
    return None


def _timeouts(url: str, timeout: object) -> tuple[float, float]:
    """(connect, read) seconds from None (the defaults), a number or a pair of numbers."""
    if timeout is None:
        return CONNECT_TIMEOUT, READ_TIMEOUT
    pair = timeout if isinstance(timeout, tuple) else (timeout, timeout)
    if len(pair) != 2 or not all(
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e9
        for value in pair
    ):
        raise FormatError(
            f"{url}: timeout must be seconds > 0 or a (connect, read) pair, found {timeout!r:.40}"
        )
    return float(pair[0]), float(pair[1])


def _httpx(url: str) -> Any:
    try:
        return importlib.import_module("httpx")
    except ImportError:
        raise FormatError(
            f"{url}: reading checkpoints over HTTP needs httpx: pip install 'strided[remote]'"
        ) from None


def _check_url(httpx: Any, url: str) -> None:
    """FormatError naming ``url`` unless it parses as an http(s) URL with a host."""
    if not origin(url)[1]:
        raise FormatError(f"{url}: not a valid URL (no host)")
    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FormatError(f"{url}: not a valid URL ({exc})") from None


class Connection:
    """Range reads of files by URL through HTTP clients (one connection per checkpoint).

    ``timeout`` is seconds for both connecting and each read, or a ``(connect, read)``
    pair; the read figure is also the limit a ``Pace`` puts on a whole request. The token
    (see ``_credentials``) is bound at creation to one origin. Each request holds an
    HTTP client of its own while it runs (so a late one can be cut off without touching
    another thread's request); idle clients are reused, so there are as many as
    requests ever ran at once, all closed by ``close``. After a ``fork`` the child makes
    its own (sockets are never shared between processes). FormatError naming ``url``
    for a bad ``timeout`` or a URL that does not parse.
    """

    def __init__(
        self, url: str, token: str | None = None, timeout: float | tuple[float, float] | None = None
    ) -> None:
        connect, read = _timeouts(url, timeout)
        self._httpx = _httpx(url)
        _check_url(self._httpx, url)
        self._credentials = _credentials(url, token)
        self._timeout = self._httpx.Timeout(read, connect=connect)
        self._limit = read
        self._ssl: Any = None  # one TLS context for every client
        self._clients: list[Any] = []  # every open client made in this process
        self._idle: list[Any] = []  # those no request holds
        self._pid = os.getpid()
        self._lock = threading.Lock()  # shards may be opened from several threads
        self.received = 0  # body bytes read (approximate when threads share the connection)

    def _lease(self) -> Any:
        """A client for one request: an idle one, or a new one (give it back: ``_release``)."""
        with self._lock:
            if self._pid != os.getpid():
                # Inherited clients are dropped, not closed: their sockets are the parent's.
                self._clients, self._idle = [], []
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop()
            if self._ssl is None:
                self._ssl = self._httpx.create_ssl_context()
            # The environment's proxy settings apply (httpx reads no .netrc).
            client = self._httpx.Client(
                timeout=self._timeout, follow_redirects=False, verify=self._ssl
            )
            self._clients.append(client)
            return client

    def _release(self, client: Any) -> None:
        """Take back a leased client: idle again, or forgotten once closed (by ``close``
        or by a late request's timer)."""
        with self._lock:
            if any(client is mine for mine in self._clients):
                if client.is_closed:
                    self._clients = [mine for mine in self._clients if mine is not client]
                else:
                    self._idle.append(client)

    def close(self) -> None:
        """Close every client (closing twice is fine; a later read opens a new one)."""
        with self._lock:
            clients, self._clients, self._idle = self._clients, [], []
            mine = self._pid == os.getpid()
        for client in clients if mine else ():
            client.close()

    def probe(self, url: str, count: int) -> tuple[int, bytes]:
        """(file size, its first ``min(count, size)`` bytes), from one range request."""
        return self._read(url, 0, count, None, None)

    def stream(self) -> Pace:
        """The pace of one stream of requests (``read(..., stream=)``): held together
        to a minimum rate rather than each to a deadline."""
        return Pace(self._limit, streamed=True)

    def read(self, url: str, begin: int, end: int, size: int, stream: Pace | None = None) -> bytes:
        """Bytes ``[begin, end)`` of the ``size``-byte file at ``url``, by the deadline
        of one request, or as the next piece of ``stream`` (see ``Pace``)."""
        if begin >= end:
            return b""
        return self._read(url, begin, end, size, stream)[1]

    def _read(
        self, url: str, begin: int, end: int, size: int | None, stream: Pace | None
    ) -> tuple[int, bytes]:
        # The deadline of a bounded request runs over all its attempts and backoffs.
        pace = stream or Pace(self._limit, streamed=False)
        attempt = 0
        while True:
            client = self._lease()
            pace.resume()
            try:
                return self._attempt(client, url, begin, end, size, pace)
            except _Retry as retry:
                failure = retry
            finally:
                pace.pause()
                self._release(client)
            attempt += 1
            text = f"{failure} (after {attempt} attempt{'s' * (attempt > 1)})"
            if attempt > RETRIES:
                raise OSError(errno.EIO, text, url)
            delay = BACKOFF_SECONDS * 2 ** (attempt - 1)
            if not pace.streamed and pace.left() <= delay:
                raise TimeoutError(errno.ETIMEDOUT, f"timed out: {pace.overdue()}; {text}", url)
            time.sleep(delay)

    def _attempt(
        self, client: Any, url: str, begin: int, end: int, size: int | None, pace: Pace
    ) -> tuple[int, bytes]:
        httpx = self._httpx
        try:
            response = self._follow(client, url, begin, end, pace)
            try:
                return self._body(url, response, begin, end, size, pace)
            finally:
                response.close()
        except _Late as late:
            raise TimeoutError(errno.ETIMEDOUT, f"timed out: {late}", url) from None
        except httpx.TimeoutException as exc:
            raise TimeoutError(errno.ETIMEDOUT, f"timed out ({type(exc).__name__})", url) from None
        except httpx.ConnectError as exc:
            raise _connect_error(url, exc) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Retry(f"connection failed ({type(exc).__name__}: {exc})") from None
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise OSError(errno.EIO, f"HTTP error ({type(exc).__name__}: {exc})", url) from None
        except httpx.InvalidURL as exc:
            raise FormatError(f"{url}: invalid URL ({exc})") from None

    def _follow(self, client: Any, url: str, begin: int, end: int, pace: Pace) -> Any:
        """The response to ``GET url`` for bytes ``[begin, end)``, redirects followed."""
        seen = {url}
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"Range": f"bytes={begin}-{end - 1}", "Accept-Encoding": "identity"}
            if self._credentials is not None and origin(current) == self._credentials[0]:
                headers["Authorization"] = f"Bearer {self._credentials[1]}"
            request = client.build_request("GET", current, headers=headers)
            response = _send(client, request, pace)
            if response.status_code not in _REDIRECTS:
                return response
            location = response.headers.get("location")
            response.close()
            if not location:
                raise FormatError(f"{url}: redirect {response.status_code} without a Location")
            try:
                current = urljoin(current, location)
            except ValueError:  # e.g. a malformed IPv6 host
                raise FormatError(f"{url}: redirect to an invalid URL") from None
            if not current.lower().startswith(("http://", "https://")):
                raise FormatError(f"{url}: redirect to a URL that is not http(s)")
            if current in seen:
                raise FormatError(f"{url}: redirect loop (back to {current})")
            seen.add(current)
        raise FormatError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _body(
        self, url: str, response: Any, begin: int, end: int, size: int | None, pace: Pace
    ) -> tuple[int, bytes]:
        status = response.status_code
        if status == 206:
            total = _checked_range(url, response.headers.get("content-range"), begin, end, size)
            want = min(end, total) - begin
            return total, self._exactly(url, response, want, pace)
        if status == 200:
            # The server ignores Range. Acceptable only when the whole file is no longer
            # than what was asked from its start; never read on past that.
            data = self._upto(
                url, response, end - begin, pace, "the server ignores Range requests: "
            )
            if begin != 0 or (size is not None and len(data) != size):
                raise FormatError(
                    f"{url}: the server ignores Range requests (it answered 200 with the "
                    "whole file); refusing to download it"
                )
            return len(data), data
        if status == 416:
            found = _UNSATISFIABLE.fullmatch(response.headers.get("content-range", ""))
            if found is not None and begin == 0 and int(found.group(1)) == 0:
                return 0, b""  # an empty file: no range of it can be satisfied
        if status >= 500 or status == 429:
            raise _Retry(f"HTTP {status}")
        raise _status_error(url, status, response.reason_phrase)

    def _exactly(self, url: str, response: Any, count: int, pace: Pace) -> bytes:
        declared = response.headers.get("content-length")
        if declared is not None and declared.strip() != str(count):
            raise FormatError(
                f"{url}: Content-Length {declared.strip()[:20]} differs from the "
                f"{count} bytes of the range asked for"
            )
        data = self._upto(url, response, count, pace)
        if len(data) != count:
            raise _Retry(f"the response ended after {len(data)} of {count} bytes")
        return data

    def _upto(self, url: str, response: Any, count: int, pace: Pace, why: str = "") -> bytes:
        """The body, read only until it exceeds ``count`` bytes (then FormatError) or
        ``pace`` finds it late (then ``_Late``)."""
        parts = []
        held = 0
        for piece in response.iter_raw():
            held += len(piece)
            self.received += len(piece)
            if held > count:
                raise FormatError(
                    f"{url}: {why}the server sent more than the {count} bytes asked for; "
                    "stopped reading"
                )
            parts.append(piece)
            late = pace.late(len(piece))
            if late is not None and held < count:  # a complete answer is never late
                raise _Late(late)
        return b"".join(parts)


class Pace:
    """The time a request, or a stream of them, may take; checked after each read.

    A bounded request (a header or sampled elements) is late once ``limit`` seconds
    have passed since it started. A stream (the pieces of a tensor read whole, each
    its own request) is late when the last ``limit`` seconds brought fewer than
    ``MIN_RATE * limit`` bytes; it has no overall deadline, and its clock runs only
    while a request is under way (the caller's time between pieces, and the backoff
    before a retry, are not the server's). Either is late when a response's headers are
    not in ``limit`` seconds after its request began (``left``). The window is measured
    from marks taken at most every ``limit / 8`` seconds, so it may stretch to
    ``9/8 * limit``.
    """

    __slots__ = ("_marks", "_since", "_spent", "limit", "received", "streamed")

    def __init__(self, limit: float, streamed: bool) -> None:
        self.limit = limit
        self.streamed = streamed
        self.received = 0
        self._spent = 0.0  # seconds of earlier requests (a stream's clock)
        self._since = time.monotonic()  # when the clock last started
        self._marks = deque([(0.0, 0)])  # (clock, bytes received by then)

    def resume(self) -> None:
        """A request begins: a stream's clock runs again."""
        if self.streamed:
            self._since = time.monotonic()

    def pause(self) -> None:
        """A request ended: a stream's clock stops."""
        if self.streamed:
            self._spent += time.monotonic() - self._since

    def left(self) -> float:
        """Seconds until the current request's response headers are late."""
        return self._since + self.limit - time.monotonic()

    def overdue(self) -> str:
        """Why a request whose answer did not come in time is late."""
        return f"no complete answer within {self.limit:g} s"

    def late(self, count: int) -> str | None:
        """After ``count`` more body bytes: why the request is late, or None."""
        self.received += count
        now = self._spent + time.monotonic() - self._since
        if not self.streamed:
            return self.overdue() if now > self.limit else None
        marks = self._marks
        if now - marks[-1][0] >= self.limit / 8:
            marks.append((now, self.received))
        horizon = now - self.limit
        if horizon < 0:
            return None
        while len(marks) > 1 and marks[1][0] <= horizon:
            marks.popleft()
        floor = MIN_RATE * self.limit
        if self.received - marks[0][1] < floor:
            return f"fewer than {floor:.0f} bytes in {self.limit:g} s"
        return None


class _Late(Exception):
    """A request past its ``Pace`` (a TimeoutError naming the URL)."""


def _send(client: Any, request: Any, pace: Pace) -> Any:
    """``client.send(request)`` for a streamed response, its headers due by ``pace``.

    httpx's timeouts are per read, so a server dripping its status line and headers
    would hold the call for hours; a timer closes the client (this request's alone)
    when they are late, which ends the read within one read timeout.
    """
    left = pace.left()
    if left <= 0:
        raise _Late(pace.overdue())
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        client.close()

    timer = threading.Timer(left, expire)
    timer.daemon = True
    timer.start()
    try:
        response = client.send(request, stream=True)
    except Exception:
        if fired.is_set():
            raise _Late(pace.overdue()) from None
        raise
    finally:
        timer.cancel()
    if fired.is_set():
        response.close()
        raise _Late(pace.overdue())
    return response


def _connect_error(url: str, exc: Exception) -> Exception:
    """What a failed connection becomes: ``_Retry`` when it was dropped (reset) while
    being made; otherwise (refused, no such host, a TLS failure) an OSError at once."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return _Retry(f"connection failed ({type(cause).__name__}: {cause})")
    if isinstance(cause, ConnectionRefusedError):
        return ConnectionRefusedError(errno.ECONNREFUSED, "connection refused", url)
    if isinstance(cause, socket.gaierror):
        return OSError(errno.EIO, f"name lookup failed ({cause.strerror})", url)
    return OSError(errno.EIO, f"cannot connect ({type(exc).__name__}: {exc})", url)


class _Retry(Exception):
    """A failure worth another attempt (5xx, a dropped connection, a short body)."""


def _checked_range(url: str, header: str | None, begin: int, end: int, size: int | None) -> int:
    """The file size a 206's ``Content-Range`` states, checked against the range asked."""
    found = _CONTENT_RANGE.fullmatch((header or "").strip())
    if found is None:
        raise FormatError(f"{url}: 206 response without a valid Content-Range ({header!r:.60})")
    first, last = int(found.group(1)), int(found.group(2))
    if found.group(3) == "*":
        raise FormatError(f"{url}: Content-Range does not state the file size")
    total = int(found.group(3))
    if size is not None and total != size:
        raise FormatError(f"{url}: the file changed size ({size} bytes, now {total})")
    if first != begin or last != min(end, total) - 1 or last < first:
        raise FormatError(
            f"{url}: Content-Range {header!r:.60} differs from the range asked ({begin}-{end - 1})"
        )
    return total


def _status_error(url: str, status: int, reason: str) -> OSError:
    text = f"HTTP {status} {reason}".strip()
    if status in (404, 410):
        return FileNotFoundError(errno.ENOENT, text, url)
    if status in (401, 403):
        return PermissionError(errno.EACCES, text, url)
    return OSError(errno.EIO, text, url)
