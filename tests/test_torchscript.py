"""TorchScript archives (``torch.jit.save``): strided reads the tensors
``torch.jit.load(path).state_dict()`` gives, name for name and bit for bit, without running
the archive's code. The oracle (``torch.jit.load``, which compiles and runs ``code/``) only
ever loads archives these tests wrote, and only in a child process."""

from __future__ import annotations

import enum
import json
import struct
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import strided as st
from strided import FormatError, LimitError
from strided.io.torch._torchscript import is_torchscript, open_torchscript

from .budgetchild import opened_in_child
from .zipcraft import Entry, bomb, build

torch = pytest.importorskip("torch")
nn = torch.nn
Tensor = torch.Tensor  # what the scripted forwards' annotations name

DTYPES = {
    "torch.bool": "BOOL", "torch.int8": "I8", "torch.int16": "I16", "torch.int32": "I32",
    "torch.int64": "I64", "torch.uint8": "U8", "torch.uint16": "U16", "torch.uint32": "U32",
    "torch.uint64": "U64", "torch.float16": "F16", "torch.bfloat16": "BF16",
    "torch.float32": "F32", "torch.float64": "F64", "torch.float8_e4m3fn": "F8_E4M3",
    "torch.float8_e5m2": "F8_E5M2",
}  # fmt: skip

# Run in a child: the names, dtypes, shapes and bytes of each archive's state dict.
_ORACLE = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
out = {}
for path in sys.argv[1:]:
    state = torch.jit.load(path, map_location="cpu").state_dict()
    out[path] = [
        [name, str(t.dtype), list(t.shape),
         t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()
         if t.numel() else ""]
        for name, t in state.items()
    ]
print(json.dumps(out))
"""


@contextmanager
def quiet() -> Iterator[None]:
    """torch.jit.script/trace warn that they are deprecated; the archives are still real."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def oracle(paths: list[Path]) -> dict[str, list[list[Any]]]:
    found = subprocess.run(
        [sys.executable, "-c", _ORACLE, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, list[list[Any]]] = json.loads(found.stdout)
    return result


def strided_bytes(t: st.Tensor) -> bytes:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).tobytes()


def assert_matches(path: Path, expected: list[list[Any]]) -> None:
    with st.open_checkpoint(path) as ckpt:
        assert ckpt.format == "torchscript"
        assert list(ckpt.keys()) == [name for name, *_ in expected]
        for name, dtype, shape, hexed in expected:
            tensor = ckpt[name]
            assert tensor.dtype.name == DTYPES[dtype], name
            assert list(tensor.shape) == shape, name
            assert strided_bytes(tensor) == bytes.fromhex(hexed), name


# -- models ------------------------------------------------------------------------------


class Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("scratch", torch.arange(4.0), persistent=False)
        self.register_buffer("count", torch.ones(2, dtype=torch.int64))

    def forward(self, x: Tensor) -> Tensor:
        return self.lin(x) + self.count


class Nested(nn.Module):
    """Nested modules, Sequential, ModuleList, ModuleDict, a shared child, a plain tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.sub = Sub()
        self.seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
        self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
        self.heads = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.Linear(2, 2, bias=False)})
        self.plain = torch.full((3,), 7.0)  # an attribute, not state
        self.tied = self.seq[0]
        self.norm = nn.BatchNorm1d(2)

    def forward(self, x: Tensor) -> Tensor:
        y = self.seq(self.sub(x))
        for layer in self.layers:
            y = layer(y)
        y = self.heads["a"](y) + self.heads["b"](y) + self.plain[:2] + self.tied(y)
        return self.norm(y)


class Dtypes(nn.Module):
    """Parameters and buffers of many dtypes, a transposed view and slices of one tensor."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.halves = nn.Parameter(torch.randn(2, 3, generator=gen).half())
        self.brain = nn.Parameter(torch.randn(5, generator=gen).bfloat16())
        self.doubles = nn.Parameter(torch.randn(2, 2, generator=gen).double())
        self.ints = nn.Parameter(torch.arange(-3, 3, dtype=torch.int32), requires_grad=False)
        self.register_buffer("small", torch.tensor([-128, 5, 127], dtype=torch.int8))
        self.register_buffer("bytes_", torch.arange(0, 250, 50, dtype=torch.uint8))
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("wide", torch.tensor([1, 65535], dtype=torch.uint16))
        self.register_buffer("fp8", torch.tensor([0.5, -2.0, 448.0]).to(torch.float8_e4m3fn))
        base = torch.arange(12.0).reshape(3, 4)
        self.register_buffer("transposed", base.t())
        self.register_buffer("tail", base.reshape(-1)[5:])

    def forward(self, x: Tensor) -> Tensor:
        return x + self.halves.float().sum() + self.doubles.float().sum()


