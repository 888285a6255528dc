"""``strided diff``: crafted pairs checked field by field, exact tolerances against
``fractions``, a quantized GGUF against its F32 source, and output independent of --jobs."""

from __future__ import annotations

import json
import math
from fractions import Fraction
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
from strided._kernels.compare import Tolerance, compare
from strided.cli import main


def save(path: Path, arrays: dict[str, Any]) -> Path:
    st.save_safetensors(
        path,
        {
            name: value if isinstance(value, st.Tensor) else st.Tensor.from_numpy(value)
            for name, value in arrays.items()
        },
    )
    return path


def diff(
    capsys: pytest.CaptureFixture[str], a: Path, b: Path, *options: str
) -> tuple[int, dict[str, Any]]:
    status = main(["diff", str(a), str(b), "--json", *options])
    out = capsys.readouterr().out
    document = json.loads(out, parse_constant=lambda token: pytest.fail(f"non-JSON {token}"))
    assert document["same"] == (status == 0)
    return status, document["tensors"]


def pair(tmp_path: Path, a: dict[str, Any], b: dict[str, Any]) -> tuple[Path, Path]:
    return save(tmp_path / "a.safetensors", a), save(tmp_path / "b.safetensors", b)


def test_one_flipped_bit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    b = a.copy()
    b.view(np.uint32)[1, 2] ^= 1
    status, tensors = diff(capsys, *pair(tmp_path, {"w": a}, {"w": b}))
    assert status == 1
    assert tensors == {
        "w": {
            "status": "differs",
            "a": {"dtype": "F32", "shape": [2, 3]},
            "b": {"dtype": "F32", "shape": [2, 3]},
            "count": 1,
            "first": {
                "index": [1, 2],
                "a": str(st.Scalar(st.DType.F32, float(a[1, 2]))),
                "b": str(st.Scalar(st.DType.F32, float(b[1, 2]))),
            },
            "max_abs": abs(float(a[1, 2]) - float(b[1, 2])),
            "max_ulp": 1,
        }
    }


def test_nan_matches_nan_and_signed_zeros_are_equal_not_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = np.array([0x7FC00000, 0x7FC00000], np.uint32).view(np.float32)
    payload = np.array([0x7FC00000, 0xFFC00123], np.uint32).view(np.float32)
    zeros = np.array([0.0, -0.0, 1.0], np.float32)
    flipped = np.array([-0.0, 0.0, 1.0], np.float32)
    a, b = pair(tmp_path, {"nan": quiet, "same": quiet, "zero": zeros},
                {"nan": payload, "same": quiet, "zero": flipped})  # fmt: skip
    status, tensors = diff(capsys, a, b)
    assert status == 0
    side = {"dtype": "F32", "shape": [2]}
    assert tensors["same"] == {"status": "identical", "a": side, "b": side}
    assert tensors["nan"] == {
        "status": "equal", "a": side, "b": side, "count": 0, "max_abs": 0.0, "max_ulp": 0,
    }  # fmt: skip
    three = {"dtype": "F32", "shape": [3]}
    assert tensors["zero"] == {
        "status": "equal", "a": three, "b": three, "count": 0, "max_abs": 0.0, "max_ulp": 0,
    }  # fmt: skip


def test_bf16_against_f32_of_the_same_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.array([[1.0, -2.5, 0.15625], [np.inf, -np.inf, np.nan]], np.float32)
    narrow = values.astype(ml_dtypes.bfloat16)
    status, tensors = diff(capsys, *pair(tmp_path, {"x": values}, {"x": narrow}))
    assert status == 0
    assert tensors["x"] == {
        "status": "equal",
        "a": {"dtype": "F32", "shape": [2, 3]},
        "b": {"dtype": "BF16", "shape": [2, 3]},
        "count": 0,
        "max_abs": 0.0,
    }
    # 0.1 is not a BF16 value: the two differ by the rounding, but not with --ulp 0.
    tenth = np.array([0.1], np.float32)
    a, b = pair(tmp_path, {"x": tenth}, {"x": tenth.astype(ml_dtypes.bfloat16)})
    status, tensors = diff(capsys, a, b)
    exact = abs(Fraction(float(tenth[0])) - Fraction(float(tenth.astype(ml_dtypes.bfloat16)[0])))
    assert status == 1 and tensors["x"]["max_abs"] == float(exact)
    assert tensors["x"]["first"] == {"index": [0], "a": "0.1", "b": "0.1"}
    assert "max_ulp" not in tensors["x"]
    status, tensors = diff(capsys, a, b, "--ulp", "0")
    assert status == 0 and tensors["x"]["status"] == "equal"


