"""Naming what a pickle built: every tensor and plain leaf by its dotted path.

The walk behind ``PyTorchFile``. Tensors anywhere inside nested dicts, lists and tuples
(and sets, read as lists in stored order) are named by the dotted path of keys (list
items and int keys by their decimal text); a bare tensor at the top level is named
after the file's stem. Plain leaves (None, bool, int, float, str, and ``torch.Size`` as
a list of ints) are the metadata, under the same dotted names. Bytes, dtypes, bare
storages and globals held as values (a class named but never called) are neither
tensors nor metadata and are not reported; an ``OrderedDict``'s attributes (a state
dict's ``_metadata``) are ignored. A name produced twice is a FormatError.

Records (objects of globals that only lenient mode admits, held inert) are walked too:

* A record whose state holds ``_parameters``, ``_buffers`` and ``_modules`` (each a
  dict) is a ``torch.nn.Module`` and is named as ``Module.state_dict()`` names it,
  without hooks: its non-None ``_parameters``, then its non-None ``_buffers`` not named
  in ``_non_persistent_buffers_set``, then each non-None child of ``_modules``,
  recursively (``encoder.layers.0.weight``). A child shared by two paths is named
  under each (its entries are sorted out once, at its first visit), and a tensor held
  twice (tied weights) gives two names of one storage, as in ``state_dict()``. Every
  other attribute of a module (``training``, sizes, hook dicts, plain tensors that were
  never registered) is not part of its state dict and is dropped: neither tensors nor
  metadata. ``_extra_state`` (a module's ``get_extra_state()``) and names that
  state-dict hooks would change need the module's code and are not reproduced.
* Any other record is named like a dict of its parts, in the order the pickle gives
  them: its call arguments by position (``0``, ``1``, ... as a tuple's items; a
  namedtuple's fields), its keyword arguments (``NEWOBJ_EX``) by keyword, what
  ``APPEND(S)`` added by position (a list subclass), what ``SETITEM(S)`` stored by key
  (a dict subclass), then its ``BUILD`` state: a dict state (an object's ``__dict__``)
  or a ``(dict, slots dict)`` pair by attribute name (``config.hidden_size``), any
  other state under the name ``state``. The record a record was "called" on (a
  ``getattr`` chain) is not walked: only the call's own arguments are.
* An OmegaConf config (``DictConfig``/``ListConfig``, as Lightning's
  ``save_hyperparameters`` keeps one) is named as the plain config it holds, as
  ``OmegaConf.to_container`` gives it without resolving interpolations:
  ``hyper_parameters.cfg.model.hidden``, list items by position; each value node
  (``AnyNode``, ``IntegerNode``, ``UnionNode``, ...) is its value, and a node's
  ``_metadata``, ``_parent`` and flags are not reported. Nothing of OmegaConf is
  imported or run: the records are read as the file spells them.
* A record met again inside itself (an object holding a reference back to its owner)
  is not walked again there; nothing is named for the back-reference.

The walk visits at most about two values per pickle byte, so shared containers (memo
references) that would multiply into an enormous tree are refused, and nests at most
``MAX_PYTORCH_NESTING`` levels. Every name is charged to the open's budget before it
is built, and every metadata leaf by its size, each time a walk reaches it; a text costs
what CPython stores it in (four bytes a character once one lies beyond the Basic
Multilingual Plane).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..._core.errors import FormatError, LimitError
from ..._core.limits import MAX_PYTORCH_NAME as _MAX_NAME
from ..._core.limits import MAX_PYTORCH_NESTING as _MAX_NESTING
from ..._core.stored_float import STORED_FLOATS
from .._budget import ITEM_BYTES, OBJECT_BYTES, ParseBudget, text_bytes
from ._data import Global, PickledSet, Record, TensorRef, TorchSize
from ._numpy import ArrayRef, NumpyDType

__all__ = ["Leaf", "flatten"]

Leaf = str | int | float | bool | list[int] | None

# NumPy float scalars are floats that keep their stored type (``_numpy.scalar``).
_LEAVES = (type(None), bool, int, float, str, *STORED_FLOATS.values())
_MODULE_PARTS = ("_parameters", "_buffers", "_modules")
_SETS = ("set", "frozenset")
# OmegaConf's containers: their nodes are their ``_content`` (a dict or a list).
_CONFIGS = {("omegaconf.dictconfig", "DictConfig"), ("omegaconf.listconfig", "ListConfig")}


def flatten(
    root: object, stem: str, where: str, pickle_bytes: int, budget: ParseBudget
) -> tuple[dict[str, TensorRef | ArrayRef], dict[str, Leaf]]:
    """Name every tensor and plain leaf of ``root`` by its dotted path, without recursion.

    ``stem`` names a bare top-level tensor or leaf; ``pickle_bytes`` (the pickle's size)
    bounds the visits. Raises FormatError for a name produced twice or nesting deeper
    than the cap, LimitError for too many visits, a name too long or the budget spent.
    """
    tensors: dict[str, TensorRef | ArrayRef] = {}
    metadata: dict[str, Leaf] = {}
    visits = 2 * pickle_bytes + 4096

    def leaf(name: str, value: object) -> None:
        if name in tensors or name in metadata:
            raise FormatError(f"{where}: the name {name[:120]!r} is produced twice")
        if type(value) is TensorRef:
            tensors[name] = value
        elif type(value) is ArrayRef:
            if not value.built:
                raise FormatError(f"{where}: the NumPy array {name[:120]!r} has no state")
            tensors[name] = value
        elif type(value) is NumpyDType or (isinstance(value, Global) and value.kind == "dtype"):
            # A dtype on its own: its name (NumPy's "float32", torch's "torch.float32").
            budget.charge(text_bytes(len(value.name), value.name), "metadata texts")
            metadata[name] = value.name
        elif type(value) in _LEAVES:
            if type(value) is str:
                budget.charge(text_bytes(len(value), value), "metadata texts")
            metadata[name] = value  # type: ignore[assignment]
        elif type(value) is TorchSize:
            budget.charge_items(len(value.dims), "metadata sizes")
            metadata[name] = list(value.dims)

    root = _config_value(root)
    if not _is_container(root):
        budget.charge(ITEM_BYTES + text_bytes(len(stem), stem), "dotted names")
        leaf(stem, root)
        return tensors, metadata
    # Each level: its children, its dotted name, and the id of the record it walks (the
    # records being walked are ``inside``: one met again there is a back-reference).
    # A module's state-dict entries, made once per module record however many parents
    # share it (each visit then costs only the names it yields).
    entries: dict[int, list[tuple[str, object]]] = {}
    stack: list[tuple[Iterator[tuple[str, object]], str, int]] = [
        (_children(root, entries, budget), "", _record_id(root))
    ]
    inside = {stack[0][2]}
    while stack:
        children, prefix, owner = stack[-1]
        step = next(children, None)
        if step is None:
            stack.pop()
            inside.discard(owner)
            continue
        visits -= 1
        if visits < 0:
            raise LimitError(f"{where}: the data refers to its parts too many times")
        key, value = step
        value = _config_value(value)
        if type(value) is Record and id(value) in inside:
            continue
        if len(prefix) + len(key) >= _MAX_NAME:
            raise LimitError(f"{where}: a dotted name longer than {_MAX_NAME} characters")
        # The name's text (at CPython's width for its widest character) and its slot in
        # the tables, charged before it is built.
        length = len(prefix) + 1 + len(key)
        budget.charge(ITEM_BYTES + text_bytes(length, prefix, key), "dotted names")
        name = f"{prefix}.{key}" if prefix else key
        if not _is_container(value):
            leaf(name, value)
        elif len(stack) >= _MAX_NESTING:
            raise FormatError(f"{where}: containers nest deeper than {_MAX_NESTING} levels")
        else:
            record = _record_id(value)
            inside.add(record)
            stack.append((_children(value, entries, budget), name, record))
    return tensors, metadata


def _is_container(value: object) -> bool:
    return isinstance(value, (dict, list, tuple, PickledSet, Record))


def _record_id(value: object) -> int:
    """The id of a record (0 for anything else: never the id of a live record)."""
    return id(value) if type(value) is Record else 0


def _text(key: object) -> str:
    """A dict key's dotted-name part: a str as it is, an int key by its decimal text."""
    return key if type(key) is str else str(key)


def _children(
    node: object, entries: dict[int, list[tuple[str, object]]], budget: ParseBudget
) -> Iterator[tuple[str, object]]:
    """``node``'s (name part, value) pairs; a module's come from ``entries`` (by the
    record's identity: every record lives as long as the walk), made at its first visit."""
    if type(node) is Record:
        content = _config_content(node)
        if isinstance(content, dict):
            return ((_text(key), value) for key, value in content.items())
        if isinstance(content, list):
            return ((str(index), value) for index, value in enumerate(content))
        found = entries.get(id(node))
        if found is not None:
            return iter(found)
        parts = _module_parts(node.state)
        if parts is None:
            return _record_children(node)
        listed = list(_module_children(*parts))
        budget.charge(OBJECT_BYTES + ITEM_BYTES * len(listed), "module entries")
        entries[id(node)] = listed
        return iter(listed)
    if isinstance(node, dict):
        return ((_text(key), value) for key, value in node.items())
    items = node.ordered() if type(node) is PickledSet else node
    assert isinstance(items, (list, tuple))
    return ((str(index), value) for index, value in enumerate(items))


def _config_content(record: Record) -> object:
    """The ``_content`` of an OmegaConf ``DictConfig``/``ListConfig`` record (its nodes
    by key or position; None, or a ``???``/``${...}`` text, for a config holding no
    container); None for any other record."""
    if (record.module, record.name) not in _CONFIGS or not isinstance(record.state, dict):
        return None
    return record.state.get("_content")


def _config_value(value: object) -> object:
    """An OmegaConf node as ``OmegaConf.to_container`` gives it (unresolved), else
    ``value`` itself.

    A value node (``AnyNode``, ``IntegerNode``, ...: a record of ``omegaconf.nodes``
    whose state holds ``_val``) is its value; a ``UnionNode`` is what it holds; a
    config whose content is not a container is that content (None, ``???``,
    ``${...}``). A config holding a dict or list stays a record, walked by its content.
    """
    for _ in range(3):  # a union node holds a value node, which holds a value
        if type(value) is not Record or not value.module.startswith("omegaconf."):
            return value
        state = value.state
        if not isinstance(state, dict):
            return value
        if (value.module, value.name) in _CONFIGS:
            content = state.get("_content")
            return value if isinstance(content, (dict, list)) else content
        if "_val" in state:
            value = state["_val"]
        elif value.name == "UnionNode" and "_content" in state:
            value = state["_content"]
        else:
            return value
    return value


def _record_children(record: Record) -> Iterator[tuple[str, object]]:
    """A record's parts in pickle order: arguments, listed items, set items, state."""
    for index, value in enumerate(record.args):
        yield str(index), value
    for key, value in record.kwargs.items():
        yield _text(key), value
    for index, value in enumerate(record.listed):
        yield str(index), value
    for key, value in record.items.items():
        yield _text(key), value
    state = record.state
    dicts = _state_dicts(state)
    if dicts is None:
        if state is not None:
            yield "state", state
        return
    for part in dicts:
        for key, value in part.items():
            yield _text(key), value


def _state_dicts(state: object) -> list[dict[object, object]] | None:
    """The dicts of attributes a BUILD state holds: ``__dict__`` and the slots' dict.

    ``[state]`` for a dict, the non-None halves of a ``(dict or None, dict or None)``
    pair, None for any other state.
    """
    if isinstance(state, dict):
        return [state]
    if type(state) is not tuple or len(state) != 2:
        return None
    if not all(part is None or isinstance(part, dict) for part in state):
        return None
    return [part for part in state if part is not None]


def _module_parts(
    state: object,
) -> tuple[dict[object, object], dict[object, object], dict[object, object], set[str]] | None:
    """``(parameters, buffers, modules, non-persistent buffer names)`` of a module's
    state; None when the state is not a ``torch.nn.Module``'s."""
    dicts = _state_dicts(state)
    attributes = dicts[0] if dicts else None
    if attributes is None:
        return None
    parts = [attributes.get(key) for key in _MODULE_PARTS]
    if not all(isinstance(part, dict) for part in parts):
        return None
    parameters, buffers, modules = parts
    assert isinstance(parameters, dict) and isinstance(buffers, dict)
    assert isinstance(modules, dict)
    return parameters, buffers, modules, _names(attributes.get("_non_persistent_buffers_set"))


def _names(found: object) -> set[str]:
    """The names in a pickled set of str: a set, a list or tuple, or a ``set`` record.

    A set is a ``PickledSet`` (protocol 4), a list (a set read as data), or, read
    leniently, a ``builtins.set``/``frozenset`` record whose argument lists them. Items
    that are not text name no buffer and are ignored.
    """
    if type(found) is Record and found.module == "builtins" and found.name in _SETS:
        found = found.args[0] if len(found.args) == 1 else ()
    if type(found) is PickledSet:
        found = found.items
    if not isinstance(found, (list, tuple)):
        return set()
    return {item for item in found if type(item) is str}


def _module_children(
    parameters: dict[object, object],
    buffers: dict[object, object],
    modules: dict[object, object],
    transient: set[str],
) -> Iterator[tuple[str, object]]:
    """A module's state-dict entries: parameters, persistent buffers, then children."""
    for key, value in parameters.items():
        if value is not None:
            yield _text(key), value
    for key, value in buffers.items():
        if value is not None and _text(key) not in transient:
            yield _text(key), value
    for key, value in modules.items():
        if value is not None:
            yield _text(key), value
