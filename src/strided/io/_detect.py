"""Which format a file holds: one ordered table of (name, cheap check, opener).

Every checkpoint reader registers here, and ``open_checkpoint`` asks this table and
nothing else. A format is recognized from the file's first bytes (and its size), never
from its name. The entries are tried in this order, and the first that accepts wins:

1. ``gguf``: the magic ``GGUF``.
2. ``safetensors``: the framing -- bytes 0-7 a little-endian length ``N`` with
   ``2 <= N <= MAX_HEADER_BYTES`` and ``8 + N <=`` the file size, and byte 8 is ``{``.
   It comes before zip, pickle and JSON because a real header length can begin with
   ``PK\\x03\\x04`` (``N = 0x04034B50``), the byte ``0x80`` (``N % 256 == 128``) or ``{``
   (``N % 256 == 123``); the other formats cannot pass this check (their bytes 0-7 read
   as a length far beyond the cap, or byte 8 is not ``{``).
3. ``zip``: local-file or empty-archive magic; a PyTorch archive when it holds
   ``<folder>/data.pkl``, otherwise ``.npz``.
4. ``npy``: the magic ``\\x93NUMPY``.
5. ``pickle``: ``\\x80`` and a protocol number 2-5 (a legacy ``torch.save`` file).
6. ``json``: optional whitespace then ``{``: a shard index when its first key is
   ``metadata`` or ``weight_map`` (safetensors or PyTorch shards, by the first shard's
   own first bytes), otherwise a strided tensor document.

A folder is a set of ``*.safetensors`` shards. A file no entry accepts is a FormatError
listing what was tried. Caps that bound a whole file (an index) are checked against the
file's size before any of it is read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .._core.errors import FormatError
from .._core.shape import Shape
from .._kernels.strict_json import loads_strict
from .._tensor.tensor import Tensor
from ._budget import ParseBudget
from ._common import MAX_INDEX_BYTES, check_index_size, file_size, map_file, open_regular
from ._safetensors_header import MAX_HEADER_BYTES
from ._zip import DEFLATED, STORED, read_zip
from .gguf import open_gguf
from .npy import load_npy
from .npz import open_npz
from .pytorch import open_pytorch
from .safetensors import SafetensorsFile, _index_shards, _Shard, open_safetensors

__all__ = [
    "FORMATS",
    "HEAD_BYTES",
    "Format",
    "Opened",
    "SingleReader",
    "detect",
    "open_detected",
]

HEAD_BYTES = 16  # what every check may look at
_INDEX_KEYS = (b'"metadata"', b'"weight_map"')
_JSON_SPACE = b" \t\r\n"
_FIRST_KEY_BYTES = 4096  # whitespace allowed before an index's first key


class Opened(NamedTuple):
    """What an opener returns: the format's name for the door, and its reader."""

    kind: str
    reader: Any


class Format(NamedTuple):
    """One row of the table: ``check(head, size)`` on the first bytes, then ``open``."""

    name: str
    check: Callable[[bytes, int], bool]
    open: Callable[[str, bool, ParseBudget], Opened]


def _is_gguf(head: bytes, size: int) -> bool:
    return head.startswith(b"GGUF")


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack_from("<Q", head)
    return 2 <= length <= MAX_HEADER_BYTES and 8 + length <= size and head[8:9] == b"{"


def _is_zip(head: bytes, size: int) -> bool:
    return head.startswith((b"PK\x03\x04", b"PK\x05\x06"))


def _is_npy(head: bytes, size: int) -> bool:
    return head.startswith(b"\x93NUMPY")


def _is_pickle(head: bytes, size: int) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _is_json(head: bytes, size: int) -> bool:
    return head.lstrip(_JSON_SPACE).startswith(b"{")


# -- openers -----------------------------------------------------------------------------


def _open_gguf(where: str, copy: bool, budget: ParseBudget) -> Opened:
    return Opened("gguf", open_gguf(where, copy=copy, budget=budget))


def _open_safetensors(where: str, copy: bool, budget: ParseBudget) -> Opened:
    return Opened("safetensors", SafetensorsFile(where, [_Shard(where, budget)], copy))


def _open_zip(where: str, copy: bool, budget: ParseBudget) -> Opened:
    with open_regular(where) as file:
        raw = map_file(file, file_size(file), where)
    members = read_zip(raw, where, methods=frozenset({STORED, DEFLATED}))
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in members):
        return _open_pickle(where, copy, budget)
    return Opened("npz", open_npz(where, copy))


