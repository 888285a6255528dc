"""Distributed checkpoints (torch.distributed.checkpoint folders) open as one model.

Real folders: written by one process without a process group, and by two processes of a
gloo group on 127.0.0.1 (FSDP2 parameters split unevenly, their Adam state, DTensors
split by rows and by columns, 0-d and empty tensors, non-tensor items), each started and
joined by the test. Oracle: torch's own consolidation, ``dcp_to_torch_save``, loaded
back with ``torch.load``: the same names, dtypes, shapes and bits, and the same plain
values. Every job reads them, with the memory bound measured in child processes.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.checkpoint")

from tests import dcpcraft, dcpwrite  # noqa: E402

_NAMES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.bool: "BOOL",
}  # fmt: skip


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dcpwrite.cached(tmp_path_factory.getbasetemp(), "dcp-single", dcpwrite.write_single)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return dcpwrite.cached(base, "dcp-two-ranks", dcpwrite.write_two_ranks)


def reference(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """torch's consolidation of ``folder`` loaded back: tensors and other values, by the
    DCP name each was saved under (``planner_data`` maps names to paths)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = torch.load(f"{folder}.pt", weights_only=True, map_location="cpu")
        paths = dcpcraft.load(folder).planner_data
    tensors, values = {}, {}
    for name, path in paths.items():
        found = loaded
        for key in path:
            found = found[key]
        (tensors if isinstance(found, torch.Tensor) else values)[name] = found
    return tensors, values


def raw(tensor: Any) -> bytes:
    return bytes(tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy())


def dotted(name: str, value: Any) -> dict[str, Any]:
    """A value torch loaded, flattened as a torch.save file's metadata is (lists, tuples
    and dicts become dotted keys: ``optim.param_groups.0.betas.0``)."""
    if isinstance(value, (list, tuple)):
        value = dict(enumerate(value))
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, item in value.items():
            found.update(dotted(f"{name}.{key}", item))
        return found
    return {name: value}


def same_as_reference(folder: Path) -> st.Checkpoint:
    tensors, values = reference(folder)
    checkpoint = st.open_checkpoint(folder)
    assert checkpoint.format == "dcp"
    assert sorted(checkpoint) == sorted(tensors)
    for name, expected in tensors.items():
        ours = checkpoint[name]
        assert ours.dtype.name == _NAMES[expected.dtype], name
        assert list(ours.shape) == list(expected.shape), name
        assert ours.numpy().tobytes() == raw(expected), name
    metadata = checkpoint.metadata
    expected: dict[str, Any] = {}
    for name, value in values.items():
        expected.update(dotted(name, value))
    assert set(metadata) == set(expected)
    for name, value in expected.items():
        assert json.dumps(metadata[name]) == json.dumps(value), name
        assert type(metadata[name]) is type(value), name
    # The folder and its dcp_to_torch_save file have the same metadata, key for key.
    with st.open_checkpoint(f"{folder}.pt") as consolidated:
        assert metadata == consolidated.metadata
    assert checkpoint.unreadable == {}
    return checkpoint


def test_one_process_folder_equals_torch_consolidation(single: Path) -> None:
    checkpoint = same_as_reference(single)
    assert [checkpoint.metadata[f"cfg.betas.{i}"] for i in (0, 1)] == [0.9, 0.95]
    assert checkpoint.metadata["cfg.none"] is None
    assert checkpoint.info("model.empty").shape == st.Shape([0, 3])
    assert checkpoint.info("model.scale").shape == st.Shape([])


