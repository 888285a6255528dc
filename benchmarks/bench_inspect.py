"""inspect: the time must not grow with the tensor's size or layout.

The NumPy reference computes the same statistics over the same 1024 gathered samples
(so the ratio is strided's overhead: building the Scalars and the result); the
"numpy full scan" reference is what reading everything would cost instead.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import numpy as np

import strided as st
from strided.cli import main

from ._harness import Row


def _numpy_sample_stats(array: np.ndarray, positions: np.ndarray) -> Callable[[], object]:
    def run() -> object:
        values = array.flat[positions].astype(np.float64)
        nan = np.isnan(values)
        real = values[~nan]
        return (
            real.min(),
            real.max(),
            nan.sum(),
            np.isinf(real).sum(),
            (real == 0).sum(),
            real.mean(),
        )

    return run


def _numpy_full_scan(array: np.ndarray) -> Callable[[], object]:
    return lambda: (np.nanmin(array), np.nanmax(array), np.count_nonzero(array == 0))


def _tensor(numel: int) -> tuple[st.Tensor, np.ndarray]:
    # np.zeros maps lazily zeroed pages, so a 256 MiB tensor costs memory only where read;
    # the read-only memoryview makes strided share it without copying.
    array = np.zeros(numel, dtype=np.float32)
    side = int(numel**0.5)
    tensor = st.Tensor.from_le_bytes("F32", (side, side), memoryview(array).toreadonly())
    return tensor, array.reshape(side, side)


def rows() -> Iterator[Row]:
    for label, numel in (("1M", 1 << 20), ("64M", 1 << 26)):
        tensor, array = _tensor(numel)
        for strategy in ("head", "spread"):
            options = st.TensorInspectionOptions(1024, strategy)
            count = 1024
            positions = (
                np.arange(count) if strategy == "head" else np.arange(count) * numel // count
            )
            references = {"numpy same samples": _numpy_sample_stats(array, positions)}
            if strategy == "spread":
                references["numpy full scan"] = _numpy_full_scan(array)
            yield Row(
                f"inspect(1024, {strategy}) {label} F32",
                lambda tensor=tensor, options=options: tensor.inspect(options),
                references,
            )
        view = tensor.transpose()[::-1]
        options = st.TensorInspectionOptions(1024, "spread")
        yield Row(
            f"inspect(1024, spread) {label} F32 transposed+reversed",
            lambda view=view, options=options: view.inspect(options),
            {
                "numpy same samples": _numpy_sample_stats(
                    array.T[::-1], np.arange(1024) * numel // 1024
                )
            },
        )

    yield from _many_samples()
    yield from _vocabulary()
    yield from _metadata_digest()


def _many_samples() -> Iterator[Row]:
    """MAX_INSPECTION_SAMPLES (65536) samples of an 11.7M-element (44.7 MB) F32 tensor.

    ``samples`` (65536 ``(int, Scalar)`` pairs) is built on first read; the last row
    reads it, against NumPy making the same values Python floats.
    """
    array = np.random.default_rng(0).standard_normal((3000, 3900)).astype(np.float32)
    tensor = st.Tensor.from_numpy(array)
    count, numel = st.MAX_INSPECTION_SAMPLES, array.size
    for strategy in ("head", "spread"):
        options = st.TensorInspectionOptions(count, strategy)
        steps = np.arange(count)
        positions = steps if strategy == "head" else steps * numel // count
        yield Row(
            f"inspect(65536, {strategy}) 11.7M F32",
            lambda options=options: tensor.inspect(options),
            {
                "numpy same samples": _numpy_sample_stats(array, positions),
                "numpy full scan": _numpy_full_scan(array),
            },
        )
    options = st.TensorInspectionOptions(count, "spread")
    yield Row(
        "inspect(65536, spread) 11.7M F32 + samples",
        lambda: tensor.inspect(options).samples,
        {"numpy same samples + tolist": lambda: array.flat[positions].tolist()},
    )


_VOCABULARY = 262_144


def _write_vocabulary(path: Path) -> None:
    """A vocabulary-only GGUF as real tokenizers ship: tokens, F32 scores, token types."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"\u2581tok{i}" for i in range(_VOCABULARY)])
    writer.add_token_scores(rng.standard_normal(_VOCABULARY).astype(np.float32).tolist())
    writer.add_token_types([1] * _VOCABULARY)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _command(*args: str) -> Callable[[], object]:
    def run() -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return main(list(args))

    return run


def _vocabulary() -> Iterator[Row]:
    """``strided inspect`` of a 262k-token GGUF against ``strided hash`` of the same file.

    The metadata holds 262,144 tokens and 262,144 F32 scores; inspect shows 16 of each,
    hash digests all of them (the metadata digest). Inspect should be no slower.
    """
    folder = Path(tempfile.mkdtemp(prefix="strided-bench-vocab-"))
    try:
        path = folder / "vocab.gguf"
        _write_vocabulary(path)
        hashing = {"strided hash": _command("hash", str(path))}
        yield Row(
            "strided inspect GGUF 262k vocab + scores", _command("inspect", str(path)), hashing
        )
        yield Row(
            "strided inspect --json GGUF 262k vocab + scores",
            _command("inspect", "--json", str(path)),
            hashing,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# Tokens as real vocabularies hold them: SentencePiece's word marker, byte-level
# newlines and tabs, quotes and backslashes (escaped twice: JSON, then the digest
# line), non-ASCII text.
_TOKEN_ENDINGS = ("", "\n", "\t", "\n\n", '"', "\\", "\u2581\u2581", "<0x0A>", "é", "日本")


def _write_tokenizer(path: Path) -> None:
    """A 262k-token GGUF (tokens, F32 scores, token types) with a 262144 x 32 F32
    ``token_embd.weight`` (32 MiB), written by the reference ``gguf.GGUFWriter``."""
    rng = np.random.default_rng(1)
    endings = _TOKEN_ENDINGS
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"\u2581t{i}{endings[i % len(endings)]}" for i in range(_VOCABULARY)])
    writer.add_token_scores(rng.standard_normal(_VOCABULARY).astype(np.float32).tolist())
    writer.add_token_types([1 + i % 6 for i in range(_VOCABULARY)])
    writer.add_tensor("token_embd.weight", rng.standard_normal((_VOCABULARY, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _metadata_digest() -> Iterator[Row]:
    """``Checkpoint.metadata_digest()`` of a 262k-token vocabulary (canonical text of
    three 262,144-element arrays, escaped and hashed) against the tensor digest of the
    same file's 32 MiB embedding and against ``gguf.GGUFReader`` opening the file (the
    reference reader; it builds its field objects per element, so it takes seconds)."""
    folder = Path(tempfile.mkdtemp(prefix="strided-bench-tokenizer-"))
    try:
        path = folder / "tokenizer.gguf"
        _write_tokenizer(path)
        checkpoint = st.open_checkpoint(path)
        yield Row(
            "metadata_digest GGUF 262k vocab + scores",
            checkpoint.metadata_digest,
            {
                "digest() of its 32 MiB tensor": checkpoint.digest,
                "gguf.GGUFReader open": lambda: gguf.GGUFReader(str(path)),
            },
        )
        checkpoint.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
