"""A strict JSON reader for file headers: one reading, bounded depth, typed errors.

``loads_strict`` differs from ``json.loads`` in exactly the ways a hostile file needs:
the input must be UTF-8; nesting deeper than a cap is refused by a linear pre-scan
*before* the parser runs (so no input reaches the recursive parser's limit); a repeated
key at any level is an error rather than last-wins; the non-JSON tokens ``NaN`` and
``Infinity`` are refused; strings holding lone surrogates (which ``\\ud800`` escapes can
produce) are refused. Every failure is a FormatError naming ``where``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ._errors import FormatError

__all__ = ["loads_strict"]

# One JSON string: everything from a quote to the next unescaped quote. The possessive
# quantifiers and the end-of-input alternatives make every attempt succeed, so stripping
# all strings is one linear pass however the input is crafted (an unterminated string
# just runs to the end, and the parser reports it afterwards).
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+\\?(?:"|\Z)', re.DOTALL)
# Without any backslash no quote is escaped: a simpler (faster) pattern does.
_PLAIN_STRING = re.compile(rb'"[^"]*+(?:"|\Z)')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_CHUNK = 1 << 16  # bounded temporaries however long the header


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _BadText(Exception):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return result


def _checked_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Only used when the text holds a \u escape, the one way to spell a lone surrogate.
    for key, value in pairs:
        _check_text(key)
        if type(value) is str:
            _check_text(value)
    return _object(pairs)


def _check_text(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _BadText(text[:40]) from None


def _constant(token: str) -> Any:
    raise _BadText(token)


def _check_depth(data: bytes, limit: int, where: str) -> None:
    pattern = _STRING if b"\\" in data else _PLAIN_STRING
    brackets = pattern.sub(b"", data).translate(None, _NOT_BRACKETS)
    codes = np.frombuffer(brackets, dtype=np.uint8)
    depth = 0
    for start in range(0, codes.size, _CHUNK):
        chunk = codes[start : start + _CHUNK]
        opens = (chunk == 0x5B) | (chunk == 0x7B)  # '[' or '{'
        running = np.cumsum(np.where(opens, np.int8(1), np.int8(-1)), dtype=np.int32) + depth
        if int(running.max()) > limit:
            raise FormatError(f"{where}: JSON nested deeper than {limit} levels")
        depth = int(running[-1])


def loads_strict(data: bytes, where: str, max_depth: int) -> Any:
    """Parse UTF-8 JSON ``data`` strictly (see the module docstring)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{where}: invalid UTF-8 at byte {exc.start}") from None
    _check_depth(data, max_depth, where)
    try:
        hook = _checked_object if b"\\u" in data else _object
        return json.loads(text, object_pairs_hook=hook, parse_constant=_constant)
    except _Duplicate as exc:
        raise FormatError(f"{where}: key {exc.key[:80]!r} appears more than once") from None
    except _BadText as exc:
        raise FormatError(f"{where}: invalid JSON text {exc.args[0]!r}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: invalid JSON: {exc.msg} at character {exc.pos}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        # e.g. an integer literal beyond Python's digit limit.
        raise FormatError(f"{where}: invalid JSON: {str(exc)[:120]}") from None
