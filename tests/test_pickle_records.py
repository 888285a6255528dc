"""Lenient records: objects of unknown globals held inert, and the imports a pickle names.

Pickles here are written by Python's own ``pickle`` from classes defined in this test
(so the oracle is what ``pickle`` wrote); the interpreter must never import them.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, field

import pytest

import strided as st
from strided.io._pickle import interpret
from strided.io._pickle_data import Record


@dataclass
class Point:
    x: int
    y: list[int] = field(default_factory=list)


class Bag(dict):  # type: ignore[type-arg]
    """A dict subclass: pickled with SETITEMS on the new object."""


class Queue(list):  # type: ignore[type-arg]
    """A list subclass: pickled with APPENDS on the new object."""


def run(payload: bytes, lenient: bool) -> tuple[object, dict[tuple[str, str], None]]:
    imports: dict[tuple[str, str], None] = {}
    value, _ = interpret(memoryview(payload), 0, "payload", lenient=lenient, imports=imports)
    return value, imports


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_objects_become_records_with_their_state(protocol: int) -> None:
    payload = pickle.dumps({"p": Point(3, [1, 2])}, protocol=protocol)
    # Protocols 0 and 1 name copyreg._reconstructor first, then the class.
    with pytest.raises(st.FormatError, match=r"(Point|_reconstructor) is not an allowed global"):
        run(payload, lenient=False)
    value, imports = run(payload, lenient=True)
    assert isinstance(value, dict)
    record = value["p"]
    assert type(record) is Record
    assert (record.module, record.name) == (__name__, "Point")
    assert record.state == {"x": 3, "y": [1, 2]}
    assert (__name__, "Point") in imports
    assert sys.modules[__name__].Point is Point  # nothing was re-imported or replaced


@pytest.mark.parametrize("protocol", [2, 4])
def test_items_and_appends_land_in_the_record(protocol: int) -> None:
    bag = Bag(a=1, b=[2])
    queue = Queue([1, "two"])
    value, _ = run(pickle.dumps([bag, queue], protocol=protocol), lenient=True)
    assert isinstance(value, list)
    assert value[0].items == {"a": 1, "b": [2]}
    assert value[1].listed == [1, "two"]


def test_protocol_2_names_are_renamed_before_judging() -> None:
    # Protocol 2 spells builtins the Python 2 way; Python's unpickler renames them.
    payload = b"\x80\x02c__builtin__\nexec\n(X\x03\x00\x00\x00x=1tR."
    with pytest.raises(st.FormatError, match=r"builtins\.exec is not an allowed global"):
        run(payload, lenient=False)
    value, imports = run(payload, lenient=True)
    assert list(imports) == [("builtins", "exec")]
    assert type(value) is Record and value.args == ("x=1",)


def test_imports_are_recorded_in_first_use_order_through_memo_tricks() -> None:
    # STACK_GLOBAL from memoized strings: the interpreter's own record sees the real name.
    payload = (
        b"\x80\x04\x8c\x02os\x940\x8c\x06system\x940h\x00h\x01\x93"
        b"\x8c\x04echo\x85R\x8c\x08builtins\x8c\x04eval\x93\x8c\x011\x85R\x86."
    )
    value, imports = run(payload, lenient=True)
    assert list(imports) == [("os", "system"), ("builtins", "eval")]
    assert isinstance(value, tuple) and all(type(item) is Record for item in value)


def test_a_called_record_keeps_the_chain_and_calls_nothing() -> None:
    # getattr(os, "system")("echo"): the result of a record applied again.
    payload = (
        b"\x80\x04\x8c\x08builtins\x8c\x07getattr\x93\x8c\x02os\x8c\x04path\x93"
        b"\x8c\x06system\x86R\x8c\x04echo\x85R."
    )
    value, imports = run(payload, lenient=True)
    assert type(value) is Record and value.args == ("echo",)
    assert type(value.callee) is Record and value.callee.name == "getattr"
    assert list(imports) == [("builtins", "getattr"), ("os", "path")]
