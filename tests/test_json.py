"""Strict reading: from_json / from_dict reject every malformed document with a typed error,
parse exactly (Scalar.parse is the oracle), and bound their work by the input's size."""

from __future__ import annotations

import copy
import json
import math
import re
import tracemalloc
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import strided as st

from .strategies import ALL_DTYPES, arrays, dtypes, shapes

D = st.DType
SMALL_FLOATS = [D.F16, D.BF16, D.F8_E4M3, D.F8_E5M2]


def doc(dtype: str = "I16", shape: str = "[2]", data: str = '["1","2"]') -> str:
    return f'{{"dtype":"{dtype}","shape":{shape},"data":{data}}}'


def spaced(text: str) -> str:
    """The same JSON with a space after the first brace: it skips the compact fast path."""
    return "{ " + text[1:] if text.startswith("{") else text


def oracle(dtype: st.DType, texts: list[Any]) -> tuple[str, int] | bytes:
    """Parse one entry at a time with Scalar.parse: the first error, or the array's bytes."""
    values = []
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            return ("FormatError", index)
        try:
            values.append(st.Scalar.parse(dtype, text).value)
        except st.DataError as error:
            return (type(error).__name__, index)
    wide = np.float64 if dtype.is_float else dtype.numpy
    return np.array(values, dtype=wide).astype(dtype.numpy).tobytes()


def outcome(dtype: st.DType, texts: list[Any]) -> tuple[str, int] | bytes:
    try:
        t = st.Tensor.from_dict({"dtype": dtype.name, "shape": [len(texts)], "data": texts})
    except st.DataError as error:
        found = re.match(r"data\[(\d+)\]", str(error))
        return (type(error).__name__, int(found[1]) if found else -1)
    return t.to_le_bytes()


# -- the rejection table --------------------------------------------------------------

