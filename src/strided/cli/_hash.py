"""``strided hash``: every tensor's digest, the metadata's and the checkpoint's, as text or JSON."""

from __future__ import annotations

import argparse
import json

from .._kernels.digest import UNREADABLE_PREFIX, combine, sort_key
from ..jobs import _digest
from ..jobs._checkpoint import admit, open_checkpoint
from ..jobs._engine import runner
from ..jobs._pool import plan, sharing, where
from ._manifest import CHECKPOINT_LINE, METADATA_LINE, escaped_line, unreadable_line
from ._progress import Progress
from ._verify import skipped_members

__all__ = ["run_hash"]


def run_hash(args: argparse.Namespace) -> int:
    """Print ``DIGEST  NAME`` per tensor (names sorted by UTF-8 bytes), then
    ``DIGEST  *metadata*`` (``Checkpoint.metadata_digest``) and ``DIGEST  *checkpoint*``
    (``Checkpoint.digest``); ``--json`` prints ``{"digest", "metadata_digest", "tensors"}``.

    An expanded view (logical size more than 2^20 x its stored bytes) is refused before
    anything is hashed unless ``--allow-expanded`` (``_jobs.admit``). A member strided
    cannot read stops the command before anything is hashed unless
    ``--skip-unreadable``: then each gets a line ``DIGEST  *unreadable*:NAME`` (the
    SHA-256 of its stored bytes, sorted by name) before ``*metadata*``, the checkpoint
    digest covers them (as ``Checkpoint.digest(skip_unreadable=True)``), and ``--json``
    has ``"unreadable": {name: digest}``. They are hashed here, so the output is the
    same for any ``--jobs`` or ``--scheduler``.
    """
    with open_checkpoint(args.path, lenient=args.lenient) as checkpoint:
        skipped = skipped_members(checkpoint, args.path, args.skip_unreadable)
        metadata = checkpoint.metadata_digest()
        names = sorted(checkpoint, key=sort_key)
        infos = admit(checkpoint, names, args.allow_expanded)
        tasks = plan(
            [(name, infos[name].shape.numel, infos[name].logical_len) for name in names], False
        )
        path = where(args.path, args.lenient)
        weights = [sum(infos[part.name].logical_len for part in task) for task in tasks]
        work = [(path, [part.name for part in task]) for task in tasks]
        with (
            sharing((path, checkpoint)),
            runner(args.jobs, args.scheduler) as engine,
            Progress(sum(weights), "hash") as progress,
        ):
            results = engine.run(_digest.run_task, work, weights, progress)
        stored = {name: checkpoint.unreadable_digest(name) for name in skipped}
    digests = dict(zip(names, (digest for found in results for digest in found), strict=True))
    total = combine([*digests.items(), *((UNREADABLE_PREFIX + n, d) for n, d in stored.items())])
    if args.json:
        tensors = {
            name: {
                "dtype": infos[name].dtype,
                "shape": list(infos[name].shape),
                "digest": digests[name],
            }
            for name in names
        }
        document = {"digest": total, "metadata_digest": metadata, "tensors": tensors}
        if stored:
            document["unreadable"] = stored
        print(json.dumps(document, indent=1))
        return 0
    for name in names:
        print(escaped_line(digests[name], name))
    for name, digest in stored.items():
        print(unreadable_line(digest, name))
    print(f"{metadata}  {METADATA_LINE}")
    print(f"{total}  {CHECKPOINT_LINE}")
    return 0
