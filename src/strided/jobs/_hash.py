"""The work of ``strided hash`` / ``st.hash``: every tensor's digest, the metadata's and
the checkpoint's, gathered into a ``HashReport``."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from .._core.errors import FormatError
from .._kernels.digest import UNREADABLE_PREFIX, combine, sort_key
from . import _digest
from ._checkpoint import Checkpoint, admit
from ._engine import runner
from ._manifest import CHECKPOINT_LINE, METADATA_LINE, escaped_line, unreadable_line
from ._pool import plan, sharing, where
from ._sweep import Meter, Notify, no_meter, skipped_unreadable

__all__ = ["HashReport", "TensorDigest", "hash_checkpoint", "no_match"]


@dataclass(frozen=True)
class TensorDigest:
    """One tensor's entry in a ``HashReport``: its stored type's name, shape and digest."""

    dtype: str
    shape: tuple[int, ...]
    digest: str


@dataclass(frozen=True)
class HashReport:
    """What ``strided hash`` finds: the fields its ``--json`` prints.

    ``digest`` is the checkpoint digest (``Checkpoint.digest``) of the tensors hashed
    (and of the skipped unreadable members), ``metadata_digest`` the metadata's
    (``Checkpoint.metadata_digest``), ``tensors`` name -> ``TensorDigest`` in UTF-8
    byte order of the names, ``unreadable`` name -> SHA-256 of the stored bytes of
    each unreadable member skipped (empty unless ``skip_unreadable``).
    """

    digest: str
    metadata_digest: str
    tensors: Mapping[str, TensorDigest]
    unreadable: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Always True: ``strided hash`` exits 0 whenever it produces a report."""
        return True

    def to_json(self) -> str:
        """Exactly what ``strided hash --json`` prints (without the final newline):
        ``{"digest", "metadata_digest", "tensors": {name: {"dtype", "shape",
        "digest"}}}``, and ``"unreadable": {name: digest}`` when members were skipped."""
        tensors = {
            name: {"dtype": entry.dtype, "shape": list(entry.shape), "digest": entry.digest}
            for name, entry in self.tensors.items()
        }
        document: dict[str, object] = {
            "digest": self.digest,
            "metadata_digest": self.metadata_digest,
            "tensors": tensors,
        }
        if self.unreadable:
            document["unreadable"] = dict(self.unreadable)
        return json.dumps(document, indent=1)

    def lines(self) -> list[str]:
        """The ``sha256sum``-style lines ``strided hash`` prints (a manifest for
        ``strided verify --manifest``): ``DIGEST  NAME`` per tensor, ``DIGEST
        *unreadable*:NAME`` per skipped member, then ``DIGEST  *metadata*`` and ``DIGEST
        *checkpoint*``. Names needing it are escaped, the line then starting with ``\\``."""
        found = [escaped_line(entry.digest, name) for name, entry in self.tensors.items()]
        found += [unreadable_line(digest, name) for name, digest in self.unreadable.items()]
        found.append(f"{self.metadata_digest}  {METADATA_LINE}")
        found.append(f"{self.digest}  {CHECKPOINT_LINE}")
        return found


def no_match(checkpoint: Checkpoint, path: str, glob: str) -> FormatError:
    """The refusal of a ``names`` glob that selects nothing from a checkpoint holding something."""
    return FormatError(f"{path}: no tensor matches {glob!r}")


def hash_checkpoint(
    checkpoint: Checkpoint,
    path: str,
    *,
    glob: str = "*",
    jobs: int = 1,
    scheduler: str | None = None,
    allow_expanded: bool = False,
    lenient: bool = False,
    skip_unreadable: bool = False,
    notify: Notify | None = None,
    meter: Meter = no_meter,
) -> HashReport:
    """Hash the tensors of ``checkpoint`` (opened from ``path``) whose names match ``glob``.

    An expanded view (logical size more than 2^20 x its stored bytes) is a LimitError
    before anything is hashed unless ``allow_expanded`` (``admit``). A member strided
    cannot read is a FormatError before anything is hashed unless ``skip_unreadable``:
    then each is told to ``notify`` and the SHA-256 of its stored bytes recorded; the
    checkpoint digest covers them (as ``Checkpoint.digest(skip_unreadable=True)``).
    They are hashed here, so the report is the same for any ``jobs`` or ``scheduler``.
    A task that fails raises the engine's JobError (the Python face turns it into the
    reader's DataError).
    """
    skipped = skipped_unreadable(checkpoint, path, skip_unreadable, notify, glob)
    metadata = checkpoint.metadata_digest()
    names = sorted((n for n in checkpoint if fnmatch.fnmatchcase(n, glob)), key=sort_key)
    if glob != "*" and not names and not skipped and (len(checkpoint) or checkpoint.unreadable):
        raise no_match(checkpoint, path, glob)
    infos = admit(checkpoint, names, allow_expanded)
    tasks = plan(
        [(name, infos[name].shape.numel, infos[name].logical_len) for name in names], False
    )
    target = where(path, lenient)
    weights = [sum(infos[part.name].logical_len for part in task) for task in tasks]
    work = [(target, [part.name for part in task]) for task in tasks]
    with (
        sharing((target, checkpoint)),
        runner(jobs, scheduler) as engine,
        meter(sum(weights), "hash") as progress,
    ):
        results = engine.run(_digest.run_task, work, weights, progress)
    stored = {name: checkpoint.unreadable_digest(name) for name in skipped}
    digests = dict(zip(names, (digest for found in results for digest in found), strict=True))
    total = combine([*digests.items(), *((UNREADABLE_PREFIX + n, d) for n, d in stored.items())])
    tensors = {
        name: TensorDigest(infos[name].dtype, tuple(infos[name].shape), digests[name])
        for name in names
    }
    return HashReport(total, metadata, tensors, stored)
