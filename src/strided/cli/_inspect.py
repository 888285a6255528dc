"""``strided inspect``: every tensor of a checkpoint with sample statistics, as a table or JSON.

``--json`` prints ``{"path", "format", "metadata", "tensors", "totals", "unreadable",
"imports"}`` (``imports``: ``[{"module", "name", "verdict", "member"}]``, the globals a pickle
names, ``[]`` for formats without pickles; the table shows them as one summary line,
``imports: 4 data, 1 unknown (mymodel.Net)``). In a tensor
row, ``min``, ``max`` and ``mean`` are always strings of canonical text (``"0.1"``,
``"-0.0"``, ``"nan"``, ``"inf"``; the mean as F64) or null when there is no value, so a
reader never meets a number in one row and a string in the next. Metadata values are
JSON values (a GGUF FLOAT32 value as the number of its shortest F32 text, a non-finite
float as ``"nan"``/``"inf"``/``"-inf"``). A metadata array longer than 16 items is
summarized unless ``--full-metadata`` is given, as the one kind of object a metadata
value can be: ``{"$summary": "array", "type": "ARRAY[STRING]", "length": 151936,
"first": [...16 items]}`` (``type`` is the GGUF value type, or ``"list"`` for other
formats); the ``"$summary"`` key marks it and never appears otherwise.

A row's ``bytes`` (and the ``bytes`` total) is the stored size, ``TensorInfo.byte_len``:
what the file holds. For a PyTorch ``expand`` view that is the storage its distinct
elements occupy, not ``numel x itemsize`` (``torch.zeros(1).expand(2**33)`` shows 4 B
and 8,589,934,592 parameters), so the total is what the checkpoint stores. ``--full``
reads every logical element and refuses a view more than 2^20 times larger than its
stored bytes unless ``--allow-expanded``; sampling never expands anything.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import re
import shutil
import sys
from typing import Any

from .._core.dtype import DType
from .._core.errors import DataError
from .._core.floats import shortest_text
from .._core.scalar import Scalar
from .._core.stored_float import StoredFloatList
from .._kernels.exact_stats import Totals
from .._tensor.inspect import TensorInspectionOptions
from ..jobs._checkpoint import Checkpoint, open_checkpoint
from ..jobs._metadata_text import canonical, gguf_types, shown
from ..jobs._pool import JobError, Runner, opened, sharing, where
from ._scan import import_summary
from ._text import byte_size, count_text, safe
from ._verify import CommandFailure, count_of, exact_row, header_row, scan_checkpoint

__all__ = ["inspect_task", "run_inspect"]

# Metadata arrays longer than this are summarized (length and first items) in --json
# unless --full-metadata is given: a tokenizer vocabulary is megabytes of JSON.
_ARRAY_ITEMS = 16
_SUMMARY = "$summary"
_LINE = 80  # characters of a metadata value shown in the table
# The table fits the terminal's width (COLUMNS), never narrower than this; names longer
# than their column wraps onto lines of their own, the name column never under _MIN_NAME.
_MIN_WIDTH = 80
_MIN_NAME = 24


def run_inspect(args: argparse.Namespace) -> int:
    """List every tensor (matching ``--name``) with its header facts and statistics.

    Statistics come from samples unless ``--full`` asks for exact ones over every
    element; the table says which (``sampled 1,024 of 11.7M``, ``all 6``) and heads
    the columns ``min (sampled)``... when a row's statistics do not cover every
    element. Metadata values are formatted only as far as they are shown: a 262,144-entry
    score array shows 16 numbers, and only those 16 are formatted. See the module
    docstring for the ``--json`` document.
    """
    with open_checkpoint(args.path, lenient=args.lenient) as checkpoint:
        names = [name for name in checkpoint if fnmatch.fnmatchcase(name, args.name)]
        if args.full:
            found = scan_checkpoint(
                checkpoint, args.path, names, False, args.jobs, "inspect",
                allow_expanded=args.allow_expanded, lenient=args.lenient,
            )  # fmt: skip
            if args.group:
                rows = _group_exact(checkpoint, names, found)
            else:
                rows = [exact_row(checkpoint, name, found[name][1]) for name in names]
        else:
            rows = _sampled_rows(checkpoint, args, names)
            if args.group:
                rows = _group(rows)
        raw = checkpoint.metadata
        types = gguf_types(checkpoint) or {}
        kind = checkpoint.format
        imports = checkpoint.imports
        # Members the reader lists but cannot read (an .npz string array): name, reason.
        unreadable = {
            name: reason
            for name, reason in checkpoint.unreadable.items()
            if fnmatch.fnmatchcase(name, args.name)
        }
        if not names and not unreadable and (len(checkpoint) or checkpoint.unreadable):
            raise CommandFailure(f"{safe(args.path)}: no tensor matches {safe(repr(args.name))}")
    for row in rows:
        if row.get("mean") is not None:
            row["mean"] = shortest_text(DType.F64, row["mean"])
    totals = {
        "tensors": sum(row["count"] for row in rows),
        "parameters": sum(row["numel"] for row in rows),
        "bytes": sum(row["bytes"] for row in rows),
    }
    if args.json:
        metadata = {
            key: _json_value(value, types.get(key), args.full_metadata)
            for key, value in raw.items()
        }
        document = {
            "path": args.path,
            "format": kind,
            "metadata": metadata,
            "tensors": rows,
            "totals": totals,
            "unreadable": unreadable,
            "imports": [found._asdict() for found in imports],
        }
        print(json.dumps(_json_safe(document), indent=1, allow_nan=False))
        return 0
    lines = [f"  {safe(key)}: {_table_value(value)}" for key, value in raw.items()]
    if imports or kind in ("pytorch", "torchscript", "dcp"):  # the formats of pickles
        lines.insert(0, import_summary(imports))
    _print_table(args.path, kind, lines, rows, totals, unreadable)
    return 0


_NAMES_PER_TASK = 64


def _sampled_rows(checkpoint: Checkpoint, args: argparse.Namespace, names: list[str]) -> list[Any]:
    path = where(args.path, args.lenient)
    batches = [names[i : i + _NAMES_PER_TASK] for i in range(0, len(names), _NAMES_PER_TASK)]
    work = [(path, batch, args.samples, args.strategy) for batch in batches]
    with sharing((path, checkpoint)), Runner(args.jobs) as runner:
        found = runner.run(inspect_task, work)
    return [row for rows in found for row in rows]


def inspect_task(task: tuple[str, list[str], int, str]) -> list[dict[str, Any]]:
    """Sampled rows for a batch of tensors (run in a worker)."""
    path, names, samples, strategy = task
    options = TensorInspectionOptions(max_samples=samples, strategy=strategy)
    checkpoint = opened(path)
    rows = []
    for name in names:
        try:
            rows.append(_summarize(checkpoint, name, options))
        except DataError as error:
            raise JobError(path, name, str(error)) from None
    return rows


def _group_exact(
    checkpoint: Checkpoint, names: list[str], found: dict[str, tuple[str | None, Totals | None]]
) -> list[dict[str, Any]]:
    """Exact rows folded by layer number: the members' Totals merged exactly."""
    groups: dict[tuple[str, str, tuple[int, ...]], tuple[list[str], Totals | None]] = {}
    for name in names:
        info = checkpoint.info(name)
        key = (_LAYER_NUMBER.sub("#", name), info.dtype, tuple(info.shape))
        members, merged = groups.get(key, ([], None))
        totals = found[name][1]
        if members and (merged is None or totals is None):
            merged = None
        elif totals is not None:
            merged = totals if merged is None else merged.merge(totals)
        groups[key] = ([*members, name], merged)
    rows = []
    for (pattern, _, _), (members, merged) in groups.items():
        row = exact_row(checkpoint, members[0], merged)
        row.update(name=pattern, count=len(members))
        row["numel"] *= len(members)
        row["bytes"] *= len(members)
        row["first_nonfinite"] = None  # the flat index of a merged group names no member
        rows.append(row)
    return rows


