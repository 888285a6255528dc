"""``strided scan`` and ``--lenient`` on every command, run as the real command line.

Oracles: the GLOBAL opcodes ``pickletools`` finds in the file (the imports, in order),
``torch.load(weights_only=False)`` in a child (the state dict a whole model holds), and
the reference ``safetensors`` reader (what ``convert --lenient`` wrote).
"""

from __future__ import annotations

import json
import pickletools
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import strided as st
from tests.test_lenient import ENV, ROOT, hostile, oracle, save
from tests.test_pickle_hostile import as_zip

torch = pytest.importorskip("torch")
models = pytest.importorskip("tests.lenient_models")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

COMMANDS = ("inspect", "hash", "verify", "convert", "diff")


def strided(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "strided", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)


def globals_named(path: Path) -> list[str]:
    """``module.name`` of each GLOBAL opcode in the file's data.pkl, first use first."""
    with zipfile.ZipFile(path) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    found: dict[str, None] = {}
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            module, name = str(argument).split(" ")
            found[f"{'builtins' if module == '__builtin__' else module}.{name}"] = None
    return list(found)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("scan")
    torch.manual_seed(0)
    wide = models.Wide()
    found = {
        "weights": save(wide.state_dict(), folder / "weights.pt", "zip", 2),
        "model": save(wide, folder / "model.pt", "zip", 2),
        "hostile": as_zip(folder, hostile(folder / "pwned")[0]).rename(folder / "hostile.pt"),
        "garbage": folder / "garbage.pt",
        "safetensors": folder / "weights.safetensors",
    }
    found["garbage"].write_bytes(b"\x80\x02not a pickle at all")
    st.save_safetensors(found["safetensors"], {"w": st.tensor([1.0, 2.0], st.DType.F32)})
    return found


def test_scan_lists_every_global_with_its_verdict(files: dict[str, Path]) -> None:
    weights = strided("scan", str(files["weights"]))
    named = globals_named(files["weights"])
    member = f"{files['weights'].stem}/data.pkl"  # the archive's pickle, by its zip name
    lines = [f"  {name.ljust(max(map(len, named)))}  data  {member}" for name in named]
    assert (weights.returncode, weights.stderr) == (0, "")
    assert weights.stdout.splitlines() == [
        f"{files['weights']}: pytorch, {len(named)} imports ({len(named)} data)",
        *lines,
    ]
    model = strided("scan", str(files["model"]))
    assert model.returncode == 1
    report = model.stdout.splitlines()
    assert [line.split()[0] for line in report[1:]] == globals_named(files["model"])
    assert "  tests.lenient_models.Wide " in model.stdout
    verdicts = {line.split()[0]: line.split()[1] for line in report[1:]}
    assert verdicts["tests.lenient_models.Wide"] == "unknown"
    assert verdicts["torch.nn.modules.linear.Linear"] == "unknown"
    assert verdicts["torch._utils._rebuild_parameter"] == "data"


def test_scan_flags_dangerous_imports_whatever_their_spelling(files: dict[str, Path]) -> None:
    found = strided("scan", str(files["hostile"]))
    assert found.returncode == 1
    flagged = [line.split()[0] for line in found.stdout.splitlines() if "DANGEROUS" in line]
    assert flagged == hostile(Path("x"))[1]  # the memo and STACK_GLOBAL one as os.system
    assert "10 dangerous" in found.stdout.splitlines()[0]
    assert not (files["hostile"].parent / "pwned").exists()


def test_scan_exit_status_and_formats_without_pickles(files: dict[str, Path]) -> None:
    plain = strided("scan", str(files["safetensors"]))
    assert (plain.returncode, plain.stdout) == (
        0, f"{files['safetensors']}: safetensors, no pickle imports\n"
    )  # fmt: skip
    bad = strided("scan", str(files["garbage"]), str(files["weights"]))
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"strided: {files['garbage']}: ")
    assert len(bad.stderr.splitlines()) == 1
    assert bad.stdout.startswith(f"{files['weights']}: pytorch")  # the others are scanned
    assert strided("scan", str(files["weights"]), str(files["model"])).returncode == 1
    assert strided("scan").returncode == 2  # a path is required


