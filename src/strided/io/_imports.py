"""The record of every global an open's pickles name, by the member each came from.

One ``ImportLog`` belongs to each open (it travels on the open's ``ParseBudget``, the
one object every reader is handed). A reader about to run a pickle asks ``member(label,
table)`` for the ordered set the interpreter fills as it resolves each ``GLOBAL`` /
``STACK_GLOBAL`` / ``INST``; because it is filled as the run goes, the log still holds
what was named when the pickle, or the whole open, fails afterwards. That is what lets
``strided scan`` report a dangerous global in a file strided refuses to open.

``label`` names the pickle inside the checkpoint: a zip member (``archive/data.pkl``),
a ``.npz`` member (``x.npy``), a distributed checkpoint's ``.metadata`` or item
(``__0_0.distcp:optim.state``), or the file itself for a bare pickle. ``table`` is the
allow-list the pickle is read with: what it holds is data (``pickle._verdicts``).
A pickle the open leaves unread (too large to inflate for a scan) is noted with
``skipped(label, reason)``, so a scan never takes silence for safety.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

__all__ = ["ImportLog"]


class ImportLog:
    """Globals named per pickle member, in first-use order, and pickles left unread."""

    __slots__ = ("_members", "unread")

    def __init__(self) -> None:
        self._members: dict[str, tuple[Mapping[str, object], dict[tuple[str, str], None]]] = {}
        # label -> why its pickle was not read (for a scan: not judged, so not clean)
        self.unread: dict[str, str] = {}

    def member(self, label: str, table: Mapping[str, object]) -> dict[tuple[str, str], None]:
        """The ordered set the interpreter fills for the pickle ``label`` (one per label:
        several pickles of one member, a legacy ``torch.save`` stream, share it)."""
        found = self._members.get(label)
        if found is None:
            found = (table, {})
            self._members[label] = found
        return found[1]

    def skipped(self, label: str, reason: str) -> None:
        """Note that the pickle ``label`` was not read, and why."""
        self.unread[label] = reason

    def seen(self) -> bool:
        """Whether any pickle was met at all (read, named something, or left unread)."""
        return bool(self._members or self.unread)

    def entries(self) -> Iterator[tuple[str, str, str, Mapping[str, object]]]:
        """``(module, name, member, table)`` for every global, member by member."""
        for label, (table, named) in self._members.items():
            for module, name in named:
                yield module, name, label, table
