"""The data torch.load(weights_only=True) refuses (or barely reads), read as data.

NumPy arrays, scalars and dtypes, Namespaces, Lightning's AttributeDict, defaultdicts,
Counters, sets, complex numbers, bytes, paths, torch devices, dtypes and layouts, tensors
with Python attributes, torch 0.4's tensors, and dict keys that are not str: strided
reads them without importing or calling anything, with the names, values and bits that
``torch.load`` gives. The oracle is torch.load itself, run in a child process
(``tests/torchoracle.py``) on files these tests wrote with ``torch.save``; pure pickles
of the same values are checked against the objects they were made from.
"""

from __future__ import annotations

import argparse
import collections
import math
import pathlib
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io._budget import ParseBudget
from strided.io.pickle._machine import interpret
from strided.io.pickle._numpy import ArrayRef, array_values
from strided.io.pickle._walk import flatten as _flatten

from .test_pickle_budget import P61, child, cpu_seconds
from .test_pickle_hostile import MARK, PROTO2, STOP, as_legacy, call, glob, num, run, text, tup

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
lightning_data = pytest.importorskip("lightning_fabric.utilities.data")
lightning_parsing = pytest.importorskip("pytorch_lightning.utilities.parsing")

from .torchoracle import Oracle, array_entry, flatten  # noqa: E402  (needs torch)

NUMPY_DTYPES = [np.dtype(kind) for kind in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
)] + [np.dtype(getattr(ml_dtypes, name)) for name in (
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
)]  # fmt: skip
TORCH_DTYPES = [
    torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]  # fmt: skip
# (pickle protocol, zip format): what torch.save writes by default is (2, True).
SAVES = [(2, True), (2, False), (4, True), (4, False), (5, True), (5, False)]


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    found = Oracle()
    yield found
    found.close()


# -- values --------------------------------------------------------------------------------


def _raw(draw: Any, count: int, dtype: np.dtype[Any]) -> bytes:
    data = draw(hs.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))
    return bytes(byte & 1 for byte in data) if dtype.kind == "b" else data


@hs.composite
def numpy_arrays(draw: Any) -> np.ndarray[Any, Any]:
    """Every dtype, 0-d to 3-d, empty ones, Fortran order, big-endian; any bit pattern."""
    dtype = draw(hs.sampled_from(NUMPY_DTYPES))
    shape = tuple(draw(hs.lists(hs.integers(0, 4), max_size=3)))
    array = np.frombuffer(_raw(draw, math.prod(shape), dtype), dtype=dtype).reshape(shape)
    if dtype.itemsize > 1 and dtype.kind != "V" and draw(hs.booleans()):
        array = array.byteswap().view(dtype.newbyteorder(">"))  # the same values, stored BE
    if draw(hs.booleans()):
        return np.asfortranarray(array)
    return array.copy()


@hs.composite
def numpy_scalars(draw: Any) -> np.generic:
    dtype = draw(hs.sampled_from(NUMPY_DTYPES))
    found: np.generic = np.frombuffer(_raw(draw, 1, dtype), dtype=dtype)[0]
    return found


@hs.composite
def torch_tensors(draw: Any) -> Any:
    dtype = draw(hs.sampled_from(TORCH_DTYPES))
    shape = tuple(draw(hs.lists(hs.integers(0, 3), max_size=3)))
    numpy_dtype = np.dtype(f"u{torch.empty(0, dtype=dtype).element_size()}")
    raw = _raw(draw, math.prod(shape), np.dtype("bool") if dtype is torch.bool else numpy_dtype)
    flat = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if raw
        else torch.empty(0, dtype=torch.uint8)
    )
    tensor = flat.view(dtype).reshape(shape)
    return tensor.t() if tensor.dim() == 2 and draw(hs.booleans()) else tensor


