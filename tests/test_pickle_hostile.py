"""Hostile PyTorch checkpoints: pickles that would run code, lie about sizes, or try to
exhaust memory or the stack. Each payload is written opcode by opcode here (pickle and
pickletools only help build and check payloads); strided must refuse every one with a
DataError naming the problem, run nothing, and allocate nothing from a claimed size."""

from __future__ import annotations

import ast
import io
import os
import pickle
import pickletools
import struct
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io.pickle import _machine as _pickle
from strided.io.pickle._data import IntKey, PickledSet, TorchSize
from strided.io.pickle._machine import interpret
from strided.io.torch._pytorch import load_pytorch, open_pytorch

SRC = Path(__file__).resolve().parent.parent / "src" / "strided" / "io"
PROTO2 = b"\x80\x02"
STOP = b"."
MARK = b"("


# -- a tiny assembler ------------------------------------------------------------------------


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def num(value: int) -> bytes:
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data


def tup(*items: bytes) -> bytes:
    return MARK + b"".join(items) + b"t"


def call(func: bytes, *args: bytes) -> bytes:
    return func + tup(*args) + b"R"


EMPTY_HOOKS = call(glob("collections", "OrderedDict"))


def storage(
    key: str = "0", kind: str = "FloatStorage", numel: int = 4, module: str = "torch"
) -> bytes:
    return tup(text("storage"), glob(module, kind), text(key), text("cpu"), num(numel)) + b"Q"


def tensor(
    store: bytes | None = None,
    offset: bytes = b"K\x00",
    size: bytes | None = None,
    stride: bytes | None = None,
    extra: bytes = b"",
) -> bytes:
    return call(
        glob("torch._utils", "_rebuild_tensor_v2"),
        storage() if store is None else store,
        offset,
        tup(num(4)) if size is None else size,
        tup(num(1)) if stride is None else stride,
        b"\x89",
        EMPTY_HOOKS,
        extra,
    )


def state_dict(body: bytes) -> bytes:
    return PROTO2 + b"}" + text("w") + body + b"s" + STOP


def run(payload: bytes) -> object:
    return interpret(memoryview(payload), 0, "payload", {})[0]


