"""``strided scan`` judges every pickle a loader would run, and never says clean for one.

Oracles: the loaders themselves, run in a child process on files this test wrote
(``torch.load(weights_only=False)``, ``np.load(allow_pickle=True)``,
``dcp_to_torch_save``), whose payloads only touch a sentinel file; picklescan, modelscan
and fickling on the same files, for comparison; a real distributed checkpoint of a model
and its optimizer written by ``torch.distributed.checkpoint`` and its
``dcp_to_torch_save`` file, for the metadata.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

import strided as st
from strided.io.pickle._globals import GLOBALS
from strided.io.pickle._verdicts import verdict

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from tests import dcpwrite, payloads  # noqa: E402
from tests.test_lenient import ENV, ROOT  # noqa: E402

_BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command), capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT
    )


def scan(*paths: Path) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "-m", "strided", "scan", *map(str, paths))


def dangerous_lines(output: str) -> list[tuple[str, str]]:
    """``(module.name, member)`` of each DANGEROUS line of a scan report."""
    found = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "DANGEROUS":
            found.append((parts[0], parts[2]))
    return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every kind of file whose loading runs a payload: its path, loader, sentinel,
    the global its pickle names and the member that pickle is."""
    base = tmp_path_factory.mktemp("payloads")
    files: dict[str, dict[str, Any]] = {}

    def add(key: str, loader: str, payload: str, make: Any, member: str) -> None:
        sentinel = base / f"sentinel-{key}"
        call, named = payloads.payloads(sentinel)[payload]
        path = make(call)
        files[key] = {"path": path, "loader": loader, "sentinel": sentinel, "named": named,
                      "member": member}  # fmt: skip

    for payload in ("system", "open", "collect_env", "exec_wrapper"):
        add(f"torch-{payload}", "torch", payload,
            lambda call, p=payload: payloads.torch_file(base / f"{p}.pt", call),
            f"{payload}/data.pkl")  # fmt: skip
    add("pkl", "torch", "system", lambda call: payloads.bare_pickle(base / "a.pkl", call), "a.pkl")
    add("bin", "torch", "open", lambda call: payloads.bare_pickle(base / "b.bin", call), "b.bin")
    add("npz", "numpy", "system",
        lambda call: payloads.npz_file(base / "a.npz", call, False), "extra.npy")  # fmt: skip
    add("npz-deflated", "numpy", "collect_env",
        lambda call: payloads.npz_file(base / "b.npz", call, True), "extra.npy")  # fmt: skip
    add("pickle", "torch", "exec",
        lambda call: payloads.bare_pickle(base / "c.pickle", call), "c.pickle")  # fmt: skip
    add("pickle-protocol-0", "torch", "system",
        lambda call: payloads.bare_pickle(base / "p0.pkl", call, 0), "p0.pkl")  # fmt: skip
    add("npy", "numpy", "exec_wrapper",
        lambda call: payloads.npy_file(base / "a.npy", call), "a.npy")  # fmt: skip
    add("dcp-item", "dcp", "system",
        lambda call: payloads.dcp_item(base / "dcp", call), "__0_0.distcp:extra")  # fmt: skip
    add("dcp-metadata", "dcp", "system",
        lambda call: payloads.dcp_metadata(base / "dcp-meta", base / "dcp", call),
        ".metadata")  # fmt: skip
    for entry in files.values():
        # The loader really runs it: only this child ever loads these files.
        run(sys.executable, "-m", "tests.payloads", entry["loader"], str(entry["path"]))
        entry["ran"] = entry["sentinel"].exists()
    return files


def test_every_file_a_loader_executes_scans_dangerous(hostile: dict[str, dict[str, Any]]) -> None:
    assert all(entry["ran"] for entry in hostile.values()), {
        key: entry["ran"] for key, entry in hostile.items()
    }
    for key, entry in hostile.items():
        found = scan(entry["path"])
        assert found.returncode == 1, (key, found.stdout, found.stderr)
        assert (entry["named"], entry["member"]) in dangerous_lines(found.stdout), key
        assert "Traceback" not in found.stderr