LETTERS = hs.text("abcdefgh", min_size=1, max_size=3)
PATH_PARTS = hs.lists(LETTERS, min_size=1, max_size=3)
# Everything but torch tensors (which plain pickles cannot hold without torch.save).
PURE_LEAVES = hs.one_of(
    hs.none(),
    hs.booleans(),
    hs.integers(-(2**70), 2**70),
    hs.floats(),
    hs.text(max_size=8),
    hs.binary(max_size=6),
    hs.binary(max_size=6).map(bytearray),
    hs.complex_numbers(),
    PATH_PARTS.map(lambda parts: pathlib.PurePosixPath("/", *parts)),
    PATH_PARTS.map(lambda parts: pathlib.PosixPath(*parts)),
    PATH_PARTS.map(lambda parts: pathlib.PureWindowsPath("C:\\", *parts)),
    hs.lists(hs.integers(0, 9), max_size=3).map(torch.Size),
    hs.sampled_from(["cpu", "cuda:1", "meta"]).map(torch.device),
    hs.integers(0, 3).map(lambda index: torch.device("cuda", index)),
    hs.sampled_from([*TORCH_DTYPES, torch.complex64, torch.float8_e4m3fn, torch.uint16]),
    hs.sampled_from(NUMPY_DTYPES),
    hs.just(torch.strided),
    numpy_scalars(),
    numpy_arrays(),
)
LEAVES = hs.one_of(PURE_LEAVES, torch_tensors())
NON_STR_KEYS = hs.one_of(
    hs.integers(-3, 300),
    hs.floats(allow_nan=False, width=32),
    hs.booleans(),
    hs.none(),
    hs.tuples(hs.integers(0, 9), LETTERS),
    hs.tuples(hs.integers(0, 9)),
)


def _containers(children: Any) -> Any:
    named = hs.dictionaries(LETTERS, children, max_size=4)
    factories = hs.sampled_from([list, dict, set, int, float, str, None])
    return hs.one_of(
        named,
        hs.dictionaries(NON_STR_KEYS, children, max_size=4),
        hs.lists(children, max_size=4),
        hs.lists(children, max_size=3).map(tuple),
        named.map(lambda items: argparse.Namespace(**items)),
        named.map(lambda items: lightning_data.AttributeDict(items)),
        named.map(lambda items: lightning_parsing.AttributeDict(items)),
        hs.tuples(factories, named).map(lambda pair: collections.defaultdict(*pair)),
        named.map(collections.Counter),
        named.map(collections.OrderedDict),
        hs.sets(LETTERS, max_size=4),
        hs.frozensets(hs.integers(-50, 50), max_size=4),
    )


VALUES = hs.recursive(LEAVES, _containers, max_leaves=12)


# -- comparing -----------------------------------------------------------------------------


