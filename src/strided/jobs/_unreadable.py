"""Members a checkpoint holds but strided cannot read, as whole-checkpoint jobs see them.

An ``.npz`` object or string array, a distributed checkpoint's item that is not plain
data: ``Checkpoint.unreadable`` lists them. A job that covers a whole checkpoint
(``hash``, ``verify``, ``diff``, ``convert``, ``Checkpoint.digest``) never passes over
them in silence: it refuses (``unreadable_error``), or, told to skip them, goes on and
records the digest of each one's stored bytes.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

from .._core.errors import FormatError
from .._core.limits import MAX_UNREADABLE_NAMED
from .._kernels.digest import sort_key

__all__ = ["selected_unreadable", "unreadable_error"]


def unreadable_error(path: str, unreadable: Mapping[str, str]) -> FormatError:
    """The refusal of a job whose checkpoint holds members it cannot read: names the
    first few (sorted by UTF-8 bytes) with their reasons, counts the rest, and says how
    to go on."""
    names = sorted(unreadable, key=sort_key)
    named = names[:MAX_UNREADABLE_NAMED]
    shown = "; ".join(f"{name[:80]!r} ({unreadable[name]})" for name in named)
    more = len(names) - MAX_UNREADABLE_NAMED
    rest = f"; and {more} more" if more > 0 else ""
    noun = "member" if len(names) == 1 else "members"
    return FormatError(
        f"{path}: {len(names)} {noun} strided cannot read: {shown}{rest}; pass "
        "--skip-unreadable (skip_unreadable=True) to go on without them"
    )


def selected_unreadable(unreadable: Mapping[str, str], glob: str = "*") -> dict[str, str]:
    """The unreadable members a job selecting tensors by ``glob`` covers, sorted by
    their names' UTF-8 bytes (the order every job reports them in)."""
    names = sorted((name for name in unreadable if fnmatch.fnmatchcase(name, glob)), key=sort_key)
    return {name: unreadable[name] for name in names}
