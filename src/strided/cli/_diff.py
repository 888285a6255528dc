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

The work is ``strided.diff``'s (``jobs._diff_job``); this module parses, calls and prints.
"""

from __future__ import annotations

import argparse
import sys

from .._kernels.compare import Tolerance
from ..jobs._diff_job import DiffFailure, DiffOptions, compare
from ..jobs._pool import JobError
from ._progress import Progress
from ._text import job_error, one_line, safe, with_path
from ._verify import CommandFailure

__all__ = ["run_diff"]


def run_diff(args: argparse.Namespace) -> int:
    """Print the comparison (a table, or JSON with ``--json``); exit 0, 1 or 2."""
    options = DiffOptions(
        args.path,
        args.other,
        Tolerance(args.atol, args.rtol, args.ulp),
        args.name,
        args.ignore_metadata,
        args.jobs,
        args.scheduler,
        args.skip_unreadable,
        args.allow_expanded,
        args.lenient,
    )
    try:
        report = compare(options, _skipped, lambda total: Progress(total, "diff"))
    except DiffFailure as failure:
        raise CommandFailure(_message(failure), status=failure.status) from None
    if args.json:
        print(report.to_json())
    else:
        for line in report.lines(args.path, args.other):
            print(line)
    return 0 if report.same else 1


def _skipped(path: str, name: str, reason: str) -> None:
    """Name a skipped unreadable member on stderr."""
    print(
        f"strided: {safe(path)}: skipped unreadable member {safe(repr(name))}: {safe(reason)}",
        file=sys.stderr,
    )


def _message(failure: DiffFailure) -> str:
    """The one line naming the file (and tensor) once each."""
    if isinstance(failure.cause, JobError):
        return job_error(failure.cause)
    if failure.label is None:
        return one_line(failure.cause)
    return with_path(failure.label, failure.cause)
