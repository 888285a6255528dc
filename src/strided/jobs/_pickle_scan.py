"""What ``strided scan`` learns of one path: every global its pickles name, judged.

The path is opened leniently (unknown globals become inert records, so a whole pickled
model is listed whole) with a budget whose import log survives a failed open: a file
strided refuses after its pickle named ``os.system`` is still reported as dangerous.
Nothing any pickle names is imported or called.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .._core.errors import DataError, FormatError
from .._core.memory import guard_function
from ..io._budget import ParseBudget
from ..io._common import label
from ..io._http import is_url
from ..io._object_pickles import record_unrecognized
from ..io._pickle_verdicts import PickleImport, judge_log
from ._checkpoint import open_checkpoint, open_local

__all__ = ["PickleScan", "scan_pickles"]


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
