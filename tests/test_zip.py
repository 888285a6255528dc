"""The bounded zip reader: archives zipfile, NumPy and PyTorch write read as zipfile reads
them; crafted archives that lie are typed errors, found without allocating what they claim."""

from __future__ import annotations

import io
import re
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io import _zip
from strided.io._zip import ZipMember, inflate, inflate_head, read_zip, stored_bytes
from tests.zipcraft import Ends, Entry, bomb, build, deflate_raw, zip64_extra

BOTH = frozenset({0, 8})


def as_raw(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def contents(data: bytes, methods: frozenset[int] = BOTH) -> dict[str, bytes]:
    raw = as_raw(data)
    out = {}
    for name, member in read_zip(raw, "test.zip", methods=methods).items():
        if member.method == 0:
            out[name] = stored_bytes(raw, member).tobytes()
        else:
            out[name] = inflate(raw, member, member.size, name).tobytes()
    return out


def oracle(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


# -- archives written by others ------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    members=hs.lists(
        hs.tuples(
            hs.text(hs.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=12),
            hs.binary(max_size=300),
            hs.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
            hs.booleans(),
        ),
        max_size=6,
        unique_by=lambda member: member[0],
    ),
    # A comment holding an end-record signature is ambiguous; zipfile itself misreads it.
    comment=hs.binary(max_size=40).filter(lambda text: b"PK\x05\x06" not in text),
)
def test_zipfile_archives_read_as_zipfile_reads_them(
    members: list[tuple[str, bytes, int, bool]], comment: bytes
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content, method, force_zip64 in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = method
            with archive.open(info, "w", force_zip64=force_zip64) as file:
                file.write(content)
        archive.comment = comment
    data = buffer.getvalue()
    assert contents(data) == oracle(data)
    found = read_zip(as_raw(data), "z", methods=BOTH)
    assert list(found) == [name for name, *_ in members]  # central-directory order
    for name, content, method, _ in members:
        member = found[name]
        assert member.method == method and member.size == len(content)
        assert member.crc32 == zlib.crc32(content)


def test_npz_archives() -> None:
    for save in (np.savez, np.savez_compressed):
        buffer = io.BytesIO()
        save(buffer, a=np.arange(5), b=np.ones((3, 2)))
        data = buffer.getvalue()
        assert contents(data) == oracle(data)


def test_torch_archives_are_stored_aligned_and_read() -> None:
    torch = pytest.importorskip("torch")
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4)}, buffer)
    data = buffer.getvalue()
    assert contents(data, frozenset({0})) == oracle(data)
    members = read_zip(as_raw(data), "t")
    assert any(name.endswith("/data.pkl") for name in members)
    assert all(member.data_offset % 64 == 0 for member in members.values())


def test_stored_bytes_is_a_zero_copy_read_only_view() -> None:
    data = build([Entry("a", b"hello"), Entry("b", b"world!")])
    raw = as_raw(data)
    member = read_zip(raw, "z")["b"]
    view = stored_bytes(raw, member)
    assert view.tobytes() == b"world!" and view.base is raw and not view.flags.writeable


def test_names_decode_by_their_flag() -> None:
    data = build(
        [
            Entry("ünï", b"1", flags=1 << 11),
            Entry("x", b"2", raw_name="é".encode("cp437")),
        ]
    )
    assert list(read_zip(as_raw(data), "z")) == ["ünï", "é"]


def test_zip64_fields_are_read_for_marked_entries() -> None:
    content = b"abcdef"
    extra = zip64_extra(len(content), len(content), 0)
    data = build(
        [Entry("a", content, size=0xFFFFFFFF, csize=0xFFFFFFFF, offset=0xFFFFFFFF,
               central_extra=extra)],
        Ends(zip64=True),
    )  # fmt: skip
    member = read_zip(as_raw(data), "z")["a"]
    assert member == ZipMember("a", 0, 31, 6, 6, zlib.crc32(content))


def test_inflate_returns_exactly_the_content_read_only() -> None:
    content = bytes(range(256)) * 1000
    data = build([Entry("a", content, method=8)])
    raw = as_raw(data)
    member = read_zip(raw, "z", methods=BOTH)["a"]
    out = inflate(raw, member, len(content), "z")
    assert out.tobytes() == content and not out.flags.writeable
    with pytest.raises(ValueError):
        out.flags.writeable = True
    assert inflate_head(raw, member, 10, "z") == content[:10]
    assert inflate_head(raw, member, 10**6, "z") == content


