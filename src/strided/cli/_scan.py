"""``strided scan PATH...``: the globals each checkpoint's pickles name, with verdicts.

Per file, the imports the way the Hugging Face Hub lists "Detected Pickle imports":
``model.pt: pytorch, 7 imports (5 data, 1 unknown, 1 dangerous)``, then one line per
``module.name`` in first-use order with its verdict (``data``; ``unknown``;
``DANGEROUS``). The list is the interpreter's own record of what it resolved (a name
assembled through the memo or the stack shows as what it resolved to), taken from a
lenient open, so a file strict mode refuses is listed whole; nothing it names is ever
imported or run. A format without pickles (safetensors, GGUF, NumPy, JSON) names
nothing and says so.

Exit status: 0 when every import of every file is ``data``, 1 when any is ``unknown``
or ``dangerous``, 2 when a file cannot be read (a one-line error on stderr; the other
files are still scanned).

``--json`` prints ``{"files": [{"path", "format", "imports": [{"module", "name",
"verdict"}], "error"}], "status"}`` (``format`` and ``imports`` null for an unreadable
file, ``error`` null otherwise).

The parser is in ``_commands``; this module is imported when the command runs (the
reason the command line's other modules give too: ``--help`` answers at once).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .._core.errors import DataError
from ..jobs._checkpoint import PickleImport, open_checkpoint
from ._text import safe, with_path

__all__ = ["import_summary", "run_scan"]

_SHOWN = 3  # names shown per verdict in the one-line summary
_ORDER = ("data", "unknown", "dangerous")
_LABEL = {"data": "data", "unknown": "unknown", "dangerous": "DANGEROUS"}


def run_scan(args: argparse.Namespace) -> int:
    """Scan every path given; print the report; return the exit status (0, 1 or 2)."""
    files: list[dict[str, Any]] = []
    status = 0
    for path in args.path:
        try:
            with open_checkpoint(path, lenient=True) as checkpoint:
                kind, imports = checkpoint.format, checkpoint.imports
        except (DataError, OSError, UnicodeError) as error:
            # A file that cannot be read stops only its own scan.
            message = with_path(path, error)
            print(f"strided: {message}", file=sys.stderr)
            files.append({"path": path, "format": None, "imports": None, "error": message})
            status = 2
            continue
        if any(found.verdict != "data" for found in imports):
            status = max(status, 1)
        files.append({"path": path, "format": kind, "imports": imports, "error": None})
        if not args.json:
            _print_file(path, kind, imports)
    if args.json:
        for entry in files:
            if entry["imports"] is not None:
                entry["imports"] = [found._asdict() for found in entry["imports"]]
        print(json.dumps({"files": files, "status": status}, indent=1, ensure_ascii=False))
    return status


def _print_file(path: str, kind: str, imports: Sequence[PickleImport]) -> None:
    if not imports:
        print(f"{safe(path)}: {kind}, no pickle imports")
        return
    counts = _counts(imports)
    told = ", ".join(f"{counts[verdict]} {verdict}" for verdict in _ORDER if counts[verdict])
    noun = "import" if len(imports) == 1 else "imports"
    print(f"{safe(path)}: {kind}, {len(imports):,} {noun} ({told})")
    names = [safe(str(found)) for found in imports]
    width = max(len(name) for name in names)
    for name, found in zip(names, imports, strict=True):
        print(f"  {name.ljust(width)}  {_LABEL[found.verdict]}")


def _counts(imports: Sequence[PickleImport]) -> dict[str, int]:
    counts = dict.fromkeys(_ORDER, 0)
    for found in imports:
        counts[found.verdict] += 1
    return counts


def import_summary(imports: Sequence[PickleImport]) -> str:
    """One line: ``imports: 4 data, 1 unknown (mymodel.Net)``, the names that are not
    data shown (at most three per verdict), dangerous ones in capitals."""
    counts = _counts(imports)
    parts = []
    for verdict in _ORDER:
        if not counts[verdict]:
            continue
        text = f"{counts[verdict]} {_LABEL[verdict]}"
        if verdict != "data":
            names = [safe(str(found)) for found in imports if found.verdict == verdict]
            more = ", ..." if len(names) > _SHOWN else ""
            text += f" ({', '.join(names[:_SHOWN])}{more})"
        parts.append(text)
    return "imports: " + (", ".join(parts) if parts else "none")
