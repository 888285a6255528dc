"""Whole-checkpoint jobs and the members they cannot read: ``.npz`` object and string
arrays, distributed-checkpoint items that are not plain data.

``hash``, ``verify``, ``diff``, ``convert`` and ``Checkpoint.digest`` refuse such a
checkpoint (naming the members) unless told to skip them; skipping, they name each one
on stderr and record the SHA-256 of its stored bytes. The oracles: ``zipfile`` (where a
member's stored bytes lie), ``hashlib`` (the digests, recomputed from their definition),
NumPy and the ``safetensors`` package (what ``convert`` wrote), torch's own DCP classes
(where an item's archive lies).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main

SAVERS: dict[str, Callable[..., None]] = {
    "stored": np.savez,
    "deflated": np.savez_compressed,
}
OBJECT_REASON = "object array (|O): pickled, never unpickled"
STRING_REASON = "string array (<U3): no strided dtype"
# NumPy drops trailing NULs of a string array's items: "a" and "a\0" store alike.
TAGS = hs.text(hs.characters(blacklist_characters="\x00"), max_size=12)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def stored_bytes(path: Path, member: str) -> bytes:
    """The bytes ``member`` occupies in the zip at ``path`` as stored (compressed when
    deflated), located through ``zipfile``'s directory and the local header."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    data = path.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    return data[start : start + info.compress_size]


def tensor_digest(array: np.ndarray, dtype: str) -> str:
    """``Tensor.digest()`` by its definition: the JSON preamble, then the bytes."""
    shape = ",".join(str(dim) for dim in array.shape)
    preamble = f'{{"dtype":"{dtype}","shape":[{shape}]}}'.encode()
    return hashlib.sha256(
        preamble + np.ascontiguousarray(array).astype("<" + array.dtype.str[1:]).tobytes()
    ).hexdigest()


def checkpoint_digest(lines: dict[str, str]) -> str:
    """SHA-256 of ``NAME\\tDIGEST\\n`` lines sorted by UTF-8 bytes (names plain here)."""
    total = hashlib.sha256()
    for name in sorted(lines, key=lambda text: text.encode()):
        total.update(f"{name}\t{lines[name]}\n".encode())
    return total.hexdigest()


def sparse_like(path: Path, saver: Callable[..., None], tag: str = "csr", note: Any = 1) -> Path:
    """A float tensor, an int tensor, a string member and an object member."""
    saver(
        path,
        w=np.arange(6, dtype=np.float32).reshape(2, 3),
        ids=np.array([3, 1, 2], dtype=np.int64),
        format=np.array(tag),
        obj=np.array([{"note": note}, None], dtype=object),
    )
    return path


