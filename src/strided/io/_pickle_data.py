"""What the pickle interpreter builds besides plain data, and torch's rebuild rules as data.

``Global`` is an allow-listed name held as a marker; ``StorageRef`` a storage that a
persistent id names; ``TensorRef`` a tensor that ``_rebuild_tensor_v2``/``_v3`` or
``_rebuild_parameter`` describes (a view of a storage); ``TorchSize`` and ``PickledSet``
hold a ``torch.Size`` and a set as data; ``IntKey`` is an int dict key; a ``Record`` is
an object of a global that only lenient mode admits, held inert.

Nothing a file wrote is ever hashed by its raw Python value: an int's hash is the int
modulo 2**61 - 1, so a file could make thousands of keys collide and every insert walk
all the others. Int dict keys are ``IntKey``s hashed by their decimal text, and set
items are told apart by ``scalar_key`` (text and bytes, whose hashing Python
randomizes per process). The rebuild rules only check their arguments and
record them: nothing is called, and the reader later checks each view against the real
size of its storage. Errors here carry no location; the interpreter adds it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .._core.dtype import DType
from .._core.errors import DataError, FormatError, LimitError
from .._core.limits import MAX_PICKLE_STRIDE as _MAX_STRIDE
from .._core.limits import check_dims

__all__ = [
    "Global",
    "IntKey",
    "PickledSet",
    "Record",
    "StorageRef",
    "TensorRef",
    "TorchSize",
    "describe",
    "ordered_dict",
    "rebuild_parameter",
    "rebuild_tensor",
    "scalar_key",
    "torch_size",
]

SCALARS = (type(None), bool, int, float, str, bytes)


class Global:
    """An allow-listed global held as data: a rebuild rule, a storage type or a dtype."""

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
        self.kind = kind  # "call", "storage", "untyped", "dtype" or "record"
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
    """

    __slots__ = ("args", "callee", "items", "kwargs", "listed", "module", "name", "state")

    def __init__(
        self, module: str, name: str, args: tuple[Any, ...], callee: Record | None = None
    ) -> None:
        self.module = module
        self.name = name
        self.args = args
        self.callee = callee
        self.kwargs: dict[Any, Any] = {}
        self.state: object = None
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


class IntKey:
    """An int dict key, hashed and compared by its decimal ``text`` (never by the int).

    ``value`` is the int; ``str()`` gives its text, which is also its dotted name. An
    ``IntKey`` equals only an ``IntKey`` of the same int, so the str key ``"1"`` and the
    int key ``1`` stay two keys, as in Python.
    """

    __slots__ = ("text", "value")

    def __init__(self, value: int) -> None:
        self.value = value
        self.text = str(value)

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return type(other) is IntKey and other.text == self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"IntKey({self.text})"


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
        return ("b", item)
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
    """A set or frozenset of plain scalars, kept in stored order.

    An item equal to one already there (see ``scalar_key``) is dropped, as Python's
    set drops it.
    """

    __slots__ = ("_seen", "frozen", "items")

    def __init__(self, frozen: bool) -> None:
        self.frozen = frozen
        self.items: list[object] = []
        self._seen: set[tuple[str, object]] = set()

    def add(self, item: object) -> None:
        """Add ``item`` unless an equal one is there (the caller checked it is a scalar)."""
        key = scalar_key(item)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(item)


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
    if type(value) is IntKey:
        return describe(value.value)
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def ordered_dict(args: tuple[Any, ...]) -> OrderedDict[Any, Any]:
    """``collections.OrderedDict()``: a new empty ordered dict (torch passes no arguments)."""
    if args:
        raise FormatError(f"expected no arguments, found {len(args)}")
    return OrderedDict()


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
    if type(hooks) not in (dict, OrderedDict) or hooks:
        raise FormatError("backward hooks must be an empty OrderedDict")


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
        if not isinstance(marker, Global) or marker.kind != "dtype" or marker.dtype is None:
            raise FormatError(f"the dtype is {describe(marker)}, not a torch dtype")
        dtype = marker.dtype
    if type(offset) is not int or offset < 0:
        raise FormatError(f"the storage offset {describe(offset)} is not an int >= 0")
    dims = _dims(size)
    if type(stride) is not tuple or len(stride) != len(dims):
        raise FormatError(f"the stride must be a tuple of {len(dims)} ints")
    if any(type(step) is not int or not 0 <= step < _MAX_STRIDE for step in stride):
        raise FormatError(f"every stride must be an int in [0, 2**48), found {describe(stride)}")
    _check_flags(requires_grad, hooks)
    negate = _negative_bit(args[fixed] if len(args) > fixed else None, dtype)
    return TensorRef(storage, offset, dims, stride, dtype, negate)


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
