"""Trust holes, closed: arrays handed out are fresh and read-only all the way down their
public attributes, only truly immutable inputs are shared, running out of memory is a
LimitError, a tensor's truth value follows NumPy, and shapes print in full."""

from __future__ import annotations

import array
import copy
import json
import mmap
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import strided as st

D = st.DType

# -- every public way to get a tensor ---------------------------------------------------


def _file_tensors(tmp_path: Path) -> dict[str, st.Tensor]:
    source = {"a": st.tensor([[1, 2, 3], [4, 5, 6]], D.I32), "b": st.tensor([7, 8], D.I32)}
    st.save_safetensors(tmp_path / "m.safetensors", source)
    st.save_npy(tmp_path / "m.npy", source["a"])
    return {
        "safetensors": st.load_safetensors(tmp_path / "m.safetensors")["a"],
        "safetensors view": st.open_safetensors(tmp_path / "m.safetensors").get("a")[:, ::-1],
        "safetensors copy": st.load_safetensors(tmp_path / "m.safetensors", copy=True)["a"],
        "npy": st.load_npy(tmp_path / "m.npy"),
        "npy copy": st.load_npy(tmp_path / "m.npy", copy=True),
    }


def _built_tensors() -> dict[str, st.Tensor]:
    base = st.tensor([[1, 2, 3], [4, 5, 6]], D.I32)
    return {
        "tensor": base,
        "view": base[::-1, 1:],
        "rank 0 view": base[1, 2],
        "zeros": st.Tensor.zeros(D.F32, (2, 3)),
        "empty": st.Tensor.zeros(D.F32, (0, 3)),
        "full": st.Tensor.full(D.BF16, (2,), 0.5),
        "from_scalars": st.Tensor.from_scalars(D.I8, (3,), [1, 2, 3]),
        "from_numpy": st.Tensor.from_numpy(np.arange(6).reshape(2, 3)),
        "from_le_bytes bytes": st.Tensor.from_le_bytes(D.U8, (4,), b"abcd"),
        "from_le_bytes bytearray": st.Tensor.from_le_bytes(D.U8, (4,), bytearray(b"abcd")),
        "from_json": st.Tensor.from_json(base.to_json()),
        "add": base + base,
        "convert": base.convert(D.F64),
        "reshape copy": base.transpose().reshape(6),
        "contiguous": base.T.contiguous(),
        "broadcast_to": base[0].broadcast_to((2, 3)),
        "with_slice": base.with_slice(0, 9),
        "sum axis": base.sum(axis=0),  # type: ignore[dict-item]
        "matmul": base @ base.T,
    }


@pytest.fixture
def tensors(tmp_path: Path) -> dict[str, st.Tensor]:
    return _built_tensors() | _file_tensors(tmp_path)


def _handed_out(t: st.Tensor) -> Iterator[tuple[str, np.ndarray]]:
    """Every array a public method hands out."""
    yield "numpy()", t.numpy()
    yield "np.asarray", np.asarray(t)
    yield "np.asarray copy=False", np.asarray(t, copy=False)
    yield "__array__()", t.__array__()
    yield "np.array(copy=None)", np.array(t, copy=None)


# -- 1. fresh read-only views --------------------------------------------------------


def test_arrays_handed_out_are_fresh_objects(tensors: dict[str, st.Tensor]) -> None:
    for t in tensors.values():
        assert t.numpy() is not t.numpy()
        assert np.asarray(t) is not np.asarray(t)


def test_changing_an_array_handed_out_never_changes_the_tensor(
    tensors: dict[str, st.Tensor],
) -> None:
    for label, t in tensors.items():
        before = (t.shape, t.dtype, t.strides, t.offset, t.to_le_bytes())
        for how, handed in _handed_out(t):
            with warnings.catch_warnings():  # NumPy 2.4 deprecates setting strides
                warnings.simplefilter("ignore", DeprecationWarning)
                if handed.size >= 2 and handed.ndim == 1:
                    handed.shape = (1, handed.size)
                if handed.ndim:
                    handed.strides = (0,) * handed.ndim  # legal on any array: one element
                size = handed.itemsize
                handed.dtype = np.uint8 if size == 1 else np.dtype(f"V{size}")
            assert (t.shape, t.dtype, t.strides, t.offset, t.to_le_bytes()) == before, (
                label,
                how,
            )
            with pytest.raises(ValueError):
                handed.flags.writeable = True


