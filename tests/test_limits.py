"""Limits and the one checked-shape function every constructor calls."""

from __future__ import annotations

import numpy as np
import pytest

import strided as st


def test_constants() -> None:
    assert st.MAX_RANK == 32
    assert st.MAX_ELEMENTS == 2**34
    assert st.MAX_INSPECTION_SAMPLES == 65536


@pytest.mark.parametrize(
    "shape",
    [
        (2**32, 2**32),  # wraps a 64-bit product to 0
        (2**32, 2**32, 0),
        (0, 2**40),  # empty, but the non-zero dims are still bounded
        (2**17, 2**17, 2),
        (2**34 + 1,),
        (1,) * 33,
    ],
)
def test_limit_errors_before_allocation(shape: tuple[int, ...]) -> None:
    for build in (
        lambda: st.Tensor.zeros(st.DType.U8, shape),
        lambda: st.Tensor.full(st.DType.U8, shape, 1),
        lambda: st.Tensor.from_le_bytes(st.DType.U8, shape, b""),
        lambda: st.Tensor.from_scalars(st.DType.U8, shape, []),
    ):
        with pytest.raises(st.LimitError):
            build()


def test_limits_are_inclusive() -> None:
    assert st.Tensor.zeros(st.DType.U8, (1,) * 32).ndim == 32
    assert st.Tensor.zeros(st.DType.U8, (0, 2**34)).numel == 0


@pytest.mark.parametrize("shape", [(True,), (2.0,), (-1,), ("3",), (None,), 3, "ab", None])
def test_bad_dims_are_shape_errors(shape: object) -> None:
    with pytest.raises(st.ShapeError):
        st.Tensor.zeros(st.DType.F32, shape)  # type: ignore[arg-type]


def test_index_objects_are_dims() -> None:
    assert st.Tensor.zeros(st.DType.F32, (np.int64(2), np.uint8(3))).shape == (2, 3)


def test_error_hierarchy() -> None:
    pairs = [
        (st.ShapeError, ValueError),
        (st.LimitError, ValueError),
        (st.DTypeError, TypeError),
        (st.IndexingError, IndexError),
        (st.RangeError, OverflowError),
        (st.DivisionError, ZeroDivisionError),
        (st.FormatError, ValueError),
    ]
    for error, builtin in pairs:
        assert issubclass(error, st.DataError)
        assert issubclass(error, builtin)
    assert issubclass(st.DataError, Exception)
