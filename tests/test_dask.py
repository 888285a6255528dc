"""strided on a dask.distributed cluster: hash, verify and diff give the one-process
output byte for byte; ``strided.dask.from_checkpoint`` gives the values
``open_checkpoint`` gives for every dtype; ``strided.dask.exact_sum`` does not depend
on the chunking (oracles: ``math.fsum``, Python ints, exact fractions rounded once)."""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import strided as st
from strided.cli import main

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
sd = importlib.import_module("strided.dask")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny-llama.safetensors"
D = st.DType


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two worker processes of one thread each, shared by every test here."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",
            scheduler_kwargs={"dashboard": False},
            silence_logs=40,
        ) as cluster,
        distributed.Client(cluster) as found,
    ):
        yield found


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The example, the example in three shards, and a model whose largest tensor is cut
    into chunks (20 MiB: more than one task), with a changed copy to compare with."""
    folder = tmp_path_factory.mktemp("dask-models")
    shards = folder / "shards"
    assert main(["convert", str(EXAMPLE), str(shards), "--max-shard-size", "100KB"]) == 0
    rng = np.random.default_rng(3)
    big = rng.standard_normal(5 << 20, dtype=np.float32).reshape(-1, 1024)
    big[4000, 7] = np.nan
    big[-1, -1] = np.inf
    tensors = {
        "big": big,
        "small.bias": rng.standard_normal(300).astype(ml_dtypes.bfloat16),
        "ids": np.arange(-50, 50, dtype=np.int64),
    }
    large = folder / "large.safetensors"
    st.save_safetensors(large, {k: st.Tensor.from_numpy(v) for k, v in tensors.items()})
    big[-2, 5] += 1.0
    big[100, 3] = 0.0
    other = folder / "other.safetensors"
    st.save_safetensors(other, {k: st.Tensor.from_numpy(v) for k, v in tensors.items()})
    return {"example": EXAMPLE, "shards": shards, "large": large, "other": other}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["example", "shards", "large"])
def test_hash_and_verify_on_the_cluster_match_one_process(
    client: Any, models: dict[str, Path], model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(models[model])
    address = client.scheduler.address
    for command in (["hash"], ["hash", "--json"], ["verify"]):
        local = run(capsys, *command, path)
        remote = run(capsys, *command, path, "--scheduler", address)
        assert remote[:2] == local[:2], command
        assert remote[2] == ""
    manifest = models["large"].parent / f"{model}.sha256"
    manifest.write_text(run(capsys, "hash", path)[1])
    local = run(capsys, "verify", path, "--manifest", str(manifest))
    remote = run(capsys, "verify", path, "--manifest", str(manifest), "--scheduler", address)
    assert remote[:2] == local[:2]
    assert local[0] == (1 if model == "large" else 0)  # the NaN and the infinity


def test_diff_on_the_cluster_matches_one_process(
    client: Any,
    models: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = client.scheduler.address
    pairs = [("large", "other"), ("example", "shards"), ("other", "example")]
    for a, b in pairs:
        for extra in ([], ["--json"], ["--atol", "0.5"], ["--ulp", "3"]):
            args = ["diff", str(models[a]), str(models[b]), *extra]
            local = run(capsys, *args)
            remote = run(capsys, *args, "--scheduler", address)
            assert remote[:2] == local[:2], (a, b, extra)
    found = run(capsys, "diff", str(models["large"]), str(models["other"]), "--json")
    assert '"count": 2' in found[1] and found[0] == 1
    # Progress is drawn as tasks finish, up to the whole.
    monkeypatch.setenv("STRIDED_PROGRESS", "1")
    args = ["diff", str(models["large"]), str(models["other"]), "--scheduler", address]
    assert run(capsys, *args)[2].rstrip().endswith("100.0%")


def test_skipped_unreadable_members_on_the_cluster_match_one_process(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .npz with members strided cannot read: refused alike, and skipped alike (their
    stored bytes' digests in hash, verify --manifest and diff)."""
    address = client.scheduler.address
    paths = []
    for tag in ("csr", "csc"):
        path = tmp_path / f"{tag}.npz"
        np.savez_compressed(
            path, w=np.arange(6, dtype=np.float32), format=np.array(tag),
            obj=np.array([{"tag": tag}], dtype=object),
        )  # fmt: skip
        paths.append(str(path))
    manifest = tmp_path / "csr.sha256"
    manifest.write_text(run(capsys, "hash", paths[0], "--skip-unreadable")[1])
    commands = [
        ["hash", paths[0]],
        ["hash", paths[0], "--skip-unreadable", "--json"],
        ["verify", paths[1], "--skip-unreadable", "--manifest", str(manifest)],
        ["diff", *paths, "--skip-unreadable", "--json"],
    ]
    found = []
    for command in commands:
        local = run(capsys, *command)
        assert run(capsys, *command, "--scheduler", address) == local, command
        found.append(local)
    assert [status for status, _, _ in found] == [1, 0, 1, 1]
    assert "'obj'" in found[0][2] and found[0][1] == ""
    assert "*unreadable*:format: digest differs from the manifest" in found[2][1]
    assert json.loads(found[3][1])["unreadable"]["obj"]["status"] == "differs"


