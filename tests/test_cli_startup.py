"""The command line's start-up: --version, each command's --help, and lazy imports.

Everything runs in a real subprocess; no test measures time. What keeps start-up fast is
checked by what is imported: ``import strided`` and ``strided --help`` must not load
NumPy or ml_dtypes (ml_dtypes alone takes about a second to load).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import strided as st

COMMANDS = ("inspect", "verify", "hash", "diff", "convert")
# Where the package imported here lives, so a child interpreter imports the same one.
PACKAGE_ROOT = str(Path(st.__file__).resolve().parent.parent)
ENV = {**os.environ, "COLUMNS": "80", "PYTHONPATH": PACKAGE_ROOT}


def python(*args: str, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-S"] if isolated else []
    return subprocess.run(
        [sys.executable, *flags, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=ENV,
    )


def test_version_prints_the_package_version() -> None:
    installed = metadata.version("strided")
    assert installed == st.__version__
    for command in (
        [str(Path(sys.executable).parent / "strided")],
        [sys.executable, "-m", "strided"],
    ):
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=120, env=ENV
        )
        assert (result.returncode, result.stdout, result.stderr) == (
            0,
            f"strided {installed}\n",
            "",
        )


def test_version_without_installed_metadata_falls_back_to_the_package() -> None:
    # -S leaves site-packages (and the installed metadata) off the path: only the
    # package's own __version__ is there to read.
    result = python("-m", "strided", "--version", isolated=True)
    assert (result.returncode, result.stdout) == (0, f"strided {st.__version__}\n"), result.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+", st.__version__)


# Words a one-line summary cannot end with unless it was cut off ("... and the whole").
_DANGLING = {"a", "an", "and", "the", "of", "or", "to", "with", "for", "in", "whole", "every"}


def _summaries(text: str) -> dict[str, str]:
    """The one-line summary of each command in ``strided --help`` (wrapped lines joined)."""
    found: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"    (\w+)\s{2,}(.*)", line)
        if match and match.group(1) in COMMANDS:
            current = match.group(1)
            found[current] = match.group(2).strip()
        elif current and re.match(r"\s{10,}\S", line):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


def test_top_level_help_lists_every_command_in_full() -> None:
    result = python("-m", "strided", "--help")
    assert result.returncode == 0, result.stderr
    assert "--version" in result.stdout and "exit status" in result.stdout
    summaries = _summaries(result.stdout)
    assert sorted(summaries) == sorted(COMMANDS)
    for command, summary in summaries.items():
        last = re.findall(r"[\w-]+", summary)[-1].lower()
        assert last not in _DANGLING, (command, summary)
    assert "checkpoint" in summaries["hash"]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_help_has_a_synopsis_and_one_example(command: str) -> None:
    result = python("-m", "strided", command, "--help")
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert text.startswith(f"usage: strided {command} ")
    assert text.count("example:") == 1
    after = text.split("example:\n", 1)[1].splitlines()
    assert after[0].startswith(f"  strided {command} "), after
    assert all(not line.strip() for line in after[1:]), "exactly one example, at the end"
    assert "exit status: 0" in text
    # The summary shown by 'strided --help' is the opening sentence here, in full.
    summary = _summaries(python("-m", "strided", "--help").stdout)[command]
    flat = " ".join(text.split())
    assert summary[0].upper() + summary[1:] + "." in flat
    # The checkpoint argument may be a local path or a URL, and its help says so.
    assert "a local path or an http(s) URL" in flat


def test_lazy_package_import() -> None:
    probe = (
        "import strided, sys\n"
        "print('ml_dtypes' in sys.modules, 'numpy' in sys.modules)\n"
        "names = set(dir(strided))\n"
        "print(set(strided.__all__) <= names, 'numpy' in sys.modules)\n"
        "from strided import Tensor, open_checkpoint\n"
        "from strided._tensor.tensor import Tensor as home\n"
        "print(Tensor is home, 'Tensor' in vars(strided), 'numpy' in sys.modules)\n"
    )
    result = python("-c", probe)
    assert result.stdout.split("\n") == [
        "False False",
        "True False",
        "True True True",
        "",
    ], result.stderr


def test_every_public_name_resolves_to_its_home_object() -> None:
    probe = (
        "import importlib, strided\n"
        "for name in strided.__all__:\n"
        "    value = getattr(strided, name)\n"
        "    home = importlib.import_module(strided._HOMES[name], 'strided')\n"
        "    assert getattr(home, name) is value, name\n"
        "    exec(f'from strided import {name} as again')\n"
        "    assert again is value, name\n"
        "assert set(strided._HOMES) == set(strided.__all__)\n"
        "try:\n"
        "    strided.no_such_name\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    result = python("-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "module 'strided' has no attribute 'no_such_name'\n"


_RUN_MODULE = """
import runpy, sys
sys.argv = ["strided", *sys.argv[1:]]
try:
    runpy.run_module("strided", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    status = stop.code
heavy = ["numpy", "ml_dtypes", "strided._core.dtype", "strided.jobs._pool", "strided.io"]
print("STATUS", status, "LOADED", *[name for name in heavy if name in sys.modules], file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        [],
        *[[command, "--help"] for command in COMMANDS],
        ["convert", "a.safetensors"],  # a usage error
    ],
)
def test_help_version_and_usage_errors_load_nothing_heavy(args: list[str]) -> None:
    result = python("-c", _RUN_MODULE, *args)
    last = result.stderr.splitlines()[-1]
    expected = 0 if args and args[-1] in ("--help", "--version") else 2
    assert last == f"STATUS {expected} LOADED", result.stderr


def test_a_command_loads_what_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    st.save_npy(path, st.tensor([1.0, 2.0], "F32"))
    result = python("-c", _RUN_MODULE, "hash", str(path))
    assert result.stderr.splitlines()[-1].startswith("STATUS 0 LOADED numpy ml_dtypes"), (
        result.stderr
    )
    assert result.stdout.splitlines()[-1].endswith("  *checkpoint*")