def _plain(value: object) -> object:
    """A metadata value with floats by their bits and bools apart from ints (a NumPy
    float scalar is a float that remembers its stored type: compared by its bits too)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if type(value) is list:
        return [_plain(item) for item in value]
    return (type(value).__name__, value)


View = tuple[list[str], dict[str, Any], list[str], dict[str, Any]]


def _view(tensors: dict[str, Any], metadata: dict[str, Any]) -> View:
    """Names in order and values, tensors and metadata apart (metadata values _plain)."""
    plain = {name: _plain(value) for name, value in metadata.items()}
    return list(tensors), tensors, list(plain), plain


def _expected_view(found: dict[str, Any]) -> View:
    tensors = {name: tuple(entry[1:]) for name, entry in found.items() if entry[0] == "tensor"}
    return _view(tensors, {name: entry[1] for name, entry in found.items() if entry[0] == "meta"})


def _strided_view(path: Path) -> View:
    opened = st.open_checkpoint(path)
    tensors = {}
    for name in opened.keys():
        info, tensor = opened.info(name), opened[name]
        assert (info.dtype, list(info.shape)) == (tensor.dtype.name, list(tensor.shape))
        raw = np.ascontiguousarray(tensor.numpy()).tobytes()
        tensors[name] = (info.dtype, tuple(info.shape), raw)
    return _view(tensors, opened.metadata)


def _agrees_with_torch(oracle: Oracle, path: Path) -> None:
    found = oracle.load(path, weights_only=False)
    if type(found) is tuple:  # two values named alike: strided refuses the file
        assert found[0] == "twice", found
        with pytest.raises(st.FormatError, match="produced twice"):
            st.open_checkpoint(path)
        return
    assert _strided_view(path) == _expected_view(found)
    strict = oracle.load(path, weights_only=True)
    if type(strict) is not tuple:  # where weights_only=True reads it, it reads the same
        assert strict == found


# -- torch.save'd files against torch.load -------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=hs.dictionaries(LETTERS, VALUES, max_size=5), save=hs.sampled_from(SAVES))
def test_saved_data_reads_as_torch_loads_it(
    oracle: Oracle, tmp_path_factory: pytest.TempPathFactory, value: Any, save: Any
) -> None:
    protocol, zipped = save
    path = tmp_path_factory.mktemp("saved") / "data.pt"
    torch.save(value, path, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
    _agrees_with_torch(oracle, path)


def _every_kind() -> dict[str, Any]:
    """One of each, explicitly: the cases the generated ones might miss."""
    attributes = torch.arange(6.0).reshape(2, 3)
    attributes.note = "kept out"  # a tensor with Python attributes: _rebuild_from_type_v2
    parameter = torch.nn.Parameter(torch.ones(2))
    parameter.extra = 1  # _rebuild_parameter_with_state
    return {
        "arrays": {
            str(dtype): np.arange(6).astype(dtype).reshape(2, 3) for dtype in NUMPY_DTYPES
        },
        "fortran_be": np.asfortranarray(np.arange(24, dtype=">f4").reshape(2, 3, 4)),
        "zero_d": np.array(2.5, dtype=np.float16),
        "empty": np.zeros((0, 3), dtype=np.int64),
        "large": np.arange(5000, dtype=np.float64).reshape(50, 100),  # BINBYTES in protocol 4
        "scalars": [np.float32(0.1), np.bool_(True), np.uint64(2**64 - 1), np.float16(-0.0),
                    ml_dtypes.bfloat16(1.5), np.float64("nan")],
        "dtypes": [np.dtype(">i2"), np.dtype(ml_dtypes.bfloat16), torch.bfloat16, torch.complex128],
        "hparams": argparse.Namespace(lr=0.001, layers=[64, 64], name="run", seed=None),
        "lightning": lightning_data.AttributeDict(batch=32, opt={"beta": (0.9, 0.999)}),
        "counts": collections.Counter("mississippi"),
        "grouped": collections.defaultdict(list, {"a": [1], 3: [torch.ones(1)]}),
        "tags": {"b", "a", "10", "9"},
        "ids": frozenset({10, 9, -1}),
        "z": 1 + 2j,
        "blobs": [b"", bytearray(b"\x00\xff"), bytearray()],
        "where": [pathlib.PosixPath("/data/x.pt"), pathlib.PureWindowsPath("C:/w/x.pt"),
                  pathlib.PurePosixPath("rel/p")],
        "devices": [torch.device("cuda", 0), torch.device("cpu"), torch.device("cuda:1")],
        "size": torch.Size([3, 4]),
        "layout": torch.strided,
        "keys": {0.5: 1, True: 2, None: 3, (1, "a"): 4, 7: torch.zeros(2), (): 5},
        "attributes": attributes,
        "parameter": parameter,
    }  # fmt: skip


@pytest.mark.parametrize(("protocol", "zipped"), SAVES)
def test_every_kind_reads_as_torch_loads_it(
    oracle: Oracle, tmp_path: Path, protocol: int, zipped: bool
) -> None:
    path = tmp_path / "kinds.pt"
    torch.save(_every_kind(), path, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
    _agrees_with_torch(oracle, path)
    opened = st.open_checkpoint(path)
    # Spot checks of the rules themselves (the oracle agrees with them above).
    assert opened.metadata["z"] == "(1+2j)" and opened.metadata["devices.0"] == "cuda:0"
    assert [opened.metadata[f"tags.{index}"] for index in range(4)] == ["10", "9", "a", "b"]
    assert opened.metadata["scalars.0"] == float(np.float32(0.1)) != 0.1
    assert opened.metadata["scalars.2"] == 2**64 - 1 and opened.metadata["scalars.1"] is True
    assert (
        opened.metadata["dtypes.1"] == "bfloat16"
        and opened.metadata["dtypes.2"] == "torch.bfloat16"
    )
    assert (
        opened.metadata["where.1"] == "C:\\w\\x.pt" and opened.metadata["layout"] == "torch.strided"
    )
    assert opened.metadata["keys.(1, 'a')"] == 4 and opened.metadata["keys.()"] == 5
    assert opened.metadata["hparams.layers.1"] == 64 and opened.metadata["counts.s"] == 4
    assert (
        list(opened.info("fortran_be").shape) == [2, 3, 4] and opened.info("large").dtype == "F64"
    )
    fortran = opened["fortran_be"].numpy()
    assert np.array_equal(fortran, np.arange(24, dtype="<f4").reshape(2, 3, 4))


def test_weights_only_files_read_as_torch_reads_them(oracle: Oracle, tmp_path: Path) -> None:
    """Files torch.load(weights_only=True) reads hold exactly what strided gives."""
    value = {
        "state": collections.OrderedDict(w=torch.ones(2, 2), b=torch.zeros(2)),
        "step": collections.Counter(a=3),
        "tags": {"x", "y"},
        "z": 3 - 0.5j,
        "raw": bytearray(b"\x01\x02"),
        "device": torch.device("cuda", 1),
        "dtype": torch.float16,
        "keys": {1.5: torch.ones(1), (1, 2): 2, None: 3, False: 4},
    }
    for zipped in (True, False):
        path = tmp_path / f"w{zipped}.pt"
        torch.save(value, path, _use_new_zipfile_serialization=zipped)
        found = oracle.load(path, weights_only=True)
        assert type(found) is dict, found
        assert _strided_view(path) == _expected_view(found)


def test_real_lightning_hparams(oracle: Oracle, tmp_path: Path) -> None:
    """A Lightning module's saved hyper-parameters: AttributeDict and Namespace inside."""
    module = lightning_parsing.AttributeDict(lr=0.01, args=argparse.Namespace(depth=3))
    path = tmp_path / "hparams.ckpt"
    torch.save({"hyper_parameters": module, "state_dict": {"w": torch.ones(3)}}, path)
    _agrees_with_torch(oracle, path)
    assert st.open_checkpoint(path).metadata == {
        "hyper_parameters.lr": 0.01,
        "hyper_parameters.args.depth": 3,
    }


