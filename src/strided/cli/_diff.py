"""``strided diff``: two checkpoints of any formats compared tensor by tensor, exactly,
and their metadata key by key.

Metadata values are compared through their canonical text (the text the metadata
digest hashes), so a GGUF and its safetensors conversion match; ``--ignore-metadata``
skips them and the verdict says so. ``--json`` prints ``{"tensors": {name: {"status",
...}}, "metadata": {key: {"status", ...}} (null with --ignore-metadata), "same": bool}``.

Exit 0 when every tensor matches (``identical`` or ``equal``), the names agree and (unless
ignored) every metadata key is equal, 1 when anything compared differs, 2 on bad usage
or unreadable input (the ``diff``/``cmp`` convention). A tensor to compare that is an
expanded view on either side (logical size more than 2^20 x its stored bytes) is such
trouble unless ``--allow-expanded``, and is refused before any value is read.

A member either side holds but strided cannot read (an ``.npz`` object array, a
distributed checkpoint's item that is not plain data) stops the comparison before
anything is read (exit 1: nothing can be said to match) unless ``--skip-unreadable``:
then such members are compared by the digests of their stored bytes: ``identical``,
``differs``, ``only in A``, ``only in B``, or ``kind differs`` against a tensor of the
same name, under ``"unreadable"`` in ``--json`` (``{name: {"status", "a", "b"}}``,
each side its ``digest`` or, for a tensor, its ``dtype`` and ``shape``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
from typing import TYPE_CHECKING, Any

from .._core.errors import DataError
from .._kernels.compare import Tally, Tolerance
from .._kernels.digest import sort_key
from ..jobs import _diff
from ..jobs._checkpoint import admit, open_checkpoint
from ..jobs._engine import runner
from ..jobs._pool import JobError, plan, sharing, where
from ._progress import Progress
from ._text import index_text, job_error, one_line, safe, with_path
from ._verify import CommandFailure, UnreadableRefused, count_of, skipped_members

if TYPE_CHECKING:
    from ..jobs._checkpoint import Checkpoint

__all__ = ["run_diff"]


def run_diff(args: argparse.Namespace) -> int:
    """Print the comparison (a table, or JSON with ``--json``); exit 0, 1 or 2."""
    tolerance = Tolerance(args.atol, args.rtol, args.ulp)
    try:
        entries, members, metadata = _compare(args, tolerance)
    except JobError as error:
        raise CommandFailure(job_error(error), status=2) from None
    except UnreadableRefused:
        raise
    except CommandFailure as failure:
        raise CommandFailure(str(failure), status=2) from None
    same_tensors = all(entry["status"] in ("identical", "equal") for entry in entries.values())
    same_members = all(entry["status"] == "identical" for entry in members.values())
    same_metadata = metadata is None or all(e["status"] == "equal" for e in metadata.values())
    same = same_tensors and same_members and same_metadata
    if args.json:
        document: dict[str, Any] = {"tensors": entries}
        if members:
            document["unreadable"] = members
        document.update(metadata=metadata, same=same)
        print(json.dumps(_json_safe(document), indent=1, allow_nan=False))
    else:
        _print_table(args, entries, members, metadata)
        print(_verdict(entries, members, metadata, same_tensors and same_members, same_metadata))
    return 0 if same else 1


def _open(path: str, lenient: bool) -> Checkpoint:
    try:
        return open_checkpoint(path, lenient=lenient)
    except (DataError, OSError, UnicodeError) as error:
        raise CommandFailure(with_path(path, error)) from None


Entries = dict[str, dict[str, Any]]


def _compare(
    args: argparse.Namespace, tolerance: Tolerance
) -> tuple[Entries, Entries, Entries | None]:
    """Tensor entries, skipped unreadable members' entries, and metadata entries (None
    with ``--ignore-metadata``)."""
    with _open(args.path, args.lenient) as a, _open(args.other, args.lenient) as b:
        skipped_a = skipped_members(a, args.path, args.skip_unreadable, args.name)
        skipped_b = skipped_members(b, args.other, args.skip_unreadable, args.name)
        try:
            members = _members(a, b, skipped_a, skipped_b)
            entries = _entries(args, tolerance, a, b, members)
            if args.ignore_metadata:
                return entries, members, None
            limit = 200 if args.json else _TABLE_TEXT
            return entries, members, _diff.metadata_entries(a, b, limit)
        except (DataError, OSError, UnicodeError) as error:
            raise CommandFailure(with_path(f"{args.path} / {args.other}", error)) from None


def _members(
    a: Checkpoint, b: Checkpoint, skipped_a: dict[str, str], skipped_b: dict[str, str]
) -> Entries:
    """The skipped unreadable members of either side, by name (UTF-8 bytes order),
    compared by the digests of their stored bytes."""
    entries: Entries = {}
    for name in sorted(skipped_a.keys() | skipped_b.keys(), key=sort_key):
        sides: dict[str, dict[str, Any]] = {}
        for key, checkpoint, skipped in (("a", a, skipped_a), ("b", b, skipped_b)):
            if name in skipped:
                sides[key] = {"digest": checkpoint.unreadable_digest(name)}
            elif name in checkpoint:
                info = checkpoint.info(name)
                sides[key] = {"dtype": info.dtype, "shape": list(info.shape)}
        if len(sides) == 1:
            status = "only in A" if "a" in sides else "only in B"
        elif name not in skipped_a or name not in skipped_b:
            status = "kind differs"  # a tensor on one side, an unreadable member on the other
        else:
            same = sides["a"]["digest"] == sides["b"]["digest"]
            status = "identical" if same else "differs"
        entries[name] = {"status": status, **sides}
    return entries


def _entries(
    args: argparse.Namespace, tolerance: Tolerance, a: Checkpoint, b: Checkpoint, members: Entries
) -> dict[str, dict[str, Any]]:
    # A tensor facing an unreadable member of its name is reported with the members.
    names = {
        name for name in (*a, *b) if fnmatch.fnmatchcase(name, args.name) and name not in members
    }
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
        _admitted(a, b, name, args.allow_expanded)
        entries[name] = {}
        if kind_a.startswith("raw:"):
            raw.add(name)
        units = info_a.byte_len if name in raw else info_a.shape.numel
        compared.append((name, units, info_a.logical_len + info_b.logical_len))
    tasks = plan(compared, split=True)
    path_a, path_b = where(args.path, args.lenient), where(args.other, args.lenient)
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


def _admitted(a: Checkpoint, b: Checkpoint, name: str, allow_expanded: bool) -> None:
    """Tensor ``name`` may be compared: an expanded view on either side is refused
    (``_jobs.admit``), as trouble with the input (exit 2), naming its file and tensor."""
    try:
        admit(a, [name], allow_expanded)
        admit(b, [name], allow_expanded)
    except DataError as error:
        raise CommandFailure(one_line(error)) from None


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


_TABLE_TEXT = 60  # characters of a metadata value shown in the table


def _member_details(entry: dict[str, Any]) -> str:
    """``stored bytes sha256 0123… vs 4567…``, or a tensor's dtype and shape."""
    sides = []
    for key in ("a", "b"):
        side = entry.get(key)
        if side is None:
            continue
        if "digest" in side:
            sides.append(f"sha256 {side['digest'][:16]}…")
        else:
            sides.append(f"tensor {safe(side['dtype'])} {index_text(side['shape'])}")
    shown = sides[:1] if entry["status"] == "identical" else sides
    return "stored bytes " + " vs ".join(shown)