def _json_value(value: Any, type_name: str | None, full: bool) -> Any:
    """A metadata value for ``--json``: long arrays summarized (unless ``full``), floats
    stored in a narrower type shown by their shortest text in it (``shown``)."""
    if isinstance(value, list) and len(value) > _ARRAY_ITEMS and not full:
        return {
            _SUMMARY: "array",
            "type": type_name or "list",
            "length": len(value),
            "first": shown(value[:_ARRAY_ITEMS], _floats(value)),
        }
    return shown(value)


def _floats(value: list[Any]) -> DType:
    """The stored type of a list's plain floats (a GGUF FLOAT32 array's: F32)."""
    return value.dtype if isinstance(value, StoredFloatList) else DType.F64


_NOUNS = {str: "string", int: "integer", float: "float", bool: "boolean", list: "array"}


def _table_value(value: Any) -> str:
    """A metadata value on one table line: scalars as canonical text, arrays summarized
    (``151,936 strings: "!", "\\"", "#", …``), at most about 80 characters."""
    if not isinstance(value, list):
        text = " ".join(canonical(value).split())
        return safe(text if len(text) <= _LINE else text[: _LINE - 1] + "…")
    floats = _floats(value)
    kinds = {type(item) for item in value[:_ARRAY_ITEMS]}
    noun = _NOUNS.get(kinds.pop(), "item") if len(kinds) == 1 else "item"
    head = f"{count_of(len(value), noun)}"
    parts: list[str] = []
    width = len(head) + 2
    for item in value[:_ARRAY_ITEMS]:
        if isinstance(item, list):
            text = f"[{count_of(len(item), 'item')}]"
        elif isinstance(item, str):
            text = json.dumps(item, ensure_ascii=False)
        else:
            text = canonical(item, floats)
        if parts and width + len(text) + 2 > _LINE:
            break
        parts.append(text)
        width += len(text) + 2
    if len(parts) < len(value):
        parts.append("…")
    return safe(head + (": " + ", ".join(parts) if parts else ""))


