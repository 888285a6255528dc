"""DType: the closed set, names, NumPy mapping, ranges, predicates, pickling."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import strided as st

D = st.DType

NUMPY_NAMES = {
    D.BOOL: "bool",
    D.I8: "int8",
    D.I16: "int16",
    D.I32: "int32",
    D.I64: "int64",
    D.U8: "uint8",
    D.U16: "uint16",
    D.U32: "uint32",
    D.U64: "uint64",
    D.F16: "float16",
    D.BF16: "bfloat16",
    D.F32: "float32",
    D.F64: "float64",
    D.F8_E4M3: "float8_e4m3fn",
    D.F8_E5M2: "float8_e5m2",
    D.F8_E8M0: "float8_e8m0fnu",
}
NUMPY_TYPES = {
    D.BOOL: np.bool_,
    D.I8: np.int8,
    D.I16: np.int16,
    D.I32: np.int32,
    D.I64: np.int64,
    D.U8: np.uint8,
    D.U16: np.uint16,
    D.U32: np.uint32,
    D.U64: np.uint64,
    D.F16: np.float16,
    D.BF16: ml_dtypes.bfloat16,
    D.F32: np.float32,
    D.F64: np.float64,
    D.F8_E4M3: ml_dtypes.float8_e4m3fn,
    D.F8_E5M2: ml_dtypes.float8_e5m2,
    D.F8_E8M0: ml_dtypes.float8_e8m0fnu,
}


def test_the_closed_set() -> None:
    assert [d.name for d in D] == [
        "BOOL", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64",
        "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
    ]  # fmt: skip
    assert str(D.BF16) == "BF16"
    assert repr(D.I16) == "DType.I16"


@pytest.mark.parametrize("dtype", list(D), ids=str)
def test_numpy_mapping_and_itemsize(dtype: st.DType) -> None:
    assert dtype.numpy == np.dtype(NUMPY_TYPES[dtype])
    assert dtype.numpy.byteorder in "=|<"
    assert dtype.itemsize == np.dtype(NUMPY_TYPES[dtype]).itemsize
    assert D.from_numpy(dtype.numpy) is dtype
    assert D.from_numpy(NUMPY_TYPES[dtype]) is dtype


@pytest.mark.parametrize("dtype", list(D), ids=str)
def test_parse_names_any_case(dtype: st.DType) -> None:
    for name in (dtype.name, NUMPY_NAMES[dtype]):
        for variant in (name, name.lower(), name.upper(), name.swapcase()):
            assert D.parse(variant) is dtype


@pytest.mark.parametrize(
    "text",
    ["f4", "<i2", ">f8", "i8 ", " I8", "I8\n", "", "int", "float", "uint", "bf 16", "fp8",
     "f8_e4m3fn", "F8_E4M3FN", "float8", "float8_e4m3", "torch.float32", "DType.F32",
     "np.int8", "Int_8", "ｉｎｔ８", "I١6", "double", "half", "single", "b1", "?", "bool_"],
)  # fmt: skip
def test_parse_rejects(text: str) -> None:
    with pytest.raises(st.DTypeError):
        D.parse(text)


@pytest.mark.parametrize("value", [None, 8, b"I8", D.I8, np.int8, np.dtype("int8"), ["I8"]])
def test_parse_rejects_non_strings(value: object) -> None:
    with pytest.raises(st.DTypeError):
        D.parse(value)


def test_from_numpy_byte_orders_and_rejects() -> None:
    assert D.from_numpy(np.dtype(">i4")) is D.I32
    assert D.from_numpy(">f8") is D.F64
    assert D.from_numpy(np.dtype("<u2")) is D.U16
    assert D.from_numpy("float32") is D.F32
    for bad in ("complex64", "object", "U3", "S2", "V4", "M8[s]", [("a", "i4")], "nonsense",
                np.float128 if hasattr(np, "float128") else "c16", 3.5):  # fmt: skip
        with pytest.raises(st.DTypeError):
            D.from_numpy(bad)


@pytest.mark.parametrize("dtype", [d for d in D if d.is_integer], ids=str)
def test_integer_ranges(dtype: st.DType) -> None:
    info = np.iinfo(dtype.numpy)
    assert dtype.min == st.Scalar(dtype, int(info.min))
    assert dtype.max == st.Scalar(dtype, int(info.max))
    assert type(dtype.min.value) is int


@pytest.mark.parametrize("dtype", [d for d in D if d.is_float], ids=str)
def test_float_ranges(dtype: st.DType) -> None:
    info = ml_dtypes.finfo(dtype.numpy)
    assert dtype.max.value == float(info.max)
    # ml_dtypes' min is the most negative value, or for sign-less F8_E8M0 the smallest.
    assert dtype.min.value == float(info.min)
    assert dtype.max.dtype is dtype


def test_e8m0_range_is_its_powers_of_two() -> None:
    every = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    assert D.F8_E8M0.min.value == 2.0**-127 == every[0]
    assert D.F8_E8M0.max.value == 2.0**127 == every[254]
    assert np.isnan(every[255])
    assert not D.F8_E8M0.is_signed and D.F8_E8M0.is_float and D.F8_E8M0.is_storage_only
    assert D.parse("float8_e8m0fnu") is D.F8_E8M0 is D.parse("f8_e8m0")
    assert D.from_numpy(ml_dtypes.float8_e8m0fnu) is D.F8_E8M0


def test_bool_range_and_special_maxima() -> None:
    assert D.BOOL.min == st.Scalar(D.BOOL, False)
    assert D.BOOL.max == st.Scalar(D.BOOL, True)
    assert str(D.BOOL.max) == "true"
    assert D.F8_E4M3.max.value == 448.0
    assert D.F8_E5M2.max.value == 57344.0
    assert D.F16.max.value == 65504.0


def test_predicates() -> None:
    floats = {D.F16, D.BF16, D.F32, D.F64, D.F8_E4M3, D.F8_E5M2, D.F8_E8M0}
    ints = {D.I8, D.I16, D.I32, D.I64, D.U8, D.U16, D.U32, D.U64}
    signed = floats - {D.F8_E8M0} | {D.I8, D.I16, D.I32, D.I64}
    for dtype in D:
        assert dtype.is_float == (dtype in floats)
        assert dtype.is_integer == (dtype in ints)
        assert dtype.is_signed == (dtype in signed)
        assert dtype.is_storage_only == (dtype in {D.F8_E4M3, D.F8_E5M2, D.F8_E8M0})
    assert not D.BOOL.is_integer and not D.BOOL.is_float and not D.BOOL.is_signed


@pytest.mark.parametrize("dtype", list(D), ids=str)
def test_pickle_and_copy(dtype: st.DType) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(dtype, protocol)) is dtype
    assert copy.copy(dtype) is dtype
    assert copy.deepcopy(dtype) is dtype


# A fresh interpreter: what DType answers without ml_dtypes, and when ml_dtypes arrives.
_LAZY_PROBE = """
import sys
import numpy as np
from strided import DType as D, Scalar, Tensor
def loaded():
    return "ml_dtypes" in sys.modules