def as_zip(folder: Path, payload: bytes, storages: dict[str, bytes] | None = None,
           method: int = zipfile.ZIP_STORED) -> Path:  # fmt: skip
    path = folder / "archive.pt"
    with zipfile.ZipFile(path, "w", method) as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/byteorder", b"little")
        for key, data in ({"0": bytes(16)} if storages is None else storages).items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def as_legacy(folder: Path, payload: bytes, storages: dict[str, bytes] | None = None) -> Path:
    stored = {"0": bytes(16)} if storages is None else storages
    head = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
    head += pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2)
    tail = pickle.dumps(list(stored), protocol=2)
    for data in stored.values():
        tail += struct.pack("<q", len(data) // 4) + data
    path = folder / "legacy.pt"
    path.write_bytes(head + payload + tail)
    return path


def refused_everywhere(folder: Path, payload: bytes, match: str) -> None:
    """Interpreted alone, in a zip archive and in a legacy stream: always a DataError."""
    pickletools.dis(io.BytesIO(payload), out=io.StringIO())  # a well-formed pickle program
    with pytest.raises(st.DataError, match=match):
        run(payload)
    for build in (as_zip, as_legacy):
        with pytest.raises(st.DataError, match=match):
            load_pytorch(build(folder, payload))


# -- code execution attempts -----------------------------------------------------------------


def payloads(sentinel: Path) -> dict[str, tuple[bytes, str]]:
    touch = text(f"touch {sentinel}")
    return {
        "os.system": (call(glob("os", "system"), touch), "os.system"),
        "posix.system": (call(glob("posix", "system"), touch), "posix.system"),
        "builtins.eval": (call(glob("builtins", "eval"), text("print(1)")), "builtins.eval"),
        "__builtin__.exec": (
            call(glob("__builtin__", "exec"), text("x=1")),
            "builtins.exec",
        ),  # renamed as Python reads protocol 2
        "subprocess.Popen": (
            call(
                glob("subprocess", "Popen"),
                b"]" + MARK + text("touch") + text(str(sentinel)) + b"e",
            ),
            "subprocess.Popen",
        ),
        "getattr chain": (
            call(
                call(
                    glob("builtins", "getattr"),
                    call(glob("builtins", "__import__"), text("os")),
                    text("system"),
                ),
                touch,
            ),
            "builtins.getattr",
        ),
        "torch.load": (call(glob("torch", "load"), text(str(sentinel))), "torch.load"),
        "torch.serialization.load": (
            call(glob("torch.serialization", "load"), text("x")),
            "torch.serialization.load",
        ),
        "numpy gadget": (glob("numpy", "prod") + b"}" + b"b", "numpy.prod"),
        "numpy reconstruct": (
            call(glob("numpy.core.multiarray", "_reconstruct"), text("x")),
            "numpy.core.multiarray._reconstruct",
        ),
        "importlib": (
            call(glob("importlib", "import_module"), text("os")),
            "importlib.import_module",
        ),
        "runpy": (call(glob("runpy", "_run_code"), text("import os"), b"}"), "runpy._run_code"),
        "codecs then exec": (
            call(
                glob("builtins", "exec"),
                call(glob("_codecs", "encode"), text("x=1"), text("latin1")),
            ),
            "builtins.exec",
        ),
        "codecs other encoding": (
            call(glob("_codecs", "encode"), text("eD0x"), text("base64")),
            r"_codecs.encode: expected \(text, 'latin1'\)",
        ),
        "stack global": (
            text("os") + text("system") + b"\x93" + tup(touch) + b"R",
            "os.system",
        ),
        "dotted attribute": (
            glob("torch._utils", "_rebuild_tensor_v2.__globals__"),
            r"_rebuild_tensor_v2.__globals__ is not an allowed global",
        ),
        "method of an allowed class": (
            call(glob("collections", "OrderedDict.fromkeys"), b"]"),
            "OrderedDict.fromkeys",
        ),
        "copyreg": (call(glob("copyreg", "_reconstructor"), b")"), "copyreg._reconstructor"),
        "os.putenv": (call(glob("os", "putenv"), text("STRIDED_PWNED"), text("1")), "os.putenv"),
    }


@pytest.mark.parametrize("name", list(payloads(Path("/x"))))
def test_code_execution_is_refused_and_nothing_runs(tmp_path: Path, name: str) -> None:
    sentinel = tmp_path / "pwned"
    body, match = payloads(sentinel)[name]
    refused_everywhere(tmp_path, state_dict(body), match)
    assert not sentinel.exists()
    assert "STRIDED_PWNED" not in os.environ


def test_the_os_system_payload_is_live(tmp_path: Path) -> None:
    """The payloads are real: Python's own unpickler would run this one (in a subprocess)."""
    sentinel = tmp_path / "pwned"
    payload = state_dict(payloads(sentinel)["os.system"][0])
    script = f"import pickle; pickle.loads({payload!r})"
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    assert sentinel.exists()


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        # Object-making opcodes name the global they are given (only lenient mode makes them).
        (b"i" + b"os\nsystem\n", "byte 2, INST: os.system is not an allowed global"),
        (MARK + glob("collections", "OrderedDict") + b"o", "OBJ of collections.OrderedDict"),
        (glob("collections", "OrderedDict") + b")\x81", "NEWOBJ of collections.OrderedDict"),
        (glob("collections", "OrderedDict") + b")}\x92", "NEWOBJ_EX of collections.OrderedDict"),
        (b"\x82\x01", "byte 2: opcode EXT1 is not allowed"),
        (b"\x83\x01\x00", "byte 2: opcode EXT2 is not allowed"),
        (b"\x84\x01\x00\x00\x00", "byte 2: opcode EXT4 is not allowed"),
        (b"\x97", "byte 2: opcode NEXT_BUFFER is not allowed"),
        (b"N\x98", "byte 3: opcode READONLY_BUFFER is not allowed"),
        (b"\xff", "byte 2: unknown opcode 0xff"),
    ],
)
def test_refused_opcodes_are_named(payload: bytes, match: str) -> None:
    with pytest.raises(st.FormatError, match=match):
        run(PROTO2 + payload + STOP)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (call(glob("torch", "FloatStorage"), num(4)), "cannot apply torch.FloatStorage"),
        (b"}" + tup() + b"R", "cannot apply a dict"),
        (b"}}b", r"BUILD on a dict \(only an OrderedDict, a parameter"),
        (b"]}b", "BUILD on a list"),
        (tensor() + b"}b", "BUILD on a tensor"),
        (EMPTY_HOOKS + b"]b", "the state of an OrderedDict must be a dict, found a list"),
        (b"P0\n", "persistent id '0' is not a storage tuple"),
        (tup(text("module"), text("x")) + b"Q", "persistent id a tuple is not a storage tuple"),
        (storage(kind="ComplexFloatStorage"), "torch.ComplexFloatStorage is a storage of elements"),
        (tup(text("storage"), EMPTY_HOOKS, text("0"), text("cpu"), num(4)) + b"Q",
         "storage type an OrderedDict is not a storage type"),
        (storage(key="../../etc/passwd"), "is not a plain name"),
        (storage(numel=-1), "storage size -1"),
        (b"}" + MARK + b"C\x01a" + num(1) + b"u", "dict key a bytes is not a str, int, float"),
        (b"}" + b"]" + num(1) + b"s", "dict key a list is not a str, int, float"),
        (b"}" + tup(b"]") + num(1) + b"s", "dict key a tuple is not a str, int, float"),
        (b"}" + MARK + num(1) + num(1) + b"\x88" + num(2) + b"u", "dict key True is set twice"),
        (MARK + b"]" + b"\x91", "set item a list is not a plain scalar"),
        (b"]" + MARK + num(1) + b"\x90", "cannot add items to a list"),
        (b"N" + MARK + b"N" + b"e", "cannot append to None"),
        (b"}" + MARK + text("a") + b"d", "odd number of items"),
    ],
)  # fmt: skip
def test_data_opcodes_misused_are_refused(body: bytes, match: str) -> None:
    with pytest.raises(st.FormatError, match=match):
        run(state_dict(body))


