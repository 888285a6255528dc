"""Canonical scalar text for whole arrays: the strings ``str(Scalar)`` gives, in bulk.

A per-element Python formatting loop costs microseconds per value, so each dtype takes
the fastest path that is still exact:

* BOOL and integers: ``orjson`` writes a NumPy array's decimal digits in C, which is the
  canonical text already; without ``orjson``, ``str`` per element (exact, slower).
* F32 and F64: ``orjson`` writes the shortest round-trip digits of each value *in its own
  width* (F32 values get F32-shortest digits), and differs from the canonical Python
  ``repr`` layout only in where it switches to exponent notation, in single-digit
  exponents (``1e-7`` for ``1e-07``) and in writing ``null`` for NaN and infinities.
  Those tokens lie in known magnitude bands, found vectorized from the values and
  rewritten one by one (typically a fraction of a percent of a weight tensor). The
  first use per dtype checks ``orjson`` against ``shortest_text`` on values of every
  decade, so a future ``orjson`` that formats differently falls back to the exact path
  instead of writing wrong text. Without ``orjson``: ``repr`` (F64), ``shortest_text``
  (F32) per element.
* F16, BF16 and the 8-bit floats: at most 65536 distinct values, so each distinct bit
  pattern present is formatted once (into a per-dtype table kept for later calls) and
  the array is a table lookup.
"""

from __future__ import annotations

import codecs
import importlib
import json
import math
import mmap
from fractions import Fraction
from typing import Any

import numpy as np

from .._core.dtype import DType, finfo
from .._core.floats import render, shortest_text


def _optional_orjson() -> Any:
    # Imported by name so that type checking does not depend on the optional extra
    # being installed; without it the exact per-element paths below are used.
    try:
        return importlib.import_module("orjson")
    except ImportError:
        return None


orjson: Any = _optional_orjson()

__all__ = ["format_flat", "json_int_texts", "json_strings", "quoted_groups"]

# Overflow, underflow and invalid casts are expected and settled explicitly here, so
# a caller's np.seterr(all="raise") must not turn them into FloatingPointError.
_QUIET = np.errstate(all="ignore")

_NUMPY_OPTION = orjson.OPT_SERIALIZE_NUMPY if orjson is not None else 0
_BOOL_TEXT = np.array(["false", "true"], dtype=object)
# orjson's layout differs from repr only for shortest-digit exponents in [-10, -5] and
# [13, 15]; these value bands contain all of them, with margin at both ends.
_BANDS = ((1e-11, 1.5e-4), (5e12, 2e16))


# Elements formatted at a time: bounds every temporary (and orjson's buffers) however
# large the array.
_CHUNK = 1 << 16


@_QUIET
def format_flat(flat: np.ndarray, dtype: DType) -> str:
    """The canonical texts of a 1-D array of ``dtype``, joined by ``","`` (``""`` if empty)."""
    if flat.size <= _CHUNK:
        return _format_chunk(flat, dtype)
    pieces = range(0, flat.size, _CHUNK)
    return ",".join([_format_chunk(flat[start : start + _CHUNK], dtype) for start in pieces])


def _format_chunk(flat: np.ndarray, dtype: DType) -> str:
    if flat.size == 0:
        return ""
    flat = np.ascontiguousarray(flat)
    if dtype is DType.BOOL or dtype.is_integer:
        text = _orjson_digits(flat)
        if text is not None:
            return text
        if dtype is DType.BOOL:
            return ",".join(_BOOL_TEXT[flat.view(np.uint8)].tolist())
        return ",".join(map(str, flat.tolist()))
    if dtype is DType.F32 or dtype is DType.F64:
        return _format_wide(flat, dtype)
    return _format_small(flat, dtype)


@_QUIET
def quoted_groups(flat: np.ndarray, dtype: DType) -> list[str]:
    """The canonical texts of a non-empty 1-D array, each in double quotes, in groups.

    Joining the groups with ``","`` and adding a quote at both ends gives the inside of
    a JSON array of the texts. The caller formats a few thousand elements at a time,
    so the groups are the only large memory.
    """
    flat = np.ascontiguousarray(flat)
    if (dtype is DType.F32 or dtype is DType.F64) and orjson is not None and _orjson_agrees(dtype):
        groups = _wide_groups(flat)
        if groups is not None:
            return groups
    return [format_flat(flat, dtype).replace(",", '","')]