# -- pure pickles against the objects they were made from ----------------------------------


def _interpreted(data: bytes) -> View:
    root = interpret(memoryview(data), 0, "payload", {})[0]
    refs, metadata = _flatten(root, "stem", "payload", len(data), ParseBudget("payload"))
    tensors = {}
    for name, ref in refs.items():
        assert type(ref) is ArrayRef
        tensors[name] = tuple(array_entry(array_values(ref))[1:])
    return _view(tensors, metadata)


@settings(max_examples=300, deadline=None)
@given(
    value=hs.dictionaries(LETTERS, hs.recursive(PURE_LEAVES, _containers, max_leaves=10)),
    protocol=hs.integers(2, 5),
)
def test_pure_pickles_read_as_the_objects_they_hold(value: Any, protocol: int) -> None:
    data = pickle.dumps(value, protocol=protocol)
    expected = flatten(value, "stem")
    if type(expected) is tuple:
        with pytest.raises(st.FormatError, match="produced twice"):
            _interpreted(data)
        return
    assert _interpreted(data) == _expected_view(expected)


# -- torch 0.4 and older: the lpips weights, crafted opcode by opcode ----------------------


def _lpips_like(legacy_rebuild: bool) -> bytes:
    """A state dict as torch 0.3 (``_rebuild_tensor``) or 0.4 (hooks None) pickled it.

    The OrderedDict is made from a list of [key, value] pairs and then given its
    ``_metadata`` by BUILD; the storage lives on ``cuda:0`` (torch.load maps it to the CPU).
    """
    store = tup(text("storage"), glob("torch", "FloatStorage"), text("1933719376"),
                text("cuda:0"), num(6), b"N") + b"Q"  # fmt: skip
    size, stride = tup(num(1), num(6), num(1), num(1)), tup(num(6), num(1), num(1), num(1))
    if legacy_rebuild:
        made = call(glob("torch._utils", "_rebuild_tensor"), store, num(0), size, stride)
    else:
        made = call(glob("torch._utils", "_rebuild_tensor_v2"), store, num(0), size, stride,
                    b"\x89", b"N")  # fmt: skip
    pairs = b"]" + MARK + b"]" + MARK + text("lin0.model.1.weight") + made + b"e" + b"e"
    state = b"}" + text("_metadata") + call(glob("collections", "OrderedDict")) + b"s"
    return PROTO2 + call(glob("collections", "OrderedDict"), pairs) + state + b"b" + STOP