def test_urls_on_the_cluster_match_one_process(
    client: Any,
    models: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("httpx")
    from .httpserver import FileServer

    monkeypatch.setenv("STRIDED_REMOTE_TOKENS", "{}")  # what --token leaves is undone
    server = FileServer(models["large"].parent)
    try:
        url = server.url("large.safetensors")
        local = run(capsys, "hash", url)  # one process
        from_file = run(capsys, "hash", str(models["large"]))[1].splitlines()
        assert local[1].splitlines()[:3] == from_file[:3]  # the last line names the file
        assert run(capsys, "hash", url, "--scheduler", client.scheduler.address) == local
        server.reset()
        assert run(capsys, "hash", url, "--scheduler", "local:2", "--token", "T") == local
        sent = {headers.get("Authorization") for _, headers in server.requests}
        assert sent == {"Bearer T"} and len(server.ports) > 1  # the workers' requests too
    finally:
        server.close()


def test_local_cluster_from_the_real_command_line(models: dict[str, Path]) -> None:
    command = [sys.executable, "-m", "strided", "hash", str(models["shards"])]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    local = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    remote = subprocess.run(
        [*command, "--scheduler", "local:2"],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
        timeout=120,
    )
    assert (remote.returncode, remote.stdout) == (local.returncode, local.stdout)
    assert local.returncode == 0 and remote.stderr == ""


def test_an_unreachable_scheduler_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("strided.jobs._dask_engine.CONNECT_TIMEOUT", 0.5)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status, out, err = run(capsys, "hash", str(EXAMPLE), "--scheduler", f"tcp://127.0.0.1:{port}")
    assert status == 2 and out == ""
    assert err.startswith(f"strided: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}")
    assert err.count("\n") == 1


def test_a_path_the_workers_cannot_see_is_named(
    client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command opens the file here; it is gone before any worker looks for it."""
    path = tmp_path / "only-here.safetensors"
    path.write_bytes(EXAMPLE.read_bytes())
    real = st.open_checkpoint

    def open_then_hide(where: Any, lenient: bool = False) -> st.Checkpoint:
        checkpoint = real(where, lenient=lenient)
        os.unlink(where)
        return checkpoint

    monkeypatch.setattr("strided.cli._hash.open_checkpoint", open_then_hide)
    status, out, err = run(capsys, "hash", str(path), "--scheduler", client.scheduler.address)
    assert status == 2 and out == ""
    assert err.startswith(f"strided: {path}: not found on Dask worker tcp://")
    assert err.count("\n") == 1


def test_a_file_rewritten_between_commands_is_read_afresh(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers outlive commands and keep files open; a rewritten file is not read stale."""
    path = tmp_path / "model.safetensors"
    address = client.scheduler.address
    for round_ in range(3):
        values = np.full((64, 64), round_, dtype=np.float32)
        staged = tmp_path / "staged.safetensors"
        st.save_safetensors(staged, {"w": st.Tensor.from_numpy(values)})
        os.replace(staged, path)
        assert run(capsys, "hash", str(path), "--scheduler", address) == run(
            capsys, "hash", str(path)
        )
        array = sd.from_checkpoint(path)["w"]
        assert array.compute().tolist() == values.tolist()


def test_jobs_and_scheduler_together_are_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["hash", str(EXAMPLE), "--jobs", "2", "--scheduler", "local:2"])
    assert stopped.value.code == 2
    assert "--jobs and --scheduler cannot be combined" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["verify", str(EXAMPLE), "--scheduler", "local:0"])
    capsys.readouterr()