# -- allow-listed names with wrong arguments ---------------------------------------------------


def rebuild(*args: bytes) -> bytes:
    return call(glob("torch._utils", "_rebuild_tensor_v2"), *args)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (rebuild(storage(), num(0)), "expected 6 or 7 arguments, found 2"),
        (rebuild(*([b"N"] * 9)), "expected 6 or 7 arguments, found 9"),
        (rebuild(text("x"), num(0), tup(num(4)), tup(num(1)), b"\x89", EMPTY_HOOKS),
         "the storage is 'x', not a storage"),
        (tensor(offset=text("0")), "storage offset '0' is not an int"),
        (tensor(offset=b"\x88"), "storage offset True is not an int"),
        (tensor(offset=num(-1)), "storage offset -1"),
        (tensor(size=tup(text("4"))), "the size must be a tuple of ints"),
        (tensor(size=tup(num(-4))), "size"),
        (tensor(stride=tup(num(-1))), r"every stride must be an int in \[0, 2\*\*48\)"),
        (tensor(size=tup(num(1)), stride=tup(num(2**62))), "every stride must be an int in"),
        (tensor(stride=tup(num(1), num(1))), "the stride must be a tuple of 1 ints"),
        (rebuild(storage(), num(0), tup(num(4)), tup(num(1)), num(1), EMPTY_HOOKS),
         "requires_grad must be a bool"),
        (rebuild(storage(), num(0), tup(num(4)), tup(num(1)), b"\x89", b"}" + text("k") + b"Ns"),
         "backward hooks must be None or an empty OrderedDict"),
        (tensor(extra=b"}" + text("conj") + b"\x88s"), "conjugate bit"),
        (tensor(extra=b"}" + text("evil") + b"\x88s"), "unknown tensor metadata 'evil'"),
        (call(glob("torch._utils", "_rebuild_tensor_v3"), storage(), num(0), tup(num(4)),
              tup(num(1)), b"\x89", EMPTY_HOOKS, glob("torch", "FloatStorage")),
         "the dtype is torch.FloatStorage, not a torch dtype"),
        (call(glob("torch._utils", "_rebuild_tensor_v3"), storage(), num(0), tup(num(4)),
              tup(num(1)), b"\x89", EMPTY_HOOKS, glob("torch", "complex64")),
         "torch.complex64 is a torch dtype strided has no DType for"),
        (call(glob("torch._utils", "_rebuild_tensor_v3"), storage(), num(0), tup(num(4)),
              tup(num(1)), b"\x89", EMPTY_HOOKS, glob("torch", "qint8")),
         "torch.qint8 is a torch dtype strided has no DType for"),
        (call(glob("torch._utils", "_rebuild_parameter"), text("x"), b"\x89", EMPTY_HOOKS),
         "_rebuild_parameter: the data is 'x', not a tensor"),
        (call(glob("torch._utils", "_rebuild_parameter"), tensor()),
         "expected 3 arguments, found 1"),
        (call(glob("collections", "OrderedDict"), b"]" + num(1) + b"a"),
         "OrderedDict: an item is 1, not a .key, value. pair"),
        (call(glob("collections", "OrderedDict"), num(1)),
         "OrderedDict: expected no arguments or one list of pairs"),
        (call(glob("torch", "Size"), tup(b"G" + struct.pack(">d", 1.5))), "dim must be an int"),
        (call(glob("_codecs", "encode"), text("\u20ac"), text("latin1")), "beyond latin-1"),
        (call(glob("_codecs", "encode"), num(3), text("latin1")), "expected"),
        (glob("torch", "Size") + text("notatuple") + b"R", "arguments must be a tuple"),
    ],
)  # fmt: skip
def test_allow_listed_names_check_their_arguments(body: bytes, match: str) -> None:
    with pytest.raises(st.FormatError, match=match):
        run(state_dict(body))


