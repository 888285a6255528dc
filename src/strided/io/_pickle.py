"""A pickle program read as data: the opcode interpreter behind the PyTorch reader.

A ``torch.save`` file holds a pickle, which is a program for a stack machine; running
it with Python's unpickler imports and calls whatever it names. This module interprets
the opcodes itself and never imports, looks up or calls anything a file names. It
builds only plain data -- ``dict``, ``collections.OrderedDict``, ``list``, ``tuple``,
``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None`` and ordered sets -- plus the
records of ``_pickle_data``, and knows a closed table of globals, each understood as data:

* ``collections.OrderedDict``, ``torch.Size`` and ``_codecs.encode(text, "latin1")``
  (how protocol 2 spells ``bytes``) when applied to the arguments torch writes;
* the tensor rebuild functions ``torch._utils._rebuild_tensor_v2`` / ``_v3`` and
  ``_rebuild_parameter`` (``_with_state``), which become ``TensorRef`` records;
* storage types (``torch.FloatStorage``... and ``torch.storage.UntypedStorage``) and
  dtypes (``torch.float8_e4m3fn``...), which only ever label a ``StorageRef`` or a tensor.

A persistent id may only be a storage tuple ``('storage', type, key, location, numel)``
(the legacy format adds a ``None``); it becomes a ``StorageRef`` whose bytes the reader
finds. Every other global, any call of something else, ``BUILD`` on anything but an
``OrderedDict`` or a parameter, ``INST``/``OBJ``/``NEWOBJ``, extension codes, out-of-band
buffers and unknown opcodes are FormatErrors naming them and the byte where they are.

Caps hold before anything grows: opcodes run in total (each pushes at most one value, so
``DUP``/``GET`` loops that build huge shared structures stop early), memo entries, open
marks, and the bytes that ``_codecs.encode`` may make (no more than the pickle holds);
every length is checked against the bytes remaining.
Nothing recurses on the input's structure, and dict keys and set items are checked to
be plain scalars before they are hashed.
"""

from __future__ import annotations

import re
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._dtype import DType
from .._errors import DataError, FormatError, LimitError
from ._pickle_data import (
    SCALARS,
    Global,
    PickledSet,
    StorageRef,
    TensorRef,
    describe,
    ordered_dict,
    rebuild_parameter,
    rebuild_tensor,
    torch_size,
)

__all__ = ["MAX_MARKS", "MAX_MEMO", "MAX_OPCODES", "interpret"]

MAX_OPCODES = 1 << 24  # opcodes one pickle may run (each pushes at most one value)
MAX_MEMO = 1 << 22  # memo entries
MAX_MARKS = 256  # open MARKs at once
_MAX_LINE = 1 << 16  # text arguments of protocol 0 opcodes
_MAX_LONG_BYTES = 256  # LONG4 payload (LONG1 cannot exceed 255 bytes either)
_MISSING = object()


# -- the machine ---------------------------------------------------------------------


