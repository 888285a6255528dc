"""A bounded reader of zip archives (PyTorch zip checkpoints, NumPy ``.npz``).

Only the central directory is trusted for sizes and checksums, and only after it has
been validated against the file:

* the end-of-central-directory record is searched for backwards over at most the
  last 65,557 bytes (22 bytes of record and a comment of at most 65,535), and exactly
  one candidate may end precisely at the end of the file;
* a zip64 locator and record, when present, must lie where the format puts them and
  agree with every field the classic record does not mark as overflowing (0xFFFF or
  0xFFFFFFFF);
* the central directory must lie inside the file, end exactly where the records after
  it begin, and its entry count is checked against the bytes it needs (46 per entry)
  and a cap before anything is sized by it;
* multi-disk archives, encrypted members (flag bit 0 or 6, method 99, an encrypted
  directory) and compression methods the caller did not allow are refused;
* every member's local header must carry the signature, name and method of its
  central entry; its data (and the local header) must lie before the central
  directory and must not overlap any other member's; names must be unique.

Local headers are not trusted for sizes or CRCs (``torch.save`` writes zeros there and
a data descriptor after the data; ``np.savez`` writes zip64 placeholders). Deflated
members are inflated into exactly the number of bytes the caller expects, in bounded
chunks, and must end there and match the central directory's size and CRC; or, for a
few scattered bytes, only up to the last byte wanted (``inflate_gather``).

Every problem is a FormatError (LimitError for a cap) whose message starts with the
``where`` label the caller passes. The ``zipfile`` module is never used for reading.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_DEFLATE_RATIO as _MAX_RATIO
from .._core.limits import MAX_ZIP_MEMBERS as MAX_MEMBERS
from .._core.limits import MAX_ZIP_NAME_BYTES as MAX_NAME_BYTES
from .._core.storage import seal
from ._detect import ZIP_EMPTY_MAGIC, ZIP_MAGIC

__all__ = [
    "MAX_MEMBERS",
    "MAX_NAME_BYTES",
    "ZipMember",
    "inflate",
    "inflate_gather",
    "inflate_head",
    "read_zip",
    "stored_bytes",
]

STORED = 0
DEFLATED = 8

_EOCD = struct.Struct("<IHHHHIIH")  # 22 bytes
_LOCATOR = struct.Struct("<IIQI")  # 20 bytes
_EOCD64 = struct.Struct("<IQHHIIQQQQ")  # 56 bytes
_CENTRAL = struct.Struct("<I6H3I5H2I")  # 46 bytes
_LOCAL = struct.Struct("<I5H3I2H")  # 30 bytes
_EOCD_SIG = int.from_bytes(ZIP_EMPTY_MAGIC, "little")  # 0x06054B50
_LOCATOR_SIG = 0x07064B50
_EOCD64_SIG = 0x06064B50
_CENTRAL_SIG = 0x02014B50
_LOCAL_SIG = int.from_bytes(ZIP_MAGIC, "little")  # 0x04034B50
_ZIP64_EXTRA = 0x0001
_MAX_COMMENT = 0xFFFF
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
# Flag bits: 0 encrypted, 6 strong encryption, 11 UTF-8 names, 13 encrypted directory.
_ENCRYPTED_FLAGS = (1 << 0) | (1 << 6) | (1 << 13)
_UTF8_FLAG = 1 << 11
_AES_METHOD = 99
_METHOD_NAMES = {STORED: "stored", DEFLATED: "deflate", _AES_METHOD: "AES-encrypted"}
_IN_CHUNK = 1 << 20
_OUT_CHUNK = 1 << 22


@dataclass(frozen=True, slots=True)
class ZipMember:
    """One member of a validated archive, as its central directory describes it.

    ``name`` is decoded (UTF-8 when the entry says so, code page 437 otherwise);
    ``method`` is 0 (stored) or 8 (deflated); ``data_offset`` is the absolute offset in
    the file of its (possibly compressed) data, just after the local header;
    ``compressed_size``, ``size`` (uncompressed) and ``crc32`` come from the central
    directory or its zip64 extra field.
    """

    name: str
    method: int
    data_offset: int
    compressed_size: int
    size: int
    crc32: int


@dataclass(frozen=True, slots=True)
class _Directory:
    """Where the central directory is, per the end records (already validated)."""

    start: int
    size: int
    count: int


def read_zip(
    raw: np.ndarray[Any, Any], where: str, *, methods: frozenset[int] = frozenset({STORED})
) -> dict[str, ZipMember]:
    """The members of the zip archive ``raw``, in central-directory order.

    ``raw`` is the whole file as a flat contiguous read-only uint8 array (as
    ``map_file`` gives it); ``where`` labels every message. Only compression methods in
    ``methods`` are accepted (stored by default). Anything malformed, inconsistent,
    encrypted, multi-disk, overlapping or duplicated is a FormatError; more than
    ``MAX_MEMBERS`` members or ``MAX_NAME_BYTES`` of names a LimitError. Only the
    names and the last 65,557 bytes (searched for the end record) are copied out of
    ``raw``; member data is never read.
    """
    view = raw.data
    directory = _find_directory(view, where)
    members: dict[str, ZipMember] = {}
    spans: list[tuple[int, int, str]] = []
    pos = directory.start
    end = directory.start + directory.size
    name_bytes = 0
    for index in range(directory.count):
        member, raw_name, header_offset, pos = _central_entry(view, pos, end, index, where)
        name_bytes += len(raw_name)
        if name_bytes > MAX_NAME_BYTES:
            raise LimitError(f"{where}: member names exceed the cap of {MAX_NAME_BYTES} bytes")
        if member.name in members:
            raise FormatError(f"{where}: member name {_shown(member.name)} appears twice")
        _check_method(member, methods, where)
        data_offset = _check_local(view, member, raw_name, header_offset, directory.start, where)
        member = replace(member, data_offset=data_offset)
        members[member.name] = member
        spans.append((header_offset, member.data_offset + member.compressed_size, member.name))
    if pos != end:
        raise FormatError(
            f"{where}: the central directory holds {end - pos} bytes after its "
            f"{directory.count} entries"
        )
    _check_no_overlap(spans, where)
    return members


def stored_bytes(raw: np.ndarray[Any, Any], member: ZipMember) -> np.ndarray[Any, Any]:
    """The data of a stored member: a zero-copy read-only uint8 slice of ``raw``.

    A member of another method is a FormatError (its bytes are not its content).
    """
    if member.method != STORED:
        raise FormatError(f"member {_shown(member.name)} is compressed, not stored")
    return raw[member.data_offset : member.data_offset + member.size]


def inflate(
    raw: np.ndarray[Any, Any], member: ZipMember, expected: int, where: str
) -> np.ndarray[Any, Any]:
    """A deflated member's content: exactly ``expected`` bytes in a new read-only array.

    ``expected`` must equal the central directory's size, and must be reachable from
    the compressed size (deflate expands at most 1032-fold), before anything is
    allocated. The stream is inflated in bounded chunks and never past ``expected``
    bytes. A stream that is corrupt, ends early, goes on longer, has bytes after its
    end, or whose CRC-32 differs from the central directory's is a FormatError.
    """
    if member.method != DEFLATED:
        raise FormatError(f"{where}: member is not deflated (method {member.method})")
    if expected != member.size:
        raise FormatError(
            f"{where}: the content should be {expected} bytes, the zip directory says {member.size}"
        )
    if expected > member.compressed_size * _MAX_RATIO:
        raise FormatError(
            f"{where}: {member.compressed_size} deflated bytes cannot expand to {expected}"
        )
    try:
        out = np.empty(expected, dtype=np.uint8)
    except MemoryError:
        raise LimitError(f"{where}: {expected} bytes do not fit in memory") from None
    stream = _Inflater(raw, member, where)
    filled = 0
    crc = 0
    for piece in stream.pieces(expected):
        out[filled : filled + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
        filled += len(piece)
        crc = zlib.crc32(piece, crc)
    if filled != expected:
        raise FormatError(f"{where}: the deflate stream ends after {filled} of {expected} bytes")
    stream.finish()
    if crc != member.crc32:
        raise FormatError(
            f"{where}: CRC-32 {crc:08x} of the content differs from the zip directory's "
            f"{member.crc32:08x}"
        )
    return seal(out)


def inflate_head(raw: np.ndarray[Any, Any], member: ZipMember, limit: int, where: str) -> bytes:
    """At most the first ``limit`` bytes of a deflated member (fewer if the stream ends).

    For reading a header before the full size is known; nothing past ``limit`` is
    inflated. A corrupt stream is a FormatError; the CRC is checked by ``inflate``.
    """
    if member.method != DEFLATED:
        raise FormatError(f"{where}: member is not deflated (method {member.method})")
    return b"".join(_Inflater(raw, member, where).pieces(limit))


def inflate_gather(
    raw: np.ndarray[Any, Any], member: ZipMember, offsets: np.ndarray[Any, Any], where: str
) -> np.ndarray[Any, Any]:
    """The bytes at ``offsets`` of a deflated member's content, in a new uint8 array.

    ``offsets`` is a flat int64 array, increasing (repeats allowed), each below the
    central directory's size (FormatError otherwise). The stream is inflated in bounded
    chunks only up to the byte at the last offset, then abandoned: memory stays at one
    chunk plus the result whatever the member's size, and the time is that of inflating
    the prefix. Because the rest of the stream is never read, its CRC-32 cannot be
    checked (``inflate`` checks it); a corrupt stream, or one that ends before the last
    offset, is a FormatError.
    """
    if member.method != DEFLATED:
        raise FormatError(f"{where}: member is not deflated (method {member.method})")
    out = np.empty(offsets.size, dtype=np.uint8)
    if not offsets.size:
        return out
    stop = int(offsets[-1]) + 1
    if int(offsets[0]) < 0 or stop > member.size:
        raise FormatError(f"{where}: byte {stop - 1} is past the member's {member.size} bytes")
    done = 0
    start = 0  # content offset of the current piece's first byte
    for piece in _Inflater(raw, member, where).pieces(stop):
        end = start + len(piece)
        upto = done + int(np.searchsorted(offsets[done:], end))
        if upto > done:
            chunk = np.frombuffer(piece, dtype=np.uint8)
            out[done:upto] = chunk[offsets[done:upto] - start]
            done = upto
        start = end
    if done != offsets.size:
        raise FormatError(
            f"{where}: the deflate stream ends after {start} bytes, before byte {stop - 1}"
        )
    return out


class _Inflater:
    """A raw deflate stream over a member's compressed bytes, inflated on demand."""

    __slots__ = ("_decoder", "_pending", "_pos", "_source", "_where")

    def __init__(self, raw: np.ndarray[Any, Any], member: ZipMember, where: str) -> None:
        start = member.data_offset
        self._source = raw.data[start : start + member.compressed_size]
        self._pos = 0
        self._pending: bytes | memoryview = b""
        self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
        self._where = where

    def _feed(self, limit: int) -> bytes:
        # One bounded step: at most ``limit`` (> 0) bytes out, at most one chunk in.
        if not self._pending and self._pos < len(self._source):
            self._pending = self._source[self._pos : self._pos + _IN_CHUNK]
            self._pos += len(self._pending)
        try:
            piece = self._decoder.decompress(self._pending, limit)
        except zlib.error as exc:
            raise FormatError(f"{self._where}: corrupt deflate stream ({exc})") from None
        self._pending = self._decoder.unconsumed_tail
        return piece

    def _stalled(self, piece: bytes) -> bool:
        return not piece and not self._pending and self._pos >= len(self._source)

    def pieces(self, count: int) -> Iterator[bytes]:
        """Output pieces totalling at most ``count`` bytes; stops early at the stream's end."""
        produced = 0
        while produced < count and not self._decoder.eof:
            piece = self._feed(min(_OUT_CHUNK, count - produced))
            if self._stalled(piece):
                return
            produced += len(piece)
            if piece:
                yield piece

    def finish(self) -> None:
        """Check the stream ends here: no more output, no bytes after its end."""
        while not self._decoder.eof:
            piece = self._feed(1)
            if piece:
                raise FormatError(f"{self._where}: the deflate stream holds more bytes")
            if not self._decoder.eof and self._stalled(piece):
                raise FormatError(f"{self._where}: the deflate stream is truncated")
        if self._decoder.unused_data or self._pending or self._pos < len(self._source):
            raise FormatError(f"{self._where}: bytes follow the end of the deflate stream")


