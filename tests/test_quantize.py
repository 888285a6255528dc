"""Quantization for GGUF writing, byte for byte against ``gguf.quants.quantize``.

Every type strided writes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0,
MXFP4) over Hypothesis values (zeros of both signs, subnormals, values near the float32
limits, repeated values, values landing on rounding ties after scaling), hand-made
adversarial blocks (blocks so small that the reference's ``1 / d`` overflows, ties in
the largest magnitude, MXFP4 midpoints and near-powers of two), inputs spanning many
chunks; NaN and infinity refused with the position; and the round trip through
strided's dequantizer equal to ``gguf.quants.dequantize``.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import gguf
import gguf.quants as gq
import hypothesis.strategies as hs
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES
from hypothesis import assume, given, settings

from strided import DTypeError, RangeError, ShapeError
from strided.io.gguf import _ggml
from strided.io.gguf._quantize import FLOAT_TYPES, QUANTIZABLE, block_size, quantize, row_bytes
from tests.gguf_oracle import F16_FIELDS
from tests.gguf_oracle import scale_overflows as oracle_overflows

Q = gguf.GGMLQuantizationType
BLOCK_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "TQ1_0", "TQ2_0", "MXFP4")
TYPES = ("F32", "F16", "BF16", *BLOCK_TYPES)
KINDS = {kind.name: kind for kind in _ggml.GGML_TYPES.values()}
FLT_MAX = float(np.finfo(np.float32).max)
TINY = float(np.finfo(np.float32).smallest_subnormal)
# The smallest float32 magnitude that rounds (half to even) to BF16 infinity, negated.
BF16_TIE = float(np.uint32(0xFF7F8000).view(np.float32))


def reference(rows: np.ndarray, kind: str) -> np.ndarray:
    """``gguf.quants.quantize`` as bytes, (n_rows, row_bytes); its warnings silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = gq.quantize(rows, Q[kind])
    return np.ascontiguousarray(result).view(np.uint8).reshape(rows.shape[0], -1)


def ours(rows: np.ndarray, kind: str) -> np.ndarray:
    # Strict floating-point state: nothing may warn or raise.
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        return quantize(rows, kind, "t")


def overflows(rows: np.ndarray, kind: str) -> bool:
    """Whether a finite value becomes infinite in F16/BF16 (refused by strided)."""
    if kind not in ("F16", "BF16"):
        return False
    landed = reference(rows, kind).view("<u2") & 0x7FFF
    infinite = landed == (0x7C00 if kind == "F16" else 0x7F80)
    return bool(np.any(infinite & np.isfinite(rows)))


def scale_overflows(rows: np.ndarray, kind: str) -> np.ndarray:
    """(n_rows, blocks per row) bool: where the reference stores an infinite F16 field
    (its scale overflowed; the block reads back as infinity or NaN). Refused by strided."""
    if kind not in F16_FIELDS:
        return np.zeros((rows.shape[0], 0), dtype=bool)
    return oracle_overflows(reference(rows, kind), kind, rows.shape[0])


def assert_same_bytes(rows: np.ndarray, kind: str) -> None:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    expected, got = reference(rows, kind), ours(rows, kind)
    assert got.dtype == np.uint8 and got.shape == expected.shape
    differ = np.argwhere(got != expected)
    if differ.size:
        row, byte = differ[0]
        size, width = KINDS[kind].block_size, KINDS[kind].block_bytes
        block = byte // width
        values = rows[row, block * size : (block + 1) * size]
        raise AssertionError(
            f"{kind}: {len(differ)} bytes differ; first row {row} byte {byte}: "
            f"{got[row, byte]} vs {expected[row, byte]}; block values {values.tolist()}"
        )


# -- Hypothesis -------------------------------------------------------------------------

SPECIAL = (
    0.0, -0.0, TINY, -TINY, 2.0**-126, -(2.0**-126), 2.0**-128, 1e-40, -1e-38, FLT_MAX,
    -FLT_MAX, 3e38, -3e38, 65504.0, -65504.0, 65519.0, 1.0, -1.0, 0.5, -0.5, 127.0,
)  # fmt: skip