def test_a_member_larger_than_the_chunks_inflates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zip, "_IN_CHUNK", 7)
    monkeypatch.setattr(_zip, "_OUT_CHUNK", 5)
    content = np.random.default_rng(0).integers(0, 4, 5000, dtype=np.uint8).tobytes()
    data = build([Entry("a", content, method=8)])
    assert contents(data) == {"a": content}


# -- crafted archives --------------------------------------------------------------------------

GOOD = [Entry("a", b"first"), Entry("b", b"second")]


def fake_eocd_comment() -> bytes:
    """A comment that itself ends with a record that could end the file."""
    return struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0, 0, 0, 0, 0)


def locals_of(name: str, content: bytes) -> bytes:
    return struct.pack(
        "<I5H3I2H", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(content), len(content),
        len(content), len(name), 0,
    ) + name.encode() + content  # fmt: skip


def overlapping() -> bytes:
    # Member "b" is a valid local header + data hidden inside member "a"'s data.
    inner = locals_of("b", b"xyz")
    return build([Entry("a", inner), Entry("b", b"xyz", offset=30 + 1)])


def zip64_claiming_2_32_entries() -> bytes:
    return build(
        [Entry("a", b"")],
        Ends(zip64=True, count=0xFFFF, zip64_count=2**32),
    )


