"""Which format a file holds: one ordered table of (name, magic, cheap check).

Every format's magic lives here (the readers import theirs from this module), and
``open_checkpoint`` asks this table and nothing else; ``_open`` binds each name to its
opener. A format is recognized from the file's first bytes (and its size), never
from its name. The entries are tried in this order, and the first that accepts wins:

1. ``gguf``: the magic ``GGUF``.
2. ``safetensors``: the framing -- bytes 0-7 a little-endian length ``N`` with
   ``2 <= N <= MAX_HEADER_BYTES`` and ``8 + N <=`` the file size, and byte 8 is ``{``.
   It comes before zip, pickle and JSON because a real header length can begin with
   ``PK\\x03\\x04`` (``N = 0x04034B50``), the byte ``0x80`` (``N % 256 == 128``) or ``{``
   (``N % 256 == 123``); the other formats cannot pass this check (their bytes 0-7 read
   as a length far beyond the cap, or byte 8 is not ``{``).
3. ``zip``: local-file or empty-archive magic; a TorchScript archive when it holds
   ``<folder>/data.pkl``, ``<folder>/constants.pkl`` and ``<folder>/code/`` members, a
   PyTorch archive when it holds ``<folder>/data.pkl``, otherwise ``.npz``.
4. ``npy``: the magic ``\\x93NUMPY``.
5. ``pickle``: ``\\x80`` and a protocol number 2-5 (a legacy ``torch.save`` file).
6. ``json``: optional whitespace then ``{``: a shard index when its first key is
   ``metadata`` or ``weight_map`` (safetensors or PyTorch shards, by the first shard's
   own first bytes), otherwise a strided tensor document.

A folder is a distributed checkpoint when it holds ``DCP_METADATA`` (``.metadata``), the
parts of a split GGUF model when it holds ``*.gguf`` files and no ``*.safetensors``
(``folder_format``), else a set of ``*.safetensors`` shards. A pickle whose first bytes
name ``DCP_MAGIC`` (the module of DCP's ``Metadata`` class) is a distributed
checkpoint's ``.metadata``, and opens its folder. A GGUF file whose ``split.count`` says
it is the first of several parts opens with the other parts. A file no entry accepts is
a FormatError listing what was tried. Caps that bound a whole file (an index) are
checked against the file's size before any of it is read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_SAFETENSORS_HEADER_BYTES

__all__ = [
    "DCP_MAGIC",
    "DCP_METADATA",
    "FORMATS",
    "GGUF_MAGIC",
    "HEAD_BYTES",
    "JSON_SPACE",
    "NPY_MAGIC",
    "PICKLE_PROTO",
    "TORCH_LEGACY_MAGIC",
    "ZIP_EMPTY_MAGIC",
    "ZIP_MAGIC",
    "Format",
    "detect",
    "folder_format",
    "matching",
]

HEAD_BYTES = 16  # what every check may look at
GGUF_MAGIC = b"GGUF"
ZIP_MAGIC = b"PK\x03\x04"  # a local file header: the first member
ZIP_EMPTY_MAGIC = b"PK\x05\x06"  # an end of central directory: an empty archive
NPY_MAGIC = b"\x93NUMPY"
PICKLE_PROTO = 0x80  # the PROTO opcode that starts a pickle of protocol 2 or later
# The first value a legacy (non-zip) torch.save pickle holds.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
JSON_SPACE = b" \t\r\n"
# A distributed checkpoint: the file a folder holds, and what its pickle names first.
DCP_METADATA = ".metadata"
DCP_MAGIC = b"torch.distributed.checkpoint.metadata"
DCP_MAGIC_BYTES = 64  # DCP_MAGIC lies within the first bytes (after PROTO and FRAME)


class Format(NamedTuple):
    """One row of the table: the format's name, its magic (``b""`` for a framing check)
    and ``check(head, size)`` on the first ``HEAD_BYTES`` bytes and the file's size."""

    name: str
    magic: bytes
    check: Callable[[bytes, int], bool]


def _is_gguf(head: bytes, size: int) -> bool:
    return head.startswith(GGUF_MAGIC)


def _is_safetensors(head: bytes, size: int) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack_from("<Q", head)
    return 2 <= length <= MAX_SAFETENSORS_HEADER_BYTES and 8 + length <= size and head[8:9] == b"{"


def _is_zip(head: bytes, size: int) -> bool:
    return head.startswith((ZIP_MAGIC, ZIP_EMPTY_MAGIC))


def _is_npy(head: bytes, size: int) -> bool:
    return head.startswith(NPY_MAGIC)


def _is_pickle(head: bytes, size: int) -> bool:
    return len(head) >= 2 and head[0] == PICKLE_PROTO and 2 <= head[1] <= 5


def _is_json(head: bytes, size: int) -> bool:
    return head.lstrip(JSON_SPACE).startswith(b"{")


FORMATS: tuple[Format, ...] = (
    Format("gguf", GGUF_MAGIC, _is_gguf),
    Format("safetensors", b"", _is_safetensors),
    Format("zip", ZIP_MAGIC, _is_zip),
    Format("npy", NPY_MAGIC, _is_npy),
    Format("pickle", bytes([PICKLE_PROTO]), _is_pickle),
    Format("json", b"{", _is_json),
)


def matching(head: bytes, size: int) -> Format | None:
    """The first table entry that accepts ``head`` and ``size``, or None."""
    for entry in FORMATS:
        if entry.check(head, size):
            return entry
    return None


def detect(head: bytes, size: int, where: str) -> Format:
    """The first table entry that accepts a file's first bytes; FormatError for none.

    ``head`` is the file's first ``HEAD_BYTES`` bytes (fewer for a shorter file) and
    ``size`` its size in bytes.
    """
    found = matching(head[:HEAD_BYTES], size)
    if found is None:
        _refuse_safetensors_framing(head, size, where)
        _refuse_safetensors_framing(head, size, where)
        tried = ", ".join(entry.name for entry in FORMATS)
        raise FormatError(
            f"{where}: not a checkpoint strided recognizes (first bytes {head[:8]!r}; "
            f"tried {tried})"
        )
    return found


def folder_format(names: list[str]) -> str:
    """The format of a folder holding the files ``names``: ``"gguf"`` for GGUF parts
    (``*.gguf`` files and no ``*.safetensors``), else ``"safetensors"`` (shards)."""
    gguf = any(name.endswith(".gguf") for name in names)
    safetensors = any(name.endswith(".safetensors") for name in names)
    return "gguf" if gguf and not safetensors else "safetensors"


def _refuse_safetensors_framing(head: bytes, size: int, where: str) -> None:
    """Name the problem of a file framed as safetensors (byte 8 is ``{``) that fails the
    framing check: a header length past the cap (LimitError) or past the end of the file.
    """
    if len(head) < 9 or head[8:9] != b"{":
        return
    (length,) = struct.unpack_from("<Q", head)
    if length > MAX_SAFETENSORS_HEADER_BYTES:
        raise LimitError(
            f"{where}: safetensors header length {length} exceeds the cap of "
            f"{MAX_SAFETENSORS_HEADER_BYTES} bytes"
        )
    if 8 + length > size:
        raise FormatError(
            f"{where}: safetensors header length {length} runs past the end of the {size}-byte file"
        )