def _print_table(
    args: argparse.Namespace, entries: Entries, members: Entries, metadata: Entries | None
) -> None:
    print(f"A: {safe(args.path)}")
    print(f"B: {safe(args.other)}")
    lines = [("status", "name", "details")]
    lines += [(entry["status"], safe(name), _details(entry)) for name, entry in entries.items()]
    lines += [
        (f"unreadable {entry['status']}", safe(name), _member_details(entry))
        for name, entry in members.items()
    ]
    for key, entry in (metadata or {}).items():
        if entry["status"] != "equal":
            lines.append((f"metadata {entry['status']}", safe(key), _metadata_details(entry)))
    widths = [max(len(line[i]) for line in lines) for i in range(2)]
    for status, name, details in lines:
        print(f"{status.ljust(widths[0])}  {name.ljust(widths[1])}  {details}".rstrip())


def _verdict(
    entries: Entries,
    members: Entries,
    metadata: Entries | None,
    same_tensors: bool,
    same_metadata: bool,
) -> str:
    """``3 tensors: 3 identical; 5 metadata keys: 5 equal: tensors and metadata match``
    (skipped unreadable members, when any, counted after the tensors and judged with
    them)."""
    counts = {status: 0 for status in _diff.STATUSES}
    for entry in entries.values():
        counts[entry["status"]] += 1
    found = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    parts = [f"{count_of(len(entries), 'tensor')}: {found or 'none'}"]
    if members:
        counts = {status: 0 for status in _diff.STATUSES}
        for entry in members.values():
            counts[entry["status"]] += 1
        found = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
        parts[0] += f"; {count_of(len(members), 'unreadable member')}: {found}"
    if metadata is None:
        verdict = "tensors match" if same_tensors else "tensors differ"
        return f"{parts[0]}: {verdict} (metadata not compared)"
    keys = {status: 0 for status in _diff.METADATA_STATUSES}
    for entry in metadata.values():
        keys[entry["status"]] += 1
    found = ", ".join(f"{count} {status}" for status, count in keys.items() if count)
    parts.append(
        f"{count_of(len(metadata), 'metadata key')}: {found}"
        if metadata
        else "no metadata on either side"
    )
    if same_tensors and same_metadata:
        verdict = "tensors and metadata match"
    elif same_metadata:
        verdict = "tensors differ, metadata matches"
    elif same_tensors:
        verdict = "metadata differs, tensors match"
    else:
        verdict = "tensors and metadata differ"
    return f"{'; '.join(parts)}: {verdict}"


def _quoted(text: str | None) -> str:
    """A metadata text of a table entry as a quoted string.

    Only a shortened text is longer than the table's limit, and it ends with the note
    ``(N characters)``, which stays outside the quotes.
    """
    if text is None:
        return "(none)"
    body, note = text, ""
    if len(text) > _TABLE_TEXT:
        body, _, rest = text.rpartition(" (")
        note = f" ({rest}"
    return safe(json.dumps(body, ensure_ascii=False)) + note


def _metadata_details(entry: dict[str, Any]) -> str:
    status = entry["status"]
    if status == "only in A":
        return _quoted(entry["a"])
    if status == "only in B":
        return _quoted(entry["b"])
    parts = []
    if "types" in entry:
        parts.append(f"{safe(entry['types']['a'])} vs {safe(entry['types']['b'])}")
    if "items" in entry:
        items, first = entry["items"], entry["first"]
        parts.append(f"{items['a']:,} vs {items['b']:,} items")
        parts.append(
            f"first difference at [{entry['index']}]: {_quoted(first['a'])} vs "
            f"{_quoted(first['b'])}"
        )
    else:
        parts.append(f"{_quoted(entry['a'])} vs {_quoted(entry['b'])}")
        if len(entry["a"]) > _TABLE_TEXT or len(entry["b"]) > _TABLE_TEXT:
            parts.append(f"first difference at character {entry['offset']:,}")
    return "; ".join(parts)
