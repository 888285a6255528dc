"""``strided hash`` output, written and read back (``strided verify --manifest``).

Text: one ``DIGEST  NAME`` line per tensor (the ``sha256sum`` layout), names sorted by
their UTF-8 bytes, then ``DIGEST  *metadata*`` with the metadata digest and
``DIGEST  *checkpoint*`` with the checkpoint digest. A name holding a backslash, a
newline, a tab, a carriage return or any other non-printable character is written with
escapes (``\\\\``, ``\\n``, ``\\t``, ``\\r``, ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``) and
its line starts with a backslash, as ``sha256sum`` marks escaped names; so every name
reads back exactly and none can drive a terminal. A name starting with ``*`` is marked
the same way (its line starts with a backslash), so no tensor line reads as one of
the two ``*...*`` lines.

A member the checkpoint holds but strided cannot read, skipped with
``--skip-unreadable``, has a line ``DIGEST  *unreadable*:NAME`` (the SHA-256 of its
stored bytes) after the tensors' lines. Its NAME is always written escaped (a
backslash as ``\\\\``, the other escapes as above) and the line never starts with a
backslash: a tensor line starting with ``*`` always does, so the two never mix.

JSON: ``{"digest": ..., "metadata_digest": ..., "tensors": {name: {"dtype", "shape",
"digest"}}}``, and ``"unreadable": {name: digest}`` when members were skipped.

Manifests written before metadata was digested (their last line ``DIGEST  PATH``, or
JSON without ``"metadata_digest"``) still read: their tensors and checkpoint digest are
checked, and ``Manifest.metadata_digest`` is None.
"""

from __future__ import annotations

import re
from typing import Any

from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_MANIFEST_BYTES as _MAX_MANIFEST_BYTES
from .._core.terminal import escape_char
from .._kernels.digest import UNREADABLE_PREFIX
from .._kernels.strict_json import loads_strict
from ..io._common import file_size, open_regular, read_exact

__all__ = [
    "CHECKPOINT_LINE",
    "METADATA_LINE",
    "Manifest",
    "escaped_line",
    "read_manifest",
    "unreadable_line",
]

METADATA_LINE = "*metadata*"
CHECKPOINT_LINE = "*checkpoint*"

_NAMED = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPE = re.compile(r"\\(?:([\\ntr])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")
_LINE = re.compile(r"(\\?)([0-9a-f]{64})  (.*)", re.DOTALL)
_HEX = re.compile(r"[0-9a-f]{64}")


def _escape(char: str) -> str:
    return escape_char(char, _NAMED) if char in _NAMED or not char.isprintable() else char


def escaped_line(digest: str, name: str) -> str:
    """``DIGEST  NAME``, escaped (with a leading backslash) when the name needs it.

    A name starting with ``*`` is marked too, so it never reads as ``*metadata*`` or
    ``*checkpoint*``.
    """
    if name.isprintable() and "\\" not in name and not name.startswith("*"):
        return f"{digest}  {name}"
    return "\\" + digest + "  " + "".join(_escape(char) for char in name)


def unreadable_line(digest: str, name: str) -> str:
    """``DIGEST  *unreadable*:NAME`` for a skipped member, NAME always escaped."""
    return f"{digest}  {UNREADABLE_PREFIX}" + "".join(_escape(char) for char in name)


def _unescape(text: str, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}[match.group(1)]
        return chr(int(match.group(2) or match.group(3) or match.group(4), 16))

    leftover = _UNESCAPE.sub("", text)
    if "\\" in leftover:
        raise FormatError(f"{where}: a backslash that starts no known escape")
    try:
        return _UNESCAPE.sub(one, text)
    except (ValueError, OverflowError):
        raise FormatError(f"{where}: an escape names no character") from None


class Manifest:
    """Expected digests: ``tensors`` (name -> digest), the checkpoint ``digest``, the
    ``metadata_digest`` (None for a manifest written before metadata was digested) and
    ``unreadable`` (name -> digest of the stored bytes of each skipped member)."""

    def __init__(
        self,
        tensors: dict[str, str],
        digest: str,
        metadata_digest: str | None,
        unreadable: dict[str, str] | None = None,
    ) -> None:
        self.tensors = tensors
        self.digest = digest
        self.metadata_digest = metadata_digest
        self.unreadable = {} if unreadable is None else unreadable


