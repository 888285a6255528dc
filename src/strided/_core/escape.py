"""One character written as an escape, shared by terminal-safe text and manifest names."""

from __future__ import annotations

__all__ = ["escape_char"]

# Control characters a file could use to drive the terminal, spelled as escapes.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(char: str, named: dict[str, str] = _NAMED) -> str:
    """One character as an escape: ``named`` first, then ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``."""
    found = named.get(char)
    if found is not None:
        return found
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