def test_huge_shapes_are_limit_errors() -> None:
    with pytest.raises(st.LimitError, match="MAX_ELEMENTS"):
        run(
            state_dict(tensor(size=tup(num(2**31 - 1), num(2**31 - 1)), stride=tup(num(1), num(1))))
        )
    with pytest.raises(st.LimitError, match="MAX_RANK"):
        run(state_dict(tensor(size=tup(*[num(1)] * 40), stride=tup(*[num(1)] * 40))))


# -- lengths, frames and budgets -------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"X\xff\xff\xff\xff" + b"abc", r"needs 4294967295 bytes, only \d+ remain"),
        (b"\x8e" + struct.pack("<Q", 2**63) + b"x", "needs 9223372036854775808 bytes"),
        (b"\x8d" + struct.pack("<Q", 2**64 - 1), "needs 18446744073709551615 bytes"),
        (b"T" + struct.pack("<i", -5), "negative length -5"),
        (b"B" + struct.pack("<I", 10**9), "needs 1000000000 bytes"),
        (b"\x8b" + struct.pack("<i", 10**6) + b"\x01", "an integer of 1000000 bytes"),
        (b"\x95" + struct.pack("<Q", 10**12), "frame of 1000000000000 bytes"),
        (b"\x95" + struct.pack("<Q", 2) + b"X\x01\x00\x00\x00a", "its frame ends"),
        (b"\x95\x01" + bytes(7) + b"N" + b"\x95\x01" + bytes(7) + b"N0", None),
        (b"X\x02\x00\x00\x00\xff\xfe", "not valid UTF-8"),
        (b"S'abc\\q'\n", "unknown or incomplete escape"),
        (b"Sabc\n", "must be quoted"),
        (b"Inot a number\n", r"bad argument \(ValueError\)"),
        (b"I" + b"9" * 5000 + b"\n", "a number of 5000 characters"),
        (b"I1", "no newline"),
        (b"h\x05", "memo entry 5 was never stored"),
        (b"0", "no MARK to pop to"),
        (b"\x85", r"needs 1 values on the stack, found 0"),
        (b"a", "the stack is empty"),
        (b"N" + MARK + b"N", "1 MARK"),
        (b"NN", "expected 1 value on the stack, found 2"),
        (b"\x80\x09N", "unsupported protocol 9"),
        (b"", "needs 1 bytes, only 0 remain"),
    ],
)
def test_bad_lengths_and_structure_are_refused(payload: bytes, match: str | None) -> None:
    if match is None:  # a frame ending exactly at an opcode boundary is fine
        assert run(PROTO2 + payload + STOP) is None
        return
    with pytest.raises(st.DataError, match=match):
        run(PROTO2 + payload + (STOP if payload else b""))