def read_manifest(path: str) -> Manifest:
    """Read either output of ``strided hash``; FormatError (naming the file) when malformed."""
    with open_regular(path) as file:
        size = file_size(file)
        if size > _MAX_MANIFEST_BYTES:
            raise LimitError(f"{path}: a manifest of {size} bytes exceeds {_MAX_MANIFEST_BYTES}")
        data = read_exact(file, size, path, "manifest")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{path}: the manifest is not UTF-8 text") from None
    if text.lstrip().startswith("{"):
        return _from_json(loads_strict(data, path, 4), path)
    return _from_text(text, path)


def _from_text(text: str, path: str) -> Manifest:
    # A raw carriage return is never part of a name (it would be escaped): CRLF is fine.
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise FormatError(f"{path}: the manifest is empty")
    entries: list[tuple[str, str, bool]] = []  # (name, digest, written escaped)
    for number, line in enumerate(lines, 1):
        match = _LINE.fullmatch(line)
        if match is None:
            raise FormatError(f"{path}: line {number}: expected 'DIGEST  NAME' (64 hex digits)")
        escaped = bool(match.group(1))
        name = _unescape(match.group(3), f"{path}: line {number}") if escaped else match.group(3)
        entries.append((name, match.group(2), escaped))
    *body, (last, digest, last_escaped) = entries
    metadata = None
    if last == CHECKPOINT_LINE and not last_escaped:
        if not body or body[-1][0] != METADATA_LINE or body[-1][2]:
            raise FormatError(f"{path}: the {CHECKPOINT_LINE} line follows no {METADATA_LINE} line")
        metadata = body.pop()[1]
    # Otherwise the last line names the checkpoint's path: written before metadata was
    # digested, so there is no metadata line to check.
    tensors: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for number, (name, found, escaped) in enumerate(body, 1):
        if not escaped and name.startswith(UNREADABLE_PREFIX):
            member = _unescape(name[len(UNREADABLE_PREFIX) :], f"{path}: line {number}")
            if member in unreadable:
                raise FormatError(
                    f"{path}: line {number}: unreadable member {member[:80]!r} is listed twice"
                )
            unreadable[member] = found
            continue
        if name in tensors:
            raise FormatError(f"{path}: line {number}: tensor {name[:80]!r} is listed twice")
        tensors[name] = found
    return Manifest(tensors, digest, metadata, unreadable)


def _from_json(document: Any, path: str) -> Manifest:
    if type(document) is not dict or type(document.get("tensors")) is not dict:
        raise FormatError(f"{path}: expected {{'digest': ..., 'tensors': {{name: ...}}}}")
    digest = document.get("digest")
    if type(digest) is not str or not _HEX.fullmatch(digest):
        raise FormatError(f"{path}: 'digest' must be 64 lowercase hex digits")
    metadata = document.get("metadata_digest")
    if metadata is not None and (type(metadata) is not str or not _HEX.fullmatch(metadata)):
        raise FormatError(f"{path}: 'metadata_digest' must be 64 lowercase hex digits")
    tensors = {}
    for name, entry in document["tensors"].items():
        found = entry.get("digest") if type(entry) is dict else None
        if type(found) is not str or not _HEX.fullmatch(found):
            raise FormatError(f"{path}: tensor {name[:80]!r}: 'digest' must be 64 hex digits")
        tensors[name] = found
    return Manifest(tensors, digest, metadata, _unreadable_object(document, path))


def _unreadable_object(document: dict[str, Any], path: str) -> dict[str, str]:
    """The ``"unreadable"`` object of a JSON manifest (``{}`` when absent)."""
    found = document.get("unreadable", {})
    if type(found) is not dict:
        raise FormatError(f"{path}: 'unreadable' must be an object of name -> digest")
    for name, digest in found.items():
        if type(digest) is not str or not _HEX.fullmatch(digest):
            raise FormatError(
                f"{path}: unreadable member {name[:80]!r}: its digest must be 64 hex digits"
            )
    return dict(found)