def test_without_dask_the_error_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    status, out, err = run(capsys, "hash", str(EXAMPLE), "--scheduler", "local:2")
    assert status == 2 and out == ""
    assert "pip install 'strided[dask]'" in err and err.count("\n") == 1
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.delitem(sys.modules, "strided.dask")
    with pytest.raises(ImportError, match=r"pip install 'strided\[dask\]'"):
        importlib.import_module("strided.dask")


def test_import_strided_never_imports_dask() -> None:
    code = "import sys, strided, strided.cli; print(sorted(m for m in sys.modules if 'dask' in m))"
    found = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    assert found.stdout.strip() == "[]"


# -- from_checkpoint ----------------------------------------------------------------------------


def _every_dtype() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    values = rng.standard_normal((6, 10)).astype(np.float32) * 8
    arrays: dict[str, np.ndarray] = {}
    for dtype in D:
        if dtype is D.BOOL:
            arrays[dtype.name] = rng.integers(0, 2, (6, 10)).astype(bool)
        elif dtype is D.F8_E8M0:
            arrays[dtype.name] = np.exp2(rng.integers(-20, 20, (6, 10))).astype(dtype.numpy)
        elif dtype.is_float:
            arrays[dtype.name] = values.astype(dtype.numpy)
        else:
            arrays[dtype.name] = rng.integers(0, 100, (6, 10)).astype(dtype.numpy)
    arrays["scalar"] = np.array(2.5, dtype=ml_dtypes.bfloat16)
    arrays["cube"] = np.arange(4 * 5 * 6, dtype=np.int16).reshape(4, 5, 6)
    return arrays


@pytest.mark.parametrize("chunks", ["auto", 4, {0: 1, 1: -1}])
def test_from_checkpoint_values_are_open_checkpoint_values(
    client: Any, tmp_path: Path, chunks: Any
) -> None:
    path = tmp_path / "all.safetensors"
    st.save_safetensors(path, {k: st.Tensor.from_numpy(v) for k, v in _every_dtype().items()})
    arrays = sd.from_checkpoint(path, chunks=chunks)
    with st.open_checkpoint(path) as checkpoint:
        assert list(arrays) == list(checkpoint)
        for name, array in arrays.items():
            expected = checkpoint[name].numpy()
            found = array.compute()
            assert found.dtype == expected.dtype and found.shape == expected.shape, name
            assert found.tobytes() == expected.tobytes(), name
            # Rechunked, chunks cross between the workers (F8_E5M2 as bytes).
            if array.ndim == 2:
                moved = array.T.rechunk((3, 2)).compute()
                assert moved.dtype == expected.dtype and moved.tobytes() == expected.T.tobytes()


def test_from_checkpoint_of_a_url_fetches_each_chunk_once(
    client: Any, tmp_path: Path, models: dict[str, Path]
) -> None:
    pytest.importorskip("httpx")
    from .httpserver import FileServer

    path = tmp_path / "all.safetensors"
    st.save_safetensors(path, {k: st.Tensor.from_numpy(v) for k, v in _every_dtype().items()})
    server = FileServer(tmp_path)
    try:
        for served, chunks in ((path, {0: 2}), (models["large"], {"big": (700, 1024)})):
            shutil.copy(served, tmp_path / "served.safetensors")
            server.reset()
            arrays = sd.from_checkpoint(server.url("served.safetensors"), chunks=chunks)
            with st.open_checkpoint(served) as checkpoint:
                for name, array in arrays.items():
                    found, expected = array.compute(), checkpoint[name].numpy()
                    assert found.dtype == expected.dtype and found.shape == expected.shape
                    assert found.tobytes() == expected.tobytes(), name
            # Headers and each chunk's rows: a whole tensor per worker would be far more.
            assert server.sent < served.stat().st_size + (256 << 10)
    finally:
        server.close()


