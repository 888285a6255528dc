"""``Tensor.astype`` is ``convert`` under NumPy's name: the same values, the same errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

DTYPES = [dtype for dtype in st.DType if dtype.name not in ("F8_E8M0",)]


@settings(deadline=None)
@given(
    values=hs.lists(hs.floats(allow_nan=True, width=32), min_size=1, max_size=8),
    target=hs.sampled_from(DTYPES),
)
def test_astype_is_convert(values: list[float], target: st.DType) -> None:
    source = st.Tensor.from_numpy(np.array(values, dtype=np.float32))
    try:
        expected = source.convert(target)
    except st.DataError as error:
        with pytest.raises(type(error), match="^" + re.escape(str(error)) + "$"):
            source.astype(target)
        with pytest.raises(type(error)):
            source.astype(target.name)
        return
    for spelled in (target, target.name):
        found = source.astype(spelled)
        assert found.dtype is target
        assert found.to_json() == expected.to_json()


def test_astype_to_its_own_dtype_is_the_tensor_itself() -> None:
    t = st.tensor([1, 2], st.DType.I16)
    assert t.astype("I16") is t