def test_missing_reshaped_and_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair(
        tmp_path,
        {"gone": np.ones(2, np.float32), "shape": np.zeros((2, 3), np.float32),
         "kind": np.zeros(3, np.int32), "ok": np.ones(1, np.uint8)},
        {"new": np.ones(2, np.float32), "shape": np.zeros((3, 2), np.float32),
         "kind": np.zeros(3, np.float32), "ok": np.ones(1, np.uint8)},
    )  # fmt: skip
    status, tensors = diff(capsys, a, b)
    assert status == 1
    assert tensors == {
        "gone": {"status": "only in A", "a": {"dtype": "F32", "shape": [2]}},
        "kind": {
            "status": "kind differs",
            "a": {"dtype": "I32", "shape": [3]},
            "b": {"dtype": "F32", "shape": [3]},
        },
        "new": {"status": "only in B", "b": {"dtype": "F32", "shape": [2]}},
        "ok": {
            "status": "identical",
            "a": {"dtype": "U8", "shape": [1]},
            "b": {"dtype": "U8", "shape": [1]},
        },
        "shape": {
            "status": "shape differs",
            "a": {"dtype": "F32", "shape": [2, 3]},
            "b": {"dtype": "F32", "shape": [3, 2]},
        },
    }
    status, tensors = diff(capsys, a, b, "--name", "o*")
    assert status == 0 and list(tensors) == ["ok"]


def test_integers_compare_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = np.array([2**63 - 1, -(2**63), 2**60 + 1, 7], np.int64)
    other = np.array([2**63 - 1, -(2**63), 2**60, 7], np.int64)
    unsigned = np.array([2**63 - 1, 5, 2**60 + 1, 7], np.uint64)
    a, b = pair(tmp_path, {"i": big, "u": big}, {"i": other, "u": unsigned})
    status, tensors = diff(capsys, a, b)
    assert status == 1
    assert tensors["i"]["count"] == 1 and tensors["i"]["max_abs"] == 1.0
    assert tensors["i"]["first"] == {"index": [2], "a": str(2**60 + 1), "b": str(2**60)}
    assert "max_ulp" not in tensors["i"]
    # -2**63 against 5: the exact difference, correctly rounded.
    assert tensors["u"]["count"] == 1
    assert tensors["u"]["max_abs"] == float(2**63 + 5)
    assert tensors["u"]["first"]["a"] == str(-(2**63)) and tensors["u"]["first"]["b"] == "5"
    status, tensors = diff(capsys, a, b, "--atol", "1")
    assert tensors["i"]["status"] == "equal"
    masks = {"m": np.array([True, False])}
    a, b = pair(tmp_path, masks, {"m": np.array([1, 0], np.uint8)})
    status, tensors = diff(capsys, a, b)
    assert status == 0 and tensors["m"]["status"] == "equal"


def test_tolerances_are_exact_at_the_boundary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = np.array([1.0, 1.0, 2.0, -4.0], np.float64)
    a = np.array([1.5, np.nextafter(1.5, 2.0), 2.5, -3.0], np.float64)
    x, y = pair(tmp_path, {"t": a}, {"t": b})
    status, tensors = diff(capsys, x, y, "--atol", "0.5")
    assert tensors["t"]["count"] == 2 and tensors["t"]["first"]["index"] == [1]
    status, tensors = diff(capsys, x, y, "--rtol", "0.25")
    assert status == 1 and tensors["t"]["count"] == 2  # 1.5 vs 1 and its neighbour
    _, tensors = diff(capsys, x, y, "--atol", "0.25", "--rtol", "0.25")
    assert tensors["t"]["count"] == 1 and tensors["t"]["first"]["index"] == [1]


