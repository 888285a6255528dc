"""``strided verify``: read every element, report exact statistics, check a manifest."""

from __future__ import annotations

import argparse
import fnmatch
import sys
from typing import TYPE_CHECKING, Any

from .._core.dtype import DType
from .._core.errors import DataError
from .._core.terminal import count_of
from .._kernels.digest import UNREADABLE_PREFIX, combine, sort_key
from .._kernels.exact_stats import Totals, summary
from ..jobs import _scan
from ..jobs._checkpoint import Checkpoint, admit, has_dtype, open_checkpoint
from ..jobs._engine import runner
from ..jobs._pool import plan, sharing, where
from ..jobs._unreadable import selected_unreadable, unreadable_error
from ._manifest import read_manifest
from ._progress import Progress
from ._text import byte_size, index_text, safe, with_path

if TYPE_CHECKING:
    from ._manifest import Manifest

__all__ = [
    "CommandFailure",
    "UnreadableRefused",
    "count_of",
    "exact_row",
    "header_row",
    "run_verify",
    "scan_checkpoint",
    "skipped_members",
]


class CommandFailure(Exception):
    """A problem with one file: printed as one line, exit status ``status`` (1 by default)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class UnreadableRefused(CommandFailure):
    """A checkpoint holds members the command cannot read and ``--skip-unreadable`` was
    not given: exit 1 in every command (``diff`` included: nothing was compared)."""


def skipped_members(
    checkpoint: Checkpoint, path: str, skip: bool, glob: str = "*"
) -> dict[str, str]:
    """The unreadable members (``name -> reason``, sorted by UTF-8 bytes) the command
    covers: those matching ``glob``. Without ``skip`` any is an ``UnreadableRefused``
    naming them; with it each is named on stderr and returned."""
    found = selected_unreadable(checkpoint.unreadable, glob)
    if found and not skip:
        raise UnreadableRefused(with_path(path, unreadable_error(path, found)))
    for name, reason in found.items():
        print(
            f"strided: {safe(path)}: skipped unreadable member {safe(repr(name))}: {safe(reason)}",
            file=sys.stderr,
        )
    return found


def scan_checkpoint(
    checkpoint: Checkpoint,
    path: str,
    names: list[str],
    digests: bool,
    jobs: int,
    label: str,
    scheduler: str | None = None,
    allow_expanded: bool = False,
    lenient: bool = False,
) -> dict[str, tuple[str | None, Totals | None]]:
    """Every named tensor read once: ``name -> (digest or None, exact Totals or None)``.

    Large tensors are cut into chunks (unless digests are asked for: a digest is one
    stream) and spread over ``jobs`` worker processes, or the workers of the Dask
    ``scheduler``; the result is the same for any number of workers. Totals are None
    for tensors whose values strided cannot decode. An expanded view is a LimitError
    before anything is read unless ``allow_expanded`` (``_jobs.admit``). Workers open
    ``path`` as ``checkpoint`` was opened: ``lenient`` must match.
    """
    infos = admit(checkpoint, names, allow_expanded)
    numel = {name: infos[name].shape.numel if checkpoint.readable(name) else 1 for name in names}
    work_bytes = {name: infos[name].logical_len for name in names}
    tasks = plan([(name, numel[name], work_bytes[name]) for name in names], not digests)
    target = where(path, lenient)
    weights = [
        sum(work_bytes[p.name] * (p.stop - p.start) // max(numel[p.name], 1) for p in task)
        for task in tasks
    ]
    work = [(target, task, digests) for task in tasks]
    with (
        sharing((target, checkpoint)),
        runner(jobs, scheduler) as engine,
        Progress(sum(weights), label) as progress,
    ):
        results = engine.run(_scan.run_task, work, weights, progress)
    found: dict[str, tuple[str | None, Totals | None]] = {}
    for task, outcome in zip(tasks, results, strict=True):
        for part, (digest, totals) in zip(task, outcome, strict=True):
            if part.name not in found:
                found[part.name] = (digest, totals)
                continue
            before = found[part.name][1]
            merged = before.merge(totals) if before is not None and totals is not None else None
            found[part.name] = (digest, merged)
    return found


def header_row(checkpoint: Checkpoint, name: str) -> dict[str, Any]:
    """A table row of what the header says: name, dtype, shape, numel, bytes, count 1."""
    info = checkpoint.info(name)
    return {
        "name": name,
        "dtype": info.dtype,
        "shape": list(info.shape),
        "numel": info.shape.numel,
        "bytes": info.byte_len,
        "count": 1,
    }


def exact_row(checkpoint: Checkpoint, name: str, totals: Totals | None) -> dict[str, Any]:
    """A row of exact statistics (the inspect row's keys; ``first_nonfinite`` a multi-index)."""
    info = checkpoint.info(name)
    row = header_row(checkpoint, name)
    if totals is None:
        return row
    dtype = DType[info.dtype] if has_dtype(info.dtype) else DType.F32
    stats = summary(totals, dtype)
    first = stats.pop("first_nonfinite")
    row.update(stats, sampled=totals.count, exact=True)
    row["first_nonfinite"] = None if first is None else _unravel(first, info.shape)
    return row


def _unravel(flat: int, shape: Any) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        flat, rest = divmod(flat, dim)
        index.append(rest)
    return index[::-1]


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when every tensor was read and scanned, none holds NaN or infinity
    (unless its name matches an ``--allow-nonfinite`` glob: then it is still reported,
    marked allowed), and (with ``--manifest``) every digest matches, the metadata
    digest included. Rows are in name order (UTF-8 bytes). Metadata values are data,
    never judged (an ``inf`` hyper-parameter is no problem).

    A manifest written before metadata was digested (no ``*metadata*`` line or
    ``"metadata_digest"`` key) checks the tensors only, and the output says the
    metadata was not checked.

    A tensor whose stored type strided cannot decode is validated structurally (and
    hashed) but not scanned; it is listed, counted, and makes the exit status 1. A
    member strided cannot read at all (``Checkpoint.unreadable``) stops the command
    before anything is read unless ``--skip-unreadable``; then it is named on stderr,
    and with ``--manifest`` the digest of its stored bytes is checked against the
    manifest's ``*unreadable*:NAME`` line.
    """
    manifest = _manifest(args.manifest) if args.manifest else None
    with open_checkpoint(args.path, lenient=args.lenient) as checkpoint:
        skipped = skipped_members(checkpoint, args.path, args.skip_unreadable)
        names = sorted(checkpoint, key=sort_key)
        found = scan_checkpoint(
            checkpoint, args.path, names, manifest is not None, args.jobs, "verify",
            args.scheduler, args.allow_expanded, args.lenient,
        )  # fmt: skip
        rows = [exact_row(checkpoint, name, found[name][1]) for name in names]
        total = sum(checkpoint.info(name).byte_len for name in names)
        metadata = checkpoint.metadata_digest() if manifest is not None else None
        stored = {name: checkpoint.unreadable_digest(name) for name in skipped}
    _print_rows(rows)
    nonfinite = [row for row in rows if row.get("nan") or row.get("inf")]
    allowed = {row["name"] for row in nonfinite if _allowed(row["name"], args.allow_nonfinite)}
    problems = [_problem(row, row["name"] in allowed) for row in nonfinite]
    skipped_values = [
        f"{safe(row['name'])}: {safe(row['dtype'])} values not scanned"
        for row in rows
        if "min" not in row
    ]
    states = []
    if len(nonfinite) > len(allowed):
        states.append(f"{count_of(len(nonfinite) - len(allowed), 'tensor')} with NaN or inf")
    if skipped_values:
        states.append(f"{len(skipped_values)} of {len(names)} tensors not scanned")
    lines = problems + skipped_values
    matched = ""
    if manifest is not None:
        digests = {name: found[name][0] or "" for name in names}
        manifest_lines, manifest_states = _check(manifest, digests, stored)
        lines += manifest_lines
        states += manifest_states
        assert metadata is not None
        metadata_lines, metadata_states = _check_metadata(manifest, metadata)
        lines += metadata_lines
        states += metadata_states
        unchecked = "" if manifest.metadata_digest else " (metadata not checked)"
        matched = ", digests match" + unchecked
    for line in lines:
        print(line)
    state = ", ".join(states) if states else "clean" + matched
    if allowed:
        state += f" ({count_of(len(allowed), 'tensor')} with NaN or inf allowed)"
    members = f", {count_of(len(skipped), 'unreadable member')} skipped" if skipped else ""
    print(
        f"{safe(args.path)}: {count_of(len(names), 'tensor')}, {byte_size(total)}{members}: {state}"
    )
    return 1 if states else 0


def _allowed(name: str, globs: list[str]) -> bool:
    """Whether ``--allow-nonfinite`` accepts NaN and infinity in tensor ``name``."""
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def _manifest(path: str) -> Manifest:

    try:
        return read_manifest(path)
    except (DataError, OSError, UnicodeError) as error:
        raise CommandFailure(with_path(path, error)) from None


def _problem(row: dict[str, Any], allowed: bool) -> str:
    first = index_text(row["first_nonfinite"])
    note = " (allowed by --allow-nonfinite)" if allowed else ""
    return f"{safe(row['name'])}: {row['nan']} NaN, {row['inf']} inf, first at {first}{note}"


def _check(
    manifest: Manifest, digests: dict[str, str], stored: dict[str, str]
) -> tuple[list[str], list[str]]:
    """Lines naming each mismatched, missing and unexpected tensor (then each skipped
    unreadable member, by the digest of its stored bytes), and the summary parts."""
    lines: list[str] = []
    counts = [0, 0, 0]  # differ, missing, unexpected
    for expected, found, label in (
        (manifest.tensors, digests, ""),
        (manifest.unreadable, stored, UNREADABLE_PREFIX),
    ):
        differ = sorted(
            (name for name in found if name in expected and expected[name] != found[name]),
            key=sort_key,
        )
        missing = sorted((name for name in expected if name not in found), key=sort_key)
        unexpected = sorted((name for name in found if name not in expected), key=sort_key)
        lines += [f"{safe(label + name)}: digest differs from the manifest" for name in differ]
        lines += [
            f"{safe(label + name)}: in the manifest, missing from the checkpoint"
            for name in missing
        ]
        lines += [f"{safe(label + name)}: not in the manifest" for name in unexpected]
        for index, group in enumerate((differ, missing, unexpected)):
            counts[index] += len(group)
    differing = "digest differs" if counts[0] == 1 else "digests differ"
    states = [
        f"{count} {what}"
        for count, what in zip(counts, (differing, "missing", "unexpected"), strict=True)
        if count
    ]
    pairs = [*digests.items(), *((UNREADABLE_PREFIX + n, d) for n, d in stored.items())]
    if not states and combine(pairs) != manifest.digest:
        lines.append("the checkpoint digest differs from the manifest's (its last line)")
        states.append("checkpoint digest differs")
    return lines, states


def _check_metadata(manifest: Manifest, metadata: str) -> tuple[list[str], list[str]]:
    """The metadata digest against the manifest's ``*metadata*`` line (or JSON key)."""
    if manifest.metadata_digest is None:
        return ["metadata not checked: the manifest has no metadata digest "
                "(written before strided digested metadata)"], []  # fmt: skip
    if manifest.metadata_digest == metadata:
        return [], []
    line = "metadata: digest differs from the manifest (a key was added, removed or changed)"
    return [line], ["metadata digest differs"]


def _print_rows(rows: list[dict[str, Any]]) -> None:
    header = ("name", "dtype", "shape", "min", "max", "mean", "nan", "inf", "first nan/inf")
    lines = [header]
    for row in rows:
        scanned = "min" in row
        mean = row.get("mean")
        lines.append(
            (
                safe(row["name"]),
                safe(row["dtype"]),
                index_text(row["shape"]),
                _cell(row.get("min")),
                _cell(row.get("max")),
                "-" if mean is None else repr(mean),
                _cell(row.get("nan")),
                _cell(row.get("inf")),
                index_text(row.get("first_nonfinite")) if scanned else "-",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )


def _cell(value: object) -> str:
    return "-" if value is None else str(value)