def test_reshaping_the_storage_array_changes_nothing(tmp_path: Path) -> None:
    # t.numpy().base is a storage array: its metadata is nobody's business, and a file
    # reader never slices later tensors out of an array a tensor hands out.
    st.save_safetensors(tmp_path / "m.safetensors", {"a": st.tensor([1, 2], D.I32),
                                                     "b": st.tensor([3, 4], D.I32)})  # fmt: skip
    handle = st.open_safetensors(tmp_path / "m.safetensors")
    for t in (handle.get("a"), st.tensor([1, 2], D.I32) + 0):
        storage = t.numpy().base
        before = (t.offset, t.storage_byte_len, t.to_le_bytes())
        with warnings.catch_warnings():  # NumPy 2.4 deprecates setting strides
            warnings.simplefilter("ignore", DeprecationWarning)
            storage.dtype = np.dtype(f"V{storage.nbytes}")
            storage.shape = (1, 1)
            storage.strides = (0, 0)
        assert (t.offset, t.storage_byte_len, t.to_le_bytes()) == before
    assert handle.get("b").tolist() == [3, 4]
    assert handle.get("a").shares_storage(handle.get("b"))


# -- 3. no public chain reaches writable memory --------------------------------------


def _reachable(start: object) -> list[object]:
    """Everything reachable from ``start`` through public attributes, buffers and array
    interfaces (what the contract covers: no underscore names, gc or ctypes)."""
    seen: dict[int, object] = {}
    todo = [start]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen[id(item)] = item
        if isinstance(item, np.ndarray):
            todo.append(item.base)  # (.T, .real and the like are views of the same base)
            if item.dtype.kind != "V":  # ml_dtypes types have no buffer format
                todo.append(item.data)
        elif isinstance(item, memoryview):
            todo.append(item.obj)
        elif not isinstance(item, (bytes, mmap.mmap)):
            todo += [getattr(item, name, None) for name in dir(item) if not name.startswith("_")]
            if hasattr(item, "__array_interface__"):
                todo.append(np.asarray(item))
    return [item for item in seen.values() if not callable(item)]


def _assert_cannot_write(item: object) -> None:
    assert not isinstance(item, (bytearray, array.array)), type(item)
    if isinstance(item, np.ndarray):
        assert not item.flags.writeable
        with pytest.raises(ValueError):
            item.flags.writeable = True
        if item.size:
            first = (0,) * item.ndim
            with pytest.raises(ValueError):
                item[first] = item[first]
    elif isinstance(item, memoryview):
        assert item.readonly
        if item.format == "B":
            with pytest.raises(TypeError):
                item[:0] = b""
    elif isinstance(item, mmap.mmap):
        with memoryview(item) as probe:
            assert probe.readonly
    elif hasattr(item, "__array_interface__"):  # the private owner of storage memory
        interface = item.__array_interface__
        assert interface["data"][1] is True  # read-only
        interface["data"] = (interface["data"][0], False)  # editing a copy changes nothing
        assert not np.asarray(item).flags.writeable
        with pytest.raises(TypeError):
            copy.copy(item)  # a copy would claim the same memory
        with pytest.raises(TypeError):
            item.__getstate__()  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            memoryview(item)  # type: ignore[arg-type]
    else:
        assert isinstance(item, (bytes, int, float, str, bool, tuple, np.dtype, np.flatiter))


def test_no_public_chain_reaches_writable_memory(tensors: dict[str, st.Tensor]) -> None:
    for t in tensors.values():
        for _, handed in _handed_out(t):
            for item in _reachable(handed):
                _assert_cannot_write(item)


def test_the_owner_behind_numpy_base_base_is_not_writable(tensors: dict[str, st.Tensor]) -> None:
    for label, t in tensors.items():
        before = t.to_le_bytes()
        owner = t.numpy().base.base
        with pytest.raises((AttributeError, TypeError, ValueError)):
            owner.obj[:] = 0  # what a memoryview over the owned array used to allow
        if hasattr(owner, "__array_interface__"):
            with pytest.raises(ValueError):
                np.asarray(owner)[...] = 0
        with pytest.raises((TypeError, ValueError)):
            memoryview(t.numpy()).obj[...] = 0
        assert t.to_le_bytes() == before, label