def _wide_groups(flat: np.ndarray) -> list[str] | None:
    """F32/F64 through orjson: runs of canonical tokens in bulk, the others one by one.

    orjson's token is canonical outside the suspect bands (see ``_canonicalize``), so
    each run between suspect elements is quoted in bulk; a suspect element's token is
    rewritten alone. Many suspects (tiny or huge values) go through ``_canonicalize``.
    """
    indices = np.flatnonzero(_suspects(flat))
    try:
        if indices.size > flat.size // 64:
            body = _canonicalize(orjson.dumps(flat, option=_NUMPY_OPTION)[1:-1], flat)
            return [body.replace(b",", b'","').decode("ascii")]
        groups: list[str] = []
        previous = 0
        for index, value in zip(indices.tolist(), flat[indices].tolist(), strict=True):
            if index > previous:
                groups.append(_quoted_run(flat[previous:index]))
            token = orjson.dumps(flat[index : index + 1], option=_NUMPY_OPTION)[1:-1]
            groups.append(_canonical_token(token, value))
            previous = index + 1
        if previous < flat.size:
            groups.append(_quoted_run(flat[previous:]))
    except Exception:  # e.g. a big-endian host's non-native arrays: use the exact path
        return None
    return groups


def _quoted_run(run: np.ndarray) -> str:
    raw = orjson.dumps(run, option=_NUMPY_OPTION).replace(b",", b'","')
    return codecs.ascii_decode(memoryview(raw)[1:-1])[0]  # no copy of the inside first


def _suspects(flat: np.ndarray) -> np.ndarray:
    """Where orjson's token may differ from the canonical text (see ``_BANDS``)."""
    magnitude = np.abs(flat)
    suspect = ~np.isfinite(flat)
    for low, high in _BANDS:
        suspect |= (magnitude >= low) & (magnitude < high)
    return np.asarray(suspect)


# -- orjson ------------------------------------------------------------------------


def _orjson_body(flat: np.ndarray) -> bytes | None:
    """``orjson``'s text of the array without the brackets, or None when it cannot."""
    _room_for(flat.size)
    try:
        raw: bytes = orjson.dumps(flat, option=_NUMPY_OPTION)
    except Exception:  # e.g. a big-endian host's non-native arrays: use the exact path
        return None
    return raw[1:-1]


def _room_for(count: int) -> None:
    """MemoryError unless the address space has room for orjson's text of ``count`` values.

    orjson crashes the process instead of raising when an allocation fails (as under an
    address-space limit), so the room its growing buffer needs (at most 64 bytes a
    value) is mapped and released first, where a failure is an ordinary MemoryError.
    """
    _room(64 * count)


def _room(size: int) -> None:
    """MemoryError unless ``size`` bytes can be mapped now (see ``_room_for``)."""
    try:
        mmap.mmap(-1, size + mmap.PAGESIZE).close()
    except OSError:
        raise MemoryError from None


def json_strings(items: list[str]) -> str:
    """``json.dumps(items, ensure_ascii=False, separators=(",", ":"))`` of a list of str.

    A vocabulary of 262,144 tokens is written by ``orjson`` in C, several times faster
    than ``json``'s encoder: orjson escapes exactly the characters ``json`` escapes, the
    same way (``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f``, the
    other control characters as ``\\u00XX`` in lowercase hex, and nothing else: non-ASCII
    text stays as it is), which a probe checks once before trusting it. A string
    holding a lone surrogate (which orjson refuses), or no orjson, takes ``json``.
    """
    if orjson is not None and _strings_agree():
        # At most 6 bytes (``\u00XX``) per character and 3 per item (quotes, comma).
        _room(6 * sum(map(len, items)) + 3 * len(items) + 2)
        try:
            text: str = orjson.dumps(items).decode("utf-8")
            return text
        except TypeError:  # a lone surrogate: not UTF-8, so not orjson's to write
            pass
    return json.dumps(items, ensure_ascii=False, separators=(",", ":"))


def json_int_texts(items: list[int]) -> str:
    """The JSON array of the decimal texts of Python ints, each a JSON string
    (``[1, -2]`` gives ``["1","-2"]``).

    orjson writes the digits of 64-bit ints in C (its text of an int is ``str``'s);
    ints beyond 64 bits, or no orjson, take ``str`` per element.
    """
    if orjson is not None:
        _room(22 * len(items) + 2)  # at most 20 digits and a sign, and a comma, each
        try:
            digits = orjson.dumps(items)
        except TypeError:  # an int beyond 64 bits
            pass
        else:
            return '["' + codecs.ascii_decode(digits[1:-1])[0].replace(",", '","') + '"]'
    return '["' + '","'.join(map(str, items)) + '"]'