def test_two_rank_folder_equals_torch_consolidation(two: Path) -> None:
    described = dcpcraft.load(two).state_dict_metadata
    chunks = {name: [(tuple(c.offsets), tuple(c.sizes)) for c in entry.chunks]
              for name, entry in described.items() if hasattr(entry, "chunks")}  # fmt: skip
    # The layouts the test means to cover really are there.
    assert chunks["model.up.weight"] == [((0, 0), (4, 5)), ((4, 0), (3, 5))]  # uneven rows
    assert chunks["odd_cols"] == [((0, 0), (3, 3)), ((0, 3), (3, 2))]  # uneven columns
    assert ((1, 0), (0, 7)) in chunks["model.gate.weight"]  # an empty chunk
    assert chunks["zero_d"] == [((), ())]
    files = {info.relative_path for info in dcpcraft.load(two).storage_data.values()}
    assert files == {"__0_0.distcp", "__1_0.distcp"}
    checkpoint = same_as_reference(two)
    assert checkpoint.info("model.down.weight").dtype == "BF16"
    assert [checkpoint.metadata[f"cfg.layers.{i}"] for i in range(3)] == [1, 2, 3]
    params = ["up.weight", "up.bias", "down.weight", "gate.weight"]
    names = [f"optim.param_groups.0.params.{i}" for i in range(4)]
    assert [checkpoint.metadata[name] for name in names] == params
    assert checkpoint.metadata["optim.param_groups.0.betas.0"] == 0.9


def test_the_metadata_file_opens_its_folder(two: Path) -> None:
    whole = st.open_checkpoint(two)
    through = st.open_checkpoint(two / ".metadata")
    assert list(through) == list(whole)
    assert through.digest() == whole.digest()
    assert through.metadata == whole.metadata