_REBUILD_ATTACKS = textwrap.dedent(
    """
    import gc, sys
    import numpy as np
    import strided as st

    n = 1 << 16
    values = np.arange(n, dtype=np.int64)
    st.save_safetensors(sys.argv[1], {"v": st.Tensor.from_numpy(values)})
    tensors = [
        st.Tensor.from_numpy(values),
        st.Tensor.from_le_bytes(st.DType.I64, (n,), values.tobytes()),
        st.Tensor.from_le_bytes(st.DType.I64, (n,), memoryview(values.tobytes())),
        st.load_safetensors(sys.argv[1])["v"],
    ]
    tensors.append(tensors[0][::-1])
    facts = lambda: [(t.sum().value, t.offset, t.storage_byte_len, t.strides) for t in tensors]
    before = facts()
    for tensor in tensors:
        for handed in (tensor.numpy(), np.asarray(tensor)):
            for target in (handed.base, handed):
                # pickle's hook: it swaps an array's memory and drops its base
                target.__setstate__((1, (2,), np.dtype("u1"), False, b"ab"))
        owner = tensor.numpy().base.base
        try:
            owner.__init__(np.zeros(3))  # must not re-point the owner
        except TypeError:
            pass
    del handed, target, owner
    gc.collect()
    junk = [np.full(n, 7) for _ in range(64)]
    print(facts() == before, before[0][0] == n * (n - 1) // 2)
    """
)