class Extras(nn.Module):
    """Tied parameters, None parameters and buffers, lists and dicts of tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)
        self.b.weight = self.a.weight
        self.register_buffer("absent", None)
        self.lists = [torch.ones(2)]
        self.table = {"k": torch.zeros(1)}
        self.sizes = [1, 2, 3]
        self.scale = 0.5

    def forward(self, x: Tensor) -> Tensor:
        return self.b(self.a(x)) * self.scale


class Node(nn.Module):
    """A module of the random trees: its state is whatever the test registers."""

    def forward(self, x: Tensor) -> Tensor:
        return x


MODELS = {"nested": (Nested, (4, 3)), "dtypes": (Dtypes, (2,)), "extras": (Extras, (3, 2))}


def save_model(kind: str, mode: str, folder: Path) -> Path:
    cls, shape = MODELS[kind]
    torch.manual_seed(0)
    model = cls().eval()
    with quiet():
        if mode == "script":
            saved = torch.jit.script(model)
        else:
            saved = torch.jit.trace(model, torch.randn(*shape))
    path = folder / f"{kind}_{mode}.pt"
    saved.save(str(path))
    return path


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[list[Any]]]]:
    folder = tmp_path_factory.mktemp("torchscript")
    paths = {f"{kind}_{mode}": save_model(kind, mode, folder)
             for kind in MODELS for mode in ("script", "trace")}  # fmt: skip
    expected = oracle(list(paths.values()))
    return {key: (path, expected[str(path)]) for key, path in paths.items()}


# -- what torch gives --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("mode", ["script", "trace"])
def test_state_dict_of_saved_models(
    archives: dict[str, tuple[Path, list[list[Any]]]], kind: str, mode: str
) -> None:
    path, expected = archives[f"{kind}_{mode}"]
    assert_matches(path, expected)


def test_nested_names_exclude_attributes_and_include_non_persistent_buffers(
    archives: dict[str, tuple[Path, list[list[Any]]]],
) -> None:
    path, _ = archives["nested_script"]
    names = list(st.open_checkpoint(path).keys())
    assert names[:4] == ["sub.scratch", "sub.count", "sub.lin.weight", "sub.lin.bias"]
    assert "heads.b.weight" in names and "heads.b.bias" not in names
    assert "tied.weight" in names and not any("plain" in name for name in names)


def _random_tree(seed: int, share_parameters: bool) -> nn.Module:
    rng = np.random.default_rng(seed)
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
              torch.int32, torch.uint8, torch.bool]  # fmt: skip
    made: list[nn.Module] = []
    for index in range(int(rng.integers(1, 8))):
        node = Node()
        for slot in range(int(rng.integers(0, 4))):
            dtype = dtypes[int(rng.integers(len(dtypes)))]
            shape = tuple(int(d) for d in rng.integers(0, 4, int(rng.integers(0, 3))))
            value = torch.from_numpy(rng.standard_normal(shape)).to(dtype)
            name = ["weight", "bias", "0", f"p{slot}"][int(rng.integers(4))]
            if hasattr(node, name):
                continue
            if rng.random() < 0.5 and dtype.is_floating_point:
                node.register_parameter(name, nn.Parameter(value))
            elif share_parameters and made and list(made[-1].parameters(recurse=False)):
                node.register_parameter(name, next(made[-1].parameters(recurse=False)))
            else:
                node.register_buffer(name, value, persistent=bool(rng.random() < 0.7))
        for child in range(int(rng.integers(0, 3))):
            if made:
                name = f"c{child}" if rng.random() < 0.7 else str(child)
                if not hasattr(node, name):
                    node.add_module(name, made[int(rng.integers(len(made)))])
        made.append(node)
        del index
    return made[-1]


def test_random_module_trees(tmp_path: Path) -> None:
    paths = []
    for seed in range(16):
        # torch.jit.trace refuses a parameter registered in two modules; scripting keeps it.
        model = _random_tree(seed, share_parameters=bool(seed % 2))
        with quiet():
            saved = torch.jit.script(model) if seed % 2 else torch.jit.trace(model, torch.ones(1))
        path = tmp_path / f"tree{seed}.pt"
        saved.save(str(path))
        paths.append(path)
    expected = oracle(paths)
    for path in paths:
        assert_matches(path, expected[str(path)])


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class WithEnum(nn.Module):
    """TorchScript pickles an Enum attribute as its class applied to the bare value."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 3)
        self.color = Color.GREEN

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.color == Color.RED:
            return x
        return self.lin(x)


