"""Weighted averages of checkpoints: exact weighted sums against fractions.Fraction,
the lazy checkpoint, refused inputs, and ``strided merge``."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.dtype import FLOAT_LAYOUTS, finite_range
from strided._core.floats import round_exact
from strided._kernels.exact_affine import TARGETS, weighted_sum
from strided.cli import main
from strided.jobs._merge import parse_weight

D = st.DType
_WEIGHTS = ["0.5", "0.3", "0.7", "0.25", "1", "-0.1", "0.333", "2", "1e-3", "-1.75"]


@hs.composite
def _runs(draw: hs.DrawFn, dtype: st.DType, count: int, length: int) -> list[np.ndarray]:
    """``count`` arrays of finite values: near one another (as fine-tunes of one base
    are: their averages hit midpoints), or arbitrary bit patterns (subnormals, huge)."""
    bits = draw(hs.lists(hs.integers(0, (1 << (8 * dtype.itemsize)) - 1), min_size=length,
                         max_size=length))  # fmt: skip
    base = np.array(bits, dtype=f"<u{dtype.itemsize}").view(dtype.numpy)
    with np.errstate(invalid="ignore"):  # a NaN bit pattern widens with a warning
        finite = np.isfinite(base.astype(np.float64))
    base = np.where(finite, base, np.zeros(1, dtype.numpy))
    runs = []
    for _ in range(count):
        if draw(hs.booleans()):
            steps = draw(hs.lists(hs.integers(-6, 6), min_size=length, max_size=length))
            ordinals = base.view(f"<u{dtype.itemsize}").astype(np.int64) + np.array(steps)
            ordinals = np.clip(ordinals, 0, (1 << (8 * dtype.itemsize)) - 1)
            near = ordinals.astype(f"<u{dtype.itemsize}").view(dtype.numpy)
            with np.errstate(invalid="ignore"):
                finite = np.isfinite(near.astype(np.float64))
            runs.append(np.where(finite, near, base))
        else:
            runs.append(draw(_runs(dtype, 1, length))[0] if length else base.copy())
    return runs


@settings(max_examples=200, deadline=None)
@given(hs.data())
def test_weighted_sum_is_the_exact_value_rounded_once(data: hs.DataObject) -> None:
    dtype = data.draw(hs.sampled_from(TARGETS))
    target = data.draw(hs.sampled_from(TARGETS))
    count = data.draw(hs.integers(1, 3))
    runs = data.draw(_runs(dtype, count, data.draw(hs.integers(1, 12))))
    weights = [parse_weight(data.draw(hs.sampled_from(_WEIGHTS))) for _ in range(count)]
    try:
        want = [
            round_exact(target, sum((Fraction(float(run[i])) * w for run, w in
                                     zip(runs, weights, strict=True)), Fraction(0)))
            for i in range(runs[0].size)
        ]  # fmt: skip
    except st.RangeError:
        with pytest.raises(st.RangeError, match="overflows"):
            weighted_sum(runs, [dtype] * count, weights, target)
        return
    got = weighted_sum(runs, [dtype] * count, weights, target).astype(np.float64)
    assert np.array_equal(got.view(np.uint64), np.array(want).view(np.uint64))


def test_average_of_neighbours_is_a_tie_rounded_to_even() -> None:
    """(a + b) / 2 of neighbouring BF16 values is exactly a midpoint: to even, once."""
    a = np.array([1.0, 1.0078125], dtype=D.BF16.numpy)
    b = np.array([1.0078125, 1.015625], dtype=D.BF16.numpy)
    half = Fraction(1, 2)
    got = weighted_sum([a, b], [D.BF16, D.BF16], [half, half], D.BF16).astype(np.float64)
    assert got.tolist() == [1.0, 1.015625]
    # 0.3 and 0.7 are exact tenths: 0.3 * 1 + 0.7 * (1 + 5 ulps) = 1 + 3.5 ulps, a tie.
    c = np.array([1.0 + 5 * 2**-7], dtype=D.BF16.numpy)
    tenths = [Fraction(3, 10), Fraction(7, 10)]
    got = weighted_sum([a[:1], c], [D.BF16] * 2, tenths, D.BF16).astype(np.float64)
    assert got.tolist() == [1.0 + 4 * 2**-7]  # 3.5 ulps: to even (4)


def test_parse_weight_reads_decimal_text_exactly() -> None:
    assert parse_weight("0.1") == Fraction(1, 10)
    assert parse_weight(".25") == Fraction(1, 4)
    assert parse_weight("-2e-3") == Fraction(-1, 500)
    assert parse_weight(0.1) == Fraction(0.1) != Fraction(1, 10)  # a float is its binary value
    assert parse_weight(3) == 3 and parse_weight(Fraction(2, 3)) == Fraction(2, 3)
    for bad in ("0x1", "1_0", " 1", "nan", "inf", "", True, None, float("nan")):
        with pytest.raises(st.FormatError):
            parse_weight(bad)


def _write(path: Path, tensors: dict[str, np.ndarray]) -> str:
    st.save_safetensors(str(path), {k: st.Tensor.from_numpy(v) for k, v in tensors.items()})
    return str(path)


def _pair(tmp_path: Path) -> tuple[str, str, dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    first = {
        "w": rng.standard_normal((64, 48)).astype(D.BF16.numpy),
        "v": rng.standard_normal(300).astype(np.float32),
        "ids": np.arange(7, dtype=np.int64),
        "mask": np.array([True, False]),
    }
    second = {
        "w": (first["w"].astype(np.float32) + rng.standard_normal((64, 48)) * 0.01).astype(
            D.BF16.numpy
        ),
        "v": rng.standard_normal(300).astype(np.float32),
        "ids": first["ids"].copy(),
        "mask": first["mask"].copy(),
    }
    return (
        _write(tmp_path / "a.safetensors", first),
        _write(tmp_path / "b.safetensors", second),
        first,
        second,
    )


def test_merge_linear_lazy_and_command_line_agree(tmp_path: Path) -> None:
    a, b, first, second = _pair(tmp_path)
    weights = [Fraction(3, 10), Fraction(7, 10)]
    with st.merge_linear([a, b], ["0.3", "0.7"]) as merged:
        assert list(merged) == list(st.open_checkpoint(a)) and merged.format == "merged"
        for name in ("w", "v"):
            want = [
                round_exact(
                    D.from_numpy(first[name].dtype),
                    Fraction(float(x)) * weights[0] + Fraction(float(y)) * weights[1],
                )
                for x, y in zip(first[name].reshape(-1), second[name].reshape(-1), strict=True)
            ]
            got = merged[name].convert(D.F64).numpy().reshape(-1)
            assert np.array_equal(got.view(np.uint64), np.array(want).view(np.uint64))
        assert merged["ids"].numpy().tolist() == list(range(7))
        digests = {name: merged[name].digest() for name in merged}
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"avg{jobs}.safetensors"
        assert main(["merge", a, b, "--weights", "0.3,0.7", str(out), "--jobs", jobs]) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    written = st.load_safetensors(str(tmp_path / "avg1.safetensors"))
    assert {name: t.digest() for name, t in written.items()} == digests
    # An opened checkpoint may be passed too, and stays open.
    with st.open_checkpoint(a) as opened:
        again = st.merge_linear([opened, b], [Fraction(3, 10), "0.7"])
        assert again["v"].digest() == digests["v"]
        again.close()
        assert opened["v"].shape == (300,)


def test_integer_tensors_must_be_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, _, second = _pair(tmp_path)
    second["ids"][4] = 99
    b = _write(tmp_path / "b.safetensors", second)
    merged = st.merge_linear([a, b], ["0.5", "0.5"])
    with pytest.raises(st.FormatError, match=r"tensor 'ids': element \[4\] differs"):
        merged["ids"]
    out = tmp_path / "out.safetensors"
    assert main(["merge", a, b, "--weights", "0.5,0.5", str(out)]) == 1
    assert "element [4] differs" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "error", "text"),
    [
        ("missing", st.FormatError, "'v' is not in every checkpoint"),
        ("shape", st.FormatError, r"'v' has shape \[299\]"),
        ("dtype", st.DTypeError, "'v' is F16"),
    ],
)
def test_disagreeing_checkpoints_are_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, error: type, text: str
) -> None:
    a, _, _, second = _pair(tmp_path)
    if change == "missing":
        del second["v"]
    elif change == "shape":
        second["v"] = second["v"][:299]
    else:
        second["v"] = second["v"].astype(np.float16)
    b = _write(tmp_path / "b.safetensors", second)
    with pytest.raises(error, match=text):
        st.merge_linear([a, b], ["0.5", "0.5"])
    out = tmp_path / "out.safetensors"
    assert main(["merge", a, b, "--weights", "0.5,0.5", str(out)]) == 1
    assert text.split("'")[1] in capsys.readouterr().err
    assert not out.exists()


def test_bad_weights_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, _, _ = _pair(tmp_path)
    with pytest.raises(st.FormatError, match="2 checkpoints need as many weights"):
        st.merge_linear([a, b], ["1"])
    with pytest.raises(st.LimitError, match="common denominator"):
        st.merge_linear([a, b], ["0.1234567890123", "0.000000000000000000001"])
    out = str(tmp_path / "out.safetensors")
    assert main(["merge", a, b, "--weights", "0.5", out]) == 2
    assert main(["merge", a, b, "--weights", "0.5,x", out]) == 1
    assert "not decimal text" in capsys.readouterr().err
    assert main(["merge", a, "--weights", "1", out]) == 2
    assert main(["merge", a, b, "--weights", "0.5,0.5", str(tmp_path / "out.npy")]) == 2


# -- the top of the range: finiteness from the inputs, never from an overflowed sum -------


@hs.composite
def _near_top(draw: hs.DrawFn, dtype: st.DType, length: int) -> np.ndarray:
    """Finite values of ``dtype`` near its largest finite value (a few ulps below it, half
    of it), beside ordinary and tiny ones, either sign."""
    top = np.array([float(finite_range(dtype)[1])]).astype(dtype.numpy)
    ordinal = int(top.view(f"<u{dtype.itemsize}")[0])
    values: list[float] = []
    for _ in range(length):
        kind = draw(hs.sampled_from(["top", "top", "half", "plain", "tiny", "zero"]))
        if kind == "top":
            bits = np.array([ordinal - draw(hs.integers(0, 3))], dtype=f"<u{dtype.itemsize}")
            value = float(bits.view(dtype.numpy).astype(np.float64)[0])
        elif kind == "half":
            value = float(top.astype(np.float64)[0]) / 2
        elif kind == "plain":
            value = draw(hs.sampled_from([1.0, 1.5, 3.0, 0.5]))
        elif kind == "tiny":
            value = math.ldexp(1.0, FLOAT_LAYOUTS[dtype].emin - FLOAT_LAYOUTS[dtype].mantissa_bits)
        else:
            value = 0.0
        values.append(-value if draw(hs.booleans()) else value)
    return np.array(values).astype(dtype.numpy)


@settings(max_examples=300, deadline=None)
@given(hs.data())
def test_weighted_sums_near_the_largest_value_are_exact_or_range_errors(
    data: hs.DataObject,
) -> None:
    """Sums whose F64 intermediates overflow (1e308 + 1e308 - 1e308) but whose exact
    value is finite come out exactly; exact values past the target's range are
    RangeError, never inf or NaN, against fractions.Fraction."""
    dtype = data.draw(hs.sampled_from(TARGETS))
    target = data.draw(hs.sampled_from(TARGETS))
    count = data.draw(hs.integers(2, 4))
    length = data.draw(hs.integers(1, 6))
    runs = [data.draw(_near_top(dtype, length)) for _ in range(count)]
    texts = ["1", "-1", "1", "0.5", "2", "0.3", "-0.7", "3", "1e-3"]
    weights = [parse_weight(data.draw(hs.sampled_from(texts))) for _ in range(count)]
    exact = [
        sum((Fraction(float(run[i])) * w for run, w in zip(runs, weights, strict=True)), Fraction())
        for i in range(length)
    ]
    try:
        want = [round_exact(target, value) for value in exact]
    except st.RangeError:
        with pytest.raises(st.RangeError, match="overflows"):
            weighted_sum(runs, [dtype] * count, weights, target)
        return
    got = weighted_sum(runs, [dtype] * count, weights, target).astype(np.float64)
    assert np.array_equal(got.view(np.uint64), np.array(want).view(np.uint64))


def test_f64_sums_past_the_top_are_exact_or_range_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = np.array([1e308, 1.0])
    ones = [Fraction(1), Fraction(1), Fraction(-1)]
    got = weighted_sum([big, big, big], [D.F64] * 3, ones, D.F64)
    assert got.tolist() == [1e308, 1.0]
    with pytest.raises(st.RangeError, match=r"element \[0\] overflows F64"):
        weighted_sum([big, big], [D.F64] * 2, [Fraction(1), Fraction(1)], D.F64)
    # An infinity in an input is that infinity, however the finite terms' F64 sum goes.
    inf = np.array([-np.inf, 1.0])
    got = weighted_sum([big, big, inf], [D.F64] * 3, [Fraction(1)] * 3, D.F64)
    assert got[0] == -np.inf and got[1] == 3.0
    a = _write(tmp_path / "a.safetensors", {"w": big})
    b = _write(tmp_path / "b.safetensors", {"w": big})
    with st.merge_linear([a, b, a], ["1", "1", "-1"]) as merged:
        assert merged["w"].numpy().tolist() == [1e308, 1.0]
    with st.merge_linear([a, b], ["1", "1"]) as merged, pytest.raises(st.RangeError):
        merged["w"]
    out = tmp_path / "out.safetensors"
    assert main(["merge", a, b, "--weights", "1,1", str(out)]) == 1
    assert "element [0] overflows F64" in capsys.readouterr().err
    assert not out.exists()
