"""The one parse budget of an open: what reading headers and pickles may build.

Opening a checkpoint builds names, metadata and parsed objects from bytes a stranger
wrote. Each reader charges what it builds to the open's one ``ParseBudget``: at most
``BUDGET_BASE`` (64 MiB) plus ``BUDGET_FACTOR`` (16) times the bytes of every header,
index, central directory and pickle the open reads, whatever sizes the file claims. A
charge past the allowance is a LimitError naming the file and what was being built, so
a 264 KB pickle can never build a gigabyte of dotted names.

Charges are estimates of Python memory in bytes, made *before* the object is built:
``charge_text`` for a string of ``n`` characters, ``charge_items`` for a container of
``n`` entries. The estimates are deliberately generous, so the real footprint stays
under the allowance. A text costs what CPython allocates for it: one byte a character
for ASCII and latin-1 text, two for text of the Basic Multilingual Plane, four once any
character lies beyond it (``char_bytes``), so 16,384 emoji cost 64 KiB, not 16 KiB.
"""

from __future__ import annotations

import sys

from .._core.errors import LimitError
from .._core.limits import BUDGET_BASE, BUDGET_FACTOR
from ._imports import ImportLog

__all__ = ["ITEM_BYTES", "OBJECT_BYTES", "TEXT_BYTES", "ParseBudget", "char_bytes", "text_bytes"]

TEXT_BYTES = 64  # a str object's fixed cost, beside its characters
ITEM_BYTES = 16  # one slot of a list/dict/tuple (a pointer, plus a dict's share)
OBJECT_BYTES = 64  # a small Python object (an int, a float, a record)
# The header of a str that is not ASCII (its one latin-1 character and the final NUL
# take a byte each); its characters then take 1, 2 or 4 bytes each.
_COMPACT_HEAD = sys.getsizeof("\u00e9") - 2


def char_bytes(*texts: str) -> int:
    """The bytes CPython stores each character of a text joined from ``texts`` in.

    1 for ASCII and latin-1, 2 for the Basic Multilingual Plane, 4 beyond it: a str
    takes the width of its widest character. Read off each str's own size in constant
    time (the same long text may be named many times, and a scan for its widest
    character each time would cost time quadratic in the file). A text that has cached
    its UTF-8 form counts that copy too, so its width can read high: the charge is then
    generous, never short.
    """
    widest = 1
    for text in texts:
        if not text.isascii():  # a flag check
            kind = (sys.getsizeof(text) - _COMPACT_HEAD) // (len(text) + 1)
            widest = max(widest, 4 if kind >= 4 else 2 if kind >= 2 else 1)
    return widest


def text_bytes(length: int, *texts: str) -> int:
    """What a str of ``length`` characters made from ``texts`` costs (see ``char_bytes``)."""
    return TEXT_BYTES + length * char_bytes(*texts)


class ParseBudget:
    """What one open may still build, in bytes; shared by every reader of the open.

    ``grant(n)`` adds ``BUDGET_FACTOR * n`` for ``n`` header/pickle bytes the open
    reads; ``charge(n, what)`` spends ``n`` bytes and raises LimitError (naming
    ``where`` and ``what``) once the total spent passes the allowance. Nothing is
    refunded: the budget bounds everything an open builds, also what it drops again.
    ``imports`` is the open's ``ImportLog`` (what its pickles name, per member), kept
    here because this is the one object every reader of the open is handed.
    """

    __slots__ = ("imports", "limit", "spent", "where")

    def __init__(self, where: str, base: int = BUDGET_BASE) -> None:
        self.where = where
        self.limit = base
        self.spent = 0
        self.imports = ImportLog()

    def grant(self, header_bytes: int) -> None:
        """Allow ``BUDGET_FACTOR`` bytes more for each of ``header_bytes`` bytes read."""
        self.limit += BUDGET_FACTOR * max(0, header_bytes)

    def charge(self, nbytes: int, what: str) -> None:
        """Spend ``nbytes``; LimitError when the open's allowance is exceeded."""
        self.spent += nbytes
        if self.spent > self.limit:
            raise LimitError(
                f"{self.where}: {what} would build more than the {self.limit} bytes one "
                f"open may build (64 MiB + {BUDGET_FACTOR} x the header and pickle bytes read)"
            )

    def charge_text(self, length: int, what: str) -> None:
        """Spend what a string of ``length`` characters costs."""
        self.charge(TEXT_BYTES + length, what)

    def charge_items(self, count: int, what: str) -> None:
        """Spend what ``count`` container slots cost."""
        self.charge(ITEM_BYTES * count, what)

    def __repr__(self) -> str:
        return f"ParseBudget({self.where!r}, spent={self.spent}, limit={self.limit})"