CRAFTED: list[tuple[str, bytes, type[Exception], str]] = [
    ("too short", b"PK\x05\x06", st.FormatError, "too short for a zip"),
    ("not a zip", b"\0" * 100, st.FormatError, "no end-of-central-directory"),
    ("truncated", build(GOOD)[:-5], st.FormatError, "no end-of-central-directory"),
    ("two end records", build(GOOD, Ends(comment=fake_eocd_comment())), st.FormatError,
     "2 end-of-central-directory records"),
    ("disk number", build(GOOD, Ends(disk=1)), st.FormatError, "multi-disk"),
    ("directory on another disk", build(GOOD, Ends(cd_disk=2)), st.FormatError, "multi-disk"),
    ("entries on this disk", build(GOOD, Ends(disk_count=1)), st.FormatError, "multi-disk"),
    ("directory offset lies", build(GOOD, Ends(cd_start=3)), st.FormatError,
     "should end at"),
    ("directory size lies", build(GOOD, Ends(cd_size=10**6)), st.FormatError,
     "should end at"),
    ("archive shifted by a prefix", b"MZ" * 8 + build(GOOD), st.FormatError,
     "should end at"),
    ("entry count needs more bytes", build(GOOD, Ends(count=0xFFFE, disk_count=0xFFFE)),
     st.FormatError, "65534 entries need at least"),
    ("2**32 entries in a tiny zip64 file", zip64_claiming_2_32_entries(), st.FormatError,
     "4294967296 entries need at least"),
    ("zip64 count contradicts", build(GOOD, Ends(zip64=True, zip64_count=3)),
     st.FormatError, "zip64 end record's entry count 3 contradicts"),
    ("zip64 size contradicts", build(GOOD, Ends(zip64=True, zip64_cd_size=7)),
     st.FormatError, "directory size 7 contradicts"),
    ("zip64 offset lies", build(GOOD, Ends(zip64=True, cd_start=0xFFFFFFFF, zip64_cd_start=5)),
     st.FormatError, "should end at"),
    ("zip64 locator past the record", build(GOOD, Ends(zip64=True, locator_offset=10**9)),
     st.FormatError, "zip64 locator points at"),
    ("zip64 locator at no record", build(GOOD, Ends(zip64=True, locator_offset=0)),
     st.FormatError, "no zip64 end record"),
    ("zip64 record length lies", build(GOOD, Ends(zip64=True)).replace(
        struct.pack("<IQ", 0x06064B50, 44), struct.pack("<IQ", 0x06064B50, 40)),
     st.FormatError, "claims 40 more bytes"),
    ("zip64 record longer than its place", build(GOOD, Ends(zip64=True, zip64_rest=52)).replace(
        struct.pack("<IQ", 0x06064B50, 52), struct.pack("<IQ", 0x06064B50, 60)),
     st.FormatError, "claims 60 more bytes"),
    ("zip64 multi-disk", build(GOOD, Ends(zip64=True, locator_disks=2)), st.FormatError,
     "multi-disk"),
    ("bad central signature", build(GOOD).replace(b"PK\x01\x02", b"PK\x01\x03", 1),
     st.FormatError, "entry 0 has a bad signature"),
    ("entry past the directory", build([Entry("a", b"1", central_extra=b"\0" * 4)]).replace(
        struct.pack("<HHH", 1, 4, 0), struct.pack("<HHH", 1, 400, 0)),
     st.FormatError, "entry 0 runs past"),
    ("bytes after the entries", build(GOOD, Ends(count=1, disk_count=1)), st.FormatError,
     "bytes after its 1 entries"),
    ("bad UTF-8 name", build([Entry("a", b"", flags=1 << 11, raw_name=b"\xff\xfe")]),
     st.FormatError, "marked UTF-8"),
    ("encrypted flag", build([Entry("secret", b"x", flags=1)]), st.FormatError,
     "'secret' is encrypted"),
    ("strong encryption flag", build([Entry("s", b"x", flags=1 << 6)]), st.FormatError,
     "is encrypted"),
    ("AES method", build([Entry("s", b"x", method=99)]), st.FormatError, "is encrypted"),
    ("encrypted only locally", build([Entry("s", b"x", local_flags=1)]), st.FormatError,
     "is encrypted"),
    ("deflate where only stored", build([Entry("a", b"abc" * 9, method=8)]), st.FormatError,
     "compression method 8 (deflate); only stored"),
    ("bzip2", build([Entry("a", b"abc", method=12, data=b"BZh")]), st.FormatError,
     "method 12 (unknown)"),
    ("stored sizes differ", build([Entry("a", b"abc", size=4)]), st.FormatError,
     "3 stored bytes but a size of 4"),
    ("local signature", build(GOOD).replace(b"PK\x03\x04", b"PK\x03\x05", 1), st.FormatError,
     "no local header at offset 0"),
    ("local name differs", build([Entry("a", b"1", local_name=b"b")]), st.FormatError,
     "names another member"),
    ("local name longer", build([Entry("a", b"1", local_name=b"ab")]), st.FormatError,
     "names another member"),
    ("local method differs", build([Entry("a", b"1", local_method=8)]), st.FormatError,
     "local header says method 8"),
    ("member past the end", build([Entry("a", b"123", csize=10**6, size=10**6)]),
     st.FormatError, "run past the member area"),
    ("member into the directory", build([Entry("a", b"123", csize=4, size=4)]),
     st.FormatError, "run past the member area"),
    ("header offset past the end", build([Entry("a", b"1", offset=10**9)]), st.FormatError,
     "local header at 1000000000 is past"),
    ("overlapping members", overlapping(), st.FormatError, "'a' and 'b' overlap"),
    ("same header twice", build([Entry("a", b"1"), Entry("a", b"1", offset=0)]),
     st.FormatError, "'a' appears twice"),
    ("duplicate names", build([Entry("a", b"1"), Entry("a", b"2")]), st.FormatError,
     "'a' appears twice"),
    ("zip64 field too short", build([Entry("a", b"1", size=0xFFFFFFFF,
                                           central_extra=zip64_extra(1, widths=(4,)))]),
     st.FormatError, "zip64 field is too short"),
    ("two zip64 fields", build([Entry("a", b"1", central_extra=zip64_extra(1) * 2)]),
     st.FormatError, "two zip64 extra fields"),
    ("malformed extra", build([Entry("a", b"1", central_extra=b"\x01\x00\x09")]),
     st.FormatError, "malformed extra field"),
    ("member on another disk", build([Entry("a", b"1", disk=3)]), st.FormatError,
     "multi-disk"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "error", "fragment"),
    [case[1:] for case in CRAFTED],
    ids=[case[0] for case in CRAFTED],
)
def test_crafted_archives_raise_typed_errors_without_allocating(
    data: bytes, error: type[Exception], fragment: str
) -> None:
    raw = as_raw(data)
    with pytest.raises(error, match=re.escape(fragment)) as caught:
        read_zip(raw, "crafted.zip", methods=BOTH if "only stored" not in fragment else
                 frozenset({0}))  # fmt: skip
    assert str(caught.value).startswith("crafted.zip: ")
    tracemalloc.start()
    try:
        with pytest.raises(error):
            read_zip(raw, "crafted.zip", methods=BOTH if "only stored" not in fragment else
                     frozenset({0}))  # fmt: skip
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(data) + (1 << 18)


