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
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.errors import FormatError, LimitError

__all__ = ["loads_strict"]

# The depth scan reads the text in chunks of this many bytes: its extra memory is a few
# arrays of one chunk, whatever the size of the document.
_CHUNK = 1 << 16
_QUOTE, _BACKSLASH = 0x22, 0x5C
# What json.loads builds, measured: a value is a small object and its slot; a list its
# header; a JSON object a dict plus the list of pair tuples the hook receives.
_VALUE_BYTES = 40
_LIST_BYTES = 72
_OBJECT_BYTES = 200


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


def _check_depth(data: bytes, limit: int, where: str) -> int:
    """FormatError when brackets outside strings nest deeper than ``limit``; otherwise
    an estimate, in bytes, of what ``json.loads`` builds from ``data``.

    One streaming pass over fixed-size chunks, carrying three small numbers between
    them, so its memory does not grow with the document. A quote counts when an even
    number of backslashes precedes it; treating backslashes outside strings the same way
    (where JSON forbids them) can only differ from the parser after a point where the
    parser fails anyway.
    """
    codes = np.frombuffer(data, dtype=np.uint8)
    depth = 0  # nesting depth at the start of the chunk
    values = 1  # values the document holds: one, plus one per separator outside strings
    lists = objects = 0
    quotes = 0  # parity of unescaped quotes so far: 1 inside a string
    slashes = 0  # backslashes that end the previous chunk
    for start in range(0, codes.size, _CHUNK):
        chunk = codes[start : start + _CHUNK]
        quote = chunk == _QUOTE
        if slashes or bool((chunk == _BACKSLASH).any()):
            parity, slashes = _escapes(chunk, slashes)
            quote &= parity == 0
        inside = (np.cumsum(quote, dtype=np.int32) + quotes) & 1
        quotes = int(inside[-1])
        # A bracket counts when it is outside every string (a quote before it closed one).
        opens = ((chunk == 0x5B) | (chunk == 0x7B)) & (inside == 0)
        closes = ((chunk == 0x5D) | (chunk == 0x7D)) & (inside == 0)
        separators = ((chunk == 0x2C) | (chunk == 0x3A)) & (inside == 0)
        values += int(np.count_nonzero(separators))
        lists += int(np.count_nonzero((chunk == 0x5B) & (inside == 0)))
        objects += int(np.count_nonzero((chunk == 0x7B) & (inside == 0)))
        running = np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)
        if running.size and int(running.max()) + depth > limit:
            raise FormatError(f"{where}: JSON nested deeper than {limit} levels")
        depth += int(running[-1])
    # Within a few percent of what the parser builds for headers of real tensors (about
    # 8x their text) and of the densest hostile shapes (empty objects: about 20x).
    return values * _VALUE_BYTES + lists * _LIST_BYTES + objects * _OBJECT_BYTES


def _escapes(chunk: np.ndarray[Any, Any], carry: int) -> tuple[np.ndarray[Any, Any], int]:
    """Per byte, the parity of the backslashes right before it; and the chunk's trailing run.

    ``carry`` is the parity of the backslashes that ended the previous chunk.
    """
    slash = chunk == _BACKSLASH
    index = np.arange(chunk.size, dtype=np.int32)
    last_other = np.maximum.accumulate(np.where(slash, np.int32(-1), index))
    run = index - last_other + np.where(last_other < 0, np.int32(carry), np.int32(0))
    before = np.empty_like(run)
    before[0] = carry
    before[1:] = run[:-1]
    return before & 1, int(run[-1]) & 1


def loads_strict(
    data: bytes, where: str, max_depth: int, charge: Callable[[int], None] | None = None
) -> Any:
    """Parse UTF-8 JSON ``data`` strictly (see the module docstring).

    ``charge``, when given, is called before the parser runs with an estimate in bytes
    of what parsing builds (from one linear scan of the text), so a caller's budget can
    refuse a document whose objects would outgrow it (a header of many tiny objects
    builds about 20 bytes per byte) before any of them exists.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{where}: invalid UTF-8 at byte {exc.start}") from None
    cost = _check_depth(data, max_depth, where)
    if charge is not None:
        charge(cost)
    try:
        hook = _checked_object if b"\\u" in data else _object
        return json.loads(text, object_pairs_hook=hook, parse_constant=_constant)
    except _Duplicate as exc:
        raise FormatError(f"{where}: key {exc.key[:80]!r} appears more than once") from None
    except _BadText as exc:
        raise FormatError(f"{where}: invalid JSON text {exc.args[0]!r}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: invalid JSON: {exc.msg} at character {exc.pos}") from None
    except MemoryError:
        raise LimitError(
            f"{where}: not enough memory to hold the parsed {len(data)}-byte JSON document"
        ) from None
    except (ValueError, RecursionError) as exc:
        # e.g. an integer literal beyond Python's digit limit.
        raise FormatError(f"{where}: invalid JSON: {str(exc)[:120]}") from None
