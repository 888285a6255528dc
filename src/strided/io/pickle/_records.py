"""Globals as the interpreter resolves them, and the inert records of lenient mode.

``resolve`` turns what ``GLOBAL``/``STACK_GLOBAL``/``INST`` name into the marker the
stack holds: the name is first renamed as Python's unpickler renames the globals of
protocols 0-2 (``__builtin__.set`` -> ``builtins.set``, ``copy_reg`` -> ``copyreg``,
``commands`` -> ``subprocess``; the tables are the standard library's
``_compat_pickle``, plain dictionaries of names), recorded in the machine's
``imports`` (first use, charged to the parse budget), then looked up in the allow-list.
A name outside it is a FormatError in strict mode; in lenient mode it becomes a
``Global`` of kind ``"record"``.

Applying a record global (``REDUCE``, ``NEWOBJ``, ``NEWOBJ_EX``, ``INST``, ``OBJ``) makes
a ``Record`` holding the arguments; ``BUILD``, ``SETITEM(S)`` and ``APPEND(S)`` on a
record store what they are given. Nothing is imported, looked up or called: a record is
the file's words, kept as data for the reader to walk.
"""

from __future__ import annotations

from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from typing import TYPE_CHECKING, Any

from .._budget import ITEM_BYTES, OBJECT_BYTES, text_bytes
from ._data import Global, Record, describe
from ._globals import UNSUPPORTED

if TYPE_CHECKING:
    from ._machine import Machine

__all__ = ["build_record", "call_record", "extend_record", "resolve", "set_record_items"]

# What a Record costs: the object and its empty kwargs, items and listed (about 290
# bytes measured with tracemalloc), charged in full so a pickle of a few bytes per
# record cannot build memory many times its budget.
RECORD_BYTES = 5 * OBJECT_BYTES


def renamed(module: str, name: str, protocol: int) -> tuple[str, str]:
    """``(module, name)`` as Python's unpickler reads it in a pickle of ``protocol``."""
    if protocol >= 3:
        return module, name
    found = NAME_MAPPING.get((module, name))
    if found is not None:
        return found
    return IMPORT_MAPPING.get(module, module), name


def resolve(m: Machine, module: object, name: object) -> Global:
    """The marker for global ``module.name``; records the import first (even if refused)."""
    if type(module) is not str or type(name) is not str:
        raise m.fail("module and name must be strings")
    module, name = renamed(module, name, m.protocol)
    if (module, name) not in m.imports:
        m.spend(2 * ITEM_BYTES, "imports")  # the pair; its texts are the pickle's own
        m.imports[(module, name)] = None
    # The dotted name is new text (transient in strict mode, kept by a lenient global).
    m.spend(text_bytes(len(module) + 1 + len(name), module, name), "globals")
    full = f"{module}.{name}"
    found = m.table.get(full)
    if found is not None:
        return found
    if m.lenient:
        m.spend(OBJECT_BYTES, "globals")
        return Global(full, "record", origin=(module, name))
    reason = UNSUPPORTED.get(
        full,
        "is not an allowed global (nothing is imported; "
        "lenient=True / --lenient reads it as an inert record)",
    )
    raise m.fail(f"{full[:120]} {reason}")


def call_record(m: Machine, func: object, args: object) -> Record | None:
    """The record ``func(*args)`` makes when ``func`` is a record global or a record.

    Returns None when ``func`` is neither (the caller applies its own rules).
    """
    if isinstance(func, Global) and func.kind == "record":
        module, name = func.origin
        callee = None
    elif type(func) is Record:
        module, name, callee = func.module, func.name, func
    else:
        return None
    if type(args) is not tuple:
        # TorchScript's pickler applies an Enum class to its value alone; kept as one
        # argument (Python's unpickler would refuse it, but nothing is called here).
        args = (args,)
    m.spend(RECORD_BYTES + ITEM_BYTES * len(args), "records")
    if (module, name) == ("copyreg", "_reconstructor") and callee is None and args:
        # Protocols 0 and 1 make an object as _reconstructor(cls, base, state): a record
        # of ``cls`` (the base's state, given for builtin bases, is kept as its args).
        made = args[0]
        if isinstance(made, Global) and made.kind == "record":
            return Record(*made.origin, args[2:])
    return Record(module, name, args, callee)


def build_record(m: Machine, record: Record, state: object) -> None:
    """``BUILD`` on a record, as Python's default ``BUILD`` fills an object.

    An attribute state (a dict, or a ``(dict or None, slots dict or None)`` pair) is
    copied into the record's own attributes, which a further ``BUILD`` updates: the
    state dict itself is never changed, as Python updates the object's ``__dict__``
    and never the dict it was given (the file may refer to that dict elsewhere). Any
    other state (a class with ``__setstate__``) is kept as it is, the last one standing.
    """
    given = _attributes(state)
    if given is None:
        record.state = state
        record.owned = False
        return
    attributes, slots = given
    held = _attributes(record.state) if record.owned else None
    own_attributes, own_slots = (None, None) if held is None else held
    for part in (attributes, slots):
        if part is not None:
            m.spend(OBJECT_BYTES + ITEM_BYTES * len(part), "record state")
    if attributes is not None:
        own_attributes = {} if own_attributes is None else own_attributes
        own_attributes.update(attributes)
    if slots:  # Python sets slot attributes only from a non-empty slots dict
        own_slots = {} if own_slots is None else own_slots
        own_slots.update(slots)
    record.state = own_attributes if own_slots is None else (own_attributes, own_slots)
    record.owned = True


def _attributes(state: object) -> tuple[dict[Any, Any] | None, dict[Any, Any] | None] | None:
    """``(attributes, slots)`` of an attribute state; None for any other state."""
    if isinstance(state, dict):
        return state, None
    if type(state) is not tuple or len(state) != 2:
        return None
    first, second = state
    if all(part is None or isinstance(part, dict) for part in state):
        return first, second
    return None


def set_record_items(m: Machine, record: Record, items: list[Any]) -> None:
    """``SETITEM(S)`` on a record: its items, keyed as dict keys are (one value per key)."""
    if len(items) % 2:
        raise m.fail("an odd number of items (keys and values come in pairs)")
    m.spend(ITEM_BYTES * len(items), "record items")
    for index in range(0, len(items), 2):
        key = m.key(items[index])
        if key in record.items:
            raise m.fail(f"item {describe(key)} is set twice on {describe(record)}")
        record.items[key] = items[index + 1]


def extend_record(m: Machine, record: Record, items: list[Any]) -> None:
    """``APPEND(S)`` on a record: what it lists, in order."""
    m.spend(ITEM_BYTES * len(items), "record items")
    record.listed.extend(items)
