"""Block dequantization, bit for bit against ``gguf.quants.dequantize``: random blocks (so
NaN, infinite and subnormal scales occur), hand-made edge blocks (zero, infinite and NaN
scales with extreme quants), every ``e8m0``/``ue4m3`` scale byte, the vendored lattice
tables, chunk and padding boundaries, and no floating-point warning under
``np.errstate(all="raise")``."""

from __future__ import annotations

import tracemalloc
import warnings
from typing import Any

import gguf
import gguf.quants as gq
import hypothesis.strategies as hs
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES
from hypothesis import given, settings

import strided as st
from strided.io.gguf import _ggml, _iq_grids, _quants

Q = gguf.GGMLQuantizationType
TYPES = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ1_S",
    "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0",
    "TQ2_0", "MXFP4", "NVFP4",
)  # fmt: skip
KINDS = {kind.name: kind for kind in _ggml.GGML_TYPES.values()}

# Byte offsets of each type's F16 scales (IQ1_M spreads its scale over 4 nibbles).
F16_SCALES: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
    "IQ1_S": (0,), "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ3_XXS": (0,),
    "IQ3_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,), "TQ1_0": (52,), "TQ2_0": (64,),
}  # fmt: skip
SPECIAL_F16 = (
    0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7D01, 0xFC01, 0x7BFF, 0xFBFF,
    0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00,
)  # fmt: skip
FILLERS = (0x00, 0xFF, 0x55, 0xAA, 0x0F, 0xF0, 0x80, 0x7F)


