"""The pickles inside NumPy files: object arrays, recorded for what they name, never read
as values.

``np.save`` writes an object array (``dtype=object``) as a pickle after the ``.npy``
header, and ``np.load(allow_pickle=True)`` runs it: each element may name any global.
strided cannot hold such an array (the member is unreadable, the ``.npy`` an error), but
the globals its pickle names belong in the open's import record, so ``strided scan``
judges them. The pickle is walked with an empty allow-list and lenient records, so that
every global in it, NumPy's own included, is resolved as an inert record (never
imported or called) and the whole pickle is read; the verdicts still use the strict
allow-list, where NumPy's array globals are data.
"""

from __future__ import annotations

from .._core.errors import DataError, FormatError
from ._budget import ParseBudget
from ._pickle import interpret
from ._pickle_globals import GLOBALS
from .npy import _literal as literal

__all__ = ["object_pickle_start", "record_object_pickle"]

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


def record_object_pickle(data: memoryview, label: str, where: str, budget: ParseBudget) -> None:
    """Run the pickle ``data`` as inert records, recording every global it names in the
    open's import log under ``label``; one that is malformed is noted as unread (what
    it named before the fault stays recorded). LimitError when the budget runs out."""
    imports = budget.imports.member(label, GLOBALS)
    try:
        interpret(data, 0, where, None, budget=budget, table={}, lenient=True, imports=imports)
    except FormatError as error:
        budget.imports.skipped(label, str(error))