def test_exponential_sharing_is_refused_quickly(tmp_path: Path) -> None:
    # L0 = [], L(k+1) = [Lk, Lk]: 60 levels of shared lists spell 2**60 paths in ~600 bytes.
    body = PROTO2 + b"]q\x00"
    for level in range(60):
        here, after = bytes([level]), bytes([level + 1])
        body += b"0]h" + here + b"ah" + here + b"aq" + after
    payload = body + STOP
    assert len(payload) < 1000
    started = time.perf_counter()
    with pytest.raises(st.LimitError, match="refers to its parts too many times"):
        open_pytorch(as_zip(tmp_path, payload))
    assert time.perf_counter() - started < 30  # it stops after ~2 visits per pickle byte


def test_long_shared_keys_cannot_build_huge_names(tmp_path: Path) -> None:
    # One 100 kB key, memoized, names every level of a nested dict: the dotted names
    # would grow by 100 kB a level.
    key = text("k" * 100_000) + b"q\x00"
    payload = PROTO2 + b"}q\x01" + key + b"}q\x02s"
    for level in range(2, 200):
        payload += b"h" + bytes([level]) + b"h\x00}q" + bytes([level + 1]) + b"s0"
    payload += b"0h\x01" + STOP
    with pytest.raises(st.LimitError, match="a dotted name longer than 65536"):
        open_pytorch(as_zip(tmp_path, payload))


def test_dup_and_get_loops_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pickle, "MAX_OPCODES", 10_000)
    with pytest.raises(st.LimitError, match="runs more than 10000 opcodes"):
        run(PROTO2 + b"]q\x00" + MARK + b"N" + b"2" * 20_000 + b"e" + STOP)
    with pytest.raises(st.LimitError, match="runs more than 10000 opcodes"):
        run(PROTO2 + b"]q\x00" + MARK + b"h\x00" * 20_000 + b"e" + STOP)
    monkeypatch.setattr(_pickle, "MAX_MEMO", 100)
    puts = b"".join(b"r" + struct.pack("<I", index) for index in range(200))
    with pytest.raises(st.LimitError, match="more than 100 memo entries"):
        run(PROTO2 + b"N" + puts + STOP)
    with pytest.raises(st.LimitError, match="more than 100 memo entries"):
        run(PROTO2 + b"N" + b"\x94" * 200 + STOP)


