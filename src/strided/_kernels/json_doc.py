"""The JSON document ``{"dtype": ..., "shape": [...], "data": [...]}``: writing and strict reading.

Reading distrusts its input (HOSTILE_INPUT.md): bytes must be UTF-8; a document with
more than ``_MAX_BRACKETS`` ``[``/``{`` is refused before ``json.loads`` runs (a tensor
document has exactly three, so no JSON nesting can make the parser recurse); repeated
keys and the non-JSON tokens ``NaN``/``Infinity`` are errors; the dtype must be the
canonical name; the shape is checked against the limits before anything is sized by
it; ``len(data)`` must equal the element count before any entry is converted. So the
work and memory are bounded by the document's length.

Documents exactly as ``to_json`` writes them (compact, keys in order, no escapes) take a
fast path that never builds the list of Python strings: the data array's bytes go
straight to the bulk parser, which accepts them only if they are exactly the expected
number of well-formed entries, so it returns what the full path would. Anything else
goes through ``json.loads`` and the same checks, which find and name the problem.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, FormatError, LimitError, ShapeError
from .._core.limits import MAX_JSON_BRACKETS as _MAX_BRACKETS
from .._core.limits import MAX_RANK, check_dims
from .bulk_format import format_flat, quoted_groups
from .bulk_parse import parse_list, parse_quoted
from .strict_json import loads_strict

__all__ = ["document", "dumps", "from_document", "loads"]

_KEYS = ("dtype", "shape", "data")
_CANONICAL = {dtype.name: dtype for dtype in DType}
_DUMP_CHUNK = 1 << 16  # entries formatted per step by dumps
_FAST_HEAD = re.compile(
    rb'\{"dtype":"([A-Z0-9_]{1,8})","shape":\['
    rb"((?:0|[1-9][0-9]{0,18})(?:,(?:0|[1-9][0-9]{0,18})){0,31})?"
    rb'\],"data":\['
)


def document(dtype: DType, flat: np.ndarray, dims: tuple[int, ...]) -> dict[str, Any]:
    """The ``to_dict`` form of a flat row-major array."""
    body = format_flat(flat, dtype)
    return {"dtype": dtype.name, "shape": list(dims), "data": body.split(",") if body else []}


def dumps(dtype: DType, flat: np.ndarray, dims: tuple[int, ...]) -> str:
    """The compact JSON text of a flat row-major array (canonical strings need no escapes).

    The entries are formatted ``_DUMP_CHUNK`` at a time into quoted groups, and one join
    writes the document: the memory is the groups plus the result (twice the text) and
    a few MiB of work space.
    """
    shape = ",".join(map(str, dims))
    head = f'{{"dtype":"{dtype.name}","shape":[{shape}],"data":['
    if flat.size == 0:
        return head + "]}"
    groups: list[str] = []
    for start in range(0, flat.size, _DUMP_CHUNK):
        groups.extend(quoted_groups(flat[start : start + _DUMP_CHUNK], dtype))
    groups[0] = head + '"' + groups[0]
    groups[-1] += '"]}'
    return '","'.join(groups)


def loads(text: object) -> tuple[DType, tuple[int, ...], np.ndarray]:
    """Parse a JSON document (str or UTF-8 bytes) into (dtype, dims, fresh flat array)."""
    source: str | bytes
    if isinstance(text, str):
        source = text.encode("ascii") if text.isascii() else text
    elif isinstance(text, (bytes, bytearray, memoryview)):
        source = bytes(text)
    else:
        raise FormatError(f"from_json: expected str or bytes, found {type(text).__name__}")
    if isinstance(source, bytes):
        fast = _fast_path(source)
        if fast is not None:
            return fast
    return from_document(_parse_json(source))


def from_document(obj: object) -> tuple[DType, tuple[int, ...], np.ndarray]:
    """Validate a ``to_dict``-shaped object into (dtype, dims, fresh flat array)."""
    dtype, dims, data = _validate(obj)
    return dtype, dims, parse_list(dtype, data)


# -- reading -----------------------------------------------------------------------


def _fast_path(raw: bytes) -> tuple[DType, tuple[int, ...], np.ndarray] | None:
    """The result for a document exactly in ``to_json``'s layout, else None."""
    head = _FAST_HEAD.match(raw)
    if head is None or not raw.endswith(b"]}"):
        return None
    dtype = _CANONICAL.get(head[1].decode("ascii"))
    if dtype is None:
        return None
    try:
        dims = check_dims([int(dim) for dim in head[2].split(b",")] if head[2] else [])
    except DataError:
        return None  # the full path reports it, in its order of checks
    count = 1
    for dim in dims:
        count *= dim
    start, end = head.end(), len(raw) - 2  # the data array's inside: "t1","t2",...
    if count == 0:
        return (dtype, dims, np.empty(0, dtype=dtype.numpy)) if start == end else None
    # Each entry takes at least 4 bytes: a character, two quotes and a comma (or bracket).
    if end - start < 4 * count - 1 or raw[start] != ord('"') or raw[end - 1] != ord('"'):
        return None
    flat = parse_quoted(dtype, raw[start + 1 : end - 1], count)
    return None if flat is None else (dtype, dims, flat)


