"""What opening a PyTorch pickle may cost: one parse budget per open, and time linear in
the bytes read. Each hostile file is built opcode by opcode here (with the assembler of
``test_pickle_hostile``); memory and time are measured in a child process, against a
baseline the old reader blew through by far more than the bounds allow."""

from __future__ import annotations

import json
import math
import pickle
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import strided as st
from strided.io._budget import ParseBudget
from strided.io.pickle import _machine as _pickle
from strided.io.torch._pytorch import load_pytorch, open_pytorch

from .test_pickle_hostile import MARK, PROTO2, STOP, as_legacy, as_zip, glob, num, run, text

P61 = 2**61 - 1  # Python hashes an int as the int modulo this prime


def child(code: str, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run ``code`` in a fresh Python; it prints one JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


# The child opens the file under tracemalloc and reports the outcome, the peak of traced
# memory (NumPy's buffers included) and the CPU time.
OPEN_MEASURED = """
    import json, resource, sys, time, tracemalloc
    import strided as st
    from strided.io.torch._pytorch import open_pytorch
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a runaway fails, not the host
    tracemalloc.start()
    started = time.process_time()
    try:
        opened = open_pytorch(sys.argv[1])
        json.dumps(opened.metadata)
        outcome = "opened"
    except st.DataError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"outcome": outcome, "peak": tracemalloc.get_traced_memory()[1],
                      "cpu": time.process_time() - started}))
"""


# -- one budget per open: names, leaves and shared containers are charged ----------------------


def test_one_long_key_over_many_leaves_is_a_limit_error_in_bounded_memory(
    tmp_path: Path,
) -> None:
    # {"k" * 4096: [None] * 260_000}: 264 KB whose dotted names spell 1.1 GB.
    payload = PROTO2 + b"}" + text("k" * 4096) + b"]" + MARK + b"N" * 260_000 + b"es" + STOP
    path = as_zip(tmp_path, payload, {})
    assert path.stat().st_size < 270_000
    report = child(OPEN_MEASURED, str(path))
    assert report["outcome"].startswith("LimitError"), report["outcome"][:200]
    assert "dotted names would build more than" in report["outcome"]
    assert report["peak"] < 300 << 20, report  # the names alone were 1.1 GB
    # The same shape at a size a checkpoint has opens: the budget is not in the way.
    small = PROTO2 + b"}" + text("k" * 64) + b"]" + MARK + b"N" * 1000 + b"es" + STOP
    names = open_pytorch(as_zip(tmp_path, small, {})).metadata
    assert len(names) == 1000 and names[f"{'k' * 64}.999"] is None


def shared_size_payload(items: int, uses: int) -> bytes:
    """``[torch.Size(L)] * uses`` for one memoized list ``L`` of ``items`` ints."""
    body = PROTO2 + glob("torch", "Size") + b"q\x01" + b"0"
    body += MARK + b"K\x01" * items + b"l" + b"\x85q\x02" + b"0"
    body += b"]" + MARK + b"h\x01h\x02R" * uses + b"e"
    return body + STOP


def test_a_memoized_list_is_charged_for_every_use(tmp_path: Path) -> None:
    # 125 KB that made 2000 torch.Size copies of a 50,000-int list (800 MB) in the
    # interpreter, and as many metadata lists again in the walk.
    payload = shared_size_payload(50_000, 2000)
    report = child(OPEN_MEASURED, str(as_zip(tmp_path, payload, {})))
    assert "torch.Size would build more than" in report["outcome"], report["outcome"][:200]
    assert report["peak"] < 300 << 20, report
    # A few uses of a short list are what a checkpoint holds: read as torch.load reads.
    opened = open_pytorch(as_zip(tmp_path, shared_size_payload(3, 4), {}))
    assert opened.metadata == {str(index): [1, 1, 1] for index in range(4)}


def test_a_text_leaf_is_charged_under_every_name(tmp_path: Path) -> None:
    # One 1 MB text named 100,000 times: 1.2 MB whose metadata spells 100 GB of text.
    payload = PROTO2 + text("x" * 1_000_000) + b"q\x00" + b"0"
    payload += b"]" + MARK + b"h\x00" * 100_000 + b"e" + STOP
    with pytest.raises(st.LimitError, match="metadata texts would build more than"):
        open_pytorch(as_zip(tmp_path, payload, {}))


def test_the_budget_is_shared_by_every_pickle_and_shard_of_an_open(tmp_path: Path) -> None:
    payload = PROTO2 + b"}" + text("k" * 1000) + b"]" + MARK + b"N" * 100 + b"es" + STOP
    path = as_legacy(tmp_path, payload, {})
    budget = ParseBudget(str(path))
    open_pytorch(path, budget=budget)
    # The five pickles of a legacy stream are all granted; the names are all charged.
    size = path.stat().st_size
    assert budget.limit == (64 << 20) + 16 * size
    assert budget.spent > 100 * 1000
    spent_once = budget.spent
    load_pytorch(path, budget=budget)
    assert budget.spent > 2 * spent_once - 1000  # a second open on one budget pays again
    tight = ParseBudget(str(path), base=0)
    with pytest.raises(st.LimitError, match="would build more than"):
        open_pytorch(path, budget=tight)


# -- no structure keyed by a hash the file chooses ---------------------------------------------


def int_dict(keys: list[int]) -> bytes:
    return PROTO2 + b"}" + MARK + b"".join(num(key) + b"N" for key in keys) + b"u" + STOP


def int_set(keys: list[int]) -> bytes:
    return b"\x80\x04\x8f" + MARK + b"".join(num(key) for key in keys) + b"\x90" + STOP


TIMED_RUNS = """
    import json, sys, time
    from strided.io.pickle._machine import interpret
    from strided.io.torch._pytorch import open_pytorch
    def cpu(payload):
        started = time.process_time()
        interpret(memoryview(payload), 0, "payload", {})
        return time.process_time() - started
    first, second = (bytes.fromhex(line) for line in sys.stdin.read().split())
    best = [min(cpu(first) for _ in range(3)), min(cpu(second) for _ in range(3))]
    print(json.dumps(best))
"""


def cpu_seconds(first: bytes, second: bytes) -> list[float]:
    """The best of three CPU times of interpreting each payload, in a child process."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TIMED_RUNS)],
        input=f"{first.hex()}\n{second.hex()}\n",
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    times: list[float] = json.loads(result.stdout)
    return times


@pytest.mark.parametrize("build", [int_dict, int_set], ids=["dict keys", "set items"])
def test_keys_colliding_in_the_int_hash_cost_what_other_keys_cost(build: Any) -> None:
    count = 20_000
    colliding = [P61 * (index + 1) for index in range(count)]  # every hash is 0
    spread = [P61 * (index + 1) + index for index in range(count)]  # as long, hashes differ
    assert len({hash(key) for key in colliding}) == 1
    slow, fast = cpu_seconds(build(colliding), build(spread))
    # The old reader spent ~150 times as long on the colliding keys (quadratic in count).
    assert slow < 5 * fast + 0.05, (slow, fast)


def test_keys_python_counts_equal(tmp_path: Path) -> None:
    # A set keeps the first of 1, 1.0, True (and of 0.0, -0.0), as Python's does.
    crafted = b"\x80\x04\x8f" + MARK + b"K\x01G" + struct.pack(">d", 1.0) + b"\x88"
    crafted += b"G" + struct.pack(">d", -0.0) + b"K\x00" + b"\x90" + STOP
    found: Any = run(crafted)
    assert found.items == [1, -0.0]  # in stored order
    assert set(found.items) == pickle.loads(crafted) and len(pickle.loads(crafted)) == 2
    assert math.copysign(1, found.items[1]) == -1
    nan = b"G" + struct.pack(">d", math.nan)
    assert len(run(b"\x80\x04\x8f" + MARK + nan + nan + b"\x90" + STOP).items) == 2  # type: ignore[attr-defined]
    same = b"\x80\x04\x8f" + MARK + nan + b"2\x90" + STOP  # one NaN object twice
    assert len(run(same).items) == 1  # type: ignore[attr-defined]
    # The str key "1" and the int key 1 are two keys; a key set twice is refused.
    both = run(PROTO2 + b"}" + MARK + text("1") + b"K\x01" + b"K\x01K\x02u" + STOP)
    assert sorted(str(key) for key in both) == ["1", "1"]  # type: ignore[attr-defined]
    for repeated in (text("a") + b"N" + text("a") + b"N", num(P61) + b"N" + num(P61) + b"N"):
        with pytest.raises(st.FormatError, match="is set twice"):
            run(PROTO2 + b"}" + MARK + repeated + b"u" + STOP)
    # Sets pickle writes read as pickle reads them, items kept in stored order.
    items = [None, True, 2, "2", b"2", 2.5, -0.0, math.inf, 2**70, P61, 2 * P61, "", b""]
    for protocol in (4, 5):
        for value in (set(items), frozenset(items[3:])):
            data = pickle.dumps(value, protocol=protocol)
            read: Any = run(data)
            assert len(read.items) == len(value) and set(read.items) == pickle.loads(data)
    # Int keys name tensors and leaves by their decimal text, as before.
    named = PROTO2 + b"}" + MARK + num(-7) + b"K\x03" + num(2**70) + b"N" + b"u" + STOP
    assert open_pytorch(as_zip(tmp_path, named, {})).metadata == {"-7": 3, str(2**70): None}


# -- protocol 0 text arguments: found in place -----------------------------------------------


def test_text_arguments_cost_their_own_bytes_not_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # With a 16 MiB line cap, the old reader copied 16 MiB of what follows for each of
    # 2000 STRING lines (32 GB); a line costs its own bytes.
    monkeypatch.setattr(_pickle, "_MAX_LINE", 1 << 24)
    count, pad = 2000, text("p" * (1 << 24)) + b"0"
    lines = PROTO2 + MARK + b"S'ab'\n" * count + b"l" + pad + STOP
    binary = PROTO2 + MARK + b"U\x02ab" * count + b"l" + pad + STOP
    assert run(lines) == run(binary) == ["ab"] * count
    timings = []
    for payload in (lines, binary):
        started = time.process_time()
        run(payload)
        timings.append(time.process_time() - started)
    assert timings[0] < 10 * timings[1] + 0.5, timings