def test_scan_is_never_clean_for_a_file_whose_load_ran(hostile: dict[str, dict[str, Any]]) -> None:
    ran = [entry["path"] for entry in hostile.values() if entry["ran"]]
    found = scan(*ran)
    assert found.returncode == 1
    for entry in hostile.values():
        # Scanning touches nothing: each sentinel is the loader's alone.
        entry["sentinel"].unlink(missing_ok=True)
    scan(*ran)
    assert not any(entry["sentinel"].exists() for entry in hostile.values())


def _other_scanners(path: Path) -> dict[str, bool]:
    """Whether picklescan, modelscan and fickling say the file is clean (exit 0; fickling:
    its ``is_likely_safe`` is True)."""
    target = str(path)
    picklescan = run(str(_BIN / "picklescan"), "-p", target)
    modelscan = run(str(_BIN / "modelscan"), "-p", target)
    fickling = run(
        sys.executable,
        "-c",
        "import sys, fickling\n"
        "try:\n    print(fickling.is_likely_safe(sys.argv[1]))\n"
        "except Exception as error:\n    print('error', type(error).__name__)\n",
        target if path.is_file() else str(path / ".metadata"),
    )
    return {
        "picklescan": picklescan.returncode == 0,
        "modelscan": modelscan.returncode == 0,
        "fickling": fickling.stdout.strip() == "True",
    }


def test_scan_flags_what_other_scanners_call_clean(hostile: dict[str, dict[str, Any]]) -> None:
    said_clean = {}
    for key, entry in hostile.items():
        verdicts = _other_scanners(entry["path"])
        said_clean[key] = sorted(tool for tool, clean in verdicts.items() if clean)
        assert entry["ran"] and scan(entry["path"]).returncode == 1, key
    missed = {key: tools for key, tools in said_clean.items() if tools}
    # Files torch or NumPy runs that another scanner passes as clean (at the versions
    # installed here: modelscan passes builtins.open and the torch helpers, picklescan
    # passes builtins.open and the distributed checkpoints); strided flags each.
    assert "modelscan" in missed["torch-open"] and "picklescan" in missed["torch-open"]
    assert "modelscan" in missed["torch-collect_env"]
    assert "picklescan" in missed["dcp-item"]


def test_a_failed_open_still_reports_what_was_named(hostile: dict[str, dict[str, Any]]) -> None:
    """The bare pickle is no torch.save file and the .metadata is refused: the open
    fails after the dangerous global was resolved, so scan prints it and exits 1."""
    for key in ("pkl", "dcp-metadata", "npy"):
        path = hostile[key]["path"]
        with pytest.raises(st.DataError):
            st.open_checkpoint(path, lenient=True)
        found = run(sys.executable, "-m", "strided", "scan", "--json", str(path))
        document = json.loads(found.stdout)
        assert document["status"] == found.returncode == 1
        (entry,) = document["files"]
        assert entry["format"] is None and entry["error"]
        assert entry["error"] in found.stderr
        dangerous = [item for item in entry["imports"] if item["verdict"] == "dangerous"]
        assert [(item["module"] + "." + item["name"], item["member"]) for item in dangerous] == [
            (hostile[key]["named"], hostile[key]["member"])
        ]


def test_a_refused_metadata_lists_every_global_it_names(tmp_path: Path) -> None:
    import os
    import pickle

    folder = tmp_path / "dcp"
    folder.mkdir()
    calls = [payloads.Call(os.system, "true"), payloads.Call(exec, "1")]
    (folder / ".metadata").write_bytes(pickle.dumps(calls, protocol=4))
    found = scan(folder)
    assert found.returncode == 1
    system = f"{os.system.__module__}.system"
    assert dangerous_lines(found.stdout) == [(system, ".metadata"), ("builtins.exec", ".metadata")]


