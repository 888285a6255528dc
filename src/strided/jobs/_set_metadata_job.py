"""``strided.set_metadata``: set or delete metadata of a GGUF or safetensors file.

The work of ``strided set-metadata`` (``_set_metadata`` rewrites the file); this module
checks the Python face's arguments and reports what was done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core.errors import FormatError
from ._set_metadata import TYPE_NAMES, Edit
from ._set_metadata import set_metadata as _edit

__all__ = ["SetMetadataReport", "apply", "set_metadata"]


@dataclass(frozen=True)
class SetMetadataReport:
    """What ``strided.set_metadata`` (``strided set-metadata --json``) did.

    ``path``: the file written (the output when one was given, else the file edited);
    ``format``: ``"gguf"`` or ``"safetensors"``; ``set``: each key set -> the type it was
    stored with (GGUF's names: ``UINT32``, ``STRING``, ``ARRAY[INT32]``...; safetensors
    values are all ``STRING``), in the order first set; ``deleted``: the keys deleted;
    ``tensors_unchanged``: always True, since every tensor's stored bytes are copied
    unchanged (``Checkpoint.digest()`` and ``strided hash`` give what they gave before).
    """

    path: str
    format: str
    set: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    tensors_unchanged: bool = True

    @property
    def ok(self) -> bool:
        """True: a report is made only when the edit was written (the command exits 0)."""
        return True

    def to_json(self) -> str:
        """The text ``strided set-metadata --json`` prints (without the final newline): a
        JSON object of the fields."""
        document = {
            "path": self.path,
            "format": self.format,
            "set": self.set,
            "deleted": self.deleted,
            "tensors_unchanged": self.tensors_unchanged,
        }
        return json.dumps(document, indent=1)


def apply(path: str, edit: Edit, output: str | None, overwrite: bool) -> SetMetadataReport:
    """Make the edit (``_set_metadata.set_metadata``) and report it."""
    result = _edit(path, edit, output, overwrite)
    return SetMetadataReport(output or path, result.kind, result.types, list(edit.deletes))


def set_metadata(
    path: str | os.PathLike[str],
    set: Mapping[str, Any] | None = None,  # shadows the builtin: the contract's keyword
    delete: Iterable[str] = (),
    types: Mapping[str, str] | None = None,
    output: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
) -> SetMetadataReport:
    """Set or delete metadata keys of a GGUF or safetensors file, its tensors untouched:
    what ``strided set-metadata`` does.

    Deletes apply first, then sets. GGUF key/values keep their order and an existing key
    keeps its type; a new key takes the type ``types`` gives it, else llama.cpp's type
    when it is one of llama.cpp's known keys (``llama.context_length`` is ``UINT32``,
    ``tokenizer.chat_template`` ``STRING``), and is refused otherwise. A list value is an
    array of that type. ``general.alignment`` and ``split.*`` cannot change. safetensors
    ``__metadata__`` values are strings. The whole new header is built and checked
    before anything is written; the file is then rewritten atomically (a symbolic link's
    target is rewritten and the link kept), tensor bytes copied unchanged.

    Args:
        path: the GGUF or safetensors file (local).
        set: key -> value: a ``str``, an ``int``, a ``float`` (an int is taken for a float
            type), a ``bool``, or a list (or tuple) of them for a GGUF array. A value must
            fit its type as it is: ``"4096"`` is not a ``UINT32``.
        delete: keys to delete (a single ``str`` is one key).
        types: key -> type of a new GGUF key: the command line's ``u8 i8 u16 i16 u32 i32
            u64 i64 f32 f64 bool str`` or GGUF's ``UINT8 ... FLOAT64 BOOL STRING``; an
            existing key given a type must already have it.
        output: write the edited file here instead of replacing ``path``.
        overwrite: replace an existing ``output``.

    Returns:
        A ``SetMetadataReport``: the path written, the format, each key set with its
        type, the keys deleted; ``to_json()`` is what ``strided set-metadata --json``
        prints.

    Raises:
        FormatError: a value that does not fit its type, a new GGUF key with no type, a
            key to delete that is not there, a layout key, another format, nothing to
            do, or a file another writer replaced meanwhile; nothing is written.
        LimitError: a header beyond strided's caps; nothing is written.
        OSError: ``path`` cannot be read, or ``output`` exists (``FileExistsError``)
            without ``overwrite``.

    Example:
        >>> import strided as st
        >>> st.save_gguf("m.gguf", {"w": st.tensor([1.0, 2.0], dtype="F32")})
        >>> report = st.set_metadata("m.gguf", {"llama.context_length": 4096,
        ...                          "my.tags": ["a", "b"]}, types={"my.tags": "str"})
        >>> report.set
        {'llama.context_length': 'UINT32', 'my.tags': 'ARRAY[STRING]'}
        >>> st.open_checkpoint("m.gguf").metadata["llama.context_length"]
        4096
    """
    sets = list(_sets(set))
    deletes = [delete] if isinstance(delete, str) else list(delete)
    for key in deletes:
        if type(key) is not str:
            raise FormatError(f"delete: keys are strings, found {type(key).__name__}")
    if not sets and not deletes:
        raise FormatError("set_metadata: give keys to set (set=) or to delete (delete=)")
    given = _types(types, {key for key, _ in sets})
    edit = Edit(sets, deletes, None, given, values=True, option="types=")
    out = None if output is None else os.fspath(output)
    return apply(os.fspath(path), edit, out, overwrite)


def _sets(values: Mapping[str, Any] | None) -> Iterable[tuple[str, Any]]:
    """The keys to set and their values, checked to be non-empty strings."""
    for key, value in (values or {}).items():
        if type(key) is not str or not key:
            raise FormatError(f"set: keys are non-empty strings, found {str(key)[:40]!r}")
        yield key, value


def _types(types: Mapping[str, str] | None, keys: Iterable[str]) -> dict[str, str]:
    """``types`` in GGUF's names; FormatError for an unknown name or a key not set."""
    spellings = {**TYPE_NAMES, **{name: name for name in TYPE_NAMES.values()}}
    given = {}
    wanted = frozenset(keys)
    for key, name in (types or {}).items():
        if key not in wanted:
            raise FormatError(f"types: key {str(key)[:80]!r} is not set")
        found = spellings.get(name) if type(name) is str else None
        if found is None:
            raise FormatError(
                f"types: {str(name)[:40]!r} for key {key[:80]!r} is not a type "
                f"({', '.join(TYPE_NAMES)}, or {', '.join(TYPE_NAMES.values())})"
            )
        given[key] = found
    return given
