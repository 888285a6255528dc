"""Standard-library and torch objects that only ever hold data, read as plain data.

Each rule here stands for one global a pickle may name (``_globals`` lists them);
none of them is imported or called. They check their arguments and build the plain value
a reader reports:

* ``argparse.Namespace``, Lightning's ``AttributeDict``, ``collections.defaultdict``
  (with a ``builtins.{list, dict, set, int, float, str}`` factory or none) and
  ``collections.Counter``: a ``DataDict`` (a dict that knows what it stands for, so
  ``BUILD`` fills a Namespace and ``SETITEM(S)`` fills the others);
* ``collections.OrderedDict`` with no arguments or a list of ``[key, value]`` pairs;
* ``builtins.set`` / ``frozenset`` of a list: a ``PickledSet``;
* ``builtins.complex``: its text (``"(1+2j)"``, Python's ``str`` of it);
* ``builtins.bytes`` / ``bytearray`` (empty, of bytes, or of latin-1 text): bytes;
* ``pathlib`` paths: the text of the path, its parts joined by its separator;
* ``torch.device``: its text (``"cuda:0"``); ``torch.serialization._get_layout``:
  ``"torch.strided"``, the only layout of a dense tensor;
* ``torch._tensor._rebuild_from_type_v2(func, type, args, state)`` with ``torch.Tensor``
  or ``torch.nn.parameter.Parameter``: the tensor ``func(*args)`` describes (a tensor
  rebuild rule; the Python attributes in ``state`` are dropped).

Errors carry no location; the interpreter adds it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..._core.errors import FormatError, LimitError
from .._budget import ITEM_BYTES, OBJECT_BYTES, TEXT_BYTES
from ._data import Global, PickledSet, TensorRef, describe, key_bytes

if TYPE_CHECKING:
    from ._machine import Machine

__all__ = [
    "DICT_CLASSES",
    "FACTORIES",
    "PATH_CLASSES",
    "TENSOR_TYPES",
    "DataDict",
    "bytes_of",
    "complex_text",
    "device_text",
    "layout_text",
    "make_dict",
    "make_set",
    "ordered_dict",
    "path_text",
    "rebuild_from_type",
    "set_dict_items",
]

# A defaultdict's factories that are data (the values they make are plain data).
FACTORIES = tuple(f"builtins.{name}" for name in ("list", "dict", "set", "int", "float", "str"))
# Which dict-like classes SETITEM(S) may fill, and which BUILD fills (a Namespace's
# attributes are its state).
DICT_CLASSES = {
    "argparse.Namespace": "state",
    "AttributeDict": "items",
    "collections.defaultdict": "items",
    "collections.Counter": "items",
}
# Path classes by their separator (pathlib._local is where Python 3.13 keeps them).
PATH_CLASSES = {
    f"{module}.{name}": "\\" if "Windows" in name else "/"
    for module in ("pathlib", "pathlib._local")
    for name in ("PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath")
}
# The types a tensor with Python attributes may have.
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")
# The rules _rebuild_from_type_v2 may apply (the tensor rebuild functions).
_TENSOR_RULES = (
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
)
_DEVICE = re.compile(r"[a-z][a-z0-9_]{0,31}(?::[0-9]{1,6})?")


class DataDict(dict[Any, Any]):
    """A dict-like object held as a dict: a Namespace, AttributeDict, defaultdict, Counter.

    ``kind`` is the class it stands for (a key of ``DICT_CLASSES``). Readers walk it as
    any dict (its keys are held as dict keys are: str or ``DataKey``).
    """

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    @property
    def settable(self) -> bool:
        """True when ``SETITEM(S)`` may fill it (all but a Namespace)."""
        return DICT_CLASSES[self.kind] == "items"

    def build(self, m: Machine, state: object) -> None:
        """``BUILD``: a Namespace's attributes (a dict); an empty state for the others."""
        if DICT_CLASSES[self.kind] != "state":
            if state is None or (type(state) is dict and not state):
                return
            raise FormatError(f"{self.kind} is given attributes ({describe(state)})")
        if type(state) is not dict:
            raise FormatError(f"the state of a {self.kind} must be a dict, found {describe(state)}")
        m.spend(ITEM_BYTES * len(state), "attributes")
        for key, value in state.items():
            if key in self:
                raise FormatError(f"attribute {describe(key)} is set twice")
            self[key] = value