FINITE = hs.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=300, deadline=None)
@given(
    values=hs.lists(hs.tuples(FINITE, FINITE), min_size=1, max_size=20),
    atol=hs.sampled_from([0.0, 0.5, 1.0, 1e-3, 2.0**-1074, 1e300]) | hs.floats(0, 1e10),
    rtol=hs.sampled_from([0.0, 0.25, 1e-5, 1.0, 2.0**-60]) | hs.floats(0, 10),
    nudge=hs.booleans(),
)
def test_tolerance_test_is_exact(
    values: list[tuple[float, float]], atol: float, rtol: float, nudge: bool
) -> None:
    a = np.array([x for x, _ in values])
    b = np.array([y for _, y in values])
    if nudge:  # put some pairs exactly on the boundary
        with np.errstate(all="ignore"):
            target = b + (atol + rtol * np.abs(b))
        a = np.where(np.isfinite(target), target, a)
    tally = compare(a, st.DType.F64, b, st.DType.F64, Tolerance(atol, rtol), 0, True)
    exact_atol, exact_rtol = Fraction(atol), Fraction(rtol)
    expected = [
        abs(Fraction(x) - Fraction(y)) > exact_atol + exact_rtol * abs(Fraction(y))
        for x, y in zip(a.tolist(), b.tolist(), strict=True)
    ]
    assert tally.count == sum(expected)
    if any(expected):
        assert tally.first == expected.index(True)
    pairs = zip(a.tolist(), b.tolist(), strict=True)
    largest = max(abs(Fraction(x) - Fraction(y)) for x, y in pairs)
    try:
        rounded = float(largest)
    except OverflowError:
        rounded = math.inf
    assert tally.max_abs == rounded


@settings(max_examples=100, deadline=None)
@given(
    bits=hs.lists(hs.tuples(hs.integers(0, 2**16 - 1), hs.integers(0, 2**16 - 1)), max_size=20),
    ulp=hs.integers(0, 3),
)
def test_ulp_distance_in_the_narrower_dtype(bits: list[tuple[int, int]], ulp: int) -> None:
    a = np.array([x for x, _ in bits], np.uint16).view(np.float16)
    b = np.array([y for _, y in bits], np.uint16).view(ml_dtypes.bfloat16)
    tally = compare(a, st.DType.F16, b, st.DType.BF16, Tolerance(ulp=ulp), 0, False)
    expected = 0
    with np.errstate(all="ignore"):
        wide = zip(a.astype(np.float64).tolist(), b.astype(np.float64).tolist(), strict=True)
        for x, y in wide:
            if (math.isnan(x) and math.isnan(y)) or x == y:
                continue
            if math.isnan(x) or math.isnan(y):
                expected += 1
                continue
            # Rank both values (rounded to BF16, the fewer significand bits) among BF16s.
            rx = st.Scalar(st.DType.BF16, x) if math.isfinite(x) else x
            ry = st.Scalar(st.DType.BF16, y)
            expected += _bf16_rank(rx) - _bf16_rank(ry) not in range(-ulp, ulp + 1)
    assert tally.count == expected


def _bf16_rank(value: Any) -> int:
    number = value.value if isinstance(value, st.Scalar) else value
    raw = int(np.array([number], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0])
    magnitude = raw & 0x7FFF
    return -magnitude if raw & 0x8000 else magnitude


def test_quantized_gguf_against_its_f32_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.random.default_rng(5).standard_normal((8, 256)).astype(np.float32)
    values[3, 7] = 0.0
    source = save(tmp_path / "source.safetensors", {"w": values, "bias": values[0]})
    path = tmp_path / "q8.gguf"
    blocks = gq.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", blocks, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("bias", values[0])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    dequantized = gq.dequantize(blocks, gguf.GGMLQuantizationType.Q8_0).astype(np.float32)
    error = np.abs(values.astype(np.float64) - dequantized.astype(np.float64))
    mismatched = np.argwhere(values != dequantized)
    status, tensors = diff(capsys, source, path)
    assert status == 1
    assert tensors["bias"]["status"] == "identical"
    w = tensors["w"]
    assert w["status"] == "differs"
    assert w["a"] == {"dtype": "F32", "shape": [8, 256]}
    assert w["b"] == {"dtype": "Q8_0", "shape": [8, 256]}
    assert w["count"] == len(mismatched) > 1000
    assert w["first"]["index"] == mismatched[0].tolist()
    i, j = mismatched[0]
    assert w["first"]["b"] == str(st.Scalar(st.DType.F32, float(dequantized[i, j])))
    assert w["max_abs"] == float(error.max()) > 0
    # The GGUF carries general.architecture, the source no metadata: tensors only.
    status, tensors = diff(capsys, source, path, "--atol", repr(float(error.max())),
                           "--ignore-metadata")  # fmt: skip
    assert status == 0 and tensors["w"]["status"] == "equal"
    # Two GGUFs with the same blocks are identical.
    status, tensors = diff(capsys, path, path)
    assert status == 0 and tensors["w"]["status"] == "identical"


