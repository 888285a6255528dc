"""Texts a pickle makes are charged before they are made, at the size CPython stores them.

Two ways a small pickle once built far more than an open may build (64 MiB plus 16 times
the pickle bytes read), each measured here in a child process (``tests.budgetchild``,
under an address-space cap so the old behaviour fails there, not on the host):

* a dict key (or set item) of tuples nested 16 deep, each level a wide tuple of memo
  references to the level below: a 2 KB file whose key's text has 10**27 characters,
  built before it was charged. Every mode reads dict keys the same way: strict and
  lenient ``torch.save`` files, TorchScript archives, distributed checkpoints.
* a name of 4-byte characters (emoji): charged one byte a character while CPython
  stores four, so every dotted name built from it cost four times its charge.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io._budget import TEXT_BYTES, char_bytes, text_bytes
from strided.io.pickle._data import data_key, key_bytes
from tests.budgetchild import opened_in_child
from tests.test_pickle_hostile import MARK, PROTO2, STOP, as_zip, glob, text
from tests.zipcraft import Entry, build

ALLOWANCE_BASE = 64 << 20
CAP = 3 << 30  # the child's address space: the old reader ran into it


def allowance(pickle_bytes: int) -> int:
    return ALLOWANCE_BASE + 16 * pickle_bytes


def nested_key(levels: int, width: int) -> bytes:
    """Leaves a tuple on the stack: ``()`` then ``levels`` tuples, each holding ``width``
    memo references to the one below (memo entries 0 .. levels)."""
    out = b")q\x000"
    for level in range(1, levels + 1):
        out += MARK + (b"h" + bytes([level - 1])) * width + b"tq" + bytes([level]) + b"0"
    return out + b"h" + bytes([levels])


def wide_key(width: int) -> bytes:
    """Leaves ``((s,) * width,) * width`` on the stack for one memoized 64 KB text ``s``:
    66 KB spelling 16 GB of key text, quickly (each level is a join of long texts)."""
    out = text("k" * 65536) + b"q\x000" + MARK + b"h\x00" * width + b"tq\x010"
    return out + MARK + b"h\x01" * width + b"t"


def write(folder: Path, mode: str, key: bytes) -> tuple[Path, int]:
    """A file of ``mode`` whose pickle sets one item under ``key``; (path, pickle bytes)."""
    if mode == "strict":
        payload = PROTO2 + b"}" + key + b"Ns" + STOP
    elif mode == "set":
        payload = b"\x80\x04" + MARK + key + b"\x91" + STOP
    elif mode == "lenient":  # SETITEMS on an inert record (a dict subclass)
        payload = PROTO2 + glob("somewhere", "Bag") + b")\x81" + MARK + key + b"Nu" + STOP
    elif mode == "torchscript":
        payload = PROTO2 + b"}" + key + b"Ns" + STOP
        entries = [
            Entry("m/data.pkl", payload),
            Entry("m/code/__torch__.py", b"class M(Module):\n  __parameters__ = []\n"),
            Entry("m/constants.pkl", b"\x80\x02)."),
            Entry("m/byteorder", b"little"),
        ]
        path = folder / "scripted.pt"
        path.write_bytes(build(entries))
        return path, len(payload)
    else:
        assert mode == "dcp"
        payload = b"\x80\x04}" + key + b"Ns" + STOP
        path = folder / "dcp"
        path.mkdir()
        (path / ".metadata").write_bytes(payload)
        return path, len(payload)
    return as_zip(folder, payload, {}), len(payload)


MODES = ["strict", "set", "lenient", "torchscript", "dcp"]


@pytest.mark.parametrize("mode", MODES)
def test_a_2_kb_key_nested_16_deep_is_refused_before_its_text_is_built(
    tmp_path: Path, mode: str
) -> None:
    key = nested_key(levels=15, width=60)  # 60**15 leaves: 10**27 characters of text
    path, pickle_bytes = write(tmp_path, mode, key)
    assert pickle_bytes < 2100
    found = opened_in_child(path, lenient=mode == "lenient", address_limit=CAP, timeout=120)
    outcome = str(found["outcome"])
    assert outcome.startswith("LimitError") and "would build more than" in outcome, outcome
    assert int(str(found["grew_kib"])) * 1024 < allowance(pickle_bytes), found


@pytest.mark.parametrize("mode", MODES)
def test_a_key_of_long_shared_texts_is_refused_within_the_budget(tmp_path: Path, mode: str) -> None:
    # The old reader ran out of its 3 GiB in a second here (16 GB of text for 66 KB).
    path, pickle_bytes = write(tmp_path, mode, wide_key(500))
    found = opened_in_child(path, lenient=mode == "lenient", address_limit=CAP, timeout=120)
    outcome = str(found["outcome"])
    assert outcome.startswith("LimitError") and "would build more than" in outcome, outcome
    assert int(str(found["grew_kib"])) * 1024 < allowance(pickle_bytes), found


def test_keys_of_a_checkpoints_size_still_open(tmp_path: Path) -> None:
    path, _ = write(tmp_path, "strict", nested_key(levels=3, width=3))
    with st.open_checkpoint(path) as checkpoint:
        (name,) = checkpoint.metadata
    assert name == str(((((),) * 3,) * 3,) * 3)


keys = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats() | hs.text() | hs.binary(),
    lambda inner: hs.lists(inner, max_size=4).map(tuple),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(keys)
def test_the_measure_bounds_what_the_key_builds(value: object) -> None:
    found = data_key(value)
    assert found is not None
    built = len(found.text.encode("utf-32-le")) // 4 + len(found.canon)
    width = char_bytes(found.text, found.canon)
    assert key_bytes(value) >= 2 * built * width
    if type(value) is tuple:
        assert found.text == str(value)  # the name a tuple key gives, as Python spells it


# -- astral names: charged at four bytes a character -----------------------------------------


@given(hs.text(max_size=50))
def test_a_text_is_charged_what_cpython_allocates(value: str) -> None:
    import sys

    assert text_bytes(len(value), value) >= TEXT_BYTES + len(value) * char_bytes(value)
    assert char_bytes(value) in (1, 2, 4)
    widest = max((ord(c) for c in value), default=0)
    width = 1 if widest < 256 else 2 if widest < 65536 else 4
    # Never less than CPython's width; more only once the text has cached its UTF-8 form
    # (read off its size, which then counts that copy too: generous, never short).
    assert char_bytes(value) >= width
    # A new str with no UTF-8 cache (a one-character latin-1 str is CPython's shared
    # singleton, which may have cached it anywhere in the process: made longer, it is new).
    fresh = (value * 2 + "x").encode("utf-32-le").decode("utf-32-le")
    assert char_bytes(fresh) == width
    stored = sys.getsizeof(fresh) - sys.getsizeof(fresh[:0] if fresh.isascii() else "")
    assert stored <= TEXT_BYTES + len(fresh) * char_bytes(fresh)  # what CPython allocates


def astral_payload(items: int) -> bytes:
    """``{k: [None] * items}`` for one key ``k`` of 16,384 emoji (64 KB of UTF-8)."""
    key = "\U0001f600" * 16384
    return PROTO2 + b"}" + text(key) + b"]" + MARK + b"N" * items + b"es" + STOP


def test_an_astral_key_named_180000_times_stays_within_the_budget(tmp_path: Path) -> None:
    # 244 KB: the old reader grew 260 MiB before its LimitError (each 64 KiB name was
    # charged 16 KiB).
    payload = astral_payload(180_000)
    path = as_zip(tmp_path, payload, {})
    assert path.stat().st_size < 250_000
    found = opened_in_child(path, address_limit=CAP)
    outcome = str(found["outcome"])
    assert outcome.startswith("LimitError") and "dotted names would build" in outcome, outcome
    assert int(str(found["grew_kib"])) * 1024 < allowance(len(payload)), found
    # A few such names are an ordinary checkpoint's worth: they open.
    small = as_zip(tmp_path, astral_payload(10), {})
    with st.open_checkpoint(small) as checkpoint:
        assert len(checkpoint.metadata) == 10


def test_astral_names_are_charged_four_bytes_a_character(tmp_path: Path) -> None:
    from strided.io._budget import ParseBudget
    from strided.io.torch._pytorch import open_pytorch

    spent = {}
    for label, char in (("ascii", "k"), ("bmp", "\u4e00"), ("astral", "\U0001f600")):
        payload = PROTO2 + b"}" + text(char * 4096) + b"]" + MARK + b"N" * 64 + b"es" + STOP
        budget = ParseBudget(label)
        open_pytorch(as_zip(tmp_path, payload, {}), budget=budget)
        spent[label] = budget.spent
    names = 64 * 4096  # characters of the 64 dotted names
    assert spent["bmp"] - spent["ascii"] >= names
    assert spent["astral"] - spent["ascii"] >= 3 * names
    assert np.isclose(
        (spent["astral"] - spent["ascii"]) / (spent["bmp"] - spent["ascii"]), 3, rtol=0.1
    )
