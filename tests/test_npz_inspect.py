"""Inspecting an .npz member reads only what its samples need: values equal np.load's for
every strategy, shape, layout and dtype; a deflated member is inflated only up to the last
sampled byte (a 1 GiB member of a 1 MB file is inspected in a few MiB, and a stream that
goes bad after that byte does not matter); layout facts equal those of the tensor ``get``
gives."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.io import open_npz
from tests.strategies import shapes
from tests.zipcraft import Entry, bomb, build, deflate_raw

NPY_DTYPES = [d for d in st.DType if d.name not in ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0")]


def same_value(found: st.Scalar, expected: Any) -> bool:
    """``found`` holds ``expected`` (a NumPy scalar): NaN as NaN, zeros by sign."""
    if isinstance(found.value, float):
        want = float(expected)
        if math.isnan(want):
            return math.isnan(found.value)
        return found.value == want and math.copysign(1, found.value) == math.copysign(1, want)
    return bool(found.value == expected.item())


def expected_positions(strategy: str, count: int, numel: int) -> list[int]:
    count = min(count, numel)
    return list(range(count)) if strategy == "head" else [i * numel // count for i in range(count)]


def assert_same_inspection(a: st.TensorInspection, b: st.TensorInspection) -> None:
    for field in ("dtype", "shape", "strides", "numel", "byte_len", "storage_byte_len"):
        assert getattr(a, field) == getattr(b, field), field
    for field in ("is_contiguous", "samples", "sampled", "complete", "min", "max"):
        assert getattr(a, field) == getattr(b, field), field
    for field in ("nan_count", "inf_count", "zero_count"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.mean == b.mean or (a.mean != a.mean and b.mean != b.mean)


def storage_index(shape: tuple[int, ...], fortran: bool) -> np.ndarray:
    """For each logical (C-order) position, the index of its element in the stored data."""
    numel = int(np.prod(shape, dtype=np.int64))
    logical = np.arange(numel).reshape(shape)
    where = np.empty(numel, dtype=np.int64)
    where[logical.ravel(order="F" if fortran else "C")] = np.arange(numel)
    return where


def segment(content: bytes) -> bytes:
    # Byte-aligned, not final, window forgotten: whatever follows starts a new block.
    encoder = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return encoder.compress(content) + encoder.flush(zlib.Z_FULL_FLUSH)


def bad_block() -> bytes:
    """A fixed-Huffman block: the literal ``A``, then a length whose distance code (30)
    does not exist. Decoding the literal needs room for output, so an inflater asked for
    no more bytes stops before it; one that goes on finds the corrupt code."""

    def code(value: int, width: int) -> list[int]:
        return [(value >> (width - 1 - i)) & 1 for i in range(width)]  # Huffman: MSB first

    # BFINAL 0, BTYPE 01 (fixed), literal "A", length code 257, distance code 30.
    bits = [0, 1, 0, *code(0x30 + ord("A"), 8), *code(1, 7), *code(30, 5)]
    bits += [0] * (-len(bits) % 8)
    return bytes(
        sum(bit << i for i, bit in enumerate(bits[at : at + 8])) for at in range(0, len(bits), 8)
    )


BAD_BLOCK = bad_block()
HEAD_BYTES = 10_012  # open reads this much of a member (or all of it) for the header


@settings(max_examples=80, deadline=None)
@given(data=hs.data())
def test_inspect_equals_numpy_and_inflates_no_further(data: hs.DataObject) -> None:
    """Values equal np.load's for any dtype, shape, strategy and layout, and every other
    fact equals ``get(name).inspect``'s; a deflated member's stream is cut after the last
    byte the samples need (or the header read at open) and followed by a corrupt block,
    which inspect never reaches."""
    dtype = data.draw(hs.sampled_from(NPY_DTYPES))
    shape = data.draw(shapes(min_rank=0, max_rank=4, max_dim=12))
    numel = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(data.draw(hs.integers(0, 2**32)))
    array = rng.integers(0, 256, numel * dtype.itemsize, dtype=np.uint8)
    array = (
        array.view(dtype.numpy).reshape(shape)
        if dtype is not st.DType.BOOL
        else ((array % 2 == 1).reshape(shape))
    )
    fortran = array.ndim > 1 and data.draw(hs.booleans())
    if fortran:
        array = np.asfortranarray(array)
    if array.dtype.itemsize > 1 and data.draw(hs.booleans()):
        array = array.astype(array.dtype.newbyteorder(">"))
    kind = data.draw(hs.sampled_from(["stored", "deflated"]))
    copy = data.draw(hs.booleans())
    options = st.TensorInspectionOptions(
        data.draw(hs.integers(0, 300)), data.draw(hs.sampled_from(["head", "spread"]))
    )
    positions = expected_positions(options.strategy, options.max_samples, numel)
    content = npy(array)
    logical = np.load(io.BytesIO(content), allow_pickle=False).reshape(-1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.npz"
        if kind == "stored":
            np.savez(path, x=array)
        else:
            stored = storage_index(shape, fortran)[positions]
            data_start = len(content) - array.nbytes
            needed = data_start + (int(stored.max()) + 1) * dtype.itemsize if positions else 0
            cut = max(needed, min(len(content), HEAD_BYTES))
            stream = segment(content[:cut]) + BAD_BLOCK
            path.write_bytes(build([Entry("x.npy", content, method=8, data=stream)]))
        with open_npz(path, copy=copy) as opened:
            found = opened.inspect("x", options)
        valid = path if kind == "stored" else Path(folder) / "valid.npz"
        if kind == "deflated":  # the same member, whole
            np.savez_compressed(valid, x=array)
        with open_npz(valid, copy=copy) as opened:
            assert_same_inspection(found, opened.get("x").inspect(options))
    assert [index for index, _ in found.samples] == positions
    for index, scalar in found.samples:
        assert scalar.dtype is dtype and same_value(scalar, logical[index])
    assert found.shape == shape and found.sampled == len(positions)


def member(content: bytes, stream: bytes) -> bytes:
    return build([Entry("m.npy", content, method=8, data=stream)])


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_inspect_stops_at_the_last_sampled_byte(tmp_path: Path) -> None:
    content = npy(np.arange(100_000, dtype="<i8"))
    # Two flushed segments, then the second cut in half: the first 90,000 bytes (the
    # header and 11,000-odd elements) still inflate, the rest of the stream is gone.
    encoder = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = encoder.compress(content[:90_000]) + encoder.flush(zlib.Z_FULL_FLUSH)
    rest = encoder.compress(content[90_000:]) + encoder.flush()
    path = tmp_path / "cut.npz"
    path.write_bytes(member(content, first + rest[: len(rest) // 2]))
    with open_npz(path) as opened:
        found = opened.inspect("m", st.TensorInspectionOptions(1024, "head"))
        assert [s.value for _, s in found.samples] == list(range(1024))
        assert found.max == st.Scalar(st.DType.I64, 1023)
        with pytest.raises(st.FormatError, match="deflate stream ends after"):
            opened.inspect("m", st.TensorInspectionOptions(1024, "spread"))
        with pytest.raises(st.FormatError, match="deflate stream"):
            opened.get("m")


def test_inspect_checks_sampled_bool_bytes(tmp_path: Path) -> None:
    content = bytearray(npy(np.zeros(10, dtype=bool)))
    content[-2] = 7  # element 8
    path = tmp_path / "b.npz"
    path.write_bytes(member(bytes(content), deflate_raw(bytes(content))))
    with open_npz(path) as opened:
        assert opened.inspect("m", st.TensorInspectionOptions(8)).max == st.Scalar(
            st.DType.BOOL, False
        )
        with pytest.raises(st.FormatError, match="BOOL byte 8 is 7"):
            opened.inspect("m", st.TensorInspectionOptions(9))


def huge_member(path: Path, data_bytes: int) -> None:
    """A valid archive of one deflated F64 member of ``data_bytes`` (about 1 MB on disk):
    ``arange`` over its first MiB, zeros after."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f8", "fortran_order": False, "shape": (data_bytes // 8,)}
    )
    head = buffer.getvalue() + np.arange(1 << 17, dtype="<f8").tobytes()
    crc = zlib.crc32(head)
    zeros = bytes(1 << 20)
    for _ in range((len(buffer.getvalue()) + data_bytes - len(head)) // len(zeros)):
        crc = zlib.crc32(zeros, crc)
    size = len(buffer.getvalue()) + data_bytes
    stream = bomb(size, head)
    path.write_bytes(build([Entry("big.npy", b"", method=8, data=stream, size=size, crc=crc)]))


PROBE = """
import json, resource, sys
import strided as st
with st.open_checkpoint(sys.argv[1]) as ckpt:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    found = ckpt.inspect("big", st.TensorInspectionOptions(1024, sys.argv[2]))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
values = [s.value for _, s in found.samples]
print(json.dumps({"growth_kib": after - before, "values": values, "numel": found.numel}))
"""


@pytest.mark.parametrize("strategy", ["head", "spread"])
def test_a_1_gib_member_is_inspected_in_bounded_memory(tmp_path: Path, strategy: str) -> None:
    path = tmp_path / "huge.npz"
    huge_member(path, 1 << 30)
    assert path.stat().st_size < 2 << 20
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), strategy],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    numel = (1 << 30) // 8
    assert report["numel"] == numel
    positions = expected_positions(strategy, 1024, numel)
    assert report["values"] == [float(p) if p < 1 << 17 else 0.0 for p in positions]
    # Inflating the whole member takes 1 GiB; a bounded inflate takes a few MiB.
    assert report["growth_kib"] < 100 * 1024, report["growth_kib"]