@pytest.mark.parametrize("legacy_rebuild", [True, False], ids=["torch 0.3", "torch 0.4"])
def test_pre_0_4_weights_read_as_torch_reads_them(
    oracle: Oracle, tmp_path: Path, legacy_rebuild: bool
) -> None:
    weights = np.array([0.5, -1.25, 3.0, 1e-3, -0.0, 7.5], dtype="<f4")
    path = as_legacy(tmp_path, _lpips_like(legacy_rebuild), {"1933719376": weights.tobytes()})
    found = oracle.load(path, weights_only=True)
    assert type(found) is dict, found  # torch reads these files with weights_only=True
    assert _strided_view(path) == _expected_view(found)
    tensor = st.open_checkpoint(path)["lin0.model.1.weight"]
    assert tensor.numpy().tobytes() == weights.tobytes() and list(tensor.shape) == [1, 6, 1, 1]


# -- hostile input -------------------------------------------------------------------------

NUMPY = "numpy._core.multiarray"


def _dtype(code: bytes, order: str = "<", fields: bytes = b"N") -> bytes:
    state = tup(num(3), text(order), b"N", fields, b"N", num(-1), num(-1), num(0))
    return call(glob("numpy", "dtype"), code, b"\x89", b"\x88") + state + b"b"


def _array(shape: bytes, dtype: bytes, raw: bytes, fortran: bytes = b"\x89") -> bytes:
    made = call(glob(NUMPY, "_reconstruct"), glob("numpy", "ndarray"), tup(num(0)), b"C\x01b")
    return made + tup(num(1), shape, dtype, fortran, raw) + b"b"


def _binbytes(data: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(data)) + data


def test_numpy_arrays_read_exactly_as_numpy_pickles_them() -> None:
    wanted = np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4))
    raw = _binbytes(wanted.tobytes(order="A"))
    array = _array(tup(num(3), num(4)), _dtype(text("i4"), ">"), raw, b"\x88")
    found: Any = run(PROTO2 + array + STOP)
    assert np.array_equal(array_values(found), wanted)
    assert array_values(found).dtype == np.dtype("<i4")


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (_array(tup(num(2), num(3)), _dtype(text("f4")), _binbytes(bytes(20))),
         r"holds 20 bytes, its shape \[2, 3\] of float32 needs 24"),
        (_array(tup(num(2)), _dtype(text("O8")), b"]"), "a NumPy object dtype"),
        (_array(tup(num(2)), _dtype(text("c8")), _binbytes(bytes(16))), "a NumPy complex dtype"),
        (_array(tup(num(2)), _dtype(text("U3")), _binbytes(bytes(24))), "a NumPy string dtype"),
        (_array(tup(num(2)), _dtype(text("V8")), _binbytes(bytes(16))), r"void \(structured\)"),
        (_array(tup(num(2)), _dtype(text("M8")), _binbytes(bytes(16))), "datetime"),
        (_array(tup(num(1)), _dtype(text("f4"), fields=tup(text("a"))), _binbytes(bytes(4))),
         "a structured dtype"),
        (_array(tup(num(1)), _dtype(text("f4"), "x"), _binbytes(bytes(4))), "byte order 'x'"),
        (_array(tup(num(1)), _dtype(glob("ml_dtypes", "int4")), _binbytes(bytes(1))),
         "ml_dtypes.int4 is an ml_dtypes type strided has no DType for"),
        (_array(tup(num(-1)), _dtype(text("f4")), _binbytes(b"")), "array shape"),
        (_array(tup(text("2")), _dtype(text("f4")), _binbytes(bytes(8))), "not a tuple of ints"),
        (_array(tup(num(1)), text("f4"), _binbytes(bytes(4))), "'f4', not a NumPy dtype"),
        (_array(tup(num(1)), _dtype(text("f4")), _binbytes(bytes(4))) + tup() + b"b",
         "the array is given a state twice"),
        (call(glob(NUMPY, "_reconstruct"), glob("numpy", "dtype"), tup(num(0)), b"C\x01b"),
         "the class is numpy.dtype, not numpy.ndarray"),
        (call(glob(NUMPY, "scalar"), _dtype(text("f8")), _binbytes(bytes(4))),
         "a float64 scalar takes 8 bytes, found 4"),
        (call(glob(NUMPY, "scalar"), _dtype(text("b1"), "|"), _binbytes(b"\x02")),
         "a bool scalar's byte is 2"),
        (call(glob("numpy._core.numeric", "_frombuffer"), _binbytes(bytes(8)),
              _dtype(text("f4")), tup(num(3)), text("C")), "holds 8 bytes"),
        (call(glob("numpy._core.numeric", "_frombuffer"), _binbytes(bytes(8)),
              _dtype(text("f4")), tup(num(2)), text("K")), "the order is 'K'"),
    ],
)  # fmt: skip
def test_numpy_states_are_checked_before_anything_views_them(payload: bytes, match: str) -> None:
    with pytest.raises(st.FormatError, match=match):
        run(PROTO2 + payload + STOP)


