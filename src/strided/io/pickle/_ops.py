"""The pickle opcodes that build plain data: one handler each, and the table the machine runs.

``HANDLERS[code]`` is the handler of opcode byte ``code`` (None for every opcode that
is refused or unknown); ``NAMES`` names the opcodes for messages and ``REFUSED`` the
ones that exist but can only create or call arbitrary objects. A handler reads its
arguments through the ``Machine`` (``_machine``), which checks every length against the
bytes remaining, and charges what it builds to the machine's parse budget *before*
building it: texts and bytes by their length, containers and their slots, set items,
records. Values that cost no more than the few bytes that spelled them (a stack slot
for ``DUP``, a small int) are not charged one by one: the budget grows by
``BUDGET_FACTOR`` bytes per pickle byte read, which covers them.
"""

from __future__ import annotations

import re
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._core.dtype import DType
from ..._core.errors import FormatError, LimitError
from ..._core.limits import MAX_PICKLE_LONG_BYTES as _MAX_LONG_BYTES
from ..._core.limits import MAX_PICKLE_NUMBER_TEXT as _MAX_NUMBER_TEXT
from .._budget import ITEM_BYTES, OBJECT_BYTES, TEXT_BYTES
from ._builtins import DataDict, fill_set, set_dict_items
from ._data import Global, PickledSet, Record, StorageRef, TensorRef, describe
from ._numpy import ArrayRef, NumpyDType
from ._records import build_record, call_record, extend_record, resolve, set_record_items

if TYPE_CHECKING:
    from ._machine import Machine

__all__ = ["HANDLERS", "NAMES", "REFUSED", "SHARED_BYTES", "stop"]


# Bytes of at least this many are pushed as read-only views of the pickle, not copies.
SHARED_BYTES = 4096

_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F64 = struct.Struct(">d").unpack_from


def _u8(m: Machine) -> int:
    return m.data[m.take(1)]


def _number(m: Machine, unpack: Callable[[memoryview, int], tuple[Any, ...]], size: int) -> Any:
    return unpack(m.data, m.take(size))[0]


def stop(m: Machine) -> None:
    """STOP: handled by the run loop itself."""


def _frame(m: Machine) -> None:
    size = _number(m, _U64, 8)
    if m.frame_end >= 0 and m.pos < m.frame_end:
        raise m.fail("a new frame begins before the current one ends")
    if size > m.end - m.pos:
        raise m.fail(f"frame of {size} bytes, only {m.end - m.pos} remain")
    m.frame_end = m.limit = m.pos + size


def _proto(m: Machine) -> None:
    version = _u8(m)
    if version > 5:
        raise m.fail(f"unsupported protocol {version}")
    m.protocol = version


def _pop(m: Machine) -> None:
    if m.stack:
        m.stack.pop()
    else:
        m.pop_mark()


def _number_line(m: Machine) -> bytes:
    """A protocol 0 number's text (Python 3.11 parses long digit strings in quadratic time)."""
    line = m.line()
    if len(line) > _MAX_NUMBER_TEXT:
        raise LimitError(f"{m.where}: pickle byte {m.at}: a number of {len(line)} characters")
    return line


def _text_int(m: Machine) -> None:
    line = _number_line(m)
    m.stack.append(False if line == b"00" else True if line == b"01" else int(line, 0))


def _text_long(m: Machine) -> None:
    line = _number_line(m)
    m.stack.append(int(line[:-1] if line.endswith(b"L") else line, 0))


def _long(m: Machine, size: int) -> None:
    if size > _MAX_LONG_BYTES:
        raise LimitError(f"{m.where}: pickle byte {m.at}: an integer of {size} bytes")
    m.stack.append(int.from_bytes(m.sized(size), "little", signed=True))


def _push_text(m: Machine, raw: memoryview | bytes) -> None:
    m.spend(TEXT_BYTES + len(raw), "texts")
    m.stack.append(m.text(raw))


def _push_bytes(m: Machine, size: int) -> None:
    """Bytes: a copy, or from ``SHARED_BYTES`` on a read-only view of the pickle's own.

    Large bytes are NumPy arrays' data; a view keeps them where the pickle holds them
    (in a mapped file, zero-copy) and costs the budget nothing but the view.
    """
    raw = m.sized(size)
    if size >= SHARED_BYTES:
        m.spend(OBJECT_BYTES, "bytes")
        m.stack.append(raw.toreadonly())
        return
    m.spend(TEXT_BYTES + size, "bytes")
    m.stack.append(bytes(raw))