def expected_hash(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(tensor digests, unreadable members' digests) of a ``sparse_like`` file."""
    with np.load(path, allow_pickle=False) as found:
        tensors = {
            "ids": tensor_digest(found["ids"], "I64"),
            "w": tensor_digest(found["w"], "F32"),
        }
    members = {
        name: hashlib.sha256(stored_bytes(path, f"{name}.npy")).hexdigest()
        for name in ("format", "obj")
    }
    return tensors, members


@pytest.mark.parametrize("kind", SAVERS)
def test_hash_names_unreadable_members_or_records_their_stored_bytes(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sparse_like(tmp_path / "m.npz", SAVERS[kind])
    status, out, err = cli(capsys, "hash", str(path))
    assert (status, out) == (1, "")
    assert "2 members strided cannot read: 'format' (string array (<U3)" in err
    assert f"'obj' ({OBJECT_REASON})" in err and "--skip-unreadable" in err

    tensors, members = expected_hash(path)
    total = checkpoint_digest({**tensors, **{f"*unreadable*:{n}": d for n, d in members.items()}})
    status, out, err = cli(capsys, "hash", str(path), "--skip-unreadable")
    assert status == 0
    assert out.splitlines() == [
        f"{tensors['ids']}  ids",
        f"{tensors['w']}  w",
        f"{members['format']}  *unreadable*:format",
        f"{members['obj']}  *unreadable*:obj",
        f"{hashlib.sha256(b'').hexdigest()}  *metadata*",
        f"{total}  *checkpoint*",
    ]
    assert err.splitlines() == [
        f"strided: {path}: skipped unreadable member 'format': {STRING_REASON}",
        f"strided: {path}: skipped unreadable member 'obj': {OBJECT_REASON}",
    ]
    for jobs in ("2", "3"):
        assert cli(capsys, "hash", str(path), "--skip-unreadable", "--jobs", jobs)[:2] == (0, out)

    status, document_text, _ = cli(capsys, "hash", str(path), "--skip-unreadable", "--json")
    document = json.loads(document_text)
    assert document["digest"] == total and document["unreadable"] == members
    assert set(document["tensors"]) == {"ids", "w"}

    with st.open_checkpoint(path) as checkpoint:
        with pytest.raises(st.FormatError, match=r"'obj'.*skip_unreadable=True"):
            checkpoint.digest()
        assert checkpoint.digest(skip_unreadable=True) == total
        assert {n: checkpoint.unreadable_digest(n) for n in members} == members
        with pytest.raises(KeyError):
            checkpoint.unreadable_digest("w")


@settings(max_examples=25, deadline=None)
@given(
    tags=hs.tuples(TAGS, TAGS),
    notes=hs.tuples(hs.integers(-5, 5), hs.integers(-5, 5)),
    kind=hs.sampled_from(sorted(SAVERS)),
)
def test_files_differing_only_in_a_skipped_member_never_digest_alike(
    tags: tuple[str, str], notes: tuple[int, int], kind: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = [
            sparse_like(Path(folder) / f"{index}.npz", SAVERS[kind], tag, note)
            for index, (tag, note) in enumerate(zip(tags, notes, strict=True))
        ]
        found = []
        for path in paths:
            with st.open_checkpoint(path) as checkpoint:
                digests = {n: checkpoint.unreadable_digest(n) for n in checkpoint.unreadable}
                found.append((checkpoint.digest(skip_unreadable=True), digests))
                assert digests == expected_hash(path)[1]
        same_members = stored_bytes(paths[0], "format.npy") == stored_bytes(
            paths[1], "format.npy"
        ) and stored_bytes(paths[0], "obj.npy") == stored_bytes(paths[1], "obj.npy")
        assert (found[0][0] == found[1][0]) == same_members
        if tags[0] != tags[1] or notes[0] != notes[1]:
            assert found[0][0] != found[1][0]


def test_verify_checks_the_manifests_unreadable_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = sparse_like(tmp_path / "a.npz", np.savez)
    b = sparse_like(tmp_path / "b.npz", np.savez, tag="csc")  # only 'format' differs
    status, out, err = cli(capsys, "verify", str(a))
    assert (status, out) == (1, "") and "'format'" in err and "'obj'" in err
    status, out, err = cli(capsys, "verify", str(a), "--skip-unreadable")
    assert (
        status == 0
        and out.splitlines()[-1] == f"{a}: 2 tensors, 48 B, 2 unreadable members skipped: clean"
    )
    assert err.count("skipped unreadable member") == 2

    manifest = tmp_path / "a.sha256"
    manifest.write_text(cli(capsys, "hash", str(a), "--skip-unreadable")[1])
    as_json = tmp_path / "a.json"
    as_json.write_text(cli(capsys, "hash", str(a), "--skip-unreadable", "--json")[1])
    for written in (manifest, as_json):
        args = ("verify", "--skip-unreadable", "--manifest", str(written))
        status, out, _ = cli(capsys, *args[:1], str(a), *args[1:])
        assert status == 0 and out.endswith("skipped: clean, digests match\n"), out
        status, out, _ = cli(capsys, *args[:1], str(b), *args[1:])
        assert status == 1
        assert "*unreadable*:format: digest differs from the manifest" in out
        assert out.splitlines()[-1].endswith("skipped: 1 digest differs")
    # Without the member's line, the member is unexpected; with a stray one, missing.
    kept = [line for line in manifest.read_text().splitlines() if "*unreadable*:obj" not in line]
    manifest.write_text("\n".join(kept) + "\n")
    status, out, _ = cli(capsys, "verify", str(a), "--skip-unreadable", "--manifest", str(manifest))
    assert status == 1 and "*unreadable*:obj: not in the manifest" in out
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.arange(6, dtype=np.float32).reshape(2, 3), ids=np.array([3, 1, 2]))
    status, out, _ = cli(capsys, "verify", str(plain), "--manifest", str(as_json))
    assert status == 1
    assert "*unreadable*:format: in the manifest, missing from the checkpoint" in out


def test_unreadable_names_needing_escapes_round_trip_through_the_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.npz"
    odd = "back\\slash\nnew\tline *x*"
    np.savez(path, **{odd: np.array(["text"]), "*star": np.ones(2, np.float32)})
    status, out, _ = cli(capsys, "hash", str(path), "--skip-unreadable")
    digest = hashlib.sha256(stored_bytes(path, odd + ".npy")).hexdigest()
    assert status == 0
    assert f"{digest}  *unreadable*:back\\\\slash\\nnew\\tline *x*" in out.splitlines()
    assert out.splitlines()[0].startswith("\\")  # the tensor '*star' is marked as escaped
    manifest = tmp_path / "odd.sha256"
    manifest.write_text(out)
    status, found, _ = cli(
        capsys, "verify", str(path), "--skip-unreadable", "--manifest", str(manifest)
    )
    assert status == 0, found


def test_diff_compares_skipped_members_by_their_stored_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = sparse_like(tmp_path / "a.npz", np.savez)
    b = sparse_like(tmp_path / "b.npz", np.savez, note=2)  # only 'obj' differs
    status, out, err = cli(capsys, "diff", str(a), str(b))
    assert (status, out) == (1, "") and "cannot read" in err
    assert cli(capsys, "diff", str(a), str(a), "--skip-unreadable")[0] == 0
    status, out, _ = cli(capsys, "diff", str(a), str(b), "--skip-unreadable", "--json")
    document = json.loads(out)
    members_a, members_b = expected_hash(a)[1], expected_hash(b)[1]
    assert document["unreadable"] == {
        "format": {
            "status": "identical",
            "a": {"digest": members_a["format"]},
            "b": {"digest": members_b["format"]},
        },
        "obj": {
            "status": "differs",
            "a": {"digest": members_a["obj"]},
            "b": {"digest": members_b["obj"]},
        },
    }
    assert status == 1 and document["same"] is False
    assert {entry["status"] for entry in document["tensors"].values()} == {"identical"}
    status, out, _ = cli(capsys, "diff", str(a), str(b), "--skip-unreadable")
    assert (
        "unreadable differs    obj" in out and "2 unreadable members: 1 identical, 1 differs" in out
    )

    # Only on one side, and a tensor against an unreadable member of its name.
    c = tmp_path / "c.npz"
    np.savez(c, w=np.arange(6, dtype=np.float32).reshape(2, 3), ids=np.array([3, 1, 2]),
             obj=np.zeros(2, np.float32))  # fmt: skip
    status, out, _ = cli(capsys, "diff", str(a), str(c), "--skip-unreadable", "--json")
    document = json.loads(out)
    assert document["unreadable"]["format"]["status"] == "only in A"
    assert document["unreadable"]["obj"] == {
        "status": "kind differs",
        "a": {"digest": members_a["obj"]},
        "b": {"dtype": "F32", "shape": [2]},
    }
    assert "obj" not in document["tensors"] and status == 1
    # --name selects members too: none of the unreadable ones is compared here.
    assert cli(capsys, "diff", str(a), str(b), "--name", "w")[0] == 0


def test_convert_refuses_or_writes_the_readable_tensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file

    source = sparse_like(tmp_path / "m.npz", np.savez_compressed)
    out = tmp_path / "m.safetensors"
    status, printed, err = cli(capsys, "convert", str(source), str(out))
    assert (status, printed) == (1, "") and "'obj'" in err
    assert not out.exists() and os.listdir(tmp_path) == ["m.npz"]
    status, printed, err = cli(capsys, "convert", str(source), str(out), "--skip-unreadable")
    assert status == 0
    assert printed == f"{source} -> {out}: 2 tensors, 2 unreadable members skipped\n"
    assert err.count("skipped unreadable member") == 2
    written = load_file(str(out))
    with np.load(source, allow_pickle=False) as expected:
        assert sorted(written) == ["ids", "w"]
        for name in written:
            np.testing.assert_array_equal(written[name], expected[name])
    # --name selecting only readable tensors needs no option.
    single = tmp_path / "w.npy"
    assert cli(capsys, "convert", str(source), str(single), "--name", "w")[0] == 0
    np.testing.assert_array_equal(np.load(single), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_a_dcp_item_that_is_not_data_is_hashed_by_its_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    from tests import dcpcraft, dcpwrite

    digests = []
    for value in (3, 4):
        folder = tmp_path / f"dcp{value}"
        folder.mkdir()
        weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        opaque = dcpwrite.Opaque()
        opaque.value = value
        archive = dcpcraft.archive(opaque)
        tensor_span = dcpcraft.append(folder, "__0_0.distcp", dcpcraft.archive(weight))
        item_span = dcpcraft.append(folder, "__0_0.distcp", archive)
        described = {
            "w": TensorStorageMetadata(
                TensorProperties(dtype=weight.dtype),
                weight.size(),
                [ChunkStorageMetadata(torch.Size([0, 0]), weight.size())],
            ),
            "opaque": BytesStorageMetadata(),
        }
        storage = {MetadataIndex("w", (0, 0), 0): tensor_span, MetadataIndex("opaque"): item_span}
        dcpcraft.save(folder, Metadata(described, storage_data=storage, version="1.0.0"))
        status, out, err = cli(capsys, "hash", str(folder))
        assert (status, out) == (1, "") and "'opaque'" in err
        status, out, err = cli(capsys, "hash", str(folder), "--skip-unreadable")
        item = hashlib.sha256(archive).hexdigest()
        weight_digest = tensor_digest(weight.numpy(), "F32")
        assert out.splitlines()[:2] == [f"{weight_digest}  w", f"{item}  *unreadable*:opaque"]
        total = checkpoint_digest({"w": weight_digest, "*unreadable*:opaque": item})
        assert out.splitlines()[-1] == f"{total}  *checkpoint*"
        assert "skipped unreadable member 'opaque'" in err
        assert cli(capsys, "verify", str(folder))[0] == 1
        assert cli(capsys, "verify", str(folder), "--skip-unreadable")[0] == 0
        digests.append(total)
    assert digests[0] != digests[1]
    status, out, _ = cli(
        capsys, "diff", str(tmp_path / "dcp3"), str(tmp_path / "dcp4"), "--skip-unreadable"
    )
    assert status == 1 and "unreadable differs" in out


def test_a_local_dask_cluster_gives_the_same_output(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = sparse_like(tmp_path / "m.npz", np.savez_compressed)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "strided", *args],
            capture_output=True, text=True, env=environment, timeout=300, check=False,
        )  # fmt: skip

    local = run("hash", str(path), "--skip-unreadable")
    remote = run("hash", str(path), "--skip-unreadable", "--scheduler", "local:2")
    assert (remote.returncode, remote.stdout) == (local.returncode, local.stdout)
    assert local.returncode == 0 and "*unreadable*:obj" in local.stdout
    assert remote.stderr == local.stderr
    refused = run("hash", str(path), "--scheduler", "local:2")
    assert refused.returncode == 1 and refused.stdout == "" and "'obj'" in refused.stderr


def test_a_skipped_members_data_is_hashed_as_stored_never_inflated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deflated string member of 1 MiB whose stream is corrupt after 12,000 bytes:
    inflating it would fail, hashing its stored bytes cannot."""
    from tests.zipcraft import Entry, build

    buffer = io.BytesIO()
    np.save(buffer, np.zeros(1 << 18, dtype="<U1"))
    content = buffer.getvalue()
    encoder = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    stream = encoder.compress(content[:12_000]) + encoder.flush(zlib.Z_FULL_FLUSH)
    stream += b"\x07" + bytes(7)  # a block of the reserved type 3
    buffer = io.BytesIO()
    np.save(buffer, np.arange(4, dtype=np.float32))
    path = tmp_path / "lazy.npz"
    path.write_bytes(
        build(
            [
                Entry("s.npy", content, method=8, data=stream),
                Entry("a.npy", buffer.getvalue(), method=8),
            ]
        )
    )
    status, out, _ = cli(capsys, "hash", str(path), "--skip-unreadable")
    assert status == 0
    assert f"{hashlib.sha256(stream).hexdigest()}  *unreadable*:s" in out.splitlines()
    assert stored_bytes(path, "s.npy") == stream


_MEMORY_CHILD = """
import json, re, sys
import strided as st
def anonymous():
    return int(re.search(r"RssAnon:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
with st.open_checkpoint(sys.argv[1]) as checkpoint:
    before = anonymous()
    digest = checkpoint.digest(skip_unreadable=True)
    member = checkpoint.unreadable_digest("s")
    print(json.dumps({"grew_kib": anonymous() - before, "member": member, "digest": digest}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_large_skipped_member_is_hashed_in_place(tmp_path: Path) -> None:
    """64 MiB of a stored string member: hashed from the mapping, no copy of it made."""
    path = tmp_path / "big.npz"
    np.savez(path, w=np.ones(4, np.float32), s=np.zeros(1 << 24, dtype="<U1"))
    found = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(path)],
        capture_output=True, text=True, timeout=300, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    result = json.loads(found.stdout)
    assert result["member"] == hashlib.sha256(stored_bytes(path, "s.npy")).hexdigest()
    assert result["grew_kib"] < 8 * 1024  # far below the member's 65,536 KiB


def test_save_gguf_of_a_checkpoint_refuses_or_skips_unreadable_members(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    source = sparse_like(tmp_path / "m.npz", np.savez)
    out = tmp_path / "m.gguf"
    with st.open_checkpoint(source) as checkpoint:
        with pytest.raises(st.FormatError, match=r"2 members strided cannot read: 'format'"):
            st.save_gguf(out, checkpoint)
        assert not out.exists()
        st.save_gguf(out, checkpoint, skip_unreadable=True)
    reader = gguf.GGUFReader(out)
    found = {tensor.name: np.array(tensor.data) for tensor in reader.tensors}
    assert sorted(found) == ["ids", "w"]
    np.testing.assert_array_equal(found["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(found["ids"], [3, 1, 2])


@pytest.mark.parametrize(
    ("unreadable", "message"),
    [
        ([], "'unreadable' must be an object of name -> digest"),
        ({"obj": "00"}, "unreadable member 'obj': its digest must be 64 hex digits"),
    ],
)
def test_a_malformed_unreadable_object_in_a_json_manifest_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unreadable: Any, message: str
) -> None:
    path = sparse_like(tmp_path / "m.npz", np.savez)
    document = json.loads(cli(capsys, "hash", str(path), "--skip-unreadable", "--json")[1])
    document["unreadable"] = unreadable
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(document))
    status, out, err = cli(
        capsys, "verify", str(path), "--skip-unreadable", "--manifest", str(manifest)
    )
    assert (status, out) == (1, "")
    assert err == f"strided: {manifest}: {message}\n"
