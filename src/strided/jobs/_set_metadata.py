"""Editing the metadata of a GGUF or safetensors file without touching its tensors.

The new header is built (every value parsed and checked) before anything is written;
then the file is rewritten atomically: the new header, then the old file's data region
copied byte for byte, a bounded piece at a time, into a temporary file renamed onto the
target. Tensor offsets are relative to the data region in both formats, so they stay
as they are and every tensor's bytes, hence ``Checkpoint.digest()``, are unchanged.

GGUF: key/values keep their order; an existing key keeps its type, a new key is
appended with the type given, or llama.cpp's type when it is one of llama.cpp's known
keys (``_gguf_keys``), and is refused otherwise (a number must not silently become a
string); ``general.alignment`` and ``split.*`` describe the file's layout and can be
neither set nor deleted. An integer's text has at most ``MAX_METADATA_INTEGER_DIGITS``
digits, a float's is a decimal or ``nan``/``inf``/``-inf``. safetensors: the
``__metadata__`` strings, written with sorted keys (as the reference writer does).

One edit, one file: the header is parsed from, and the tensor bytes copied from, one
open descriptor, so what is written is always one consistent file. A symbolic link is
followed: its target is rewritten (the temporary file beside the target) and the link
stays a link. Just before the rename, under an exclusive ``flock`` of the source (which
every concurrent strided edit of the file takes too), the path must still name the file
that was read (same ``st_dev``/``st_ino``); when another writer replaced it meanwhile the
edit is refused and nothing is written, so of two concurrent edits one fails and the
file is the other's complete result.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, NamedTuple

from .._core.errors import FormatError, LimitError
from .._core.shape import Shape
from ..io._common import file_size, label, map_file, open_regular
from ..io._detect import HEAD_BYTES, detect
from ..io._safetensors_header import MAX_HEADER_BYTES, parse_header
from ..io._shards import write_file
from ..io.gguf import TensorSpec, _Reader, alignment_of, encode_kv, parse_gguf, tensor_info
from ._gguf_keys import known_types
from ._gguf_text import parsed_text

try:  # POSIX; elsewhere the identity check alone guards the rename
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["TYPE_NAMES", "Edit", "Result", "set_metadata"]

# ``--type`` spellings -> GGUF value type names.
TYPE_NAMES = {
    "u8": "UINT8",
    "i8": "INT8",
    "u16": "UINT16",
    "i16": "INT16",
    "u32": "UINT32",
    "i32": "INT32",
    "u64": "UINT64",
    "i64": "INT64",
    "f32": "FLOAT32",
    "f64": "FLOAT64",
    "bool": "BOOL",
    "str": "STRING",
}
_COPY_BYTES = 1 << 24  # the data region is copied this much at a time


class Edit(NamedTuple):
    """What to change: ``sets`` (key, value) in order, ``deletes`` (keys), and the type
    of new GGUF keys: ``types[key]``, else ``new_type`` (``TYPE_NAMES`` values; None:
    llama.cpp's type for a key it knows, and any other new key is refused).

    A value is the command line's text (parsed by its type), or with ``values`` the
    Python value itself (a str, int, float, bool, or a list for an array), which must
    fit its type as it is. ``option`` is how messages name the type's setting.
    """

    sets: Sequence[tuple[str, Any]]
    deletes: Sequence[str]
    new_type: str | None = None
    types: Mapping[str, str] | None = None
    values: bool = False
    option: str = "--type"

    def type_of(self, key: str) -> str | None:
        """The type given for ``key`` (None: none given)."""
        return (self.types or {}).get(key, self.new_type)


class Result(NamedTuple):
    """What an edit did: the file's format and the type each key set was given (GGUF's
    type names; ``STRING`` for safetensors), in the order first set."""

    kind: str
    types: dict[str, str]


def set_metadata(path: str, edit: Edit, out: str | None = None, overwrite: bool = False) -> Result:
    """Apply ``edit`` to the GGUF or safetensors file ``path``, written to ``out``
    (default: ``path`` itself, replaced atomically; a symbolic link's target is
    replaced and the link kept). Returns the format's name.

    Deletes apply first, then sets (so deleting a GGUF key and setting it again gives
    it the ``new_type``). FormatError, with nothing written, for a value that does not
    fit its type, a new GGUF key with no type (given, or llama.cpp's), a deleted key
    that is not there, a layout key, another format, or a file that another writer
    replaced while it was edited; ``out`` must not exist unless ``overwrite`` (OSError).
    """
    where = label(path)
    with open_regular(where) as file:
        size = file_size(file)
        kind = detect(file.read(HEAD_BYTES), size, where).name
        if kind == "safetensors":
            file.seek(0)
            header, start = _safetensors_header(file, size, where, edit)
            result = Result(kind, {key: "STRING" for key, _ in edit.sets})
        elif kind == "gguf":
            raw = map_file(file, size, where)
            header, start, types = _gguf_header(raw, size, where, edit)
            result = Result(kind, types)
        else:
            raise FormatError(f"{where}: set-metadata edits GGUF and safetensors files, not {kind}")

        def write(handle: IO[bytes]) -> None:
            # The tensor bytes come from the descriptor the header was read from.
            handle.write(header)
            file.seek(start)
            while piece := file.read(_COPY_BYTES):
                handle.write(piece)

        if out is not None:
            write_file(out, write, overwrite)
            return result
        target = os.path.realpath(where)
        write_file(target, write, True, lambda: _still_named(file, target, where))
    return result


@contextlib.contextmanager
def _still_named(file: IO[bytes], target: str, where: str) -> Iterator[None]:
    """Held across the rename: an exclusive lock of the file that was read, and the
    check that ``target`` still names it (FormatError when another writer replaced it).
    """
    if fcntl is not None:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)
    try:
        read, now = os.fstat(file.fileno()), os.stat(target)
        if (read.st_dev, read.st_ino) != (now.st_dev, now.st_ino):
            raise FormatError(
                f"{where}: another writer replaced the file while it was being edited; "
                "nothing written (run the edit again)"
            )
        yield
    finally:
        if fcntl is not None:
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)


def _gguf_header(raw: Any, size: int, where: str, edit: Edit) -> tuple[bytes, int, dict[str, str]]:
    """The new GGUF header (padded), where the old data region starts, and the type of
    each key set."""
    reader = _Reader(raw.data, size, where)
    version, (metadata, types), tensors = parse_gguf(reader)
    layout = {key: (types[key], metadata[key]) for key in ("general.alignment",) if key in types}
    alignment = alignment_of(layout, where)
    start = -(-reader.pos // alignment) * alignment
    values = dict(metadata)
    kinds = dict(types)
    for key in (*edit.deletes, *(key for key, _ in edit.sets)):
        if key == "general.alignment" or key.startswith("split."):
            raise FormatError(f"{where}: {key!r} describes the file's layout; it cannot change")
    for key in edit.deletes:
        if key not in values:
            raise FormatError(f"{where}: no key {key[:80]!r} to delete")
        del values[key], kinds[key]
    architecture = metadata.get("general.architecture")
    arch = architecture if type(architecture) is str else None
    for key, given in edit.sets:
        wanted = edit.type_of(key)
        if key in kinds and wanted is not None and not _same_kind(kinds[key], wanted):
            raise FormatError(
                f"{where}: key {key[:80]!r} keeps its type {kinds[key]} (delete it first to "
                "give it another)"
            )
        kind = kinds.get(key) or _new_kind(key, _is_array(given, edit), wanted, arch, where, edit)
        value = given if edit.values else parsed_text(given, kind, f"{where}: key {key[:80]!r}")
        values[key], kinds[key] = value, kind
    try:
        body = [encode_kv(key, kinds[key], value) for key, value in values.items()]
    except FormatError as error:
        if not edit.values:
            raise  # the command line names the file
        raise FormatError(f"{where}: {error}") from None
    infos = [
        tensor_info(TensorSpec(name, info.kind.name, Shape._trusted(info.dims)), info.begin - start)
        for name, info in tensors.items()
    ]
    header = b"".join((b"GGUF", struct.pack("<IQQ", version, len(infos), len(body)), *body, *infos))
    types = {key: kinds[key] for key, _ in edit.sets}
    return header + bytes(-len(header) % alignment), start, types


def _same_kind(kind: str, wanted: str) -> bool:
    return kind == wanted or kind == f"ARRAY[{wanted}]"


def _is_array(value: Any, edit: Edit) -> bool:
    """Whether a value is an array: a list (or tuple), or text that is a JSON array."""
    if edit.values:
        return isinstance(value, (list, tuple))
    return str(value).lstrip().startswith("[")


def _new_kind(
    key: str, array: bool, new_type: str | None, arch: str | None, where: str, edit: Edit
) -> str:
    """The type of a new key: llama.cpp's for a key it knows (an array type when the
    value is an array and llama.cpp also writes the key as one), else the one given.
    """
    given = None if new_type is None else f"ARRAY[{new_type}]" if array else new_type
    known = known_types(key, arch)
    if not known:
        if given is None:
            raise FormatError(
                f"{where}: new key {key[:80]!r} needs {edit.option} (u32, i32, f32, bool, str...): "
                "it is not one of llama.cpp's known keys"
            )
        return given
    fitting = [kind for kind in known if kind.startswith("ARRAY") == array] or list(known)
    if given is not None and given not in known:
        raise FormatError(
            f"{where}: key {key[:80]!r} is llama.cpp's {' or '.join(known)}; {edit.option} "
            f"{new_type} does not fit it"
        )
    return given or fitting[0]


def _safetensors_header(file: IO[bytes], size: int, where: str, edit: Edit) -> tuple[bytes, int]:
    """The new safetensors header and where the old data region starts."""
    wanted = {edit.new_type, *(edit.types or {}).values()}
    if not wanted <= {None, "STRING"}:
        raise FormatError(
            f"{where}: safetensors metadata values are strings; {edit.option} cannot apply"
        )
    for key, value in edit.sets:
        if type(value) is not str:
            raise FormatError(
                f"{where}: safetensors metadata values are strings; key {key[:80]!r} was "
                f"given a {type(value).__name__}"
            )
    entries, metadata = parse_header(file, size, where)
    start = 8 + int.from_bytes(_first_bytes(file), "little")
    for key in edit.deletes:
        if key not in metadata:
            raise FormatError(f"{where}: no key {key[:80]!r} to delete")
        del metadata[key]
    metadata.update(edit.sets)
    header: dict[str, Any] = {"__metadata__": dict(sorted(metadata.items()))} if metadata else {}
    for entry in sorted(entries, key=lambda item: item.begin):
        header[entry.name] = {
            "dtype": entry.dtype_name,
            "shape": list(entry.dims),
            "data_offsets": [entry.begin - start, entry.end - start],
        }
    try:
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"{where}: a key or value is not valid Unicode") from None
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER_BYTES:
        raise LimitError(f"{where}: a header of {len(text)} bytes exceeds {MAX_HEADER_BYTES}")
    return len(text).to_bytes(8, "little") + text, start


def _first_bytes(file: IO[bytes]) -> bytes:
    file.seek(0)
    return file.read(8)
