"""``st.hash`` and ``st.verify``: the ``hash`` and ``verify`` commands as Python functions.

Each report's ``to_json()`` is byte for byte what the command's ``--json`` prints,
``HashReport.lines()`` what ``hash`` prints without it, and ``ok`` True exactly when
the command exits 0. The oracles: ``hashlib`` (digests recomputed from their
definition), NumPy and ``fractions`` (NaN and infinity counts, the first non-finite
index, extremes and the exact mean), ``zipfile`` (an ``.npz`` member's stored bytes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main

FLOATS = {"F32": np.float32, "F64": np.float64, "F16": np.float16}
INTS = {"I64": np.int64, "I32": np.int32, "U8": np.uint8}
NAMES = hs.text(hs.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def save(path: Path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> Path:
    st.save_safetensors(
        path, {name: st.Tensor.from_numpy(a) for name, a in arrays.items()}, metadata=metadata
    )
    return path


def tensor_digest(dtype: str, array: np.ndarray) -> str:
    """SHA-256 of ``{"dtype":...,"shape":[...]}`` then the little-endian row-major bytes."""
    head = json.dumps({"dtype": dtype, "shape": list(array.shape)}, separators=(",", ":"))
    body = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return hashlib.sha256(head.encode() + body).hexdigest()


def escaped(name: str) -> str:
    return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def checkpoint_digest(pairs: dict[str, str]) -> str:
    ordered = sorted(pairs.items(), key=lambda item: item[0].encode())
    lines = "".join(f"{escaped(name)}\t{digest}\n" for name, digest in ordered)
    return hashlib.sha256(lines.encode()).hexdigest()


def dtype_name(array: np.ndarray) -> str:
    found = {**FLOATS, **INTS}
    return next(name for name, kind in found.items() if array.dtype == kind)


@hs.composite
def checkpoints(draw: hs.DrawFn) -> dict[str, np.ndarray]:
    names = draw(hs.lists(NAMES, min_size=1, max_size=4, unique=True))
    found = {}
    for name in names:
        kind = draw(hs.sampled_from([*FLOATS.values(), *INTS.values()]))
        shape = tuple(draw(hs.lists(hs.integers(0, 4), max_size=3)))
        count = math.prod(shape)
        if np.issubdtype(kind, np.floating):
            values = draw(hs.lists(hs.floats(width=16), min_size=count, max_size=count))
        else:
            info = np.iinfo(kind)
            low, high = max(int(info.min), -1000), min(int(info.max), 1000)
            values = draw(hs.lists(hs.integers(low, high), min_size=count, max_size=count))
        found[name] = np.array(values, dtype=kind).reshape(shape)
    return found


# -- st.hash ------------------------------------------------------------------------------


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arrays=checkpoints())
def test_hash_report_is_the_command_and_the_definition(
    arrays: dict[str, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = save(tmp_path / "m.safetensors", arrays, {"k": "v"})
    report = st.hash(path)
    expected = {name: tensor_digest(dtype_name(a), a) for name, a in arrays.items()}
    assert {name: entry.digest for name, entry in report.tensors.items()} == expected
    assert list(report.tensors) == sorted(arrays, key=lambda name: name.encode())
    assert report.digest == checkpoint_digest(expected)
    assert report.metadata_digest == hashlib.sha256(b"k\tv\n").hexdigest()
    assert report.ok is True and report.unreadable == {}
    status, out, err = cli(capsys, "hash", str(path), "--json")
    assert (status, out, err) == (0, report.to_json() + "\n", "")
    status, out, err = cli(capsys, "hash", str(path))
    assert (status, out, err) == (0, "".join(line + "\n" for line in report.lines()), "")
    assert report == st.hash(str(path), jobs=2)


def test_hash_lines_are_a_manifest_verify_accepts(tmp_path: Path) -> None:
    arrays = {"*star": np.ones(3, np.float32), "a\tb": np.arange(4, dtype=np.int64)}
    path = save(tmp_path / "m.safetensors", arrays)
    report = st.hash(path)
    assert report.lines()[0].startswith("\\") and report.lines()[-2].endswith("  *metadata*")
    manifest = tmp_path / "m.sha256"
    manifest.write_text("".join(line + "\n" for line in report.lines()))
    assert st.verify(path, manifest).verdict == "clean, digests match"
    manifest.write_text(report.to_json())
    assert st.verify(path, manifest).ok


def stored_bytes(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    data = path.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    return data[start : start + info.compress_size]


def test_hash_of_unreadable_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.npz"
    np.savez(path, w=np.arange(3.0), o=np.array([{"x": 1}], dtype=object))
    with pytest.raises(st.FormatError, match="skip_unreadable=True"):
        st.hash(path)
    status, out, err = cli(capsys, "hash", str(path))
    assert status == 1 and out == "" and "1 member strided cannot read" in err
    report = st.hash(path, skip_unreadable=True)
    member = hashlib.sha256(stored_bytes(path, "o.npy")).hexdigest()
    assert report.unreadable == {"o": member}
    assert report.digest == checkpoint_digest(
        {"w": tensor_digest("F64", np.arange(3.0)), "*unreadable*:o": member}
    )
    status, out, err = cli(capsys, "hash", str(path), "--skip-unreadable", "--json")
    assert (status, out) == (0, report.to_json() + "\n")
    assert json.loads(out)["unreadable"] == {"o": member}
    assert err.startswith(f"strided: {path}: skipped unreadable member 'o'")


def test_hash_names_selects_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``names=`` / ``--name``: the checkpoint digest of the selection is the digest of a
    checkpoint holding those tensors alone."""
    arrays = {f"layer.{i}.w": np.full((2,), i, np.float32) for i in range(3)}
    arrays["head"] = np.zeros(4, np.int32)
    path = save(tmp_path / "m.safetensors", arrays)
    chosen = {name: a for name, a in arrays.items() if name.startswith("layer.")}
    alone = save(tmp_path / "alone.safetensors", chosen)
    report = st.hash(path, names="layer.*")
    assert list(report.tensors) == sorted(chosen)
    assert report.digest == st.hash(alone).digest == st.open_checkpoint(alone).digest()
    status, out, _ = cli(capsys, "hash", str(path), "--name", "layer.*", "--json")
    assert (status, out) == (0, report.to_json() + "\n")
    with pytest.raises(st.FormatError, match="no tensor matches 'nothing'"):
        st.hash(path, names="nothing")
    status, out, err = cli(capsys, "hash", str(path), "--name", "nothing")
    assert (status, out) == (1, "") and err == f"strided: {path}: no tensor matches 'nothing'\n"


