"""Text for people that every layer may need: terminal-safe strings, indices, counts
and one-line error messages.

Reports built by the jobs layer (``DiffReport.lines``, ``st.scan``'s errors, manifest
names) carry the same text the command line prints, so these live below both.
"""

from __future__ import annotations

import os

__all__ = ["count_of", "escape_char", "index_text", "one_line", "safe", "with_path"]

# Control characters a file could use to drive the terminal, spelled as escapes.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def safe(text: str) -> str:
    """``text`` with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``).

    Names and metadata come from files written by strangers: printed raw, an escape
    sequence could recolour the terminal, retitle its window, clear the screen or, with
    a carriage return, overwrite what was printed before. Printable text, spaces and a
    backslash are kept as they are.
    """
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else escape_char(char) for char in text)


def escape_char(char: str, named: dict[str, str] = _NAMED) -> str:
    """One character as an escape: ``named`` first, then ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``."""
    found = named.get(char)
    if found is not None:
        return found
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def index_text(index: object) -> str:
    """A multi-index as ``[0, 3]`` (``-`` for None)."""
    if index is None:
        return "-"
    return "[" + ", ".join(str(int(i)) for i in index) + "]"  # type: ignore[attr-defined]


def count_of(count: int, noun: str) -> str:
    """``1 tensor``, ``2 tensors``, ``1,024 tensors``: a count with its noun agreeing."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def one_line(error: BaseException) -> str:
    """The error's message on one terminal-safe line (an OSError as ``file: reason``)."""
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
        if error.filename is not None:
            text = f"{os.fsdecode(error.filename)}: {text}"
    return safe(" ".join(text.split()))


def with_path(path: str, error: BaseException) -> str:
    """One line naming ``path`` once (readers already start their messages with it)."""
    text = one_line(error)
    shown = safe(path)
    return text if text.startswith(shown) else f"{shown}: {text}"