# -- end records ------------------------------------------------------------------------


def _find_directory(view: memoryview, where: str) -> _Directory:
    size = len(view)
    eocd = _find_eocd(view, where)
    (_, disk, cd_disk, disk_count, count, cd_size, cd_start, _) = _EOCD.unpack_from(view, eocd)
    if disk != 0 or cd_disk != 0 or disk_count != count:
        raise FormatError(f"{where}: multi-disk zip archives are not supported")
    records_start = eocd
    locator = eocd - _LOCATOR.size
    if locator >= 0 and _LOCATOR.unpack_from(view, locator)[0] == _LOCATOR_SIG:
        directory = _zip64_directory(view, locator, where)
        for what, classic, marker, wide in (
            ("entry count", count, _U16, directory.count),
            ("directory size", cd_size, _U32, directory.size),
            ("directory offset", cd_start, _U32, directory.start),
        ):
            if classic not in (marker, wide):
                raise FormatError(
                    f"{where}: the zip64 end record's {what} {wide} contradicts the end "
                    f"record's {classic}"
                )
        count, cd_size, cd_start = directory.count, directory.size, directory.start
        records_start = _LOCATOR.unpack_from(view, locator)[2]
    if cd_start + cd_size != records_start:
        raise FormatError(
            f"{where}: the central directory ({cd_size} bytes at {cd_start}) should end at "
            f"{records_start}, where the end records begin (file of {size} bytes)"
        )
    if count * _CENTRAL.size > cd_size:
        raise FormatError(
            f"{where}: {count} entries need at least {count * _CENTRAL.size} bytes, the "
            f"central directory has {cd_size}"
        )
    if count > MAX_MEMBERS:
        raise LimitError(f"{where}: {count} members exceed the cap of {MAX_MEMBERS}")
    return _Directory(cd_start, cd_size, count)


