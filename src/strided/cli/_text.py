"""Text for people: terminal-safe strings, sizes and one-line error messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.terminal import escape_char, index_text, one_line, safe, with_path

if TYPE_CHECKING:
    from ..jobs._pool import JobError

__all__ = [
    "byte_size",
    "count_text",
    "escape_char",
    "index_text",
    "job_error",
    "one_line",
    "safe",
    "tensor_error",
    "with_path",
]


def tensor_error(path: str, name: str, error: BaseException) -> str:
    """One line naming the file and the tensor once each, whatever the reader said.

    Readers often name both already: ``path: tensor 'w': ...`` is kept as it is, and so
    is a message naming a file of its own and the tensor (``folder/a.safetensors:
    tensor 'w': ...`` for a shard of the folder ``path``, or one side of a comparison):
    that file is the more precise name. Otherwise the missing names are put in front.
    """
    text = one_line(error)
    shown = safe(path)
    label = one_line(Exception(f"tensor {name!r}"))
    if text.startswith(shown + ": "):
        text = text[len(shown) + 2 :]
    elif f": {label}: " in text:
        return text
    if not text.startswith(label):
        text = f"{label}: {text}"
    return f"{shown}: {text}"


def job_error(error: JobError) -> str:
    """One line for a failed job task: the file and the tensor named once each."""
    return tensor_error(error.path, error.name, Exception(error.message))


def count_text(count: int) -> str:
    """A count for people: ``1,024`` below 100,000, else ``11.7M`` style (K, M, B, T)."""
    if count < 100_000:
        return f"{count:,}"
    value = float(count)
    for unit in ("K", "M", "B", "T"):
        value /= 1000
        if value < 999.95 or unit == "T":
            return f"{value:.1f}{unit}"
    return f"{count:,}"  # pragma: no cover


def byte_size(count: int) -> str:
    """``count`` bytes in binary units (``512 B``, ``1.5 KiB`` ... ``GiB``)."""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"
