"""Hand-built zip archives for tests: every field can be made to lie.

``build`` writes local headers and data in order, then the central directory, an
optional zip64 end record and locator, and the end record. ``Entry`` fields left as
``None`` take the honest value; set them to craft a disagreement.
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

__all__ = ["Ends", "Entry", "bomb", "build", "deflate_raw", "zip64_extra"]


def deflate_raw(content: bytes, level: int = 6) -> bytes:
    """``content`` as a raw deflate stream (what zip method 8 stores)."""
    encoder = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return encoder.compress(content) + encoder.flush()


@dataclass
class Entry:
    """One member; ``content`` is the uncompressed bytes."""

    name: str
    content: bytes = b""
    method: int = 0
    flags: int = 0
    data: bytes | None = None  # the stored (compressed) bytes; default from content
    crc: int | None = None
    size: int | None = None  # central uncompressed size
    csize: int | None = None  # central compressed size
    offset: int | None = None  # central local-header offset
    central_extra: bytes = b""
    local_name: bytes | None = None
    local_method: int | None = None
    local_flags: int | None = None
    local_extra: bytes = b""
    disk: int = 0
    raw_name: bytes | None = None  # central name bytes; default name encoded

    def stored(self) -> bytes:
        if self.data is not None:
            return self.data
        return deflate_raw(self.content) if self.method == 8 else self.content


@dataclass
class _Written:
    entry: Entry
    offset: int
    stored: bytes


@dataclass
class Ends:
    """Overrides for the end records (None = honest)."""

    count: int | None = None
    disk_count: int | None = None
    cd_size: int | None = None
    cd_start: int | None = None
    disk: int = 0
    cd_disk: int = 0
    comment: bytes = b""
    zip64: bool = False
    zip64_count: int | None = None
    zip64_cd_size: int | None = None
    zip64_cd_start: int | None = None
    zip64_rest: int = 44
    locator_offset: int | None = None
    locator_disks: int = 1


def _name_bytes(entry: Entry) -> bytes:
    if entry.raw_name is not None:
        return entry.raw_name
    return entry.name.encode("utf-8")


def build(entries: list[Entry], ends: Ends | None = None, prefix: bytes = b"") -> bytes:
    """The archive: ``prefix``, local headers + data, directory, end records."""
    ends = ends or Ends()
    out = bytearray(prefix)
    written = []
    for entry in entries:
        stored = entry.stored()
        name = entry.local_name if entry.local_name is not None else _name_bytes(entry)
        crc = zlib.crc32(entry.content) if entry.crc is None else entry.crc
        written.append(_Written(entry, len(out), stored))
        out += struct.pack(
            "<I5H3I2H",
            0x04034B50,
            20,
            entry.flags if entry.local_flags is None else entry.local_flags,
            entry.method if entry.local_method is None else entry.local_method,
            0,
            0,
            crc,
            min(len(stored), 0xFFFFFFFF),
            min(len(entry.content), 0xFFFFFFFF),
            len(name),
            len(entry.local_extra),
        )
        out += name + entry.local_extra + stored
    cd_start = len(out)
    for item in written:
        entry = item.entry
        name = _name_bytes(entry)
        out += struct.pack(
            "<I6H3I5H2I",
            0x02014B50,
            20,
            20,
            entry.flags,
            entry.method,
            0,
            0,
            zlib.crc32(entry.content) if entry.crc is None else entry.crc,
            len(item.stored) if entry.csize is None else entry.csize,
            len(entry.content) if entry.size is None else entry.size,
            len(name),
            len(entry.central_extra),
            0,
            entry.disk,
            0,
            0,
            item.offset if entry.offset is None else entry.offset,
        )
        out += name + entry.central_extra
    cd_size = len(out) - cd_start
    count = len(entries)
    if ends.zip64:
        record = len(out)
        out += struct.pack(
            "<IQHHIIQQQQ",
            0x06064B50,
            ends.zip64_rest,
            45,
            45,
            0,
            0,
            count if ends.zip64_count is None else ends.zip64_count,
            count if ends.zip64_count is None else ends.zip64_count,
            cd_size if ends.zip64_cd_size is None else ends.zip64_cd_size,
            cd_start if ends.zip64_cd_start is None else ends.zip64_cd_start,
        )
        out += b"\0" * (ends.zip64_rest - 44)
        locator = record if ends.locator_offset is None else ends.locator_offset
        out += struct.pack("<IIQI", 0x07064B50, 0, locator, ends.locator_disks)
    total = count if ends.count is None else ends.count
    out += struct.pack(
        "<IHHHHIIH",
        0x06054B50,
        ends.disk,
        ends.cd_disk,
        min(total if ends.disk_count is None else ends.disk_count, 0xFFFF),
        min(total, 0xFFFF),
        min(cd_size if ends.cd_size is None else ends.cd_size, 0xFFFFFFFF),
        min(cd_start if ends.cd_start is None else ends.cd_start, 0xFFFFFFFF),
        len(ends.comment),
    )
    out += ends.comment
    return bytes(out)


def zip64_extra(*values: int, widths: tuple[int, ...] | None = None) -> bytes:
    """A zip64 extra field holding ``values`` (8 bytes each unless ``widths`` says)."""
    widths = widths or (8,) * len(values)
    payload = b"".join(v.to_bytes(w, "little") for v, w in zip(values, widths, strict=True))
    return struct.pack("<HH", 1, len(payload)) + payload


def _segment(content: bytes) -> bytes:
    # A self-contained, byte-aligned run of non-final blocks (a full flush forgets the
    # window), so copies of it can be concatenated into one valid stream.
    encoder = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return encoder.compress(content) + encoder.flush(zlib.Z_FULL_FLUSH)


@functools.cache
def bomb(size: int = 1 << 30, head: bytes = b"") -> bytes:
    """A raw deflate stream of ``head`` then zeros, ``size`` bytes in all, about 1 MB."""
    chunk = 1 << 20
    left = size - len(head)
    if left % chunk:
        raise ValueError("size - len(head) must be a multiple of 1 MiB")
    # The final block: an empty fixed-Huffman block with BFINAL set.
    return _segment(head) + _segment(bytes(chunk)) * (left // chunk) + b"\x03\x00"