def _find_eocd(view: memoryview, where: str) -> int:
    size = len(view)
    if size < _EOCD.size:
        raise FormatError(f"{where}: {size} bytes is too short for a zip archive")
    low = max(0, size - _EOCD.size - _MAX_COMMENT)
    tail = bytes(view[low:])
    signature = _EOCD_SIG.to_bytes(4, "little")
    found = []
    pos = tail.rfind(signature, 0, len(tail) - _EOCD.size + 4)
    while pos >= 0:
        comment = int.from_bytes(tail[pos + 20 : pos + 22], "little")
        if pos + _EOCD.size + comment == len(tail):
            found.append(low + pos)
        pos = tail.rfind(signature, 0, pos + 3)
    if not found:
        raise FormatError(
            f"{where}: no end-of-central-directory record (not a zip archive, or truncated)"
        )
    if len(found) > 1:
        raise FormatError(
            f"{where}: {len(found)} end-of-central-directory records could end the file"
        )
    return found[0]


def _zip64_directory(view: memoryview, locator: int, where: str) -> _Directory:
    _, disk, record, disks = _LOCATOR.unpack_from(view, locator)
    if disk != 0 or disks != 1:
        raise FormatError(f"{where}: multi-disk zip archives are not supported")
    if record > locator - _EOCD64.size:
        raise FormatError(
            f"{where}: the zip64 locator points at {record}, past where its record can be"
        )
    (sig, rest, _, _, disk, cd_disk, disk_count, count, cd_size, cd_start) = _EOCD64.unpack_from(
        view, record
    )
    if sig != _EOCD64_SIG:
        raise FormatError(f"{where}: no zip64 end record at offset {record}")
    if rest < _EOCD64.size - 12 or record + 12 + rest != locator:
        raise FormatError(
            f"{where}: the zip64 end record at {record} claims {rest} more bytes, "
            f"it should end at the locator ({locator})"
        )
    if disk != 0 or cd_disk != 0 or disk_count != count:
        raise FormatError(f"{where}: multi-disk zip archives are not supported")
    return _Directory(cd_start, cd_size, count)