def test_bad_input_raises_typed_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b'\x05\x00\x00\x00\x00\x00\x00\x00{"a":')
    good = save(tmp_path / "m.safetensors", {"w": np.ones(2, np.float32)})
    for job in (st.hash, st.verify):
        with pytest.raises(st.FormatError, match=str(bad)):
            job(bad)
        with pytest.raises(st.LimitError, match="jobs must be an int between 1 and 1024"):
            job(good, jobs=0)
        with pytest.raises(st.LimitError):
            job(good, jobs=True)
        with pytest.raises(st.FormatError, match="jobs and scheduler cannot be combined"):
            job(good, jobs=2, scheduler="local:2")
        for scheduler in ("local:0", "local:x", "local:1025"):
            with pytest.raises(st.LimitError, match="local:N takes a number of workers"):
                job(good, scheduler=scheduler)
        with pytest.raises(FileNotFoundError):
            job(tmp_path / "absent.safetensors")
    manifest = tmp_path / "bad.sha256"
    manifest.write_text("not a manifest\n")
    with pytest.raises(st.FormatError, match="expected 'DIGEST  NAME'"):
        st.verify(good, manifest)


# -- st.verify ----------------------------------------------------------------------------


def exact_mean(values: np.ndarray) -> float | None:
    """The mean of the non-NaN values, from Fractions (infinities by their signs)."""
    finite = [v for v in values.ravel().tolist() if not math.isnan(v)]
    if not finite:
        return None
    if any(math.isinf(v) for v in finite):
        signs = {v for v in finite if math.isinf(v)}
        return math.nan if len(signs) == 2 else signs.pop()
    return float(sum(Fraction(v) for v in finite) / len(finite))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(arrays=checkpoints(), allow=hs.booleans())
