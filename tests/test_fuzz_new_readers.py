"""Mutated real files for the newer readers fail only with DataError subclasses.

Every seed is written once per module by the real libraries: ``torch.save`` of NumPy
arrays, NumPy scalars, a Namespace, a set and a tensor (zip and legacy formats),
``torch.save`` of a whole ``nn.Module`` (read leniently), a ``torch.jit.script``
archive, a one-process ``torch.distributed.checkpoint`` folder and a two-part GGUF
written by ``strided convert --max-shard-size``. Hypothesis mutates the whole file, or
the pickle inside a zip (the archive rebuilt around it so the edits reach the pickle
interpreter rather than the zip framing), or a pickle's opcode arguments replaced by
bytes of the same length (the opcodes stay in step, so lying shapes, offsets, memo
slots and names reach the readers behind the interpreter), and everything a caller
can ask of the result is asked: every tensor read and inspected, ``digest()``,
``imports``, ``metadata``. ``set-metadata`` is fuzzed with random assignments: it either succeeds
with the checkpoint digest unchanged or fails leaving the file byte for byte as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import pickletools
import shutil
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from strided.jobs._set_metadata import TYPE_NAMES
from tests import dcpwrite
from tests.gguf_oracle import write_reference
from tests.test_hostile_files import INTERESTING, mutated
from tests.zipcraft import Entry, build

pytest.importorskip("torch.distributed.checkpoint")
import torch  # after the skip, so a bare run without torch skips

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Tiny(torch.nn.Module):
    """A model saved whole (``torch.save(model)``): its class is not data."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)
        self.norm = torch.nn.LayerNorm(2)
        self.register_buffer("steps", torch.arange(4, dtype=torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden: torch.Tensor = self.norm(self.proj(x))
        return hidden * 2.0


def _data_state() -> dict[str, Any]:
    return {
        "f32": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "f64": np.linspace(-1, 1, 5),
        "i16": np.arange(-3, 3, dtype=">i2").reshape(2, 3),
        "u8": np.arange(4, dtype=np.uint8),
        "mask": np.array([True, False, True]),
        "scalars": [np.float32(1.5), np.int64(-7), np.bool_(True)],
        "args": argparse.Namespace(lr=0.5, name="run", layers=[1, 2]),
        "tags": {"a", "b"},
        "weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "half": torch.ones(3, dtype=torch.float16).t(),
    }


def _saved(value: Any, **options: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer, **options)
    return buffer.getvalue()


def _members(archive: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(archive)) as opened:
        return [(name, opened.read(name)) for name in opened.namelist()]


def _rezipped(members: list[tuple[str, bytes]], target: str, content: bytes) -> bytes:
    """The archive again, every member stored, ``target``'s bytes replaced."""
    return build([Entry(name, content if name == target else data) for name, data in members])


def _gguf_parts(folder: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    tensors = {
        "blk.0.attn_q.weight": rng.standard_normal((8, 32)).astype(np.float32),
        "blk.1.attn_q.weight": rng.standard_normal((8, 32)).astype(np.float32),
        "output_norm.weight": np.ones(32, dtype=np.float32),
    }
    source = folder / "source.gguf"
    write_reference(source, [("llama.context_length", 64, GGUFValueType.UINT32, None)], tensors)
    out = folder / "parts" / "m.gguf"
    out.parent.mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["convert", str(source), str(out), "--dtype", "Q8_0",
                       "--max-shard-size", "600B"])  # fmt: skip
    assert status == 0
    return sorted(out.parent.iterdir())


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Seed bytes (and seed folders) keyed by what they are."""
    folder = tmp_path_factory.mktemp("seeds")
    found: dict[str, Any] = {}
    found["zip"] = _saved(_data_state())
    found["legacy"] = _saved(_data_state(), _use_new_zipfile_serialization=False)
    torch.manual_seed(0)
    found["model"] = _saved(Tiny())
    script = folder / "script.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit says it is deprecated
        torch.jit.save(torch.jit.script(Tiny()), str(script))
    found["script"] = script.read_bytes()
    found["dcp"] = dcpwrite.cached(
        tmp_path_factory.getbasetemp(), "dcp-single", dcpwrite.write_single
    )
    found["gguf"] = _gguf_parts(folder)
    return found


def exercise(path: Path, lenient: bool) -> None:
    """Ask everything of the checkpoint at ``path``; DataError is the only way out.

    Each outcome is a Hypothesis event (``--hypothesis-show-statistics`` shows how many
    mutations opened, and how far they got)."""
    try:
        checkpoint = st.open_checkpoint(path, lenient=lenient)
    except st.DataError as error:
        event(f"refused on opening: {type(error).__name__}")
        return
    with checkpoint:
        _ = checkpoint.imports, checkpoint.metadata, checkpoint.unreadable
        checkpoint.metadata_digest()
        for name in checkpoint:
            checkpoint.info(name)
            try:
                tensor = checkpoint[name]
                tensor.inspect()
                tensor.to_le_bytes()
                checkpoint.inspect(name)
            except st.DataError as error:  # the other tensors are still asked for
                event(f"a tensor refused: {type(error).__name__}")
        try:
            checkpoint.digest()
        except st.DataError as error:
            event(f"digest refused: {type(error).__name__}")
        else:
            event("opened and digested")


def argument_spans(pickled: bytes) -> list[tuple[int, int]]:
    """Where each opcode's argument lies in ``pickled`` (as ``pickletools`` reads it)."""
    # Every position is known: the pickle is read from bytes, not a pipe.
    starts = [pos or 0 for _, _, pos in pickletools.genops(pickled)] + [len(pickled)]
    return [(a + 1, b) for a, b in itertools.pairwise(starts) if b > a + 1]


@hs.composite
def argument_edits(draw: hs.DrawFn, pickled: bytes) -> bytes:
    """``pickled`` with one to three opcode arguments replaced by bytes of the same
    length (an int argument often by an extreme value), so the opcodes stay in step and
    the interpreter sees shapes, strides, offsets, memo slots, names and storage keys
    that lie."""
    spans = argument_spans(pickled)
    data = bytearray(pickled)
    for _ in range(draw(hs.integers(1, 3))):
        start, end = draw(hs.sampled_from(spans))
        width = end - start
        if width in (1, 2, 4, 8) and draw(hs.booleans()):
            value = draw(hs.sampled_from([*INTERESTING, -1, -2])) % (1 << (8 * width))
            data[start:end] = value.to_bytes(width, "little")
        else:
            data[start:end] = draw(hs.binary(min_size=width, max_size=width))
    return bytes(data)


def legacy_data_pickle(stream: bytes) -> tuple[int, int]:
    """Where the data pickle (the fourth) lies in a legacy ``torch.save`` stream."""
    reader = io.BytesIO(stream)
    for _ in range(3):
        for _ in pickletools.genops(reader):
            pass
    start = reader.tell()
    for _ in pickletools.genops(reader):
        pass
    return start, reader.tell()


def pickle_member(members: list[tuple[str, bytes]]) -> str:
    return next(name for name, _ in members if name.endswith("/data.pkl"))


# -- the seeds are valid ----------------------------------------------------------------------


def test_the_seeds_open_and_rebuilt_archives_are_the_same(
    seeds: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "seed.pt"
    for kind in ("zip", "legacy", "model", "script"):
        path.write_bytes(seeds[kind])
        with st.open_checkpoint(path, lenient=kind == "model") as checkpoint:
            assert len(checkpoint) >= 3
            expected = checkpoint.digest()
        if kind != "legacy":  # the archive rebuilt unchanged reads the same
            path.write_bytes(_rezipped(_members(seeds[kind]), "", b""))
            with st.open_checkpoint(path, lenient=kind == "model") as checkpoint:
                assert checkpoint.digest() == expected
    for kind in ("zip", "legacy"):
        path.write_bytes(seeds[kind])
        with st.open_checkpoint(path) as checkpoint:
            assert checkpoint.metadata["args.name"] == "run"
            f32 = checkpoint["f32"].numpy()
            assert np.array_equal(f32, np.arange(12, dtype=np.float32).reshape(3, 4))
    with st.open_checkpoint(seeds["dcp"]) as checkpoint:
        assert "model.w" in checkpoint
        checkpoint.digest()
    parts = seeds["gguf"]
    assert [p.name for p in parts] == ["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]
    with st.open_checkpoint(parts[0]) as checkpoint:
        assert len(checkpoint) == 3 and checkpoint.info("blk.0.attn_q.weight").dtype == "Q8_0"


# -- torch.save of data: NumPy arrays and scalars, Namespace, set, tensors --------------------


@FUZZ
@given(data=hs.data(), kind=hs.sampled_from(["zip", "legacy"]))
def test_fuzz_torch_save_files(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject, kind: str
) -> None:
    original = seeds[kind]
    path = fuzz_folder / "f.pt"
    path.write_bytes(data.draw(mutated((original, len(original)))))
    exercise(path, lenient=False)
    exercise(path, lenient=True)


@FUZZ
@given(data=hs.data(), kind=hs.sampled_from(["zip", "model"]))
def test_fuzz_the_pickle_inside_the_zip(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject, kind: str
) -> None:
    members = _members(seeds[kind])
    target = pickle_member(members)
    pickled = dict(members)[target]
    path = fuzz_folder / "p.pt"
    path.write_bytes(_rezipped(members, target, data.draw(mutated((pickled, len(pickled))))))
    if kind == "zip":
        exercise(path, lenient=False)
    exercise(path, lenient=True)


@FUZZ
@given(data=hs.data(), kind=hs.sampled_from(["zip", "model", "legacy"]))
def test_fuzz_pickle_opcode_arguments(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject, kind: str
) -> None:
    path = fuzz_folder / "a.pt"
    if kind == "legacy":
        # The legacy stream is magic, protocol and system-info pickles, then the data
        # pickle, then the storage keys and storages: the data pickle is edited in place.
        original = seeds[kind]
        start, end = legacy_data_pickle(original)
        pickled = data.draw(argument_edits(original[start:end]))
        path.write_bytes(original[:start] + pickled + original[end:])
    else:
        members = _members(seeds[kind])
        target = pickle_member(members)
        pickled = data.draw(argument_edits(dict(members)[target]))
        path.write_bytes(_rezipped(members, target, pickled))
    if kind != "model":
        exercise(path, lenient=False)
    exercise(path, lenient=True)


@FUZZ
@given(data=hs.data())
def test_fuzz_a_whole_model_file(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject
) -> None:
    original = seeds["model"]
    path = fuzz_folder / "m.pt"
    path.write_bytes(data.draw(mutated((original, len(original)))))
    exercise(path, lenient=True)


# -- TorchScript ------------------------------------------------------------------------------


@FUZZ
@given(data=hs.data())
def test_fuzz_torchscript_members(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject
) -> None:
    members = _members(seeds["script"])
    target = data.draw(hs.sampled_from([name for name, _ in members]))
    content = dict(members)[target]
    path = fuzz_folder / "s.pt"
    path.write_bytes(_rezipped(members, target, data.draw(mutated((content, len(content))))))
    exercise(path, lenient=False)
    exercise(path, lenient=True)


@FUZZ
@given(data=hs.data())
def test_fuzz_torchscript_files(
    seeds: dict[str, Any], fuzz_folder: Path, data: hs.DataObject
) -> None:
    original = seeds["script"]
    path = fuzz_folder / "s.pt"
    path.write_bytes(data.draw(mutated((original, len(original)))))
    exercise(path, lenient=False)


# -- distributed checkpoints ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def dcp_copy(seeds: dict[str, Any], fuzz_folder: Path) -> Path:
    folder = fuzz_folder / "dcp"
    shutil.copytree(seeds["dcp"], folder)
    return folder


@FUZZ
@given(data=hs.data())
def test_fuzz_distributed_checkpoint_metadata_arguments(
    seeds: dict[str, Any], dcp_copy: Path, data: hs.DataObject
) -> None:
    original = (seeds["dcp"] / ".metadata").read_bytes()
    target = dcp_copy / ".metadata"
    try:
        target.write_bytes(data.draw(argument_edits(original)))
        exercise(dcp_copy, lenient=False)
    finally:
        target.write_bytes(original)


@FUZZ
@given(data=hs.data(), member=hs.sampled_from([".metadata", "__0_0.distcp"]))
def test_fuzz_distributed_checkpoints(
    seeds: dict[str, Any], dcp_copy: Path, data: hs.DataObject, member: str
) -> None:
    original = (seeds["dcp"] / member).read_bytes()
    target = dcp_copy / member
    try:
        target.write_bytes(data.draw(mutated((original, len(original)))))
        exercise(dcp_copy, lenient=False)
        exercise(dcp_copy, lenient=True)
    finally:
        target.write_bytes(original)


# -- split GGUF -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf_copy(seeds: dict[str, Any], fuzz_folder: Path) -> list[Path]:
    folder = fuzz_folder / "gguf"
    folder.mkdir()
    return [Path(shutil.copy(part, folder)) for part in seeds["gguf"]]


@FUZZ
@given(data=hs.data(), number=hs.sampled_from([0, 1]))
def test_fuzz_split_gguf_parts(
    seeds: dict[str, Any], gguf_copy: list[Path], data: hs.DataObject, number: int
) -> None:
    original = seeds["gguf"][number].read_bytes()
    header_end = GGUFReader(seeds["gguf"][number]).data_offset
    target = gguf_copy[number]
    try:
        target.write_bytes(data.draw(mutated((original, header_end))))
        exercise(gguf_copy[0], lenient=False)
    finally:
        target.write_bytes(original)


# -- set-metadata: it succeeds with the digest unchanged, or changes nothing ------------------

SET_KVS: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]] = [
    ("llama.context_length", 4096, GGUFValueType.UINT32, None),
    ("llama.rope.freq_base", 1e4, GGUFValueType.FLOAT32, None),
    ("t.flag", True, GGUFValueType.BOOL, None),
    ("t.small", -3, GGUFValueType.INT8, None),
    ("tokenizer.chat_template", "{{ x }}", GGUFValueType.STRING, None),
    ("tokenizer.ggml.tokens", ["a", "ü"], GGUFValueType.ARRAY, GGUFValueType.STRING),
    ("tokenizer.ggml.scores", [0.5, -1.0], GGUFValueType.ARRAY, GGUFValueType.FLOAT32),
]
KEYS = [key for key, *_ in SET_KVS] + [
    "general.architecture", "general.alignment", "split.count", "format", "new.key", "",
]  # fmt: skip
VALUE_TEXTS = [
    "true", "false", "0", "-1", "255", "256", "-129", "4294967296", "18446744073709551616",
    "99999999999999999999999999", "1.5", "1e400", "-1e-400", "nan", "inf", "-inf", "0x10",
    "1_000", " 7", "[]", "[1, 2]", "[-1]", "[1.5, -2]", "[true]", "[null]", '["a", "b"]',
    "[[1], [2]]", "[1, [2]]", '[{"a": 1}]', "{}", "[" * 3000 + "]" * 3000, "[1e999]", "",
    "\udcff", "a\x00b",
]  # fmt: skip
TEXT = hs.text(hs.characters(codec="utf-8") | hs.sampled_from(["\udcff", "\ud800", "=", "["]))
# A key never holds "=" (KEY=VALUE splits at the first one) nor starts with "-" (an option).
KEY_TEXT = hs.sampled_from(KEYS) | hs.text(
    hs.characters(codec="utf-8", exclude_characters="=") | hs.sampled_from(["\udcff", "["]),
    min_size=1,
).filter(lambda key: not key.startswith("-"))


@pytest.fixture(scope="module")
def metadata_seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, str]]:
    """Each format's seed bytes and checkpoint digest."""
    folder = tmp_path_factory.mktemp("set-metadata")
    gguf_path = folder / "m.gguf"
    write_reference(gguf_path, SET_KVS, {"w": np.arange(64, dtype=np.float32).reshape(2, 32)})
    safetensors_path = folder / "m.safetensors"
    tensors = {"w": st.Tensor.from_numpy(np.arange(6, dtype=np.float16).reshape(2, 3))}
    st.save_safetensors(safetensors_path, tensors, metadata={"format": "pt", "note": "é"})
    found = {}
    for kind, path in (("gguf", gguf_path), ("safetensors", safetensors_path)):
        with st.open_checkpoint(path) as checkpoint:
            found[kind] = (path.read_bytes(), checkpoint.digest())
    return found


