"""``strided verify``: NaN and infinity in tensors (reported; accepted by name with
``--allow-nonfinite``), metadata values that are data and never judged, and rows in
name order (UTF-8 bytes).

A real Lightning ``Trainer`` checkpoint is written by ``lightningchild.py`` and read
back by ``torch.load`` in child processes only (a pickle that must be run to be read).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from strided.cli import main

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}

# The oracle, in a child: the tensors of the checkpoint that hold NaN or infinity, as
# (path of keys, NaN count, inf count), and the ModelCheckpoint callback's kth_value.
_ORACLE = """
import json, sys, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
found = []
def walk(value, path):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            nan, inf = int(value.isnan().sum()), int(value.isinf().sum())
            if nan or inf:
                found.append([path, nan, inf])
    elif isinstance(value, dict):
        for key, item in value.items():
            walk(item, path + [str(key)])
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            walk(item, path + [str(index)])
walk(state, [])
kth = [v["kth_value"] for k, v in state["callbacks"].items() if k.startswith("ModelCheckpoint")]
print(json.dumps({"nonfinite": found, "kth": [float(v) for v in kth]}))
"""


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


def test_a_lightning_checkpoint_passes_with_its_kth_value_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pytorch_lightning")
    path = tmp_path / "model.ckpt"
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "lightningchild.py"), str(path), str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=True, cwd=ROOT, env=ENV,
    )  # fmt: skip
    oracle = subprocess.run(
        [sys.executable, "-c", _ORACLE, str(path)],
        capture_output=True, text=True, timeout=600, check=True, env=ENV,
    )  # fmt: skip
    expected = json.loads(oracle.stdout)
    assert expected["kth"] == [float("inf")]
    (found,) = expected["nonfinite"]  # the callback's kth_value, and nothing else
    assert found[0][0] == "callbacks" and found[0][-1] == "kth_value" and found[1:] == [0, 1]

    status, out = cli(capsys, "verify", str(path), "--lenient")
    problems = [line for line in out.splitlines() if ": 0 NaN, 1 inf, first at []" in line]
    assert (
        status == 1 and len(problems) == 1 and problems[0].startswith("callbacks.ModelCheckpoint")
    )
    assert out.splitlines()[-1].endswith(": 1 tensor with NaN or inf")

    assert (
        cli(capsys, "verify", str(path), "--lenient", "--allow-nonfinite", "state_dict.*")[0] == 1
    )
    status, out = cli(capsys, "verify", str(path), "--lenient", "--allow-nonfinite", "*.kth_value")
    assert status == 0
    lines = out.splitlines()
    assert f"{problems[0]} (allowed by --allow-nonfinite)" in lines  # still reported
    assert lines[-1].endswith(": clean (1 tensor with NaN or inf allowed)")


def test_nonfinite_metadata_is_data_and_globs_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    inf, nan = float("inf"), float("nan")
    tensors = {
        "w": torch.ones(3),
        "k": torch.tensor(inf),
        "bad": torch.tensor([nan, 1.0, -inf, nan]),
    }
    metadata = {"best": inf, "loss": nan, "cfg": {"floor": -inf}, "steps": 3}
    only_metadata = tmp_path / "meta.pt"
    torch.save({"w": tensors["w"], **metadata}, only_metadata)
    status, out = cli(capsys, "verify", str(only_metadata))
    assert status == 0 and out.splitlines()[-1].endswith(": clean")

    path = tmp_path / "mixed.pt"
    torch.save({**tensors, **metadata}, path)
    counts = {
        name: (int(value.isnan().sum()), int(value.isinf().sum()))
        for name, value in tensors.items()
        if not value.isfinite().all()
    }
    assert counts == {"k": (0, 1), "bad": (2, 1)}
    status, out = cli(capsys, "verify", str(path))
    assert status == 1
    assert "bad: 2 NaN, 1 inf, first at [0]" in out and "k: 0 NaN, 1 inf, first at []" in out
    assert out.splitlines()[-1].endswith(": 2 tensors with NaN or inf")

    status, out = cli(capsys, "verify", str(path), "--allow-nonfinite", "k")
    assert status == 1
    assert out.splitlines()[-1].endswith(
        ": 1 tensor with NaN or inf (1 tensor with NaN or inf allowed)"
    )
    status, out = cli(
        capsys, "verify", str(path), "--allow-nonfinite", "k", "--allow-nonfinite", "b?d"
    )
    assert status == 0
    assert "bad: 2 NaN, 1 inf, first at [0] (allowed by --allow-nonfinite)" in out
    assert out.splitlines()[-1].endswith(": clean (2 tensors with NaN or inf allowed)")
    # With a manifest too: the digests are checked, the allowed tensors still pass.
    manifest = tmp_path / "mixed.sha256"
    manifest.write_text(cli(capsys, "hash", str(path))[1])
    status, out = cli(
        capsys, "verify", str(path), "--manifest", str(manifest), "--allow-nonfinite", "*"
    )
    assert status == 0 and out.splitlines()[-1].endswith(
        ": clean, digests match (2 tensors with NaN or inf allowed)"
    )


NAMES = hs.lists(
    hs.text("abzAZ09._éß中😀", min_size=1, max_size=6), min_size=1, max_size=8, unique=True
)


@settings(max_examples=30, deadline=None)
@given(names=NAMES)
def test_verify_rows_are_in_utf8_name_order(names: list[str]) -> None:
    expected = sorted(names, key=lambda name: name.encode("utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.npz"
        # Archive order is the order given; every tensor holds a NaN, so each has a line.
        np.savez(
            path,
            **{name: np.array([np.nan, index], np.float32) for index, name in enumerate(names)},
        )
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = main(["verify", str(path)])
    lines = printed.getvalue().splitlines()
    assert status == 1
    assert [line.split()[0] for line in lines[1 : 1 + len(names)]] == expected
    problems = lines[1 + len(names) : 1 + 2 * len(names)]
    assert problems == [f"{name}: 1 NaN, 0 inf, first at [0]" for name in expected]