@hs.composite
def value_rows(draw: hs.DrawFn, kind: str) -> np.ndarray:
    """A (rows, blocks * block size) float32 array from one of several value families."""
    size = KINDS[kind].block_size
    wide = size == 256
    n_rows = draw(hs.integers(1, 2 if wide else 4), label="rows")
    length = size * draw(hs.integers(1, 2 if wide else 5), label="blocks per row")
    count = n_rows * length
    family = draw(hs.sampled_from(["floats", "ties", "special", "scaled", "repeated"]))
    if family == "floats":
        element = hs.floats(width=32, allow_nan=False, allow_infinity=False)
        values = draw(hs.lists(element, min_size=count, max_size=count))
        rows = np.array(values, dtype=np.float32)
    elif family == "ties":
        # Half-integers (and their scaled copies) land on rounding ties after scaling.
        halves = draw(hs.lists(hs.integers(-254, 254), min_size=count, max_size=count))
        scale = draw(hs.sampled_from([1.0, 2.0**-20, 2.0**-130, 2.0**100, 0.125, 3.0]))
        rows = _f32(np.array(halves, dtype=np.float64) * 0.5 * scale)
    elif family == "special":
        picks = hs.sampled_from(SPECIAL) | hs.floats(-2.0, 2.0, width=32)
        rows = np.array(draw(hs.lists(picks, min_size=count, max_size=count)), np.float32)
    elif family == "scaled":
        # Normal values times one power of two per row: tiny, huge, ordinary blocks.
        seed = draw(hs.integers(0, 2**32 - 1), label="seed")
        exponent = draw(hs.integers(-149, 127), label="exponent")
        rng = np.random.default_rng(seed)
        rows = _f32(np.ldexp(rng.standard_normal(count), exponent))
    else:
        value = draw(hs.floats(width=32, allow_nan=False, allow_infinity=False))
        rows = np.full(count, value, dtype=np.float32)
    return rows.reshape(n_rows, length)


def _f32(values: np.ndarray) -> np.ndarray:
    """float64 values rounded to float32, those beyond its range clamped to +-FLT_MAX."""
    with np.errstate(over="ignore"):
        rounded = values.astype(np.float32)
    return np.nan_to_num(rounded, posinf=FLT_MAX, neginf=-FLT_MAX)


@settings(max_examples=60, deadline=None)
@given(data=hs.data())
@pytest.mark.parametrize("kind", TYPES)
def test_hypothesis_values_match_the_reference_byte_for_byte(
    kind: str, data: hs.DataObject
) -> None:
    rows = data.draw(value_rows(kind))
    if overflows(rows, kind) or scale_overflows(rows, kind).any():
        with pytest.raises(RangeError, match="overflows"):
            ours(rows, kind)
    else:
        assert_same_bytes(rows, kind)


# -- adversarial blocks -----------------------------------------------------------------


def adversarial_blocks(kind: str) -> np.ndarray:
    """One block per row: patterns where a shortcut would differ from the reference."""
    size = KINDS[kind].block_size
    rng = np.random.default_rng(KINDS[kind].type_id)
    ramp = np.linspace(-1.0, 1.0, size)
    blocks: list[np.ndarray] = [
        np.zeros(size),
        np.full(size, -0.0),
        np.where(np.arange(size) % 3 == 0, -0.0, 0.0),
        np.where(np.arange(size) % 5 == 0, 0.0, -0.0),
        np.full(size, 1.0),
        np.full(size, -3.5),
        np.full(size, FLT_MAX),
        np.full(size, -FLT_MAX),
        np.full(size, TINY),
    ]
    # Largest magnitude of both signs, either one first.
    for first in (1.0, -1.0):
        block = ramp * 0.5
        block[3], block[size - 2] = first, -first
        blocks.append(block)
    # Every value a multiple of the Q8_0 / Q4 / Q5 step plus one half: ties after scaling.
    for top in (127.0, 8.0, 16.0, 15.0, 31.0, 1.0):
        block = (rng.integers(-2 * int(top), 2 * int(top) + 1, size) / 2.0).clip(-top, top)
        block[0] = top
        blocks.append(block)
        blocks.append(-block)
    # Blocks so small that 1 / d overflows (every shift from 2**-149 to 2**-110).
    for exponent in range(-149, -109, 3):
        blocks.append(np.ldexp(ramp, exponent))
        blocks.append(np.ldexp(np.sign(ramp), exponent))
    # max - min overflowing float32 (Q4_1, Q5_1), and values near the top.
    blocks.append(np.where(np.arange(size) % 2 == 0, FLT_MAX, -FLT_MAX))
    blocks.append(np.where(np.arange(size) % 2 == 0, 3e38, -1e38))
    blocks.append(ramp * FLT_MAX)
    # MXFP4: values at the midpoints between E2M1 levels, and maxima next to powers of 2.
    d = 0.25
    for mid in (0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0):
        block = np.full(size, mid * d)
        block[0] = 12 * d
        blocks.append(block)
        blocks.append(-block)
    for exponent in (-130, -126, -125, -20, 0, 1, 7, 100, 127):
        below = float(np.nextafter(np.float32(2.0**exponent), np.float32(0)))
        for top in (below, 2.0**exponent):
            blocks.append(ramp * top)
            blocks.append(rng.standard_normal(size) * top / 4)
    # Random magnitudes spread over the whole float32 range.
    for _ in range(40):
        blocks.append(np.ldexp(rng.standard_normal(size), rng.integers(-149, 128)))
    return _f32(np.stack(blocks))


