"""A pickle program read as data: the stack machine behind the PyTorch reader.

A ``torch.save`` file holds a pickle, which is a program for a stack machine; running
it with Python's unpickler imports and calls whatever it names. This machine runs the
opcodes itself (their handlers are in ``_ops``) and never imports, looks up or
calls anything a file names. It builds only plain data -- ``dict``,
``collections.OrderedDict``, ``list``, ``tuple``, ``str``, ``bytes``, ``int``,
``float``, ``bool``, ``None`` and ordered sets -- plus the records of ``_data``
(dict keys other than str become ``DataKey``s), ``_numpy`` (NumPy arrays and
dtypes) and ``_builtins`` (dict-like objects held as dicts), and knows only the
closed table of globals in ``_globals``, each understood as data.

A persistent id may only be a storage tuple ``('storage', type, key, location, numel)``
(the legacy format adds a ``None``); it becomes a ``StorageRef`` whose bytes the reader
finds. Every other global, any call of something else, ``BUILD`` on anything but an
``OrderedDict``, a parameter, a NumPy array or dtype or a dict-like object,
``NEWOBJ`` of anything but a dict-like class, ``INST``/``OBJ``, extension codes,
out-of-band buffers, a dict key set twice (or two keys Python counts equal) and unknown
opcodes are FormatErrors naming them and the byte where they are.

Caps hold before anything grows: opcodes run in total (each pushes at most one value, so
``DUP``/``GET`` loops that build huge shared structures stop early), memo entries, open
marks, and the bytes that ``_codecs.encode`` may make (no more than the pickle holds);
every length is checked against the bytes remaining. What the machine builds (texts,
containers and their slots, memo entries, records) is charged to the open's
``ParseBudget``, which grows by ``BUDGET_FACTOR`` bytes for each pickle byte read.

Time is linear in the bytes read: a protocol 0 text argument is found by scanning for
its newline in place (never copying the rest of the input), nothing recurses on the
input's structure, and no dict or set is keyed by a value whose hash the file chooses
(see ``_data``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from typing import Any

from ..._core.errors import DataError, FormatError, LimitError
from ..._core.limits import MAX_PICKLE_LINE as _MAX_LINE
from ..._core.limits import MAX_PICKLE_MARKS as MAX_MARKS
from ..._core.limits import MAX_PICKLE_MEMO as MAX_MEMO
from ..._core.limits import MAX_PICKLE_OPCODES as MAX_OPCODES
from .._budget import OBJECT_BYTES, ParseBudget
from ._data import DataKey, Global, StorageRef, data_key, describe, key_bytes
from ._globals import GLOBALS
from ._ops import HANDLERS, NAMES, REFUSED, stop

__all__ = ["MAX_MARKS", "MAX_MEMO", "MAX_OPCODES", "Machine", "interpret"]

_MEMO_INDICES = 1 << 32  # memo indices (binary opcodes cannot spell more)
# Charges are added up and settled with the budget once they reach this many bytes (and
# at the end): the budget is checked at most this late, and the hot loop stays cheap.
_SETTLE_BYTES = 1 << 16
_NEWLINE = re.compile(b"\n")
_MISSING = object()


class Machine:
    """One run of one pickle: its own stack, mark stack, memo and caps.

    ``budget`` is the open's parse budget; ``granted`` is how far the pickle's bytes
    have been granted to it, ``owed`` what has been charged but not yet settled.
    """

    __slots__ = (
        "at",
        "budget",
        "bytes_budget",
        "data",
        "end",
        "frame_end",
        "granted",
        "imports",
        "label",
        "lenient",
        "limit",
        "memo",
        "metastack",
        "owed",
        "pos",
        "protocol",
        "stack",
        "storages",
        "table",
        "where",
    )

    def __init__(
        self,
        data: memoryview,
        start: int,
        where: str,
        storages: dict[str, StorageRef] | None,
        budget: ParseBudget,
        table: Mapping[str, Global] = GLOBALS,
        lenient: bool = False,
        imports: dict[tuple[str, str], None] | None = None,
    ) -> None:
        self.data = data
        self.table = table
        self.lenient = lenient
        self.imports: dict[tuple[str, str], None] = {} if imports is None else imports
        self.protocol = 0  # until a PROTO opcode says otherwise (protocols 0 and 1 have none)
        self.pos = self.at = self.granted = start
        self.owed = 0
        self.end = self.limit = len(data)  # ``limit``: the end of the current frame, if any
        self.frame_end = -1
        self.where = where
        self.storages = storages
        self.budget = budget
        # How charges name this pickle after the budget's own label (usually the file).
        self.label = where.removeprefix(budget.where).lstrip(": ") or "pickle"
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.bytes_budget = len(data) - start

    def fail(self, message: str) -> FormatError:
        name = NAMES.get(self.data[self.at], "?") if self.at < self.end else "end"
        return FormatError(f"{self.where}: pickle byte {self.at}, {name}: {message}")

    def spend(self, nbytes: int, what: str) -> None:
        """Charge ``nbytes`` for ``what``, settled with the budget every 64 KiB."""
        owed = self.owed + nbytes
        if owed < _SETTLE_BYTES:
            self.owed = owed
        else:
            self.settle(owed, what)

    def settle(self, owed: int, what: str) -> None:
        """Grant the pickle bytes read so far, then charge ``owed`` (named by ``what``)."""
        self.owed = 0
        self.budget.grant(self.pos - self.granted)
        self.granted = self.pos
        self.budget.charge(owed, f"{self.label} byte {self.at}: {what}")

    def take(self, count: int) -> int:
        """Claim ``count`` bytes at the current position; returns where they start.

        Inside a frame a read may not cross the frame's end (Python's unpickler refuses
        that too); a read that starts exactly at the end leaves the frame.
        """
        pos = self.pos
        if count > self.limit - pos:
            if pos == self.frame_end:
                self.frame_end = -1
                self.limit = self.end
            if self.frame_end >= 0:
                raise self.fail(f"needs {count} bytes, its frame ends {self.frame_end - pos} on")
            if count > self.end - pos:
                raise self.fail(f"needs {count} bytes, only {self.end - pos} remain")
        self.pos = pos + count
        return pos

    def line(self) -> bytes:
        """A protocol 0 text argument: the bytes up to a newline (which is consumed).

        The newline is searched for in place, within ``_MAX_LINE`` bytes; only the line
        itself is copied, so a run of text opcodes costs time linear in its bytes,
        whatever the cap and the input after it.
        """
        start = self.pos
        end = self.limit if start < self.limit else self.end
        limit = min(end, start + _MAX_LINE)
        found = _NEWLINE.search(self.data, start, limit)
        if found is None:
            raise self.fail(f"no newline within {limit - start} bytes")
        stop = found.start()
        self.take(stop + 1 - start)
        return self.data[start:stop].tobytes()

    def sized(self, size: int) -> memoryview:
        """The next ``size`` bytes, after checking them against the bytes remaining."""
        if size < 0:
            raise self.fail(f"negative length {size}")
        start = self.take(size)
        return self.data[start : start + size]

    def text(self, raw: memoryview | bytes) -> str:
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"text is not valid UTF-8 ({exc.reason})") from None

    def pop(self) -> Any:
        if not self.stack:
            raise self.fail("the stack is empty" + (" after a MARK" if self.metastack else ""))
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise self.fail("the stack is empty" + (" after a MARK" if self.metastack else ""))
        return self.stack[-1]

    def mark(self) -> None:
        if len(self.metastack) >= MAX_MARKS:
            raise LimitError(f"{self.where}: more than {MAX_MARKS} nested MARKs")
        self.metastack.append(self.stack)
        self.stack = []

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise self.fail("no MARK to pop to")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def remember(self, index: int, value: object) -> None:
        """Store ``value`` as memo entry ``index`` (an int in [0, 2**32))."""
        memo = self.memo
        if index not in memo:
            if not 0 <= index < _MEMO_INDICES:
                raise self.fail(f"memo index {describe(index)} is not in [0, 2**32)")
            self.owed += OBJECT_BYTES  # settled with the next charge of other things
            if len(memo) >= MAX_MEMO:
                raise LimitError(f"{self.where}: more than {MAX_MEMO} memo entries")
        memo[index] = value

    def recall(self, index: int) -> None:
        value = self.memo.get(index, _MISSING) if 0 <= index < _MEMO_INDICES else _MISSING
        if value is _MISSING:
            raise self.fail(f"memo entry {describe(index)} was never stored")
        self.stack.append(value)

    def key(self, key: object) -> str | DataKey:
        """A dict key as the dict holds it: a str as it is, others as a ``DataKey``.

        int, float, bool, None and tuples of them (and of str) are keys; bytes and
        everything else are FormatErrors. What the key's text will cost is measured
        and charged before the text is made (``key_bytes``), so a key that nests
        wide tuples of memo references is refused before it spells anything.
        """
        if type(key) is str:
            return key
        try:
            cost = key_bytes(key) if type(key) is not bytes else 0
            self.spend(cost, "dict keys")
            found = data_key(key) if type(key) is not bytes else None
        except FormatError as exc:
            raise self.fail(str(exc)) from None
        if found is None:
            raise self.fail(
                f"dict key {describe(key)} is not a str, int, float, bool, None or tuple"
            )
        return found

    def run(self) -> tuple[object, int]:
        data, handlers = self.data, HANDLERS
        # Each opcode pushes at most one value: counting opcodes bounds every DUP/GET loop.
        remaining = MAX_OPCODES
        while remaining:
            remaining -= 1
            pos = self.pos
            if pos < self.limit:
                self.pos = pos + 1
            else:
                self.take(1)  # leaves a frame that ends here, or reports the end of data
            self.at = pos
            handler = handlers[data[pos]]
            if handler is None:
                raise self.refused(data[pos])
            if handler is stop:
                return self.finish(), self.pos
            handler(self)
        raise LimitError(
            f"{self.where}: the pickle runs more than {MAX_OPCODES} opcodes "
            "(a structure that size is not a checkpoint)"
        )

    def refused(self, code: int) -> FormatError:
        name = REFUSED.get(code)
        if name is None:
            return FormatError(f"{self.where}: pickle byte {self.at}: unknown opcode 0x{code:02x}")
        return FormatError(
            f"{self.where}: pickle byte {self.at}: opcode {name} is not allowed "
            "(it creates or calls arbitrary objects)"
        )

    def finish(self) -> object:
        if self.metastack:
            raise self.fail(f"{len(self.metastack)} MARK(s) left open")
        if len(self.stack) != 1:
            raise self.fail(f"expected 1 value on the stack, found {len(self.stack)}")
        return self.stack[0]


def interpret(
    data: memoryview,
    start: int,
    where: str,
    storages: dict[str, StorageRef] | None = None,
    *,
    budget: ParseBudget | None = None,
    table: Mapping[str, Global] = GLOBALS,
    lenient: bool = False,
    imports: dict[tuple[str, str], None] | None = None,
) -> tuple[object, int]:
    """Run the pickle starting at ``data[start]`` as data; returns (value, end offset).

    ``storages`` collects the storages that persistent ids name (key -> StorageRef);
    ``None`` refuses persistent ids. What the run builds is charged to ``budget`` (a
    fresh one for ``where`` when None), which is granted the pickle's bytes as they are
    read. ``data`` is only read, never copied whole; the value shares no memory with it
    but for bytes of at least ``SHARED_BYTES`` (``BINBYTES``, ``BINBYTES8``,
    ``BYTEARRAY8``: NumPy arrays' data), which are read-only ``memoryview``s of ``data``
    (zero-copy when ``data`` is a mapped file); texts and smaller bytes are copies.

    ``table`` is the allow-list of globals understood as data (``GLOBALS`` unless a
    reader of a related format extends it). With ``lenient=True`` any other global
    becomes an inert ``Record`` (never imported or called). ``imports`` (when given)
    receives every ``(module, name)`` a ``GLOBAL``/``STACK_GLOBAL``/``INST`` names, in
    first-use order, after the protocol 0-2 renaming (``__builtin__`` -> ``builtins``);
    it is filled as the run goes, so it holds what was named before a failure too.

    Raises FormatError for anything else, LimitError when a cap or the budget is
    reached; never imports or calls anything the data names.
    """
    spent = ParseBudget(where) if budget is None else budget
    machine = Machine(data, start, where, storages, spent, table, lenient, imports)
    try:
        value, end = machine.run()
    except DataError:
        raise
    except (ValueError, OverflowError, struct.error) as exc:
        # int()/float() of hostile text, struct at a bad offset: still bad input.
        raise machine.fail(f"bad argument ({type(exc).__name__})") from None
    machine.settle(machine.owed, "the pickle's objects")
    return value, end