def test_absurd_numpy_shapes_are_limit_errors() -> None:
    with pytest.raises(st.LimitError, match="MAX_ELEMENTS"):
        run(PROTO2 + _array(tup(num(2**40), num(2**40)), _dtype(text("f4")), _binbytes(b"")) + STOP)


def test_an_array_without_its_state_is_refused(tmp_path: Path) -> None:
    made = call(glob(NUMPY, "_reconstruct"), glob("numpy", "ndarray"), tup(num(0)), b"C\x01b")
    path = as_legacy(tmp_path, PROTO2 + b"}" + text("a") + made + b"s" + STOP, {})
    with pytest.raises(st.FormatError, match="the NumPy array 'a' has no state"):
        st.open_checkpoint(path)


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        (num(1) + b"N" + b"G" + struct.pack(">d", 1.0) + b"N", "dict key 1.0 is set twice"),
        (b"\x88N" + num(1) + b"N", "dict key 1 is set twice"),
        (tup(num(1), text("a")) + b"N" + tup(b"\x88", text("a")) + b"N", "a tuple is set twice"),
        (b"NN" + b"NN", "dict key None is set twice"),
        (b"G" + struct.pack(">d", -0.0) + b"N" + num(0) + b"N", "dict key 0 is set twice"),
    ],
)
def test_keys_python_counts_equal_are_refused(keys: bytes, match: str) -> None:
    payload = PROTO2 + b"}" + MARK + keys + b"u" + STOP
    assert len(pickle.loads(payload)) == 1  # Python keeps one entry for the two keys
    with pytest.raises(st.FormatError, match=match):
        run(payload)


def test_tuple_keys_colliding_in_python_hash_cost_what_other_keys_cost() -> None:
    count = 20_000

    def tuple_dict(keys: list[int]) -> bytes:
        items = b"".join(tup(num(key)) + b"N" for key in keys)
        return PROTO2 + b"}" + MARK + items + b"u" + STOP

    colliding = [P61 * (index + 1) for index in range(count)]
    spread = [P61 * (index + 1) + index for index in range(count)]
    assert len({hash((key,)) for key in colliding}) == 1
    slow, fast = cpu_seconds(tuple_dict(colliding), tuple_dict(spread))
    assert slow < 5 * fast + 0.05, (slow, fast)


