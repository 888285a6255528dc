"""Lenient mode: whole pickled models read as their state dicts, never run.

The oracle is ``torch.load(weights_only=False)`` run in a child process on files these
tests wrote (``tests.lenient_models``): the names, dtypes, shapes and bytes of
``state_dict()``, and which names share a storage (tied weights). Hostile files name
``os.system`` and friends; a child process with an audit hook shows that opening them
runs, spawns and imports nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io.pickle._verdicts import verdict
from strided.io.torch._pytorch import open_pytorch
from tests.budgetchild import opened_in_child
from tests.test_pickle_hostile import (
    MARK,
    PROTO2,
    STOP,
    as_legacy,
    as_zip,
    call,
    glob,
    tensor,
    text,
    tup,
)

torch = pytest.importorskip("torch")
models = pytest.importorskip("tests.lenient_models")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
DTYPES = {"float32": "F32", "bfloat16": "BF16", "int64": "I64", "int32": "I32"}


def oracle(path: Path) -> dict[str, Any]:
    """What ``torch.load(weights_only=False)`` makes of the file, in a child process."""
    found = subprocess.run(
        [sys.executable, "-m", "tests.lenient_models", str(path)],
        capture_output=True, text=True, timeout=300, check=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(found.stdout)
    return result


def assert_state_dict(checkpoint: st.Checkpoint, expected: dict[str, Any]) -> None:
    """Same names in the same order, same dtypes, shapes and bits, and tensors share
    memory exactly when the oracle's share a storage."""
    assert list(checkpoint) == list(expected)
    arrays = {}
    for name, (dtype, shape, data, _) in expected.items():
        found = checkpoint[name]
        assert found.dtype.name == DTYPES[dtype], name
        assert list(found.shape) == shape, name
        array = found.numpy()
        assert np.ascontiguousarray(array).tobytes() == bytes.fromhex(data), name
        arrays[name] = array
    names = list(expected)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            tied = expected[first][3] == expected[second][3]
            assert np.shares_memory(arrays[first], arrays[second]) == tied, (first, second)


def save(obj: object, path: Path, fmt: str, protocol: int) -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=fmt == "zip", pickle_protocol=protocol)
    return path


WHOLE = [
    (kind, fmt, protocol)
    for kind in sorted(models.MODELS)
    for protocol in (2, 4)
    for fmt in ("zip", "legacy")
]