@pytest.mark.parametrize("kind", BLOCK_TYPES)
def test_adversarial_blocks_match_the_reference(kind: str) -> None:
    """Every block whose scale fits F16 is the reference's bytes; each one whose scale
    overflows (the reference stores an infinite scale) is refused on its own."""
    blocks = adversarial_blocks(kind)
    refused = scale_overflows(blocks, kind)[:, 0]
    assert_same_bytes(blocks[~refused], kind)
    for index in np.flatnonzero(refused):
        with pytest.raises(RangeError, match=r"row 0, block 0 .* overflows F16"):
            ours(blocks[index : index + 1], kind)


@pytest.mark.parametrize("kind", TYPES)
def test_many_rows_across_chunk_boundaries(kind: str) -> None:
    # About 1.5M values: dozens of chunks, the last one partial; random scales per row.
    rng = np.random.default_rng(7)
    # Types with an F16 scale: magnitudes whose scales fit F16 (the rest are refused).
    top = 40 if kind in ("F32", "BF16", "MXFP4") else 10
    rows = rng.standard_normal((373, 4096)) * np.ldexp(1.0, rng.integers(-40, top, (373, 1)))
    rows = rows.astype(np.float32)
    if kind == "F16":
        rows = rows.clip(-60000, 60000)
    assert_same_bytes(rows, kind)


@pytest.mark.parametrize("kind", TYPES)
def test_a_row_narrower_or_wider_than_a_chunk(kind: str) -> None:
    rng = np.random.default_rng(3)
    size = KINDS[kind].block_size
    for shape in ((1, size), (3, size), (1, 256 * 1024), (2, 3 * 65536 + size)):
        rows = rng.standard_normal(shape).astype(np.float32)
        assert_same_bytes(rows, kind)


# -- NaN and infinity -------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    kind=hs.sampled_from(BLOCK_TYPES),
    bad=hs.sampled_from([np.nan, np.inf, -np.inf, -np.nan]),
    data=hs.data(),
)
def test_a_block_holding_nan_or_infinity_is_refused_with_its_position(
    kind: str, bad: float, data: hs.DataObject
) -> None:
    """The reference quantizes such a block into one that reads back as all NaN (its
    scale NaN or infinite, every code cast from NaN: zero on x86), or for MXFP4 as all
    zeros: every value of the block is lost, so strided refuses it instead."""
    size = KINDS[kind].block_size
    n_rows = data.draw(hs.integers(1, 3))
    length = size * data.draw(hs.integers(1, 3))
    rows = np.random.default_rng(0).standard_normal((n_rows, length)).astype(np.float32)
    row = data.draw(hs.integers(0, n_rows - 1))
    column = data.draw(hs.integers(0, length - 1))
    rows[row, column] = bad
    first = column // size * size
    with pytest.raises(RangeError) as raised:
        ours(rows, kind)
    message = str(raised.value)
    assert message.startswith("t: ")
    assert f"row {row}, columns {first}-{first + size - 1}" in message
    assert f"at column {column}" in message and kind in message


def test_the_first_bad_block_in_a_later_chunk_is_named() -> None:
    rows = np.ones((600, 4096), dtype=np.float32)
    rows[555, 1000] = np.inf
    rows[590, 3] = np.nan
    with pytest.raises(RangeError, match=r"w: row 555, columns 992-1023 .* at column 1000"):
        quantize(rows, "Q8_0", "w")