def test_quantized_gguf_tensors_read_as_dequantized_f32(client: Any, tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    values = np.random.default_rng(9).standard_normal((16, 64)).astype(np.float32)
    blocks = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("ids", np.arange(6, dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    expected = st.open_checkpoint(path)["q"].numpy()
    for chunks in ((5, 64), (16, 32), (3, 7)):
        array = sd.from_checkpoint(path, chunks={"q": chunks})["q"]
        assert array.dtype == np.float32 and array.compute().tobytes() == expected.tobytes()
    assert sd.from_checkpoint(path)["ids"].compute().tolist() == list(range(6))


def test_from_checkpoint_chunks_by_name_and_misfits() -> None:
    arrays = sd.from_checkpoint(EXAMPLE, chunks={"model.norm.weight": 5})
    assert arrays["model.norm.weight"].chunks == ((5,) * 12 + (4,),)
    assert arrays["model.embed_tokens.weight"].numblocks == (1, 1)
    with pytest.raises(st.ShapeError, match=r"tensor 'model\.vocab_ids'"):
        sd.from_checkpoint(EXAMPLE, chunks=(4, 4, 4))


# -- exact_sum ----------------------------------------------------------------------------------

# Five chunkings of ~300 values: even, uneven, one chunk (Dask tasks are costly, so few).
_CHUNKINGS: tuple[Any, ...] = (13, 29, 64, ((1, 2, 150, 7, 190, 5000),), 1000)


def chunked(values: np.ndarray, chunks: Any) -> Any:
    if isinstance(chunks, tuple):  # explicit sizes, the last one trimmed to fit
        sizes, left = [], values.size
        for size in chunks[0]:
            sizes.append(min(size, left))
            left -= sizes[-1]
        chunks = (tuple(size for size in sizes if size),)
    return da.from_array(values, chunks=chunks)


def test_f64_sums_are_exact_for_any_chunking(client: Any) -> None:
    rng = np.random.default_rng(1)
    adversarial = np.array([1e308, 1.0, -1e308, 1e-300, 2.0**-1074, -1.0, 3.0, 1e16] * 40)
    mixed = rng.standard_normal(300) * np.exp2(rng.integers(-1000, 1000, 300))
    ties = np.array([2.0**53, 1.0, 1.0, -(2.0**53)] * 5 + [2.0**-1074])
    for values in (adversarial, mixed, ties, rng.permutation(adversarial)):
        expected = float(sum((Fraction(v) for v in values.tolist()), Fraction(0)))
        try:
            assert math.fsum(values.tolist()) == expected
        except OverflowError:  # fsum's partial sums overflow on 1e308 + 1e308
            pass
        assert st.Tensor.from_numpy(values).sum().value == expected
        for chunks in _CHUNKINGS:
            found = sd.exact_sum(chunked(values, chunks))
            assert found == st.Scalar(D.F64, expected), chunks


def test_f64_special_values(client: Any) -> None:
    cases = [
        ([1.0, np.inf, 2.0], math.inf),
        ([np.inf, -np.inf], math.nan),
        ([1.0, np.nan], math.nan),
        ([1.7e308, 1.7e308, -1.0], math.inf),
        ([-0.0, -0.0], 0.0),
        ([], 0.0),
    ]
    for values, expected in cases:
        found = sd.exact_sum(da.from_array(np.array(values, dtype=np.float64), chunks=1))
        assert found == st.Scalar(D.F64, expected), values
        assert found == st.Tensor.from_numpy(np.array(values, dtype=np.float64)).sum()


@pytest.mark.parametrize("dtype", [D.I8, D.U16, D.I32, D.U32, D.I64, D.U64])
def test_integer_sums_are_exact_and_overflow_is_range_error(client: Any, dtype: st.DType) -> None:
    info = np.iinfo(dtype.numpy)
    rng = np.random.default_rng(2)
    values = rng.integers(info.min // 1000, info.max // 1000, 320, dtype=dtype.numpy)
    expected = sum(int(v) for v in values)
    if info.min <= expected <= info.max:
        assert st.Tensor.from_numpy(values).sum() == st.Scalar(dtype, expected)
        for chunks in _CHUNKINGS:
            assert sd.exact_sum(chunked(values, chunks)) == st.Scalar(dtype, expected)
    full = np.full(40, info.max, dtype=dtype.numpy)
    for chunks in (1, 7, 40):
        with pytest.raises(st.RangeError, match="does not fit"):
            sd.exact_sum(da.from_array(full, chunks=chunks))
    with pytest.raises(st.RangeError):
        st.Tensor.from_numpy(full).sum()


def _ordinal(value: Any, dtype: st.DType) -> int:
    bits = int(np.array([value], dtype=dtype.numpy).view(f"<u{dtype.itemsize}")[0])
    sign = 1 << (8 * dtype.itemsize - 1)
    return -(bits & (sign - 1)) if bits & sign else bits


def _from_ordinal(ordinal: int, dtype: st.DType) -> float:
    sign = 1 << (8 * dtype.itemsize - 1)
    bits = ordinal if ordinal >= 0 else -ordinal | sign
    raw = np.array([bits], dtype=f"<u{dtype.itemsize}").view(dtype.numpy)
    return float(raw.astype(np.float64)[0])


def _rounded_once(exact: Fraction, dtype: st.DType) -> float:
    """The nearest value of ``dtype`` to ``exact`` (ties to an even last bit)."""
    near = _ordinal(np.array([float(exact)]).astype(dtype.numpy)[0], dtype)
    best: tuple[Fraction, int, float] | None = None
    for ordinal in (near - 1, near, near + 1):
        candidate = _from_ordinal(ordinal, dtype)
        if not math.isfinite(candidate):
            continue
        key = (abs(Fraction(candidate) - exact), ordinal & 1, candidate)
        best = key if best is None or key[:2] < best[:2] else best
    assert best is not None
    return best[2] + 0.0


@pytest.mark.parametrize("dtype", [D.F32, D.F16, D.BF16])
def test_narrow_float_sums_are_correctly_rounded(client: Any, dtype: st.DType) -> None:
    rng = np.random.default_rng(4)
    top = 10 if dtype is D.F16 else 60
    for trial in range(2):
        wide = rng.standard_normal(170) * np.exp2(rng.integers(-top, top, 170))
        values = wide.astype(dtype.numpy)
        if trial % 2:  # heavy cancellation: the values and almost their negatives
            values = np.concatenate([values, -values[:-3]])
        exact = sum((Fraction(float(v)) for v in values.astype(np.float64)), Fraction(0))
        expected = _rounded_once(exact, dtype)
        reference = st.Tensor.from_numpy(values).sum()
        assert abs(_ordinal(reference.value, dtype) - _ordinal(expected, dtype)) <= 1
        for chunks in _CHUNKINGS:
            found = sd.exact_sum(chunked(values, chunks))
            assert found == st.Scalar(dtype, expected), (trial, chunks)


def test_exact_sum_of_a_checkpoint_tensor_matches_tensor_sum(
    client: Any, models: dict[str, Path]
) -> None:
    arrays = sd.from_checkpoint(models["large"], chunks={"big": (1000, 512), "ids": 30})
    with st.open_checkpoint(models["large"]) as checkpoint:
        assert sd.exact_sum(arrays["ids"]) == checkpoint["ids"].sum()
        finite = arrays["big"][:4000]
        expected = st.Tensor.from_numpy(checkpoint["big"].numpy()[:4000].astype(np.float64))
        exact = sd.exact_sum(finite.astype(np.float64))
        assert exact == expected.sum()
        assert math.isnan(sd.exact_sum(arrays["big"]).value)


def test_exact_sum_of_bool_counts_like_tensor_sum(client: Any) -> None:
    rng = np.random.default_rng(8)
    values = rng.integers(0, 2, 1000).astype(bool)
    raw = rng.integers(0, 256, 1000).astype(np.uint8).view(bool)  # any nonzero byte is true
    for array in (values, raw):
        expected = st.Tensor.from_numpy(array).sum()
        assert expected == st.Scalar(D.I64, int(np.count_nonzero(array)))
        for chunks in (1, 7, 1000):
            assert sd.exact_sum(da.from_array(array, chunks=chunks)) == expected


def test_exact_sum_refuses_what_has_no_sum() -> None:
    with pytest.raises(st.DTypeError):
        sd.exact_sum(da.from_array(np.zeros(3, dtype=ml_dtypes.float8_e4m3fn)))
    with pytest.raises(st.DTypeError):
        sd.exact_sum(da.from_array(np.zeros(3, dtype=np.complex64)))
    with pytest.raises(st.DTypeError, match=r"expected a dask\.array\.Array"):
        sd.exact_sum(np.zeros(3))