def reference(kind: str, blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = gq.dequantize(blocks, Q[kind])
    return np.asarray(values, dtype=np.float32).reshape(-1)


def ours(kind: str, blocks: np.ndarray) -> np.ndarray:
    info = KINDS[kind]
    count = blocks.size // info.block_bytes
    # Strict floating-point state: nothing may warn or raise.
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        values = _ggml.dequantize(info, blocks.reshape(-1), (count * info.block_size,), "t")
    assert values.dtype == np.float32 and values.flags.c_contiguous
    return values


def assert_bits_equal(kind: str, blocks: np.ndarray) -> None:
    expected, got = reference(kind, blocks), ours(kind, blocks)
    assert got.shape == expected.shape
    differ = np.flatnonzero(got.view(np.uint32) != expected.view(np.uint32))
    if differ.size:
        i = differ[0]
        block = i // KINDS[kind].block_size
        raise AssertionError(
            f"{kind}: {differ.size} values differ; first at {i}: {got[i]!r} "
            f"(0x{got.view(np.uint32)[i]:08x}) vs {expected[i]!r} "
            f"(0x{expected.view(np.uint32)[i]:08x}), block bytes {blocks[block].tobytes().hex()}"
        )


def random_blocks(kind: str, count: int, seed: int) -> np.ndarray:
    size = KINDS[kind].block_bytes
    return np.random.default_rng(seed).integers(0, 256, (count, size), dtype=np.uint8)


def test_the_dequantizable_types_are_exactly_those_of_the_reference() -> None:
    assert set(TYPES) == _ggml.DEQUANTIZABLE
    for kind in TYPES:
        assert GGML_QUANT_SIZES[Q[kind]] == (KINDS[kind].block_size, KINDS[kind].block_bytes)
        assert Q[kind].value == KINDS[kind].type_id


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", TYPES)
def test_random_blocks_match_bit_for_bit(kind: str, seed: int) -> None:
    # Random bytes: about 3% of F16 scales are NaN or infinite, others subnormal.
    count = 3001 if KINDS[kind].block_size == 256 else 12001
    assert_bits_equal(kind, random_blocks(kind, count, seed + 100 * Q[kind].value))


@settings(max_examples=60, deadline=None)
@given(kind=hs.sampled_from(TYPES), data=hs.data())
def test_hypothesis_blocks_match_bit_for_bit(kind: str, data: hs.DataObject) -> None:
    size = KINDS[kind].block_bytes
    count = data.draw(hs.integers(1, 11), label="blocks")
    raw = data.draw(hs.binary(min_size=count * size, max_size=count * size), label="bytes")
    assert_bits_equal(kind, np.frombuffer(raw, dtype=np.uint8).reshape(count, size))


def edge_blocks(kind: str) -> np.ndarray:
    """Every special scale with every quant filler (and random quants)."""
    size = KINDS[kind].block_bytes
    rng = np.random.default_rng(Q[kind].value)
    rows = []
    for filler in (*FILLERS, None):
        for special in SPECIAL_F16:
            if filler is None:
                block = rng.integers(0, 256, size, dtype=np.uint8)
            else:
                block = np.full(size, filler, dtype=np.uint8)
            rows.append(with_scales(kind, block, special))
    return np.stack(rows)


def with_scales(kind: str, block: np.ndarray, special: int) -> np.ndarray:
    block = block.copy()
    if kind == "IQ1_M":  # the F16 is the top nibble of each of 4 uint16 scales
        scales = block[48:56].view("<u2")
        for k in range(4):
            scales[k] = (scales[k] & 0x0FFF) | (((special >> (4 * k)) & 15) << 12)
    elif kind in F16_SCALES:
        for at in F16_SCALES[kind]:
            block[at : at + 2] = np.array([special], dtype="<u2").view(np.uint8)
    return block


@pytest.mark.parametrize("kind", TYPES)
def test_edge_blocks_match_bit_for_bit(kind: str) -> None:
    assert_bits_equal(kind, edge_blocks(kind))


@pytest.mark.parametrize("kind", ["MXFP4", "NVFP4"])
def test_every_scale_byte_matches(kind: str) -> None:
    size = KINDS[kind].block_bytes
    rng = np.random.default_rng(7)
    scale_bytes = 1 if kind == "MXFP4" else 4
    blocks = rng.integers(0, 256, (256 * len(FILLERS), size), dtype=np.uint8)
    for i, filler in enumerate(FILLERS):
        rows = blocks[256 * i : 256 * (i + 1)]
        rows[:, scale_bytes:] = filler if i else rows[:, scale_bytes:]
        rows[:, :scale_bytes] = np.arange(256, dtype=np.uint8)[:, None]
    assert_bits_equal(kind, blocks)


def test_scale_tables_equal_the_reference_decoders() -> None:
    every = np.arange(256, dtype=np.uint8)
    e8m0 = gq.MXFP4.e8m0_to_fp32_half(every).astype(np.float32)
    ue4m3 = gq.NVFP4.ue4m3_to_fp32(every).astype(np.float32)
    assert np.array_equal(_quants.E8M0_HALF.view(np.uint32), e8m0.view(np.uint32))
    assert np.array_equal(_quants.UE4M3_HALF.view(np.uint32), ue4m3.view(np.uint32))


@pytest.mark.parametrize("kind", ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S"])
def test_vendored_grids_equal_the_reference(kind: str) -> None:
    quant: Any = getattr(gq, kind)
    quant.init_grid()
    expected = quant.grid.reshape(quant.grid_shape)
    assert np.array_equal(_iq_grids.grid(kind), expected)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_K", "IQ2_XS", "NVFP4"])
def test_chunk_boundaries_and_padding(kind: str) -> None:
    # Several chunks plus a last one that is not a whole group of 8 blocks.
    per_chunk = _ggml._CHUNK_VALUES // KINDS[kind].block_size
    for count in (1, 7, 8, 9, per_chunk - 1, per_chunk, 2 * per_chunk + 3):
        assert_bits_equal(kind, random_blocks(kind, count, count))


def test_zero_blocks() -> None:
    for kind in TYPES:
        got = _ggml.dequantize(KINDS[kind], np.zeros(0, np.uint8), (0, 4), "t")
        assert got.shape == (0, 4) and got.dtype == np.float32


def test_seterr_raise_leaves_no_trace() -> None:
    # np.seterr itself (not only errstate) set to raise, and warnings as errors.
    old = np.seterr(all="raise")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for kind in TYPES:
                blocks = edge_blocks(kind)
                info = KINDS[kind]
                numel = len(blocks) * info.block_size
                values = _ggml.dequantize(info, blocks.reshape(-1), (numel,), "t")
                assert values.size == numel
    finally:
        np.seterr(**old)


def test_wrong_byte_counts_are_format_errors() -> None:
    info = KINDS["Q4_K"]
    with pytest.raises(st.FormatError, match="do not hold"):
        _ggml.dequantize(info, np.zeros(info.block_bytes + 1, np.uint8), (256,), "t")
    with pytest.raises(st.FormatError, match="do not hold"):
        _ggml.dequantize(info, np.zeros(info.block_bytes, np.uint8), (2**34,), "t")
    with pytest.raises(st.FormatError, match="do not hold"):
        _ggml.dequantize(info, np.zeros(info.block_bytes, np.uint8), (255,), "t")


@pytest.mark.parametrize("kind", ["Q8_0", "Q6_K", "IQ2_XS", "NVFP4", "TQ1_0"])
def test_memory_beyond_the_output_stays_bounded(kind: str) -> None:
    info = KINDS[kind]
    extra = []
    for numel in (1 << 19, 1 << 22):
        blocks = random_blocks(kind, numel // info.block_size, 5).reshape(-1)
        ours(kind, blocks[: 8 * info.block_bytes])  # lookup tables are built once, before
        tracemalloc.start()
        try:
            values = _ggml.dequantize(info, blocks, (numel,), "t")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        extra.append(peak - values.nbytes)
    assert extra[1] <= extra[0] + (64 << 10) and extra[1] < 8 << 20, extra