def test_rebuilding_what_is_handed_out_cannot_free_or_move_the_memory(tmp_path: Path) -> None:
    # Run apart: on an unprotected tensor this reads freed memory and may crash.
    done = subprocess.run(
        [sys.executable, "-c", _REBUILD_ATTACKS, str(tmp_path / "v.safetensors")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_nothing_reachable_can_release_the_memory(tmp_path: Path) -> None:
    # A memoryview reachable from a tensor could be release()d, and a mapping closed,
    # leaving the tensor over freed memory.
    reading = _mapping(tmp_path, mmap.ACCESS_READ)
    shared = [
        st.Tensor.from_le_bytes(D.U8, (8,), bytes(range(8))),
        st.Tensor.from_le_bytes(D.U8, (8,), memoryview(bytes(range(8)))),
        st.Tensor.from_le_bytes(D.U8, (8,), reading),
        st.Tensor.from_le_bytes(D.U8, (8,), memoryview(reading)),
    ]
    for t in [*shared, *_built_tensors().values(), *_file_tensors(tmp_path).values()]:
        chain: list[object] = [t.numpy()]
        while isinstance(chain[-1], (np.ndarray, memoryview)):
            step = chain[-1]
            chain.append(step.base if isinstance(step, np.ndarray) else step.obj)
        for item in chain:
            assert not isinstance(item, memoryview), chain
            assert not isinstance(item, mmap.mmap) or _cannot_close(item)
    with pytest.raises(BufferError):
        reading.close()  # the tensors over it keep it open
    assert shared[2].tolist() == shared[3].tolist() == [0] * 8


def _cannot_close(mapping: mmap.mmap) -> bool:
    try:
        mapping.close()
    except BufferError:
        return True
    return False


def test_copies_asked_for_are_the_callers_own() -> None:
    t = st.tensor([1, 2, 3], D.I32)
    for mine in (np.array(t), np.asarray(t, dtype=np.int64), t.__array__(copy=True)):
        mine[0] = 9
        assert t.tolist() == [1, 2, 3]
    with pytest.raises(ValueError):
        t.__array__(np.int64, copy=False)


# -- 2. from_le_bytes shares only immutable memory --------------------------------------


def _mapping(tmp_path: Path, access: int) -> mmap.mmap:
    path = tmp_path / f"eight-{len(list(tmp_path.iterdir()))}.bin"  # one file per mapping
    path.write_bytes(bytes(8))
    with open(path, "r+b") as file:
        return mmap.mmap(file.fileno(), 8, access=access)


def _mutable_sources(tmp_path: Path) -> dict[str, tuple[object, Callable[[], None]]]:
    """Buffers whose memory someone can still change, with a way to change it."""
    found: dict[str, tuple[object, Callable[[], None]]] = {}
    raw = bytearray(8)
    found["bytearray"] = (raw, lambda: raw.__setitem__(0, 1))
    ro_raw = bytearray(8)
    found["read-only memoryview of a bytearray"] = (
        memoryview(ro_raw).toreadonly(),
        lambda: ro_raw.__setitem__(0, 1),
    )
    nested = bytearray(8)
    found["read-only view of a view of a bytearray"] = (
        memoryview(memoryview(nested)[:]).toreadonly().cast("B"),
        lambda: nested.__setitem__(0, 1),
    )
    numbers = array.array("i", [0, 0])
    found["read-only memoryview of an array.array"] = (
        memoryview(numbers).toreadonly(),
        lambda: numbers.__setitem__(0, 1),
    )
    frozen = np.zeros(8, np.uint8)
    frozen.flags.writeable = False

    def thaw() -> None:
        frozen.flags.writeable = True
        frozen[0] = 1

    found["read-only NumPy array"] = (frozen, thaw)
    viewed = np.zeros(8, np.uint8)
    found["read-only memoryview of a NumPy array"] = (
        memoryview(viewed).toreadonly(),
        lambda: viewed.__setitem__(0, 1),
    )
    writable = _mapping(tmp_path, mmap.ACCESS_WRITE)
    found["writable mmap"] = (writable, lambda: writable.__setitem__(0, 1))
    shadow = _mapping(tmp_path, mmap.ACCESS_WRITE)
    found["read-only memoryview of a writable mmap"] = (
        memoryview(shadow).toreadonly(),
        lambda: shadow.__setitem__(0, 1),
    )
    private = _mapping(tmp_path, mmap.ACCESS_COPY)
    found["copy-on-write mmap"] = (private, lambda: private.__setitem__(0, 1))
    return found


def test_from_le_bytes_copies_memory_that_can_still_change(tmp_path: Path) -> None:
    for label, (data, change) in _mutable_sources(tmp_path).items():
        t = st.Tensor.from_le_bytes(D.I32, (2,), data)
        change()
        assert t.tolist() == [0, 0], label


def test_from_le_bytes_shares_immutable_memory(tmp_path: Path) -> None:
    frozen = bytes(range(8))
    reading = _mapping(tmp_path, mmap.ACCESS_READ)
    sources = {
        "bytes": (frozen, frozen),
        "read-only memoryview of bytes": (memoryview(frozen), frozen),
        "a slice of it": (memoryview(b"xx" + frozen)[2:], None),
        "read-only mmap": (reading, reading),
        "memoryview of a read-only mmap": (memoryview(reading).cast("B"), reading),
    }
    for label, (data, origin) in sources.items():
        t = st.Tensor.from_le_bytes(D.U8, (8,), data)
        assert np.shares_memory(t.numpy(), np.frombuffer(data, np.uint8)), label  # type: ignore[call-overload]
        if origin is not None:
            assert np.shares_memory(t.numpy(), np.frombuffer(origin, np.uint8)), label  # type: ignore[call-overload]


# -- 4. running out of memory is LimitError, at every entry point -------------------------

_OUT_OF_MEMORY = textwrap.dedent(
    """
    import itertools, json, resource
    import numpy as np
    import strided as st

    U8, F64 = st.DType.U8, st.DType.F64
    big = st.Tensor.zeros(U8, (2**28,))  # 256 MiB of address space, made before the limit
    wide = st.Tensor.zeros(st.DType.F32, (2**26,))  # another 256 MiB
    small = st.tensor([1], U8)
    row = [0.0] * 2**15
    size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                if line.startswith("VmSize:"))
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (size + 64 * 2**20, hard))
    calls = {
        "zeros": lambda: st.Tensor.zeros(F64, (2**30,)),
        "full": lambda: st.Tensor.full(F64, (2**30,), 1.5),
        "from_numpy": lambda: st.Tensor.from_numpy(np.broadcast_to(np.uint8(0), (2**31,))),
        "from_le_bytes": lambda: st.Tensor.from_le_bytes(U8, (2**28,), big.numpy()),
        "from_scalars": lambda: st.Tensor.from_scalars(F64, (2**30,), itertools.repeat(0.0)),
        "tensor": lambda: st.tensor([row] * 2**15, F64),
        "broadcast_to": lambda: small.broadcast_to((2**31,)),
        "reshape": lambda: big[::-1].reshape(2**14, 2**14),
        "contiguous": lambda: big[::-1].contiguous(),
        "convert": lambda: big.convert(st.DType.I64),
        "add": lambda: big + big,
        "mul": lambda: 2 * big,
        "with_slice": lambda: big.with_slice(0, 0),
        "set": lambda: big.at[0].set(0),
        "to_le_bytes": lambda: big.to_le_bytes(),
        "tolist": lambda: big.tolist(),
        "to_json": lambda: big.to_json(),
        "to_dict": lambda: wide.to_dict(),
        "eq": lambda: big == big[::-1],
    }
    found = {}
    for name, call in calls.items():
        try:
            call()
            found[name] = "no error"
        except BaseException as error:
            found[name] = [type(error).__name__, str(error)]
    found["afterwards"] = (small + small).tolist()
    print(json.dumps(found))
    """
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_running_out_of_memory_is_a_limit_error() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert found.pop("afterwards") == [2]
    for name, outcome in found.items():
        kind, message = outcome
        assert kind == "LimitError", name
        assert message.startswith(f"{name}: "), name
        # Either the generic message, or the construction's own naming the shape and size.
        assert "does not fit in memory" in message or "more than this process can" in message


# -- 5. truth values follow NumPy ------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "dtype", "expected"),
    [
        ([False], "BOOL", False),
        ([True], "BOOL", True),
        (False, "BOOL", False),
        ([[[0]]], "I64", False),
        ([[7]], "U8", True),
        (-0.0, "F32", False),
        ([float("nan")], "F64", True),
        ([0.0], "F8_E4M3", False),
        (["-0.0"], "F8_E5M2", False),
        (["nan"], "BF16", True),
        ([0.5], "F8_E8M0", True),
        (["nan"], "F8_E8M0", True),
    ],
)
def test_one_element_is_its_truth_value(values: object, dtype: str, expected: bool) -> None:
    t = st.tensor(values, dtype)
    assert bool(t) is expected
    assert bool(t.reshape(1, 1)[0]) is expected
    wide = t.convert(D.F64) if t.dtype.is_float else t
    assert bool(np.asarray(wide)) is expected  # NumPy agrees


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([1, 2], "I8"),
        ([[0, 0]], "I8"),
        ([], "F32"),
        ([[], [], []], "F32"),
        (["nan", "nan"], "F8_E8M0"),
    ],
)
def test_several_or_no_elements_are_ambiguous(values: object, dtype: str) -> None:
    t = st.tensor(values, dtype)
    with pytest.raises(ValueError):
        bool(np.asarray(t.convert(D.F64) if t.dtype.is_float else t))  # NumPy 2 agrees
    with pytest.raises(st.ShapeError, match=r"truth value of a.* is ambiguous"):
        bool(t)
    with pytest.raises(ValueError):
        _ = not t


# -- 6. shapes print in full ----------------------------------------------------------


def test_shapes_print_every_digit() -> None:
    assert str(st.Shape((2**70,))) == "[1180591620717411303424]"
    assert repr(st.Shape((2**70, 3))) == "Shape([1180591620717411303424, 3])"
    assert str(st.Shape((10**4000,))) == "[" + "1" + "0" * 4000 + "]"
    # Error messages still shorten hostile dims.
    with pytest.raises(st.ShapeError, match=r"\[<71-bit int>\] and \[3\]"):
        st.Shape((2**70,)).broadcast((3,))


def test_checked_numel_of_a_scalar_shape_counts_one() -> None:
    assert st.Shape(()).checked_numel(limit=0) is None
    assert st.Shape(()).checked_numel(limit=1) == 1
    assert st.Shape((0, 2**70)).checked_numel(limit=0) == 0
    assert st.Shape((3,)).checked_numel(limit=2) is None