def test_output_is_the_same_for_any_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(6)
    big = rng.standard_normal(9 << 20).astype(np.float32)  # cut into several chunks
    other = big.copy()
    other[[5, 6 << 20, (9 << 20) - 1]] += 1
    small = {f"s{i}": rng.standard_normal(100).astype(np.float32) for i in range(20)}
    a = save(tmp_path / "a.safetensors", {"big": big, **small})
    b = save(tmp_path / "b.safetensors", {"big": other, **small, "s3": small["s3"] * 2})
    outputs = []
    for jobs in ("1", "2"):
        for form in (["--json"], []):
            assert main(["diff", str(a), str(b), "--jobs", jobs, *form]) == 1
            outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[2] and outputs[1] == outputs[3]
    entry = json.loads(outputs[0])["tensors"]["big"]
    assert entry["count"] == 3 and entry["first"]["index"] == [5]
    assert entry["max_abs"] == max(
        abs(float(other[i]) - float(big[i])) for i in (5, 6 << 20, (9 << 20) - 1)
    )
    table = outputs[1]
    assert "differs" in table and "3 of 9,437,184 differ" in table
    assert table.splitlines()[-1].endswith(
        "no metadata on either side: tensors differ, metadata matches"
    )


def test_trouble_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = save(tmp_path / "a.safetensors", {"w": np.ones(2, np.float32)})
    assert main(["diff", str(a), str(tmp_path / "missing.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.safetensors" in err
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(a.read_bytes()[:-2])
    assert main(["diff", str(a), str(broken)]) == 2
    for option in (["--atol", "-1"], ["--rtol", "nan"], ["--ulp", "x"], ["--atol", "inf"]):
        with pytest.raises(SystemExit) as caught:
            main(["diff", str(a), str(a), *option])
        assert caught.value.code == 2
    capsys.readouterr()


def test_table_names_every_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = pair(
        tmp_path,
        {"same": np.ones(2, np.float32), "gone": np.ones(1, np.float32),
         "bad\x1bname": np.ones(1, np.float32)},
        {"same": np.ones(2, np.float32), "bad\x1bname": np.zeros(1, np.float32)},
    )  # fmt: skip
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "bad\\x1bname" in out
    lines = out.splitlines()
    assert lines[0] == f"A: {a}" and lines[1] == f"B: {b}"
    assert any(line.startswith("only in A") and "gone" in line for line in lines)
    assert lines[-1] == (
        "3 tensors: 1 identical, 1 differs, 1 only in A; no metadata on either side: "
        "tensors differ, metadata matches"
    )


@pytest.mark.parametrize("dtype", [st.DType.F64, st.DType.F32, st.DType.F16, st.DType.F8_E4M3])
def test_max_ulp_counts_representable_values(dtype: st.DType) -> None:
    kind = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[dtype.itemsize]
    one = np.array([1.0], np.float64).astype(dtype.numpy)
    one_bits = int(one.view(kind)[0])
    pairs = [
        (one_bits, one_bits + 1, 1),  # neighbours
        (one_bits | 1 << (8 * dtype.itemsize - 1), one_bits, 2 * one_bits),  # -1 and 1
        (1 << (8 * dtype.itemsize - 1), 0, 0),  # -0.0 and 0.0
    ]
    for x, y, steps in pairs:
        a = np.array([x], kind).view(dtype.numpy)
        b = np.array([y], kind).view(dtype.numpy)
        tally = compare(a, dtype, b, dtype, Tolerance(), 0, True)
        assert tally.max_ulp == steps, (x, y)
