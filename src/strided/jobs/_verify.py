"""The work of ``strided verify`` / ``st.verify``: every element read, NaN and infinity
counted, digests checked against a manifest, gathered into a ``VerifyReport``."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._core.dtype import DType
from .._core.floats import shortest_text
from .._core.terminal import count_of
from .._kernels.digest import UNREADABLE_PREFIX, combine, sort_key
from ._checkpoint import Checkpoint
from ._hash import no_match
from ._manifest import Manifest
from ._sweep import Meter, Notify, exact_row, no_meter, skipped_unreadable, sweep

__all__ = ["ManifestCheck", "TensorCheck", "VerifyReport", "verify_checkpoint"]


@dataclass(frozen=True)
class TensorCheck:
    """One tensor as ``verify`` read it.

    ``scanned`` is False for a stored type strided cannot decode (its values were not
    read; ``min`` ... ``first_nonfinite`` are then None). ``min``/``max`` are the
    canonical text of the extreme values, ``mean`` the exact mean of the non-NaN
    elements correctly rounded to F64, ``first_nonfinite`` the row-major multi-index of
    the first NaN or infinity. ``allowed`` is True when the tensor holds NaN or
    infinity and its name matches an ``allow_nonfinite`` glob. ``digest`` is the
    tensor's digest when a manifest was checked, else None.
    """

    dtype: str
    shape: tuple[int, ...]
    numel: int
    bytes: int
    scanned: bool
    min: str | None
    max: str | None
    mean: float | None
    nan: int | None
    inf: int | None
    first_nonfinite: tuple[int, ...] | None
    allowed: bool
    digest: str | None

    @property
    def nonfinite(self) -> bool:
        """Whether the tensor holds a NaN or an infinity."""
        return bool(self.nan or self.inf)

    def as_json(self) -> dict[str, Any]:
        """The tensor's object in ``VerifyReport.to_json`` (the mean as canonical F64 text)."""
        mean = None if self.mean is None else shortest_text(DType.F64, self.mean)
        first = None if self.first_nonfinite is None else list(self.first_nonfinite)
        return {
            "dtype": self.dtype,
            "shape": list(self.shape),
            "numel": self.numel,
            "bytes": self.bytes,
            "scanned": self.scanned,
            "min": self.min,
            "max": self.max,
            "mean": mean,
            "nan": self.nan,
            "inf": self.inf,
            "first_nonfinite": first,
            "allowed": self.allowed,
            "digest": self.digest,
        }


@dataclass(frozen=True)
class ManifestCheck:
    """What checking a manifest found. Names are in UTF-8 byte order.

    ``differs``/``missing``/``unexpected``: tensors whose digest differs from the
    manifest's, tensors the manifest lists that the checkpoint lacks, tensors it holds
    that the manifest does not list; the ``unreadable_*`` three the same for skipped
    unreadable members (by the digest of their stored bytes).
    ``checkpoint_digest_differs``: every line agreed but the manifest's checkpoint
    digest (its last line) does not. ``metadata``: ``"matches"``, ``"differs"``, or
    ``"not checked"`` for a manifest written before metadata was digested.
    """

    differs: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    unreadable_differs: tuple[str, ...] = ()
    unreadable_missing: tuple[str, ...] = ()
    unreadable_unexpected: tuple[str, ...] = ()
    checkpoint_digest_differs: bool = False
    metadata: str = "matches"

    def as_json(self) -> dict[str, Any]:
        """The ``"manifest"`` object of ``VerifyReport.to_json``."""
        return {
            "differs": list(self.differs),
            "missing": list(self.missing),
            "unexpected": list(self.unexpected),
            "unreadable_differs": list(self.unreadable_differs),
            "unreadable_missing": list(self.unreadable_missing),
            "unreadable_unexpected": list(self.unreadable_unexpected),
            "checkpoint_digest_differs": self.checkpoint_digest_differs,
            "metadata": self.metadata,
        }

    def states(self) -> list[str]:
        """The summary's parts for the manifest (``2 digests differ``, ``1 missing``...)."""
        differ = len(self.differs) + len(self.unreadable_differs)
        counts = (
            (differ, "digest differs" if differ == 1 else "digests differ"),
            (len(self.missing) + len(self.unreadable_missing), "missing"),
            (len(self.unexpected) + len(self.unreadable_unexpected), "unexpected"),
        )
        found = [f"{count} {what}" for count, what in counts if count]
        if self.checkpoint_digest_differs:
            found.append("checkpoint digest differs")
        if self.metadata == "differs":
            found.append("metadata digest differs")
        return found


@dataclass(frozen=True)
class VerifyReport:
    """What ``strided verify`` finds: the fields its ``--json`` prints.

    ``path`` as given; ``tensors`` name -> ``TensorCheck`` in UTF-8 byte order of the
    names; ``bytes`` the tensors' stored bytes; ``unreadable`` name -> reason for each
    unreadable member skipped; ``manifest`` the ``ManifestCheck`` (None without a
    manifest); ``verdict`` the summary the command prints after the path and counts
    (``"clean"``, ``"clean, digests match"``, ``"1 tensor with NaN or inf"``...);
    ``ok`` True exactly when the command exits 0.
    """

    path: str
    tensors: Mapping[str, TensorCheck]
    bytes: int
    unreadable: Mapping[str, str] = field(default_factory=dict)
    manifest: ManifestCheck | None = None
    verdict: str = "clean"
    ok: bool = True

    def to_json(self) -> str:
        """Exactly what ``strided verify --json`` prints (without the final newline)."""
        document = {
            "path": self.path,
            "tensors": {name: entry.as_json() for name, entry in self.tensors.items()},
            "bytes": self.bytes,
            "unreadable": dict(self.unreadable),
            "manifest": None if self.manifest is None else self.manifest.as_json(),
            "verdict": self.verdict,
            "ok": self.ok,
        }
        return json.dumps(document, indent=1, allow_nan=False)


