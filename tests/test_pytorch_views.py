"""PyTorch checkpoints whose claims outgrow their bytes: ``expand`` views read as zero-stride
views (never expanded), big-endian archives converted without keeping every storage, and
metadata that agrees across shards bit for bit (a NaN agrees with itself). torch is the
oracle; memory is measured in a child process."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import strided as st
from strided.io.torch._pytorch import open_pytorch

from .test_pytorch import rewrite_zip, save, strided_bytes, torch_bytes

torch = pytest.importorskip("torch")


def child(code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` in a fresh Python; it prints one JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


# -- zero strides: a 1.5 KB file claiming 32 GiB stays 1.5 KB ----------------------------------


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("count", [1, 2, 7, 1000])
def test_expand_reads_as_torch_reads_it(tmp_path: Path, fmt: str, count: int) -> None:
    state = {
        "zeros": torch.zeros(1).expand(count),
        "rows": torch.arange(6, dtype=torch.int16).reshape(2, 1, 3).expand(2, count, 3),
        "flags": torch.tensor([True]).expand(count, 2),
    }
    path = save(state, tmp_path / "expand.pt", fmt)
    expected = torch.load(path, weights_only=True)
    opened = open_pytorch(path)
    for name, reference in expected.items():
        got = opened.get(name)
        assert list(got.shape) == list(reference.shape)
        assert got.strides == tuple(reference.stride())
        assert strided_bytes(got) == torch_bytes(reference)
        assert got.storage_byte_len == reference.untyped_storage().nbytes()


EXPANDED = """
    import json, resource, sys, tracemalloc
    import strided as st
    from strided.io.torch._pytorch import open_pytorch
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # expanding would need 32 GiB
    tracemalloc.start()  # NumPy's buffers included
    checkpoint = st.open_checkpoint(sys.argv[1])
    report = {}
    for name in checkpoint.keys():
        info = checkpoint.info(name)
        inspection = checkpoint.inspect(name)
        report[name] = [list(info.shape), inspection.sampled, inspection.complete,
                        [str(value) for _, value in inspection.samples[:3]]]
    for copy in (False, True):
        tensor = open_pytorch(sys.argv[1], copy=copy).get("zeros")
        report[f"copy={copy}"] = [tensor.strides, tensor.storage_byte_len,
                                  str(tensor.inspect().samples[-1][1])]
    report["peak"] = tracemalloc.get_traced_memory()[1]
    print(json.dumps(report))
"""


def test_a_huge_expand_is_opened_and_inspected_without_expanding(tmp_path: Path) -> None:
    count = 2**33  # within MAX_ELEMENTS; 32 GiB of F32, 8 GiB of BOOL
    state = {
        "zeros": torch.zeros(1).expand(count),
        "negated": torch._neg_view(torch.ones(1, dtype=torch.float16)).expand(count),
        "flags": torch.ones(1, dtype=torch.bool).expand(count),
    }
    path = save(state, tmp_path / "huge.pt")
    assert path.stat().st_size < 2000
    report = child(EXPANDED, str(path))
    samples = {"zeros": "0.0", "negated": "-1.0", "flags": "true"}
    for name, value in samples.items():
        assert report[name] == [[count], 1024, False, [value] * 3], name
    for copy in (False, True):
        assert report[f"copy={copy}"] == [[0], 4, "0.0"]
    assert report["peak"] < 16 << 20, report


# -- big-endian archives: converted storages are not all kept ------------------------------------


def big_endian(little: Path, target: Path, itemsize: int) -> Path:
    def swap(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        if "/data/" in name:
            return np.frombuffer(data, f"<u{itemsize}").astype(f">u{itemsize}").tobytes()
        return data

    return rewrite_zip(little, target, swap)


ONE_BY_ONE = """
    import json, sys, tracemalloc
    import numpy as np
    from strided.io.torch import _pytorch as pytorch
    pytorch.SWAPPED_CACHE_BYTES = int(sys.argv[2])
    opened = pytorch.open_pytorch(sys.argv[1])
    firsts = []
    tracemalloc.start()
    for name in opened.keys():
        firsts.append(float(opened.get(name).numpy()[0]))
    held, peak = tracemalloc.get_traced_memory()
    print(json.dumps({"firsts": firsts, "held": held, "peak": peak}))
"""


def test_big_endian_tensors_read_one_by_one_hold_at_most_the_cache(tmp_path: Path) -> None:
    storage = 4 << 20
    state = {f"w{index}": torch.full((storage // 4,), float(index)) for index in range(16)}
    path = big_endian(save(state, tmp_path / "little.pt"), tmp_path / "big.pt", 4)
    # The old reader kept all 16 converted storages (64 MiB) for as long as the file was open.
    report = child(ONE_BY_ONE, str(path), str(storage))
    assert report["firsts"] == [float(index) for index in range(16)]
    assert report["held"] <= storage + (1 << 20), report
    assert report["peak"] <= 3 * storage + (1 << 20), report


def test_big_endian_views_of_one_storage_still_share_it(tmp_path: Path) -> None:
    weight = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    state = {"w": weight, "t": weight.t(), "e": weight[0].expand(5, 4)}
    path = big_endian(save(state, tmp_path / "little.pt"), tmp_path / "big.pt", 8)
    opened = open_pytorch(path)
    expected = torch.load(path, weights_only=True)
    for name, reference in expected.items():
        assert strided_bytes(opened.get(name)) == torch_bytes(reference), name
    assert opened.get("t").shares_storage(opened.get("w"))
    assert opened.get("e").strides == (0, 1)


# -- metadata agrees by its bits ---------------------------------------------------------------


def test_nan_metadata_reads_as_torch_reads_it(tmp_path: Path) -> None:
    state = {"w": torch.ones(2), "loss": math.nan, "zero": -0.0, "inf": [math.inf, 1.5]}
    path = save(state, tmp_path / "nan.pt")
    expected = torch.load(path, weights_only=True)
    metadata = open_pytorch(path).metadata
    assert bits(metadata["loss"]) == bits(expected["loss"])
    assert bits(metadata["zero"]) == bits(-0.0)
    assert metadata["inf.0"] == math.inf and metadata["inf.1"] == 1.5
    assert math.isnan(st.open_checkpoint(path).metadata["loss"])  # type: ignore[arg-type]


def sharded(folder: Path, first: float, second: float) -> Path:
    save({"a": torch.ones(2), "lr": first}, folder / "model-1.bin")
    save({"b": torch.zeros(2), "lr": second}, folder / "model-2.bin")
    index = folder / "pytorch_model.bin.index.json"
    weight_map = {"a": "model-1.bin", "b": "model-2.bin"}
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


def test_shards_agree_on_metadata_by_its_bits(tmp_path: Path) -> None:
    opened = open_pytorch(sharded(tmp_path, math.nan, math.nan))
    assert opened.keys() == ["a", "b"]
    assert math.isnan(opened.metadata["lr"])  # type: ignore[arg-type]
    payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0001))[0]
    for first, second in ((0.0, -0.0), (math.nan, payload), (1.0, 2.0)):
        with pytest.raises(st.FormatError, match="shards disagree on metadata 'lr'"):
            open_pytorch(sharded(tmp_path, first, second))
