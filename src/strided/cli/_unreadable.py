"""``--skip-unreadable``: what ``hash``, ``verify``, ``diff`` and ``convert`` do with the
members a checkpoint holds but strided cannot read (an ``.npz`` object or string array,
a distributed checkpoint's item that is not plain data).

Without the option such a member stops the command before anything is read or written
(exit 1, one line naming the members); with it the command goes on, names each skipped
member on stderr, and records the digest of its stored bytes where the command records
digests.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..jobs._unreadable import selected_unreadable, unreadable_error
from ._text import safe, with_path
from ._verify import CommandFailure

if TYPE_CHECKING:
    from ..jobs._checkpoint import Checkpoint

__all__ = ["UnreadableRefused", "skipped_members"]


class UnreadableRefused(CommandFailure):
    """A checkpoint holds members the command cannot read and ``--skip-unreadable`` was
    not given: exit 1 in every command (``diff`` included: nothing was compared)."""


def skipped_members(
    checkpoint: Checkpoint, path: str, skip: bool, glob: str = "*"
) -> dict[str, str]:
    """The unreadable members (``name -> reason``, sorted by UTF-8 bytes) the command
    covers: those matching ``glob``. Without ``skip`` any is an ``UnreadableRefused``
    naming them; with it each is named on stderr and returned."""
    found = selected_unreadable(checkpoint.unreadable, glob)
    if found and not skip:
        raise UnreadableRefused(with_path(path, unreadable_error(path, found)))
    for name, reason in found.items():
        print(
            f"strided: {safe(path)}: skipped unreadable member {safe(repr(name))}: {safe(reason)}",
            file=sys.stderr,
        )
    return found