def test_an_enum_attribute_is_data(tmp_path: Path) -> None:
    path = tmp_path / "enum.pt"
    with quiet():
        torch.jit.script(WithEnum()).save(str(path))
    assert_matches(path, oracle([path])[str(path)])


def test_imports_are_reported_and_script_classes_are_data(tmp_path: Path) -> None:
    path = tmp_path / "enum.pt"
    with quiet():
        torch.jit.script(WithEnum()).save(str(path))
    with st.open_checkpoint(path) as ckpt:
        named = {f"{found.module}.{found.name}": found.verdict for found in ckpt.imports}
    # The archive's own classes and torch's rebuild rules are what strict mode reads.
    assert any(name.startswith("__torch__.") for name in named)
    assert "torch._utils._rebuild_tensor_v2" in named
    assert set(named.values()) == {"data"}
    scanned = subprocess.run(
        [sys.executable, "-m", "strided", "scan", str(path)], capture_output=True, text=True
    )
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr


def test_views_are_zero_copy_and_tied_weights_share(
    archives: dict[str, tuple[Path, list[list[Any]]]],
) -> None:
    path, _ = archives["nested_script"]
    ckpt = st.open_checkpoint(path)
    first, tied = ckpt["seq.0.weight"].numpy(), ckpt["tied.weight"].numpy()
    assert np.shares_memory(first, tied)
    assert not first.flags.writeable
    copied = open_torchscript(path, copy=True)
    assert not np.shares_memory(copied.get("seq.0.weight").numpy(), first)
    extras = st.open_checkpoint(archives["extras_script"][0])
    assert np.shares_memory(extras["a.weight"].numpy(), extras["b.weight"].numpy())


