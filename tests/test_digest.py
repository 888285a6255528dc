"""Digests: ``Tensor.digest``, ``Checkpoint.digest`` and ``strided hash``, recomputed here
from their definition with ``hashlib`` alone; one checkpoint digest across formats."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import gguf
import gguf.quants as gq
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main


def tensor_digest(dtype: str, shape: tuple[int, ...], data: bytes) -> str:
    """The definition: SHA-256 of compact {"dtype","shape"} JSON, then the bytes."""
    head = json.dumps({"dtype": dtype, "shape": list(shape)}, separators=(",", ":"))
    return hashlib.sha256(head.encode() + data).hexdigest()


def escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def checkpoint_digest(digests: dict[str, str]) -> str:
    lines = "".join(
        f"{escape(name)}\t{digests[name]}\n" for name in sorted(digests, key=str.encode)
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def numpy_digest(name: str, array: np.ndarray) -> str:
    return tensor_digest(name, array.shape, np.ascontiguousarray(array).tobytes())


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


ARRAYS: dict[str, np.ndarray] = {
    "model.embed.weight": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
    "model.layers.0.norm": np.array([1.5, -0.0, np.inf], dtype=np.float16),
    "model.layers.1.mask": np.array([[True, False], [False, True]]),
    "ids": np.arange(5, dtype=np.int64) * -3,
    "bytes": np.arange(7, dtype=np.uint8),
    "scalar": np.array(2.5, dtype=np.float32),
}
DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.int64): "I64",
    np.dtype(np.uint8): "U8",
}


def expected_digest(arrays: dict[str, np.ndarray]) -> str:
    return checkpoint_digest(
        {name: numpy_digest(DTYPES[array.dtype], array) for name, array in arrays.items()}
    )


def tensors(arrays: dict[str, np.ndarray]) -> dict[str, st.Tensor]:
    return {name: st.Tensor.from_numpy(array) for name, array in arrays.items()}


def test_tensor_digest_is_the_definition() -> None:
    for name, array in ARRAYS.items():
        t = st.Tensor.from_numpy(array)
        assert t.digest() == numpy_digest(DTYPES[array.dtype], array), name
    bf16 = np.array([1.0, -2.5, np.nan], dtype=ml_dtypes.bfloat16)
    assert st.Tensor.from_numpy(bf16).digest() == tensor_digest("BF16", (3,), bf16.tobytes())
    empty = st.Tensor.zeros(st.DType.I32, (0, 3))
    assert empty.digest() == tensor_digest("I32", (0, 3), b"")


@settings(max_examples=40, deadline=None)
@given(
    rows=hs.integers(1, 9),
    cols=hs.integers(1, 9),
    step=hs.integers(-3, 3).filter(bool),
    transpose=hs.booleans(),
)
def test_views_hash_their_logical_bytes(rows: int, cols: int, step: int, transpose: bool) -> None:
    base = np.arange(rows * cols, dtype=np.int16).reshape(rows, cols)
    t = st.Tensor.from_numpy(base)[::step]
    view = base[::step]
    if transpose:
        t, view = t.T, view.T
    assert t.digest() == numpy_digest("I16", view)


def test_large_strided_view_matches_hashlib() -> None:
    # Several pieces of the bounded copy: a transposed 6 MiB view.
    base = np.random.default_rng(1).standard_normal((1024, 1536)).astype(np.float32)
    t = st.Tensor.from_numpy(base).T
    assert t.digest() == numpy_digest("F32", base.T)


def test_checkpoint_digest_ignores_format_shards_order_and_metadata(tmp_path: Path) -> None:
    expected = expected_digest(ARRAYS)
    one = tmp_path / "one.safetensors"
    st.save_safetensors(one, tensors(ARRAYS), metadata={"format": "pt"})
    assert st.open_checkpoint(one).digest() == expected

    shards = tmp_path / "shards"
    shards.mkdir()
    names = list(ARRAYS)
    for index, part in enumerate((names[:2], names[2:4], names[4:])):
        shard = {name: ARRAYS[name] for name in reversed(part)}
        st.save_safetensors(shards / f"s{index}.safetensors", tensors(shard))
    assert st.open_checkpoint(shards).digest() == expected

    other = tmp_path / "other.safetensors"
    reordered = dict(reversed(list(ARRAYS.items())))
    st.save_safetensors(other, tensors(reordered), metadata={"b": "2", "a": "something else"})
    assert other.read_bytes() != one.read_bytes()
    assert st.open_checkpoint(other).digest() == expected

    # The reference writer lays the header out its own way; the digest does not care.
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    reference = tmp_path / "reference.safetensors"
    safetensors_numpy.save_file(dict(ARRAYS), str(reference), metadata={"x": "y", "format": "np"})
    assert st.open_checkpoint(reference).digest() == expected


def _open_or_skip(path: Path) -> st.Checkpoint:
    try:
        return st.open_checkpoint(path)
    except st.FormatError as error:
        pytest.skip(f"open_checkpoint does not read this format here: {error}")


def test_npz_has_the_same_digest(tmp_path: Path) -> None:
    path = tmp_path / "weights.npz"
    np.savez(path, **ARRAYS)
    assert _open_or_skip(path).digest() == expected_digest(ARRAYS)
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, **ARRAYS)
    assert _open_or_skip(compressed).digest() == expected_digest(ARRAYS)


def test_torch_save_has_the_same_digest(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "pytorch_model.bin"
    torch.save({name: torch.from_numpy(array.copy()) for name, array in ARRAYS.items()}, path)
    assert _open_or_skip(path).digest() == expected_digest(ARRAYS)


def test_names_are_escaped_and_sorted_by_utf8(tmp_path: Path) -> None:
    arrays = {
        "back\\slash": np.zeros(1, np.float32),
        "new\nline": np.ones(1, np.float32),
        "tab\there": np.full(1, 2, np.float32),
        "\u00fcber": np.full(1, 3, np.float32),
        "Zebra": np.full(1, 4, np.float32),
        "\U0001f600": np.full(1, 5, np.float32),
    }
    path = tmp_path / "names.safetensors"
    st.save_safetensors(path, tensors(arrays))
    expected = expected_digest(arrays)
    assert st.open_checkpoint(path).digest() == expected


def _f4_file(path: Path) -> bytes:
    data = bytes(range(32))
    header = json.dumps(
        {
            "packed": {"dtype": "F4", "shape": [4, 16], "data_offsets": [0, 32]},
            "plain": {"dtype": "F32", "shape": [2], "data_offsets": [32, 40]},
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    plain = np.array([1.0, 2.0], np.float32).tobytes()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data + plain)
    return data


def test_stored_types_without_a_dtype_hash_their_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f4.safetensors"
    data = _f4_file(path)
    digests = {
        "packed": tensor_digest("F4", (4, 16), data),
        "plain": tensor_digest("F32", (2,), np.array([1.0, 2.0], np.float32).tobytes()),
    }
    assert st.open_checkpoint(path).digest() == checkpoint_digest(digests)


def _q8_file(path: Path, values: np.ndarray) -> np.ndarray:
    blocks = gq.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("f", values[:1])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return blocks


def test_quantized_gguf_tensors_hash_their_blocks(tmp_path: Path) -> None:
    values = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    path = tmp_path / "q.gguf"
    blocks = _q8_file(path, values)
    digests = {
        "q": tensor_digest("Q8_0", (3, 64), blocks.tobytes()),
        "f": numpy_digest("F32", values[:1]),
    }
    assert st.open_checkpoint(path).digest() == checkpoint_digest(digests)


def test_hash_command_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = "odd\nname\\x"
    arrays = {"plain": np.arange(3, dtype=np.float32), odd: np.ones(2, np.int64)}
    path = tmp_path / "h.safetensors"
    st.save_safetensors(path, tensors(arrays))
    digests = {name: numpy_digest(DTYPES[a.dtype], a) for name, a in arrays.items()}
    status, out = cli(capsys, "hash", str(path))
    assert status == 0
    assert out.splitlines() == [
        "\\" + digests[odd] + "  odd\\nname\\\\x",
        f"{digests['plain']}  plain",
        f"{hashlib.sha256(b'').hexdigest()}  *metadata*",  # no metadata: no lines
        f"{checkpoint_digest(digests)}  *checkpoint*",
    ]
    status, out = cli(capsys, "hash", str(path), "--json")
    assert json.loads(out) == {
        "digest": checkpoint_digest(digests),
        "metadata_digest": hashlib.sha256(b"").hexdigest(),
        "tensors": {
            odd: {"dtype": "I64", "shape": [2], "digest": digests[odd]},
            "plain": {"dtype": "F32", "shape": [3], "digest": digests["plain"]},
        },
    }


def test_hash_output_does_not_depend_on_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    arrays = {f"w{i}": rng.standard_normal(1000 * (i + 1)).astype(np.float32) for i in range(12)}
    arrays["big"] = rng.standard_normal(9 << 20).astype(np.float32)  # split from the others
    path = tmp_path / "j.safetensors"
    st.save_safetensors(path, tensors(arrays))
    outputs = {}
    for jobs in ("1", "2"):
        for form in ([], ["--json"]):
            status, out = cli(capsys, "hash", str(path), "--jobs", jobs, *form)
            assert status == 0
            outputs[jobs, bool(form)] = out
    assert outputs["1", False] == outputs["2", False]
    assert outputs["1", True] == outputs["2", True]
    expected = {name: numpy_digest("F32", array) for name, array in arrays.items()}
    assert json.loads(outputs["2", True])["digest"] == checkpoint_digest(expected)


def test_verify_checks_a_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arrays: dict[str, Any] = {
        "a": np.arange(4, dtype=np.float32),
        "b": np.ones(3, np.int64),
        "c": np.zeros(2, np.float16),
    }
    path = tmp_path / "m.safetensors"
    st.save_safetensors(path, tensors(arrays))
    for form in ([], ["--json"]):
        _, manifest = cli(capsys, "hash", str(path), *form)
        (tmp_path / "manifest").write_text(manifest)
        status, out = cli(capsys, "verify", str(path), "--manifest", str(tmp_path / "manifest"))
        assert status == 0, out
        assert out.splitlines()[-1].endswith("clean, digests match")
    _, manifest = cli(capsys, "hash", str(path))
    (tmp_path / "manifest").write_bytes(manifest.replace("\n", "\r\n").encode())
    status, out = cli(capsys, "verify", str(path), "--manifest", str(tmp_path / "manifest"))
    assert status == 0, out  # CRLF line ends (a manifest edited on Windows) read the same
    changed = dict(arrays, a=np.array([0, 1, 2, 4], np.float32), d=np.ones(1, np.uint8))
    del changed["c"]
    st.save_safetensors(path, tensors(changed))
    (tmp_path / "manifest").write_text(manifest)
    status, out = cli(capsys, "verify", str(path), "--manifest", str(tmp_path / "manifest"))
    assert status == 1
    assert "a: digest differs from the manifest" in out
    assert "c: in the manifest, missing from the checkpoint" in out
    assert "d: not in the manifest" in out
    assert "1 digest differs, 1 missing, 1 unexpected" in out.splitlines()[-1]
    # A tampered last line (the checkpoint digest) is caught too.
    st.save_safetensors(path, tensors(arrays))
    lines = manifest.splitlines()
    lines[-1] = "0" * 64 + lines[-1][64:]
    (tmp_path / "manifest").write_text("\n".join(lines) + "\n")
    status, out = cli(capsys, "verify", str(path), "--manifest", str(tmp_path / "manifest"))
    assert status == 1 and "checkpoint digest differs" in out


def test_a_malformed_manifest_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.safetensors"
    st.save_safetensors(path, {"a": st.tensor([1.0], st.DType.F32)})
    bad = tmp_path / "bad"
    for text in ("", "nonsense\n", "0" * 64 + " one space\n" + "0" * 64 + "  x\n"):
        bad.write_text(text)
        assert main(["verify", str(path), "--manifest", str(bad)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bad) in err
