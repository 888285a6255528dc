"""The command line's start-up: --version, each command's --help, and lazy imports.

Everything runs in a real subprocess; no test measures time. What keeps start-up fast is
checked by what is imported: ``import strided`` and ``strided --help`` must not load
NumPy or ml_dtypes (ml_dtypes alone takes about a second to load), and a command on a
checkpoint whose dtypes are all NumPy's own (or a safetensors hash, which streams the
stored bytes) must not load ml_dtypes, nor a process pool with one job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
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
heavy = ["numpy", "ml_dtypes", "concurrent.futures.process", "strided._core.dtype",
         "strided.jobs._pool", "strided.io"]
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


# What a command on NumPy's own dtypes loads: no ml_dtypes, no process pool.
_NATIVE_LOADED = "LOADED numpy strided._core.dtype strided.jobs._pool strided.io"


def test_a_command_loads_what_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    st.save_npy(path, st.tensor([1.0, 2.0], "F32"))
    result = python("-c", _RUN_MODULE, "hash", str(path))
    assert result.stderr.splitlines()[-1] == f"STATUS 0 {_NATIVE_LOADED}", result.stderr
    expected = _digest("F32", (2,), np.array([1.0, 2.0], np.float32).tobytes())
    assert result.stdout.splitlines()[0] == f"{expected}  x"


def _digest(dtype: str, shape: tuple[int, ...], data: bytes) -> str:
    """A tensor digest by its definition: the JSON head, then the row-major bytes."""
    head = json.dumps({"dtype": dtype, "shape": list(shape)}, separators=(",", ":"))
    return hashlib.sha256(head.encode() + data).hexdigest()


def _hash_lines(digests: dict[str, str]) -> list[str]:
    """``strided hash`` output by the digest definitions (names plain ASCII, no metadata)."""
    names = sorted(digests, key=lambda name: name.encode())
    total = hashlib.sha256("".join(f"{n}\t{digests[n]}\n" for n in names).encode())
    return [
        *[f"{digests[name]}  {name}" for name in names],
        f"{hashlib.sha256(b'').hexdigest()}  *metadata*",
        f"{total.hexdigest()}  *checkpoint*",
    ]


# One tensor of every dtype NumPy has itself, with edge values.
_NATIVE = {
    "b": np.array([True, False, True]),
    "i8": np.array([-128, 0, 127], np.int8),
    "i16": np.array([[-32768, 1], [2, 32767]], np.int16),
    "i32": np.array([-(2**31), 2**31 - 1], np.int32),
    "i64": np.array([-(2**63), 2**63 - 1], np.int64),
    "u8": np.array([0, 255], np.uint8),
    "u16": np.array([65535], np.uint16),
    "u32": np.array([2**32 - 1], np.uint32),
    "u64": np.array([2**64 - 1, 0], np.uint64),
    "f16": np.array([65504.0, -0.0, 6e-8, np.inf], np.float16),
    "f32": np.linspace(-3.0, 3.0, 12, dtype=np.float32).reshape(3, 4),
    "f64": np.array([1e300, -5e-324, np.nan]),
}
_NATIVE_NAMES = {
    np.bool_: "BOOL", np.int8: "I8", np.int16: "I16", np.int32: "I32", np.int64: "I64",
    np.uint8: "U8", np.uint16: "U16", np.uint32: "U32", np.uint64: "U64",
    np.float16: "F16", np.float32: "F32", np.float64: "F64",
}  # fmt: skip


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two checkpoints of NumPy's own dtypes; in the second one F32 element is 1 ulp up."""
    folder = tmp_path_factory.mktemp("native")
    a, b = folder / "a.safetensors", folder / "b.safetensors"
    st.save_safetensors(a, {name: st.Tensor.from_numpy(v) for name, v in _NATIVE.items()})
    changed = dict(_NATIVE, f32=_NATIVE["f32"].copy())
    changed["f32"][1, 2] = np.nextafter(changed["f32"][1, 2], np.float32(np.inf))
    st.save_safetensors(b, {name: st.Tensor.from_numpy(v) for name, v in changed.items()})
    return a, b


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["hash", "A"], 0),
        (["inspect", "A"], 0),
        (["inspect", "--json", "--strategy", "spread", "A"], 0),
        (["verify", "A"], 1),  # f16 holds an inf, f64 a NaN
        (["diff", "A", "B"], 1),
        (["diff", "--ulp", "1", "--atol", "1e-9", "A", "B"], 0),
        (["convert", "A", "OUT/c.safetensors"], 0),
        (["convert", "--dtype", "F64", "--name", "f16", "A", "OUT/c.npy"], 0),
        (["convert", "--name", "u64", "A", "OUT/c.json"], 0),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_commands_on_numpy_dtypes_leave_ml_dtypes_unloaded(
    native: tuple[Path, Path], tmp_path: Path, args: list[str], status: int
) -> None:
    a, b = native
    places = {"A": str(a), "B": str(b)}
    argv = [places.get(arg, arg.replace("OUT", str(tmp_path))) for arg in args]
    result = python("-c", _RUN_MODULE, *argv)
    assert result.stderr.splitlines()[-1] == f"STATUS {status} {_NATIVE_LOADED}", result.stderr
    if args[0] == "hash":  # and the digests are the ones the definition gives
        expected = {
            name: _digest(_NATIVE_NAMES[v.dtype.type], v.shape, v.tobytes())
            for name, v in _NATIVE.items()
        }
        assert result.stdout.splitlines() == _hash_lines(expected)
    if args[0] == "verify":
        assert result.stdout.splitlines()[-3:] == [  # rows in name order
            "f16: 0 NaN, 1 inf, first at [3]",
            "f64: 1 NaN, 0 inf, first at [2]",
            f"{a}: 12 tensors, 142 B: 2 tensors with NaN or inf",
        ]
    if args[0] == "diff":
        assert "f32" in result.stdout


