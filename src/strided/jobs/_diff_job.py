"""``strided.diff``: two checkpoints compared tensor by tensor and key by key.

The work of ``strided diff`` (the command only parses its options, calls ``compare``
and prints the report). ``compare`` reports trouble as ``DiffFailure``, which carries
the typed error, the name the command puts in front of it and the command's exit
status; ``diff``, the public face, raises the typed error itself.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core.errors import DataError, FormatError, RangeError
from .._kernels.compare import Tally, Tolerance
from .._kernels.digest import sort_key
from . import _diff
from ._checkpoint import admit, open_checkpoint
from ._diff_report import JSON_TEXT, DiffReport
from ._engine import runner
from ._pool import JobError, plan, sharing, where
from ._sweep import check_workers, token_scope
from ._unreadable import selected_unreadable, unreadable_error

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = ["DiffFailure", "DiffOptions", "compare", "diff", "tolerance"]

Entries = dict[str, dict[str, Any]]
# Told of each unreadable member skipped: (path, name, reason).
Notify = Callable[[str, str, str], None]
# Makes the progress meter of a run that reads ``total`` weighted bytes.
Meter = Callable[[int], contextlib.AbstractContextManager[Any]]


class DiffFailure(Exception):
    """The comparison could not be made: ``cause`` is the typed error, ``label`` what the
    command names in front of it (None: the cause names what it is about), ``status``
    the command's exit status (1: a member nothing can be said of; 2: trouble)."""

    def __init__(self, cause: BaseException, label: str | None, status: int = 2) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.label = label
        self.status = status


@dataclass(frozen=True)
class DiffOptions:
    """What ``strided diff`` was asked (the command's options, checked)."""

    path: str
    other: str
    tolerance: Tolerance
    names: str = "*"
    ignore_metadata: bool = False
    jobs: int = 1
    scheduler: str | None = None
    skip_unreadable: bool = False
    allow_expanded: bool = False
    lenient: bool = False


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    atol: str | float = 0,
    rtol: str | float = 0,
    ulp: int | None = None,
    names: str | None = None,
    ignore_metadata: bool = False,
    jobs: int = 1,
    scheduler: str | None = None,
    skip_unreadable: bool = False,
    allow_expanded: bool = False,
    lenient: bool = False,
    token: str | None = None,
) -> DiffReport:
    """Compare two checkpoints of any formats tensor by tensor, exactly, and their
    metadata key by key: what ``strided diff A B`` does.

    Tensors are matched by name and compared by value whatever the formats and dtypes;
    an element matches when ``|a - b| <= atol + rtol * |b|`` holds for the exact values,
    or (with ``ulp``) when both are at most ``ulp`` representable values apart. Metadata
    values are compared through their canonical text (a GGUF u32 ``4096`` equals a
    safetensors ``"4096"``).

    Args:
        a: the first checkpoint: a path (file, shard folder or index) or an http(s) URL.
        b: the checkpoint to compare with (as ``a``).
        atol: absolute tolerance, a finite number >= 0. Text is read as the command reads
            ``--atol`` (Python's ``float(text)``: the double nearest the decimal); a float
            is taken exactly as the double it is, which is what the command does with
            its ``repr``; an int is converted to the nearest double.
        rtol: relative tolerance (of ``b``'s value), as ``atol``.
        ulp: None, or an int >= 0: floats also match within that many representable values.
        names: a glob; only tensors (and unreadable members) whose name matches it
            (``--name``; None: all).
        ignore_metadata: compare tensors only (``DiffReport.metadata`` is None).
        jobs: processes to use, 1 to 1024 (the report is the same for every count).
        scheduler: a Dask scheduler address (``tcp://host:8786`` or ``local:N``) instead
            of ``jobs``.
        skip_unreadable: go on past members strided cannot read (an ``.npz`` object
            array...), comparing them by the digests of their stored bytes.
        allow_expanded: compare tensors whose logical size is more than 2^20 times their
            stored bytes (a PyTorch ``expand`` view), at the cost of their logical size.
        lenient: read PyTorch pickles that name globals strict mode refuses, as inert data.
        token: bearer token sent to the origin of ``a`` or ``b`` when it is a URL.

    Returns:
        A ``DiffReport``: ``same`` (and ``ok``) True exactly when the command exits 0;
        ``to_json()`` is what ``strided diff --json`` prints, ``lines()`` its table.

    Raises:
        FormatError, LimitError, ...: a checkpoint cannot be read, holds members strided
            cannot read (without ``skip_unreadable``), or a tensor to compare is an
            expanded view (LimitError, without ``allow_expanded``).
        RangeError: a tolerance, ``ulp`` or ``jobs`` out of range; FormatError for one
            that is not a number, or ``jobs`` other than 1 with a ``scheduler``. A value
            that cannot be read while the values are compared is a FormatError naming
            the files and the tensor.
        OSError: a file cannot be opened.

    Example:
        >>> import strided as st
        >>> st.save_safetensors("a.safetensors", {"w": st.tensor([1.0, 2.0], dtype="F32")})
        >>> st.save_safetensors("b.safetensors", {"w": st.tensor([1.0, 2.5], dtype="F32")})
        >>> report = st.diff("a.safetensors", "b.safetensors")
        >>> report.same, report.tensors["w"]["status"], report.tensors["w"]["count"]
        (False, 'differs', 1)
        >>> st.diff("a.safetensors", "b.safetensors", atol="0.5").ok
        True
    """
    check_workers("diff", jobs, scheduler)
    options = DiffOptions(
        os.fspath(a),
        os.fspath(b),
        Tolerance(tolerance(atol, "atol"), tolerance(rtol, "rtol"), _ulp(ulp)),
        "*" if names is None else names,
        ignore_metadata,
        jobs,
        scheduler,
        skip_unreadable,
        allow_expanded,
        lenient,
    )
    with token_scope(token, options.path, options.other):
        try:
            return compare(options)
        except DiffFailure as failure:
            cause = failure.cause
            if isinstance(cause, (DataError, OSError)):
                raise cause from None
            where = f"{failure.label}: " if failure.label else ""
            raise FormatError(f"{where}{cause}") from None


