"""``strided hash``: every tensor's digest, the metadata's and the checkpoint's, as text or JSON."""

from __future__ import annotations

import argparse
import sys

from ..jobs._checkpoint import open_checkpoint
from ..jobs._hash import hash_checkpoint
from ..jobs._sweep import Notify
from ._progress import Progress
from ._text import safe

__all__ = ["run_hash", "tell_skipped"]


def tell_skipped(path: str) -> Notify:
    """A ``notify`` for the jobs: names each skipped unreadable member of ``path`` on stderr."""

    def notify(name: str, reason: str) -> None:
        print(
            f"strided: {safe(path)}: skipped unreadable member {safe(repr(name))}: {safe(reason)}",
            file=sys.stderr,
        )

    return notify


def run_hash(args: argparse.Namespace) -> int:
    """Print ``HashReport.lines()`` (``DIGEST  NAME`` per tensor, names sorted by UTF-8
    bytes, then ``DIGEST  *metadata*`` and ``DIGEST  *checkpoint*``), or with ``--json``
    ``HashReport.to_json()``; the work is ``st.hash``'s (``jobs._hash``).

    The checkpoint is opened here (workers open it by path), so a file that only this
    process can see is reported by the engine, naming the worker.
    """
    with open_checkpoint(args.path, lenient=args.lenient) as checkpoint:
        report = hash_checkpoint(
            checkpoint, args.path, glob=args.name, jobs=args.jobs, scheduler=args.scheduler,
            allow_expanded=args.allow_expanded, lenient=args.lenient,
            skip_unreadable=args.skip_unreadable, notify=tell_skipped(args.path),
            meter=Progress,
        )  # fmt: skip
    if args.json:
        print(report.to_json())
        return 0
    for line in report.lines():
        print(line)
    return 0