# Every character json escapes, and neighbours it does not (DEL, U+2028, non-ASCII).
_STRING_PROBE = ["".join(map(chr, range(0x80))), "\u2028\u2029\x7f\xa0é日本😀\ufeff", ""]
_STRINGS_AGREE: list[bool] = []


def _strings_agree() -> bool:
    """Whether orjson writes the probe strings exactly as ``json`` does (checked once)."""
    if not _STRINGS_AGREE:
        try:
            ours = orjson.dumps(_STRING_PROBE).decode("utf-8")
        except Exception:
            ours = None
        theirs = json.dumps(_STRING_PROBE, ensure_ascii=False, separators=(",", ":"))
        _STRINGS_AGREE.append(ours == theirs)
    return _STRINGS_AGREE[0]


def _orjson_digits(flat: np.ndarray) -> str | None:
    """``orjson``'s text of an integer or BOOL array, or None when unavailable."""
    if orjson is None:
        return None
    raw = _orjson_body(flat)
    return None if raw is None else raw.decode("ascii")


def _format_wide(flat: np.ndarray, dtype: DType) -> str:
    if orjson is not None and _orjson_agrees(dtype):
        raw = _orjson_body(flat)
        if raw is not None:
            return _canonicalize(raw, flat).decode("ascii")
    if dtype is DType.F64:
        return ",".join(map(repr, flat.tolist()))  # repr is F64's canonical text
    return ",".join([shortest_text(dtype, value) for value in flat.tolist()])


def _canonicalize(body: bytes, flat: np.ndarray) -> bytes:
    """Rewrite the tokens of orjson's ``body`` that are not canonical text."""
    indices = np.flatnonzero(_suspects(flat))
    if indices.size == 0:
        return body
    commas = np.flatnonzero(np.frombuffer(body, dtype=np.uint8) == ord(","))
    edges = np.concatenate(([-1], commas, [len(body)]))  # token i is edges[i]+1 .. edges[i+1]
    starts = (edges[indices] + 1).tolist()
    ends = edges[indices + 1].tolist()
    pieces: list[bytes] = []
    previous = 0
    for start, end, value in zip(starts, ends, flat[indices].tolist(), strict=True):
        pieces.append(body[previous:start])
        pieces.append(_canonical_token(body[start:end], value).encode("ascii"))
        previous = end
    pieces.append(body[previous:])
    return b"".join(pieces)


def _canonical_token(token: bytes, value: float) -> str:
    """The canonical text of ``value`` from orjson's shortest digits in ``token``."""
    if not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    text = token.decode("ascii")
    negative = text.startswith("-")
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    stripped = digits.lstrip("0")
    leading_zeros = len(digits) - len(stripped)
    exp10 = int(exponent or "0") + len(whole) - 1 - leading_zeros
    return render(negative, stripped.rstrip("0"), exp10)


_AGREES: dict[DType, bool] = {}


def _orjson_agrees(dtype: DType) -> bool:
    """Whether orjson + ``_canonicalize`` matches ``shortest_text`` on a probe of values.

    The probe covers every decade of the dtype's range with short and long digit
    strings, both signs, subnormals, zeros, NaN and infinities; computed once per dtype.
    """
    found = _AGREES.get(dtype)
    if found is None:
        probe = _probe_values(dtype)
        try:
            raw = orjson.dumps(probe, option=_NUMPY_OPTION)
            texts = _canonicalize(raw[1:-1], probe).decode("ascii").split(",")
            found = texts == [shortest_text(dtype, value) for value in probe.tolist()]
        except Exception:
            found = False
        _AGREES[dtype] = found
    return found


def _probe_values(dtype: DType) -> np.ndarray:
    info = np.finfo(dtype.numpy)
    low = math.floor(math.log10(float(info.smallest_subnormal)))
    high = math.ceil(math.log10(float(info.max)))
    with np.errstate(over="ignore", under="ignore"):
        decades = np.array([float(f"1e{e}") for e in range(low, high + 1)], dtype=np.float64)
        mantissas = np.array([1.0, 1.5, 1.2345678901234567, 9.999999, 9.5])
        grid = (decades[:, None] * mantissas[None, :]).ravel().astype(dtype.numpy)
    specials = np.array(
        [
            0.0,
            -0.0,
            np.nan,
            np.inf,
            -np.inf,
            info.max,
            info.smallest_normal,
            info.smallest_subnormal,
        ],
        dtype=dtype.numpy,
    )
    return np.concatenate([grid, -grid, specials])


