"""GGUF values from text: what ``set-metadata`` reads from the command line, and what a
GGUF output restores from a safetensors file's canonical texts and ``__gguf_types__``.

One reading of each type's text: an integer is decimal digits (at most 20: no GGUF
integer type holds more, and a long text must not cost a long conversion), a float a
decimal or ``nan``/``inf``/``-inf`` (no ``_`` separators), a BOOL ``true``/``false``, a
STRING itself; ranges are checked when the value is encoded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from .._core.errors import FormatError
from .._core.limits import MAX_METADATA_INTEGER_DIGITS

__all__ = ["parsed_text", "restored_types", "restored_value", "typed_key_values"]

_INTEGER = re.compile(r"[+-]?[0-9]+")
# A float's text: a decimal (exponent allowed) or one of the three non-finite spellings.
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|nan|inf|-inf")
_SCALAR_TYPES = "UINT8|INT8|UINT16|INT16|UINT32|INT32|UINT64|INT64|FLOAT32|FLOAT64|BOOL|STRING"
# A type a GGUF value can be restored as: a scalar, an array of one, or an array of those
# (``ARRAY[ARRAY]``, a nest whose inner types differ, has lost them in its text).
_RESTORABLE = re.compile(
    rf"(?:{_SCALAR_TYPES})|ARRAY\[(?:{_SCALAR_TYPES})\]|ARRAY\[ARRAY\[(?:{_SCALAR_TYPES})\]\]"
)


def parsed_text(text: str, kind: str, where: str) -> Any:
    """The value of type ``kind`` that ``text`` spells (JSON text for an array);
    FormatError when it spells none (ranges are checked when it is encoded)."""
    if kind == "STRING":
        return text
    if kind.startswith("ARRAY"):
        try:
            value = json.loads(text, parse_int=_json_integer)
        except (ValueError, RecursionError):
            raise FormatError(f"{where}: {kind} needs a JSON array, found {text[:40]!r}") from None
        if type(value) is not list:
            raise FormatError(f"{where}: {kind} needs a JSON array, found {text[:40]!r}")
        return value
    if kind == "BOOL":
        if text not in ("true", "false"):
            raise FormatError(f"{where}: BOOL needs true or false, found {text[:40]!r}")
        return text == "true"
    if kind.startswith("FLOAT"):
        if not _FLOAT.fullmatch(text):
            raise FormatError(
                f"{where}: {kind} needs a decimal number, nan, inf or -inf, found {text[:40]!r}"
            )
        return float(text)
    if not _INTEGER.fullmatch(text):
        raise FormatError(f"{where}: {kind} needs an integer, found {text[:40]!r}")
    return _integer(text, where)


def _integer(text: str, where: str) -> int:
    """A checked integer text as an int; FormatError past the digit cap (no GGUF integer
    type holds more than 20 digits, and a long text must not cost a long conversion)."""
    digits = len(text.lstrip("+-"))
    if digits > MAX_METADATA_INTEGER_DIGITS:
        raise FormatError(
            f"{where}: an integer of {digits} digits (GGUF integers have at most "
            f"{MAX_METADATA_INTEGER_DIGITS})"
        )
    return int(text)


def _json_integer(text: str) -> int:
    # json's hook for each integer of an array: the same cap (ValueError -> FormatError).
    if len(text.lstrip("-")) > MAX_METADATA_INTEGER_DIGITS:
        raise ValueError(f"an integer of more than {MAX_METADATA_INTEGER_DIGITS} digits")
    return int(text)


def restored_types(text: object, where: str) -> dict[str, str]:
    """The ``__gguf_types__`` record (key -> GGUF type text) a safetensors file carries,
    the keys whose types can be restored; FormatError when it is not a JSON object of
    texts."""
    if type(text) is not str:
        raise FormatError(f"{where}: __gguf_types__ must be a JSON object text")
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        raise FormatError(f"{where}: __gguf_types__ is not JSON: {text[:40]!r}") from None
    if type(found) is not dict or not all(type(v) is str for v in found.values()):
        raise FormatError(f"{where}: __gguf_types__ must map keys to GGUF type names")
    return {key: kind for key, kind in found.items() if _RESTORABLE.fullmatch(kind)}


def restored_value(text: object, kind: str, where: str) -> Any:
    """The value of GGUF type ``kind`` whose canonical text is ``text`` (an array's is a
    JSON array of its elements' texts; an inner array's element text is its own JSON
    array text); FormatError when the text spells no such value."""
    if not kind.startswith("ARRAY["):
        if type(text) is not str:
            raise FormatError(f"{where}: {kind} needs a text, found a {type(text).__name__}")
        return parsed_text(text, kind, where)
    items: Any = text
    if type(text) is str:
        try:
            items = json.loads(text, parse_int=_json_integer)
        except (ValueError, RecursionError):
            raise FormatError(f"{where}: {kind} needs a JSON array, found {text[:40]!r}") from None
    if type(items) is not list:
        raise FormatError(f"{where}: {kind} needs a JSON array")
    inner = kind[len("ARRAY[") : -1]
    return [restored_value(item, inner, f"{where}[{i}]") for i, item in enumerate(items)]


def typed_key_values(
    texts: Mapping[str, str], types: Mapping[str, str], where: str
) -> list[tuple[str, str, Any]]:
    """``(key, type, value)`` for each canonical text, typed by ``types`` where it names
    the key (else a STRING)."""
    found = []
    for key, text in texts.items():
        kind = types.get(key)
        if kind is None or kind == "STRING":
            found.append((key, "STRING", text))
        else:
            found.append((key, kind, restored_value(text, kind, f"{where}: key {key[:80]!r}")))
    return found
