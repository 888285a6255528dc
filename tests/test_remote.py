"""Remote checkpoints over HTTP: the same results as the local files, few bytes moved.

A real HTTP server (``tests/httpserver.py``) on 127.0.0.1 serves the example
checkpoint, a sharded copy of it written by ``strided convert --max-shard-size``, a GGUF
file with a quantized tensor written by the ``gguf`` package, and a larger file for
counting what ``inspect`` transfers.
"""

from __future__ import annotations

import importlib
import json
import shutil
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

import strided as st
from strided.cli import main
from strided.io import _http

from .httpserver import FileServer

pytest.importorskip("httpx")  # the remote extra; without it URLs are refused by name

EXAMPLE = Path(__file__).parent.parent / "examples" / "tiny-llama.safetensors"


def write_gguf(path: Path) -> None:
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, (8, 144), dtype=np.uint8)  # Q4_K: 8 blocks of 256
    blocks[:, 0:2] = np.float16(0.01).reshape(1).view(np.uint8)
    blocks[:, 2:4] = np.float16(0.02).reshape(1).view(np.uint8)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-05)
    writer.add_array("tokenizer.ggml.tokens", [f"token{i}" for i in range(3000)])
    writer.add_tensor("plain", rng.standard_normal((64, 32)).astype(np.float32))
    writer.add_tensor("half", rng.standard_normal(300).astype(np.float16))
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    shutil.copy(EXAMPLE, root / "tiny.safetensors")
    assert main(["convert", str(EXAMPLE), str(root / "sharded"), "--max-shard-size", "100KB"]) == 0
    write_gguf(root / "model.gguf")
    big = st.tensor(np.arange(1 << 21, dtype=np.float32).reshape(1024, 2048), st.DType.F32)
    st.save_safetensors(root / "big.safetensors", {"big": big, "small": st.tensor([1, 2], "I32")})
    return root


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[FileServer]:
    served = FileServer(folder)
    yield served
    served.close()


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch, server: FileServer) -> None:
    monkeypatch.setattr(_http, "BACKOFF_SECONDS", 0.01)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv(_http.TOKENS_VARIABLE, raising=False)
    server.behave = type(server.behave)()
    server.reset()


LOCAL = {
    "tiny": "tiny.safetensors",
    "sharded": "sharded/model.safetensors.index.json",
    "gguf": "model.gguf",
}


@pytest.mark.parametrize("kind", sorted(LOCAL))
def test_a_remote_checkpoint_reads_as_the_local_file(
    kind: str, folder: Path, server: FileServer
) -> None:
    with (
        st.open_checkpoint(server.url(LOCAL[kind]), timeout=5) as remote,
        st.open_checkpoint(folder / LOCAL[kind]) as local,
    ):
        assert remote.format == local.format
        assert remote.path == server.url(LOCAL[kind])
        assert list(remote) == list(local) and len(remote) == len(local)
        assert remote.metadata == local.metadata
        assert remote.display_metadata() == local.display_metadata()
        for name in local:
            assert remote.info(name) == local.info(name)
            assert remote.inspect(name) == local.inspect(name)
            spread = st.TensorInspectionOptions(max_samples=100, strategy="spread")
            assert remote.inspect(name, spread) == local.inspect(name, spread)
            mine, theirs = remote[name], local[name]
            assert (mine.dtype, mine.shape) == (theirs.dtype, theirs.shape)
            assert mine.numpy().tobytes() == theirs.numpy().tobytes()
        assert remote.digest() == local.digest()
        with pytest.raises(KeyError):
            remote["missing"]
    with pytest.raises(st.FormatError, match="closed"):
        remote.inspect(name)


def test_the_sharded_checkpoint_has_several_shards(folder: Path) -> None:
    assert len(list((folder / "sharded").glob("model-*.safetensors"))) >= 2


def test_inspect_transfers_headers_and_samples_only(folder: Path, server: FileServer) -> None:
    size = (folder / "big.safetensors").stat().st_size
    with st.open_checkpoint(server.url("big.safetensors")) as ckpt:
        ckpt.inspect("big")
        ckpt.inspect("small")
    assert size > 8 << 20
    # One probe (4 KiB holds the header), then 1024 F32 samples and 2 I32 ones.
    assert len(server.requests) == 3
    assert server.sent <= 4096 + 1024 * 4 + 8
    assert all(headers.get("Accept-Encoding") == "identity" for _, headers in server.requests)


def test_a_tensor_is_exactly_its_byte_range(server: FileServer) -> None:
    with st.open_checkpoint(server.url("big.safetensors")) as ckpt:
        server.reset()
        tensor = ckpt["small"]
        assert tensor.tolist() == [1, 2]
        assert server.sent == 8 and len(server.requests) == 1
        begin, end = _range(server.requests[0][1])
        assert end - begin == 8