REJECTED: list[tuple[str, object, type[st.DataError]]] = [
    ("empty text", "", st.FormatError),
    ("not an object", "[]", st.FormatError),
    ("null", "null", st.FormatError),
    ("a bare string", '"I16"', st.FormatError),
    ("missing data", '{"dtype":"I16","shape":[2]}', st.FormatError),
    ("missing dtype", '{"shape":[2],"data":["1","2"]}', st.FormatError),
    ("extra key", '{"dtype":"I16","shape":[2],"data":["1","2"],"x":1}', st.FormatError),
    (
        "repeated dtype",
        '{"dtype":"I16","dtype":"I16","shape":[2],"data":["1","2"]}',
        st.FormatError,
    ),
    ("repeated data", '{"dtype":"I16","shape":[1],"data":["1"],"data":["2"]}', st.FormatError),
    ("repeated shape", '{"dtype":"I16","shape":[3],"shape":[2],"data":["1","2"]}', st.FormatError),
    ("numpy dtype name", doc(dtype="int16"), st.DTypeError),
    ("lower-case name", doc(dtype="i16"), st.DTypeError),
    ("unknown dtype", doc(dtype="F128"), st.DTypeError),
    ("dtype number", '{"dtype":16,"shape":[2],"data":["1","2"]}', st.DTypeError),
    ("dtype null", '{"dtype":null,"shape":[2],"data":["1","2"]}', st.DTypeError),
    ("bool dim", doc(shape="[true]", data='["1"]'), st.ShapeError),
    ("float dim", doc(shape="[2.0]"), st.ShapeError),
    ("negative dim", doc(shape="[-2]"), st.ShapeError),
    ("string shape", doc(shape='"2"'), st.ShapeError),
    ("object shape", doc(shape='{"0":2}'), st.ShapeError),
    ("string dim", doc(shape='["2"]'), st.ShapeError),
    ("infinite dim", doc(shape="[1e400]"), st.ShapeError),
    ("huge claim", doc(shape="[1099511627776,1099511627776]", data="[]"), st.LimitError),
    ("huge empty claim", doc(shape="[0,1099511627776]", data="[]"), st.LimitError),
    ("rank 33", doc(shape="[" + ",".join(["1"] * 33) + "]", data='["1"]'), st.LimitError),
    ("dim with 5000 digits", doc(shape="[" + "9" * 5000 + "]"), st.FormatError),
    ("too few entries", doc(shape="[3]"), st.FormatError),
    ("too many entries", doc(shape="[1]"), st.FormatError),
    ("entries for a huge shape", doc(shape="[17179869184]", data='["1"]'), st.FormatError),
    ("numbers not strings", doc(data="[1,2]"), st.FormatError),
    ("nested data", doc(data='[["1"],["2"]]'), st.FormatError),
    ("data string", doc(data='"12"'), st.FormatError),
    ("null entry", doc(data='[null,"1"]'), st.FormatError),
    ("malformed entry", doc(data='["1","x"]'), st.FormatError),
    ("empty entry", doc(data='["1",""]'), st.FormatError),
    ("lone sign", doc(data='["1","-"]'), st.FormatError),
    ("float text for an int", doc(data='["1.0","2"]'), st.FormatError),
    ("spaces", doc(data='[" 1","2"]'), st.FormatError),
    ("underscore", doc(data='["1_0","2"]'), st.FormatError),
    ("hex", doc(data='["0x10","2"]'), st.FormatError),
    ("infinity spelled out", doc(dtype="F32", data='["infinity","2"]'), st.FormatError),
    ("I8 overflow", doc(dtype="I8", shape="[1]", data='["128"]'), st.RangeError),
    ("U8 negative", doc(dtype="U8", shape="[1]", data='["-1"]'), st.RangeError),
    ("I64 overflow", doc(dtype="I64", shape="[1]", data='["9223372036854775808"]'), st.RangeError),
    ("U64 overflow", doc(dtype="U64", shape="[1]", data='["18446744073709551616"]'), st.RangeError),
    ("F32 overflow", doc(dtype="F32", shape="[1]", data='["3.5e38"]'), st.RangeError),
    ("F64 overflow", doc(dtype="F64", shape="[1]", data='["1e999"]'), st.RangeError),
    ("F8_E4M3 infinity", doc(dtype="F8_E4M3", shape="[1]", data='["inf"]'), st.RangeError),
    ("F8_E4M3 past 464", doc(dtype="F8_E4M3", shape="[1]", data='["464.001"]'), st.RangeError),
    ("BOOL 2", doc(dtype="BOOL", shape="[1]", data='["2"]'), st.FormatError),
    ("BOOL yes", doc(dtype="BOOL", shape="[1]", data='["yes"]'), st.FormatError),
    (
        "too many digits",
        doc(dtype="I64", shape="[1]", data='["' + "1" * 5000 + '"]'),
        st.LimitError,
    ),
    (
        "too many F64 digits",
        doc(dtype="F64", shape="[1]", data='["' + "1" * 5000 + '"]'),
        st.LimitError,
    ),
    ("NaN token", doc(dtype="F32", shape="[1]", data="[NaN]"), st.FormatError),
    ("Infinity token", doc(dtype="F32", shape="[1]", data="[Infinity]"), st.FormatError),
    ("-Infinity token", doc(dtype="F32", shape="[1]", data="[-Infinity]"), st.FormatError),
    ("NaN dim", doc(shape="[NaN]"), st.FormatError),
    ("deep nesting", "[" * 100_000 + "]" * 100_000, st.FormatError),
    ("deep nesting in data", doc(data="[" * 5000 + "]" * 5000), st.FormatError),
    ("unclosed nesting", '{"a":' * 50_000, st.FormatError),
    ("trailing garbage", doc() + "x", st.FormatError),
    ("trailing comma", doc(data='["1","2",]'), st.FormatError),
    ("single quotes", "{'dtype':'I16','shape':[2],'data':['1','2']}", st.FormatError),
    ("lone surrogate entry", doc(data='["1","\\ud800"]'), st.FormatError),
    ("invalid UTF-8", doc().encode()[:10] + b"\xff" + doc().encode()[10:], st.FormatError),
    ("truncated UTF-8", doc(data='["1","\u00e9"]').encode()[:-4], st.FormatError),
    ("UTF-8 BOM", b"\xef\xbb\xbf" + doc().encode(), st.FormatError),
    ("UTF-16", doc().encode("utf-16"), st.FormatError),
    ("not text at all", 12, st.FormatError),
    ("None", None, st.FormatError),
]