# -- 8- and 16-bit floats: a table of the distinct values ------------------------------


_TABLES: dict[DType, tuple[np.ndarray, np.ndarray]] = {}


def _format_small(flat: np.ndarray, dtype: DType) -> str:
    bits_type = np.uint16 if dtype.itemsize == 2 else np.uint8
    bits = flat.view(bits_type)
    table, filled = _TABLES.setdefault(
        dtype,
        (
            np.empty(1 << (8 * dtype.itemsize), dtype=object),
            np.zeros(1 << (8 * dtype.itemsize), dtype=bool),
        ),
    )
    present = np.flatnonzero(np.bincount(bits, minlength=table.size))
    missing = present[~filled[present]]
    if missing.size:
        with np.errstate(invalid="ignore"):  # ml_dtypes warns when casting NaN patterns
            values = missing.astype(bits_type).view(dtype.numpy).astype(np.float64).tolist()
        if dtype is DType.F8_E8M0:  # its text is F64's (it is read through F64)
            texts = [shortest_text(dtype, value) for value in values]
        else:
            precision, emin = _small_format(dtype)
            texts = [_small_text(value, precision, emin) for value in values]
        table[missing] = texts
        filled[missing] = True
    return ",".join(table[bits].tolist())


def _small_format(dtype: DType) -> tuple[int, int]:
    """(significand bits including the implicit one, exponent of the smallest normal)."""
    info = finfo(dtype)
    return int(info.nmant) + 1, int(info.minexp)


def _small_text(value: float, precision: int, emin: int) -> str:
    if not math.isfinite(value) or value == 0.0:
        if value != value:
            return "nan"
        if value == 0.0:
            return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
        return "inf" if value > 0 else "-inf"
    digits, exp10 = _shortest_digits(abs(value), precision, emin)
    return render(value < 0, digits, exp10)


def _shortest_digits(value: float, precision: int, emin: int) -> tuple[str, int]:
    """The fewest significant digits that round back to ``value`` (> 0) in the format.

    The decimals that round to ``value`` form an interval around it (half a step to each
    neighbour; the ends belong to it when ``value``'s significand is even, as ties go
    to even). For each digit count, Python's correctly rounded formatting gives the
    nearest decimal; only when ``value`` is a power of two (a narrower gap below) can
    the nearest miss while the next one up fits.
    """
    lead = math.frexp(value)[1] - 1
    quantum = max(lead, emin) - precision + 1
    step = math.ldexp(1.0, quantum)
    significand = int(math.ldexp(value, -quantum))
    power_of_two = significand == 1 << (precision - 1) and lead > emin
    below = step / 2 if power_of_two else step
    low, high = value - below / 2, value + step / 2
    ends_included = significand % 2 == 0
    for count in range(1, 18):
        text = f"{value:.{count - 1}e}"
        if _inside(text, low, high, ends_included):
            return _digits_of(text)
        if power_of_two and float(text) < value:
            mantissa, _, exponent = text.partition("e")
            up = f"{int(mantissa.replace('.', '')) + 1}e{int(exponent) - count + 1}"
            if _inside(up, low, high, ends_included):
                return _digits_of(_normal(up))
    raise AssertionError("unreachable: 17 digits identify every float")


def _normal(text: str) -> str:
    """``"<int>e<exp>"`` as ``"d.ddde<exp>"``."""
    digits, _, exponent = text.partition("e")
    return f"{digits[0]}.{digits[1:]}e{int(exponent) + len(digits) - 1}"


def _inside(text: str, low: float, high: float, ends_included: bool) -> bool:
    # float() rounds correctly and monotonically, so a result strictly between the
    # ends proves the decimal is too; only a result equal to an end needs exact math.
    nearest = float(text)
    if low < nearest < high:
        return True
    if nearest != low and nearest != high:
        return False
    exact = Fraction(text)
    if exact in (low, high):
        return ends_included
    return low < exact < high


def _digits_of(text: str) -> tuple[str, int]:
    mantissa, _, exponent = text.partition("e")
    return mantissa.replace(".", "").rstrip("0"), int(exponent)