def test_byte_making_rules_cannot_multiply_input() -> None:
    big = "x" * 1_000_000
    one = glob("_codecs", "encode") + b"q\x01" + text(big) + b"q\x00"
    repeat = b"h\x01" + tup(b"h\x00", text("latin1")) + b"R0"
    tracemalloc.start()
    try:
        with pytest.raises(st.LimitError, match="makes more bytes than it holds"):
            run(PROTO2 + one + b"0" + repeat * 2000 + b"N" + STOP)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000


def test_deep_nesting_is_refused_without_recursion(tmp_path: Path) -> None:
    depth = 10**6
    started = time.perf_counter()
    with pytest.raises(st.LimitError, match="more than 256 nested MARKs"):
        run(PROTO2 + MARK * depth + STOP)
    lists = PROTO2 + b"]" * depth + b"a" * (depth - 1) + STOP
    with pytest.raises(st.FormatError, match="nest deeper than 256"):
        open_pytorch(as_zip(tmp_path, lists))
    tuples = PROTO2 + b"N" + b"\x85" * depth + STOP
    with pytest.raises(st.FormatError, match="nest deeper than 256"):
        open_pytorch(as_legacy(tmp_path, tuples, {}))
    cycle = PROTO2 + b"]q\x00h\x00a" + STOP  # a list that holds itself
    with pytest.raises(st.FormatError, match="nest deeper than 256"):
        open_pytorch(as_zip(tmp_path, cycle))
    assert time.perf_counter() - started < 60


# -- storages and views against the bytes that are there ---------------------------------------


@pytest.mark.parametrize("build", [as_zip, as_legacy])
def test_a_storage_claiming_2_to_the_60_elements_allocates_nothing(
    tmp_path: Path, build: Any
) -> None:
    payload = state_dict(tensor(store=storage(numel=2**60), size=tup(num(4))))
    tracemalloc.start()
    try:
        with pytest.raises(st.FormatError, match=r"storage '0'.*(1152921504606846976|holds 16)"):
            open_pytorch(build(tmp_path, payload))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000


@pytest.mark.parametrize("build", [as_zip, as_legacy])
@pytest.mark.parametrize(
    ("body", "match"),
    [
        (tensor(size=tup(num(5))), "reaches element 4, its storage holds 4"),
        (tensor(offset=num(4)), "reaches element 7"),
        (tensor(size=tup(num(2), num(2)), stride=tup(num(3), num(1))), "reaches element 4"),
        (tensor(offset=num(2**62)), "reaches element"),
        (tensor(size=tup(num(2)), stride=tup(num(2**47))), "reaches element"),
    ],
)
def test_views_past_their_storage_are_refused(
    tmp_path: Path, build: Any, body: bytes, match: str
) -> None:
    with pytest.raises(st.FormatError, match=match):
        open_pytorch(build(tmp_path, state_dict(body)))


def test_empty_views_need_no_bytes(tmp_path: Path) -> None:
    body = tensor(offset=num(100), size=tup(num(0), num(3)), stride=tup(num(3), num(1)))
    got = load_pytorch(as_zip(tmp_path, state_dict(body)))["w"]
    assert got.shape == st.Shape([0, 3]) and got.dtype is st.DType.F32


def test_missing_storages_are_refused(tmp_path: Path) -> None:
    payload = state_dict(tensor(store=storage(key="7")))
    with pytest.raises(st.FormatError, match="storage '7' has no member archive/data/7"):
        open_pytorch(as_zip(tmp_path, payload))
    with pytest.raises(st.FormatError, match=r"missing \['7'\]"):
        open_pytorch(as_legacy(tmp_path, payload))


def test_storage_described_twice_differently_is_refused() -> None:
    body = b"]" + MARK + tensor() + tensor(store=storage(numel=8)) + b"e"
    with pytest.raises(st.FormatError, match="storage '0' is described twice, differently"):
        run(state_dict(body))


def test_compressed_members_are_refused(tmp_path: Path) -> None:
    path = as_zip(tmp_path, state_dict(tensor()), method=zipfile.ZIP_DEFLATED)
    with pytest.raises(st.FormatError):
        open_pytorch(path)