@pytest.mark.parametrize(("case", "text", "error"), REJECTED, ids=[case[0] for case in REJECTED])
def test_malformed_documents_raise_typed_errors(case: str, text: object, error: type) -> None:
    assert len(REJECTED) >= 30
    with pytest.raises(error):
        st.Tensor.from_json(text)  # type: ignore[arg-type]
    if isinstance(text, str) and text.startswith("{"):
        with pytest.raises(error):  # the full parser agrees with the fast path
            st.Tensor.from_json(spaced(text))
    if isinstance(text, str):
        with pytest.raises(error):
            st.Tensor.from_json(text.encode("utf-8", "surrogatepass"))


def test_errors_name_the_entry_and_the_problem() -> None:
    with pytest.raises(st.RangeError, match=r"data\[2\].*300.*I8"):
        st.Tensor.from_json(doc(dtype="I8", shape="[3]", data='["1","2","300"]'))
    with pytest.raises(st.FormatError, match=r"data\[1\].*'1\.\.2'"):
        st.Tensor.from_json(doc(dtype="F32", data='["1","1..2"]'))
    with pytest.raises(st.FormatError, match=r"data\[0\].*int"):
        st.Tensor.from_json(doc(data='[1,"2"]'))
    with pytest.raises(st.FormatError, match=r"3 entries.*\[2\] needs 2"):
        st.Tensor.from_json(doc(data='["1","2","3"]'))
    with pytest.raises(st.DTypeError, match="did you mean 'I16'"):
        st.Tensor.from_json(doc(dtype="int16"))
    with pytest.raises(st.FormatError, match="'dtype' appears more than once"):
        st.Tensor.from_json('{"dtype":"I16","dtype":"I8","shape":[2],"data":["1","2"]}')
    with pytest.raises(st.FormatError, match="UTF-8 at byte 3"):
        st.Tensor.from_json(b'{"d\xfftype"}')


FROM_DICT_REJECTED: list[tuple[str, object, type[st.DataError]]] = [
    ("list", [1, 2], st.FormatError),
    ("None", None, st.FormatError),
    ("str", doc(), st.FormatError),
    ("non-str key", {"dtype": "I8", "shape": [1], "data": ["1"], 1: 2}, st.FormatError),
    ("DType member", {"dtype": D.I8, "shape": [1], "data": ["1"]}, st.DTypeError),
    ("tuple shape", {"dtype": "I8", "shape": (1,), "data": ["1"]}, st.ShapeError),
    ("numpy dim", {"dtype": "I8", "shape": [np.int64(1)], "data": ["1"]}, st.ShapeError),
    ("bool dim", {"dtype": "I8", "shape": [True], "data": ["1"]}, st.ShapeError),
    ("huge dim", {"dtype": "I8", "shape": [10**5000], "data": []}, st.LimitError),
    ("huge negative dim", {"dtype": "I8", "shape": [-(10**5000)], "data": []}, st.ShapeError),
    ("long shape list", {"dtype": "I8", "shape": [1] * 10**6, "data": []}, st.LimitError),
    ("tuple data", {"dtype": "I8", "shape": [1], "data": ("1",)}, st.FormatError),
    ("bytes entry", {"dtype": "I8", "shape": [1], "data": [b"1"]}, st.FormatError),
    ("float entry", {"dtype": "F32", "shape": [1], "data": [1.0]}, st.FormatError),
    ("Scalar entry", {"dtype": "I8", "shape": [1], "data": [st.Scalar(D.I8, 1)]}, st.FormatError),
    ("long data list", {"dtype": "I8", "shape": [1], "data": ["1"] * 10**6}, st.FormatError),
]


