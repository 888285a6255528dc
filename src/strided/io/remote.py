"""Remote checkpoints: safetensors files, shard indexes and GGUF files read over HTTP(S).

The same parsers as for local files read the headers, through a ``RemoteStorage``
that fetches byte ranges (``_http.Connection``): the first request asks for
``PROBE_BYTES`` (the format's magic, the file size from ``Content-Range``, and often
the whole header); a safetensors header length is checked against the cap before the
header is asked for; a GGUF header is fetched as it is parsed, each length checked
against the caps and the file size first. Tensors are then read by range:
``span`` fetches exactly a tensor's bytes, ``units`` only the sampled elements or
blocks (nearby ones coalesced into one request), ``chunks`` streams a range in
bounded pieces. Tensors of a remote file are copies in memory, as with ``copy=True``.
Header and sample requests have an overall deadline; the pieces ``span`` and ``chunks``
stream are held together to a minimum rate instead (``_http.Pace``).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin

import numpy as np

from .._core.shape import Shape
from .._core.storage import seal
from .._tensor.inspect import inspection, sample_positions
from . import _http
from ._common import check_index_size, check_shard, parse_index
from ._http import Connection
from ._safetensors_header import parse_header
from .gguf import GGUFFile, _Reader, parse_gguf
from .safetensors import SafetensorsFile, _Shard

if TYPE_CHECKING:
    from .._core.dtype import DType
    from .._tensor.inspect import TensorInspection, TensorInspectionOptions

__all__ = ["PROBE_BYTES", "RemoteStorage", "open_remote", "remote_gguf", "remote_safetensors"]

PROBE_BYTES = 1 << 12
# Sampled pieces closer than this are fetched in one request (fewer round trips),
# and one such request spans at most _MAX_RUN bytes.
_GAP_BYTES = 1 << 10
_MAX_RUN = 1 << 20
_SHARD_THREADS = 8


class RemoteStorage:
    """The bytes of one remote file (see ``_storage.Storage``), its first bytes kept."""

    __slots__ = ("_head", "_size", "connection", "url", "where")

    def __init__(self, connection: Connection, url: str, size: int, head: bytes) -> None:
        self.connection = connection
        self.url = url
        self.where = url
        self._size = size
        self._head = head

    @property
    def size(self) -> int:
        """The file's size in bytes (from the first response)."""
        return self._size

    def read(self, begin: int, end: int, stream: _http.Pace | None = None) -> bytes:
        """Bytes ``[begin, end)`` (within the file): the kept first bytes, then requests.

        A request has an overall deadline, or is the next piece of ``stream``
        (``_http.Connection.read``).
        """
        held = len(self._head)
        if end <= held:
            return self._head[begin:end]
        fetch = self.connection.read
        if begin < held:
            return self._head[begin:] + fetch(self.url, held, end, self._size, stream)
        return fetch(self.url, begin, end, self._size, stream)

    def span(self, begin: int, end: int) -> np.ndarray[Any, Any]:
        """Bytes ``[begin, end)`` fetched into one new read-only buffer of that size."""
        owned = np.empty(end - begin, dtype=np.uint8)
        position = 0
        for piece in self.chunks(begin, end):
            owned[position : position + piece.size] = piece
            position += piece.size
        return seal(owned)

    def units(self, begin: int, unit: int, indices: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The ``unit``-byte pieces at ``indices`` (sorted, unique), nearby ones in one request."""
        out = np.empty((indices.size, unit), dtype=np.uint8)
        for first, last in _runs(indices.tolist(), unit):
            low, high = int(indices[first]), int(indices[last - 1]) + 1
            data = self.read(begin + low * unit, begin + high * unit)
            rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, unit)
            out[first:last] = rows[indices[first:last] - low]
        return out

    def chunks(self, begin: int, end: int) -> Iterator[np.ndarray[Any, Any]]:
        """Bytes ``[begin, end)`` in pieces of at most ``STREAM_CHUNK`` bytes, each its own
        range request (at most one piece is held; a dropped connection costs one piece).

        The pieces are one stream: a slow server is abandoned when it falls below
        ``_http.MIN_RATE``, however long the whole range takes."""
        step = _http.STREAM_CHUNK
        stream = self.connection.stream()
        for start in range(begin, end, step):
            piece = self.read(start, min(start + step, end), stream)
            yield np.frombuffer(piece, dtype=np.uint8)

    def inspect(
        self, begin: int, dims: tuple[int, ...], dtype: DType, options: TensorInspectionOptions
    ) -> TensorInspection:
        """The tensor's inspection, fetching only the sampled elements.

        Layout facts are those of the local file's zero-copy view (``storage_byte_len``
        is the file's size), so a remote and a local inspection are equal.
        """
        shape = Shape._trusted(dims)
        positions = sample_positions(options, shape.numel)
        values = self.units(begin, dtype.itemsize, positions).reshape(-1).view(dtype.numpy)
        # The layout facts of the tensor as the file opened locally gives it.
        layout = (shape.strides(), shape.numel * dtype.itemsize, self._size, True)
        return inspection(dtype, shape, positions, values, layout)

    def close(self) -> None:
        """Close the checkpoint's HTTP client (shared by its shards)."""
        self.connection.close()


def _runs(indices: list[int], unit: int) -> Iterator[tuple[int, int]]:
    """``[first, last)`` slices of ``indices`` fetched together: gaps of at most
    ``_GAP_BYTES``, at most ``_MAX_RUN`` bytes (or one piece) per request."""
    first = 0
    for at in range(1, len(indices) + 1):
        if at == len(indices):
            yield first, at
            break
        gap = (indices[at] - indices[at - 1] - 1) * unit
        if gap > _GAP_BYTES or (indices[at] + 1 - indices[first]) * unit > _MAX_RUN:
            yield first, at
            first = at


class _RangeFile:
    """A read-only file object over a remote file: what the local parsers read from."""

    def __init__(self, storage: RemoteStorage) -> None:
        self.storage = storage
        self.pos = 0

    def read(self, count: int) -> bytes:
        end = min(self.pos + count, self.storage.size)
        data = self.storage.read(self.pos, end)
        self.pos = end
        return data


def open_remote(
    url: str, token: str | None = None, timeout: float | tuple[float, float] | None = None
) -> RemoteStorage:
    """The remote file at ``url`` after its first range request (size and first bytes).

    The storage's connection is the checkpoint's: closing the storage closes it.
    """
    connection = Connection(url, token, timeout)
    try:
        size, head = connection.probe(url, PROBE_BYTES)
    except BaseException:
        connection.close()
        raise
    return RemoteStorage(connection, url, size, head)


def remote_safetensors(storage: RemoteStorage, index: bool) -> SafetensorsFile:
    """A safetensors file, or (``index``) the shards a ``*.safetensors.index.json`` names.

    Shard URLs are the index's file names resolved relative to the index URL.
    """

    url = storage.url
    if not index:
        return SafetensorsFile(url, [_shard(storage)])
    check_index_size(storage.size, url)
    expected = parse_index(storage.read(0, storage.size), url)

    def open_shard(shard_name: str) -> Any:
        shard_url = urljoin(url, quote(shard_name))
        size, head = storage.connection.probe(shard_url, PROBE_BYTES)
        shard = _shard(RemoteStorage(storage.connection, shard_url, size, head))
        check_shard(url, shard_name, set(shard.entries), expected[shard_name])
        return shard

    # Headers of many shards (a 191-shard checkpoint) are fetched a few at a time;
    # the first failing shard in name order is the error reported.
    with ThreadPoolExecutor(_SHARD_THREADS) as pool:
        shards = list(pool.map(open_shard, sorted(expected)))
    return SafetensorsFile(url, shards)


def _shard(storage: RemoteStorage) -> Any:

    file: Any = _RangeFile(storage)
    entries, metadata = parse_header(file, storage.size, storage.url)
    return _Shard.of(storage.url, storage, entries, metadata)


def remote_gguf(storage: RemoteStorage) -> GGUFFile:
    """A GGUF file, its header fetched in bounded steps as it is parsed."""

    reader = _Reader(storage._head, storage.size, storage.url, storage.read)
    version, metadata, tensors = parse_gguf(reader)
    return GGUFFile(storage.url, version, metadata, tensors, storage)