def test_hashing_streams_bounded_pieces(
    server: FileServer, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http, "STREAM_CHUNK", 1 << 16)
    with st.open_checkpoint(server.url("big.safetensors")) as ckpt:
        server.reset()
        tracemalloc.start()
        try:
            digest = ckpt.digest()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    with st.open_checkpoint(folder / "big.safetensors") as local:
        assert digest == local.digest()
    assert peak < 1 << 20  # the tensor is 8 MiB: never held whole
    ranges = [_range(headers) for _, headers in server.requests]
    assert all(end - begin <= 1 << 16 for begin, end in ranges)
    # Each byte once: the first 4 KiB came with the header, the rest now.
    assert server.sent + 4096 == (folder / "big.safetensors").stat().st_size
    assert sum(end - begin for begin, end in ranges) == server.sent


def _range(headers: dict[str, str]) -> tuple[int, int]:
    begin, last = headers["Range"].removeprefix("bytes=").split("-")
    return int(begin), int(last) + 1


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("kind", sorted(LOCAL))
def test_the_commands_print_what_they_print_for_the_local_file(
    kind: str, folder: Path, server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url, path = server.url(LOCAL[kind]), str(folder / LOCAL[kind])
    for command in (["hash"], ["verify"], ["inspect", "--json"], ["inspect", "--group"]):
        remote = _run([*command, url], capsys)
        local = _run([*command, path], capsys)
        assert remote[0] == local[0] == 0
        assert remote[1].replace(url, "PATH") == local[1].replace(path, "PATH")
    manifest = folder / f"{kind}.sha256"
    manifest.write_text(_run(["hash", path], capsys)[1])
    status, out, _ = _run(["verify", url, "--manifest", str(manifest)], capsys)
    assert status == 0 and out.endswith("clean, digests match\n")
    status, out, _ = _run(["diff", url, path], capsys)
    assert status == 0, out


@pytest.mark.parametrize("kind", sorted(LOCAL))
def test_convert_writes_the_same_bytes(
    kind: str, folder: Path, server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for source, target in ((server.url(LOCAL[kind]), "r"), (str(folder / LOCAL[kind]), "l")):
        assert _run(["convert", source, str(tmp_path / f"{target}.safetensors")], capsys)[0] == 0
    assert (tmp_path / "r.safetensors").read_bytes() == (tmp_path / "l.safetensors").read_bytes()


def test_jobs_fetch_in_parallel_with_the_same_output(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url(LOCAL["sharded"])
    one = _run(["hash", url], capsys)
    two = _run(["hash", url, "--jobs", "2"], capsys)
    assert one == two and one[0] == 0


def test_the_token_goes_to_the_origin_of_the_url(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url("tiny.safetensors")
    with st.open_checkpoint(url, token="s3cret") as ckpt:
        ckpt.digest()
    assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer s3cret"}
    server.reset()
    assert _run(["hash", url, "--token", "t0ken", "--jobs", "2"], capsys)[0] == 0
    assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer t0ken"}
    server.reset()
    with st.open_checkpoint(url) as ckpt:  # the command line's token is forgotten
        ckpt.digest()
    assert {headers.get("Authorization") for _, headers in server.requests} == {None}


def test_hf_token_goes_only_to_the_hugging_face_endpoint(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_abc")
    with st.open_checkpoint(server.url("tiny.safetensors")):
        pass
    assert server.requests[-1][1].get("Authorization") is None
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.port}")
    with st.open_checkpoint(server.url("tiny.safetensors")):
        pass
    assert server.requests[-1][1].get("Authorization") == "Bearer hf_abc"


def test_without_httpx_a_url_says_what_to_install(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.import_module

    def missing(name: str, *args: object) -> object:
        if name == "httpx":
            raise ImportError("No module named 'httpx'")
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(st.FormatError, match=r"pip install 'strided\[remote\]'"):
        st.open_checkpoint(server.url("tiny.safetensors"))
    assert server.requests == []


def test_other_formats_are_refused_by_name(server: FileServer, folder: Path) -> None:
    st.save_npy(folder / "one.npy", st.tensor([1.0], "F32"))
    with pytest.raises(st.FormatError, match=r"one\.npy.*safetensors.*GGUF"):
        st.open_checkpoint(server.url("one.npy"))


def test_the_inspect_json_names_the_url(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.url("model.gguf")
    status, out, _ = _run(["inspect", "--json", url], capsys)
    document = json.loads(out)
    assert status == 0 and document["path"] == url and document["format"] == "gguf"
    assert document["metadata"]["tokenizer.ggml.tokens"]["length"] == 3000


@pytest.mark.parametrize("command", ["verify", "convert"])
def test_whole_file_commands_stream_bounded_pieces(
    command: str,
    server: FileServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(_http, "STREAM_CHUNK", 1 << 16)
    args = [command, server.url("big.safetensors")]
    if command == "convert":
        args += [str(tmp_path / "out.safetensors"), "--overwrite"]  # run twice, below
    assert main(args) == 0  # modules imported, caches warm: what follows is the job's
    tracemalloc.start()
    try:
        status = main(args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    capsys.readouterr()
    assert status == 0
    assert peak < 2 << 20  # the tensor is 8 MiB: streamed, never held whole
    if command == "convert":
        # The same tensors, and the "format" key every safetensors output carries.
        expected = tmp_path / "expected.safetensors"
        source = st.load_safetensors(server.folder / "big.safetensors")
        st.save_safetensors(expected, source, metadata={"format": "pt"})
        assert (tmp_path / "out.safetensors").read_bytes() == expected.read_bytes()


def test_close_closes_every_client(server: FileServer) -> None:
    ckpt = st.open_checkpoint(server.url(LOCAL["sharded"]), timeout=5)
    storages = {id(shard.storage.connection) for shard in ckpt._face.source._shards}
    assert len(storages) == 1  # one connection for the index and every shard
    connection = ckpt._face.source._shards[0].storage.connection
    ckpt["model.vocab_ids"]  # a request from this thread, after the shard threads'
    clients = list(connection._clients)  # as many as requests ran at once
    assert clients and not any(client.is_closed for client in clients)
    ckpt.close()
    assert all(client.is_closed for client in clients) and connection._clients == []


def test_requests_from_many_threads_in_turn_share_one_connection(server: FileServer) -> None:
    """Each request holds a client of its own only while it runs: twenty threads
    reading in turn reuse one client and one connection (none is left per thread)."""
    import threading

    with st.open_checkpoint(server.url(LOCAL["tiny"]), timeout=5) as ckpt:
        server.reset()
        for _ in range(20):
            thread = threading.Thread(target=ckpt.__getitem__, args=("model.vocab_ids",))
            thread.start()
            thread.join()
        connection = ckpt._face.source._shards[0].storage.connection
        assert len(connection._clients) == 1
    assert len(server.requests) == 20 and len(server.ports) == 1


@pytest.mark.parametrize("timeout", [0, -1.0, "5", (1.0,), (1.0, 2.0, 3.0), True])
def test_a_bad_timeout_is_a_format_error(server: FileServer, timeout: object) -> None:
    with pytest.raises(st.FormatError, match="timeout must be"):
        st.open_checkpoint(server.url("tiny.safetensors"), timeout=timeout)  # type: ignore[arg-type]
    assert server.requests == []


def test_forked_workers_make_their_own_connections(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-thread command forks its workers, which inherit the open checkpoint (and
    make their own HTTP client): the output is the one-process output, and the token
    given on the command line reaches the workers' requests too."""
    import os
    import subprocess
    import sys

    # Three tensors of 16 MiB: three tasks, so the workers take some.
    many = {f"t{i}": st.tensor(np.full(1 << 22, i, np.float32), st.DType.F32) for i in range(3)}
    st.save_safetensors(server.folder / "many.safetensors", many)
    url = server.url("many.safetensors")
    expected = _run(["hash", url], capsys)[1]
    server.reset()
    source = str(Path(st.__file__).parent.parent)
    env = dict(os.environ, PYTHONPATH=source)
    found = subprocess.run(
        [sys.executable, "-m", "strided", "hash", url, "--jobs", "3", "--token", "t"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout == expected
    assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer t"}
    assert len(server.ports) >= 2  # the workers' own connections


def test_a_forked_process_never_uses_the_parents_client(
    server: FileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    connection = _http.Connection(server.url("tiny.safetensors"), timeout=5)
    parents = connection._lease()
    connection._release(parents)  # idle: the next request in this process takes it
    real = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real + 1)  # as in a forked child
    childs = connection._lease()
    assert childs is not parents
    connection._release(childs)
    connection.probe(server.url("tiny.safetensors"), 16)
    connection.close()
    assert childs.is_closed and not parents.is_closed  # the parent's sockets untouched
    parents.close()


def test_verify_fetches_a_quantized_tensor_once(
    server: FileServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = server.folder / "quantized.gguf"
    rng = np.random.default_rng(4)
    blocks = rng.integers(0, 256, (2048, 144), dtype=np.uint8)  # Q4_K, 288 KiB
    blocks[:, 0:4] = np.array([0.01, 0.02], dtype=np.float16).view(np.uint8)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    url = server.url("quantized.gguf")
    manifest = server.folder / "quantized.sha256"
    assert main(["hash", str(path)]) == 0
    manifest.write_text(capsys.readouterr().out)
    assert main(["verify", str(path), "--manifest", str(manifest)]) == 0
    local = capsys.readouterr().out
    server.reset()
    assert main(["verify", url, "--manifest", str(manifest)]) == 0  # digests and a scan
    assert capsys.readouterr().out == local.replace(str(path), url)
    assert server.sent < path.stat().st_size + (64 << 10)  # the blocks once, not twice