@pytest.mark.parametrize(
    ("case", "obj", "error"), FROM_DICT_REJECTED, ids=[case[0] for case in FROM_DICT_REJECTED]
)
def test_from_dict_rejects_and_leaves_input_unchanged(case: str, obj: object, error: type) -> None:
    before = copy.deepcopy(obj)
    with pytest.raises(error):
        st.Tensor.from_dict(obj)
    assert obj == before


def test_only_data_errors_escape_for_recursion_limits() -> None:
    for text in ("[" * 10**6, "{" * 10**6, '{"a":[' * 10**5):
        with pytest.raises(st.FormatError, match="no nesting"):
            st.Tensor.from_json(text)


# -- accepted documents ---------------------------------------------------------------


def test_accepts_str_bytes_bytearray_memoryview_and_any_key_order() -> None:
    want = st.tensor([1, 2], D.I16)
    text = doc()
    for source in (text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert st.Tensor.from_json(source) == want
    reordered = '{ "data" : [ "1" , "2" ] , "shape" : [ 2 ] , "dtype" : "I16" }\n'
    assert st.Tensor.from_json(reordered) == want
    escaped = '{"d\\u0074ype":"I\\u0031\\u0036","shape":[2],"data":["\\u0031","2"]}'
    assert st.Tensor.from_json(escaped) == want
    assert st.Tensor.from_json(doc(shape="[]", data='["7"]')) == st.tensor(7, D.I16)
    assert st.Tensor.from_json(doc(shape="[0,5]", data="[]")).shape == (0, 5)


def test_non_canonical_but_valid_texts_parse_exactly() -> None:
    cases = {
        D.I32: ["+5", "007", "-0", "+0", "-2147483648", "2147483647"],
        D.U8: ["-0", "+255", "000"],
        D.U64: ["+18446744073709551615", "-0", "18446744073709551615", "0"],
        D.I64: ["-9223372036854775808", "9223372036854775807", "+9223372036854775807"],
        D.F32: ["1.", ".5", "-.5", "1E5", "+1e-3", "INF", "-Inf", "+nan", "-NaN", "00.1"],
        D.BF16: ["3.4e38", "-0", "1e-45", "65504", "INF", "nan"],
        D.F8_E4M3: ["448", "464", "-464", "NaN", "0.001"],
        D.BOOL: ["TRUE", "False", "1", "0"],
    }
    for dtype, texts in cases.items():
        assert outcome(dtype, texts) == oracle(dtype, texts), dtype


@pytest.mark.parametrize("dtype", [D.F32, *SMALL_FLOATS])
def test_decimals_at_and_near_midpoints_round_once(dtype: st.DType) -> None:
    """A decimal rounded to F64 can land exactly on a midpoint of the narrower format;
    only the decimal itself can then say which way to round."""
    rng = np.random.default_rng(5)
    if dtype is D.F32:
        patterns = np.concatenate(  # all binades, subnormals, and the top and bottom
            [
                rng.integers(0, 0x7F7FFFFF, 400, dtype=np.uint32),
                rng.integers(0, 0x00800000, 100, dtype=np.uint32),
                np.array([0, 1, 0x007FFFFF, 0x00800000, 0x7F7FFFFE], dtype=np.uint32),
            ]
        )
        low = patterns.view(np.float32)
        high = np.nextafter(low, np.float32(np.inf))
    else:
        positive = 1 << (8 * dtype.itemsize - 1)  # the patterns without the sign bit
        bits = np.arange(positive, dtype=np.uint16 if dtype.itemsize == 2 else np.uint8)
        with np.errstate(invalid="ignore"):
            values = bits.view(dtype.numpy).astype(np.float64)
        values = values[np.isfinite(values)]
        low, high = values[:-1], values[1:]
    texts = []
    for a, b in zip(low.tolist(), high.tolist(), strict=True):
        middle = (Fraction(a) + Fraction(b)) / 2
        for nudge in (0, Fraction(1, 10**30), -Fraction(1, 10**30)):
            exact = middle * (1 + nudge)
            scaled = exact.numerator * 10**60 // exact.denominator
            texts.append(f"{scaled // 10**60}.{scaled % 10**60:060d}")
    texts = texts[:6000]
    assert outcome(dtype, texts) == oracle(dtype, texts)


ALPHABET = '0123456789.eE+-nNaAiIfFtrulsyx_ ,"\\'
SPECIMENS = [
    "1",
    "-0",
    "+5",
    "007",
    "1e5",
    ".5",
    "5.",
    "inf",
    "-INF",
    "nan",
    "+nan",
    "1e400",
    "1e-400",
    "true",
    "FALSE",
    "255",
    "256",
    "-129",
    "65504",
    "65520",
    "464",
    "448",
    "465",
    "-",
    "+",
    "3.4028235e38",
    "3.4028236e38",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "1" * 4301,
    "0" * 4300 + "1",
    "1.5",
    "0x10",
    "1_0",
    " 1",
    "infinity",
    "",
    '","',
    "\u0661",
]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    dtypes(),
    hs.lists(
        hs.sampled_from(SPECIMENS) | hs.text(alphabet=ALPHABET, max_size=7),
        min_size=1,
        max_size=6,
    ),
)
def test_bulk_parse_agrees_with_scalar_parse(dtype: st.DType, texts: list[str]) -> None:
    assert outcome(dtype, texts) == oracle(dtype, texts)
    text = json.dumps({"dtype": dtype.name, "shape": [len(texts)], "data": texts})
    compact = json.dumps(json.loads(text), separators=(",", ":"))
    try:
        got: object = st.Tensor.from_json(compact).to_le_bytes()
    except st.DataError as error:
        got = type(error).__name__
    expected = oracle(dtype, texts)
    assert got == (expected if isinstance(expected, bytes) else expected[0])