def test_zip_layout_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "flat.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data.pkl", state_dict(tensor()))
    with pytest.raises(st.FormatError, match="one top-level folder"):
        open_pytorch(path)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/other.pkl", b"")
    with pytest.raises(st.FormatError, match=r"has no archive/data\.pkl"):
        open_pytorch(path)
    path = as_zip(tmp_path, state_dict(tensor()) + b"junk")
    with pytest.raises(st.FormatError, match="4 bytes after its STOP"):
        open_pytorch(path)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", state_dict(tensor()))
        archive.writestr("archive/byteorder", b"middle")
        archive.writestr("archive/data/0", bytes(16))
    with pytest.raises(st.FormatError, match="byteorder is b'middle'"):
        open_pytorch(path)


def test_legacy_stream_is_checked(tmp_path: Path) -> None:
    good = as_legacy(tmp_path, state_dict(tensor())).read_bytes()
    cases = {
        good + b"x": "1 bytes after the last storage",
        good[:-1]: "needs 16 bytes, 15 remain",
        good[:-20]: "the file ends before its size",
        good.replace(struct.pack("<q", 4), struct.pack("<q", 5)): "stored with 5 elements",
        good.replace(pickle.dumps(1001, protocol=2), pickle.dumps(1002, protocol=2)): "1002",
    }
    for data, match in cases.items():
        (tmp_path / "bad.pt").write_bytes(data)
        with pytest.raises(st.FormatError, match=match):
            open_pytorch(tmp_path / "bad.pt")
    extra = as_legacy(tmp_path, state_dict(tensor()), {"0": bytes(16), "9": bytes(4)})
    with pytest.raises(st.FormatError, match="does not match the storages"):
        open_pytorch(extra)


# -- the interpreter builds exactly the plain data pickle would --------------------------------