@pytest.fixture(scope="module")
def whole_models(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, dict[str, Any]]:
    """Every model of ``WHOLE`` saved whole, with its oracle state (one child for all)."""
    folder = tmp_path_factory.mktemp("whole")
    paths = []
    for kind, fmt, protocol in WHOLE:
        torch.manual_seed(0)
        path = folder / f"{kind}-{fmt}-{protocol}.pt"
        paths.append(save(models.MODELS[kind](), path, fmt, protocol))
    found = subprocess.run(
        [sys.executable, "-m", "tests.lenient_models", *map(str, paths)],
        capture_output=True, text=True, timeout=600, check=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    states: dict[str, dict[str, Any]] = json.loads(found.stdout)
    return {path: states[str(path)] for path in paths}


@pytest.mark.parametrize(("kind", "fmt", "protocol"), WHOLE)
def test_whole_models_give_their_state_dict(
    whole_models: dict[Path, dict[str, Any]], kind: str, fmt: str, protocol: int
) -> None:
    path = next(path for path in whole_models if path.stem == f"{kind}-{fmt}-{protocol}")
    expected = whole_models[path]
    with pytest.raises(st.FormatError, match=r"tests\.lenient_models\.\w+ is not an allowed"):
        st.open_checkpoint(path)
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert_state_dict(checkpoint, expected)
        # A module's other attributes (sizes, flags, unregistered tensors) are dropped.
        assert checkpoint.metadata == {}
        verdicts = {f"{i.module}.{i.name}": i.verdict for i in checkpoint.imports}
    assert verdicts[f"tests.lenient_models.{models.MODELS[kind].__name__}"] == "unknown"
    assert verdicts["torch._utils._rebuild_tensor_v2"] == "data"


def test_what_the_encoder_state_dict_holds(tmp_path: Path) -> None:
    """The walk's rules, spelled out on one model (the oracle test checks them all)."""
    path = save(models.Encoder(), tmp_path / "encoder.pt", "zip", 2)
    names = list(st.open_checkpoint(path, lenient=True))
    assert names[:5] == ["stem.0.weight", "stem.0.bias", "stem.2.weight", "stem.2.bias",
                         "blocks.0.gain"]  # fmt: skip
    assert "blocks.0.steps" in names  # a persistent buffer
    assert not [name for name in names if name.endswith((".cache", ".unused", ".missing"))]
    assert not [name for name in names if "scale" in name or "absent" in name]
    assert "norm.num_batches_tracked" in names


def test_models_inside_a_checkpoint_dict(tmp_path: Path) -> None:
    torch.manual_seed(1)
    state = {"model": models.Encoder(), "tiny": models.Tiny(), "epoch": 3, "note": "best"}
    path = save(state, tmp_path / "ckpt.pt", "zip", 2)
    expected = oracle(path)
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert_state_dict(checkpoint, expected)
        assert checkpoint.metadata == {"epoch": 3, "note": "best"}


def test_a_sharded_index_of_whole_models_opens_leniently(tmp_path: Path) -> None:
    first = save({"a": models.Tiny()}, tmp_path / "part-1.bin", "zip", 2)
    second = save({"b": models.Tied()}, tmp_path / "part-2.bin", "zip", 2)
    expected = {**oracle(first), **oracle(second)}
    index = tmp_path / "pytorch_model.bin.index.json"
    weight_map = {name: ("part-1.bin" if name.startswith("a.") else "part-2.bin")
                  for name in expected}  # fmt: skip
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(st.FormatError, match="Tiny is not an allowed global"):
        st.open_checkpoint(index)
    with st.open_checkpoint(index, lenient=True) as checkpoint:
        assert_state_dict(checkpoint, expected)
        named = [str(found) for found in checkpoint.imports]
        members = [found.member for found in checkpoint.imports]
    assert named.index("tests.lenient_models.Tiny") < named.index("tests.lenient_models.Tied")
    # Each once per pickle, each shard's pickle named by its file and archive member.
    assert len(set(zip(named, members, strict=True))) == len(named)
    assert list(dict.fromkeys(members)) == [
        "part-1.bin:part-1/data.pkl",
        "part-2.bin:part-2/data.pkl",
    ]


def test_records_are_named_by_arguments_items_and_state(tmp_path: Path) -> None:
    """A record that is not a module: its arguments by position, set items by key, its
    state by attribute name; a record holding itself is not walked again."""
    weight = tensor()
    record = glob("app", "Config") + b")\x81q\x00"  # NEWOBJ, memo 0
    state = b"}" + MARK + text("layer") + weight + text("me") + b"h\x00" + text("n") + b"K\x05u"
    listing = glob("app", "Pair") + tup(weight, text("x")) + b"R"
    items = glob("app", "Table") + b")\x81" + MARK + text("k") + b"K\x01u"
    payload = (
        PROTO2 + b"}" + MARK + text("cfg") + record + state + b"b" + text("pair") + listing
        + text("table") + items + b"u" + STOP
    )  # fmt: skip
    for build in (as_zip, as_legacy):
        opened = open_pytorch(build(tmp_path, payload), lenient=True)
        assert opened.keys() == ["cfg.layer", "pair.0"]
        assert opened.metadata == {"cfg.n": 5, "pair.1": "x", "table.k": 1}
        mine = [found for found in opened.imports if found[0] == "app"]
        assert mine == [("app", "Config"), ("app", "Pair"), ("app", "Table")]


def test_a_lightning_trainer_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    path = tmp_path / "model.ckpt"
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "lightningchild.py"), str(path), str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    expected = oracle(path)
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert_state_dict(checkpoint, expected)  # the weights, optimizer states...
        assert [name for name in checkpoint if name.startswith("state_dict.")] == [
            "state_dict.seen", "state_dict.net.0.weight", "state_dict.net.0.bias",
            "state_dict.net.2.weight", "state_dict.net.2.bias",
        ]  # fmt: skip
        imports = checkpoint.imports
        metadata = checkpoint.metadata
        names = list(checkpoint)
    assert "optimizer_states.0.state.0.exp_avg" in names
    assert metadata["hyper_parameters.width"] == 4
    assert metadata["epoch"] == 1
    strange = [found for found in imports if found.verdict != "data"]
    if strange:
        # Strict mode refuses exactly what it does not read as data.
        with pytest.raises(st.FormatError, match=str(strange[0]).replace(".", r"\.")):
            st.open_checkpoint(path)
    else:
        with st.open_checkpoint(path) as strict:
            assert list(strict) == names


# -- hostile files: refused strictly, inert leniently, nothing runs ---------------------------