@pytest.mark.parametrize("dtype", [D.I64, D.U8, D.F32, D.F64])
def test_digit_cap_applies_to_entries_anywhere(dtype: st.DType) -> None:
    short = ["1"] * 3000
    for position in (0, 1, 1500, 2999):
        for text, error in (("0" * 4300 + "1", st.LimitError), ("0" * 4299 + "1", None)):
            texts = [*short[:position], text, *short[position + 1 :]]
            document = json.dumps({"dtype": dtype.name, "shape": [3000], "data": texts})
            compact = document.replace(" ", "")
            if error is None:
                assert st.Tensor.from_json(compact).to_dict()["data"][position] == str(
                    st.Scalar.parse(dtype, text)
                )
            else:
                with pytest.raises(error, match=rf"data\[{position}\]"):
                    st.Tensor.from_json(compact)


# -- fuzzing: nothing but DataError, and the fast path agrees with the full one ----------


def run(text: object) -> object:
    try:
        return st.Tensor.from_json(text)  # type: ignore[arg-type]
    except st.DataError as error:
        return type(error)


@settings(max_examples=300)
@given(hs.text(max_size=80) | hs.binary(max_size=80))
def test_arbitrary_input_raises_only_data_errors(text: str | bytes) -> None:
    result = run(text)
    assert isinstance(result, st.Tensor) or issubclass(result, st.DataError)  # type: ignore[arg-type]


