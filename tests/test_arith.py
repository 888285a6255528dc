"""Element-wise arithmetic: integers against Python's unbounded ints, floats against NumPy."""

from __future__ import annotations

import math
import operator
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.floats import round_exact

from .strategies import arrays

D = st.DType
Op = st.BinaryOp
INTS = [D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64]
FLOATS = [D.F16, D.BF16, D.F32, D.F64]
CHUNK = 1 << 16


def bounds(dtype: st.DType) -> tuple[int, int]:
    return int(dtype.min.value), int(dtype.max.value)


def edge_values(dtype: st.DType) -> list[int]:
    lo, hi = bounds(dtype)
    found = {lo, lo + 1, hi, hi - 1, 0, 1, 2, 3, 7, hi // 2, hi // 2 + 1, lo // 2}
    if dtype.is_signed:
        found |= {-1, -2, -3}
    return sorted(v for v in found if lo <= v <= hi)


@hs.composite
def int_arrays(draw: hs.DrawFn, dtype: st.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Values mixing the edges of the range with small and random ones."""
    lo, hi = bounds(dtype)
    count = math.prod(shape)
    element = hs.one_of(
        hs.sampled_from(edge_values(dtype)),
        hs.integers(-8, 8).filter(lambda v: lo <= v),
        hs.integers(lo, hi),
    )
    values = draw(hs.lists(element, min_size=count, max_size=count))
    return np.array(values, dtype=dtype.numpy).reshape(shape)


@hs.composite
def broadcast_pair(draw: hs.DrawFn, max_rank: int = 3) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast together (dims dropped or set to 1 on either side)."""
    full = draw(hs.lists(hs.integers(0, 4), min_size=0, max_size=max_rank))
    left, right = [], []
    for dim in full:
        left.append(draw(hs.sampled_from([dim, 1])))
        right.append(draw(hs.sampled_from([dim, 1])))
    left = left[draw(hs.integers(0, len(left))) :]
    right = right[draw(hs.integers(0, len(right))) :]
    return tuple(left), tuple(right)


def py_floor_div(a: int, b: int) -> int:
    return a // b


PY_OPS: dict[st.BinaryOp, Any] = {
    Op.ADD: operator.add,
    Op.SUB: operator.sub,
    Op.MUL: operator.mul,
    Op.FLOOR_DIV: py_floor_div,
    Op.REM: operator.mod,
    Op.POW: operator.pow,
    Op.MAXIMUM: max,
    Op.MINIMUM: min,
    Op.AND: operator.and_,
    Op.OR: operator.or_,
    Op.XOR: operator.xor,
    Op.EQ: operator.eq,
    Op.NE: operator.ne,
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.GT: operator.gt,
    Op.GE: operator.ge,
}
COMPARISONS = {Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}


def expected_int(
    op: st.BinaryOp, dtype: st.DType, a: np.ndarray, b: np.ndarray
) -> tuple[type[Exception] | None, Any, tuple[int, ...] | None]:
    """The exact element-wise outcome: (error type, values, first bad index)."""
    lo, hi = bounds(dtype)
    left, right = np.broadcast_arrays(a, b)
    shape = left.shape
    values = []
    for flat, (x, y) in enumerate(
        zip(left.reshape(-1).tolist(), right.reshape(-1).tolist(), strict=True)
    ):
        index = tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()
        if op in (Op.FLOOR_DIV, Op.REM) and y == 0:
            return st.DivisionError, None, index
        if op is Op.POW and y < 0:
            return st.RangeError, None, index
        if op is Op.POW and abs(x) > 1 and y > 64:
            return st.RangeError, None, index
        value = PY_OPS[op](x, y)
        if op not in COMPARISONS and not lo <= value <= hi:
            return st.RangeError, None, index
        values.append(value)
    return (
        None,
        np.array(values, dtype=bool if op in COMPARISONS else dtype.numpy).reshape(shape),
        None,
    )


def index_in_message(index: tuple[int, ...], message: str) -> bool:
    return "[" + ", ".join(str(i) for i in index) + "]" in message


INT_OPS = [op for op in Op if op is not Op.DIV]


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from(INTS), hs.sampled_from(INT_OPS), broadcast_pair(), hs.data())
def test_integer_ops_match_python_ints(
    dtype: st.DType, op: st.BinaryOp, shapes: tuple[Any, Any], data: hs.DataObject
) -> None:
    a = data.draw(int_arrays(dtype, shapes[0]))
    b = data.draw(int_arrays(dtype, shapes[1]))
    if op is Op.POW:
        b = np.abs(b.astype(np.int64)).clip(0, 70).astype(dtype.numpy)
    ta, tb = st.Tensor.from_numpy(a), st.Tensor.from_numpy(b)
    before = (ta.to_le_bytes(), tb.to_le_bytes())
    error, values, index = expected_int(op, dtype, a, b)
    if error is not None:
        with pytest.raises(error) as caught:
            ta.binary(op, tb)
        assert index_in_message(index, str(caught.value)), str(caught.value)
    else:
        result = ta.binary(op, tb)
        assert result.dtype is (D.BOOL if op in COMPARISONS else dtype)
        assert result.shape == values.shape
        assert result.tolist() == values.tolist()
    assert (ta.to_le_bytes(), tb.to_le_bytes()) == before


@settings(max_examples=200, deadline=None)
@given(
    hs.sampled_from(INTS),
    hs.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.FLOOR_DIV, Op.REM]),
    hs.data(),
)
def test_integer_scalar_ops_on_both_sides(
    dtype: st.DType, op: st.BinaryOp, data: hs.DataObject
) -> None:
    a = data.draw(int_arrays(dtype, (data.draw(hs.integers(0, 6)),)))
    lo, hi = bounds(dtype)
    s = data.draw(hs.one_of(hs.sampled_from(edge_values(dtype)), hs.integers(lo, hi)))
    t = st.Tensor.from_numpy(a)
    function = {
        Op.ADD: operator.add,
        Op.SUB: operator.sub,
        Op.MUL: operator.mul,
        Op.FLOOR_DIV: operator.floordiv,
        Op.REM: operator.mod,
    }[op]
    for reflected in (False, True):
        left, right = (
            (np.array(s, dtype=dtype.numpy), a)
            if reflected
            else (a, np.array(s, dtype=dtype.numpy))
        )
        error, values, index = expected_int(op, dtype, left, right)
        run = (lambda: function(s, t)) if reflected else (lambda: function(t, s))
        if error is not None:
            with pytest.raises(error) as caught:
                run()
            assert index_in_message(index, str(caught.value))
        else:
            assert run().tolist() == values.tolist()
            if not reflected:
                assert t.scalar_binary(op, s).tolist() == values.tolist()
                assert t.scalar_binary(op, st.Scalar(dtype, s)).tolist() == values.tolist()


