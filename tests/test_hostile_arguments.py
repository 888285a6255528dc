"""Hostile Python arguments: huge ints, objects whose dunders raise, read-only arrays that
can be made writable again. Each gets a DataError (or the documented TypeError), and no
tensor ever changes."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import strided as st

HUGE = 10**5000  # str() of this raises ValueError in Python 3.11+


class BadIndex:
    def __index__(self) -> int:
        raise RuntimeError("index")

    def __repr__(self) -> str:
        raise ZeroDivisionError


class BadIter:
    def __iter__(self) -> Any:
        raise RuntimeError("iter")


class BadInt(int):
    def __int__(self) -> int:
        raise RuntimeError("int")


T = st.tensor([[1, 2], [3, 4]], st.DType.I32)

CALLS: list[tuple[str, Callable[[], object]]] = [
    ("sum axis huge", lambda: T.sum(axis=HUGE)),
    ("sum axes huge", lambda: T.sum(axis=(0, HUGE))),
    ("transpose huge", lambda: T.transpose([HUGE, 0])),
    ("unravel huge", lambda: st.Shape((2, 3)).unravel(HUGE)),
    ("ravel huge", lambda: st.Shape((2, 3)).ravel([HUGE, 0])),
    ("Shape.reshape huge", lambda: st.Shape((2, 3)).reshape([HUGE])),
    ("broadcast huge", lambda: st.Shape((2, 3)).broadcast((HUGE,))),
    ("reshape huge", lambda: T.reshape(HUGE)),
    ("reshape huge -1", lambda: T.reshape([HUGE, -1])),
    ("zeros huge", lambda: st.Tensor.zeros(st.DType.I8, [HUGE])),
    ("zeros negative huge", lambda: st.Tensor.zeros(st.DType.I8, [-HUGE])),
    ("Shape bad index", lambda: st.Shape([BadIndex()])),
    ("zeros bad index", lambda: st.Tensor.zeros(st.DType.I32, [BadIndex()])),
    ("sum bad axis", lambda: T.sum(axis=BadIndex())),
    ("transpose bad axis", lambda: T.transpose([BadIndex(), 0])),
    ("reshape bad dim", lambda: st.Shape((2,)).reshape([BadIndex()])),
    ("index bad slice", lambda: T[BadIndex() : 1]),
    ("Shape bad iter", lambda: st.Shape(BadIter())),  # type: ignore[arg-type]
    ("zeros bad iter", lambda: st.Tensor.zeros(st.DType.I8, BadIter())),  # type: ignore[arg-type]
    ("ravel bad iter", lambda: st.Shape((2,)).ravel(BadIter())),  # type: ignore[arg-type]
    ("transpose bad iter", lambda: T.transpose(BadIter())),  # type: ignore[arg-type]
    ("from_numpy bad repr", lambda: st.DType.from_numpy(BadIndex())),
    ("checked_numel limit", lambda: st.Shape((4, 4)).checked_numel(limit="x")),  # type: ignore[arg-type]
    ("DType call", lambda: st.DType("x")),
    ("DType item", lambda: st.DType["x"]),
    ("reshape -4", lambda: T.reshape(-4)),
    ("reshape (-7,)", lambda: T.reshape((-7,))),
]


@pytest.mark.parametrize(("label", "call"), CALLS, ids=[label for label, _ in CALLS])
def test_only_data_errors_escape(label: str, call: Callable[[], object]) -> None:
    before = T.to_le_bytes()
    with pytest.raises(st.DataError):
        call()
    assert T.to_le_bytes() == before


def test_huge_values_print() -> None:
    assert str(st.Shape([HUGE])) == "[<16610-bit int>]"
    assert "16610-bit" in repr(st.TensorInspectionOptions(HUGE))


def test_int_subclasses_give_their_int_value() -> None:
    assert st.Scalar(st.DType.I8, BadInt(3)).value == 3


def test_dtype_call_accepts_names() -> None:
    assert st.DType("I8") is st.DType.I8
    assert st.DType("int8") is st.DType.I8


def test_read_only_arrays_are_copied_not_shared() -> None:
    array = np.zeros(4, np.uint8)
    array.flags.writeable = False
    t = st.Tensor.from_le_bytes(st.DType.U8, [4], array)
    array.flags.writeable = True
    array[0] = 7
    assert t.tolist() == [0, 0, 0, 0]


def test_storage_cannot_be_made_writable_again() -> None:
    for t in (
        st.tensor([1, 2, 3], st.DType.I32),
        st.Tensor.from_numpy(np.arange(3)),
        st.Tensor.zeros(st.DType.F32, (2,)),
        st.Tensor.from_le_bytes(st.DType.U8, [2], bytearray(2)),
        st.tensor([1, 2], st.DType.I32) + 1,
    ):
        for array in (t.numpy(), t.numpy().base):
            with pytest.raises(ValueError):
                array.flags.writeable = True


def test_bool_arrays_are_stored_canonically() -> None:
    odd = np.frombuffer(b"\x02\x01\x00", np.uint8).view(np.bool_)
    t = st.Tensor.from_numpy(odd)
    assert t.to_le_bytes() == b"\x01\x01\x00"
    assert pickle.loads(pickle.dumps(t)) == t


def test_from_le_bytes_takes_arrays_of_any_plain_dtype() -> None:
    values = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    assert st.Tensor.from_le_bytes(st.DType.BF16, [2], values).tolist() == [1.5, -2.0]
    with pytest.raises(st.FormatError):
        st.Tensor.from_le_bytes(st.DType.U64, [2], np.array([1, "x"], object))


def test_empty_tensors_report_contiguous_strides() -> None:
    assert st.Tensor.zeros(st.DType.I32, [0, 5]).strides == (5, 1)
    assert st.Tensor.from_le_bytes(st.DType.I32, [3, 0, 2], b"").strides == (2, 2, 1)


def test_tensors_over_one_bytes_object_share_storage() -> None:
    raw = bytes(8)
    a = st.Tensor.from_le_bytes(st.DType.U8, [8], raw)
    b = st.Tensor.from_le_bytes(st.DType.U8, [2, 4], raw)
    assert a.shares_storage(b)
    assert not a.shares_storage(st.Tensor.from_le_bytes(st.DType.U8, [8], bytes(8)))


def test_text_round_trips_under_numpy_raise_mode() -> None:
    values = np.array([1e-45, 1e-40, 3.0, np.nan, np.inf], np.float32)
    t = st.Tensor.from_numpy(values)
    with np.errstate(all="raise"):
        assert st.Tensor.from_json(t.to_json()) == t
        assert st.Tensor.from_dict(t.to_dict()) == t
        small = t.convert(st.DType.BF16)
        assert st.Tensor.from_json(small.to_json()) == small
