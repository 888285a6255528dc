"""``st.scan``: every global a checkpoint's pickles name, judged, as ``strided scan``.

The path is opened leniently (unknown globals become inert records, so a whole pickled
model is listed whole) with a budget whose import log survives a failed open: a file
strided refuses after its pickle named ``os.system`` is still reported as dangerous.
Nothing any pickle names is imported or called.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._core.errors import DataError, FormatError
from .._core.memory import guard_function
from .._core.terminal import with_path
from ..io._budget import ParseBudget
from ..io._common import label
from ..io._http import is_url
from ..io.pickle import PickleImport, judge_log, record_unrecognized
from ._checkpoint import open_checkpoint, open_local

__all__ = ["PickleScan", "ScanReport", "ScannedFile", "scan", "scan_pickles"]


class PickleScan(NamedTuple):
    """The scan of one path.

    ``format`` is the checkpoint's (None when the open failed); ``imports`` every global
    the pickles named before the open ended or failed, with verdicts and members;
    ``unread`` the pickles left unread (member -> reason); ``error`` what stopped the
    open (None when it succeeded).
    """

    format: str | None
    imports: tuple[PickleImport, ...]
    unread: dict[str, str]
    error: Exception | None

    @property
    def status(self) -> int:
        """0 when every import is data and every pickle was read; 1 when any import is
        unknown or dangerous (also after a failed open); else 2 when a pickle or the
        file could not be read."""
        if any(found.verdict != "data" for found in self.imports):
            return 1
        return 2 if self.error is not None or self.unread else 0


@guard_function
def scan_pickles(path: str | os.PathLike[str]) -> PickleScan:
    """Open ``path`` leniently and report what its pickles name (see ``PickleScan``)."""
    if isinstance(path, str) and is_url(path):
        # Remote checkpoints are safetensors or GGUF: no pickles.
        try:
            with open_checkpoint(path) as checkpoint:
                return PickleScan(checkpoint.format, (), {}, None)
        except (DataError, OSError, UnicodeError) as error:
            return PickleScan(None, (), {}, error)
    where = label(path)
    budget = ParseBudget(where)
    try:
        with open_local(where, False, True, budget) as checkpoint:
            kind = checkpoint.format
    except (DataError, OSError, UnicodeError) as error:
        if isinstance(error, FormatError) and not budget.imports.seen():
            # No format took it: it may be a protocol 0/1 pickle, which torch.load runs.
            try:
                record_unrecognized(where, budget)
            except (DataError, OSError):
                pass  # the open's own error is the one reported
        return PickleScan(None, judge_log(budget.imports), dict(budget.imports.unread), error)
    return PickleScan(kind, judge_log(budget.imports), dict(budget.imports.unread), None)


_VERDICTS = ("dangerous", "unknown")


@dataclass(frozen=True)
class ScannedFile:
    """What ``scan`` found in one path.

    ``format`` is the checkpoint's format (None when it could not be opened);
    ``imports`` every global its pickles named, each with its verdict and the member it
    came from, also those named before a failed open; ``unread`` the pickles left unread
    (member -> why); ``error`` the one-line message of what stopped the open (None when
    it opened); ``status`` 0, 1 or 2 as ``ScanReport.status``, for this path alone.
    """

    path: str
    format: str | None
    imports: tuple[PickleImport, ...]
    unread: dict[str, str]
    error: str | None
    status: int

    def to_dict(self) -> dict[str, Any]:
        """The file's entry in ``ScanReport.to_json()``."""
        return {
            "path": self.path,
            "format": self.format,
            "imports": [found._asdict() for found in self.imports],
            "unread": dict(self.unread),
            "error": self.error,
        }


@dataclass(frozen=True)
class ScanReport:
    """The verdict on every pickle of one or more checkpoints (``st.scan``).

    ``status`` is what ``strided scan`` exits with: 0 when every import of every pickle
    read is data, 1 when any is unknown or dangerous (also in a file that then failed to
    open), else 2 when a file or one of its pickles could not be read. ``verdict`` says
    the same in a word: ``"dangerous"``, ``"unknown"``, ``"unreadable"`` or ``"data"``;
    ``ok`` is ``status == 0``.
    """

    files: tuple[ScannedFile, ...]
    status: int

    @property
    def ok(self) -> bool:
        """True exactly when ``strided scan`` would exit 0."""
        return self.status == 0

    @property
    def imports(self) -> tuple[PickleImport, ...]:
        """Every file's imports, file by file, in first-use order."""
        return tuple(found for file in self.files for found in file.imports)

    @property
    def verdict(self) -> str:
        """``"dangerous"`` or ``"unknown"`` when any import is; else ``"unreadable"``
        when something could not be read; else ``"data"``."""
        verdicts = {found.verdict for found in self.imports}
        for verdict in _VERDICTS:
            if verdict in verdicts:
                return verdict
        return "unreadable" if self.status == 2 else "data"

    def to_json(self) -> str:
        """What ``strided scan --json`` prints: ``{"files": [{"path", "format",
        "imports": [{"module", "name", "verdict", "member"}], "unread", "error"}],
        "status"}``."""
        files = [file.to_dict() for file in self.files]
        return json.dumps({"files": files, "status": self.status}, indent=1, ensure_ascii=False)


def scan(path: str | os.PathLike[str], *more: str | os.PathLike[str]) -> ScanReport:
    """Judge every pickle a loader would run in each checkpoint, running none of them.

    What ``strided scan PATH...`` does: each path (a file, a folder, or an http(s) URL)
    is opened leniently, and every global its pickles name (a torch archive's
    ``data.pkl``, TorchScript's ``constants.pkl``, a distributed checkpoint's
    ``.metadata`` and items, ``.npz``/``.npy`` object arrays, a bare pickle file) is
    recorded with the member it came from and judged ``data``, ``unknown`` or
    ``dangerous``. Nothing is imported or called. A path that cannot be read does not
    raise: its error is in the report, and the other paths are still scanned.

    Args:
        path: the checkpoint to scan; ``more``: further checkpoints.

    Returns:
        A ``ScanReport``: per file the imports, unread pickles and error; the status the
        command exits with, and ``verdict``.

    Example:
        >>> import pickle, tempfile, os, strided as st
        >>> folder = tempfile.mkdtemp()
        >>> bad = os.path.join(folder, "model.pkl")
        >>> with open(bad, "wb") as file:  # a pickle that would run a shell command
        ...     file.write(b"cos\\nsystem\\n(S'echo hi'\\ntR.")
        26
        >>> report = st.scan(bad)
        >>> report.verdict, report.ok, str(report.imports[0])
        ('dangerous', False, 'os.system')
    """
    files = []
    status = 0
    for each in (path, *more):
        shown = os.fspath(each)
        found = scan_pickles(each)
        error = None if found.error is None else with_path(shown, found.error)
        files.append(
            ScannedFile(shown, found.format, found.imports, found.unread, error, found.status)
        )
        # Any unknown or dangerous import decides the status: 1 outranks 2.
        status = 1 if 1 in (status, found.status) else max(status, found.status)
    return ScanReport(tuple(files), status)