@pytest.mark.parametrize("kind", ["F32", "F16", "BF16"])
def test_nan_and_infinity_are_kept_in_float_types_with_the_reference_bits(kind: str) -> None:
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 1.0, -0.0], dtype=np.float32)
    payloads = np.array(
        [0x7F800001, 0xFF800001, 0x7FC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F80FFFF, 0xFFFF8000],
        dtype=np.uint32,
    ).view(np.float32)
    rows = np.concatenate([specials, payloads]).reshape(1, -1)
    assert_same_bytes(rows, kind)


@pytest.mark.parametrize(
    ("kind", "value", "column"),
    [("F16", 65520.0, 2), ("F16", -1e6, 0), ("BF16", FLT_MAX, 1), ("BF16", BF16_TIE, 2)],
)
def test_a_finite_value_that_overflows_f16_or_bf16_is_refused(
    kind: str, value: float, column: int
) -> None:
    """The reference writes infinity for it (NumPy's cast, ggml's rounding); strided
    refuses a value change that large, as its own ``convert`` does."""
    rows = np.zeros((2, 3), dtype=np.float32)
    rows[1, column] = value
    assert reference(rows, kind).view("<u2")[1, column] & 0x7FFF in (0x7C00, 0x7F80)
    with pytest.raises(RangeError, match=rf"t: element \[1, {column}\] = .* overflows {kind}"):
        ours(rows, kind)


def test_the_largest_values_that_round_to_finite_are_kept() -> None:
    f16 = np.array([[65504.0, 65519.0, -65519.0]], dtype=np.float32)
    assert_same_bytes(f16, "F16")
    top = np.array([0x7F7F7FFF, 0xFF7F7FFF, 0x7F7F0000], dtype=np.uint32).view(np.float32)
    assert_same_bytes(top.reshape(1, -1), "BF16")


# -- F16 scales that overflow -------------------------------------------------------------

# The smallest block statistic whose float32 scale reaches 65520, the midpoint between
# F16's largest finite value 65504 and 2**16, which rounds half to even: to infinity.
# Q8_0: d = amax / 127; Q4_0/Q5_0: d = max / -8 (-16); TQ: d = amax; Q4_1/Q5_1: d =
# (max - min) / 15 (31). Each product is exact in float32, so the division gives 65520.
THRESHOLDS = {
    "Q8_0": 65520.0 * 127, "Q4_0": 65520.0 * 8, "Q5_0": 65520.0 * 16, "Q4_1": 65520.0 * 15,
    "Q5_1": 65520.0 * 31, "TQ1_0": 65520.0, "TQ2_0": 65520.0,
}  # fmt: skip


def _below(value: float) -> float:
    return float(np.nextafter(np.float32(value), np.float32(0)))


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("kind", sorted(THRESHOLDS))
def test_a_scale_that_just_fits_f16_matches_and_one_that_overflows_is_refused(
    kind: str, sign: float
) -> None:
    size = KINDS[kind].block_size
    rows = np.zeros((3, 2 * size), dtype=np.float32)
    rows[:, :size] = np.linspace(-1.0, 1.0, size)
    column = size + 5
    top = THRESHOLDS[kind]
    # The largest magnitude (for Q4_1/Q5_1 the range, the minimum being 0) just below
    # the threshold: the scale rounds to 65504 and the bytes are the reference's.
    rows[2, column] = sign * _below(top) if kind[-2:] != "_1" else _below(top)
    fits = rows.copy()
    assert not scale_overflows(fits, kind).any()
    assert_same_bytes(fits, kind)
    # At the threshold the reference stores an infinite scale; strided names the block.
    rows[2, column] = sign * top if kind[-2:] != "_1" else top
    assert scale_overflows(rows, kind)[2, 1]
    with pytest.raises(RangeError) as raised:
        ours(rows, kind)
    message = str(raised.value)
    assert message.startswith(f"t: row 2, block 1 (columns {size}-{2 * size - 1}, one {kind}")
    assert "overflows F16 (largest finite 65504.0)" in message
    assert f"at column {column}" in message


@pytest.mark.parametrize("kind", ["Q4_1", "Q5_1"])
def test_a_minimum_beyond_f16_is_refused(kind: str) -> None:
    """Q4_1/Q5_1 store the block's minimum as F16 too: -65520 becomes -infinity."""
    rows = np.zeros((1, 64), dtype=np.float32)
    rows[0, 40] = _below(-65520.0)
    assert_same_bytes(rows, kind)
    rows[0, 40] = -65520.0
    assert scale_overflows(rows, kind)[0, 1] and not scale_overflows(rows, kind)[0, 0]
    with pytest.raises(RangeError, match=r"t: row 0, block 1 .* minimum m = -65520.0 overflows"):
        ours(rows, kind)