def tolerance(value: str | float, name: str) -> float:
    """``atol``/``rtol`` as the F64 the comparison uses: text through ``float(text)`` (as
    the command reads it), a float as it is; RangeError unless finite and >= 0."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise FormatError(f"{name}: not a number: {value[:40]!r}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise RangeError(f"{name} must be a finite number >= 0, found {value}") from None
    else:
        raise FormatError(f"{name} must be a number or its text, found {type(value).__name__}")
    if not 0.0 <= number < math.inf:
        raise RangeError(f"{name} must be a finite number >= 0, found {value!r}")
    return number


def _ulp(value: int | None) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise FormatError(f"ulp must be None or an int, found {type(value).__name__}")
    if value < 0:
        raise RangeError(f"ulp must be >= 0, found {value}")
    return value


def compare(
    options: DiffOptions, notify: Notify | None = None, meter: Meter | None = None
) -> DiffReport:
    """The comparison ``options`` ask for; DiffFailure when it cannot be made.

    ``notify`` is told of each unreadable member skipped (before any value is read);
    ``meter`` makes a progress meter for the values read.
    """
    with _open(options.path, options.lenient) as a, _open(options.other, options.lenient) as b:
        skipped_a = _skipped(a, options.path, options, notify)
        skipped_b = _skipped(b, options.other, options, notify)
        try:
            members = _members(a, b, skipped_a, skipped_b)
            entries = _entries(options, a, b, members, meter)
            metadata = None if options.ignore_metadata else _diff.metadata_entries(a, b, JSON_TEXT)
        except (DataError, OSError, UnicodeError) as error:
            raise DiffFailure(error, f"{options.path} / {options.other}") from None
        except JobError as error:
            raise DiffFailure(error, None) from None
    same = all(entry["status"] in ("identical", "equal") for entry in entries.values())
    same &= all(entry["status"] == "identical" for entry in members.values())
    same &= metadata is None or all(entry["status"] == "equal" for entry in metadata.values())
    return DiffReport(entries, members, metadata, same)


def _open(path: str, lenient: bool) -> Checkpoint:
    try:
        return open_checkpoint(path, lenient=lenient)
    except (DataError, OSError, UnicodeError) as error:
        raise DiffFailure(error, path) from None


def _skipped(
    checkpoint: Checkpoint, path: str, options: DiffOptions, notify: Notify | None
) -> dict[str, str]:
    """The unreadable members (``name -> reason``) the comparison covers: any is a
    refusal (status 1: nothing can be said to match) unless ``skip_unreadable``."""
    found = selected_unreadable(checkpoint.unreadable, options.names)
    if found and not options.skip_unreadable:
        raise DiffFailure(unreadable_error(path, found), path, status=1)
    for name, reason in found.items():
        if notify is not None:
            notify(path, name, reason)
    return found


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
    options: DiffOptions, a: Checkpoint, b: Checkpoint, members: Entries, meter: Meter | None
) -> Entries:
    # A tensor facing an unreadable member of its name is reported with the members.
    names = {
        name
        for name in (*a, *b)
        if fnmatch.fnmatchcase(name, options.names) and name not in members
    }
    entries: Entries = {}
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
        _admitted(a, b, name, options.allow_expanded)
        entries[name] = {}
        if kind_a.startswith("raw:"):
            raw.add(name)
        units = info_a.byte_len if name in raw else info_a.shape.numel
        compared.append((name, units, info_a.logical_len + info_b.logical_len))
    tallies = _tallies(options, a, b, compared, meter)
    for name, _, _ in compared:
        entries[name] = _diff.result(None, a.info(name), b.info(name), tallies[name], name in raw)
    return entries


def _tallies(
    options: DiffOptions,
    a: Checkpoint,
    b: Checkpoint,
    compared: list[tuple[str, int, int]],
    meter: Meter | None,
) -> dict[str, Tally]:
    """The values of the ``compared`` tensors (name, units, bytes) compared, by name,
    in parts spread over the engine's processes and merged in order."""
    tasks = plan(compared, split=True)
    path_a, path_b = where(options.path, options.lenient), where(options.other, options.lenient)
    shares = {name: (units, size) for name, units, size in compared}
    weights = [
        sum(shares[p.name][1] * (p.stop - p.start) // max(shares[p.name][0], 1) for p in task)
        for task in tasks
    ]
    work = [(path_a, path_b, task, options.tolerance) for task in tasks]
    metered = meter(sum(weights)) if meter is not None else contextlib.nullcontext()
    with (
        sharing((path_a, a), (path_b, b)),
        runner(options.jobs, options.scheduler) as engine,
        metered as progress,
    ):
        results = engine.run(_diff.run_task, work, weights, progress)
    tallies: dict[str, Tally] = {}
    for task, found in zip(tasks, results, strict=True):
        for part, tally in zip(task, found, strict=True):
            before = tallies.get(part.name)
            tallies[part.name] = tally if before is None else before.merge(tally)
    return tallies


def _admitted(a: Checkpoint, b: Checkpoint, name: str, allow_expanded: bool) -> None:
    """Tensor ``name`` may be compared: an expanded view on either side is refused
    (``admit``), as trouble with the input, naming its file and tensor."""
    try:
        admit(a, [name], allow_expanded)
        admit(b, [name], allow_expanded)
    except DataError as error:
        raise DiffFailure(error, None) from None
