"""Exact dtype conversion, and the vectorized rounding helpers arithmetic shares.

Every value of every dtype is exactly a float64 or a 64-bit integer, so conversions are
"exact source value, rounded once into the target". NumPy rounds float64 to float32 and
float16 correctly (one step), but ml_dtypes narrows float64 to bfloat16 and the FP8
formats through float32, which can round twice. ``round_to_float`` avoids that by
rounding to float32 *to odd* first (a sticky last bit that keeps "above or below the
midpoint" information), after which one nearest-even step to any format of at most 22
significand bits is exact. Integers wider than the target significand are rounded with
integer arithmetic, never through a float.
"""

from __future__ import annotations

import numpy as np

from .._core.dtype import DType, finite_range
from .._core.errors import RangeError
from .._core.floats import significand_bits
from .checked import first_index, int_range

__all__ = ["cast", "convert_array", "narrow", "round_to_float", "widen"]

_F8 = (DType.F8_E4M3, DType.F8_E5M2)
# Float pairs where every source value (subnormals and infinities included) is a target
# value, so a plain cast is exact. F8_E8M0 into anything else takes the checked path
# (its 2**-127 is below F16's range).
_WIDENING = frozenset(
    {(DType.F16, DType.F32), (DType.F16, DType.F64), (DType.BF16, DType.F32)}
    | {(DType.BF16, DType.F64), (DType.F32, DType.F64)}
    | {(f8, wide) for f8 in _F8 for wide in (DType.F16, DType.BF16, DType.F32, DType.F64)}
    | {(DType.F8_E8M0, DType.F32), (DType.F8_E8M0, DType.F64)}
)

# float16 -> float32 through a 65536-entry table: NumPy's own half conversion is scalar
# code, and a gather is about twice as fast.
_HALF_TABLE = (
    np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
)
_HALF_TABLE.flags.writeable = False


def cast(array: np.ndarray, dtype: object) -> np.ndarray:
    """``array.astype(dtype)`` without NumPy's warnings (ml_dtypes warns on some NaN bits)."""
    with np.errstate(all="ignore"):
        return array.astype(dtype)  # type: ignore[call-overload, no-any-return]