def test_imports_are_dcp_classes_judged_data_and_scan_passes(
    two: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with st.open_checkpoint(two) as ckpt:
        named = {f"{found.module}.{found.name}": found.verdict for found in ckpt.imports}
    assert "torch.distributed.checkpoint.metadata.Metadata" in named
    assert set(named.values()) == {"data"}
    status, out = _out(capsys, "scan", str(two / ".metadata"))
    assert status == 0, out
    assert "torch.distributed.checkpoint.metadata.TensorStorageMetadata" in out


def test_the_command_line_names_the_format_dcp(
    two: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder and its ``.metadata`` are ``"dcp"`` (not ``"pytorch"``) in ``format``,
    inspect's header and ``--json``, and scan's line and ``--json``."""
    for path in (str(two), str(two / ".metadata")):
        with st.open_checkpoint(path) as ckpt:
            assert ckpt.format == "dcp"
        capsys.readouterr()
        status, out = _out(capsys, "inspect", path)
        assert status == 0 and out.splitlines()[0] == f"{path} (dcp)"
        status, out = _out(capsys, "inspect", "--json", path)
        assert status == 0 and json.loads(out)["format"] == "dcp"
        status, out = _out(capsys, "scan", path)
        assert status == 0 and out.startswith(f"{path}: dcp, ")
        status, out = _out(capsys, "scan", "--json", path)
        assert status == 0 and [file["format"] for file in json.loads(out)["files"]] == ["dcp"]


def test_digest_equals_the_same_model_saved_as_safetensors(two: Path, tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors, _ = reference(two)
    model = tmp_path / "model.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(model))
    assert st.open_checkpoint(two).digest() == st.open_checkpoint(model).digest()
    # diff's exit status says "identical": 0 when every tensor matches bit for bit.
    assert main(["diff", str(two), str(model), "--ignore-metadata"]) == 0
    for name in tensors:
        assert st.open_checkpoint(two)[name].digest() == st.open_checkpoint(model)[name].digest()


def _out(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_hash_verify_diff_are_the_same_for_every_job_count(
    two: Path, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    reference_pt = f"{two}.pt"
    status, ours = _out(capsys, "hash", str(two), "--jobs", jobs)
    assert status == 0
    status, theirs = _out(capsys, "hash", reference_pt)
    lines = [line for line in ours.splitlines() if not line.endswith("*metadata*")]
    assert lines == [line for line in theirs.splitlines() if not line.endswith("*metadata*")]
    assert _out(capsys, "verify", str(two), "--jobs", jobs)[0] == 0
    status, text = _out(capsys, "diff", str(two), reference_pt, "--jobs", jobs, "--json")
    found = json.loads(text)["tensors"]
    assert {entry["status"] for entry in found.values()} == {"identical"}


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_convert_writes_what_the_consolidated_file_gives(
    two: Path, tmp_path: Path, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = ["--dtype", "BF16", "--max-shard-size", "60B", "--name", "model.*"]
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert main(["convert", str(two), str(ours), *options, "--jobs", jobs]) == 0
    assert main(["convert", f"{two}.pt", str(theirs), *options]) == 0
    capsys.readouterr()
    index = json.loads((ours / "model.safetensors.index.json").read_text())
    assert index == json.loads((theirs / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == ["model.down.weight", "model.gate.weight",
                                           "model.up.bias", "model.up.weight"]  # fmt: skip
    for shard in set(index["weight_map"].values()):
        mine, other = st.load_safetensors(ours / shard), st.load_safetensors(theirs / shard)
        assert {k: v.digest() for k, v in mine.items()} == {k: v.digest() for k, v in other.items()}
    assert st.open_checkpoint(ours).info("model.up.weight").dtype == "BF16"


def test_the_dask_engine_gives_the_one_process_output(
    two: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    local = _out(capsys, "hash", str(two))
    assert _out(capsys, "hash", str(two), "--scheduler", "local:1") == local
    sd = pytest.importorskip("strided.dask")
    arrays = sd.from_checkpoint(str(two), chunks=2)
    expected = st.open_checkpoint(two)["odd_cols"].numpy()
    assert np.array_equal(arrays["odd_cols"].compute(scheduler="sync"), expected)


def test_a_one_chunk_tensor_is_a_view_of_the_file(two: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(two, folder)
    viewed = st.open_checkpoint(folder)["same"]  # replicated: one chunk
    copied = st.open_checkpoint(folder, copy=True)["same"]
    stitched = st.open_checkpoint(folder)["ids"]  # two chunks: a new array
    pattern = np.full(3, 2.0, np.float32).tobytes()
    for name in ("__0_0.distcp", "__1_0.distcp"):
        data = (folder / name).read_bytes()
        if pattern in data:
            with open(folder / name, "r+b") as handle:
                handle.seek(data.index(pattern))
                handle.write(np.full(3, 5.0, np.float32).tobytes())
    assert viewed.numpy().tolist() == [5.0, 5.0, 5.0]  # the file's bytes, shared
    assert copied.numpy().tolist() == [2.0, 2.0, 2.0]
    assert stitched.numpy().tolist() == list(range(9))


def test_inspect_reads_only_the_chunks_that_hold_samples(two: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(two, folder)
    second = next(
        info for index, info in dcpcraft.load(folder).storage_data.items()
        if index.fqn == "ids" and tuple(index.offset) == (5,)
    )  # fmt: skip
    with open(folder / second.relative_path, "r+b") as handle:
        handle.seek(second.offset + second.length - 100)
        handle.write(bytes(100))  # the second chunk's archive has lost its directory
    checkpoint = st.open_checkpoint(folder)
    head = checkpoint.inspect("ids", st.TensorInspectionOptions(max_samples=4))
    assert [int(value) for _, value in head.samples] == [0, 1, 2, 3]
    with pytest.raises(st.FormatError, match="ids"):
        checkpoint["ids"]
    with pytest.raises(st.FormatError):
        checkpoint.inspect("ids", st.TensorInspectionOptions(max_samples=4, strategy="spread"))


@pytest.mark.parametrize("strategy", ["head", "spread"])
def test_inspect_of_a_stitched_tensor_equals_inspect_of_the_whole(two: Path, strategy: str) -> None:
    checkpoint = st.open_checkpoint(two)
    options = st.TensorInspectionOptions(max_samples=7, strategy=strategy)
    for name in ("cols", "odd_cols", "model.up.weight", "ids"):
        found = checkpoint.inspect(name, options)
        expected = checkpoint[name].inspect(options)
        assert [(i, str(v)) for i, v in found.samples] == [(i, str(v)) for i, v in expected.samples]
        assert (found.strides, found.byte_len, found.storage_byte_len) == (
            expected.strides, expected.byte_len, expected.storage_byte_len,
        )  # fmt: skip


def test_an_item_that_is_not_data_is_listed_unreadable(single: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(single, folder)
    metadata = dcpcraft.load(folder)
    span = dcpcraft.append(folder, "__0_0.distcp", dcpcraft.archive(dcpwrite.Opaque()))
    metadata.storage_data[dcpcraft.MetadataIndex("opaque")] = span
    metadata.state_dict_metadata["opaque"] = dcpcraft.BytesStorageMetadata()
    dcpcraft.save(folder, metadata)
    checkpoint = st.open_checkpoint(folder)
    assert list(checkpoint.unreadable) == ["opaque"]
    assert "Opaque" in checkpoint.unreadable["opaque"]
    assert "opaque" not in checkpoint.metadata and "opaque" not in checkpoint
    assert checkpoint.metadata["step"] == 11


# -- large tensors: streamed, assembled once, bounded memory ---------------------------

_CHILD = """
import json, sys, tracemalloc
import strided as st
from strided.cli import main
tracemalloc.start()
if sys.argv[1] == "get":
    tensor = st.open_checkpoint(sys.argv[2])[sys.argv[3]]
    result = tensor.digest()
else:
    result = main(sys.argv[1:])
print(json.dumps({"result": result, "peak_mib": tracemalloc.get_traced_memory()[1] / 2**20}))
"""


def _child(*args: str) -> dict[str, Any]:
    found = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=600,
        check=True,
    )  # fmt: skip
    lines = found.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1])
    result["stdout"] = "\n".join(lines[:-1])
    return result


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A 96 MiB F32 tensor split by columns across two files (tensor parallelism's
    layout), a smaller one split by rows, and the same model as safetensors."""
    folder = tmp_path_factory.mktemp("dcp-large") / "ckpt"
    generator = torch.Generator().manual_seed(9)
    wide = torch.randn(6144, 4096, generator=generator)
    tall = torch.randn(1000, 64, generator=generator).to(torch.bfloat16)
    dcpcraft.craft(
        folder,
        {
            "wide": (wide, dcpcraft.columns(wide.shape, [1500])),
            "tall": (tall, dcpcraft.rows(tall.shape, [333, 700])),
        },
        items={"step": 3},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        safetensors_torch = pytest.importorskip("safetensors.torch")
        model = folder.parent / "model.safetensors"
        safetensors_torch.save_file({"wide": wide, "tall": tall}, str(model))
    return folder, model


# What a job may hold beyond the same job on the model saved as safetensors (whose
# tensors are zero-copy views): a few 4 MiB blocks. The large tensor is 96 MiB.
_SLACK_MIB = 16


def test_hash_streams_a_column_split_tensor_in_bounded_memory(large: tuple[Path, Any]) -> None:
    folder, model = large
    found = _child("hash", str(folder))
    assert found["result"] == 0
    digests = dict(line.split("  ")[::-1] for line in found["stdout"].splitlines())
    assert digests["*checkpoint*"] == st.open_checkpoint(model).digest()
    baseline = _child("hash", str(model))
    # Its rows are assembled 4 MiB at a time, never the 96 MiB tensor.
    assert found["peak_mib"] < baseline["peak_mib"] + _SLACK_MIB, (found, baseline)


def test_convert_and_diff_stay_within_the_memory_bound(
    large: tuple[Path, Any], tmp_path: Path
) -> None:
    folder, model = large
    out = tmp_path / "out"
    options = ("--dtype", "F16", "--max-shard-size", "50MB")
    found = _child("convert", str(folder), str(out), *options)
    assert found["result"] == 0
    baseline = _child("convert", str(model), str(tmp_path / "from-model"), *options)
    assert found["peak_mib"] < baseline["peak_mib"] + _SLACK_MIB, (found, baseline)
    expected = st.open_checkpoint(model)["wide"].convert(st.DType.F16).digest()
    assert st.open_checkpoint(out)["wide"].digest() == expected
    compared = _child("diff", str(folder), str(model), "--ignore-metadata")
    assert compared["result"] == 0
    baseline = _child("diff", str(model), str(model))
    assert compared["peak_mib"] < baseline["peak_mib"] + _SLACK_MIB, (compared, baseline)


def test_a_stitched_tensor_is_assembled_once(large: tuple[Path, Any]) -> None:
    folder, model = large
    found = _child("get", str(folder), "wide")
    assert found["result"] == st.open_checkpoint(model)["wide"].digest()
    size = 6144 * 4096 * 4 / 2**20
    assert size <= found["peak_mib"] < size + 16, found  # one array, filled in place


@settings(max_examples=25, deadline=None)
@given(data=hs.data())
def test_stitched_values_equal_numpy_for_any_grid(data: hs.DataObject) -> None:
    """Grids of cuts along every dim, chunks spread over files: the tensor, every flat
    range ``_chunks`` streams, the digest and a spread inspection equal NumPy's."""
    dims = tuple(data.draw(hs.lists(hs.integers(1, 6), min_size=1, max_size=3)))
    cuts = [sorted(data.draw(hs.sets(hs.integers(1, dim - 1), max_size=2))) if dim > 1 else []
            for dim in dims]  # fmt: skip
    boxes = []
    for corner in itertools.product(*[[0, *c] for c in cuts]):
        ends = [
            next((e for e in [*c, d] if e > o), d)
            for o, c, d in zip(corner, cuts, dims, strict=True)
        ]
        boxes.append((corner, tuple(e - o for o, e in zip(corner, ends, strict=True))))
    full = torch.arange(math.prod(dims), dtype=torch.float32).reshape(dims) * 0.5 - 3
    expected = full.numpy()
    flat = expected.reshape(-1)
    with tempfile.TemporaryDirectory() as base:
        files = data.draw(hs.integers(1, 3))
        folder = dcpcraft.craft(Path(base) / "grid", {"t": (full, boxes)}, files=files)
        checkpoint = st.open_checkpoint(folder)
        assert np.array_equal(checkpoint["t"].numpy(), expected)
        start = data.draw(hs.integers(0, flat.size - 1))
        stop = data.draw(hs.integers(start + 1, flat.size))
        parts = list(checkpoint._chunks("t", start * 4, stop * 4))
        got = np.concatenate(parts).view(np.float32)
        assert np.array_equal(got, flat[start:stop]), (start, stop)
        assert checkpoint["t"].digest() == st.Tensor.from_numpy(expected).digest()
        options = st.TensorInspectionOptions(50, "spread")
        spread = checkpoint.inspect("t", options)
        whole = st.Tensor.from_numpy(expected).inspect(options)
        assert [(i, str(v)) for i, v in spread.samples] == [(i, str(v)) for i, v in whole.samples]
        checkpoint.close()


def test_rows_longer_than_a_block_are_streamed_in_pieces(tmp_path: Path) -> None:
    """A tensor whose single rows exceed the 4 MiB block (3 rows of 6 MiB), split by
    columns: each row is streamed through its own column pieces."""
    full = torch.arange(3 * 1_572_864, dtype=torch.int32).reshape(3, 1_572_864)
    boxes = dcpcraft.columns(full.shape, [700_001])
    folder = dcpcraft.craft(tmp_path / "long", {"t": (full, boxes)})
    checkpoint = st.open_checkpoint(folder)
    flat = full.numpy().reshape(-1)
    assert checkpoint["t"].digest() == st.Tensor.from_numpy(full.numpy()).digest()
    for start, stop in ((0, flat.size), (700_000, 700_002), (1_572_860, 3_000_000)):
        got = np.concatenate(list(checkpoint._chunks("t", start * 4, stop * 4))).view(np.int32)
        assert np.array_equal(got, flat[start:stop])
