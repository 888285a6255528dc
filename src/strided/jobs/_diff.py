"""Comparing two checkpoints tensor by tensor: statuses, exact statistics, parallel parts.

Statuses: ``identical`` (same dtype, shape and bits), ``equal`` (values match within
the tolerance though bits or dtype differ), ``differs``, ``shape differs``, ``kind
differs`` (an integer tensor against a float one, or stored types strided cannot
decode that are not the same type), ``only in A`` and ``only in B``. Quantized GGUF
tensors are compared by their dequantized F32 values (and are ``identical`` to a tensor
of the same type with the same stored blocks). Two tensors of one stored type strided
cannot decode (``F4``...) are compared byte by byte: their counts and indices are bytes.

Metadata is compared key by key through its canonical text (``_metadata_text``), so a
GGUF u32 ``4096`` equals a safetensors ``"4096"``: ``equal``, ``differs``, ``type
differs`` (both sides GGUF, stored types unlike), ``only in A``, ``only in B``. Keys
describing the file rather than the model (``format``, ``general.alignment``,
``split.*``) are not compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError
from .._kernels.compare import Tally, Tolerance, compare
from .._kernels.digest import sort_key
from ._checkpoint import has_dtype
from ._metadata_text import checkpoint_texts, element_texts, gguf_types
from ._pool import JobError, Part, loaded, opened
from ._values import Source

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint, TensorInfo

__all__ = [
    "METADATA_STATUSES",
    "STATUSES",
    "DiffTask",
    "kind_of",
    "metadata_entries",
    "result",
    "run_task",
    "shorten",
    "status_before_values",
]

STATUSES = (
    "identical",
    "equal",
    "differs",
    "shape differs",
    "kind differs",
    "only in A",
    "only in B",
)
METADATA_STATUSES = ("equal", "differs", "type differs", "only in A", "only in B")
_STEP = 1 << 18  # elements compared at once: temporaries stay a few MiB


def kind_of(checkpoint: Checkpoint, name: str) -> str:
    """``"float"``, ``"int"`` (integers and BOOL) or ``"raw:TYPE"`` (compared as bytes)."""
    type_name = checkpoint.info(name).dtype
    if has_dtype(type_name):
        return "float" if DType[type_name].is_float else "int"
    return "float" if checkpoint.readable(name) else f"raw:{type_name}"


def status_before_values(
    kind_a: str, kind_b: str, info_a: TensorInfo, info_b: TensorInfo
) -> str | None:
    """``"kind differs"`` or ``"shape differs"`` when values cannot be compared, else None."""
    if kind_a != kind_b:
        return "kind differs"
    if info_a.shape != info_b.shape:
        return "shape differs"
    return None


DiffTask = tuple[str, str, Sequence[Part], Tolerance]


def run_task(task: DiffTask) -> list[Tally]:
    """Compare the parts of one task (run in a worker): one Tally per part."""
    path_a, path_b, parts, tolerance = task
    tallies = []
    for part in parts:
        try:
            tallies.append(_compare_part(path_a, path_b, part, tolerance))
        except DataError as error:
            raise JobError(f"{path_a} / {path_b}", part.name, str(error)) from None
    return tallies


def _source(path: str, name: str) -> Source:
    checkpoint = opened(path)
    # A tensor assembled from chunks is read by range instead (never held whole).
    if has_dtype(checkpoint.info(name).dtype) and not checkpoint._assembled(name):
        return Source(checkpoint, name, loaded(path, name))
    return Source(checkpoint, name)


def _compare_part(path_a: str, path_b: str, part: Part, tolerance: Tolerance) -> Tally:
    a, b = _source(path_a, part.name), _source(path_b, part.name)
    same_type = a.type_name == b.type_name
    same_float = same_type and a.kind == "float"
    found: Tally | None = None
    for start in range(part.start, part.stop, _STEP):
        stop = min(start + _STEP, part.stop)
        if same_type and _same_bytes(a.stored_bytes(start, stop), b.stored_bytes(start, stop)):
            step = Tally(identical=True, max_ulp=0 if same_float else None)
        else:
            rule = tolerance if a.kind != "raw" else Tolerance()
            step = compare(a.values(start, stop), a.dtype, b.values(start, stop), b.dtype, rule,
                           start, same_float)  # fmt: skip
        found = step if found is None else found.merge(step)
    return found if found is not None else Tally(max_ulp=0 if same_float else None)


def _same_bytes(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Whether two flat uint8 arrays hold the same bytes (compared 8 at a time)."""
    if a.size != b.size:
        return False
    whole = a.size - a.size % 8
    if whole and a.flags.c_contiguous and b.flags.c_contiguous:
        if not np.array_equal(a[:whole].view(np.uint64), b[:whole].view(np.uint64)):
            return False
        a, b = a[whole:], b[whole:]
    return bool(np.array_equal(a, b))


def _side(info: TensorInfo) -> dict[str, Any]:
    return {"dtype": info.dtype, "shape": list(info.shape)}