def _string(m: Machine) -> None:
    line = m.line()
    if len(line) < 2 or line[0] != line[-1] or line[0] not in b"'\"":
        raise m.fail("the argument must be quoted")
    _push_text(m, _unescape(m, line[1:-1]))


_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|[\\'\"abfnrtv])")
_SIMPLE_ESCAPES = dict(zip(b"\\'\"abfnrtv", b"\\'\"\a\b\f\n\r\t\v", strict=True))


def _unescape(m: Machine, body: bytes) -> bytes:
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


def _module_class(pid: object) -> bool:
    """Whether ``pid`` is the legacy format's ``("module", class, file, source)``."""
    if type(pid) is not tuple or len(pid) != 4 or pid[0] != "module":
        return False
    kind = pid[1]
    return isinstance(kind, Global) and kind.kind == "record" and type(pid[3]) is str


def _unicode_text(m: Machine) -> None:
    line = m.line()
    m.spend(TEXT_BYTES + len(line), "texts")
    try:
        m.stack.append(str(line, "raw-unicode-escape"))
    except UnicodeDecodeError:
        raise m.fail("bad escape in UNICODE") from None


def _persistent(m: Machine, pid: object) -> None:
    if m.storages is None:
        raise m.fail("persistent ids are not allowed in this pickle")
    if m.lenient and _module_class(pid):
        # The legacy format names an nn.Module subclass as ("module", class, source file,
        # source text) so that torch.load can warn when the code changed; it stands for
        # the class. Read leniently it is the class's record global; the text is ignored.
        assert isinstance(pid, tuple)
        m.stack.append(pid[1])
        return
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
        m.spend(OBJECT_BYTES, "storages")
        ref = m.storages[key] = StorageRef(key, dtype, numel, kind.kind == "untyped")
    elif (ref.dtype, ref.numel, ref.untyped) != (dtype, numel, kind.kind == "untyped"):
        raise m.fail(f"storage {key!r} is described twice, differently")
    m.stack.append(ref)


def _global(m: Machine, module: object, name: object) -> None:
    m.stack.append(resolve(m, module, name))


def _reduce(m: Machine) -> None:
    args = m.pop()
    func = m.pop()
    record = call_record(m, func, args)
    if record is not None:
        m.stack.append(record)
        return
    if not isinstance(func, Global) or func.rule is None:
        raise m.fail(f"cannot apply {describe(func)}: only allow-listed rebuild rules apply")
    if type(args) is not tuple:
        raise m.fail(f"{func.name}: arguments must be a tuple, found {describe(args)}")
    # A rule may copy the sequence or text it is given (torch.Size, _codecs.encode):
    # charged for every item, so one memoized list applied again and again pays each time.
    first = args[0] if args else None
    claimed = len(first) if type(first) is str else 0  # bytes, one per latin-1 character
    if type(first) is list or type(first) is tuple:
        claimed = ITEM_BYTES * len(first)
    m.spend(OBJECT_BYTES + claimed, func.name)
    try:
        value = func.rule(m, args)
    except LimitError as exc:
        raise LimitError(f"{m.where}: {func.name}: {exc}") from None
    except FormatError as exc:
        raise m.fail(f"{func.name}: {exc}") from None
    m.stack.append(value)


def _build(m: Machine) -> None:
    state = m.pop()
    target = m.top()
    kind = type(target)
    if kind is ArrayRef or kind is NumpyDType or kind is DataDict:
        try:
            target.build(m, state)
        except LimitError as exc:
            raise LimitError(f"{m.where}: pickle byte {m.at}: {exc}") from None
        except FormatError as exc:
            raise m.fail(str(exc)) from None
        return
    if type(target) is OrderedDict:
        if type(state) is not dict:
            raise m.fail(f"the state of an OrderedDict must be a dict, found {describe(state)}")
        return  # a state dict's ``_metadata``: kept out of the tensors
    if type(target) is TensorRef and target.parameter:
        return  # a parameter's Python attributes: not tensor data
    if type(target) is Record:
        build_record(m, target, state)
        return
    raise m.fail(
        f"BUILD on {describe(target)} (only an OrderedDict, a parameter, a NumPy array or "
        "dtype, or a Namespace)"
    )


def _setitems(m: Machine, items: list[Any]) -> None:
    target = m.top()
    if type(target) is Record:
        set_record_items(m, target, items)
        return
    kind = type(target)
    if kind is DataDict and not target.settable:
        raise m.fail(f"cannot set items on {target.kind} (its attributes come by BUILD)")
    if kind is not dict and kind is not OrderedDict and kind is not DataDict:
        raise m.fail(f"cannot set items on {describe(target)}")
    set_dict_items(m, target, items)


def _dict(m: Machine) -> None:
    items = m.pop_mark()
    m.spend(OBJECT_BYTES, "dicts")
    m.stack.append({})
    _setitems(m, items)


def _new(m: Machine, kind: type[Any], what: str) -> None:
    m.spend(OBJECT_BYTES, what)
    m.stack.append(kind())


def _extend(m: Machine, items: list[Any]) -> None:
    target = m.top()
    if type(target) is Record:
        extend_record(m, target, items)
        return
    if type(target) is not list:
        raise m.fail(f"cannot append to {describe(target)}")
    m.spend(ITEM_BYTES * len(items), "list items")
    target.extend(items)


def _set_of(m: Machine, items: list[Any], target: PickledSet) -> PickledSet:
    try:
        return fill_set(m, items, target)
    except FormatError as exc:
        raise m.fail(str(exc)) from None


def _additems(m: Machine) -> None:
    items = m.pop_mark()
    target = m.top()
    if type(target) is not PickledSet or target.frozen:
        raise m.fail(f"cannot add items to {describe(target)}")
    _set_of(m, items, target)


def _tuple_n(count: int) -> Callable[[Machine], None]:
    def build(m: Machine) -> None:
        if len(m.stack) < count:
            raise m.fail(f"needs {count} values on the stack, found {len(m.stack)}")
        m.spend(OBJECT_BYTES, "tuples")
        items = tuple(m.stack[len(m.stack) - count :])
        del m.stack[len(m.stack) - count :]
        m.stack.append(items)

    return build


# The opcodes torch.save pickles are mostly made of, without the generic helpers' calls.


def _long_binput(m: Machine) -> None:
    m.remember(_U32(m.data, m.take(4))[0], m.top())


def _long_binget(m: Machine) -> None:
    m.recall(_U32(m.data, m.take(4))[0])


def _binunicode(m: Machine) -> None:
    size: int = _U32(m.data, m.take(4))[0]
    start = m.take(size)
    _push_text(m, m.data[start : start + size])


def _pop_mark(m: Machine) -> None:
    m.pop_mark()


def _list(m: Machine) -> None:
    items = m.pop_mark()  # first: it changes which stack is current
    m.spend(OBJECT_BYTES, "lists")
    m.stack.append(items)


def _tuple(m: Machine) -> None:
    items = m.pop_mark()
    m.spend(OBJECT_BYTES + ITEM_BYTES * len(items), "tuples")
    m.stack.append(tuple(items))


def _empty_set(m: Machine) -> None:
    m.spend(2 * OBJECT_BYTES, "sets")
    m.stack.append(PickledSet(frozen=False))


def _frozenset(m: Machine) -> None:
    items = m.pop_mark()
    m.spend(2 * OBJECT_BYTES, "sets")
    m.stack.append(_set_of(m, items, PickledSet(frozen=True)))


def _new_object(m: Machine, cls: object, args: object, what: str) -> None:
    """``NEWOBJ``/``NEWOBJ_EX``/``INST``/``OBJ``: an object of ``cls``, a record or refused.

    ``NEWOBJ`` of a data class (a Namespace, an AttributeDict...) makes it as ``REDUCE``
    does.
    """
    if what == "NEWOBJ" and isinstance(cls, Global) and cls.kind == "class":
        m.stack.append(cls)
        m.stack.append(args)
        _reduce(m)
        return
    record = call_record(m, cls, args)
    if record is None:
        raise m.fail(f"{what} of {describe(cls)} (only data classes and lenient records)")
    m.stack.append(record)


def _newobj(m: Machine) -> None:
    args = m.pop()
    _new_object(m, m.pop(), args, "NEWOBJ")


def _newobj_ex(m: Machine) -> None:
    kwargs = m.pop()
    args = m.pop()
    _new_object(m, m.pop(), args, "NEWOBJ_EX")
    if type(kwargs) is not dict:
        raise m.fail(f"keyword arguments must be a dict, found {describe(kwargs)}")
    m.top().kwargs = kwargs


def _inst(m: Machine) -> None:
    found = resolve(m, m.text(m.line()), m.text(m.line()))
    _new_object(m, found, tuple(m.pop_mark()), "INST")


def _obj(m: Machine) -> None:
    items = m.pop_mark()
    if not items:
        raise m.fail("OBJ needs a class after its MARK")
    _new_object(m, items[0], tuple(items[1:]), "OBJ")


_Handler = Callable[["Machine"], None]

# The opcodes of protocols 0-5 that build plain data: (code, name, handler).
_OPCODES: list[tuple[str, str, _Handler]] = [
    ("\x80", "PROTO", _proto),
    ("\x95", "FRAME", _frame),
    (".", "STOP", stop),
    ("(", "MARK", lambda m: m.mark()),
    ("0", "POP", _pop),
    ("1", "POP_MARK", _pop_mark),
    ("2", "DUP", lambda m: m.stack.append(m.top())),
    ("p", "PUT", lambda m: m.remember(int(_number_line(m)), m.top())),
    ("q", "BINPUT", lambda m: m.remember(_u8(m), m.top())),
    ("r", "LONG_BINPUT", _long_binput),
    ("\x94", "MEMOIZE", lambda m: m.remember(len(m.memo), m.top())),
    ("g", "GET", lambda m: m.recall(int(_number_line(m)))),
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
    ("F", "FLOAT", lambda m: m.stack.append(float(_number_line(m)))),
    ("G", "BINFLOAT", lambda m: m.stack.append(_number(m, _F64, 8))),
    ("S", "STRING", _string),
    ("T", "BINSTRING", lambda m: _push_text(m, m.sized(_number(m, _I32, 4)))),
    ("U", "SHORT_BINSTRING", lambda m: _push_text(m, m.sized(_u8(m)))),
    ("V", "UNICODE", _unicode_text),
    ("X", "BINUNICODE", _binunicode),
    ("\x8c", "SHORT_BINUNICODE", lambda m: _push_text(m, m.sized(_u8(m)))),
    ("\x8d", "BINUNICODE8", lambda m: _push_text(m, m.sized(_number(m, _U64, 8)))),
    ("B", "BINBYTES", lambda m: _push_bytes(m, _number(m, _U32, 4))),
    ("C", "SHORT_BINBYTES", lambda m: _push_bytes(m, _u8(m))),
    ("\x8e", "BINBYTES8", lambda m: _push_bytes(m, _number(m, _U64, 8))),
    ("\x96", "BYTEARRAY8", lambda m: _push_bytes(m, _number(m, _U64, 8))),
    ("}", "EMPTY_DICT", lambda m: _new(m, dict, "dicts")),
    ("d", "DICT", _dict),
    ("s", "SETITEM", lambda m: _setitems(m, [*reversed([m.pop(), m.pop()])])),
    ("u", "SETITEMS", lambda m: _setitems(m, m.pop_mark())),
    ("]", "EMPTY_LIST", lambda m: _new(m, list, "lists")),
    ("l", "LIST", _list),
    ("a", "APPEND", lambda m: _extend(m, [m.pop()])),
    ("e", "APPENDS", lambda m: _extend(m, m.pop_mark())),
    (")", "EMPTY_TUPLE", lambda m: m.stack.append(())),
    ("t", "TUPLE", _tuple),
    ("\x85", "TUPLE1", _tuple_n(1)),
    ("\x86", "TUPLE2", _tuple_n(2)),
    ("\x87", "TUPLE3", _tuple_n(3)),
    ("\x8f", "EMPTY_SET", _empty_set),
    ("\x90", "ADDITEMS", _additems),
    ("\x91", "FROZENSET", _frozenset),
    ("c", "GLOBAL", lambda m: _global(m, m.text(m.line()), m.text(m.line()))),
    ("\x93", "STACK_GLOBAL", lambda m: _global(m, *reversed([m.pop(), m.pop()]))),
    ("R", "REDUCE", _reduce),
    ("\x81", "NEWOBJ", _newobj),
    ("\x92", "NEWOBJ_EX", _newobj_ex),
    ("i", "INST", _inst),
    ("o", "OBJ", _obj),
    ("b", "BUILD", _build),
    ("Q", "BINPERSID", lambda m: _persistent(m, m.pop())),
    ("P", "PERSID", lambda m: _persistent(m, m.text(m.line()))),
]
HANDLERS: list[_Handler | None] = [None] * 256
for _code, _, _handler in _OPCODES:
    HANDLERS[ord(_code)] = _handler
NAMES = {ord(code): name for code, name, _ in _OPCODES}

# Opcodes that exist but can only name objects by registry codes or pass buffers.
REFUSED = {
    0x82: "EXT1",
    0x83: "EXT2",
    0x84: "EXT4",
    0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}
