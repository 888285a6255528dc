"""Walks that revisit a shared object do their per-object work once.

* Lenient whole-model flattening: a child module shared by many parents (memo
  references) once had its ``_non_persistent_buffers_set`` rebuilt and its buffers
  sorted out at every visit: parents x buffers work that yielded no name, so neither the
  visit cap nor the budget saw it. Counted here in a child process by wrapping the two
  real functions that do that work and summing the sizes of what they are handed.
* The TorchScript walk: a scripted module shared by many parents was checked and its
  attributes sorted out at every visit. Counted by wrapping the real ``module_class``.
* TorchScript declarations: each declared name was checked against the list of names
  before it (quadratic in the names of one line). CPU time of n and 4n names, measured
  in a child (best of three): linear is about 4 times, quadratic 16.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.test_pickle_hostile import MARK, PROTO2, STOP, as_zip, glob, text

ROOT = Path(__file__).resolve().parent.parent


def module_state(buffers: bytes, modules: bytes, transient: bytes = b"]") -> bytes:
    """A ``torch.nn.Module``'s BUILD state: no parameters, ``buffers`` and ``modules``
    (SETITEMS bodies) and the non-persistent buffer names (a list)."""
    state = b"}" + MARK + text("_parameters") + b"}" + text("_buffers") + b"}"
    state += MARK + buffers + b"u" + text("_modules") + b"}" + MARK + modules + b"u"
    return state + text("_non_persistent_buffers_set") + transient + b"u"


def shared_child_payload(parents: int, buffers: int) -> bytes:
    """A model whose ``_modules`` holds one child ``parents`` times; the child has
    ``buffers`` buffers, all None, all named non-persistent."""
    names = [text(f"b{index}") for index in range(buffers)]
    transient = b"]" + MARK + b"".join(names) + b"e"
    child = glob("somewhere", "Block") + b")\x81r" + struct.pack("<I", 0)
    child += module_state(b"".join(name + b"N" for name in names), b"", transient) + b"b0"
    get = b"j" + struct.pack("<I", 0)
    modules = b"".join(text(f"m{index}") + get for index in range(parents))
    root = glob("somewhere", "Model") + b")\x81" + module_state(b"", modules) + b"b"
    return PROTO2 + child + root + STOP


COUNTED_OPEN = """
import json, sys, tracemalloc
import strided as st
from strided.io.pickle import _walk as walk

work = {"names": 0, "entries": 0}
real_names, real_children = walk._names, walk._module_children

def names(found):
    made = real_names(found)
    work["names"] += len(made)
    return made

def children(parameters, buffers, modules, transient):
    work["entries"] += len(parameters) + len(buffers) + len(modules)
    return real_children(parameters, buffers, modules, transient)

walk._names, walk._module_children = names, children
tracemalloc.start()
with st.open_checkpoint(sys.argv[1], lenient=True) as checkpoint:
    found = (list(checkpoint), checkpoint.metadata)
print(json.dumps({"work": work, "found": found, "peak": tracemalloc.get_traced_memory()[1]}))
"""


def test_a_shared_child_module_is_sorted_out_once(tmp_path: Path) -> None:
    parents, buffers = 3000, 3000
    payload = shared_child_payload(parents, buffers)
    path = as_zip(tmp_path, payload, {})
    result = subprocess.run(
        [sys.executable, "-c", COUNTED_OPEN, str(path)],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["found"] == [[], {}]  # None buffers name nothing, under any parent
    # Once per module record: the child's names and entries, and the root's modules.
    assert report["work"]["names"] == buffers, report["work"]
    assert report["work"]["entries"] == buffers + parents, report["work"]
    assert report["peak"] < (64 << 20) + 16 * len(payload)


TIMED_DECLARATIONS = """
import json, sys, time
from strided.io._budget import ParseBudget
from strided.io.torch._torchscript_code import declarations

def code(count):
    names = "".join(f'"p{index}", ' for index in range(count))
    return f"class M(Module):\\n  __parameters__ = [{names}]\\n  __buffers__ = []\\n".encode()

def cpu(text):
    best = None
    for _ in range(3):
        started = time.process_time()
        found = declarations(memoryview(text), "code", ParseBudget("code"))
        spent = time.process_time() - started
        best = spent if best is None else min(best, spent)
    return best, len(found["M"].parameters)

count = int(sys.argv[1])
small, large = cpu(code(count)), cpu(code(4 * count))
print(json.dumps({"small": small, "large": large}))
"""


def test_declared_names_are_checked_in_linear_time() -> None:
    count = 40_000
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TIMED_DECLARATIONS), str(count)],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    (small, small_names), (large, large_names) = report["small"], report["large"]
    assert (small_names, large_names) == (count, 4 * count)
    # Linear: about 4 times as long for 4 times the names; a list scan made it 16.
    assert large < 8 * small + 0.05, report


def shared_script_payload(parents: int, attributes: int) -> bytes:
    """A scripted module ``M`` holding one child ``M`` ``parents`` times; the child has
    ``attributes`` attributes, each a C++ custom-class object (never a module)."""
    custom = glob("__torch__.torch.classes.demo", "Thing") + b")\x81q\x01"
    values = [custom] + [b"h\x01"] * (attributes - 1)
    state = b"}" + MARK + b"".join(text(f"a{i}") + v for i, v in enumerate(values)) + b"u"
    child = glob("__torch__", "M") + b")\x81r" + struct.pack("<I", 0) + state + b"b0"
    get = b"j" + struct.pack("<I", 0)
    modules = b"".join(text(f"m{index}") + get for index in range(parents))
    root = glob("__torch__", "M") + b")\x81}" + MARK + modules + b"ub"
    return PROTO2 + child + root + STOP


COUNTED_SCRIPT = """
import json, sys, tracemalloc
import strided as st
from strided.io.torch import _torchscript as torchscript

calls = [0]
real = torchscript._Walk.module_class

def module_class(self, record):
    calls[0] += 1
    return real(self, record)

torchscript._Walk.module_class = module_class
tracemalloc.start()
with st.open_checkpoint(sys.argv[1]) as checkpoint:
    found = list(checkpoint)
print(json.dumps({"calls": calls[0], "found": found,
                  "peak": tracemalloc.get_traced_memory()[1]}))
"""


def test_a_shared_scripted_module_is_sorted_out_once(tmp_path: Path) -> None:
    from tests.zipcraft import Entry, build

    parents, attributes = 2000, 2000
    payload = shared_script_payload(parents, attributes)
    code = b"class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n"
    path = tmp_path / "shared.pt"
    path.write_bytes(
        build([
            Entry("m/data.pkl", payload),
            Entry("m/code/__torch__.py", code),
            Entry("m/constants.pkl", b"\x80\x02)."),
            Entry("m/byteorder", b"little"),
        ])
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", COUNTED_SCRIPT, str(path)],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["found"] == []
    # The root once, each of its attributes when it is sorted out and each child at its
    # visit, then each attribute of the child once: not parents x attributes.
    assert report["calls"] == 1 + 2 * parents + attributes, report["calls"]
    assert report["peak"] < (64 << 20) + 16 * len(payload)
