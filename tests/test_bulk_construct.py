"""st.tensor / from_scalars of Python numbers: the bulk path equals the value-by-value path.

The oracle converts every leaf with ``Scalar(dtype, leaf)`` and builds the tensor from
those Scalars (which always goes value by value); the tensor built from the plain
numbers must have the same bytes (NaN payloads and zero signs included), or raise the
same error class and message.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import dtypes

_NARROW = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "E4M3": ml_dtypes.float8_e4m3fn,
    "E5M2": ml_dtypes.float8_e5m2,
}


@hs.composite
def midpoints(draw: hs.DrawFn) -> float:
    """A float64 at, or one F64 step beside, the midpoint of two neighbours of a narrow float."""
    narrow = np.dtype(_NARROW[draw(hs.sampled_from(sorted(_NARROW)))])
    bits = draw(hs.integers(0, 2 ** (8 * narrow.itemsize) - 2))
    raw = np.array([bits, bits + 1], dtype=f"<u{narrow.itemsize}").view(narrow)
    with np.errstate(all="ignore"):
        low, high = raw.astype(np.float64).tolist()
    if not (math.isfinite(low) and math.isfinite(high)):
        return low
    middle = (low + high) / 2
    return draw(hs.sampled_from([middle, math.nextafter(middle, math.inf), -middle]))


def int_leaves() -> hs.SearchStrategy[int]:
    edges = [2**k + d for k in (7, 8, 15, 16, 24, 31, 32, 53, 54, 63, 64) for d in (-1, 0, 1)]
    return hs.one_of(
        hs.integers(-300, 300),
        hs.sampled_from(edges + [-e for e in edges]),
        hs.integers(-(2**70), 2**70),
    )


def float_leaves() -> hs.SearchStrategy[float]:
    return hs.one_of(
        hs.floats(allow_nan=True, allow_infinity=True),
        hs.integers(-(2**64), 2**64).map(float),
        midpoints(),
        hs.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 1e300, -1e-300, 5e-324, 65520.0, 464.0]),
        hs.integers(0, 2**64 - 1).map(lambda b: float(np.array(b, np.uint64).view(np.float64))),
    )


@hs.composite
def number_lists(draw: hs.DrawFn) -> tuple[Any, tuple[int, ...]]:
    """Nested lists (rank 1 to 3) of one kind of number, or of a mix."""
    kind = draw(hs.sampled_from(["int", "float", "bool", "int+float", "all"]))
    leaf: hs.SearchStrategy[Any] = {
        "int": int_leaves(),
        "float": float_leaves(),
        "bool": hs.booleans(),
        "int+float": hs.one_of(int_leaves(), float_leaves()),
        "all": hs.one_of(int_leaves(), float_leaves(), hs.booleans()),
    }[kind]
    shape = tuple(draw(hs.lists(hs.integers(1, 4), min_size=1, max_size=3)))
    count = math.prod(shape)
    leaves = draw(hs.lists(leaf, min_size=count, max_size=count))
    nested: Any = leaves
    for dim in reversed(shape[1:]):
        nested = [nested[i : i + dim] for i in range(0, len(nested), dim)]
    if draw(hs.booleans()):
        nested = [tuple(row) if isinstance(row, list) else row for row in nested]
    return nested, shape


def flatten(nested: Any) -> list[Any]:
    out: list[Any] = []
    stack = [nested]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


def value_by_value(dtype: st.DType, shape: tuple[int, ...], leaves: list[Any]) -> Any:
    """The tensor the exact per-leaf path builds, or the error it raises."""
    try:
        scalars = [st.Scalar(dtype, leaf) for leaf in leaves]
    except st.DataError as error:
        return error
    return st.Tensor.from_scalars(dtype, shape, scalars)


def check_same(made: Any, expected: Any) -> None:
    if isinstance(expected, st.DataError):
        assert isinstance(made, st.DataError)
        assert type(made) is type(expected) and str(made) == str(expected)
    else:
        assert isinstance(made, st.Tensor), made
        assert made.dtype is expected.dtype and made.shape == expected.shape
        assert made.to_le_bytes() == expected.to_le_bytes()


def attempt(build: Any) -> Any:
    try:
        return build()
    except st.DataError as error:
        return error


@settings(max_examples=1500, deadline=None)
@given(number_lists(), dtypes())
def test_tensor_of_numbers_equals_value_by_value(
    source: tuple[Any, tuple[int, ...]], dtype: st.DType
) -> None:
    nested, shape = source
    leaves = flatten(nested)
    expected = value_by_value(dtype, shape, leaves)
    check_same(attempt(lambda: st.tensor(nested, dtype)), expected)
    check_same(attempt(lambda: st.Tensor.from_scalars(dtype, shape, leaves)), expected)


@pytest.mark.parametrize("dtype", list(st.DType))
def test_every_dtype_on_large_homogeneous_lists(dtype: st.DType) -> None:
    rng = np.random.default_rng(3)
    floats = (rng.standard_normal((64, 50)) * 10.0 ** rng.integers(-8, 8, (64, 50))).tolist()
    ints = rng.integers(-200, 200, (64, 50)).tolist()
    bools = (rng.random((64, 50)) < 0.5).tolist()
    whole = np.round(rng.standard_normal((64, 50)) * 50).tolist()
    for nested in (floats, ints, bools, whole, [[0, 1] * 25] * 64):
        expected = value_by_value(dtype, (64, 50), flatten(nested))
        check_same(attempt(lambda nested=nested: st.tensor(nested, dtype)), expected)


def test_values_that_do_not_convert_raise_the_per_value_error() -> None:
    cases: list[tuple[Any, str]] = [
        ([1, 2, 300], "I8"),
        ([1.0, 2.5], "I32"),
        ([[1.0, math.nan]], "I64"),
        ([2**64, 1], "U64"),
        ([-1, 1], "U32"),
        ([1.0, 1e300], "F32"),
        ([1, 2**1030], "F64"),
        ([1.0, math.inf], "F8_E4M3"),
        ([0, 2], "BOOL"),
        ([0.0, 0.5], "BOOL"),
    ]
    for nested, name in cases:
        dtype = st.DType.parse(name)
        leaves = flatten(nested)
        expected = value_by_value(dtype, (len(leaves),), leaves)
        assert isinstance(expected, st.DataError)
        check_same(attempt(lambda leaves=leaves, dtype=dtype: st.tensor(leaves, dtype)), expected)


def test_big_ints_beside_floats_are_not_rounded_twice() -> None:
    # 2**53 + 2**29 + 1 rounds to F64 as 2**53 + 2**29, an F32 midpoint (ties to even,
    # down); rounded once it goes up.
    big = 2**53 + 2**29 + 1
    assert st.tensor([big, 0.5], "F32").tolist()[0] == float(np.float32(2**53 + 2**30))
    assert st.tensor([2**60 + 1, 1.0], "I64").tolist() == [2**60 + 1, 1]
    assert st.tensor([2**63, 1.0], "U64").tolist() == [2**63, 1]


def test_structure_rules_are_unchanged() -> None:
    with pytest.raises(st.ShapeError):
        st.tensor([[1.0, 2.0], [3.0]], "F32")
    with pytest.raises(st.ShapeError):
        st.tensor([[1.0, 2.0], 3.0], "F32")
    with pytest.raises(st.ShapeError):
        st.tensor([[1.0, [2.0]], [3.0, 4.0]], "F32")
    with pytest.raises(st.DTypeError):
        st.tensor([[1.0, None]], "F32")
    with pytest.raises(st.DTypeError):
        st.tensor([np.array([1.0, 2.0])], "F64")  # arrays are not nesting
    assert st.tensor([], "F32").shape == (0,)
    assert st.tensor([[], []], "I8").shape == (2, 0)
    assert st.tensor(2.5, "F32").tolist() == 2.5


class Row(list):  # type: ignore[type-arg]
    """A list subclass whose iteration differs from its storage: taken as it iterates."""

    def __iter__(self) -> Any:
        return iter([7.0] * len(self))


def test_non_plain_leaves_and_containers_take_the_exact_path() -> None:
    assert st.tensor(Row([1.0, 2.0]), "F32").tolist() == [7.0, 7.0]
    assert st.tensor([Row([1.0]), [2.0]], "F32").tolist() == [[7.0], [2.0]]
    mixed = [np.float32(0.1), 1.5, "2.5", st.Scalar(st.DType.F64, 3.0), np.int64(2**60 + 1)]
    made = st.tensor(mixed, "F64")
    assert made.tolist() == [float(np.float32(0.1)), 1.5, 2.5, 3.0, float(2**60)]


@pytest.mark.parametrize("name", ["F64", "F32", "I32"])
def test_peak_memory_is_at_most_three_times_the_result(name: str) -> None:
    rng = np.random.default_rng(0)
    if name == "I32":
        nested = rng.integers(-(2**31), 2**31, (512, 1024)).tolist()
    else:
        nested = rng.standard_normal((512, 1024)).tolist()
    tracemalloc.start()
    try:
        made = st.tensor(nested, name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert made.tolist() == nested if name != "F32" else made.numpy().dtype == np.float32
    assert peak <= 3 * made.byte_len


@pytest.mark.parametrize("name", ["F16", "F32", "BF16", "F8_E4M3", "F8_E5M2"])
def test_every_midpoint_rounds_once(name: str) -> None:
    """Midpoints between neighbours (and one F64 step to each side) round as one step."""
    dtype = st.DType.parse(name)
    width = dtype.itemsize * 8
    if width == 32:
        patterns = np.random.default_rng(4).integers(0, 2**32 - 1, 20000, dtype=np.uint64)
    else:
        patterns = np.arange(2**width - 1, dtype=np.uint64)
    bits = f"<u{dtype.itemsize}"
    with np.errstate(all="ignore"):
        low = patterns.astype(bits).view(dtype.numpy).astype(np.float64)
        high = (patterns + 1).astype(bits).view(dtype.numpy).astype(np.float64)
    ok = np.isfinite(low) & np.isfinite(high) & (np.sign(low) == np.sign(high))
    middle = (low[ok] + high[ok]) / 2
    values = np.concatenate(
        [middle, np.nextafter(middle, np.inf), np.nextafter(middle, -np.inf)]
    ).tolist()
    expected = value_by_value(dtype, (len(values),), values)
    check_same(attempt(lambda: st.tensor(values, dtype)), expected)