plain = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats(allow_nan=False) | hs.text()
    | hs.binary(min_size=1),
    lambda inner: hs.lists(inner, max_size=4)
    | hs.tuples(inner, inner)
    | hs.lists(inner, max_size=5).map(tuple)
    | hs.dictionaries(hs.text() | hs.integers(), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


def as_python(value: object) -> object:
    if isinstance(value, PickledSet):
        return frozenset(value.items) if value.frozen else set(value.items)
    if isinstance(value, TorchSize):
        return ("Size", value.dims)
    if isinstance(value, dict):
        return {
            key.value if isinstance(key, IntKey) else key: as_python(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [as_python(item) for item in value]
    if isinstance(value, tuple):
        return tuple(as_python(item) for item in value)
    return value


@settings(max_examples=300, deadline=None)
@given(value=plain, protocol=hs.integers(2, 5))
def test_plain_data_reads_as_pickle_reads_it(value: object, protocol: int) -> None:
    assert as_python(run(pickle.dumps(value, protocol=protocol))) == value


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_every_protocol(protocol: int) -> None:
    value: dict[Any, Any] = {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31, 2**70, -(2**70)],
        "floats": [0.0, -0.0, 1.5, 1e300, float("inf")],
        "text": ["", "a", "ü€\n'\"\\", "x" * 300],
        "flags": (True, False, None),
        7: {"nested": ({"deep": [1]},)},
        "bytes": b"\x00\xff\n'\"raw",
    }
    if protocol >= 4:
        value["sets"] = [{1, "a"}, frozenset({2.5})]
    if protocol >= 5:
        value["array"] = bytearray(b"ba")
    got = as_python(run(pickle.dumps(value, protocol=protocol)))
    if protocol >= 5:
        value["array"] = b"ba"
    assert got == value


def test_protocol_0_strings_and_frames() -> None:
    assert run(b"S'a\\x41\\n\\101\\''\n.") == "aA\nA'"
    assert run(b'S"q"\n.') == "q"
    assert run(b"(I00\nI01\nL12L\nF-2.5\nt.") == (False, True, 12, -2.5)
    framed = pickle.dumps({"k": list(range(100))}, protocol=4)
    assert run(framed) == {"k": list(range(100))}


# -- fuzzing: mutated torch.save files fail only with DataError ---------------------------------


def sample_files() -> dict[str, bytes]:
    torch = pytest.importorskip("torch")
    state = {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.tensor([True, False]),
        "c": torch.ones(2, dtype=torch.uint16),
        "meta": {"epoch": 3, "size": torch.Size([2]), "blob": b"xy"},
    }
    state["t"] = state["a"].t()
    files = {}
    for fmt in ("zip", "legacy"):
        buffer = io.BytesIO()
        torch.save(state, buffer, _use_new_zipfile_serialization=fmt == "zip")
        files[fmt] = buffer.getvalue()
    with zipfile.ZipFile(io.BytesIO(files["zip"])) as archive:
        files["data.pkl"] = archive.read("archive/data.pkl")
    return files


SAMPLES: dict[str, bytes] = {}


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, value in edits:
        if not out:
            break
        index = where % len(out)
        if kind == 0:
            out[index] = value
        elif kind == 1:
            out.insert(index, value)
        elif kind == 2:
            del out[index]
        else:
            del out[index:]
    return bytes(out)


def only_data_errors(path: Path) -> None:
    try:
        opened = open_pytorch(path)
        for name in opened:
            opened.get(name).numpy()
        _ = opened.metadata
    except st.DataError:
        pass


edits = hs.lists(
    hs.tuples(hs.integers(0, 3), hs.integers(0, 2**16), hs.integers(0, 255)), min_size=1, max_size=6
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=hs.sampled_from(["zip", "legacy", "data.pkl"]), changes=edits)
def test_fuzzed_checkpoints_fail_only_with_data_errors(target: str, changes: list[Any]) -> None:
    if not SAMPLES:
        SAMPLES.update(sample_files())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.pt"
        if target == "data.pkl":
            # Keep the archive valid so the mutations reach the interpreter.
            source = zipfile.ZipFile(io.BytesIO(SAMPLES["zip"]))
            with zipfile.ZipFile(path, "w") as archive:
                for name in source.namelist():
                    data = source.read(name)
                    archive.writestr(
                        name, mutate(data, changes) if name.endswith("data.pkl") else data
                    )
        else:
            path.write_bytes(mutate(SAMPLES[target], changes))
        only_data_errors(path)


# -- the source never reaches for pickle machinery or dynamic lookups ---------------------------

FORBIDDEN_MODULES = {
    "pickle", "_pickle", "pickletools", "cPickle", "copyreg", "torch", "importlib", "builtins",
    "marshal", "runpy", "subprocess", "shelve", "dill", "joblib", "code", "codeop",
}  # fmt: skip
FORBIDDEN_CALLS = {
    "eval", "exec", "__import__", "compile", "globals", "locals", "vars", "setattr",
    "delattr", "open", "breakpoint", "input",
}  # fmt: skip


@pytest.mark.parametrize(
    "module",
    [
        "pickle/_machine.py",
        "pickle/_ops.py",
        "pickle/_globals.py",
        "pickle/_data.py",
        "torch/_pytorch.py",
    ],
)
def test_reader_source_imports_and_calls_nothing_dynamic(module: str) -> None:
    tree = ast.parse((SRC / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:  # not strided's own
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{module} imports {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called = node.func.id
            assert called not in FORBIDDEN_CALLS, f"{module} calls {called}"
            if called in ("getattr", "hasattr"):
                # Only a name fixed in the source, never one read from a file.
                assert isinstance(node.args[1], ast.Constant), f"{module}: dynamic {called}"
        if isinstance(node, ast.Attribute):
            assert node.attr not in ("__dict__", "__globals__", "__builtins__", "__subclasses__")