@pytest.mark.parametrize(
    ("module", "allowed"),
    [
        ("lightning.pytorch.utilities.parsing", True),
        ("lightning_fabric.utilities.data", True),
        ("pytorch_lightning", True),
        ("evil.lightning", False),
        ("lightning_fabricX.utilities", False),
    ],
)
def test_attribute_dicts_of_lightning_packages_only(module: str, allowed: bool) -> None:
    payload = PROTO2 + glob(module, "AttributeDict") + b")\x81" + text("lr") + num(3) + b"s" + STOP
    if allowed:
        assert run(payload) == {"lr": 3}
        return
    with pytest.raises(st.FormatError, match=f"{module}.AttributeDict is not an allowed global"):
        run(payload)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (glob("argparse", "Namespace") + b")\x81" + text("a") + num(1) + b"s",
         "cannot set items on argparse.Namespace"),
        (glob("argparse", "Namespace") + b")\x81" + b"}" + num(1) + b"Nsb" + b"}" + num(1) + b"Nsb",
         "attribute 1 is set twice"),
        (call(glob("collections", "defaultdict"), glob("os", "system")), "os.system is not"),
        (call(glob("collections", "defaultdict"), glob("collections", "OrderedDict")),
         "the factory collections.OrderedDict is not a builtin container"),
        (call(glob("collections", "Counter"), b"]"), "expected a dict, found a list"),
        (call(glob("builtins", "complex"), text("1")), "expected at most two numbers"),
        (call(glob("torch", "device"), text("cuda; rm")), "expected a device type"),
        (call(glob("torch", "device"), text("cuda:0"), num(1)), "the device index 1"),
        (call(glob("torch.serialization", "_get_layout"), text("torch.sparse_coo")),
         "only the layout 'torch.strided'"),
        (call(glob("pathlib", "PosixPath"), num(1)), "every part of a path must be a str"),
        (call(glob("builtins", "set"), b"]" + b"]a"), "set item a list is not a plain scalar"),
        (call(glob("torch._tensor", "_rebuild_from_type_v2"), glob("torch", "Size"),
              glob("torch", "Tensor"), tup(), b"N"), "torch.Size is not a tensor rebuild"),
        (call(glob("torch._tensor", "_rebuild_from_type_v2"),
              glob("torch._utils", "_rebuild_tensor_v2"), glob("numpy", "ndarray"), tup(), b"N"),
         "numpy.ndarray is not torch.Tensor or Parameter"),
        (glob("numpy", "ndarray") + tup() + b"R", "cannot apply numpy.ndarray"),
        (call(glob("builtins", "bytes"), text("x")), "expected no arguments"),
    ],
)  # fmt: skip
def test_data_globals_check_their_arguments(payload: bytes, match: str) -> None:
    with pytest.raises(st.FormatError, match=match):
        run(PROTO2 + payload + STOP)


# -- zero-copy where the pickle stores the bytes -------------------------------------------

_OPEN_AND_READ = """
import json, sys, tracemalloc
import numpy as np
import strided as st
tracemalloc.start()
opened = st.open_checkpoint(sys.argv[1])
total = sum(float(np.asarray(opened[name].numpy()[:1]).sum()) for name in opened.keys())
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "total": total}))
"""


@pytest.mark.parametrize(("protocol", "zipped"), [(4, True), (4, False), (5, True)])
def test_arrays_stored_as_bytes_are_views_of_the_file(
    tmp_path: Path, protocol: int, zipped: bool
) -> None:
    """Opening 64 MiB of NumPy arrays pickled as BINBYTES copies none of them.

    Protocol 2 (torch.save's default) stores the bytes as latin-1 text, which must be
    copied: that open is the baseline the zero-copy opens stay far below.
    """
    arrays = {f"a{index}": np.full(2**21, index, dtype=np.float64) for index in range(4)}
    found = {}
    for case, proto in (("views", protocol), ("copies", 2)):
        path = tmp_path / f"{case}.pt"
        torch.save(arrays, path, pickle_protocol=proto, _use_new_zipfile_serialization=zipped)
        found[case] = child(_OPEN_AND_READ, str(path))
        assert found[case]["total"] == 0 + 1 + 2 + 3
    assert found["copies"]["peak"] > 64 * 2**20  # every array copied out of its text
    assert found["views"]["peak"] < 16 * 2**20, found  # none copied (the rest: imports)
