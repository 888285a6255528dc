"""``strided verify``: read every element, report exact statistics, check a manifest.

The work is ``st.verify``'s (``jobs._verify``); this module prints its ``VerifyReport``
as a table, one line per finding and a summary, or with ``--json`` as one document.
The failure types and the helpers other commands share live here too.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .._core.errors import DataError, FormatError
from .._core.terminal import count_of
from ..jobs._checkpoint import Checkpoint, open_checkpoint
from ..jobs._manifest import read_manifest
from ..jobs._sweep import exact_row, header_row, skipped_unreadable, sweep
from ..jobs._verify import verify_checkpoint
from ._hash import tell_skipped
from ._progress import Progress
from ._text import byte_size, index_text, safe, with_path

if TYPE_CHECKING:
    from .._kernels.exact_stats import Totals
    from ..jobs._manifest import Manifest
    from ..jobs._verify import ManifestCheck, VerifyReport

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
    try:
        return skipped_unreadable(checkpoint, path, skip, tell_skipped(path), glob)
    except FormatError as refusal:  # the one refusal skipped_unreadable raises
        raise UnreadableRefused(with_path(path, refusal)) from None


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
    """``jobs._sweep.sweep`` with a progress bar on stderr (labelled ``label``)."""
    return sweep(
        checkpoint, path, names, digests, jobs, label, scheduler, allow_expanded, lenient, Progress
    )


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when every tensor was read and scanned, none holds NaN or infinity
    (unless its name matches an ``--allow-nonfinite`` glob: then it is still reported,
    marked allowed), and (with ``--manifest``) every digest matches, the metadata
    digest included. Rows are in name order (UTF-8 bytes). Metadata values are data,
    never judged (an ``inf`` hyper-parameter is no problem). ``--json`` prints
    ``VerifyReport.to_json()``.

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
        report = verify_checkpoint(
            checkpoint, args.path, manifest, glob=args.name,
            allow_nonfinite=args.allow_nonfinite, jobs=args.jobs, scheduler=args.scheduler,
            allow_expanded=args.allow_expanded, lenient=args.lenient,
            skip_unreadable=args.skip_unreadable, notify=tell_skipped(args.path),
            meter=Progress,
        )  # fmt: skip
    if args.json:
        print(report.to_json())
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _print_report(report: VerifyReport) -> None:
    """The table, one line per finding, and the summary line."""
    _print_rows(report)
    lines = []
    for name, entry in report.tensors.items():
        if entry.nonfinite:
            note = " (allowed by --allow-nonfinite)" if entry.allowed else ""
            first = index_text(entry.first_nonfinite)
            lines.append(f"{safe(name)}: {entry.nan} NaN, {entry.inf} inf, first at {first}{note}")
    lines += [
        f"{safe(name)}: {safe(entry.dtype)} values not scanned"
        for name, entry in report.tensors.items()
        if not entry.scanned
    ]
    if report.manifest is not None:
        lines += _manifest_lines(report.manifest)
    for line in lines:
        print(line)
    skipped = len(report.unreadable)
    members = f", {count_of(skipped, 'unreadable member')} skipped" if skipped else ""
    counted = count_of(len(report.tensors), "tensor")
    print(f"{safe(report.path)}: {counted}, {byte_size(report.bytes)}{members}: {report.verdict}")


def _manifest_lines(check: ManifestCheck) -> list[str]:
    lines: list[str] = []
    for label, differ, missing, unexpected in (
        ("", check.differs, check.missing, check.unexpected),
        ("*unreadable*:", check.unreadable_differs, check.unreadable_missing,
         check.unreadable_unexpected),
    ):  # fmt: skip
        lines += [f"{safe(label + name)}: digest differs from the manifest" for name in differ]
        lines += [
            f"{safe(label + name)}: in the manifest, missing from the checkpoint"
            for name in missing
        ]
        lines += [f"{safe(label + name)}: not in the manifest" for name in unexpected]
    if check.checkpoint_digest_differs:
        lines.append("the checkpoint digest differs from the manifest's (its last line)")
    if check.metadata == "not checked":
        lines.append(
            "metadata not checked: the manifest has no metadata digest "
            "(written before strided digested metadata)"
        )
    elif check.metadata == "differs":
        lines.append(
            "metadata: digest differs from the manifest (a key was added, removed or changed)"
        )
    return lines


def _manifest(path: str) -> Manifest:
    try:
        return read_manifest(path)
    except (DataError, OSError, UnicodeError) as error:
        raise CommandFailure(with_path(path, error)) from None


def _print_rows(report: VerifyReport) -> None:
    header = ("name", "dtype", "shape", "min", "max", "mean", "nan", "inf", "first nan/inf")
    lines = [header]
    for name, entry in report.tensors.items():
        mean = entry.mean
        lines.append(
            (
                safe(name),
                safe(entry.dtype),
                index_text(entry.shape),
                _cell(entry.min),
                _cell(entry.max),
                "-" if mean is None else repr(mean),
                _cell(entry.nan),
                _cell(entry.inf),
                index_text(entry.first_nonfinite) if entry.scanned else "-",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)