def _summarize(checkpoint: Checkpoint, name: str, options: Any) -> dict[str, Any]:
    row = header_row(checkpoint, name)
    if not checkpoint.readable(name):
        return row
    found = checkpoint.inspect(name, options)
    row.update(
        sampled=found.sampled,
        min=None if found.min is None else str(found.min),
        max=None if found.max is None else str(found.max),
        mean=found.mean,
        nan=found.nan_count,
        inf=found.inf_count,
        zeros=found.zero_count,
        exact=found.complete,
    )
    return row


_LAYER_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)|(?<=_)\d+(?=\.)")


def _group(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold rows whose names differ only in layer numbers (``layers.#.mlp.weight  ×6``)."""
    groups: dict[tuple[str, str, tuple[int, ...]], dict[str, Any]] = {}
    for row in rows:
        key = (_LAYER_NUMBER.sub("#", row["name"]), row["dtype"], tuple(row["shape"]))
        if key not in groups:
            groups[key] = dict(row, name=key[0], count=0, numel=0, bytes=0)
            for stat in ("sampled", "nan", "inf", "zeros"):
                if stat in row:
                    groups[key][stat] = 0
            groups[key]["mean"] = None
            if "exact" in row:
                groups[key]["exact"] = True
        group = groups[key]
        group["count"] += 1
        group["numel"] += row["numel"]
        group["bytes"] += row["bytes"]
        if row.get("mean") is not None:
            # The group's mean weighs each member's sample mean by its sample count.
            weight = group.get("_weight", 0) + row["sampled"]
            previous = 0.0 if group["mean"] is None else group["mean"]
            group["mean"] = previous + (row["mean"] - previous) * row["sampled"] / weight
            group["_weight"] = weight
        for stat in ("sampled", "nan", "inf", "zeros"):
            if stat in row:
                group[stat] += row[stat]
        if "exact" in row:
            group["exact"] = group["exact"] and row["exact"]
        group["min"] = _extreme(group.get("min"), row.get("min"), row["dtype"], min)
        group["max"] = _extreme(group.get("max"), row.get("max"), row["dtype"], max)
    for group in groups.values():
        group.pop("_weight", None)
    return list(groups.values())


def _extreme(a: str | None, b: str | None, dtype_name: str, pick: Any) -> str | None:
    """The smaller (``min``) or larger (``max``) of two canonical scalar texts, exactly.

    Values are compared as exact Scalars of their dtype (I64 extremes do not collapse
    into one float); between zeros, -0.0 counts as the smaller, as inspection does.
    Quantized GGUF tensors are inspected as F32.
    """
    if a is None or b is None:
        return a if b is None else b
    dtype = DType.F32 if dtype_name not in DType.__members__ else DType[dtype_name]

    def key(text: str) -> tuple[Any, bool]:
        value = Scalar.parse(dtype, text).value
        return value, math.copysign(1.0, value) > 0 if isinstance(value, float) else True

    return pick(a, b, key=key)  # type: ignore[no-any-return]


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as canonical strings and bytes/others as text.

    So ``--json`` always prints strict JSON (no ``NaN`` or ``Infinity`` tokens). Nesting
    is bounded: metadata is at most a list of lists (GGUF), rows are flat dicts.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _print_table(
    path: str,
    kind: str,
    metadata: list[str],
    rows: list[dict[str, Any]],
    totals: dict[str, int],
    unreadable: dict[str, str],
) -> None:
    complete = all(row.get("exact", True) for row in rows)
    note = "" if complete else " (sampled)"
    header = ("name", "dtype", "shape", "bytes", f"min{note}", f"max{note}", f"mean{note}",
              "nan", "inf", "statistics")  # fmt: skip
    lines = [header]
    for row in rows:
        name = safe(row["name"]) + (f"  ×{row['count']}" if row["count"] > 1 else "")
        lines.append(
            (
                name,
                safe(row["dtype"]),
                "[" + ", ".join(str(d) for d in row["shape"]) + "]",
                byte_size(row["bytes"]),
                _text(row.get("min")),
                _text(row.get("max")),
                _mean_text(row.get("mean")),
                _text(row.get("nan")),
                _text(row.get("inf")),
                _coverage(row),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    columns = _terminal_width()
    if columns is not None:
        # The name column takes what the other columns leave of the terminal's width.
        room = columns - sum(widths[1:]) - 2 * (len(widths) - 1)
        widths[0] = min(widths[0], max(room, _MIN_NAME))
    print(f"{safe(path)} ({kind})")
    for entry in metadata:
        print(entry)
    for line in lines if rows else []:  # no header over an empty table
        pieces = _wrapped(line[0], widths[0])
        cells = (pieces[-1], *line[1:])
        for piece in pieces[:-1]:
            print(piece)
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
        )
    for name, reason in unreadable.items():
        print(f"{safe(name)}  unreadable: {safe(reason)}")
    print(
        f"{count_of(totals['tensors'], 'tensor')}, {totals['parameters']:,} parameters, "
        f"{byte_size(totals['bytes'])}"
    )


def _terminal_width() -> int | None:
    """The width to fit when output goes to a terminal: COLUMNS, else the terminal's
    (at least ``_MIN_WIDTH``). None for a pipe or file, whatever COLUMNS says (a parent
    process may have set it for its own terminal), so ``grep`` and scripts always see
    whole names on one line, as ``ls`` prints one name per line into a pipe."""
    if not sys.stdout.isatty():
        return None
    return max(shutil.get_terminal_size().columns, _MIN_WIDTH)


def _wrapped(name: str, width: int) -> list[str]:
    """``name`` in pieces of at most ``width`` characters, cut after a ``.`` where one
    falls in the second half of a piece. The last piece goes on the row's own line, so
    the other cells sit beside the name's end (``…q_proj.weight``)."""
    pieces = []
    while len(name) > width:
        cut = name.rfind(".", 0, width) + 1
        if cut <= width // 2:
            cut = width
        pieces.append(name[:cut])
        name = name[cut:]
    return [*pieces, name]


def _mean_text(mean: str | None) -> str:
    # Six significant digits in every row (the JSON document has the exact text).
    if mean is None:
        return "-"
    return f"{float(mean):.6g}"


def _coverage(row: dict[str, Any]) -> str:
    """Where the row's statistics come from: every element, or a sample of them."""
    if "sampled" not in row:
        return "-"
    if row.get("exact") and row["sampled"] == row["numel"]:
        return f"all {count_text(row['numel'])}"
    return f"sampled {row['sampled']:,} of {count_text(row['numel'])}"


def _text(value: object) -> str:
    return "-" if value is None else str(value)
