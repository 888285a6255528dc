"""``st.scan``: the Python face of ``strided scan``, report for report.

Oracles: the command line itself (its ``--json`` text and exit status on the same paths)
and the GLOBAL opcodes ``pickletools`` finds in each pickle.
"""

from __future__ import annotations

import doctest
import json
import os
import pickletools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import strided as st
import strided.jobs._pickle_scan as pickle_scan
from tests import payloads

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def command(*paths: Path) -> subprocess.CompletedProcess[str]:
    found = [sys.executable, "-m", "strided", "scan", "--json", *map(str, paths)]
    return subprocess.run(found, capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)


def globals_of(data: bytes) -> list[str]:
    """``module.name`` of each GLOBAL opcode of a protocol 0-2 pickle, first use first."""
    found: dict[str, None] = {}
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            found[str(argument).replace(" ", ".")] = None
    return list(found)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A clean safetensors file, a plain torch.save state dict, a torch.save file and a
    bare pickle each holding a payload (never loaded here), a pickle of an unknown class
    and a file no format reads."""
    folder = tmp_path_factory.mktemp("scan-face")
    sentinel = folder / "never-created"
    clean = folder / "clean.safetensors"
    safetensors_numpy.save_file({"w": np.arange(4, dtype=np.float32)}, str(clean))
    plain = folder / "plain.pt"
    torch.save({"w": torch.arange(3.0)}, plain)
    system, _ = payloads.payloads(sentinel)["system"]
    unknown = folder / "unknown.pkl"
    unknown.write_bytes(b"cfractions\nFraction\n(S'1/3'\ntR.")
    text = folder / "notes.txt"
    text.write_text("not a checkpoint\n")
    return {
        "clean": clean,
        "plain": plain,
        "torch": payloads.torch_file(folder / "payload.pt", system),
        "bare": payloads.bare_pickle(folder / "payload.pkl", system, protocol=2),
        "unknown": unknown,
        "text": text,
    }


@pytest.mark.parametrize(
    ("names", "status", "verdict"),
    [
        (("clean",), 0, "data"),
        (("plain",), 0, "data"),
        (("torch",), 1, "dangerous"),
        (("bare",), 1, "dangerous"),
        (("unknown",), 1, "unknown"),
        (("text",), 2, "unreadable"),
        (("clean", "text"), 2, "unreadable"),
        (("text", "unknown", "clean"), 1, "unknown"),
        (("unknown", "torch"), 1, "dangerous"),
    ],
)
def test_scan_reports_what_the_command_prints(
    files: dict[str, Path], names: tuple[str, ...], status: int, verdict: str
) -> None:
    paths = [files[name] for name in names]
    report = st.scan(*paths)
    ran = command(*paths)
    assert ran.returncode == status == report.status
    assert report.to_json() + "\n" == ran.stdout  # the very text --json prints
    assert report.ok is (status == 0)
    assert report.verdict == verdict
    assert [file.path for file in report.files] == [str(path) for path in paths]
    parsed = json.loads(report.to_json())
    assert parsed["status"] == status and len(parsed["files"]) == len(paths)


def test_scan_lists_the_imports_of_a_bare_pickle(files: dict[str, Path]) -> None:
    report = st.scan(files["bare"])
    (file,) = report.files
    assert file.error is not None  # strided cannot open it as a checkpoint...
    named = [str(found) for found in file.imports]
    assert named == globals_of(files["bare"].read_bytes())  # ...but lists what it names
    assert {found.member for found in file.imports} == {files["bare"].name}
    assert "posix.system" in named or "nt.system" in named
    assert report.imports == file.imports
    with pytest.raises(AttributeError):  # frozen: a report is a value
        report.status = 0  # type: ignore[misc]


def test_scan_never_loads_the_payload(files: dict[str, Path]) -> None:
    st.scan(files["torch"], files["bare"])
    assert not (files["torch"].parent / "never-created").exists()


def test_scan_takes_path_objects_and_text(files: dict[str, Path]) -> None:
    assert st.scan(files["clean"]) == st.scan(str(files["clean"]))


def test_the_docstring_example_runs() -> None:
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(pickle_scan.scan, "scan", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=6)