def test_verify_rows_against_numpy(
    arrays: dict[str, np.ndarray],
    allow: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = save(tmp_path / "m.safetensors", arrays)
    allowed = ("*",) if allow else ()
    report = st.verify(path, allow_nonfinite=allowed)
    assert list(report.tensors) == sorted(arrays, key=lambda name: name.encode())
    bad = 0
    for name, array in arrays.items():
        entry = report.tensors[name]
        assert (entry.dtype, entry.shape, entry.numel) == (
            dtype_name(array),
            array.shape,
            array.size,
        )
        assert entry.scanned and entry.digest is None
        wide = array.astype(np.float64)
        nan, inf = int(np.isnan(wide).sum()), int(np.isinf(wide).sum())
        assert (entry.nan, entry.inf) == (nan, inf)
        where = np.argwhere(~np.isfinite(wide))
        assert entry.first_nonfinite == (tuple(int(i) for i in where[0]) if len(where) else None)
        assert entry.allowed == (allow and bool(nan or inf))
        bad += bool(nan or inf) and not allow
        mean = exact_mean(wide)
        if mean is None or math.isnan(mean):
            assert entry.mean is None or math.isnan(entry.mean) or array.size == 0
        else:
            assert entry.mean == mean
        values = array[~np.isnan(wide)]  # min and max: canonical text of the dtype
        if values.size:
            kind = array.dtype.type
            assert kind(entry.min) == values.min() and kind(entry.max) == values.max()
    assert report.ok == (bad == 0)
    status, out, err = cli(
        capsys, "verify", str(path), *(["--allow-nonfinite", "*"] * allow), "--json"
    )
    assert (status, out, err) == (0 if report.ok else 1, report.to_json() + "\n", "")
    status, text, _ = cli(capsys, "verify", str(path), *(["--allow-nonfinite", "*"] * allow))
    assert status == (0 if report.ok else 1)
    assert text.endswith(f": {report.verdict}\n")


def test_verify_against_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Differs, missing, unexpected, metadata: the JSON names them; ok is the exit status."""
    old = save(
        tmp_path / "old.safetensors",
        {"a": np.ones(2, np.float32), "b": np.zeros(1, np.int8)},
        {"k": "v"},
    )
    new = save(
        tmp_path / "new.safetensors",
        {"a": np.zeros(2, np.float32), "c": np.zeros(1, np.int8)},
        {"k": "w"},
    )
    manifest = tmp_path / "old.sha256"
    manifest.write_text("".join(line + "\n" for line in st.hash(old).lines()))
    same = st.verify(old, manifest)
    assert same.ok and same.manifest == st.ManifestCheck()
    assert same.tensors["a"].digest == tensor_digest("F32", np.ones(2, np.float32))
    report = st.verify(new, manifest)
    assert not report.ok
    assert report.manifest == st.ManifestCheck(
        differs=("a",), missing=("b",), unexpected=("c",), metadata="differs"
    )
    assert report.verdict == "1 digest differs, 1 missing, 1 unexpected, metadata digest differs"
    document = json.loads(report.to_json())
    assert list(document) == ["path", "tensors", "bytes", "unreadable", "manifest", "verdict", "ok"]
    assert document["manifest"]["differs"] == ["a"] and document["ok"] is False
    for path, expected in ((old, same), (new, report)):
        status, out, err = cli(capsys, "verify", str(path), "--manifest", str(manifest), "--json")
        assert (status, out, err) == (0 if expected.ok else 1, expected.to_json() + "\n", "")
    # The last line alone tampered with: every tensor agrees, the checkpoint digest not.
    lines = manifest.read_text().splitlines()
    lines[-1] = "0" * 64 + lines[-1][64:]
    manifest.write_text("\n".join(lines) + "\n")
    tampered = st.verify(old, manifest)
    assert tampered.manifest is not None and tampered.manifest.checkpoint_digest_differs
    assert not tampered.ok and tampered.verdict == "checkpoint digest differs"


def test_verify_names_checks_a_whole_manifest_in_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = {"x.w": np.ones(2, np.float32), "y.w": np.array([np.nan], np.float32)}
    path = save(tmp_path / "m.safetensors", arrays)
    manifest = tmp_path / "m.sha256"
    manifest.write_text("".join(line + "\n" for line in st.hash(path).lines()))
    assert not st.verify(path, manifest).ok  # y.w holds NaN
    report = st.verify(path, manifest, names="x.*")
    assert report.ok and list(report.tensors) == ["x.w"]
    assert report.verdict == "clean, digests match"
    status, out, _ = cli(
        capsys, "verify", str(path), "--manifest", str(manifest), "--name", "x.*", "--json"
    )
    assert (status, out) == (0, report.to_json() + "\n")
    with pytest.raises(st.FormatError, match="no tensor matches"):
        st.verify(path, names="z*")


def test_verify_unreadable_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.npz"
    np.savez(path, w=np.arange(3.0), o=np.array([{"x": 1}], dtype=object))
    with pytest.raises(st.FormatError, match="'o'"):
        st.verify(path)
    manifest = tmp_path / "m.sha256"
    manifest.write_text(
        "".join(line + "\n" for line in st.hash(path, skip_unreadable=True).lines())
    )
    report = st.verify(path, os.fspath(manifest), skip_unreadable=True)
    assert report.ok and report.unreadable == {"o": "object array (|O): pickled, never unpickled"}
    status, out, err = cli(
        capsys, "verify", str(path), "--manifest", str(manifest), "--skip-unreadable", "--json"
    )
    assert (status, out) == (0, report.to_json() + "\n")
    assert "skipped unreadable member 'o'" in err


def test_a_single_glob_string_is_one_glob(tmp_path: Path) -> None:
    """``allow_nonfinite="w*"`` is the glob ``w*``, not the globs ``w`` and ``*``."""
    path = save(
        tmp_path / "m.safetensors",
        {"w1": np.array([np.inf], np.float32), "v": np.array([np.nan], np.float32)},
    )
    report = st.verify(path, allow_nonfinite="w*")
    assert report.tensors["w1"].allowed and not report.tensors["v"].allowed
    assert (
        not report.ok
        and report.verdict == "1 tensor with NaN or inf (1 tensor with NaN or inf allowed)"
    )


def test_reports_are_frozen(tmp_path: Path) -> None:
    path = save(tmp_path / "m.safetensors", {"w": np.ones(1, np.float32)})
    for report in (st.hash(path), st.verify(path)):
        with pytest.raises(AttributeError):
            report.ok = False  # type: ignore[misc]


def test_the_token_reaches_the_workers_and_is_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``token=`` goes to the URL's origin from this process and from the worker
    processes (three 16 MiB tensors: three tasks), and is forgotten afterwards."""
    from strided.io import _http

    from .httpserver import FileServer

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv(_http.TOKENS_VARIABLE, raising=False)
    save(
        tmp_path / "many.safetensors", {f"t{i}": np.full(1 << 22, i, np.float32) for i in range(3)}
    )
    server = FileServer(tmp_path)
    try:
        url = server.url("many.safetensors")
        report = st.hash(url, jobs=3, token="s3cret")
        assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer s3cret"}
        assert len(server.ports) >= 2  # the workers' own connections
        assert _http.TOKENS_VARIABLE not in os.environ
        assert report == st.hash(tmp_path / "many.safetensors")
        server.reset()
        checked = st.verify(url, token="t0ken")
        assert checked.ok
        assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer t0ken"}
        status, out, _ = cli(capsys, "verify", url, "--token", "t0ken", "--json")
        assert (status, out) == (0, checked.to_json() + "\n")
    finally:
        server.close()


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_tensor_that_fails_to_read_is_the_readers_error(
    jobs: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deflated ``.npz`` member corrupted mid-stream opens (its header is intact) and
    fails only when read, in a task: the Python faces raise the reader's FormatError
    naming the tensor, where the command prints one line and exits 1."""
    path = tmp_path / "c.npz"
    np.savez_compressed(path, w=np.random.default_rng(0).standard_normal(200_000))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    path.write_bytes(bytes(data))
    for job in (st.hash, st.verify):
        with pytest.raises(st.FormatError, match=r"c\.npz: tensor 'w': .*deflate"):
            job(path, jobs=jobs)
    for command in ("hash", "verify"):
        status, out, err = cli(capsys, command, str(path), "--jobs", str(jobs))
        assert (status, out) == (1, "") and "tensor 'w'" in err and err.count("\n") == 1


def test_a_dask_scheduler_gives_the_same_reports(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    arrays = {"w": np.arange(6.0).reshape(2, 3), "bad": np.array([np.nan], np.float32)}
    path = save(tmp_path / "m.safetensors", arrays)
    manifest = tmp_path / "m.sha256"
    manifest.write_text("".join(line + "\n" for line in st.hash(path).lines()))
    assert st.hash(path, scheduler="local:1") == st.hash(path)
    assert st.verify(path, manifest, scheduler="local:1") == st.verify(path, manifest)


_AFTER_A_FORK_SERVER = """
import sys, threading, strided as st
# A second thread makes the jobs start their workers from a fork server, and this first
# job starts that server before any token is set: its environment knows no token.
threading.Thread(target=threading.Event().wait, daemon=True).start()
st.hash(sys.argv[2], jobs=3)
st.hash(sys.argv[1], jobs=3, token="s3cret")
"""


def test_workers_from_an_older_fork_server_still_send_the_token(tmp_path: Path) -> None:
    """A long-lived program whose fork server predates the job: the token set for the job
    reaches the workers anyway (they are handed it, not left to inherit it)."""
    import subprocess
    import sys

    from .httpserver import FileServer

    arrays = {f"t{i}": np.full(1 << 22, i, np.float32) for i in range(3)}
    save(tmp_path / "many.safetensors", arrays)
    save(tmp_path / "local.safetensors", arrays)
    server = FileServer(tmp_path)
    try:
        env = {key: value for key, value in os.environ.items() if key != "HF_TOKEN"}
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        found = subprocess.run(
            [sys.executable, "-c", _AFTER_A_FORK_SERVER, server.url("many.safetensors"),
             str(tmp_path / "local.safetensors")],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        assert found.returncode == 0, found.stderr
        assert len(server.ports) >= 2  # the workers' own connections
        assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer s3cret"}
    finally:
        server.close()