def test_scan_json(files: dict[str, Path]) -> None:
    found = strided("scan", "--json", str(files["model"]), str(files["garbage"]))
    document = json.loads(found.stdout)
    # An unknown import outranks a file that cannot be read.
    assert document["status"] == found.returncode == 1
    first, second = document["files"]
    assert first["format"] == "pytorch" and first["error"] is None
    named = [f"{item['module']}.{item['name']}" for item in first["imports"]]
    assert named == globals_named(files["model"])
    assert {item["verdict"] for item in first["imports"]} == {"data", "unknown"}
    assert {item["member"] for item in first["imports"]} == {"model/data.pkl"}
    assert second["format"] is None and second["imports"] == []
    assert str(files["garbage"]) in second["error"]
    alone = strided("scan", "--json", str(files["garbage"]), str(files["weights"]))
    assert json.loads(alone.stdout)["status"] == alone.returncode == 2


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_whole_model_without_lenient(
    files: dict[str, Path], command: str, tmp_path: Path
) -> None:
    args = {
        "convert": [str(files["model"]), str(tmp_path / "out.safetensors")],
        "diff": [str(files["model"]), str(files["weights"])],
    }.get(command, [str(files["model"])])
    found = strided(command, *args)
    assert found.returncode == (2 if command == "diff" else 1)
    assert "tests.lenient_models.Wide is not an allowed global" in found.stderr
    assert found.stdout == "" and not (tmp_path / "out.safetensors").exists()


def test_convert_lenient_gives_the_state_dict_for_any_jobs(
    files: dict[str, Path], tmp_path: Path
) -> None:
    expected = oracle(files["model"])
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"model-{jobs}.safetensors"
        found = strided("convert", "--lenient", str(files["model"]), str(out), "--jobs", jobs)
        assert found.returncode == 0, found.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    written = safetensors_numpy.load_file(str(tmp_path / "model-1.safetensors"))
    assert sorted(written) == sorted(expected)
    for name, (_, shape, data, _) in expected.items():
        assert list(written[name].shape) == shape
        assert written[name].tobytes() == bytes.fromhex(data)


def test_hash_verify_diff_inspect_take_lenient(files: dict[str, Path], tmp_path: Path) -> None:
    model, weights = str(files["model"]), str(files["weights"])
    # The content digest does not depend on the format: the whole model's equals its
    # state dict's, which strict mode reads.
    reference = strided("hash", weights)
    assert reference.returncode == 0
    for extra in ([], ["--jobs", "2"]):
        found = strided("hash", "--lenient", model, *extra)
        assert (found.returncode, found.stdout) == (0, reference.stdout)
    assert strided("verify", "--lenient", model, "--jobs", "2").returncode == 0
    diff = strided("diff", "--lenient", model, weights)
    assert diff.returncode == 0, diff.stdout
    inspect = strided("inspect", "--lenient", model)
    assert inspect.returncode == 0
    scanned = json.loads(strided("scan", "--json", model).stdout)["files"][0]["imports"]
    data = sum(item["verdict"] == "data" for item in scanned)
    summary = inspect.stdout.splitlines()[1]
    assert summary.startswith(f"imports: {data} data, {len(scanned) - data} unknown (")
    assert "tests.lenient_models.Wide" in summary
    document = json.loads(strided("inspect", "--lenient", "--json", model).stdout)
    assert {
        "module": "tests.lenient_models", "name": "Wide", "verdict": "unknown",
        "member": "model/data.pkl",
    } in document["imports"]  # fmt: skip
    assert json.loads(strided("inspect", "--json", weights).stdout)["imports"][0] == {
        "module": "collections", "name": "OrderedDict", "verdict": "data",
        "member": "weights/data.pkl",
    }  # fmt: skip


def test_dask_workers_open_leniently(files: dict[str, Path]) -> None:
    pytest.importorskip("distributed")
    model = str(files["model"])
    local = strided("hash", "--lenient", model)
    remote = strided("hash", "--lenient", model, "--scheduler", "local:1")
    assert (remote.returncode, remote.stdout) == (0, local.stdout)


def test_lenient_through_the_python_dask_api(files: dict[str, Path]) -> None:
    pytest.importorskip("distributed")
    sd = pytest.importorskip("strided.dask")
    expected = oracle(files["model"])
    arrays = sd.from_checkpoint(files["model"], lenient=True)
    assert list(arrays) == list(expected)
    name = "layers.3.weight"
    found = np.asarray(arrays[name].compute(scheduler="processes", num_workers=2))
    assert found.tobytes() == bytes.fromhex(expected[name][2])
