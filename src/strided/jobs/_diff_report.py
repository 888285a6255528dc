"""What ``diff`` found: the ``DiffReport``, its JSON and the table the command prints.

The report holds the entries ``strided diff --json`` prints; its metadata texts are
shortened past ``JSON_TEXT`` characters. The table shows them shorter still
(``TABLE_TEXT``): ``table_text`` cuts a JSON-length text to the table's length exactly as
``shorten`` would have cut the full text, so one report gives both outputs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .._core.terminal import count_of, index_text, safe
from ._diff import METADATA_STATUSES, STATUSES, shorten

__all__ = ["JSON_TEXT", "TABLE_TEXT", "DiffReport", "table_text"]

JSON_TEXT = 200  # characters of a metadata value kept in the report (and --json)
TABLE_TEXT = 60  # characters of a metadata value shown in the table

Entries = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class DiffReport:
    """Two checkpoints compared (``strided.diff``): the fields ``strided diff --json`` prints.

    ``tensors``: tensor name -> ``{"status", "a", "b", ...}`` (``status`` one of
    ``identical``, ``equal``, ``differs``, ``shape differs``, ``kind differs``, ``only in
    A``, ``only in B``; ``a``/``b`` the sides' ``dtype`` and ``shape``; ``equal`` and
    ``differs`` add ``count``, ``max_abs``, ``max_ulp``; ``differs`` adds ``first``, the
    first mismatch's index and both values as text). ``unreadable``: the members skipped
    with ``skip_unreadable=True``, compared by the digests of their stored bytes (empty
    when none, and then left out of the JSON). ``metadata``: key -> ``{"status", ...}``
    (None when metadata was ignored), texts shortened past 200 characters. ``same``:
    everything compared matches. The mappings are plain JSON-like data (built fresh for
    each report); names are sorted by their UTF-8 bytes.
    """

    tensors: Entries
    unreadable: Entries = field(default_factory=dict)
    metadata: Entries | None = None
    same: bool = True

    @property
    def ok(self) -> bool:
        """True exactly when ``strided diff`` would exit 0 (the same as ``same``)."""
        return self.same

    def to_json(self) -> str:
        """The text ``strided diff --json`` prints (without the final newline): a JSON
        object of the fields, ``unreadable`` only when some member was skipped, an
        infinite ``max_abs`` written as the text ``"inf"``."""
        document: dict[str, Any] = {"tensors": self.tensors}
        if self.unreadable:
            document["unreadable"] = self.unreadable
        document.update(metadata=self.metadata, same=self.same)
        return json.dumps(_json_safe(document), indent=1, allow_nan=False)

    def lines(self, a: str = "A", b: str = "B") -> list[str]:
        """The table and verdict ``strided diff`` prints, one string per line: ``a`` and
        ``b`` are the names shown for the two checkpoints (the command shows the paths
        it was given). Names and texts from the files are escaped (``\\x1b``)."""
        rows = [("status", "name", "details")]
        rows += [(entry["status"], safe(name), _details(entry))
                 for name, entry in self.tensors.items()]  # fmt: skip
        rows += [
            (f"unreadable {entry['status']}", safe(name), _member_details(entry))
            for name, entry in self.unreadable.items()
        ]
        for key, entry in (self.metadata or {}).items():
            if entry["status"] != "equal":
                rows.append((f"metadata {entry['status']}", safe(key), _metadata_details(entry)))
        widths = [max(len(row[i]) for row in rows) for i in range(2)]
        table = [f"{status.ljust(widths[0])}  {name.ljust(widths[1])}  {details}".rstrip()
                 for status, name, details in rows]  # fmt: skip
        return [f"A: {safe(a)}", f"B: {safe(b)}", *table, self._verdict()]

    def _verdict(self) -> str:
        """``3 tensors: 3 identical; 5 metadata keys: 5 equal: tensors and metadata match``
        (skipped unreadable members, when any, counted after the tensors and judged with
        them)."""
        same_tensors = all(e["status"] in ("identical", "equal") for e in self.tensors.values())
        same_tensors &= all(e["status"] == "identical" for e in self.unreadable.values())
        found = _counts(self.tensors, STATUSES) or "none"
        parts = [f"{count_of(len(self.tensors), 'tensor')}: {found}"]
        if self.unreadable:
            found = _counts(self.unreadable, STATUSES)
            parts[0] += f"; {count_of(len(self.unreadable), 'unreadable member')}: {found}"
        if self.metadata is None:
            verdict = "tensors match" if same_tensors else "tensors differ"
            return f"{parts[0]}: {verdict} (metadata not compared)"
        same_metadata = all(e["status"] == "equal" for e in self.metadata.values())
        found = _counts(self.metadata, METADATA_STATUSES)
        parts.append(
            f"{count_of(len(self.metadata), 'metadata key')}: {found}"
            if self.metadata
            else "no metadata on either side"
        )
        if same_tensors and same_metadata:
            verdict = "tensors and metadata match"
        elif same_metadata:
            verdict = "tensors differ, metadata matches"
        elif same_tensors:
            verdict = "metadata differs, tensors match"
        else:
            verdict = "tensors and metadata differ"
        return f"{'; '.join(parts)}: {verdict}"


def _counts(entries: Entries, statuses: tuple[str, ...]) -> str:
    """``3 identical, 1 differs``: how many entries have each status, in ``statuses`` order."""
    counts = dict.fromkeys(statuses, 0)
    for entry in entries.values():
        counts[entry["status"]] += 1
    return ", ".join(f"{count} {status}" for status, count in counts.items() if count)


def table_text(stored: str | None, at: int = 0) -> str | None:
    """``shorten(text, TABLE_TEXT, at)`` given only ``stored = shorten(text, JSON_TEXT, at)``.

    A stored text of at most ``JSON_TEXT`` characters is the whole text. A longer one is
    a window of ``JSON_TEXT`` characters (``…`` marking a cut at either end) and the full
    length; the table's window, ``TABLE_TEXT`` characters from a little before ``at``,
    always lies inside it (both windows start at most a quarter of their length before
    ``at`` and end no later than the text), so it is cut from there.
    """
    if stored is None or len(stored) <= JSON_TEXT:
        return stored if stored is None else shorten(stored, TABLE_TEXT, at)
    body, _, note = stored.rpartition(" (")
    length = int(note.split(" ", 1)[0].replace(",", ""))
    start = max(0, min(at - JSON_TEXT // 4, length - JSON_TEXT))
    body = body[1:] if start else body
    body = body[:-1] if start + JSON_TEXT < length else body
    begin = max(0, min(at - TABLE_TEXT // 4, length - TABLE_TEXT))
    window = body[begin - start : begin - start + TABLE_TEXT]
    head = "…" if begin else ""
    tail = "…" if begin + TABLE_TEXT < length else ""
    return f"{head}{window}{tail} ({length:,} characters)"


def _json_safe(value: Any) -> Any:
    """Strict JSON: an infinite ``max_abs`` is written as the text ``"inf"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value


def _side(entry: dict[str, Any], key: str) -> str:
    side = entry[key]
    return f"{safe(side['dtype'])} {index_text(side['shape'])}"


def _details(entry: dict[str, Any]) -> str:
    status = entry["status"]
    if status in ("only in A", "identical"):
        return _side(entry, "a")
    if status == "only in B":
        return _side(entry, "b")
    sides = (
        _side(entry, "a")
        if _side(entry, "a") == _side(entry, "b")
        else (f"{_side(entry, 'a')} vs {_side(entry, 'b')}")
    )
    if status in ("shape differs", "kind differs"):
        return sides
    parts = [sides]
    if status == "differs":
        numel = 1
        for dim in entry["a"]["shape"]:
            numel *= dim
        first = entry["first"]
        parts.append(f"{entry['count']:,} of {numel:,} differ")
        parts.append(f"first {index_text(first['index'])}: {first['a']} vs {first['b']}")
    if "max_abs" in entry:
        parts.append(f"max_abs {entry['max_abs']!r}")
    if "max_ulp" in entry:
        parts.append(f"max_ulp {entry['max_ulp']}")
    return "; ".join(parts)


def _member_details(entry: dict[str, Any]) -> str:
    """``stored bytes sha256 0123… vs 4567…``, or a tensor's dtype and shape."""
    sides = []
    for key in ("a", "b"):
        side = entry.get(key)
        if side is None:
            continue
        if "digest" in side:
            sides.append(f"sha256 {side['digest'][:16]}…")
        else:
            sides.append(f"tensor {safe(side['dtype'])} {index_text(side['shape'])}")
    shown = sides[:1] if entry["status"] == "identical" else sides
    return "stored bytes " + " vs ".join(shown)


def _quoted(text: str | None) -> str:
    """A metadata text of a table entry as a quoted string.

    Only a shortened text is longer than the table's limit, and it ends with the note
    ``(N characters)``, which stays outside the quotes.
    """
    if text is None:
        return "(none)"
    body, note = text, ""
    if len(text) > TABLE_TEXT:
        body, _, rest = text.rpartition(" (")
        note = f" ({rest}"
    return safe(json.dumps(body, ensure_ascii=False)) + note


def _metadata_details(entry: dict[str, Any]) -> str:
    """One metadata row's details, its texts cut to the table's length (``table_text``)."""
    status = entry["status"]
    if status == "only in A":
        return _quoted(table_text(entry["a"]))
    if status == "only in B":
        return _quoted(table_text(entry["b"]))
    parts = []
    if "types" in entry:
        parts.append(f"{safe(entry['types']['a'])} vs {safe(entry['types']['b'])}")
    if "items" in entry:
        items, first = entry["items"], entry["first"]
        parts.append(f"{items['a']:,} vs {items['b']:,} items")
        parts.append(
            f"first difference at [{entry['index']}]: {_quoted(table_text(first['a']))} vs "
            f"{_quoted(table_text(first['b']))}"
        )
    else:
        text_a = table_text(entry["a"], entry["offset"])
        text_b = table_text(entry["b"], entry["offset"])
        parts.append(f"{_quoted(text_a)} vs {_quoted(text_b)}")
        assert text_a is not None and text_b is not None
        if len(text_a) > TABLE_TEXT or len(text_b) > TABLE_TEXT:
            parts.append(f"first difference at character {entry['offset']:,}")
    return "; ".join(parts)