# -- entries ----------------------------------------------------------------------------


def _central_entry(
    view: memoryview, pos: int, end: int, index: int, where: str
) -> tuple[ZipMember, bytes, int, int]:
    """(member, raw name, local header offset, position of the next entry)."""
    if pos + _CENTRAL.size > end:
        raise FormatError(f"{where}: central directory entry {index} runs past its end")
    (sig, _, _, flags, method, _, _, crc, csize, usize, name_len, extra_len, comment_len,
     disk, _, _, offset) = _CENTRAL.unpack_from(view, pos)  # fmt: skip
    if sig != _CENTRAL_SIG:
        raise FormatError(f"{where}: central directory entry {index} has a bad signature")
    name_at = pos + _CENTRAL.size
    next_pos = name_at + name_len + extra_len + comment_len
    if next_pos > end:
        raise FormatError(f"{where}: central directory entry {index} runs past its end")
    raw_name = bytes(view[name_at : name_at + name_len])
    name = _decode_name(raw_name, flags, index, where)
    if flags & _ENCRYPTED_FLAGS or method == _AES_METHOD:
        raise FormatError(f"{where}: member {_shown(name)} is encrypted")
    extra = view[name_at + name_len : name_at + name_len + extra_len]
    usize, csize, offset, disk = _zip64_fields(extra, usize, csize, offset, disk, name, where)
    if disk != 0:
        raise FormatError(f"{where}: multi-disk zip archives are not supported")
    # data_offset is provisional: the local header's lengths are read by _check_local.
    member = ZipMember(name, method, offset, csize, usize, crc)
    return member, raw_name, offset, next_pos