def test_mxfp4_scales_are_e8m0_and_never_overflow() -> None:
    rows = np.full((1, 32), 3e38, dtype=np.float32)
    assert_same_bytes(rows, "MXFP4")


# -- the round trip and the interface ----------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(kind=hs.sampled_from(BLOCK_TYPES), data=hs.data())
def test_strided_dequantizes_its_blocks_as_the_reference_does(
    kind: str, data: hs.DataObject
) -> None:
    rows = data.draw(value_rows(kind))
    assume(not scale_overflows(rows, kind).any())  # refused: tested above
    blocks = ours(rows, kind)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.asarray(gq.dequantize(blocks, Q[kind]), dtype=np.float32)
    info = KINDS[kind]
    got = _ggml.dequantize(info, blocks.reshape(-1), rows.shape, "t")
    assert np.array_equal(got.view(np.uint32), expected.reshape(rows.shape).view(np.uint32))


def test_the_quantizable_types_are_the_reference_block_types() -> None:
    assert frozenset(BLOCK_TYPES) == QUANTIZABLE
    assert frozenset({"F32", "F16", "BF16"}) == FLOAT_TYPES
    for kind in TYPES:
        assert (block_size(kind), row_bytes(kind, 256 * 3)) == (
            GGML_QUANT_SIZES[Q[kind]][0],
            GGML_QUANT_SIZES[Q[kind]][1] * 256 * 3 // GGML_QUANT_SIZES[Q[kind]][0],
        )


def test_f32_is_a_read_only_view_and_the_input_never_changes() -> None:
    rows = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    before = rows.copy()
    shared = quantize(rows, "F32", "t")
    assert np.shares_memory(shared, rows) and not shared.flags.writeable
    assert shared.shape == (4, 1024) and shared.tobytes() == rows.tobytes()
    for kind in TYPES:
        fresh = quantize(rows, kind, "t")
        assert kind == "F32" or not np.shares_memory(fresh, rows)
    assert np.array_equal(rows.view(np.uint32), before.view(np.uint32))


def test_empty_inputs() -> None:
    for kind in TYPES:
        assert quantize(np.zeros((0, 256), np.float32), kind, "t").shape == (
            0,
            row_bytes(kind, 256),
        )
        assert quantize(np.zeros((3, 0), np.float32), kind, "t").shape == (3, 0)


@pytest.mark.parametrize(
    ("rows", "kind", "error", "text"),
    [
        (np.zeros((2, 32), np.float32), "Q4_K", DTypeError, "cannot quantize to 'Q4_K'"),
        (np.zeros((2, 32), np.float64), "Q8_0", DTypeError, "float32 rows, not float64"),
        ([[0.0] * 32], "Q8_0", DTypeError, "not list"),
        (np.zeros((2, 48), np.float32), "Q8_0", ShapeError, "48 values .* Q8_0 blocks"),
        (np.zeros((2, 32), np.float32), "TQ2_0", ShapeError, "32 values .* TQ2_0 blocks"),
        (np.zeros(32, np.float32), "Q8_0", ShapeError, "2-D"),
        (np.zeros((64, 32), np.float32).T, "F16", ShapeError, "C-contiguous"),
    ],
)
def test_bad_arguments(rows: Any, kind: str, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        quantize(rows, kind, "t")


_CHILD = """
import sys, tracemalloc
import numpy as np
from strided.io.gguf._quantize import quantize
kind = sys.argv[1]
rows = np.ones((4096, 4096), dtype=np.float32)  # 64 MiB
rows[::3] = -0.5
tracemalloc.start()
out = quantize(rows, kind, "big")
print(tracemalloc.get_traced_memory()[1] - out.nbytes)
"""


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_1", "TQ1_0", "MXFP4", "BF16", "F16"])
def test_temporaries_stay_bounded_for_a_large_tensor(kind: str) -> None:
    # A 64 MiB tensor: beyond the output, a few MiB of scratch (the reference holds
    # several tensor-sized temporaries: 100 MiB and more).
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, kind], capture_output=True, text=True, check=True
    )
    assert int(child.stdout) < 8 * 2**20