def _parse_json(text: str | bytes) -> object:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets > _MAX_BRACKETS:
        raise FormatError(
            f"from_json: {brackets} '[' and '{{' found; a tensor document has one object "
            "and two arrays, and no nesting"
        )
    return loads_strict(raw, "from_json", max_depth=_MAX_BRACKETS)


def _snapshot(value: Any, kind: type[Any], what: str, most: int | None = None) -> Any:
    """``value`` (a ``kind`` instance) as a plain ``kind``: a subclass is copied first.

    A subclass may override iteration or lookup to do anything; whatever it raises
    while being copied becomes a FormatError, a list is read to at most ``most`` items
    (one more than can be valid), and only the plain copy is used afterwards (so the
    caller's object is read exactly once).
    """
    if type(value) is kind:
        return value
    try:
        if kind is list:
            return list(itertools.islice(value, most))
        return kind(value)
    except Exception as exc:
        raise FormatError(
            f"{what}: reading the {type(value).__name__[:40]} failed ({type(exc).__name__})"
        ) from None


def _validate(found: object) -> tuple[DType, tuple[int, ...], list[Any]]:
    if not isinstance(found, dict):
        raise FormatError(
            f"expected an object with keys dtype, shape, data; found {type(found).__name__}"
        )
    obj = _snapshot(found, dict, "from_dict")
    if any(type(key) is not str for key in obj):
        raise FormatError("expected exactly the keys dtype, shape, data; found a non-str key")
    if set(obj) != set(_KEYS) or len(obj) != 3:
        missing = [key for key in _KEYS if key not in obj]
        extra = [key for key in obj if key not in _KEYS]
        raise FormatError(
            f"expected exactly the keys dtype, shape, data; missing {missing}, "
            f"unexpected {[repr(key)[:40] for key in extra[:5]]}"
        )
    dtype = _check_dtype(obj["dtype"])
    dims = _check_shape(obj["shape"])
    data = obj["data"]
    if not isinstance(data, list):
        raise FormatError(f"data must be a list of strings, found {type(data).__name__}")
    count = 1
    for dim in dims:
        count *= dim
    data = _snapshot(data, list, "data", count + 1)
    if len(data) != count:
        raise FormatError(f"data has {len(data)} entries; shape {list(dims)} needs {count}")
    return dtype, dims, data


def _check_dtype(name: object) -> DType:
    if type(name) is not str:
        raise DTypeError(f"dtype must be a string, found {type(name).__name__}")
    dtype = _CANONICAL.get(name)
    if dtype is None:
        hint = ""
        try:
            hint = f" (did you mean {DType.parse(name).name!r}?)"
        except DataError:
            pass
        raise DTypeError(
            f"dtype must be a canonical name as to_json writes it ({', '.join(_CANONICAL)}), "
            f"found {name[:40]!r}{hint}"
        )
    return dtype


def _check_shape(found: object) -> tuple[int, ...]:
    if not isinstance(found, list):
        raise ShapeError(f"shape must be a list of ints, found {type(found).__name__}")
    shape: list[Any] = _snapshot(found, list, "shape", MAX_RANK + 1)
    if len(shape) > MAX_RANK:
        raise LimitError(f"shape: rank {len(shape)} exceeds MAX_RANK ({MAX_RANK})")
    for index, dim in enumerate(shape):
        if type(dim) is not int:  # JSON ints only: no bool, no 2.0, no str
            raise ShapeError(
                f"shape[{index}] must be an int, found {type(dim).__name__} {dim!r:.40}"
            )
    return check_dims(shape)  # signs and sizes; its messages print huge ints safely
