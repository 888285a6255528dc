"""Pickles recorded only for what they name, never read as values: NumPy object arrays,
and files no format recognizes.

``np.save`` writes an object array (``dtype=object``) as a pickle after the ``.npy``
header, and ``np.load(allow_pickle=True)`` runs it: each element may name any global.
strided cannot hold such an array (the member is unreadable, the ``.npy`` an error), but
the globals its pickle names belong in the open's import record, so ``strided scan``
judges them. The pickle is walked with an empty allow-list and lenient records, so that
every global in it, NumPy's own included, is resolved as an inert record (never
imported or called) and the whole pickle is read; the verdicts still use the strict
allow-list, where NumPy's array globals are data.

A file that no row of the format table accepts may still be a pickle that
``torch.load(weights_only=False)`` runs (protocols 0 and 1 have no marker byte):
``record_unrecognized`` walks it the same way for a scan.
"""

from __future__ import annotations

import os

from ..._core.errors import DataError, FormatError
from .._budget import ParseBudget
from .._common import file_size, map_file, open_regular
from .._detect import HEAD_BYTES, matching
from ..npy import _literal as literal
from ._globals import GLOBALS
from ._machine import interpret

__all__ = ["object_pickle_start", "record_pickle", "record_unrecognized"]

_OBJECT_DESCRS = frozenset({"|O", "<O", ">O", "=O"})


def object_pickle_start(head: bytes) -> int | None:
    """Where the pickle of an object-array ``.npy`` begins (its data offset), given the
    first bytes ``head``; None when they are not the header of an object array (a
    malformed header is left to the reader, which names what is wrong)."""
    try:
        version = (head[6], head[7])
        width = 2 if version == (1, 0) else 4
        start = 8 + width + int.from_bytes(head[8 : 8 + width], "little")
        if start > len(head):
            return None
        parsed = literal(head[8 + width : start].decode("ascii"), version, "header")
    except (DataError, UnicodeError, IndexError):
        return None
    descr = parsed.get("descr") if type(parsed) is dict else None
    if type(descr) is not str or descr not in _OBJECT_DESCRS:
        return None
    return start


def record_pickle(
    data: memoryview, label: str, where: str, budget: ParseBudget, known: bool = True
) -> None:
    """Run the pickle ``data`` as inert records, recording every global it names in the
    open's import log under ``label``; one that is malformed is noted as unread when it
    is ``known`` to be a pickle (what it named before the fault stays recorded either
    way). LimitError when the budget runs out."""
    imports = budget.imports.member(label, GLOBALS)
    try:
        interpret(data, 0, where, None, budget=budget, table={}, lenient=True, imports=imports)
    except FormatError as error:
        if known:
            budget.imports.skipped(label, str(error))


def record_unrecognized(where: str, budget: ParseBudget) -> bool:
    """Walk the file ``where`` as a pickle when no format recognizes it, recording what
    it names under its file name (a file that is no pickle records nothing, or what
    came before its fault); False, doing nothing, for a folder, an empty file or a file
    some format accepts. An OSError reading it is raised unchanged."""
    if os.path.isdir(where):
        return False
    with open_regular(where) as file:
        size = file_size(file)
        if matching(file.read(HEAD_BYTES), size) is not None or size == 0:
            return False
        raw = map_file(file, size, where)
    data = memoryview(raw)  # type: ignore[arg-type]
    # Not known to be a pickle: a fault means it is none, and the open's error stands.
    record_pickle(data, os.path.basename(where), f"{where}: pickle", budget, known=False)
    return True