@FUZZ
@given(
    kind=hs.sampled_from(["gguf", "safetensors"]),
    sets=hs.lists(hs.tuples(KEY_TEXT, hs.sampled_from(VALUE_TEXTS) | TEXT), max_size=3),
    deletes=hs.lists(KEY_TEXT, max_size=2),
    new_type=hs.none() | hs.sampled_from(sorted(TYPE_NAMES)),
)
def test_fuzz_set_metadata(
    metadata_seeds: dict[str, tuple[bytes, str]],
    fuzz_folder: Path,
    kind: str,
    sets: list[tuple[str, str]],
    deletes: list[str],
    new_type: str | None,
) -> None:
    original, digest = metadata_seeds[kind]
    folder = fuzz_folder / "set-metadata"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    path = folder / f"m.{kind}"
    path.write_bytes(original)
    args = ["set-metadata", str(path), *(f"{key}={value}" for key, value in sets)]
    args += [f"--delete={key}" for key in deletes]
    args += [] if new_type is None else ["--type", new_type]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            status = main(args)
        except SystemExit as stop:  # argparse: a KEY=VALUE without a key
            status = stop.code  # type: ignore[assignment]
            assert status == 2 and any(not key for key, _ in sets)
    assert [p.name for p in folder.iterdir()] == [path.name]  # no temporary file left
    if status == 0:
        with st.open_checkpoint(path) as checkpoint:
            assert checkpoint.digest() == digest
            checkpoint.metadata_digest()
        event("set")
    else:
        assert status in (1, 2)  # 2 only from argparse, checked above
        assert path.read_bytes() == original
        event(f"refused with status {status}")
