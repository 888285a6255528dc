"""Metadata as canonical text: one string per value, the same from every format.

A checkpoint's metadata is part of what it is (for GGUF the key/values are the
tokenizer, the chat template and the architecture), so it is digested and compared, and
for that every value has one canonical text, ``canonical(value)``:

* a str is itself; an int is its decimal text; a bool ``true``/``false``; None ``null``;
* a float is the canonical text of its stored type (``str(Scalar)``): a GGUF FLOAT32
  value and a NumPy float32/float16 scalar keep their type (``1e-05``, not
  ``9.999999747378752e-06``); a Python float is F64. The type travels with the value
  (``_core.stored_float``): a ``StoredFloat`` names its own, the floats of a
  ``StoredFloatList`` (a GGUF ``ARRAY[FLOAT32]``, at any depth of a nest) the list's;
* bytes are ``b64:`` followed by their base64 text;
* a list or tuple is the compact JSON array of its elements' canonical texts
  (``["1","a"]``: every element a JSON string, non-ASCII characters kept as they are);
  a dict the compact JSON object of its values' canonical texts, keys sorted by their
  UTF-8 bytes.

The text does not record the stored type: a GGUF u32 ``4096``, a GGUF string ``"4096"``
and a safetensors ``"4096"`` are the same text. Keys that describe the file's layout
rather than the model are left out by name in every format: ``format``,
``general.alignment`` and every key starting with ``split.``.

The metadata digest is the SHA-256 of the lines ``KEY\\tCANONICAL\\n``, keys sorted by
their UTF-8 bytes, with a backslash, newline or tab in the key and in the text written
``\\\\``, ``\\n``, ``\\t`` (as tensor names are in the checkpoint digest), so every key is
exactly one line. No metadata at all digests to the SHA-256 of nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError
from .._core.floats import shortest_text
from .._core.stored_float import StoredFloat, StoredFloatList
from .._kernels.bulk_format import format_flat, json_int_texts, json_strings, quoted_groups
from .._kernels.digest import escape_name, sort_key

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = [
    "GGUF_TYPES_KEY",
    "canonical",
    "canonical_metadata",
    "checkpoint_texts",
    "element_texts",
    "gguf_types",
    "left_out",
    "metadata_digest",
    "shown",
    "type_text",
]

# The GGUF types of a GGUF source's keys, written beside their texts by ``convert`` to
# safetensors so a later GGUF output restores them: a record of the file, not the model.
GGUF_TYPES_KEY = "__gguf_types__"
_LEFT_OUT = frozenset({"format", "general.alignment", GGUF_TYPES_KEY})
_TRUE_FALSE = ("false", "true")


def left_out(key: str) -> bool:
    """Whether ``key`` describes the file rather than the model (never digested or compared)."""
    return key in _LEFT_OUT or key.startswith("split.")


def canonical(value: object, floats: DType = DType.F64) -> str:
    """The canonical text of one metadata value (see the module docstring).

    ``floats`` is the type a plain ``float`` inside ``value`` was stored as (F64 unless
    the caller knows better); it must hold each such value exactly. A ``StoredFloat``
    names its own type, and a ``StoredFloatList`` its plain floats' type. A value of a
    type metadata never holds (a set, an object) is a TypeError.
    """
    kind = type(value)
    if kind is str:
        return value  # type: ignore[return-value]
    if kind is bool:
        return _TRUE_FALSE[bool(value)]
    if kind is int:
        return str(value)
    if kind is float:
        return shortest_text(floats, value)  # type: ignore[arg-type]
    if isinstance(value, StoredFloat):
        return shortest_text(value.dtype, value)
    if value is None:
        return "null"
    if isinstance(value, StoredFloatList):
        return _array_json(value, value.dtype)
    if isinstance(value, (list, tuple)):
        return _array_json(value, floats)
    if isinstance(value, dict):
        return _json(_object_texts(value, floats))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "b64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, np.generic):
        return _numpy_scalar(value)
    raise TypeError(f"metadata values are never {kind.__name__}")


def _numpy_scalar(value: np.generic[Any]) -> str:
    """A NumPy (or ml_dtypes) scalar in its own type: float32 0.1 is ``0.1``."""
    try:
        dtype = DType.from_numpy(value.dtype)
    except DTypeError:
        raise TypeError(f"metadata values are never NumPy {value.dtype}") from None
    if dtype.is_float:
        return shortest_text(dtype, float(value))
    if dtype is DType.BOOL:
        return _TRUE_FALSE[bool(value)]
    return str(int(value))


def element_texts(items: list[Any] | tuple[Any, ...], floats: DType | None = None) -> list[str]:
    """The canonical text of each element of a list (bulk paths for long uniform arrays).

    ``floats`` is the type the list's plain floats were stored as: a
    ``StoredFloatList``'s ``dtype`` always, else the caller's (F64 by default). A
    vocabulary of 262,144 F32 scores is formatted in one vectorized pass, not one
    Python call per element.
    """
    if isinstance(items, StoredFloatList):
        floats = items.dtype
    elif floats is None:
        floats = DType.F64
    kinds = set(map(type, items))  # one pass in C, not a Python loop per element
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is str:
            return list(items)
        if kind is float:
            return format_flat(np.asarray(items, dtype=floats.numpy), floats).split(",")
        if kind is int:
            return list(map(str, items))
    return [canonical(item, floats) for item in items]


def _array_json(items: list[Any] | tuple[Any, ...], floats: DType) -> str:
    """``_json(element_texts(items, floats))``, written directly for uniform arrays.

    A vocabulary's tokens go to the JSON encoder as they are (``json_strings``); the
    texts of numbers need no JSON escaping, so they are joined between quotes without
    building a list of 262,144 strings and encoding it again. The result is the same
    text either way.
    """
    if not items:
        return "[]"
    kinds = set(map(type, items))  # one pass in C, not a Python loop per element
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is str:
            return json_strings(list(items))
        if kind is float:
            flat = np.asarray(items, dtype=floats.numpy)
            return '["' + '","'.join(quoted_groups(flat, floats)) + '"]'
        if kind is int:
            return json_int_texts(list(items))
    return _json([canonical(item, floats) for item in items])


def _object_texts(value: dict[Any, Any], floats: DType) -> dict[str, str]:
    for key in value:
        if type(key) is not str:
            raise TypeError(f"metadata object keys are text, never {type(key).__name__}")
    return {key: canonical(value[key], floats) for key in sorted(value, key=sort_key)}


def _json(texts: list[str] | dict[str, str]) -> str:
    return json.dumps(texts, ensure_ascii=False, separators=(",", ":"))


def canonical_metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """``key -> canonical text`` for every key that is not left out, in the given order.

    Each float's width is read off the value itself (see the module docstring). The
    values are read, never changed.
    """
    return {key: canonical(value) for key, value in metadata.items() if not left_out(key)}


def metadata_digest(metadata: Mapping[str, Any]) -> str:
    """SHA-256 (64 lowercase hex digits) of the lines ``KEY\\tCANONICAL\\n``, keys sorted
    by their UTF-8 bytes, both escaped as names are; keys left out by name are skipped.
    """
    texts = canonical_metadata(metadata)
    total = hashlib.sha256()
    for key in sorted(texts, key=sort_key):
        total.update(sort_key(f"{escape_name(key)}\t{escape_name(texts[key])}\n"))
    return total.hexdigest()


def checkpoint_texts(checkpoint: Checkpoint) -> dict[str, str]:
    """The canonical texts of an open checkpoint's metadata (left-out keys dropped)."""
    return canonical_metadata(checkpoint._metadata)