def test_every_command_reads_it(
    archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    path, expected = archives["dtypes_script"]
    strided = [sys.executable, "-m", "strided"]
    shown = subprocess.run([*strided, "inspect", str(path)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert all(name in shown.stdout for name, *_ in expected)
    hashed = subprocess.run([*strided, "hash", str(path)], capture_output=True, text=True)
    assert hashed.returncode == 0, hashed.stderr
    out = tmp_path / "model.safetensors"
    done = subprocess.run([*strided, "convert", str(path), str(out)], capture_output=True)
    assert done.returncode == 0, done.stderr
    loaded = load_file(str(out))
    for name, _, shape, hexed in expected:
        assert list(loaded[name].shape) == shape
        flat = loaded[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert flat == bytes.fromhex(hexed)
    again = subprocess.run([*strided, "hash", str(out)], capture_output=True, text=True)
    assert sorted(hashed.stdout.splitlines()) == sorted(again.stdout.splitlines())


def test_detection_by_members(archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path):
    names = zipfile.ZipFile(archives["nested_trace"][0]).namelist()
    assert is_torchscript(names)
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pt")
    assert not is_torchscript(zipfile.ZipFile(tmp_path / "plain.pt").namelist())


# -- hostile archives --------------------------------------------------------------------


def rebuilt(source: Path, target: Path, **changes: dict[str, Any]) -> Path:
    """``source`` written again member by member, ``changes[name]`` overriding its fields.

    Names in ``changes`` are relative to the archive's folder; ``content`` replaces the
    bytes, ``method`` the compression, and zipcraft's other fields lie as asked.
    """
    with zipfile.ZipFile(source) as archive:
        folder = archive.namelist()[0].split("/")[0] + "/"
        entries = []
        for info in archive.infolist():
            fields: dict[str, Any] = {"content": archive.read(info), "method": info.compress_type}
            fields.update(changes.get(info.filename.removeprefix(folder), {}))
            entries.append(Entry(info.filename, **fields))
        assert {folder + name for name in changes} <= set(archive.namelist())
    target.write_bytes(build(entries))
    return target


def class_member(path: Path, name: str) -> str:
    """The code member (relative to the archive's folder) declaring class ``name``."""
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.filename.endswith(".py") and f"class {name}(".encode() in archive.read(info):
                return info.filename.split("/", 1)[1]
    raise AssertionError(name)


def test_a_code_bomb_is_refused_before_inflating(
    archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path
) -> None:
    path = archives["nested_script"][0]
    size = (1 << 30) + 16
    crafted = rebuilt(
        path,
        tmp_path / "bomb.pt",
        **{
            class_member(path, "Nested"): {
                "method": 8,
                "data": bomb(size, b"class M(Module):"),
                "content": b"",
                "size": size,
                "crc": 0,
            }
        },
    )
    seen = opened_in_child(crafted)
    assert str(seen["outcome"]).startswith("LimitError"), seen
    assert int(str(seen["grew_kib"])) < 16 * 1024, seen


def test_a_code_bomb_stops_at_its_small_claim(
    archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path
) -> None:
    path = archives["nested_script"][0]
    crafted = rebuilt(
        path,
        tmp_path / "liar.pt",
        **{
            class_member(path, "Nested"): {
                "method": 8,
                "data": bomb(1 << 30),
                "content": b"",
                "size": 1 << 20,
                "crc": 0,
            }
        },
    )
    seen = opened_in_child(crafted)
    assert str(seen["outcome"]).startswith("FormatError"), seen
    assert "deflate stream holds more" in str(seen["outcome"])
    assert int(str(seen["grew_kib"])) < 16 * 1024, seen


def _code(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        folder = archive.namelist()[0].split("/")[0] + "/"
        return archive.read(folder + member)


def test_a_declared_parameter_that_does_not_exist(
    archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path
) -> None:
    path = archives["nested_script"][0]
    member = "code/__torch__/torch/nn/modules/linear.py"
    text = _code(path, member).replace(b'"weight", "bias", ]', b'"weight", "bias", "ghost", ]')
    crafted = rebuilt(path, tmp_path / "ghost.pt", **{member: {"content": text}})
    with pytest.raises(FormatError, match="no attribute 'ghost', a declared parameter"):
        st.open_checkpoint(crafted)


@pytest.mark.parametrize("member", ["data.pkl", "constants.pkl", "data/0", "byteorder"])
def test_members_read_in_place_must_be_stored(
    archives: dict[str, tuple[Path, list[list[Any]]]], tmp_path: Path, member: str
) -> None:
    crafted = rebuilt(archives["nested_trace"][0], tmp_path / "x.pt", **{member: {"method": 8}})
    with pytest.raises(FormatError, match=f"{member}' is compressed; a TorchScript archive"):
        st.open_checkpoint(crafted)


# Hand-built archives: a pickle spelled opcode by opcode, code written as text.


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def _tensor(key: str, numel: int) -> bytes:
    storage = b"(" + _text("storage") + _global("torch", "FloatStorage") + _text(key)
    storage += _text("cpu") + b"K" + bytes([numel]) + b"tQ"
    rebuild = b"K\x00(K" + bytes([numel]) + b"t(K\x01t\x89"
    rebuild += _global("collections", "OrderedDict") + b")R"
    return _global("torch._utils", "_rebuild_tensor_v2") + b"(" + storage + rebuild + b"tR"


def _object(name: str, items: list[tuple[str, bytes]], memo: int | None = None) -> bytes:
    made = _global("__torch__", name) + b")\x81"
    if memo is not None:
        made += b"q" + bytes([memo])
    return made + b"}(" + b"".join(_text(key) + value for key, value in items) + b"ub"


_MODULE_CODE = b"""class M(Module):
  __parameters__ = ["w", ]
  __buffers__ = []
  w : Tensor
  child : __torch__.M
"""


def script_archive(path: Path, pickle: bytes, code: bytes = _MODULE_CODE) -> Path:
    entries = [
        Entry("m/data.pkl", b"\x80\x02" + pickle + b"."),
        Entry("m/code/__torch__.py", code, method=8),
        Entry("m/constants.pkl", b"\x80\x02)."),
        Entry("m/data/0", np.arange(4, dtype="<f4").tobytes()),
        Entry("m/byteorder", b"little"),
    ]
    path.write_bytes(build(entries))
    return path


def test_hand_built_archive_reads(tmp_path: Path) -> None:
    path = script_archive(tmp_path / "ok.pt", _object("M", [("w", _tensor("0", 4))]))
    assert st.open_checkpoint(path)["w"].numpy().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("pickle", "code", "message"),
    [
        (
            _object("M", [("w", _tensor("0", 4)), ("child", b"h\x00")], memo=0),
            _MODULE_CODE,
            "module 'child' contains itself",
        ),
        (_object("M", [("w", b"K\x05")]), _MODULE_CODE, "parameter 'w' is 5"),
        (
            _object("N", [("w", _tensor("0", 4))]),
            _MODULE_CODE,
            "class 'N' of a __torch__.N is not declared",
        ),
        (_global("__torch__", "M") + b")\x81K\x01b", _MODULE_CODE, "not a dict of attributes"),
        (
            _object("M", [("w", _tensor("0", 4))]),
            _MODULE_CODE.replace(b'"w"', b'"w\\\\"'),
            "not a plain double-quoted text",
        ),
        (
            _object("M", [("w", _tensor("0", 4))]),
            b"class M(Module):\n  w : Tensor\n",
            "has no __parameters__ or __buffers__",
        ),
        (_tensor("0", 4), _MODULE_CODE, "holds a tensor, not a scripted module"),
    ],
    ids=["cycle", "not-a-tensor", "undeclared-class", "setstate", "escaped", "no-lines", "bare"],
)
def test_malformed_modules(tmp_path: Path, pickle: bytes, code: bytes, message: str) -> None:
    path = script_archive(tmp_path / "bad.pt", pickle, code)
    with pytest.raises(FormatError, match=message):
        st.open_checkpoint(path)


def test_shared_modules_cannot_multiply_the_walk(tmp_path: Path) -> None:
    # 40 modules, each holding the next one twice: 2**40 paths from the root.
    code = b"class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n"
    pickle = _object("M", [], memo=0)
    for index in range(1, 40):
        pickle = _object("M", [("a", pickle), ("b", b"h" + bytes([index - 1]))], memo=index)
    path = script_archive(tmp_path / "dag.pt", pickle, code)
    with pytest.raises(LimitError, match="refer to their parts too many times"):
        st.open_checkpoint(path)


_HARMFUL = """import os
os.system("touch {sentinel}")
class M(Module):
  __parameters__ = ["w", ]
  __buffers__ = []
  w : Tensor
  def forward(self: __torch__.M, x: Tensor) -> Tensor:
    _0 = __import__("os").system("touch {sentinel}")
    return x
"""

_AUDITED = """
import json, sys
import strided as st
st.open_checkpoint(sys.argv[1])["w"].numpy()  # a harmless archive: strided's lazy imports
seen = []
def hook(event, args):
    if event in ("exec", "compile", "import", "os.system", "subprocess.Popen", "os.posix_spawn",
                 "os.exec", "os.fork", "os.spawn", "ctypes.dlopen", "builtins.input"):
        seen.append(event)
sys.addaudithook(hook)
found = st.open_checkpoint(sys.argv[2])
print(json.dumps({"w": found["w"].numpy().tolist(), "events": seen}))
"""


def test_code_is_never_run(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    code = _HARMFUL.format(sentinel=sentinel).encode()
    pickle = _object("M", [("w", _tensor("0", 4))])
    path = script_archive(tmp_path / "harm.pt", pickle, code)
    harmless = script_archive(tmp_path / "ok.pt", pickle)
    child = subprocess.run([sys.executable, "-c", _AUDITED, str(harmless), str(path)],
                           capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert json.loads(child.stdout) == {"w": [0.0, 1.0, 2.0, 3.0], "events": []}
    for command in ("inspect", "hash"):
        done = subprocess.run([sys.executable, "-m", "strided", command, str(path)],
                              capture_output=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert not sentinel.exists()


def test_other_globals_are_refused_unless_lenient(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    call = _global("os", "system") + b"(" + _text(f"touch {sentinel}") + b"tR"
    pickle = _object("M", [("w", _tensor("0", 4)), ("hook", call)])
    path = script_archive(tmp_path / "call.pt", pickle)
    with pytest.raises(FormatError, match=r"os\.system is not an allowed global"):
        st.open_checkpoint(path)
    lenient = open_torchscript(path, lenient=True)
    assert lenient.get("w").numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    shard = lenient._by_name["w"][0]
    assert ("os", "system") in shard.imports  # type: ignore[attr-defined]
    assert ("__torch__", "M") in shard.imports  # type: ignore[attr-defined]
    assert not sentinel.exists()