def _decode_name(raw_name: bytes, flags: int, index: int, where: str) -> str:
    if not flags & _UTF8_FLAG:
        return raw_name.decode("cp437")
    try:
        return raw_name.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(
            f"{where}: the name of member {index} is marked UTF-8 but is not"
        ) from None


def _zip64_fields(
    extra: memoryview, usize: int, csize: int, offset: int, disk: int, name: str, where: str
) -> tuple[int, int, int, int]:
    """The sizes, offset and disk, with the fields marked 0xFFFF(FFFF) read from zip64."""
    data = _zip64_extra(extra, name, where)
    if data is None:
        return usize, csize, offset, disk
    values = []
    pos = 0
    for value, marker, width in ((usize, _U32, 8), (csize, _U32, 8), (offset, _U32, 8),
                                 (disk, _U16, 4)):  # fmt: skip
        if value == marker:
            if pos + width > len(data):
                raise FormatError(f"{where}: member {_shown(name)}: the zip64 field is too short")
            value = int.from_bytes(data[pos : pos + width], "little")
            pos += width
        values.append(value)
    return values[0], values[1], values[2], values[3]


def _zip64_extra(extra: memoryview, name: str, where: str) -> bytes | None:
    """The payload of the zip64 extra field (None when absent); the fields must tile."""
    found = None
    pos = 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise FormatError(f"{where}: member {_shown(name)}: malformed extra field")
        tag = int.from_bytes(extra[pos : pos + 2], "little")
        length = int.from_bytes(extra[pos + 2 : pos + 4], "little")
        if pos + 4 + length > len(extra):
            raise FormatError(f"{where}: member {_shown(name)}: malformed extra field")
        if tag == _ZIP64_EXTRA:
            if found is not None:
                raise FormatError(f"{where}: member {_shown(name)}: two zip64 extra fields")
            found = bytes(extra[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return found


def _check_method(member: ZipMember, methods: frozenset[int], where: str) -> None:
    if member.method not in methods:
        allowed = " or ".join(_METHOD_NAMES.get(m, str(m)) for m in sorted(methods))
        method = _METHOD_NAMES.get(member.method, "unknown")
        raise FormatError(
            f"{where}: member {_shown(member.name)} uses compression method {member.method} "
            f"({method}); only {allowed} members are read here"
        )
    if member.method == STORED and member.compressed_size != member.size:
        raise FormatError(
            f"{where}: stored member {_shown(member.name)} has {member.compressed_size} "
            f"stored bytes but a size of {member.size}"
        )


def _check_local(
    view: memoryview,
    member: ZipMember,
    raw_name: bytes,
    offset: int,
    limit: int,
    where: str,
) -> int:
    """The member's data offset, once its local header agrees with its central entry.

    The local header and the data must end at or before ``limit`` (the directory).
    """
    shown = _shown(member.name)
    if offset + _LOCAL.size > limit:
        raise FormatError(
            f"{where}: member {shown}: local header at {offset} is past the member area "
            f"(which ends at {limit})"
        )
    (sig, _, flags, method, _, _, _, _, _, name_len, extra_len) = _LOCAL.unpack_from(view, offset)
    if sig != _LOCAL_SIG:
        raise FormatError(f"{where}: member {shown}: no local header at offset {offset}")
    if flags & _ENCRYPTED_FLAGS:
        raise FormatError(f"{where}: member {shown} is encrypted")
    if method != member.method:
        raise FormatError(
            f"{where}: member {shown}: local header says method {method}, the central "
            f"directory {member.method}"
        )
    name_at = offset + _LOCAL.size
    data_offset = int(name_at + name_len + extra_len)
    if name_len != len(raw_name) or bytes(view[name_at : name_at + name_len]) != raw_name:
        raise FormatError(f"{where}: member {shown}: the local header names another member")
    if data_offset + member.compressed_size > limit:
        raise FormatError(
            f"{where}: member {shown}: {member.compressed_size} bytes at {data_offset} run "
            f"past the member area (which ends at {limit})"
        )
    return data_offset


def _check_no_overlap(spans: list[tuple[int, int, str]], where: str) -> None:
    spans.sort()
    for (_, end, name), (start, _, other) in itertools.pairwise(spans):
        if start < end:
            raise FormatError(
                f"{where}: members {_shown(name)} and {_shown(other)} overlap in the file"
            )


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")