def hostile(sentinel: Path) -> tuple[bytes, list[str]]:
    """A state dict whose other entries would run code; the globals it names, in order."""
    touch = text(f"touch {sentinel}")
    entries = {
        "system": call(glob("posix", "system"), touch),
        "exec": call(glob("__builtin__", "exec"), text(f"open({str(sentinel)!r}, 'w')")),
        "eval": call(glob("builtins", "eval"), text("1")),
        "popen": call(
            glob("subprocess", "Popen"), b"]" + MARK + text("touch") + text(str(sentinel)) + b"e"
        ),
        "runpy": call(glob("runpy", "_run_code"), text("import os"), b"}"),
        "importlib": call(glob("importlib", "import_module"), text("webbrowser")),
        "chain": call(
            call(
                glob("builtins", "getattr"),
                call(glob("builtins", "__import__"), text("os")),
                text("system"),
            ),
            touch,
        ),
        # Protocol 4: module and name kept in the memo, then named through STACK_GLOBAL.
        "smuggled": text("os")
        + b"\x94"
        + text("system")
        + b"\x940"
        + b"0h\x00h\x01\x93"
        + tup(touch)
        + b"R",
        # INST: the class named inline, its arguments since the MARK.
        "inst": MARK + touch + b"i" + b"webbrowser\nopen\n",
    }
    body = b"".join(text(key) + value for key, value in entries.items())
    payload = PROTO2 + b"}" + MARK + text("w") + tensor() + body + b"u" + STOP
    named = [
        "posix.system", "builtins.exec", "builtins.eval", "subprocess.Popen",
        "runpy._run_code", "importlib.import_module", "builtins.getattr",
        "builtins.__import__", "os.system", "webbrowser.open",
    ]  # fmt: skip
    return payload, named


@pytest.mark.parametrize("build", [as_zip, as_legacy])
def test_hostile_globals_are_refused_strictly_and_dangerous_leniently(
    tmp_path: Path, build: Any
) -> None:
    sentinel = tmp_path / "pwned"
    payload, named = hostile(sentinel)
    path = build(tmp_path, payload)
    with pytest.raises(st.FormatError, match=r"posix\.system is not an allowed global"):
        st.open_checkpoint(path)
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert list(checkpoint) == ["w"]
        assert checkpoint["w"].tolist() == [0.0, 0.0, 0.0, 0.0]
        imports = checkpoint.imports
    assert [str(found) for found in imports if found.verdict == "dangerous"] == named
    assert [str(found) for found in imports if found.verdict == "data"] == [
        "torch._utils._rebuild_tensor_v2", "torch.FloatStorage", "collections.OrderedDict",
    ]  # fmt: skip
    assert not sentinel.exists()


_AUDITED = """
import json, sys
import strided as st
events = []
def hook(event, args):
    if event in ("exec", "compile"):
        code = args[0]
        where = getattr(code, "co_filename", args[1] if len(args) > 1 else "")
        if where in ("<string>", "<unknown>", None):
            events.append(event)
    elif event == "import" and str(args[0]).partition(".")[0] in NAMED:
        events.append(event + " " + str(args[0]))
    elif event.startswith(("os.", "subprocess.", "webbrowser.", "socket.", "ctypes.")):
        events.append(event + " " + str(args[0])[:60])
NAMED = {"posix", "os", "builtins", "subprocess", "runpy", "importlib", "webbrowser"}
st.open_checkpoint(sys.argv[2], lenient=True).imports  # what strided needs, loaded
sys.addaudithook(hook)
with st.open_checkpoint(sys.argv[1], lenient=True) as opened:
    dangerous = sum(found.verdict == "dangerous" for found in opened.imports)
    result = {"keys": list(opened), "dangerous": dangerous}
    opened["w"].tolist()
result["events"] = events
result["modules"] = sorted(name for name in ("runpy", "webbrowser") if name in sys.modules)
print(json.dumps(result))
"""