def set_dict_items(m: Machine, target: dict[Any, Any], items: list[Any]) -> None:
    """``SETITEM(S)``: store key, value pairs (keys as ``Machine.key`` holds them).

    A key already there (or one Python counts equal to it) is a FormatError.
    """
    if len(items) % 2:
        raise m.fail("an odd number of items (keys and values come in pairs)")
    m.spend(ITEM_BYTES * len(items), "dict entries")
    for index in range(0, len(items), 2):
        key = m.key(items[index])
        if key in target:
            raise m.fail(f"dict key {describe(key)} is set twice (one key, one value)")
        target[key] = items[index + 1]


def _copy_into(m: Machine, target: dict[Any, Any], source: object) -> None:
    """Copy a dict's entries into ``target`` (charged for each: the copy is new)."""
    if type(source) is not dict:
        raise FormatError(f"expected a dict, found {describe(source)}")
    assert isinstance(source, dict)
    m.spend(ITEM_BYTES * len(source), "dict entries")
    target.update(source)


def make_dict(kind: str) -> Any:
    """The rule of a dict-like class ``kind``: its object made from its arguments.

    A Namespace takes no arguments (its attributes come by ``BUILD``); an AttributeDict
    or a Counter none or a dict of items; a defaultdict none or its factory (None or
    an allowed factory).
    """

    def make(m: Machine, args: tuple[Any, ...]) -> DataDict:
        m.spend(OBJECT_BYTES, "dicts")
        made = DataDict(kind)
        if kind == "collections.defaultdict":
            if len(args) > 1:
                raise FormatError(f"expected at most a factory, found {len(args)} arguments")
            factory = args[0] if args else None
            if factory is not None and (
                not isinstance(factory, Global) or factory.name not in FACTORIES
            ):
                raise FormatError(f"the factory {describe(factory)} is not a builtin container")
            return made
        if kind == "argparse.Namespace" and args:
            raise FormatError(f"expected no arguments, found {len(args)}")
        if len(args) > 1:
            raise FormatError(f"expected at most one dict, found {len(args)} arguments")
        if args:
            _copy_into(m, made, args[0])
        return made

    return make


def ordered_dict(m: Machine, args: tuple[Any, ...]) -> OrderedDict[Any, Any]:
    """``collections.OrderedDict()`` or ``OrderedDict([[key, value], ...])``.

    torch passes no arguments; files of torch 0.4 pass the pairs. A key given twice is a
    FormatError.
    """
    made: OrderedDict[Any, Any] = OrderedDict()
    if not args:
        return made
    if len(args) != 1 or type(args[0]) not in (list, tuple):
        raise FormatError("expected no arguments or one list of pairs")
    pairs: list[Any] = []
    for pair in args[0]:
        if type(pair) not in (list, tuple) or len(pair) != 2:
            raise FormatError(f"an item is {describe(pair)}, not a [key, value] pair")
        pairs.extend(pair)
    set_dict_items(m, made, pairs)
    return made


def make_set(frozen: bool) -> Any:
    """The rule of ``builtins.set`` / ``frozenset``: a ``PickledSet`` of a list's items."""

    def make(m: Machine, args: tuple[Any, ...]) -> PickledSet:
        if len(args) > 1 or (args and type(args[0]) not in (list, tuple)):
            raise FormatError("expected no arguments or one list of items")
        return fill_set(m, args[0] if args else [], PickledSet(frozen))

    return make


def fill_set(m: Machine, items: list[Any] | tuple[Any, ...], target: PickledSet) -> PickledSet:
    """Add ``items`` to ``target`` (each charged); an item that is not hashable data fails.

    Large bytes held as a view of the pickle are copied (a set item is a value of its own).
    """
    # Each item costs a slot and the key that tells it apart (see data_key), whose
    # text is measured and charged before it is made.
    m.spend(2 * ITEM_BYTES * len(items), "set items")
    for item in items:
        if type(item) is memoryview:
            m.spend(TEXT_BYTES + len(item), "set items")
            item = item.tobytes()
        m.spend(key_bytes(item), "set items")
        if not target.add(item):
            raise FormatError(f"set item {describe(item)} is not a plain scalar or tuple")
    return target


def complex_text(m: Machine, args: tuple[Any, ...]) -> str:
    """``complex(real, imag)``: Python's text of the number, ``"(1+2j)"``."""
    if len(args) > 2 or any(type(part) not in (int, float) for part in args):
        raise FormatError("expected at most two numbers (real, imaginary)")
    text = str(complex(*args))
    m.spend(TEXT_BYTES + len(text), "texts")
    return text


