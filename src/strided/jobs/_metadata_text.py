"""Metadata as canonical text: one string per value, the same from every format.

A checkpoint's metadata is part of what it is (for GGUF the key/values are the
tokenizer, the chat template and the architecture), so it is digested and compared, and
for that every value has one canonical text, ``canonical(value)``:

* a str is itself; an int is its decimal text; a bool ``true``/``false``; None ``null``;
* a float is the canonical text of its stored type (``str(Scalar)``): a GGUF FLOAT32
  value and a NumPy float32/float16 scalar keep their type (``1e-05``, not
  ``9.999999747378752e-06``); a Python float is F64;
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
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError
from .._core.floats import shortest_text
from .._kernels.bulk_format import format_flat
from .._kernels.digest import escape_name, sort_key

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = [
    "canonical",
    "canonical_metadata",
    "checkpoint_texts",
    "element_texts",
    "gguf_types",
    "left_out",
    "metadata_digest",
]

_LEFT_OUT = frozenset({"format", "general.alignment"})
_TRUE_FALSE = ("false", "true")


def left_out(key: str) -> bool:
    """Whether ``key`` describes the file rather than the model (never digested or compared)."""
    return key in _LEFT_OUT or key.startswith("split.")


def canonical(value: object, floats: DType = DType.F64) -> str:
    """The canonical text of one metadata value (see the module docstring).

    ``floats`` is the type Python floats were stored as (F32 for a GGUF FLOAT32 value
    or array); it must hold each such value exactly. A value of a type metadata never
    holds (a set, an object) is a TypeError.
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
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return _json(element_texts(value, floats))
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


def element_texts(items: list[Any] | tuple[Any, ...], floats: DType = DType.F64) -> list[str]:
    """The canonical text of each element of a list (bulk paths for long uniform arrays).

    A vocabulary of 262,144 F32 scores is formatted in one vectorized pass, not one
    Python call per element.
    """
    kinds = set(map(type, items))  # one pass in C, not a Python loop per element
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is str:
            return list(items)
        if kind is float and (floats is DType.F32 or floats is DType.F64):
            return format_flat(np.asarray(items, dtype=floats.numpy), floats).split(",")
        if kind is int:
            return list(map(str, items))
    return [canonical(item, floats) for item in items]


def _object_texts(value: dict[Any, Any], floats: DType) -> dict[str, str]:
    for key in value:
        if type(key) is not str:
            raise TypeError(f"metadata object keys are text, never {type(key).__name__}")
    return {key: canonical(value[key], floats) for key in sorted(value, key=sort_key)}


def _json(texts: list[str] | dict[str, str]) -> str:
    return json.dumps(texts, ensure_ascii=False, separators=(",", ":"))


def canonical_metadata(
    metadata: Mapping[str, Any], float32_keys: Collection[str] = ()
) -> dict[str, str]:
    """``key -> canonical text`` for every key that is not left out, in the given order.

    ``float32_keys`` names the keys whose floats were stored as F32 (GGUF FLOAT32 values
    and arrays). The values are read, never changed.
    """
    return {
        key: canonical(value, DType.F32 if key in float32_keys else DType.F64)
        for key, value in metadata.items()
        if not left_out(key)
    }


def metadata_digest(metadata: Mapping[str, Any], float32_keys: Collection[str] = ()) -> str:
    """SHA-256 (64 lowercase hex digits) of the lines ``KEY\\tCANONICAL\\n``, keys sorted
    by their UTF-8 bytes, both escaped as names are; keys left out by name are skipped.
    """
    texts = canonical_metadata(metadata, float32_keys)
    total = hashlib.sha256()
    for key in sorted(texts, key=sort_key):
        total.update(sort_key(f"{escape_name(key)}\t{escape_name(texts[key])}\n"))
    return total.hexdigest()


def checkpoint_texts(checkpoint: Checkpoint) -> dict[str, str]:
    """The canonical texts of an open checkpoint's metadata (left-out keys dropped)."""
    return canonical_metadata(checkpoint._metadata, checkpoint._float32_keys)


def gguf_types(checkpoint: Checkpoint) -> dict[str, str] | None:
    """Key -> GGUF value type (``"UINT32"``, ``"ARRAY[STRING]"``) of a GGUF checkpoint.

    None for the other formats, whose metadata carries no stored types.
    """
    if checkpoint.format != "gguf":
        return None
    handle = getattr(checkpoint._open_reader(), "handle", None)
    types = getattr(handle, "metadata_types", None)
    return dict(types) if isinstance(types, dict) else None
