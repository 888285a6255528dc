"""A minimal progress bar on stderr for long scans (drawn only on a terminal)."""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType

__all__ = ["Progress"]


class Progress:
    """Reports ``done / total`` bytes at most ten times a second.

    Drawn only when stderr is a terminal (or ``STRIDED_PROGRESS=1``), so pipes and logs
    stay clean; a bar that is never drawn costs one comparison per update.
    """

    def __init__(self, total: int, label: str) -> None:
        self.total = max(total, 1)
        self.label = label
        self.enabled = os.environ.get("STRIDED_PROGRESS") == "1" or sys.stderr.isatty()
        self._last = 0.0
        self._drawn = False

    def update(self, done: int) -> None:
        """Set the bytes done so far (absolute, not an increment)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < self.total:
            return
        self._last = now
        fraction = min(done / self.total, 1.0)
        filled = int(fraction * 30)
        bar = "#" * filled + "-" * (30 - filled)
        sys.stderr.write(f"\r{self.label} [{bar}] {fraction:6.1%}")
        sys.stderr.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line (if one was drawn)."""
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Ends the bar's line on errors too, so a message never lands on the bar.
        self.close()