facts = [(d.name, d.itemsize, d.is_float, d.is_signed, d.is_storage_only) for d in D]
names = [D.parse(n) for n in ("bfloat16", "FLOAT8_E4M3FN", "float8_e5m2", "float8_e8m0fnu")]
shown = [facts[10], names, D.BF16.max, Scalar.parse(D.F8_E4M3, "-448")]
print(loaded(), *shown)
native = [D.from_numpy(D[n].numpy).name for n in ("BOOL", "U8", "I64", "F16", "F64")]
print(loaded(), native)
t = Tensor.from_numpy(np.arange(4, dtype=np.float32)).reshape(2, 2)
shown = [t.dtype, t.convert("F16").sum(), t.tolist()]
print(loaded(), *shown)
found = D.from_numpy(sys.argv[1])
print(found, loaded())
import ml_dtypes
print(D.BF16.numpy == np.dtype(ml_dtypes.bfloat16), D.F8_E8M0.numpy.name)
# Arrays, dtypes and scalars of ml_dtypes' types from the caller are taken as ever.
t = Tensor.from_numpy(np.array([1.5, -0.0], ml_dtypes.bfloat16))
print(t.dtype, t[0].item(), (t + t).dtype, D.from_numpy(np.dtype(ml_dtypes.float8_e4m3fn)))
print(Scalar(D.F32, ml_dtypes.bfloat16(0.1)).value == float(ml_dtypes.bfloat16(0.1)))
print(Scalar(D.I8, ml_dtypes.int4(-3)).value, repr(Tensor.from_numpy(np.ones(2, "float8_e8m0fnu"))))
"""


def test_ml_dtypes_is_imported_when_a_type_of_it_is_first_needed() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(st.__file__).resolve().parent.parent)}
    for name, then in (("bfloat16", "BF16"), ("float8_e5m2", "F8_E5M2")):
        result = subprocess.run(
            [sys.executable, "-c", _LAZY_PROBE, name],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        assert result.stdout.splitlines() == [
            "False ('BF16', 2, True, True, False) [DType.BF16, DType.F8_E4M3, DType.F8_E5M2, "
            "DType.F8_E8M0] 3.39e+38 -450.0",  # -448 is shortest as -450 in F8_E4M3
            "False ['BOOL', 'U8', 'I64', 'F16', 'F64']",
            "False F32 6.0 [[0.0, 1.0], [2.0, 3.0]]",
            f"{then} True",  # NumPy knows that name once ml_dtypes is imported
            "True float8_e8m0fnu",
            "BF16 1.5 BF16 F8_E4M3",
            "True",
            "-3 Tensor(dtype=F8_E8M0, shape=[2], data=[1.0, 1.0])",
        ], result.stderr