def widen(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Exact float32 copy of an F16/BF16/FP8 array (F32/F64 arrays are returned as is)."""
    if dtype is DType.F16:
        return np.take(_HALF_TABLE, array.view(np.uint16))
    if dtype in (DType.F32, DType.F64):
        return array
    return cast(array, np.float32)


def narrow(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Round a float32 array once (nearest-even) into F16/BF16; overflow gives infinity."""
    with np.errstate(all="ignore"):
        return array.astype(dtype.numpy)


def round_to_float(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Round exact float64 values (or any integers) once, nearest-even, into float ``dtype``.

    Overflow gives infinity (NaN for F8_E4M3, which has no infinity); callers that must
    refuse overflow check with ``_overflow_mask``.
    """
    if values.dtype.kind in "iub":
        if values.dtype.kind == "b":
            return values.astype(dtype.numpy)
        values = _round_integers(values, significand_bits(dtype))
    with np.errstate(all="ignore"):
        if dtype in (DType.F64, DType.F32, DType.F16):
            return values.astype(dtype.numpy)  # NumPy rounds these in one step
        return _round_to_odd_f32(values).astype(dtype.numpy)


def _round_to_odd_f32(values: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: exact values stay, inexact ones get an odd last bit."""
    nearest = values.astype(np.float32)
    inexact = nearest.astype(np.float64) != values
    inexact &= (nearest.view(np.uint32) & 1) == 0
    inexact &= ~np.isnan(values)
    if np.any(inexact):
        bits = nearest.view(np.uint32).copy()
        # Nearest-even landed on an even neighbour; the odd one is a step toward the value.
        away = np.abs(values) > np.abs(nearest.astype(np.float64))
        step = np.where(away, np.uint32(1), np.uint32(0xFFFFFFFF))
        bits[inexact] += step[inexact]
        nearest = bits.view(np.float32)
    return nearest


def _round_integers(values: np.ndarray, precision: int) -> np.ndarray:
    """Integers rounded to ``precision`` significant bits (nearest-even), as exact float64."""
    if values.size == 0:
        return values.astype(np.float64)
    small = 1 << precision
    if int(np.min(values)) >= -small and int(np.max(values)) <= small:
        return values.astype(np.float64)  # exact already
    negative = values < 0
    magnitude = values.astype(np.uint64)
    magnitude = np.where(negative, np.uint64(0) - magnitude, magnitude)
    # Bit length: float64's exponent, corrected where the conversion rounded up to 2**k.
    length = np.frexp(magnitude.astype(np.float64))[1].astype(np.int64)
    one = np.uint64(1)
    top = np.maximum(length - 1, 0).astype(np.uint64)
    length -= ((magnitude >> top) == 0) & (length > 0)
    shift = np.maximum(length - precision, 0).astype(np.uint64)
    kept = magnitude >> shift
    rest = magnitude & ((one << shift) - one)
    half = (one << shift) >> one
    up = (rest > half) | ((rest == half) & (half > 0) & ((kept & one) == one))
    rounded = np.ldexp((kept + up).astype(np.float64), shift.astype(np.int64))
    return np.asarray(np.where(negative, -rounded, rounded))


def _overflow_mask(source: np.ndarray, rounded: np.ndarray, dtype: DType) -> np.ndarray:
    """Where a non-NaN source value did not land on a finite value of ``dtype``.

    F8_E4M3 has no infinity: rounding past it (beyond 464, or infinity) gives NaN.
    """
    landed = cast(rounded, np.float32) if rounded.dtype.itemsize < 4 else rounded
    if source.dtype.kind != "f":
        return np.asarray(~np.isfinite(landed))
    if dtype is DType.F8_E4M3:
        return np.asarray(~np.isnan(source) & np.isnan(landed))
    return np.asarray(np.isfinite(source) & np.isinf(landed))


def convert_array(array: np.ndarray, source: DType, target: DType) -> np.ndarray:
    """``array`` (of ``source``) converted into ``target`` under the exactness rules.

    To integer or BOOL targets the value must be exactly representable (RangeError
    otherwise: 1.5, NaN, out-of-range values, 2 into BOOL). To float targets values round
    to nearest-even once; a finite value that overflows is RangeError.
    """
    if array.size == 0:
        return np.empty(array.shape, dtype=target.numpy)
    if target.is_float:
        return _to_float(array, source, target)
    if source.is_float:
        return _float_to_int(array, source, target)
    return _int_to_int(array, source, target)


def _to_float(array: np.ndarray, source: DType, target: DType) -> np.ndarray:
    if (source, target) in _WIDENING:
        return cast(array, target.numpy)
    if target is DType.F8_E8M0:
        return _to_e8m0(array, source)
    exact = cast(array, np.float64) if source.is_float else array
    rounded = round_to_float(exact, target)
    bad = _overflow_mask(exact, rounded, target)
    if np.any(bad):
        index = first_index(bad)
        value = exact[index]
        shown = repr(float(value)) if exact.dtype.kind == "f" else str(int(value))
        raise RangeError(
            f"convert: element {_index_text(index)} = {shown} overflows {target.name} "
            f"(largest finite {finite_range(target)[1]!r})"
        )
    return rounded


def _to_e8m0(array: np.ndarray, source: DType) -> np.ndarray:
    """F8_E8M0 does not round: every value must be exactly 2**k (-127 <= k <= 127) or NaN."""
    if source.is_float:
        values = cast(array, np.float64)
        nan = np.isnan(values)
        with np.errstate(invalid="ignore"):  # frexp of a NaN flags "invalid"; NaN fits
            significand, exponent = np.frexp(values)
        fits = nan | ((significand == 0.5) & (exponent >= -126) & (exponent <= 128))
    else:
        # Checked as integers (2**60 + 1 would become a float64 power of two); every
        # positive integer power of two of these dtypes is within range.
        whole = array.astype(np.uint64)
        nan = np.zeros(array.shape, dtype=bool)
        fits = (array > 0) & ((whole & (whole - np.uint64(1))) == 0)
        exponent = np.frexp(whole.astype(np.float64))[1]
    if not np.all(fits):
        index = first_index(~fits)
        value = array[index]
        shown = repr(float(cast(value, np.float64))) if source.is_float else str(int(value))
        raise RangeError(
            f"convert: element {_index_text(index)} = {shown} is not an F8_E8M0 value "
            f"(only the powers of two 2**-127 to 2**127, and nan)"
        )
    # 2**k is the bit pattern k + 127 (frexp gives k + 1); NaN is 0xFF.
    bits = np.where(nan, 255, exponent + 126).astype(np.uint8)
    return bits.view(DType.F8_E8M0.numpy)


def _float_to_int(array: np.ndarray, source: DType, target: DType) -> np.ndarray:
    values = cast(array, np.float64) if source not in (DType.F32, DType.F64) else array
    if target is DType.BOOL:
        ok = (values == 0) | (values == 1)
        if not np.all(ok):
            index = first_index(~ok)
            raise RangeError(
                f"convert: element {_index_text(index)} = {float(values[index])!r} is not "
                f"BOOL (only 0 and 1 are)"
            )
        return np.asarray(values != 0)
    lo, hi = int_range(target)
    with np.errstate(all="ignore"):
        whole = np.isfinite(values) & (np.trunc(values) == values)
        fits = whole & (values >= float(lo)) & (values < float(hi + 1))
    if not np.all(fits):
        index = first_index(~fits)
        value = float(values[index])
        reason = (
            f"is out of range for {target.name} ({lo} to {hi})"
            if whole[index]
            else f"is not an integer, so it is not {target.name}"
        )
        raise RangeError(f"convert: element {_index_text(index)} = {value!r} {reason}")
    with np.errstate(all="ignore"):
        return values.astype(target.numpy)


def _int_to_int(array: np.ndarray, source: DType, target: DType) -> np.ndarray:
    low_src, high_src = (0, 1) if source is DType.BOOL else int_range(source)
    low, high = (0, 1) if target is DType.BOOL else int_range(target)
    if low_src < low or high_src > high:
        found_low, found_high = int(np.min(array)), int(np.max(array))
        if found_low < low or found_high > high:
            bad = np.zeros(array.shape, dtype=bool)
            # Each bound is inside the source range here, so it converts exactly.
            if found_low < low:
                bad |= array < np.asarray(low, dtype=array.dtype)
            if found_high > high:
                bad |= array > np.asarray(high, dtype=array.dtype)
            index = first_index(bad)
            raise RangeError(
                f"convert: element {_index_text(index)} = {int(array[index])} is out of "
                f"range for {target.name} ({low} to {high})"
            )
    return array.astype(target.numpy)


def _index_text(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"