class _Machine:
    """One run of one pickle: its own stack, mark stack, memo and budgets."""

    __slots__ = (
        "at",
        "bytes_budget",
        "data",
        "end",
        "frame_end",
        "limit",
        "memo",
        "metastack",
        "pos",
        "stack",
        "storages",
        "where",
    )

    def __init__(
        self, data: memoryview, start: int, where: str, storages: dict[str, StorageRef] | None
    ) -> None:
        self.data = data
        self.pos = self.at = start
        self.end = self.limit = len(data)  # ``limit``: the end of the current frame, if any
        self.frame_end = -1
        self.where = where
        self.storages = storages
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.bytes_budget = len(data) - start

    def fail(self, message: str) -> FormatError:
        name = _NAMES.get(self.data[self.at], "?") if self.at < self.end else "end"
        return FormatError(f"{self.where}: pickle byte {self.at}, {name}: {message}")

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
        """A protocol 0 text argument: the bytes up to a newline (which is consumed)."""
        start = self.pos
        limit = min(self.limit if start < self.limit else self.end, start + _MAX_LINE)
        text = bytes(self.data[start:limit])
        stop = text.find(b"\n")
        if stop < 0:
            raise self.fail(f"no newline within {limit - start} bytes")
        self.take(stop + 1)
        return text[:stop]

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

    def pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise self.fail("no MARK to pop to")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def remember(self, index: int, value: object) -> None:
        memo = self.memo
        memo[index] = value
        if len(memo) > MAX_MEMO:
            raise LimitError(f"{self.where}: more than {MAX_MEMO} memo entries")

    def recall(self, index: int) -> None:
        value = self.memo.get(index, _MISSING)
        if value is _MISSING:
            raise self.fail(f"memo entry {index} was never stored")
        self.stack.append(value)

    def key(self, key: object) -> object:
        if type(key) is not str and type(key) is not int:
            raise self.fail(f"dict key {describe(key)} is not a str or an int")
        return key

    def run(self) -> tuple[object, int]:
        data, handlers = self.data, _HANDLERS
        # Each opcode pushes at most one value: counting opcodes bounds every DUP/GET loop.
        budget = MAX_OPCODES
        while budget:
            budget -= 1
            pos = self.pos
            if pos < self.limit:
                self.pos = pos + 1
            else:
                self.take(1)  # leaves a frame that ends here, or reports the end of data
            self.at = pos
            handler = handlers[data[pos]]
            if handler is None:
                raise self.refused(data[pos])
            if handler is _stop:
                return self.finish(), self.pos
            handler(self)
        raise LimitError(
            f"{self.where}: the pickle runs more than {MAX_OPCODES} opcodes "
            "(a structure that size is not a checkpoint)"
        )

    def refused(self, code: int) -> FormatError:
        name = _REFUSED.get(code)
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
    data: memoryview, start: int, where: str, storages: dict[str, StorageRef] | None = None
) -> tuple[object, int]:
    """Run the pickle starting at ``data[start]`` as data; returns (value, end offset).

    ``storages`` collects the storages that persistent ids name (key -> StorageRef);
    ``None`` refuses persistent ids. Raises FormatError for anything but plain data,
    LimitError when a cap is reached; never imports or calls anything the data names.
    """
    machine = _Machine(data, start, where, storages)
    try:
        return machine.run()
    except DataError:
        raise
    except (ValueError, OverflowError, struct.error) as exc:
        # int()/float() of hostile text, struct at a bad offset: still bad input.
        raise machine.fail(f"bad argument ({type(exc).__name__})") from None


# -- opcodes ---------------------------------------------------------------------------


_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct(">d").unpack_from


def _u8(m: _Machine) -> int:
    return m.data[m.take(1)]


def _number(m: _Machine, unpack: Callable[[memoryview, int], tuple[Any, ...]], size: int) -> Any:
    return unpack(m.data, m.take(size))[0]


def _stop(m: _Machine) -> None:
    """STOP: handled by the run loop itself."""


def _frame(m: _Machine) -> None:
    size = _number(m, _U64, 8)
    if m.frame_end >= 0 and m.pos < m.frame_end:
        raise m.fail("a new frame begins before the current one ends")
    if size > m.end - m.pos:
        raise m.fail(f"frame of {size} bytes, only {m.end - m.pos} remain")
    m.frame_end = m.limit = m.pos + size


def _proto(m: _Machine) -> None:
    version = _u8(m)
    if version > 5:
        raise m.fail(f"unsupported protocol {version}")


def _mark(m: _Machine) -> None:
    if len(m.metastack) >= MAX_MARKS:
        raise LimitError(f"{m.where}: more than {MAX_MARKS} nested MARKs")
    m.metastack.append(m.stack)
    m.stack = []


def _pop(m: _Machine) -> None:
    if m.stack:
        m.stack.pop()
    else:
        m.pop_mark()


def _text_int(m: _Machine) -> None:
    line = m.line()
    m.stack.append(False if line == b"00" else True if line == b"01" else int(line, 0))


def _text_long(m: _Machine) -> None:
    line = m.line()
    m.stack.append(int(line[:-1] if line.endswith(b"L") else line, 0))


def _long(m: _Machine, size: int) -> None:
    if size > _MAX_LONG_BYTES:
        raise LimitError(f"{m.where}: pickle byte {m.at}: an integer of {size} bytes")
    m.stack.append(int.from_bytes(m.sized(size), "little", signed=True))


