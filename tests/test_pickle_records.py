"""Lenient records: objects of unknown globals held inert, and the imports a pickle names.

Pickles here are written by Python's own ``pickle`` from classes defined in this test
(so the oracle is what ``pickle`` wrote); the interpreter must never import them.
"""

from __future__ import annotations

import io
import pickle
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io.pickle._data import Record
from strided.io.pickle._machine import interpret


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


class Plain:
    """A class without ``__setstate__``: Python's BUILD updates its ``__dict__``."""


class OnlyPlain(pickle.Unpickler):
    """Python's unpickler, allowed to make nothing but ``Plain`` (the oracle)."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) != (__name__, "Plain"):
            raise pickle.UnpicklingError(f"{module}.{name} is not Plain")
        return Plain


def shared_states_payload(states: list[dict[str, int]]) -> bytes:
    """A ``Plain`` record built once with each of ``states`` (each a memoized dict), then
    ``(record, [every state dict])``: the dicts are referenced again after the BUILDs."""
    out = b"\x80\x02c" + __name__.encode() + b"\nPlain\n)\x81"
    for index, state in enumerate(states):
        out += b"}q" + bytes([index]) + b"("
        for key, value in state.items():
            out += b"X" + struct.pack("<I", len(key)) + key.encode()
            out += b"J" + struct.pack("<i", value)
        out += b"ub"
    out += b"]("
    out += b"".join(b"h" + bytes([index]) for index in range(len(states)))
    return out + b"e\x86."


@settings(max_examples=60, deadline=None)
@given(
    hs.lists(
        hs.dictionaries(hs.sampled_from("wxyz"), hs.integers(-(2**31), 2**31 - 1), max_size=4),
        min_size=1,
        max_size=5,
    )
)
def test_build_updates_the_record_never_the_state_dict(states: list[dict[str, int]]) -> None:
    payload = shared_states_payload(states)
    expected_record, expected_states = OnlyPlain(io.BytesIO(payload)).load()
    found, _ = run(payload, lenient=True)
    assert isinstance(found, tuple)
    record, found_states = found
    assert type(record) is Record
    assert found_states == expected_states == states  # every state dict as the file wrote it
    assert record.state == vars(expected_record)
    assert all(state is not record.state for state in found_states)


def test_a_second_build_leaves_the_first_state_dict_as_the_file_wrote_it(tmp_path: Path) -> None:
    # {'w': 1} is the record's first state and also the tuple's second item; a second
    # BUILD {'w': 999} once changed it there too ({'w': 999} where Python has {'w': 1}).
    from tests.test_pickle_hostile import as_zip

    payload = shared_states_payload([{"w": 1}, {"w": 999}])
    record, states = OnlyPlain(io.BytesIO(payload)).load()
    expected = {"0.w": vars(record)["w"], "1.0.w": states[0]["w"], "1.1.w": states[1]["w"]}
    assert expected == {"0.w": 999, "1.0.w": 1, "1.1.w": 999}
    with st.open_checkpoint(as_zip(tmp_path, payload, {}), lenient=True) as checkpoint:
        assert checkpoint.metadata == expected