def _open_npy(where: str, copy: bool, budget: ParseBudget) -> Opened:
    return Opened("npy", SingleReader(Path(where).stem, load_npy(where, copy=copy)))


def _open_pickle(where: str, copy: bool, budget: ParseBudget) -> Opened:
    return Opened("pytorch", open_pytorch(where, copy, budget=budget))


def _open_json(where: str, copy: bool, budget: ParseBudget) -> Opened:
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(_FIRST_KEY_BYTES)
        if not _is_index(head):
            # A strided tensor document: its parser bounds the work by the text's size.
            data = head + file.read()
            return Opened("json", SingleReader(Path(where).stem, Tensor.from_json(data)))
    check_index_size(size, where)  # at the file's size, before the index is read
    if _first_shard_format(where) == "pickle":
        return Opened("pytorch", open_pytorch(where, copy, budget=budget))
    return Opened("safetensors", SafetensorsFile(where, _index_shards(where, budget), copy))


def _is_index(head: bytes) -> bool:
    """Whether a JSON text's first key is one only a shard index has."""
    body = head.lstrip(_JSON_SPACE)[1:].lstrip(_JSON_SPACE)
    return body.startswith(_INDEX_KEYS)


def _first_shard_format(index: str) -> str:
    """The table's name for the format of the index's first shard (by its first bytes).

    ``"safetensors"`` when the shard cannot be found or read: the safetensors index
    reader then validates the whole index and every shard and names the problem.
    """
    with open_regular(index) as file:
        parsed = loads_strict(file.read(MAX_INDEX_BYTES + 1), index, 16)
    shards = parsed.get("weight_map") if type(parsed) is dict else None
    first = next(iter(shards.values()), None) if type(shards) is dict else None
    if type(first) is not str or os.path.basename(first) != first or first in ("", ".", ".."):
        return "safetensors"
    try:
        with open_regular(os.path.join(os.path.dirname(index), first)) as file:
            size = file_size(file)
            head = file.read(HEAD_BYTES)
    except OSError:
        return "safetensors"
    found = _matching(head, size)
    return "pickle" if found is not None and found.name in ("zip", "pickle") else "safetensors"


FORMATS: tuple[Format, ...] = (
    Format("gguf", _is_gguf, _open_gguf),
    Format("safetensors", _is_safetensors, _open_safetensors),
    Format("zip", _is_zip, _open_zip),
    Format("npy", _is_npy, _open_npy),
    Format("pickle", _is_pickle, _open_pickle),
    Format("json", _is_json, _open_json),
)


def _matching(head: bytes, size: int) -> Format | None:
    for entry in FORMATS:
        if entry.check(head, size):
            return entry
    return None


def detect(head: bytes, size: int, where: str) -> Format:
    """The first table entry that accepts a file's first bytes; FormatError for none.

    ``head`` is the file's first ``HEAD_BYTES`` bytes (fewer for a shorter file) and
    ``size`` its size in bytes.
    """
    found = _matching(head[:HEAD_BYTES], size)
    if found is None:
        tried = ", ".join(entry.name for entry in FORMATS)
        raise FormatError(
            f"{where}: not a checkpoint strided recognizes (first bytes {head[:8]!r}; "
            f"tried {tried})"
        )
    return found


def open_detected(where: str, copy: bool, budget: ParseBudget) -> Opened:
    """Open a local file or folder with the reader the table picks for it.

    A folder is a set of ``*.safetensors`` shards. A path that cannot be opened raises
    its OSError unchanged; content the chosen reader refuses is its DataError.
    """
    if os.path.isdir(where):
        return Opened("safetensors", open_safetensors(where, copy))
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(HEAD_BYTES)
    return detect(head, size, where).open(where, copy, budget)


class SingleReader:
    """One tensor already in hand (``.npy``, a strided JSON document), named ``name``."""

    __slots__ = ("name", "tensor")

    def __init__(self, name: str, tensor: Tensor) -> None:
        self.name = name
        self.tensor = tensor

    @property
    def metadata(self) -> dict[str, Any]:
        """Always empty: these files carry no metadata."""
        return {}

    def keys(self) -> list[str]:
        """The one name."""
        return [self.name]

    def info(self, name: str) -> tuple[str, Shape]:
        """The tensor's dtype name and shape."""
        return self.tensor.dtype.name, self.tensor.shape

    def get(self, name: str) -> Tensor:
        """The tensor (the one name is checked by the caller)."""
        return self.tensor

    def close(self) -> None:
        """Nothing to release."""