def _string(m: _Machine) -> None:
    line = m.line()
    if len(line) < 2 or line[0] != line[-1] or line[0] not in b"'\"":
        raise m.fail("the argument must be quoted")
    m.stack.append(m.text(_unescape(m, line[1:-1])))


_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|[\\'\"abfnrtv])")
_SIMPLE_ESCAPES = dict(zip(b"\\'\"abfnrtv", b"\\'\"\a\b\f\n\r\t\v", strict=True))


def _unescape(m: _Machine, body: bytes) -> bytes:
    """The bytes a protocol 0 STRING's escapes stand for (the standard escapes only)."""

    def one(match: re.Match[bytes]) -> bytes:
        escape = match.group(1)
        if escape[0] == ord("x"):
            return bytes([int(escape[1:], 16)])
        if escape[0] in _SIMPLE_ESCAPES:
            return bytes([_SIMPLE_ESCAPES[escape[0]]])
        value = int(escape, 8)
        if value > 0xFF:
            raise m.fail(f"octal escape {escape.decode()} is larger than a byte")
        return bytes([value])

    result = _ESCAPE.sub(one, body)
    if b"\\" in _ESCAPE.sub(b"", body):
        raise m.fail("unknown or incomplete escape in STRING")
    return result


def _unicode_text(m: _Machine) -> None:
    try:
        m.stack.append(str(m.line(), "raw-unicode-escape"))
    except UnicodeDecodeError:
        raise m.fail("bad escape in UNICODE") from None


def _persistent(m: _Machine, pid: object) -> None:
    if m.storages is None:
        raise m.fail("persistent ids are not allowed in this pickle")
    if type(pid) is not tuple or len(pid) not in (5, 6) or pid[0] != "storage":
        raise m.fail(f"persistent id {describe(pid)} is not a storage tuple")
    _, kind, key, location, numel, *view = pid
    if not isinstance(kind, Global) or kind.kind not in ("storage", "untyped"):
        raise m.fail(f"storage type {describe(kind)} is not a storage type")
    if type(key) is not str or not 0 < len(key) <= 256 or "/" in key or "\0" in key:
        raise m.fail(f"storage key {describe(key)} is not a plain name")
    if type(location) is not str:
        raise m.fail(f"storage location {describe(location)} is not a str")
    if type(numel) is not int or numel < 0:
        raise m.fail(f"storage size {describe(numel)} is not a non-negative int")
    if view and view[0] is not None:
        raise m.fail("storage views (a legacy view tuple) are not supported")
    dtype = DType.U8 if kind.dtype is None else kind.dtype
    ref = m.storages.get(key)
    if ref is None:
        ref = m.storages[key] = StorageRef(key, dtype, numel, kind.kind == "untyped")
    elif (ref.dtype, ref.numel, ref.untyped) != (dtype, numel, kind.kind == "untyped"):
        raise m.fail(f"storage {key!r} is described twice, differently")
    m.stack.append(ref)


def _global(m: _Machine, module: object, name: object) -> None:
    if type(module) is not str or type(name) is not str:
        raise m.fail("module and name must be strings")
    full = f"{module}.{name}"
    found = _GLOBALS.get(full)
    if found is None:
        reason = _UNSUPPORTED.get(full, "is not an allowed global (nothing is imported)")
        raise m.fail(f"{full[:120]} {reason}")
    m.stack.append(found)


def _reduce(m: _Machine) -> None:
    args = m.pop()
    func = m.pop()
    if not isinstance(func, Global) or func.rule is None:
        raise m.fail(f"cannot apply {describe(func)}: only allow-listed rebuild rules apply")
    if type(args) is not tuple:
        raise m.fail(f"{func.name}: arguments must be a tuple, found {describe(args)}")
    try:
        value = func.rule(m, args)
    except LimitError as exc:
        raise LimitError(f"{m.where}: {func.name}: {exc}") from None
    except FormatError as exc:
        raise m.fail(f"{func.name}: {exc}") from None
    m.stack.append(value)


def _build(m: _Machine) -> None:
    state = m.pop()
    target = m.top()
    if type(target) is OrderedDict:
        if type(state) is not dict:
            raise m.fail(f"the state of an OrderedDict must be a dict, found {describe(state)}")
        return  # a state dict's ``_metadata``: kept out of the tensors
    if type(target) is TensorRef and target.parameter:
        return  # a parameter's Python attributes: not tensor data
    raise m.fail(f"BUILD on {describe(target)} (only an OrderedDict or a parameter)")


def _setitems(m: _Machine, items: list[Any]) -> None:
    target = m.top()
    if type(target) is not dict and type(target) is not OrderedDict:
        raise m.fail(f"cannot set items on {describe(target)}")
    if len(items) % 2:
        raise m.fail("an odd number of items (keys and values come in pairs)")
    for index in range(0, len(items), 2):
        target[m.key(items[index])] = items[index + 1]


def _dict(m: _Machine) -> None:
    items = m.pop_mark()
    m.stack.append({})
    _setitems(m, items)


def _extend(m: _Machine, items: list[Any]) -> None:
    target = m.top()
    if type(target) is not list:
        raise m.fail(f"cannot append to {describe(target)}")
    target.extend(items)


def _set_of(m: _Machine, items: list[Any], target: PickledSet) -> PickledSet:
    for item in items:
        if type(item) not in SCALARS:
            raise m.fail(f"set item {describe(item)} is not a plain scalar")
        target.add(item)
    return target


def _additems(m: _Machine) -> None:
    items = m.pop_mark()
    target = m.top()
    if type(target) is not PickledSet or target.frozen:
        raise m.fail(f"cannot add items to {describe(target)}")
    _set_of(m, items, target)


def _tuple_n(count: int) -> Callable[[_Machine], None]:
    def build(m: _Machine) -> None:
        if len(m.stack) < count:
            raise m.fail(f"needs {count} values on the stack, found {len(m.stack)}")
        items = tuple(m.stack[len(m.stack) - count :])
        del m.stack[len(m.stack) - count :]
        m.stack.append(items)

    return build


def _put(m: _Machine, index: int) -> None:
    if index < 0:
        raise m.fail("negative memo index")
    m.remember(index, m.top())


# The opcodes torch.save pickles are mostly made of, without the generic helpers' calls.


def _long_binput(m: _Machine) -> None:
    m.remember(_U32(m.data, m.take(4))[0], m.top())


def _long_binget(m: _Machine) -> None:
    m.recall(_U32(m.data, m.take(4))[0])


def _binunicode(m: _Machine) -> None:
    size: int = _U32(m.data, m.take(4))[0]
    start = m.take(size)
    m.stack.append(m.text(m.data[start : start + size]))


def _pop_mark(m: _Machine) -> None:
    m.pop_mark()


def _list(m: _Machine) -> None:
    items = m.pop_mark()  # first: it changes which stack is current
    m.stack.append(items)


def _tuple(m: _Machine) -> None:
    items = m.pop_mark()
    m.stack.append(tuple(items))


def _frozenset(m: _Machine) -> None:
    items = m.pop_mark()
    m.stack.append(_set_of(m, items, PickledSet(frozen=True)))


_Handler = Callable[[_Machine], None]

# The opcodes of protocols 0-5 that build plain data: (code, name, handler).
_OPCODES: list[tuple[str, str, _Handler]] = [
    ("\x80", "PROTO", _proto),
    ("\x95", "FRAME", _frame),
    (".", "STOP", _stop),
    ("(", "MARK", _mark),
    ("0", "POP", _pop),
    ("1", "POP_MARK", _pop_mark),
    ("2", "DUP", lambda m: m.stack.append(m.top())),
    ("p", "PUT", lambda m: _put(m, int(m.line()))),
    ("q", "BINPUT", lambda m: m.remember(_u8(m), m.top())),
    ("r", "LONG_BINPUT", _long_binput),
    ("\x94", "MEMOIZE", lambda m: m.remember(len(m.memo), m.top())),
    ("g", "GET", lambda m: m.recall(int(m.line()))),
    ("h", "BINGET", lambda m: m.recall(_u8(m))),
    ("j", "LONG_BINGET", _long_binget),
    ("N", "NONE", lambda m: m.stack.append(None)),
    ("\x88", "NEWTRUE", lambda m: m.stack.append(True)),
    ("\x89", "NEWFALSE", lambda m: m.stack.append(False)),
    ("I", "INT", _text_int),
    ("J", "BININT", lambda m: m.stack.append(_number(m, _I32, 4))),
    ("K", "BININT1", lambda m: m.stack.append(_u8(m))),
    ("M", "BININT2", lambda m: m.stack.append(_number(m, _U16, 2))),
    ("L", "LONG", _text_long),
    ("\x8a", "LONG1", lambda m: _long(m, _u8(m))),
    ("\x8b", "LONG4", lambda m: _long(m, _number(m, _I32, 4))),
    ("F", "FLOAT", lambda m: m.stack.append(float(m.line()))),
    ("G", "BINFLOAT", lambda m: m.stack.append(_number(m, _F64, 8))),
    ("S", "STRING", _string),
    ("T", "BINSTRING", lambda m: m.stack.append(m.text(m.sized(_number(m, _I32, 4))))),
    ("U", "SHORT_BINSTRING", lambda m: m.stack.append(m.text(m.sized(_u8(m))))),
    ("V", "UNICODE", _unicode_text),
    ("X", "BINUNICODE", _binunicode),
    ("\x8c", "SHORT_BINUNICODE", lambda m: m.stack.append(m.text(m.sized(_u8(m))))),
    ("\x8d", "BINUNICODE8", lambda m: m.stack.append(m.text(m.sized(_number(m, _U64, 8))))),
    ("B", "BINBYTES", lambda m: m.stack.append(bytes(m.sized(_number(m, _U32, 4))))),
    ("C", "SHORT_BINBYTES", lambda m: m.stack.append(bytes(m.sized(_u8(m))))),
    ("\x8e", "BINBYTES8", lambda m: m.stack.append(bytes(m.sized(_number(m, _U64, 8))))),
    ("\x96", "BYTEARRAY8", lambda m: m.stack.append(bytes(m.sized(_number(m, _U64, 8))))),
    ("}", "EMPTY_DICT", lambda m: m.stack.append({})),
    ("d", "DICT", _dict),
    ("s", "SETITEM", lambda m: _setitems(m, [*reversed([m.pop(), m.pop()])])),
    ("u", "SETITEMS", lambda m: _setitems(m, m.pop_mark())),
    ("]", "EMPTY_LIST", lambda m: m.stack.append([])),
    ("l", "LIST", _list),
    ("a", "APPEND", lambda m: _extend(m, [m.pop()])),
    ("e", "APPENDS", lambda m: _extend(m, m.pop_mark())),
    (")", "EMPTY_TUPLE", lambda m: m.stack.append(())),
    ("t", "TUPLE", _tuple),
    ("\x85", "TUPLE1", _tuple_n(1)),
    ("\x86", "TUPLE2", _tuple_n(2)),
    ("\x87", "TUPLE3", _tuple_n(3)),
    ("\x8f", "EMPTY_SET", lambda m: m.stack.append(PickledSet(frozen=False))),
    ("\x90", "ADDITEMS", _additems),
    ("\x91", "FROZENSET", _frozenset),
    ("c", "GLOBAL", lambda m: _global(m, m.text(m.line()), m.text(m.line()))),
    ("\x93", "STACK_GLOBAL", lambda m: _global(m, *reversed([m.pop(), m.pop()]))),
    ("R", "REDUCE", _reduce),
    ("b", "BUILD", _build),
    ("Q", "BINPERSID", lambda m: _persistent(m, m.pop())),
    ("P", "PERSID", lambda m: _persistent(m, m.text(m.line()))),
]
_HANDLERS: list[_Handler | None] = [None] * 256
for _code, _, _handler in _OPCODES:
    _HANDLERS[ord(_code)] = _handler
_NAMES = {ord(code): name for code, name, _ in _OPCODES}

# Opcodes that exist but can only create or call arbitrary objects.
_REFUSED = {
    ord("i"): "INST",
    ord("o"): "OBJ",
    0x81: "NEWOBJ",
    0x92: "NEWOBJ_EX",
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}


# -- the allow-list: globals understood as data ------------------------------------------


def _encode(m: _Machine, args: tuple[Any, ...]) -> object:
    if len(args) != 2 or type(args[0]) is not str or args[1] not in ("latin1", "latin-1"):
        raise FormatError("expected (text, 'latin1')")
    m.bytes_budget -= len(args[0])
    if m.bytes_budget < 0:
        raise LimitError("the pickle makes more bytes than it holds")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise FormatError("the text holds characters beyond latin-1") from None


_RULES: dict[str, Callable[[_Machine, tuple[Any, ...]], object]] = {
    "collections.OrderedDict": lambda m, args: ordered_dict(args),
    "_codecs.encode": _encode,
    "torch.Size": lambda m, args: torch_size(args),
    "torch._utils._rebuild_tensor_v2": lambda m, args: rebuild_tensor(args, False),
    "torch._utils._rebuild_tensor_v3": lambda m, args: rebuild_tensor(args, True),
    "torch._utils._rebuild_parameter": lambda m, args: rebuild_parameter(args, False),
    "torch._utils._rebuild_parameter_with_state": lambda m, args: rebuild_parameter(args, True),
}

# The element type of each typed storage class torch writes (torch.cuda.* in old files).
_STORAGE_TYPES = {
    "BoolStorage": DType.BOOL, "CharStorage": DType.I8, "ShortStorage": DType.I16,
    "IntStorage": DType.I32, "LongStorage": DType.I64, "ByteStorage": DType.U8,
    "HalfStorage": DType.F16, "BFloat16Storage": DType.BF16, "FloatStorage": DType.F32,
    "DoubleStorage": DType.F64,
}  # fmt: skip
# torch's dtype names; E8M0 is read once strided has a DType for it, refused until then.
_DTYPE_NAMES: dict[str, DType | None] = {
    "bool": DType.BOOL, "int8": DType.I8, "int16": DType.I16, "int32": DType.I32,
    "int64": DType.I64, "uint8": DType.U8, "uint16": DType.U16, "uint32": DType.U32,
    "uint64": DType.U64, "float16": DType.F16, "bfloat16": DType.BF16, "float32": DType.F32,
    "float64": DType.F64, "float8_e4m3fn": DType.F8_E4M3, "float8_e5m2": DType.F8_E5M2,
    "float8_e8m0fnu": getattr(DType, "F8_E8M0", None),
}  # fmt: skip
_NO_DTYPE = (
    "complex32 complex64 complex128 float8_e4m3fnuz float8_e5m2fnuz float4_e2m1fn_x2 "
    "qint8 quint8 qint32 quint4x2 quint2x4 bits1x8 bits2x4 bits4x2 bits8 bits16 "
    + " ".join(f"uint{bits} int{bits}" for bits in range(1, 8))
).split() + [name for name, dtype in _DTYPE_NAMES.items() if dtype is None]
_NO_STORAGE = "ComplexFloatStorage ComplexDoubleStorage QInt8Storage QUInt8Storage "
_NO_STORAGE += "QInt32Storage QUInt4x2Storage QUInt2x4Storage"


def _allowed() -> dict[str, Global]:
    table: dict[str, Global] = {}
    for name, rule in _RULES.items():
        table[name] = Global(name, "call", rule=rule)
    for name, dtype in _STORAGE_TYPES.items():
        for module in ("torch", "torch.cuda"):
            table[f"{module}.{name}"] = Global(f"{module}.{name}", "storage", dtype)
    table["torch.storage.UntypedStorage"] = Global("torch.storage.UntypedStorage", "untyped")
    for name, found in _DTYPE_NAMES.items():
        if found is not None:
            table[f"torch.{name}"] = Global(f"torch.{name}", "dtype", found)
    return table


# "module.name" -> the marker it stands for. Nothing else is ever resolved.
_GLOBALS = _allowed()
_UNSUPPORTED = {
    **{f"torch.{name}": "is a torch dtype strided has no DType for" for name in _NO_DTYPE},
    **{
        f"{module}.{name}": "is a storage of elements strided has no DType for"
        for name in _NO_STORAGE.split()
        for module in ("torch", "torch.cuda")
    },
}