json_values = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.floats() | hs.text(max_size=5),
    lambda children: (
        hs.lists(children, max_size=4)
        | hs.dictionaries(hs.sampled_from(["dtype", "shape", "data", "x"]), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(
    hs.fixed_dictionaries(
        {},
        optional={
            "dtype": hs.sampled_from([d.name for d in ALL_DTYPES]) | json_values,
            "shape": hs.lists(hs.integers(-2, 3), max_size=3) | json_values,
            "data": hs.lists(hs.sampled_from(SPECIMENS) | json_values, max_size=4) | json_values,
            "x": json_values,
        },
    )
)
def test_arbitrary_objects_into_from_dict_raise_only_data_errors(obj: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    try:
        st.Tensor.from_dict(obj)
    except st.DataError:
        pass
    assert repr(obj) == repr(before)


@hs.composite
def mutated_documents(draw: hs.DrawFn) -> bytes:
    dtype = draw(dtypes())
    t = st.Tensor.from_numpy(draw(arrays(dtype, draw(shapes(max_rank=2, max_dim=3)))))
    raw = bytearray(t.to_json().encode())
    for _ in range(draw(hs.integers(1, 4))):
        position = draw(hs.integers(0, len(raw)))
        action = draw(hs.sampled_from(["flip", "insert", "delete"]))
        byte = draw(hs.sampled_from(b'0123456789-+.eE",[]{}:nia \\x\xff'))
        if action == "insert" or position == len(raw):
            raw.insert(position, byte)
        elif action == "flip":
            raw[position] = byte
        else:
            del raw[position]
    return bytes(raw)


def same_result(a: object, b: object) -> bool:
    if isinstance(a, st.Tensor) and isinstance(b, st.Tensor):
        return a.dtype is b.dtype and a.shape == b.shape and a.to_le_bytes() == b.to_le_bytes()
    return a == b


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_mutated_documents_raise_only_data_errors_and_both_paths_agree(raw: bytes) -> None:
    fast = run(raw)
    assert isinstance(fast, st.Tensor) or issubclass(fast, st.DataError)  # type: ignore[arg-type]
    if raw.startswith(b"{"):
        assert same_result(fast, run(b"{ " + raw[1:]))


# -- bounded work -----------------------------------------------------------------------


HUGE_CLAIMS = [
    doc(dtype="F32", shape="[1099511627776,1099511627776]", data="[]"),
    doc(dtype="F64", shape="[17179869184]", data='["1"]'),
    doc(dtype="U8", shape="[16000000000]", data="[]"),
    doc(dtype="I64", shape="[4294967296,4]", data='["1","2"]'),
    doc(dtype="BOOL", shape="[0,17179869185]", data="[]"),
    doc(dtype="F32", shape="[100000000]", data='["' + "9" * 4000 + '"]'),
    "[" * 10**5,
]


@pytest.mark.parametrize("text", HUGE_CLAIMS, ids=range(len(HUGE_CLAIMS)))
def test_huge_claims_allocate_almost_nothing(text: str) -> None:
    for source in (text, spaced(text), text.encode()):
        run(source)  # warm caches, compile regexes
        tracemalloc.start()
        try:
            result = run(source)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result in (st.LimitError, st.FormatError)
        assert peak < 1 << 20


def test_parse_memory_is_proportional_to_the_document() -> None:
    t = st.Tensor.from_numpy(np.arange(20000, dtype=np.float32))
    text = t.to_json()
    st.Tensor.from_json(text)
    tracemalloc.start()
    try:
        back = st.Tensor.from_json(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert back == t
    assert peak < 16 * len(text)


def test_specials_in_bulk() -> None:
    texts = ["-inf", "inf", "nan", "-0.0", "0.0"] * 200
    for dtype in (D.F16, D.BF16, D.F32, D.F64, D.F8_E5M2):
        t = st.Tensor.from_json(json.dumps({"dtype": dtype.name, "shape": [1000], "data": texts}))
        assert t.to_dict()["data"] == texts
    with pytest.raises(st.RangeError, match=r"data\[0\]"):
        st.Tensor.from_dict({"dtype": "F8_E4M3", "shape": [1000], "data": texts})
    e4m3 = [text for text in texts if "inf" not in text]
    assert (
        st.Tensor.from_dict({"dtype": "F8_E4M3", "shape": [600], "data": e4m3}).to_dict()["data"]
        == e4m3
    )
    assert math.isnan(
        st.Tensor.from_json(doc(dtype="F32", shape="[]", data='["-nan"]')).item().value
    )
