"""Matrix products: floats through BLAS, integers exactly (through BLAS as well).

F32 and F64 call NumPy's ``matmul`` (BLAS). F16 and BF16 are widened exactly to F32,
multiplied with F32 accumulation and rounded once. Integer products are exact: when
``K * max|a| * max|b|`` is below ``2**24`` (``2**53``) every partial sum is an integer
that float32 (float64) holds exactly, so a float BLAS call *is* the exact product,
whatever order it adds in. Otherwise the operands are split into 16-bit limbs, each limb
product is an exact float64 BLAS call, and the limb products are recombined with carries
in int64 — exact for every width, I64 and U64 included, with an exact range check.
"""

from __future__ import annotations

import numpy as np

from .._core.dtype import DType
from .._core.errors import RangeError
from .checked import first_index, int_range
from .convert import narrow, widen

__all__ = ["MatmulOverflow", "matmul_arrays"]

_LIMB = 16
_LIMB_MASK = (1 << _LIMB) - 1
_K_CHUNK = 1 << 20  # limb products stay below 2**32 * 2**20 < 2**53


def matmul_arrays(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    """``a @ b`` for arrays of ``dtype`` of rank >= 2 (shapes already validated)."""
    if dtype in (DType.F32, DType.F64):
        with np.errstate(all="ignore"):
            return np.asarray(np.matmul(a, b))
    if dtype.is_float:
        with np.errstate(all="ignore"):
            product = np.matmul(widen(a, dtype), widen(b, dtype))
        return narrow(product, dtype)
    return _int_matmul(a, b, dtype)


def _magnitude(array: np.ndarray) -> int:
    if array.size == 0:
        return 0
    return max(int(array.max()), -int(array.min()))


def _int_matmul(a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    depth = a.shape[-1]
    bound = _magnitude(a) * _magnitude(b) * depth
    if bound < 2**53:
        wide = np.float32 if bound < 2**24 else np.float64
        product = np.matmul(a.astype(wide), b.astype(wide)).astype(np.int64)
        return _fit(product, dtype)
    digits = _limb_product(a, b, bound)
    return _fit_digits(digits, dtype)


def _fit(product: np.ndarray, dtype: DType) -> np.ndarray:
    """``product`` (exact int64 values) as ``dtype``, or RangeError at the first misfit."""
    lo, hi = int_range(dtype)
    if product.size and (int(product.min()) < lo or int(product.max()) > hi):
        bad = (product < lo) | (product > hi)
        index = first_index(bad)
        _raise(dtype, index, int(product[index]))
    return product.astype(dtype.numpy)


class MatmulOverflow(RangeError):
    """An integer product entry that does not fit; the caller maps ``index`` to its shape."""

    def __init__(self, dtype: DType, index: tuple[int, ...], value: int) -> None:
        super().__init__(dtype, index, value)
        self.dtype = dtype
        self.index = index
        self.value = value

    def message(self, index: tuple[int, ...]) -> str:
        lo, hi = int_range(self.dtype)
        where = "[" + ", ".join(str(i) for i in index) + "]"
        name = self.dtype.name
        return (
            f"matmul: {name} result at index {where} is {self.value}, which does not fit "
            f"{name} ({lo} to {hi})"
        )


def _raise(dtype: DType, index: tuple[int, ...], value: int) -> None:
    raise MatmulOverflow(dtype, index, value)


def _limbs(array: np.ndarray) -> list[np.ndarray]:
    """Split into float64 limbs: ``sum(limb[i] * 2**(16*i))``, all limbs below 2**16 in
    magnitude; the top one carries the sign (arithmetic shift)."""
    wide = array.astype(np.int64 if array.dtype.kind == "i" else np.uint64)
    if array.dtype.kind == "i":
        high, low = int(wide.max()), int(wide.min())
        bits = max(high, -low - 1, 0).bit_length() + 1  # two's complement width
    else:
        bits = max(int(wide.max()), 1).bit_length()
    count = max(1, -(-bits // _LIMB))
    limbs = []
    for i in range(count):
        part = wide >> (_LIMB * i)
        if i < count - 1:
            part = part & _LIMB_MASK
        limbs.append(part.astype(np.float64))
    return limbs


def _limb_product(a: np.ndarray, b: np.ndarray, bound: int) -> np.ndarray:
    """Exact ``a @ b`` as canonical base-2**16 digits: ``(digits, *shape)`` int64, every
    digit in ``[0, 2**16)`` except the last, which is signed."""
    depth = a.shape[-1]
    count = max(5, -(-(bound.bit_length() + 1) // _LIMB) + 1)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    digits = np.zeros((count, *shape), dtype=np.int64)
    for start in range(0, depth, _K_CHUNK):
        a_limbs = _limbs(a[..., start : start + _K_CHUNK])
        b_limbs = _limbs(b[..., start : start + _K_CHUNK, :])
        for i, a_limb in enumerate(a_limbs):
            for j, b_limb in enumerate(b_limbs):
                digits[i + j] += np.matmul(a_limb, b_limb).astype(np.int64)
        _normalize(digits)
    return digits


def _normalize(digits: np.ndarray) -> None:
    carry = np.zeros(digits.shape[1:], dtype=np.int64)
    for k in range(digits.shape[0] - 1):
        value = digits[k] + carry
        digits[k] = value & _LIMB_MASK
        carry = value >> _LIMB
    digits[-1] += carry


def _fit_digits(digits: np.ndarray, dtype: DType) -> np.ndarray:
    """The exact values held in ``digits`` as ``dtype``, or RangeError at the first misfit."""
    low64 = np.zeros(digits.shape[1:], dtype=np.uint64)
    for k in range(4):
        low64 |= digits[k].astype(np.uint64) << np.uint64(_LIMB * k)
    upper, top = digits[4:-1], digits[-1]
    values: np.ndarray
    zero_high = np.all(upper == 0, axis=0) & (top == 0)
    if dtype.is_signed:
        minus_one = np.all(upper == _LIMB_MASK, axis=0) & (top == -1)
        negative = low64 >= np.uint64(2**63)
        fits64 = (zero_high & ~negative) | (minus_one & negative)
        values = low64.view(np.int64)
    else:
        fits64 = zero_high
        values = low64
    lo, hi = int_range(dtype)
    fits = fits64 & (values >= lo) & (values <= hi) if dtype.itemsize < 8 else fits64
    if not np.all(fits):
        index = first_index(~fits)
        exact = sum(int(digits[(k, *index)]) << (_LIMB * k) for k in range(digits.shape[0]))
        _raise(dtype, index, exact)
    return values.astype(dtype.numpy)
