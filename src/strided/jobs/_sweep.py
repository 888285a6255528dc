"""Every named tensor of a checkpoint read once, and what the Python faces share.

``sweep`` is the pass behind ``verify`` and ``inspect --full``: exact statistics of
every element and, when asked, each tensor's digest in the same read. ``header_row``
and ``exact_row`` turn its results into the rows those commands show. The rest is the
common ground of the public job functions (``st.hash``, ``st.verify``): checking their
``jobs``/``scheduler`` keywords, lending ``token`` to worker processes, and meeting
unreadable members.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from .._core.dtype import DType
from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_JOBS
from .._kernels.exact_stats import Totals, summary
from ..io._http import TOKENS_VARIABLE, is_url, remember_token
from . import _scan
from ._checkpoint import Checkpoint, admit, has_dtype
from ._engine import runner
from ._pool import plan, sharing, where
from ._unreadable import selected_unreadable, unreadable_error

__all__ = [
    "Meter",
    "Notify",
    "as_path",
    "check_workers",
    "exact_row",
    "header_row",
    "no_meter",
    "skipped_unreadable",
    "sweep",
    "token_scope",
]

# Makes the progress display of one pass: (total work in bytes, label) -> a context
# manager whose value has ``update(done)`` (or is None: no display). The command line
# draws a bar on stderr; the Python faces show nothing.
Meter = Callable[[int, str], AbstractContextManager[Any]]
# Told each unreadable member a job skips: (name, reason).
Notify = Callable[[str, str], None]


def no_meter(total: int, label: str) -> AbstractContextManager[None]:
    """A Meter that shows nothing."""
    return nullcontext()


def check_workers(job: str, jobs: int, scheduler: str | None) -> None:
    """``jobs`` an int in ``[1, MAX_JOBS]``, a ``scheduler`` address (``local:N`` with N
    in the same range), and not both: LimitError or FormatError naming ``job``
    otherwise (what the command line refuses as bad usage)."""
    if type(jobs) is not int or not 1 <= jobs <= MAX_JOBS:
        raise LimitError(f"{job}: jobs must be an int between 1 and {MAX_JOBS}, found {jobs!r}")
    if scheduler is None:
        return
    if type(scheduler) is not str or not scheduler or scheduler != scheduler.strip():
        raise FormatError(f"{job}: not a scheduler address: {scheduler!r}")
    if jobs != 1:
        raise FormatError(f"{job}: jobs and scheduler cannot be combined")
    if scheduler.startswith("local:"):
        count = scheduler[len("local:") :]
        if not count.isdecimal() or not 1 <= int(count) <= MAX_JOBS:
            raise LimitError(
                f"{job}: local:N takes a number of workers from 1 to {MAX_JOBS}, "
                f"found {scheduler!r}"
            )


@contextmanager
def token_scope(token: str | None, *paths: str) -> Iterator[None]:
    """While open, ``token`` is sent to the origin of each URL among ``paths`` by this
    process and by the worker processes it starts (they open the URLs themselves); then
    forgotten, the environment as it was."""
    urls = [path for path in paths if is_url(path)]
    if token is None or not urls:
        yield
        return
    remembered = os.environ.get(TOKENS_VARIABLE)
    try:
        for url in urls:
            remember_token(url, token)
        yield
    finally:
        if remembered is None:
            os.environ.pop(TOKENS_VARIABLE, None)
        else:
            os.environ[TOKENS_VARIABLE] = remembered


def skipped_unreadable(
    checkpoint: Checkpoint,
    path: str,
    skip: bool,
    notify: Notify | None = None,
    glob: str = "*",
) -> dict[str, str]:
    """The unreadable members (``name -> reason``, sorted by UTF-8 bytes) matching
    ``glob``. Without ``skip`` any is a FormatError naming them; with it each is told to
    ``notify`` and returned."""
    found = selected_unreadable(checkpoint.unreadable, glob)
    if found and not skip:
        raise unreadable_error(path, found)
    if notify is not None:
        for name, reason in found.items():
            notify(name, reason)
    return found


def sweep(
    checkpoint: Checkpoint,
    path: str,
    names: list[str],
    digests: bool,
    jobs: int,
    label: str,
    scheduler: str | None = None,
    allow_expanded: bool = False,
    lenient: bool = False,
    meter: Meter = no_meter,
) -> dict[str, tuple[str | None, Totals | None]]:
    """Every named tensor read once: ``name -> (digest or None, exact Totals or None)``.

    Large tensors are cut into chunks (unless digests are asked for: a digest is one
    stream) and spread over ``jobs`` worker processes, or the workers of the Dask
    ``scheduler``; the result is the same for any number of workers. Totals are None
    for tensors whose values strided cannot decode. An expanded view is a LimitError
    before anything is read unless ``allow_expanded`` (``admit``). Workers open
    ``path`` as ``checkpoint`` was opened: ``lenient`` must match. ``meter(total,
    label)`` shows the progress.
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
        meter(sum(weights), label) as progress,
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


def as_path(path: str | os.PathLike[str]) -> str:
    """A path or URL given to a public job as the text the command line would get."""
    return os.fspath(path)