def verify_checkpoint(
    checkpoint: Checkpoint,
    path: str,
    manifest: Manifest | None = None,
    *,
    glob: str = "*",
    allow_nonfinite: Sequence[str] = (),
    jobs: int = 1,
    scheduler: str | None = None,
    allow_expanded: bool = False,
    lenient: bool = False,
    skip_unreadable: bool = False,
    notify: Notify | None = None,
    meter: Meter = no_meter,
) -> VerifyReport:
    """Read every element of the tensors of ``checkpoint`` (opened from ``path``) whose
    names match ``glob``, and check ``manifest`` when given.

    Unreadable members are a FormatError before anything is read unless
    ``skip_unreadable`` (each then told to ``notify``, and with a manifest the digest
    of its stored bytes checked). With a ``glob`` only the manifest's entries matching
    it are expected, and its checkpoint digest is checked only when it lists nothing
    else (it was written for the same selection).
    """
    skipped = skipped_unreadable(checkpoint, path, skip_unreadable, notify, glob)
    names = sorted((n for n in checkpoint if fnmatch.fnmatchcase(n, glob)), key=sort_key)
    if glob != "*" and not names and not skipped and (len(checkpoint) or checkpoint.unreadable):
        raise no_match(checkpoint, path, glob)
    found = sweep(
        checkpoint, path, names, manifest is not None, jobs, "verify",
        scheduler, allow_expanded, lenient, meter,
    )  # fmt: skip
    rows = [exact_row(checkpoint, name, found[name][1]) for name in names]
    total = sum(checkpoint.info(name).byte_len for name in names)
    metadata = checkpoint.metadata_digest() if manifest is not None else None
    stored = {name: checkpoint.unreadable_digest(name) for name in skipped}
    globs = [allow_nonfinite] if isinstance(allow_nonfinite, str) else list(allow_nonfinite)
    tensors = {
        row["name"]: _check(row, globs, found[row["name"]][0] if manifest else None) for row in rows
    }
    states = []
    nonfinite = [entry for entry in tensors.values() if entry.nonfinite]
    allowed = [entry for entry in nonfinite if entry.allowed]
    if len(nonfinite) > len(allowed):
        states.append(f"{count_of(len(nonfinite) - len(allowed), 'tensor')} with NaN or inf")
    unscanned = sum(1 for entry in tensors.values() if not entry.scanned)
    if unscanned:
        states.append(f"{unscanned} of {len(names)} tensors not scanned")
    checked = None
    matched = ""
    if manifest is not None:
        assert metadata is not None
        digests = {name: found[name][0] or "" for name in names}
        checked = _against(manifest, digests, stored, metadata, glob)
        states += checked.states()
        unchecked = "" if manifest.metadata_digest else " (metadata not checked)"
        matched = ", digests match" + unchecked
    verdict = ", ".join(states) if states else "clean" + matched
    if allowed:
        verdict += f" ({count_of(len(allowed), 'tensor')} with NaN or inf allowed)"
    return VerifyReport(path, tensors, total, dict(skipped), checked, verdict, not states)


def _check(row: dict[str, Any], globs: list[str], digest: str | None) -> TensorCheck:
    scanned = "min" in row
    first = row.get("first_nonfinite")
    nonfinite = bool(row.get("nan") or row.get("inf"))
    return TensorCheck(
        dtype=row["dtype"],
        shape=tuple(row["shape"]),
        numel=row["numel"],
        bytes=row["bytes"],
        scanned=scanned,
        min=row.get("min"),
        max=row.get("max"),
        mean=row.get("mean"),
        nan=row.get("nan"),
        inf=row.get("inf"),
        first_nonfinite=None if first is None else tuple(first),
        allowed=nonfinite and any(fnmatch.fnmatchcase(row["name"], g) for g in globs),
        digest=digest,
    )


def _against(
    manifest: Manifest, digests: dict[str, str], stored: dict[str, str], metadata: str, glob: str
) -> ManifestCheck:
    """Each mismatched, missing and unexpected tensor (then skipped unreadable member),
    the checkpoint digest when every line agrees, and the metadata digest."""
    groups: list[tuple[str, ...]] = []
    whole = True
    for expected, found in ((manifest.tensors, digests), (manifest.unreadable, stored)):
        chosen = {name: d for name, d in expected.items() if fnmatch.fnmatchcase(name, glob)}
        whole = whole and len(chosen) == len(expected)
        groups.append(_sorted(n for n in found if n in chosen and chosen[n] != found[n]))
        groups.append(_sorted(n for n in chosen if n not in found))
        groups.append(_sorted(n for n in found if n not in chosen))
    pairs = [*digests.items(), *((UNREADABLE_PREFIX + n, d) for n, d in stored.items())]
    differs = whole and not any(groups) and combine(pairs) != manifest.digest
    if manifest.metadata_digest is None:
        state = "not checked"
    else:
        state = "matches" if manifest.metadata_digest == metadata else "differs"
    return ManifestCheck(
        differs=groups[0],
        missing=groups[1],
        unexpected=groups[2],
        unreadable_differs=groups[3],
        unreadable_missing=groups[4],
        unreadable_unexpected=groups[5],
        checkpoint_digest_differs=differs,
        metadata=state,
    )


def _sorted(names: Any) -> tuple[str, ...]:
    return tuple(sorted(names, key=sort_key))