def _raw_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
    """A safetensors file written by hand from (dtype, shape, bytes), tensors in order."""
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(t[2] for t in tensors.values()))


def test_safetensors_hash_of_bf16_and_fp8_streams_bytes_without_ml_dtypes(tmp_path: Path) -> None:
    # Every bit pattern is a value of these dtypes (NaN payloads, -0, subnormals alike).
    noise = np.random.default_rng(20).integers(0, 256, 64, dtype=np.uint8).tobytes()
    tensors = {
        "w": ("BF16", (3, 5), noise[:30]),
        "scale": ("F8_E4M3", (2, 2), noise[30:34]),
        "e5": ("F8_E5M2", (3,), noise[34:37]),
        "e8": ("F8_E8M0", (1,), noise[37:38]),
        "bias": ("F32", (2,), np.array([0.5, -2.0], np.float32).tobytes()),
        "tail": ("BF16", (0, 4), b""),
    }
    path = tmp_path / "mixed.safetensors"
    _raw_safetensors(path, tensors)
    result = python("-c", _RUN_MODULE, "hash", str(path))
    assert result.stderr.splitlines()[-1] == f"STATUS 0 {_NATIVE_LOADED}", result.stderr
    expected = {name: _digest(*tensor) for name, tensor in tensors.items()}
    assert result.stdout.splitlines() == _hash_lines(expected)


def test_bf16_values_load_ml_dtypes_when_first_needed(tmp_path: Path) -> None:
    path = tmp_path / "bf16.safetensors"
    # 1.0, -2.5 and the largest finite BF16, as bits
    _raw_safetensors(path, {"w": ("BF16", (3,), struct.pack("<3H", 0x3F80, 0xC020, 0x7F7F))})
    result = python("-c", _RUN_MODULE, "verify", str(path))
    loaded = "LOADED numpy ml_dtypes strided._core.dtype strided.jobs._pool strided.io"
    assert result.stderr.splitlines()[-1] == f"STATUS 0 {loaded}", result.stderr
    row = result.stdout.splitlines()[1].split()
    assert row[:5] == ["w", "BF16", "[3]", "-2.5", "3.39e+38"], result.stdout