def result(
    status: str | None,
    info_a: TensorInfo | None,
    info_b: TensorInfo | None,
    tally: Tally | None,
    raw: bool = False,
) -> dict[str, Any]:
    """One tensor's entry: ``status``, the two sides, and for value comparisons the counts.

    ``equal`` and ``differs`` carry ``count``, ``max_abs`` (absent for raw bytes) and
    ``max_ulp`` (two tensors of one float dtype); ``differs`` also ``first``: the
    row-major multi-index of the first mismatch (a byte index for raw bytes) and both
    values as canonical text.
    """
    if status is None:
        assert tally is not None and info_a is not None and info_b is not None
        same = info_a.dtype == info_b.dtype
        status = (
            "identical" if tally.identical and same else "equal" if not tally.count else "differs"
        )
    entry: dict[str, Any] = {"status": status}
    if info_a is not None:
        entry["a"] = _side(info_a)
    if info_b is not None:
        entry["b"] = _side(info_b)
    if tally is None or status == "identical":
        return entry
    entry["count"] = tally.count
    if tally.first is not None and info_a is not None:
        dims = (info_a.byte_len,) if raw else tuple(info_a.shape)
        index = [int(i) for i in np.unravel_index(tally.first, dims)] if dims else []
        entry["first"] = {"index": index, "a": tally.first_a, "b": tally.first_b}
    if not raw:
        entry["max_abs"] = tally.max_abs
        if tally.max_ulp is not None:
            entry["max_ulp"] = tally.max_ulp
    return entry


def shorten(text: str, limit: int, at: int = 0) -> str:
    """``text`` when at most ``limit`` characters; else ``limit`` of them, from a little
    before character ``at`` (``…`` marking a cut at either end), and the full length.
    """
    if len(text) <= limit:
        return text
    start = max(0, min(at - limit // 4, len(text) - limit))
    stop = start + limit
    head = "…" if start else ""
    tail = "…" if stop < len(text) else ""
    return f"{head}{text[start:stop]}{tail} ({len(text):,} characters)"


def metadata_entries(a: Checkpoint, b: Checkpoint, limit: int = 200) -> dict[str, dict[str, Any]]:
    """Every metadata key of either checkpoint (sorted by UTF-8 bytes) -> its entry.

    ``{"status": "equal"}``; ``only in A``/``only in B`` with the value there (``a`` or
    ``b``); ``differs``/``type differs`` with both values. Values are canonical texts,
    shortened past ``limit`` characters (``shorten``). Two arrays that differ also give
    ``items`` (both lengths), ``index`` (the first position whose elements differ, or
    the shorter length when one is a prefix of the other) and ``first`` (both elements
    there, None past an end); other values give ``offset``, the first character that
    differs, and are shortened around it. ``type differs`` (both sides GGUF, stored types
    unlike) also gives both types as ``types``.
    """
    texts_a, texts_b = checkpoint_texts(a), checkpoint_texts(b)
    types_a, types_b = gguf_types(a), gguf_types(b)
    entries: dict[str, dict[str, Any]] = {}
    for key in sorted(texts_a.keys() | texts_b.keys(), key=sort_key):
        if key not in texts_b:
            entries[key] = {"status": "only in A", "a": shorten(texts_a[key], limit)}
            continue
        if key not in texts_a:
            entries[key] = {"status": "only in B", "b": shorten(texts_b[key], limit)}
            continue
        type_a = None if types_a is None else types_a.get(key)
        type_b = None if types_b is None else types_b.get(key)
        if type_a is not None and type_b is not None and type_a != type_b:
            entry = _change(a, b, key, (texts_a[key], texts_b[key]), "type differs", limit)
            entry["types"] = {"a": type_a, "b": type_b}
            entries[key] = entry
        elif texts_a[key] != texts_b[key]:
            entries[key] = _change(a, b, key, (texts_a[key], texts_b[key]), "differs", limit)
        else:
            entries[key] = {"status": "equal"}
    return entries


def _change(
    a: Checkpoint, b: Checkpoint, key: str, texts: tuple[str, str], status: str, limit: int
) -> dict[str, Any]:
    text_a, text_b = texts
    value_a, value_b = a._metadata[key], b._metadata[key]
    if not (isinstance(value_a, list) and isinstance(value_b, list)):
        offset = _first_difference(text_a, text_b)
        return {"status": status, "a": shorten(text_a, limit, offset),
                "b": shorten(text_b, limit, offset), "offset": offset}  # fmt: skip
    items_a = element_texts(value_a)
    items_b = element_texts(value_b)
    index = _first_difference(items_a, items_b)
    return {
        "status": status,
        "a": shorten(text_a, limit),
        "b": shorten(text_b, limit),
        "items": {"a": len(items_a), "b": len(items_b)},
        "index": index,
        "first": {
            "a": shorten(items_a[index], limit) if index < len(items_a) else None,
            "b": shorten(items_b[index], limit) if index < len(items_b) else None,
        },
    }


def _first_difference(a: Sequence[str], b: Sequence[str]) -> int:
    """The first position where two sequences differ (the shorter length for a prefix)."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
