"""What the pickle interpreter builds besides plain data, and torch's rebuild rules as data.

``Global`` is an allow-listed name held as a marker; ``StorageRef`` a storage that a
persistent id names; ``TensorRef`` a tensor that ``_rebuild_tensor_v2``/``_v3`` or
``_rebuild_parameter`` describes (a view of a storage); ``TorchSize`` and ``PickledSet``
hold a ``torch.Size`` and a set as data; ``DataKey`` is a dict key that is not a str
(int, float, bool, None, tuple); a ``Record`` is an object of a global that only lenient
mode admits, held inert.

Nothing a file wrote is ever hashed by its raw Python value: an int's hash is the int
modulo 2**61 - 1, so a file could make thousands of keys collide and every insert walk
all the others. Dict keys that are not str and set items are told apart by their
canonical text (``data_key``, ``scalar_key``), whose hashing Python randomizes per
process. The rebuild rules only check their arguments and
record them: nothing is called, and the reader later checks each view against the real
size of its storage. Errors here carry no location; the interpreter adds it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..._core.dtype import DType
from ..._core.errors import DataError, FormatError, LimitError
from ..._core.limits import MAX_PICKLE_STRIDE as _MAX_STRIDE
from ..._core.limits import check_dims
from ..._core.stored_float import StoredFloat
from .._budget import OBJECT_BYTES, TEXT_BYTES, char_bytes

__all__ = [
    "DataKey",
    "Global",
    "IntKey",
    "PickledSet",
    "Record",
    "StorageRef",
    "TensorRef",
    "TorchSize",
    "data_key",
    "describe",
    "key_bytes",
    "rebuild_legacy_tensor",
    "rebuild_parameter",
    "rebuild_tensor",
    "scalar_key",
    "torch_size",
]

SCALARS = (type(None), bool, int, float, str, bytes)


class Global:
    """An allow-listed global held as data: a rule, a type, a storage type or a dtype.

    Kinds: ``"call"`` (``REDUCE`` applies ``rule``), ``"class"`` (``REDUCE`` and
    ``NEWOBJ`` apply ``rule``: an object made empty, then filled), ``"type"`` (a marker
    only: an argument of another rule, such as ``numpy.ndarray`` or a
    ``defaultdict``'s factory; ``dtype`` set for ``ml_dtypes`` types), ``"storage"``,
    ``"untyped"``, ``"dtype"`` (``dtype`` None for a torch dtype strided has no DType
    for: data on its own, refused as a tensor's type) and ``"record"`` (lenient mode).
    """

    __slots__ = ("dtype", "kind", "name", "origin", "rule")

    def __init__(
        self,
        name: str,
        kind: str,
        dtype: DType | None = None,
        rule: Callable[[Any, tuple[Any, ...]], object] | None = None,
        origin: tuple[str, str] = ("", ""),
    ) -> None:
        self.name = name  # "module.qualname"
        self.kind = kind  # see the class docstring
        self.dtype = dtype
        self.rule = rule
        self.origin = origin  # (module, qualname) of a "record" global


class Record:
    """An object of a global strict mode does not understand, held inert (lenient mode).

    Made by ``REDUCE``/``NEWOBJ``/``NEWOBJ_EX``/``INST``/``OBJ`` of a lenient global:
    ``module`` and ``name`` say what the file named (never imported), ``args`` the
    arguments it was given (``kwargs`` those of ``NEWOBJ_EX``), ``state`` what ``BUILD``
    gave it (None until then), ``items`` what ``SETITEM(S)`` stored (keys as dict keys
    are held: str or ``IntKey``) and ``listed`` what ``APPEND(S)`` added. ``callee`` is
    the record that was "called" when the file applies a record's result again
    (``getattr(x, "system")("ls")``): nothing is ever called, the chain is only kept.
    ``owned`` is True once ``state`` is the record's own attributes (a dict, or a
    ``(dict or None, slots dict)`` pair, made by ``BUILD`` and shared with nothing else
    the file refers to), which a further ``BUILD`` updates in place.
    """

    __slots__ = (
        "args",
        "callee",
        "items",
        "kwargs",
        "listed",
        "module",
        "name",
        "owned",
        "state",
    )

    def __init__(
        self, module: str, name: str, args: tuple[Any, ...], callee: Record | None = None
    ) -> None:
        self.module = module
        self.name = name
        self.args = args
        self.callee = callee
        self.kwargs: dict[Any, Any] = {}
        self.state: object = None
        self.owned = False
        self.items: dict[Any, Any] = {}
        self.listed: list[Any] = []

    def __repr__(self) -> str:
        return f"Record({self.module}.{self.name})"


class StorageRef:
    """A storage named by a persistent id: its key, element type and element count."""

    __slots__ = ("dtype", "key", "numel", "untyped")

    def __init__(self, key: str, dtype: DType, numel: int, untyped: bool) -> None:
        self.key = key
        self.dtype = dtype  # U8 for an untyped storage, whose numel counts bytes
        self.numel = numel
        self.untyped = untyped

    @property
    def nbytes(self) -> int:
        """The storage's size in bytes."""
        return self.numel * self.dtype.itemsize


class TensorRef:
    """A tensor as a rebuild call describes it: a view (offset, dims, strides) of a storage.

    ``offset`` and ``strides`` count elements of ``dtype``; ``negate`` is torch's negative
    bit (the logical values are the stored ones negated).
    """

    __slots__ = ("dims", "dtype", "negate", "offset", "parameter", "storage", "strides")

    def __init__(
        self,
        storage: StorageRef,
        offset: int,
        dims: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: DType,
        negate: bool,
        parameter: bool = False,
    ) -> None:
        self.storage = storage
        self.offset = offset
        self.dims = dims
        self.strides = strides
        self.dtype = dtype
        self.negate = negate
        self.parameter = parameter


class TorchSize:
    """A ``torch.Size``: a shape held as data."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[int, ...]) -> None:
        self.dims = dims


class DataKey:
    """A dict key that is not a str (int, float, bool, None or a tuple of such keys).

    ``value`` is the key as Python holds it, ``text`` its text (Python's ``str()``, which
    is also its dotted name: ``3``, ``0.5``, ``True``, ``None``, ``(1, 'a')``) and
    ``canon`` what equality goes by: equal for keys Python counts equal (``1``, ``1.0``
    and ``True`` share one), and a str, so its hash is Python's randomized text hash,
    never a hash the file chooses (an int's hash is the int modulo 2**61 - 1). A
    ``DataKey`` never equals a str key: the str ``"1"`` and the int ``1`` stay two keys.
    Made by ``data_key``.
    """

    __slots__ = ("canon", "text", "value")

    def __init__(self, value: object, canon: str, text: str) -> None:
        self.value = value
        self.canon = canon
        self.text = text

    def __hash__(self) -> int:
        return hash(self.canon)

    def __eq__(self, other: object) -> bool:
        return type(other) is DataKey and other.canon == self.canon

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"DataKey({self.text})"


# The older name of ``DataKey`` (int dict keys were the only keys that were not str).
IntKey = DataKey

# Tuples nested deeper than this are not keys or set items of any real checkpoint.
MAX_KEY_NESTING = 16


def data_key(value: object) -> DataKey | None:
    """The ``DataKey`` of a hashable data value, or None when ``value`` is not one.

    Hashable data values are None, bool, int, float, str, bytes and tuples of them
    (nested at most ``MAX_KEY_NESTING`` deep; deeper is a FormatError). The text of a
    tuple is Python's (``repr`` of each item); of a str or bytes alone, the str itself or
    the bytes' ``repr``. The caller charges the key's text to its budget.
    """
    found = _canon(value, 0)
    if found is None:
        return None
    canon, text = found
    return DataKey(value, canon, text)


def key_bytes(value: object) -> int:
    """What ``data_key(value)`` builds, in bytes, measured without building any of it.

    An upper bound of its text and canon (and the pieces they are joined from, which
    live until the join), at the width CPython stores their widest character in. A
    tuple the file shares (memo references) is measured once however often it recurs,
    so measuring takes time linear in the distinct objects the key holds, while the
    length it finds may be astronomically large (wide tuples of references nested 16
    deep): the caller charges it before ``data_key`` builds anything. Values that are
    not keys measure 0 (``data_key`` refuses them).
    """
    text, canon, nodes, width = _measure(value, 0, {})
    return 2 * OBJECT_BYTES + 2 * TEXT_BYTES * nodes + 2 * (text + canon) * width


# (text length, canon length, tree nodes, character width) of a measured value.
_Measure = tuple[int, int, int, int]


def _measure(value: object, depth: int, seen: dict[int, _Measure]) -> _Measure:
    """``key_bytes``'s measure of one value; ``seen`` holds those already measured (by
    identity: every value is alive while its key is measured, so no id is reused)."""
    found = seen.get(id(value))
    if found is not None:
        return found
    kind = type(value)
    if kind is tuple:
        assert isinstance(value, tuple)
        if depth >= MAX_KEY_NESTING:
            raise FormatError(f"a tuple key nests deeper than {MAX_KEY_NESTING} levels")
        text, canon, nodes, width = 3, 1, 1, 1  # "(", ",)" and "t"
        for item in value:
            part = _measure(item, depth + 1, seen)
            text += part[0] + 2  # and ", "
            canon += part[1] + len(str(part[1])) + 1  # and "<length>:"
            nodes += part[2]
            width = max(width, part[3])
        found = (text, canon, nodes, width)
    elif kind is str:
        assert isinstance(value, str)
        if value.isascii() and value.isprintable():
            shown = len(value) + 2 + value.count("\\") + value.count("'")  # repr, at most
        else:
            shown = len(repr(value))
        found = (shown, len(value) + 1, 1, char_bytes(value))
    elif kind is bytes:
        assert isinstance(value, bytes)
        found = (4 * len(value) + 3, 2 * len(value) + 2, 1, 1)
    elif kind in SCALARS:
        canon_text, shown_text = _canon(value, depth) or ("", "")
        found = (len(shown_text), len(canon_text), 1, 1)
    else:
        found = (0, 0, 1, 1)
    seen[id(value)] = found
    return found


def _canon(value: object, depth: int) -> tuple[str, str] | None:
    """``(canon, text)`` of a hashable data value (see ``DataKey``), None if not one."""
    if isinstance(value, StoredFloat):  # a NumPy float scalar: the float it equals
        value = float(value)
    kind = type(value)
    if kind is str:
        assert isinstance(value, str)
        return "s" + value, value
    if kind is tuple:
        assert isinstance(value, tuple)
        if depth >= MAX_KEY_NESTING:
            raise FormatError(f"a tuple key nests deeper than {MAX_KEY_NESTING} levels")
        canons, texts = [], []
        for item in value:
            found = _canon(item, depth + 1)
            if found is None:
                return None
            canons.append(f"{len(found[0])}:{found[0]}")
            texts.append(repr(item) if type(item) is str else found[1])
        text = "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"
        return "t" + "".join(canons), text
    if kind not in SCALARS:
        return None
    tag, canon = scalar_key(value)
    return tag + ":" + str(canon), str(value) if kind is not bytes else repr(value)


def scalar_key(item: object) -> tuple[str, object]:
    """What tells set items apart: equal for items Python counts equal, hashed as text.

    ``1``, ``1.0`` and ``True`` (and ``0.0`` and ``-0.0``) share a key, as they share a
    set slot in Python; a NaN equals only itself (the same object, as Python's identity
    check has it). The key is a tag and a str or bytes, so its hash is not the file's to
    choose. ``item`` is one of ``SCALARS``.
    """
    kind = type(item)
    if kind is str:
        return ("s", item)
    if kind is bytes:
        assert isinstance(item, bytes)
        return ("b", item.hex())
    if item is None:
        return ("z", "")
    if kind is float:
        assert isinstance(item, float)
        if item != item:
            return ("nan", str(id(item)))  # the item stays alive in the set, so its id does
        if not item.is_integer():
            return ("n", item.hex())  # inf and fractions: never equal to an int
        item = int(item)
    assert isinstance(item, int)
    return ("n", str(int(item)))


class PickledSet:
    """A set or frozenset of hashable data values (see ``data_key``), in stored order.

    An item equal to one already there is dropped, as Python's set drops it.
    ``ordered()`` gives the items in sorted text order (the order a reader reports
    them in: Python's own iteration order of a set of texts changes from run to run).
    """

    __slots__ = ("_seen", "frozen", "items", "texts")

    def __init__(self, frozen: bool) -> None:
        self.frozen = frozen
        self.items: list[object] = []
        self.texts: list[tuple[str, str]] = []  # (text, canon) of each item
        self._seen: set[str] = set()

    def add(self, item: object) -> bool:
        """Add ``item`` unless an equal one is there; False if it is not hashable data."""
        key = data_key(item)
        if key is None:
            return False
        if key.canon not in self._seen:
            self._seen.add(key.canon)
            self.items.append(item)
            self.texts.append((key.text, key.canon))
        return True

    def ordered(self) -> list[object]:
        """The items sorted by their text (ties, such as ``1`` and ``'1'``, by kind)."""
        order = sorted(range(len(self.items)), key=self.texts.__getitem__)
        return [self.items[index] for index in order]


_KINDS = {
    StorageRef: "a storage",
    TensorRef: "a tensor",
    TorchSize: "a torch.Size",
    PickledSet: "a set",
    OrderedDict: "an OrderedDict",
}


def describe(value: object) -> str:
    """A short description of a value read from a file (never its full repr)."""
    if type(value) is str:
        return repr(value[:60]) + ("..." if len(value) > 60 else "")
    if type(value) is int:
        return str(value) if -(10**30) < value < 10**30 else "a very large int"
    if type(value) in (bool, float) or value is None:
        return repr(value)
    if isinstance(value, Global):
        return value.name
    if type(value) is Record:
        return f"a {value.module}.{value.name}"[:160]
    if type(value) is DataKey:
        return describe(value.value) if type(value.value) is not tuple else "a tuple"
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def torch_size(args: tuple[Any, ...]) -> TorchSize:
    """``torch.Size((d0, d1, ...))``: a shape held as data."""
    if len(args) != 1 or type(args[0]) not in (tuple, list):
        raise FormatError("expected one tuple of ints")
    if any(type(dim) is not int for dim in args[0]):
        raise FormatError("every dim must be an int")
    return TorchSize(tuple(args[0]))


def _dims(size: object) -> tuple[int, ...]:
    if type(size) is TorchSize:
        size = size.dims
    if type(size) is not tuple or any(type(dim) is not int for dim in size):
        raise FormatError(f"the size must be a tuple of ints, found {describe(size)}")
    try:
        return check_dims(size, "size")
    except LimitError:
        raise
    except DataError as exc:
        raise FormatError(str(exc)) from None


def _check_flags(requires_grad: object, hooks: object) -> None:
    if type(requires_grad) is not bool:
        raise FormatError(f"requires_grad must be a bool, found {describe(requires_grad)}")
    # torch 0.4 wrote None where later versions write an empty OrderedDict.
    if hooks is not None and (type(hooks) not in (dict, OrderedDict) or hooks):
        raise FormatError("backward hooks must be None or an empty OrderedDict")


def _negative_bit(metadata: object, dtype: DType) -> bool:
    """torch's tensor metadata (``{'neg': True}`` for a negative view); True to negate."""
    if metadata is None:
        return False
    if type(metadata) not in (dict, OrderedDict):
        raise FormatError(f"tensor metadata must be a dict, found {describe(metadata)}")
    assert isinstance(metadata, dict)
    for key, value in metadata.items():
        if key not in ("neg", "conj") or type(value) is not bool:
            raise FormatError(f"unknown tensor metadata {describe(key)}: {describe(value)}")
    if metadata.get("conj", False):
        raise FormatError("the conjugate bit is set on a tensor that is not complex")
    negate = bool(metadata.get("neg", False))
    if negate and dtype is DType.BOOL:
        raise FormatError("the negative bit is set on a BOOL tensor")
    return negate


def rebuild_tensor(args: tuple[Any, ...], explicit_dtype: bool) -> TensorRef:
    """``_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, meta])``.

    With ``explicit_dtype`` (``_v3``) a dtype global follows the hooks and sets the
    element type; otherwise the storage's type does.
    """
    fixed = 7 if explicit_dtype else 6
    if len(args) not in (fixed, fixed + 1):
        raise FormatError(f"expected {fixed} or {fixed + 1} arguments, found {len(args)}")
    storage, offset, size, stride, requires_grad, hooks = args[:6]
    if type(storage) is not StorageRef:
        raise FormatError(f"the storage is {describe(storage)}, not a storage")
    dtype = storage.dtype
    if explicit_dtype:
        marker = args[6]
        if not isinstance(marker, Global) or marker.kind != "dtype":
            raise FormatError(f"the dtype is {describe(marker)}, not a torch dtype")
        if marker.dtype is None:
            raise FormatError(f"{marker.name} is a torch dtype strided has no DType for")
        dtype = marker.dtype
    if type(offset) is not int or offset < 0:
        raise FormatError(f"the storage offset {describe(offset)} is not an int >= 0")
    dims = _dims(size)
    strides = _strides(stride, len(dims))
    _check_flags(requires_grad, hooks)
    negate = _negative_bit(args[fixed] if len(args) > fixed else None, dtype)
    return TensorRef(storage, offset, dims, strides, dtype, negate)


def rebuild_legacy_tensor(args: tuple[Any, ...]) -> TensorRef:
    """``_rebuild_tensor(storage, offset, size, stride)``, as files before torch 0.4 hold it.

    The storage's type sets the element type; there are no flags.
    """
    if len(args) != 4:
        raise FormatError(f"expected 4 arguments, found {len(args)}")
    storage, offset, size, stride = args
    if type(storage) is not StorageRef:
        raise FormatError(f"the storage is {describe(storage)}, not a storage")
    if type(offset) is not int or offset < 0:
        raise FormatError(f"the storage offset {describe(offset)} is not an int >= 0")
    dims = _dims(size)
    return TensorRef(storage, offset, dims, _strides(stride, len(dims)), storage.dtype, False)


def _strides(stride: object, rank: int) -> tuple[int, ...]:
    if type(stride) is not tuple or len(stride) != rank:
        raise FormatError(f"the stride must be a tuple of {rank} ints")
    if any(type(step) is not int or not 0 <= step < _MAX_STRIDE for step in stride):
        raise FormatError(f"every stride must be an int in [0, 2**48), found {describe(stride)}")
    return stride


def rebuild_parameter(args: tuple[Any, ...], with_state: bool) -> TensorRef:
    """``_rebuild_parameter(data, requires_grad, hooks)`` (``_with_state``: and a state).

    The state (a parameter's Python attributes) is plain data and is not kept.
    """
    count = 4 if with_state else 3
    if len(args) != count:
        raise FormatError(f"expected {count} arguments, found {len(args)}")
    data, requires_grad, hooks = args[:3]
    if type(data) is not TensorRef:
        raise FormatError(f"the data is {describe(data)}, not a tensor")
    _check_flags(requires_grad, hooks)
    if with_state:
        state = args[3]
        parts = state if type(state) is tuple and len(state) == 2 else (state,)
        if any(part is not None and type(part) not in (dict, OrderedDict) for part in parts):
            raise FormatError(f"the state must be a dict, found {describe(state)}")
    return TensorRef(
        data.storage, data.offset, data.dims, data.strides, data.dtype, data.negate, True
    )