def test_an_audit_hook_sees_nothing_run(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    payload, named = hostile(sentinel)
    path = as_zip(tmp_path, payload)
    warm = save({"m": models.Tiny()}, tmp_path / "warm.pt", "zip", 2)
    found = subprocess.run(
        [sys.executable, "-c", _AUDITED, str(path), str(warm)],
        capture_output=True, text=True, timeout=300, check=True, env=ENV,
    )  # fmt: skip
    result = json.loads(found.stdout)
    assert result == {"keys": ["w"], "dangerous": len(named), "events": [], "modules": []}
    assert not sentinel.exists()


def test_verdicts_of_spellings_scanners_miss() -> None:
    assert verdict("torch", "os.system") == "dangerous"  # an attribute chain
    assert verdict("torch._utils", "_rebuild_tensor_v2.__globals__") == "dangerous"
    assert verdict("os.path", "join") == "dangerous"  # inside a dangerous module
    assert verdict("numpy", "load") == "dangerous"
    assert verdict("collections", "OrderedDict") == "data"
    assert verdict("mymodel", "Net") == "unknown"
    assert verdict("mymodel.types", "Config") == "unknown"  # only module paths it names


# -- the budget covers records ---------------------------------------------------------------


def test_a_record_heavy_pickle_stays_within_the_budget(tmp_path: Path) -> None:
    """Four bytes make a record (BINGET, EMPTY_TUPLE, NEWOBJ): 1.5 million of them would
    hold about 450 MB; the budget stops the open near 64 MiB + 16 x the file."""
    count = 1_500_000
    payload = PROTO2 + glob("evil", "Thing") + b"q\x000]" + MARK + b"h\x00)\x81" * count
    path = as_zip(tmp_path, payload + b"e" + STOP)
    found = opened_in_child(path, lenient=True)
    assert str(found["outcome"]).startswith("LimitError")
    assert "records would build more than" in str(found["outcome"])
    assert int(str(found["grew_kib"])) < 200 * 1024


def test_a_record_walked_through_many_references_stays_bounded(tmp_path: Path) -> None:
    """One record of 200 attributes listed 100,000 times by memo reference: 20 million
    names from 100 KB, refused by the walk's visit limit (two visits per pickle byte)."""
    state = b"}" + MARK + b"".join(text(f"a{i}") + b"K\x01" for i in range(200)) + b"u"
    record = glob("evil", "Thing") + b")\x81" + state + b"bq\x00"
    payload = PROTO2 + b"]" + MARK + record + b"h\x00" * 100_000 + b"e" + STOP
    found = opened_in_child(as_zip(tmp_path, payload), lenient=True)
    assert "the data refers to its parts too many times" in str(found["outcome"])
    assert int(str(found["grew_kib"])) < 200 * 1024


# -- OmegaConf configs: the plain config they hold ---------------------------------------------


def dotted(value: object, prefix: str = "") -> dict[str, object]:
    """Plain leaves of nested dicts and lists by dotted name (list items by index, keys by
    their text), as strided names metadata: the oracle's side of the comparison."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return {prefix: value}
    found: dict[str, object] = {}
    for key, item in items:
        found.update(dotted(item, f"{prefix}.{key}" if prefix else str(key)))
    return found


def omegaconf_checkpoint(path: Path, config: dict[Any, Any]) -> dict[str, object]:
    """Save a Lightning-style checkpoint holding ``OmegaConf.create(config)``; what
    ``OmegaConf.to_container`` makes of it, flattened as strided names metadata."""
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(config)
    state = {"w": torch.arange(4, dtype=torch.float32)}
    torch.save({"state_dict": state, "hyper_parameters": {"cfg": cfg, "lr": 0.5}}, path)
    plain = omegaconf.OmegaConf.to_container(cfg)  # unresolved, as the file holds it
    return dotted({"hyper_parameters": {"cfg": plain, "lr": 0.5}})


def test_an_omegaconf_config_reads_as_the_plain_config_it_holds(tmp_path: Path) -> None:
    config = {
        "model": {"hidden": 64, "dropout": 0.1, "act": "gelu", "norm": None, "bias": True,
                  "layers": [{"width": 8}, {"width": 16, "tags": ["a", "b"]}]},
        "data": {"paths": ["/a", "/b"], "batch": 32, "empty": {}, "none_list": []},
        "ref": "${model.hidden}", "missing": "???", 3: "an int key", "top": [1, 2.5, None],
    }  # fmt: skip
    path = tmp_path / "last.ckpt"
    expected = omegaconf_checkpoint(path, config)
    assert expected["hyper_parameters.cfg.model.hidden"] == 64
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert list(checkpoint) == ["state_dict.w"]
        metadata = checkpoint.metadata
        imports = {f"{found.module}.{found.name}": found.verdict for found in checkpoint.imports}
    assert metadata == expected
    assert list(metadata) == list(expected)  # in the config's order
    assert not [name for name in metadata if "_content" in name or "_metadata" in name]
    assert imports["omegaconf.dictconfig.DictConfig"] == "unknown"
    with pytest.raises(
        st.FormatError, match=r"omegaconf\.dictconfig\.DictConfig is not an allowed"
    ):
        st.open_checkpoint(path)


scalars = (
    hs.none()
    | hs.booleans()
    | hs.integers(-(2**62), 2**62)
    | hs.text(hs.characters(blacklist_characters="$?\\", blacklist_categories=("Cs",)), max_size=6)
    | hs.floats(allow_nan=False)
)
configs = hs.recursive(
    scalars,
    lambda inner: (
        hs.lists(inner, max_size=3)
        | hs.dictionaries(hs.from_regex(r"[a-z]{1,5}", fullmatch=True), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hs.dictionaries(hs.from_regex(r"[a-z]{1,5}", fullmatch=True), configs, max_size=4))
def test_random_omegaconf_configs(tmp_path: Path, config: dict[str, Any]) -> None:
    path = tmp_path / "random.ckpt"
    expected = omegaconf_checkpoint(path, config)
    with st.open_checkpoint(path, lenient=True) as checkpoint:
        assert checkpoint.metadata == expected