def gguf_types(checkpoint: Checkpoint) -> dict[str, str] | None:
    """Key -> GGUF value type (``"UINT32"``, ``"ARRAY[STRING]"``) of a GGUF checkpoint.

    None for the other formats, whose metadata carries no stored types.
    """
    return checkpoint._face.metadata_types()


def shown(value: Any, floats: DType | None = None) -> Any:
    """``value`` for people: each float that remembers a narrower stored type becomes
    the float of its shortest text in that type (an F32 ``1e-05`` is stored as
    ``9.999999747378752e-06``; shown, it is ``1e-05`` again, which rounds back to the
    same F32); lists and dicts are copied as plain ones, at any depth.

    ``floats`` is the stored type of the plain floats of a list (by default a
    ``StoredFloatList``'s ``dtype``; pass it for a slice of one, which is a plain list).
    """
    if isinstance(value, StoredFloat):
        return float(shortest_text(value.dtype, value))
    if isinstance(value, list):
        if floats is None:
            floats = value.dtype if isinstance(value, StoredFloatList) else DType.F64
        if floats is DType.F64:
            return [shown(item) for item in value]
        return [
            float(shortest_text(floats, item)) if type(item) is float else shown(item)
            for item in value
        ]
    if isinstance(value, dict):
        return {key: shown(item) for key, item in value.items()}
    return value


_TYPE_NAMES = {str: "str", int: "int", bool: "bool", float: "F64", bytes: "bytes"}


def type_text(value: Any) -> str:
    """The stored type of a metadata value of a format without GGUF's type names.

    ``F32``/``F16``/... for a float that remembers its type, ``F64`` for a plain float;
    ``int``, ``str``, ``bool``, ``bytes``, ``null``, ``dict``; ``list[T]`` for a list
    whose elements all have the type ``T`` (a ``StoredFloatList`` of F32:
    ``list[F32]``), ``list[*]`` when they differ or the list is empty.
    """
    if isinstance(value, StoredFloat):
        return value.dtype.name
    if value is None:
        return "null"
    named = _TYPE_NAMES.get(type(value))
    if named is not None:
        return named
    if isinstance(value, dict):
        return "dict"
    if not isinstance(value, (list, tuple)):
        return type(value).__name__
    floats = value.dtype.name if isinstance(value, StoredFloatList) else "F64"
    kinds = set(map(type, value))  # one pass in C: a vocabulary is one kind
    if len(kinds) == 1:
        (kind,) = kinds
        if kind in _TYPE_NAMES:
            return f"list[{floats if kind is float else _TYPE_NAMES[kind]}]"
    inner = {floats if type(item) is float else type_text(item) for item in value}
    return f"list[{inner.pop()}]" if len(inner) == 1 else "list[*]"