def test_the_member_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_zip, "MAX_MEMBERS", 2)
    with pytest.raises(st.LimitError, match="3 members exceed the cap of 2"):
        read_zip(as_raw(build([Entry("a"), Entry("b"), Entry("c")])), "z")
    monkeypatch.setattr(_zip, "MAX_NAME_BYTES", 5)
    with pytest.raises(st.LimitError, match="names exceed the cap of 5"):
        read_zip(as_raw(build([Entry("abc"), Entry("def")])), "z")


def test_a_comment_up_to_the_maximum_is_found() -> None:
    data = build(GOOD, Ends(comment=b"c" * 0xFFFF))
    assert contents(data) == {"a": b"first", "b": b"second"}


def test_an_empty_archive_has_no_members() -> None:
    assert read_zip(as_raw(build([])), "z") == {}


def test_bytes_before_the_first_member_are_a_gap() -> None:
    data = build(GOOD, prefix=b"MZ" * 8)  # offsets count the prefix, as a writer would
    assert contents(data) == oracle(data) == {"a": b"first", "b": b"second"}


# -- inflating ----------------------------------------------------------------------------------


def deflated_member(content: bytes, **changes: object) -> tuple[np.ndarray, ZipMember]:
    raw = as_raw(build([Entry("m", content, method=8, **changes)]))  # type: ignore[arg-type]
    return raw, read_zip(raw, "z", methods=BOTH)["m"]


def inflating(raw: np.ndarray, member: ZipMember, expected: int) -> Callable[[], object]:
    return lambda: inflate(raw, member, expected, "bad.npz: 'm'")


INFLATE_CASES: list[tuple[str, Callable[[], object], str]] = [
    ("truncated stream",
     inflating(*deflated_member(b"x" * 1000, data=deflate_raw(bytes(range(256)) * 4)[:-9]),
               1000), "stream"),
    ("stream ends early", inflating(*deflated_member(b"abc" * 10, size=40), 40),
     "ends after 30 of 40 bytes"),
    ("stream goes on", inflating(*deflated_member(b"abc" * 10, size=20), 20),
     "holds more bytes"),
    ("bytes after the stream",
     inflating(*deflated_member(b"abc", data=deflate_raw(b"abc") + b"junk"), 3),
     "bytes follow the end"),
    ("corrupt stream", inflating(*deflated_member(b"abc", data=b"\xff" * 10), 3),
     "corrupt deflate stream"),
    ("CRC mismatch", inflating(*deflated_member(b"abc", crc=12345), 3), "CRC-32"),
    ("expected differs from the directory", inflating(*deflated_member(b"abc"), 4),
     "should be 4 bytes, the zip directory says 3"),
    ("size beyond deflate's ratio", inflating(*deflated_member(b"abc", size=0xFFFFFFFF,
                                                   central_extra=zip64_extra(10**12)), 10**12),
     "cannot expand to 1000000000000"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "fragment"), [case[1:] for case in INFLATE_CASES], ids=[c[0] for c in INFLATE_CASES]
)
def test_bad_deflate_streams(call: Callable[[], object], fragment: str) -> None:
    with pytest.raises(st.FormatError, match=re.escape(fragment)) as caught:
        call()
    assert str(caught.value).startswith("bad.npz: 'm': ")


def test_a_deflate_bomb_stops_at_the_claimed_size() -> None:
    stream = bomb()  # 1 GiB of zeros in about 1 MB
    raw = as_raw(
        build([Entry("m", b"", method=8, data=stream, size=16, crc=zlib.crc32(bytes(16)))])
    )
    member = read_zip(raw, "z", methods=BOTH)["m"]
    assert member.compressed_size == len(stream) and member.size == 16
    tracemalloc.start()
    try:
        with pytest.raises(st.FormatError, match="holds more bytes"):
            inflate(raw, member, 16, "z")
        head = inflate_head(raw, member, 100, "z")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert head == bytes(100)
    assert peak < 4 << 20  # the input chunk and a little output, never the gigabyte