@pytest.mark.parametrize("dtype", INTS)
def test_integer_edge_cases_from_the_issue(dtype: st.DType) -> None:
    lo, hi = bounds(dtype)
    t_max = st.tensor([0, hi], dtype)
    t_min = st.tensor([0, lo], dtype)
    with pytest.raises(st.RangeError, match=r"\[1\]"):
        t_max + 1
    with pytest.raises(st.RangeError, match=r"\[1\]"):
        1 + t_max
    assert (t_max - hi).tolist() == [-hi, 0] if dtype.is_signed else True
    if dtype.is_signed:
        with pytest.raises(st.RangeError, match=r"\[1\]"):
            t_min - 1
        with pytest.raises(st.RangeError, match=r"\[1\]"):
            t_min // -1
        with pytest.raises(st.RangeError, match=r"\[1\]"):
            abs(t_min)
        with pytest.raises(st.RangeError, match=r"\[1\]"):
            t_min.neg()
        assert (t_min % -1).tolist() == [0, 0]
        assert (-t_max).tolist() == [0, -hi]
        assert abs(st.tensor([lo + 1], dtype)).tolist() == [hi]
        with pytest.raises(st.RangeError):
            t_min * -1
        assert (st.tensor([lo // 2], dtype) * 2).tolist() == [lo]
    else:
        with pytest.raises(st.RangeError, match=r"\[0\]"):
            st.tensor([0, 5], dtype) - 1
        with pytest.raises(st.RangeError, match=r"\[1\]"):
            -st.tensor([0, 1], dtype)
        assert (-st.tensor([0, 0], dtype)).tolist() == [0, 0]
        assert abs(t_max).tolist() == [0, hi]
    with pytest.raises(st.RangeError, match=r"\[1\]"):
        t_max * 2
    with pytest.raises(st.DivisionError, match=r"\[1\]"):
        t_max // st.tensor([1, 0], dtype)
    with pytest.raises(st.DivisionError):
        t_max % 0
    with pytest.raises(st.DTypeError, match="//"):
        t_max / t_max
    assert (st.tensor([2], dtype) ** 0).tolist() == [1]
    assert (st.tensor([0], dtype) ** 0).tolist() == [1]


def test_python_floor_semantics() -> None:
    a = st.tensor([7, -7, 7, -7, 0], D.I32)
    b = st.tensor([2, 2, -2, -2, -3], D.I32)
    assert (a // b).tolist() == [3, -4, -4, 3, 0]
    assert (a % b).tolist() == [1, 1, -1, -1, 0]


def test_power_rules() -> None:
    assert (
        st.tensor([-1, -1, 1, 0, 2], D.I64)
        ** st.tensor([2**62, 2**62 + 1, 2**62, 2**62, 62], D.I64)
    ).tolist() == [
        1,
        -1,
        1,
        0,
        2**62,
    ]
    assert (st.tensor([-2], D.I64) ** 63).tolist() == [-(2**63)]
    with pytest.raises(st.RangeError):
        st.tensor([2], D.I64) ** 63
    with pytest.raises(st.RangeError, match="negative exponent"):
        st.tensor([2, 2], D.I32) ** st.tensor([1, -1], D.I32)
    assert (st.tensor([3], D.U64) ** 40).tolist() == [3**40]
    with pytest.raises(st.RangeError):
        st.tensor([3], D.U64) ** 41
    with pytest.raises(st.RangeError):
        st.tensor([2], D.U64) ** (2**64 - 1)
    with pytest.raises(st.DTypeError):
        pow(st.tensor([2], D.I32), 2, 5)


@pytest.mark.parametrize("dtype", [D.I32, D.I64, D.U32, D.U64, D.I8])
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_overflow_found_past_the_first_block(dtype: st.DType, op: str) -> None:
    """Large, strided and broadcast operands cross block boundaries; the index is exact."""
    lo, hi = bounds(dtype)
    n = 3 * CHUNK + 17
    base = np.zeros(n, dtype=dtype.numpy)
    left = base.copy()
    right = base.copy()
    where = 2 * CHUNK + 5
    if op == "add":
        left[where], right[where] = hi, 1
    elif op == "sub":
        left[where], right[where] = lo, 1
    else:
        left[where], right[where] = hi, 2
    for transform in (lambda x: x, lambda x: x[::-1]):
        a = st.Tensor.from_numpy(transform(left.reshape(-1, 1)).copy())
        b = st.Tensor.from_numpy(transform(right).reshape(-1, 1).copy())
        flipped = transform(np.arange(n))[0] != 0
        position = n - 1 - where if flipped else where
        with pytest.raises(st.RangeError, match=rf"\[{position}, 0\]"):
            getattr(operator, op)(a, b)
        # Reversed views of storage (negative strides) give the same answer.
        rev_a = st.Tensor.from_numpy(left.reshape(-1, 1))[::-1]
        rev_b = st.Tensor.from_numpy(right.reshape(-1, 1))[::-1]
        with pytest.raises(st.RangeError, match=rf"\[{n - 1 - where}, 0\]"):
            getattr(operator, op)(rev_a, rev_b)
    # Without the bad element the big operation is exact and matches NumPy.
    left[where] = right[where] = 1
    wide = np.arange(n, dtype=np.int64) % 100
    a = st.Tensor.from_numpy((left + wide.astype(dtype.numpy)).reshape(-1, 1))
    b = st.Tensor.from_numpy(right[:4].reshape(1, 4))
    result = getattr(operator, op)(a, b).numpy()
    expected = getattr(operator, op)(a.numpy().astype(object), b.numpy().astype(object))
    assert result.tolist() == expected.tolist()


def test_checked_add_near_limits_without_overflow() -> None:
    """Blocks whose bounds look dangerous but whose elements are fine take the exact test."""
    lo, hi = bounds(D.I64)
    a = np.array([hi, lo, hi, 0] * (CHUNK // 2), dtype=np.int64)
    b = np.array([lo, hi, -1, hi] * (CHUNK // 2), dtype=np.int64)
    result = (st.Tensor.from_numpy(a) + st.Tensor.from_numpy(b)).numpy()
    assert result.tolist() == (a.astype(object) + b.astype(object)).tolist()
    product = st.Tensor.from_numpy(
        np.array([2**31, -(2**31), 2**32 - 1, -(2**62)], np.int64)
    ) * st.Tensor.from_numpy(np.array([2**31, 2**32, 2**31, 2], np.int64))
    assert product.tolist() == [2**62, -(2**63), (2**32 - 1) * 2**31, -(2**63)]
    with pytest.raises(st.RangeError, match=r"\[0\]"):
        st.tensor([2**32], D.U64) * st.tensor([2**32], D.U64)
    assert (st.tensor([2**32 - 1], D.U64) * st.tensor([2**32 + 1], D.U64)).tolist() == [2**64 - 1]


# -- floats --------------------------------------------------------------------------------


def as_f64(array: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):  # ml_dtypes warns when casting some NaN bit patterns
        return np.asarray(array).astype(np.float64)


def same_floats(result: np.ndarray, expected: np.ndarray) -> bool:
    r = as_f64(result)
    e = as_f64(expected)
    both_nan = np.isnan(r) & np.isnan(e)
    same = (r == e) & (np.signbit(r) == np.signbit(e))
    return bool(np.all(both_nan | same))


FLOAT_OPS = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOOR_DIV, Op.REM, Op.POW, Op.MAXIMUM, Op.MINIMUM]
NP_OPS = {
    Op.ADD: np.add,
    Op.SUB: np.subtract,
    Op.MUL: np.multiply,
    Op.DIV: np.true_divide,
    Op.FLOOR_DIV: np.floor_divide,
    Op.REM: np.remainder,
    Op.POW: np.power,
    Op.MAXIMUM: np.maximum,
    Op.MINIMUM: np.minimum,
}


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from([D.F32, D.F64]), hs.sampled_from(FLOAT_OPS), broadcast_pair(), hs.data())
def test_float_ops_match_numpy(
    dtype: st.DType, op: st.BinaryOp, shapes: Any, data: hs.DataObject
) -> None:
    a = data.draw(arrays(dtype, shapes[0]))
    b = data.draw(arrays(dtype, shapes[1]))
    with np.errstate(all="ignore"):
        expected = NP_OPS[op](a, b)
    result = st.Tensor.from_numpy(a).binary(op, st.Tensor.from_numpy(b))
    assert result.dtype is dtype and result.shape == expected.shape
    assert same_floats(result.numpy(), expected)


EXACT = {Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.DIV: operator.truediv}


@settings(max_examples=300, deadline=None)
@given(hs.sampled_from([D.F16, D.BF16]), hs.sampled_from(list(EXACT)), hs.data())
def test_half_floats_round_once(dtype: st.DType, op: st.BinaryOp, data: hs.DataObject) -> None:
    """F16/BF16 +-*/ equal the exact rational result rounded once (an independent oracle)."""
    a = data.draw(arrays(dtype, (6,)))
    b = data.draw(arrays(dtype, (6,)))
    result = as_f64(st.Tensor.from_numpy(a).binary(op, st.Tensor.from_numpy(b)).numpy())
    for x, y, got in zip(as_f64(a).tolist(), as_f64(b).tolist(), result.tolist(), strict=True):
        if not (math.isfinite(x) and math.isfinite(y)) or (op is Op.DIV and y == 0):
            with np.errstate(all="ignore"):
                ref = float(np.float32(EXACT[op](np.float32(x), np.float32(y))))
            assert (math.isnan(got) and math.isnan(ref)) or got == ref
            continue
        exact = EXACT[op](Fraction(x), Fraction(y))
        try:
            want = round_exact(dtype, exact)
        except st.RangeError:
            want = math.inf if exact > 0 else -math.inf
        if want == 0 and exact == 0:
            continue  # the sign of an exact zero follows IEEE rules, checked below
        assert got == want, (x, y, got, want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_specials(dtype: st.DType) -> None:
    t = st.tensor([1.0, -1.0, 0.0, -0.0, math.inf, math.nan], dtype)
    assert same_floats(
        (t / 0.0).numpy(), np.array([math.inf, -math.inf, math.nan, math.nan, math.inf, math.nan])
    )
    assert same_floats((-t).numpy(), np.array([-1.0, 1.0, -0.0, 0.0, -math.inf, math.nan]))
    assert same_floats(abs(t).numpy(), np.array([1.0, 1.0, 0.0, 0.0, math.inf, math.nan]))
    assert t.eq(t).tolist() == [True, True, True, True, True, False]
    assert t.ne(t).tolist() == [False, False, False, False, False, True]
    assert t.lt(0.5).tolist() == [False, True, True, True, False, False]
    assert t.ge(-1).tolist() == [True, True, True, True, True, False]
    assert t == t  # structural: NaN equals NaN
    assert t.binary(Op.MAXIMUM, st.tensor([0.0] * 6, dtype)).tolist()[-1] != t.tolist()[-1] or True
    assert math.isnan(t.binary(Op.MAXIMUM, st.tensor([0.0] * 6, dtype)).tolist()[-1])
    with pytest.raises(st.DTypeError, match="bitwise"):
        t & t


def test_half_float_overflow_is_infinity() -> None:
    assert (st.tensor([60000.0], D.F16) * 2).tolist() == [math.inf]
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert (st.tensor([big], D.BF16) + big).tolist() == [math.inf]


def test_scalars_convert_exactly_into_the_dtype() -> None:
    t = st.tensor([1.0], D.F32)
    assert (t + 0.1).tolist() == [float(np.float32(1.0) + np.float32(0.1))]
    assert (0.1 + t).tolist() == (t + 0.1).tolist()
    assert (t * "2.5").tolist() == [2.5]
    assert (2 ** st.tensor([3.0], D.F64)).tolist() == [8.0]
    assert (True + st.tensor([1], D.I8)).tolist() == [2]
    assert (np.float32(2) * t).tolist() == [2.0]
    assert (st.Scalar(D.F32, 3) - t).tolist() == [2.0]
    i = st.tensor([1, 2], D.I16)
    with pytest.raises(st.RangeError):
        i + 1.5
    with pytest.raises(st.RangeError):
        i + 70000
    with pytest.raises(st.FormatError):
        i + "x"
    with pytest.raises(st.DTypeError):
        i + st.Scalar(D.I32, 1)
    with pytest.raises(st.DTypeError):
        i + None
    with pytest.raises(st.DTypeError, match="from_numpy"):
        np.array([1, 2], dtype=np.int16) + i
    with pytest.raises(st.DTypeError, match="from_numpy"):
        i + np.array([1, 2], dtype=np.int16)
    with pytest.raises(st.DTypeError):
        i.scalar_binary(Op.ADD, [1])


# -- dtype and shape rules -------------------------------------------------------------


def test_no_implicit_promotion() -> None:
    a = st.tensor([1, 2], D.I32)
    b = st.tensor([1, 2], D.I64)
    with pytest.raises(st.DTypeError, match="I32 and I64"):
        a + b
    with pytest.raises(st.DTypeError):
        a.binary(Op.ADD, b)
    with pytest.raises(st.DTypeError):
        a.eq(st.tensor([1.0, 2.0], D.F32))
    with pytest.raises(st.DTypeError):
        a.binary(Op.ADD, [1, 2])
    with pytest.raises(st.DTypeError):
        a.binary("nope", a)
    assert a.binary("add", a).tolist() == [2, 4]


def test_bool_supports_only_logic() -> None:
    t = st.tensor([True, False, True], D.BOOL)
    u = st.tensor([True, True, False], D.BOOL)
    assert (t & u).tolist() == [True, False, False]
    assert (t | u).tolist() == [True, True, True]
    assert (t ^ u).tolist() == [False, True, True]
    assert (t ^ True).tolist() == [False, True, False]
    assert t.eq(u).tolist() == [True, False, False]
    assert t.ne(u).tolist() == [False, True, True]
    assert t.binary(Op.MAXIMUM, u).tolist() == [True, True, True]
    assert t.binary(Op.MINIMUM, u).tolist() == [True, False, False]
    for op in (
        Op.ADD,
        Op.SUB,
        Op.MUL,
        Op.DIV,
        Op.FLOOR_DIV,
        Op.REM,
        Op.POW,
        Op.LT,
        Op.LE,
        Op.GT,
        Op.GE,
    ):
        with pytest.raises(st.DTypeError, match="BOOL"):
            t.binary(op, u)
    with pytest.raises(st.DTypeError):
        t.neg()
    with pytest.raises(st.DTypeError):
        abs(t)
    with pytest.raises(st.RangeError):
        t & 2


@pytest.mark.parametrize("dtype", [D.F8_E4M3, D.F8_E5M2])
def test_storage_only_dtypes_refuse_arithmetic(dtype: st.DType) -> None:
    t = st.tensor([1.0, 2.0], dtype)
    for run in (
        lambda: t + t,
        lambda: t + 1,
        lambda: 1 - t,
        lambda: t.eq(t),
        lambda: t.lt(1.0),
        lambda: -t,
        lambda: abs(t),
        lambda: t.binary(Op.MAXIMUM, t),
    ):
        with pytest.raises(st.DTypeError, match="convert to F32"):
            run()
    assert t == t  # structural equality still works
    assert t.convert(D.F32).tolist() == [1.0, 2.0]


def test_shapes_broadcast_or_fail() -> None:
    a = st.tensor([[1], [2]], D.I32)
    b = st.tensor([10, 20, 30], D.I32)
    assert (a + b).tolist() == [[11, 21, 31], [12, 22, 32]]
    with pytest.raises(st.ShapeError, match=r"\[2\].*\[3\]|\[3\].*\[2\]"):
        st.tensor([1, 2], D.I32) + b
    huge = st.Tensor.zeros(D.U8, (2**20, 1))
    with pytest.raises(st.LimitError):
        huge + st.Tensor.zeros(D.U8, (1, 2**15))
    assert (st.Tensor.zeros(D.I32, (0, 3)) + b).shape == (0, 3)
    scalar = st.Tensor.full(D.I64, (), 5)
    assert (scalar * scalar).shape == () and (scalar * scalar).tolist() == 25


def test_results_are_new_contiguous_tensors() -> None:
    base = st.Tensor.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    view = base.transpose()
    result = view + view
    assert result.is_contiguous and not result.shares_storage(base)
    assert result.tolist() == (np.arange(12).reshape(3, 4).T * 2).tolist()
    assert base.tolist() == np.arange(12).reshape(3, 4).tolist()
    with pytest.raises(ValueError):
        result.numpy()[0, 0] = 1


def test_convert_and_binaryop_are_public() -> None:
    assert [op.name for op in st.BinaryOp] == [
        "ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "REM", "POW", "MAXIMUM", "MINIMUM",
        "EQ", "NE", "LT", "LE", "GT", "GE", "AND", "OR", "XOR",
    ]  # fmt: skip
    assert st.BinaryOp.__doc__


def test_numpy_ufuncs_do_not_bypass_the_checks() -> None:
    t = st.tensor([2**31 - 1], D.I32)
    with pytest.raises(st.RangeError):  # np.add(t, t) is t + t (see InteropMethods)
        np.add(t, t)
    with pytest.raises(st.RangeError):
        np.int32(1) + t
