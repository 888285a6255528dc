"""``strided scan PATH...``: the globals each checkpoint's pickles name, with verdicts.

Per file, the imports the way the Hugging Face Hub lists "Detected Pickle imports":
``model.pt: pytorch, 7 imports (5 data, 1 unknown, 1 dangerous)``, then one line per
``module.name`` with its verdict (``data``; ``unknown``; ``DANGEROUS``) and the pickle
it comes from (``archive/data.pkl``; an ``.npz`` member; a distributed checkpoint's
``.metadata`` or item), pickle by pickle in first-use order. The list is the
interpreter's own record of what it resolved (a name assembled through the memo or the
stack shows as what it resolved to), taken from a lenient open, so a file strict mode
refuses is listed whole; nothing it names is ever imported or run. A format without
pickles (safetensors, GGUF, plain NumPy, JSON) names nothing and says so.

Exit status: 0 when every import of every pickle read is ``data``; 1 when any is
``unknown`` or ``dangerous``, also in a file whose open then failed (its imports are
printed, the error on stderr); 2 when a file or one of its pickles could not be read
and nothing unknown or dangerous was seen (a one-line error on stderr; the other files
are still scanned).

``--json`` prints ``{"files": [{"path", "format", "imports": [{"module", "name",
"verdict", "member"}], "unread", "error"}], "status"}`` (``format`` null when the file
could not be opened, ``imports`` what was named before that; ``unread`` maps a pickle
left unread to why; ``error`` null when the open succeeded).

The parser is in ``_commands``; this module is imported when the command runs (the
reason the command line's other modules give too: ``--help`` answers at once).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..jobs._checkpoint import PickleImport
from ..jobs._pickle_scan import scan
from ._text import safe

__all__ = ["import_summary", "run_scan"]

_SHOWN = 3  # names shown per verdict in the one-line summary
_ORDER = ("data", "unknown", "dangerous")
_LABEL = {"data": "data", "unknown": "unknown", "dangerous": "DANGEROUS"}


def run_scan(args: argparse.Namespace) -> int:
    """Scan every path given (``st.scan``); print the report; return its status."""
    report = scan(*args.path)
    for file in report.files:
        for member, reason in file.unread.items():
            print(
                f"strided: {safe(file.path)}: {safe(member)}: not read: {safe(reason)}",
                file=sys.stderr,
            )
        if file.error is not None:
            # A file that cannot be read stops only its own scan.
            print(f"strided: {file.error}", file=sys.stderr)
        if not args.json and (file.error is None or file.imports):
            _print_file(file.path, file.format or "unreadable", file.imports)
    if args.json:
        print(report.to_json())
    return report.status


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
    labels = [_LABEL[found.verdict] for found in imports]
    wide = max(len(text) for text in labels)
    for name, shown, found in zip(names, labels, imports, strict=True):
        print(f"  {name.ljust(width)}  {shown.ljust(wide)}  {safe(found.member)}".rstrip())


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