def bytes_of(m: Machine, args: tuple[Any, ...]) -> bytes | memoryview:
    """``bytes()`` / ``bytearray()``, of bytes, or of ``(text, "latin-1")`` (protocol 2).

    Text is encoded as ``_codecs.encode`` does, within the pickle's bytes budget.
    """
    if not args:
        return b""
    if len(args) == 1 and type(args[0]) in (bytes, memoryview):
        value: bytes | memoryview = args[0]
        return value
    if len(args) == 2 and type(args[0]) is str and args[1] in ("latin1", "latin-1"):
        return latin1(m, args[0])
    raise FormatError("expected no arguments, bytes, or (text, 'latin-1')")


def latin1(m: Machine, text: str) -> bytes:
    """The bytes protocol 2 stores as latin-1 text.

    All such bytes together may not exceed the pickle's own size (the text is in the
    pickle; a memo reference may not encode it again and again).
    """
    m.bytes_budget -= len(text)
    if m.bytes_budget < 0:
        raise LimitError("the pickle makes more bytes than it holds")
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise FormatError("the text holds characters beyond latin-1") from None


def path_text(separator: str) -> Any:
    """The rule of a path class: its parts joined by ``separator``.

    A part that already ends with the separator (the root ``/``, a drive's ``C:\\``)
    and a bare drive (``C:``) take no separator after them, as ``str(path)`` has it.
    """

    def make(m: Machine, args: tuple[Any, ...]) -> str:
        if any(type(part) is not str for part in args):
            raise FormatError("every part of a path must be a str")
        m.spend(TEXT_BYTES + sum(len(part) + 1 for part in args), "paths")
        pieces: list[str] = []
        for index, part in enumerate(args):
            pieces.append(part)
            last = index == len(args) - 1
            anchor = part.endswith(separator) or (
                separator == "\\" and index == 0 and len(part) == 2 and part[1] == ":"
            )
            if not last and not anchor:
                pieces.append(separator)
        return "".join(pieces)

    return make


def device_text(m: Machine, args: tuple[Any, ...]) -> str:
    """``torch.device(type[, index])``: its text, ``"cpu"``, ``"cuda:0"``."""
    if not 1 <= len(args) <= 2 or type(args[0]) is not str or not _DEVICE.fullmatch(args[0]):
        raise FormatError("expected a device type such as 'cpu' or 'cuda:0' (and an index)")
    if len(args) == 1 or args[1] is None:
        return args[0]
    index = args[1]
    if type(index) is not int or not 0 <= index < 1 << 16 or ":" in args[0]:
        raise FormatError(f"the device index {describe(index)} is not an int in [0, 65536)")
    return f"{args[0]}:{index}"


def layout_text(m: Machine, args: tuple[Any, ...]) -> str:
    """``_get_layout(name)``: only ``"torch.strided"``, the layout of a dense tensor."""
    if args != ("torch.strided",):
        raise FormatError(f"only the layout 'torch.strided' is data, found {describe(args)}")
    return "torch.strided"


def rebuild_from_type(m: Machine, args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_from_type_v2(func, type, args, state)``: the tensor ``func`` describes.

    ``func`` must be a tensor rebuild rule and ``type`` ``torch.Tensor`` or ``Parameter``;
    ``state`` (the tensor's Python attributes: None, a dict, or a dict and slots pair) is
    dropped.
    """
    if len(args) != 4:
        raise FormatError(f"expected 4 arguments, found {len(args)}")
    func, kind, inner, state = args
    if not isinstance(func, Global) or func.name not in _TENSOR_RULES or func.rule is None:
        raise FormatError(f"the function {describe(func)} is not a tensor rebuild function")
    if not isinstance(kind, Global) or kind.name not in TENSOR_TYPES:
        raise FormatError(f"the type {describe(kind)} is not torch.Tensor or Parameter")
    if type(inner) is not tuple:
        raise FormatError(f"the arguments are {describe(inner)}, not a tuple")
    parts = state if type(state) is tuple and len(state) == 2 else (state,)
    if any(part is not None and type(part) not in (dict, OrderedDict) for part in parts):
        raise FormatError(f"the state must be a dict, found {describe(state)}")
    made = func.rule(m, inner)
    if type(made) is not TensorRef:
        raise FormatError(f"{func.name} did not describe a tensor")
    return made
