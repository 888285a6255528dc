"""``strided diff``: two checkpoints of any formats compared tensor by tensor, exactly.

Exit 0 when every tensor matches (``identical`` or ``equal``) and the names agree, 1
when anything differs, 2 on bad usage or unreadable input (the ``diff``/``cmp``
convention).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
from typing import TYPE_CHECKING, Any

from .. import _diff
from .._checkpoint import open_checkpoint
from .._compare import Tally, Tolerance
from .._digest import sort_key
from .._errors import DataError
from .._jobs import JobError, plan, runner, sharing, where
from ._progress import Progress
from ._text import index_text, job_error, safe, with_path
from ._verify import CommandFailure

if TYPE_CHECKING:
    from .._checkpoint import Checkpoint

__all__ = ["run_diff"]


def run_diff(args: argparse.Namespace) -> int:
    """Print the comparison (a table, or JSON with ``--json``); exit 0, 1 or 2."""
    tolerance = Tolerance(args.atol, args.rtol, args.ulp)
    try:
        entries = _compare(args, tolerance)
    except JobError as error:
        raise CommandFailure(job_error(error), status=2) from None
    except CommandFailure as failure:
        raise CommandFailure(str(failure), status=2) from None
    same = all(entry["status"] in ("identical", "equal") for entry in entries.values())
    if args.json:
        document = {"tensors": entries, "same": same}
        print(json.dumps(_json_safe(document), indent=1, allow_nan=False))
    else:
        _print_table(args, entries, same)
    return 0 if same else 1


def _open(path: str) -> Checkpoint:
    try:
        return open_checkpoint(path)
    except (DataError, OSError, UnicodeError) as error:
        raise CommandFailure(with_path(path, error)) from None


def _compare(args: argparse.Namespace, tolerance: Tolerance) -> dict[str, dict[str, Any]]:
    with _open(args.path) as a, _open(args.other) as b:
        try:
            return _entries(args, tolerance, a, b)
        except (DataError, OSError, UnicodeError) as error:
            raise CommandFailure(with_path(f"{args.path} / {args.other}", error)) from None


def _entries(
    args: argparse.Namespace, tolerance: Tolerance, a: Checkpoint, b: Checkpoint
) -> dict[str, dict[str, Any]]:
    names = {name for name in (*a, *b) if fnmatch.fnmatchcase(name, args.name)}
    entries: dict[str, dict[str, Any]] = {}
    compared: list[tuple[str, int, int]] = []
    raw: set[str] = set()
    for name in sorted(names, key=sort_key):
        info_a = a.info(name) if name in a else None
        info_b = b.info(name) if name in b else None
        if info_a is None or info_b is None:
            status = "only in A" if info_b is None else "only in B"
            entries[name] = _diff.result(status, info_a, info_b, None)
            continue
        kind_a, kind_b = _diff.kind_of(a, name), _diff.kind_of(b, name)
        status_found = _diff.status_before_values(kind_a, kind_b, info_a, info_b)
        if status_found is not None:
            entries[name] = _diff.result(status_found, info_a, info_b, None)
            continue
        entries[name] = {}
        if kind_a.startswith("raw:"):
            raw.add(name)
        units = info_a.byte_len if name in raw else info_a.shape.numel
        compared.append((name, units, info_a.byte_len + info_b.byte_len))
    tasks = plan(compared, split=True)
    path_a, path_b = where(args.path), where(args.other)
    shares = {name: (units, size) for name, units, size in compared}
    weights = [
        sum(shares[p.name][1] * (p.stop - p.start) // max(shares[p.name][0], 1) for p in task)
        for task in tasks
    ]
    work = [(path_a, path_b, task, tolerance) for task in tasks]
    with (
        sharing((path_a, a), (path_b, b)),
        runner(args.jobs, args.scheduler) as engine,
        Progress(sum(weights), "diff") as progress,
    ):
        results = engine.run(_diff.run_task, work, weights, progress)
    tallies: dict[str, Tally] = {}
    for task, found in zip(tasks, results, strict=True):
        for part, tally in zip(task, found, strict=True):
            before = tallies.get(part.name)
            tallies[part.name] = tally if before is None else before.merge(tally)
    for name, _, _ in compared:
        entries[name] = _diff.result(None, a.info(name), b.info(name), tallies[name], name in raw)
    return entries


def _json_safe(value: Any) -> Any:
    """Strict JSON: an infinite ``max_abs`` is written as the text ``"inf"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _side(entry: dict[str, Any], key: str) -> str:
    side = entry[key]
    return f"{safe(side['dtype'])} {index_text(side['shape'])}"


def _details(entry: dict[str, Any]) -> str:
    status = entry["status"]
    if status in ("only in A", "identical"):
        return _side(entry, "a")
    if status == "only in B":
        return _side(entry, "b")
    sides = (
        _side(entry, "a")
        if _side(entry, "a") == _side(entry, "b")
        else (f"{_side(entry, 'a')} vs {_side(entry, 'b')}")
    )
    if status in ("shape differs", "kind differs"):
        return sides
    parts = [sides]
    if status == "differs":
        numel = 1
        for dim in entry["a"]["shape"]:
            numel *= dim
        first = entry["first"]
        parts.append(f"{entry['count']:,} of {numel:,} differ")
        parts.append(f"first {index_text(first['index'])}: {first['a']} vs {first['b']}")
    if "max_abs" in entry:
        parts.append(f"max_abs {entry['max_abs']!r}")
    if "max_ulp" in entry:
        parts.append(f"max_ulp {entry['max_ulp']}")
    return "; ".join(parts)


def _print_table(args: argparse.Namespace, entries: dict[str, dict[str, Any]], same: bool) -> None:
    print(f"A: {safe(args.path)}")
    print(f"B: {safe(args.other)}")
    lines = [("status", "name", "details")]
    lines += [(entry["status"], safe(name), _details(entry)) for name, entry in entries.items()]
    widths = [max(len(line[i]) for line in lines) for i in range(2)]
    for status, name, details in lines:
        print(f"{status.ljust(widths[0])}  {name.ljust(widths[1])}  {details}".rstrip())
    counts = {status: 0 for status in _diff.STATUSES}
    for entry in entries.values():
        counts[entry["status"]] += 1
    found = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    verdict = "the checkpoints match" if same else "the checkpoints differ"
    print(f"{len(entries)} tensors: {found or 'none'}: {verdict}")