def test_a_file_no_format_recognizes_is_no_import_list(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a checkpoint\n")
    found = run(sys.executable, "-m", "strided", "scan", "--json", str(text))
    document = json.loads(found.stdout)
    assert document["status"] == found.returncode == 2
    assert document["files"][0]["imports"] == [] and document["files"][0]["unread"] == {}
    assert len(found.stderr.splitlines()) == 1


def test_imports_carry_their_member_in_the_python_api(hostile: dict[str, dict[str, Any]]) -> None:
    with st.open_checkpoint(hostile["npz"]["path"]) as checkpoint:
        assert checkpoint.format == "npz" and list(checkpoint) == ["w"]
        assert "extra" in checkpoint.unreadable
        named = {(str(item), item.member): item.verdict for item in checkpoint.imports}
    assert named[("posix.system", "extra.npy")] == "dangerous"
    assert named[("numpy.ndarray", "extra.npy")] == "data"
    with st.open_checkpoint(hostile["dcp-item"]["path"]) as checkpoint:
        assert list(checkpoint.unreadable) == ["extra"]
        members = {item.member for item in checkpoint.imports}
        found = [item for item in checkpoint.imports if item.verdict == "dangerous"]
    assert members == {".metadata", "__0_0.distcp:extra"}
    assert [(str(item), item.member) for item in found] == [("posix.system", "__0_0.distcp:extra")]


def test_torchscript_constants_pickle_is_scanned(tmp_path: Path) -> None:
    source = tmp_path / "script.pt"
    # Scripted in a child: torch.jit caches compiled classes per process, which would
    # change the archives other test modules script.
    script = (
        "import sys, warnings, torch\n"
        "warnings.simplefilter('ignore')\n"
        "torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), sys.argv[1])\n"
    )
    assert run(sys.executable, "-c", script, str(source)).returncode == 0
    crafted = payloads.torchscript_constants(tmp_path / "hostile.pt", source, tmp_path / "s")
    clean = scan(source)
    assert clean.returncode == 0, clean.stdout
    assert {line.split()[-1] for line in clean.stdout.splitlines()[1:]} == {"script/data.pkl"}
    found = scan(crafted)
    assert found.returncode == 1
    assert dangerous_lines(found.stdout) == [("posix.system", "script/constants.pkl")]
    # The state is still read, and nothing named was run.
    with st.open_checkpoint(crafted) as checkpoint:
        assert sorted(checkpoint) == ["bias", "weight"]
    assert not (tmp_path / "s").exists()


def test_plain_object_arrays_scan_as_data(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "plain.npz"
    np.savez(path, w=np.arange(3.0), labels=np.array(["a", None, 3, {1, 2}], dtype=object))
    found = scan(path)
    assert found.returncode == 0, (found.stdout, found.stderr)
    assert {line.split()[-1] for line in found.stdout.splitlines()[1:]} == {"labels.npy"}


def test_an_object_member_too_large_to_inflate_is_unread_never_clean(tmp_path: Path) -> None:
    import numpy as np

    from strided._core.limits import MAX_INFLATED_OBJECT_PICKLE

    path = tmp_path / "large.npz"
    blob = bytes(MAX_INFLATED_OBJECT_PICKLE)  # deflates to a few hundred KB
    np.savez_compressed(path, w=np.arange(3.0), big=np.array([blob], dtype=object))
    found = run(sys.executable, "-m", "strided", "scan", "--json", str(path))
    document = json.loads(found.stdout)
    assert document["status"] == found.returncode == 2
    (entry,) = document["files"]
    assert entry["format"] == "npz" and entry["error"] is None
    assert list(entry["unread"]) == ["big.npy"] and entry["imports"] == []
    assert "big.npy: not read: its pickle deflates to" in found.stderr
    with st.open_checkpoint(path) as checkpoint:  # the rest of the archive still reads
        assert list(checkpoint) == ["w"] and "big" in checkpoint.unreadable


# -- the verdict table --------------------------------------------------------------------

RUNS_CODE = [
    ("torch.utils.collect_env", "run"),
    ("torch.utils.collect_env", "run_and_read_all"),
    ("torch.jit.unsupported_tensor_ops", "execWrapper"),
    ("torch.serialization", "load"),
    ("torch.serialization", "_load"),
    ("torch._dynamo.eval_frame", "optimize"),
    ("torch.hub", "load"),
    ("torch.hub", "_import_module"),
    ("torch.package.package_importer", "PackageImporter"),
    ("torch.jit._script", "script"),
    ("torch.jit.frontend", "get_jit_def"),
    ("torch.jit.annotations", "get_signature"),
    ("torch.utils.cpp_extension", "load_inline"),
    ("torch._inductor.codecache", "PyCodeCache"),
    ("torch.fx.graph_module", "reduce_graph_module"),
    ("torch.fx.graph_module", "_exec_with_source"),
    ("torch.export", "load"),
    ("torch._export.serde.serialize", "deserialize"),
    ("torch._utils", "_import_dotted_name"),
    ("torch.utils._config_module", "ConfigModule"),
    ("torch", "__getattr__"),
    ("torch.multiprocessing.spawn", "spawn"),
    ("torch.distributed.checkpoint.format_utils", "dcp_to_torch_save"),
    ("torch._ops", "import_module"),
    ("numpy.testing._private.utils", "runstring"),
    ("numpy.f2py", "compile"),
    ("builtins", "getattr"),
    ("builtins", "setattr"),
    ("builtins", "eval"),
    ("builtins", "exec"),
    ("builtins", "compile"),
    ("builtins", "__import__"),
    ("builtins", "open"),
    ("builtins", "breakpoint"),
    ("builtins", "input"),
    ("builtins", "help"),
    ("builtins", "vars"),
    ("builtins", "globals"),
    ("builtins", "type"),
    ("builtins", "print"),
    ("builtins", "object"),
]


@pytest.mark.parametrize(("module", "name"), RUNS_CODE)
def test_torch_helpers_and_builtins_that_run_code_are_dangerous(module: str, name: str) -> None:
    assert verdict(module, name) == "dangerous"


def test_what_strict_mode_reads_stays_data() -> None:
    for module, name in (("builtins", "set"), ("builtins", "bytes"), ("builtins", "list"),
                         ("torch._utils", "_rebuild_tensor_v2"),
                         ("torch.serialization", "_get_layout"),
                         ("collections", "OrderedDict")):  # fmt: skip
        assert verdict(module, name) == "data", (module, name)
    # torch.jit._pickle only rebuilds lists: judged as any module outside the table.
    assert verdict("torch.jit._pickle", "build_intlist") == "unknown"
    assert verdict("torch.nn.modules.linear", "Linear") == "unknown"
    assert verdict("copyreg", "__newobj__") == "unknown"


_BUILTINS_DATA = {key.partition(".")[2] for key in GLOBALS if key.startswith("builtins.")}
_IDENTIFIERS = hs.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)


@given(_IDENTIFIERS)
def test_every_builtin_but_the_strict_constructors_is_dangerous(name: str) -> None:
    expected = "data" if name in _BUILTINS_DATA else "dangerous"
    assert verdict("builtins", name) == expected


_TORCH_RUNNING = [
    "torch.jit", "torch.fx", "torch._dynamo", "torch._inductor", "torch.hub", "torch.package",
    "torch.serialization", "torch.utils.cpp_extension", "torch.utils.collect_env",
]  # fmt: skip


@given(
    hs.sampled_from(_TORCH_RUNNING),
    hs.lists(_IDENTIFIERS, min_size=0, max_size=3),
    _IDENTIFIERS,
)
def test_everything_inside_a_dangerous_torch_module_is_dangerous(
    module: str, inner: list[str], name: str
) -> None:
    full = ".".join([module, *inner])
    if f"{full}.{name}" in GLOBALS or full.startswith("torch.jit._pickle"):
        return  # what strict mode reads as data, and the one harmless submodule
    assert verdict(full, name) == "dangerous"


# -- a distributed checkpoint and its torch.save file have equal metadata -------------------


def test_dcp_and_its_torch_save_file_have_equal_metadata(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    base = tmp_path_factory.getbasetemp()
    folder = dcpwrite.cached(base, "dcp-two-ranks", dcpwrite.write_two_ranks)
    consolidated = Path(f"{folder}.pt")
    with st.open_checkpoint(folder) as ours, st.open_checkpoint(consolidated) as theirs:
        assert ours.metadata == theirs.metadata
        assert ours.metadata["optim.param_groups.0.betas.0"] == 0.9
        assert ours.metadata["optim.param_groups.0.betas.1"] == 0.999
        assert ours.metadata["optim.param_groups.0.params.0"] == "up.weight"
        assert ours.unreadable == {}
    found = run(sys.executable, "-m", "strided", "diff", str(folder), str(consolidated))
    assert found.returncode == 0, found.stdout
    assert "metadata differs" not in found.stdout and "only in" not in found.stdout
    assert found.stdout.rstrip().endswith("tensors and metadata match")
    assert scan(folder).returncode == 0
