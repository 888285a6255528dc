"""Checked integer kernels: exact element-wise integer arithmetic without silent wrapping.

NumPy integer arithmetic wraps modulo ``2**bits``. Every kernel here lets NumPy compute the
wrapped result and then proves, cheaply, that nothing wrapped. The work is done block by
block (``CHUNK`` elements, small enough that the operands and the result of one block stay
in the L2 cache): the wrapped operation runs first, then a bound check reads the
now-cached operands with min/max reductions (a few SIMD passes). Only a block whose bounds
*could* overflow pays for an exact per-element test, which uses the sign-bit identities
(``a + b`` overflowed iff ``(a ^ r) & (b ^ r) < 0``) or, for 64-bit products where no wider
NumPy type exists, a split into 32-bit halves. No kernel ever loops over elements in
Python, and no kernel needs a wider type than the operands' own for ADD/SUB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.dtype import DType, finite_range
from .._core.errors import DivisionError, RangeError

__all__ = [
    "CHUNK",
    "checked_binary",
    "checked_unary",
    "first_index",
    "int_floor_divide",
    "int_power",
    "int_range",
    "int_remainder",
    "mul_overflow",
]

CHUNK = 1 << 16

_max = np.maximum.reduce
_min = np.minimum.reduce
_U64 = np.dtype(np.uint64)
_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)

_RANGES = {dtype: finite_range(dtype) for dtype in DType if dtype.is_integer}


def int_range(dtype: DType) -> tuple[int, int]:
    """The inclusive ``(min, max)`` of an integer dtype, as Python ints."""
    return _RANGES[dtype]


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """The row-major multi-index of the first True element of ``mask``."""
    flat = int(np.argmax(mask))
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def _index_text(index: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in index) + "]"


def _range_text(dtype: DType) -> str:
    low, high = _RANGES[dtype]
    return f"{dtype.name} ({low} to {high})"


# -- per-op kernels --------------------------------------------------------------------
#
# A kernel is ``compute(x, y, r, lo, hi, xb, yb) -> bool``: it writes the wrapped result
# into ``r`` and returns True when the block *may* hold an overflow. ``xb``/``yb`` are the
# known ``(min, max)`` bounds of an operand that is a broadcast scalar (None otherwise).
# The matching ``mask(x, y, r, lo, hi)`` gives the exact per-element overflow mask.


def _bounds(v: np.ndarray, known: tuple[int, int] | None) -> tuple[int, int]:
    if known is not None:
        return known
    return int(_min(v)), int(_max(v))


def _add_signed(x: Any, y: Any, r: np.ndarray, lo: int, hi: int, xb: Any, yb: Any) -> bool:
    np.add(x, y, out=r)
    if yb is not None or xb is not None:
        # Adding a known scalar can only overflow on one side: one reduction suffices.
        v, scalar = (x, int(yb[0])) if yb is not None else (y, int(xb[0]))
        return int(_max(v)) + scalar > hi if scalar >= 0 else int(_min(v)) + scalar < lo
    return int(_max(x)) + int(_max(y)) > hi or int(_min(x)) + int(_min(y)) < lo


def _add_signed_mask(x: Any, y: Any, r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.asarray(((x ^ r) & (y ^ r)) < 0)


def _add_unsigned(x: Any, y: Any, r: np.ndarray, lo: int, hi: int, xb: Any, yb: Any) -> bool:
    np.add(x, y, out=r)
    xh = xb[1] if xb is not None else int(_max(x))
    yh = yb[1] if yb is not None else int(_max(y))
    return xh + yh > hi


def _add_unsigned_mask(x: Any, y: Any, r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.asarray(np.less(r, x))


def _sub_signed(x: Any, y: Any, r: np.ndarray, lo: int, hi: int, xb: Any, yb: Any) -> bool:
    np.subtract(x, y, out=r)
    if yb is not None:  # x - c: one side only
        c = int(yb[0])
        return int(_min(x)) - c < lo if c >= 0 else int(_max(x)) - c > hi
    xl, xh = _bounds(x, xb)
    yl, yh = _bounds(y, yb)
    return xh - yl > hi or xl - yh < lo


def _sub_signed_mask(x: Any, y: Any, r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.asarray(((x ^ y) & (x ^ r)) < 0)


def _sub_unsigned(x: Any, y: Any, r: np.ndarray, lo: int, hi: int, xb: Any, yb: Any) -> bool:
    np.subtract(x, y, out=r)
    xl = xb[0] if xb is not None else int(_min(x))
    yh = yb[1] if yb is not None else int(_max(y))
    return xl < yh


def _sub_unsigned_mask(x: Any, y: Any, r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.asarray(np.less(x, y))


def _mul(x: Any, y: Any, r: np.ndarray, lo: int, hi: int, xb: Any, yb: Any) -> bool:
    np.multiply(x, y, out=r)
    xl, xh = _bounds(x, xb)
    yl, yh = _bounds(y, yb)
    corners = (xl * yl, xl * yh, xh * yl, xh * yh)
    return max(corners) > hi or min(corners) < lo


def _mul_mask(x: Any, y: Any, r: np.ndarray, lo: int, hi: int) -> np.ndarray:
    x = np.asarray(x)
    y = np.asarray(y)
    return mul_overflow(x, y, lo, hi)


def mul_overflow(x: np.ndarray, y: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Exact mask of the elements where ``x * y`` falls outside ``[lo, hi]``.

    Up to 32 bits the product is exact in a 64-bit type. For 64-bit operands the
    magnitudes are split into 32-bit halves: the product fits 64 bits iff not both high
    halves are non-zero, the cross term fits 32 bits and the final add does not carry.
    """
    if x.dtype.itemsize <= 4:
        wide = np.int64 if x.dtype.kind == "i" else np.uint64
        product = np.multiply(x, y, dtype=wide)
        return np.asarray((product < lo) | (product > hi))
    if x.dtype.kind == "i":
        negative = (x ^ y) < 0
        ux = np.abs(x).view(_U64)  # abs(MIN) wraps to MIN, which is 2**63 as uint64
        uy = np.abs(y).view(_U64)
        limit: Any = np.where(negative, np.uint64(2**63), np.uint64(2**63 - 1))
    else:
        ux, uy = x, y
        limit = np.uint64(2**64 - 1)
    xh, xl = ux >> _S32, ux & _M32
    yh, yl = uy >> _S32, uy & _M32
    both_high = (xh != 0) & (yh != 0)
    cross = xh * yl + xl * yh  # one term is zero unless both_high
    low = xl * yl
    total = (cross << _S32) + low
    return np.asarray(both_high | ((cross >> _S32) != 0) | (total < low) | (total > limit))


_KERNELS: dict[tuple[str, bool], tuple[Callable[..., bool], Callable[..., np.ndarray]]] = {
    ("add", True): (_add_signed, _add_signed_mask),
    ("add", False): (_add_unsigned, _add_unsigned_mask),
    ("sub", True): (_sub_signed, _sub_signed_mask),
    ("sub", False): (_sub_unsigned, _sub_unsigned_mask),
    ("mul", True): (_mul, _mul_mask),
    ("mul", False): (_mul, _mul_mask),
}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*"}


def checked_binary(
    name: str, dtype: DType, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """``a (+|-|*) b`` broadcast to ``shape``, exact, as a new C-contiguous array.

    ``name`` is ``"add"``, ``"sub"`` or ``"mul"``. RangeError names the first (row-major)
    element whose exact result does not fit ``dtype``; nothing is returned then.
    """
    compute, mask = _KERNELS[name, dtype.is_signed]
    lo, hi = _RANGES[dtype]
    out = np.empty(shape, dtype=dtype.numpy)
    if out.size == 0:
        return out
    # A one-element operand is a scalar for the whole loop: its bounds are known, so each
    # block checks only the other operand, and nditer never buffers a broadcast copy.
    xb = _scalar_bounds(a)
    yb = _scalar_bounds(b)
    if xb is not None and yb is not None:
        xb = None  # nditer needs one array operand besides the output
    operands: list[np.ndarray] = []
    if xb is None:
        operands.append(a)
    if yb is None:
        operands.append(b)
    x_scalar = a.reshape(-1)[0] if xb is not None else None
    y_scalar = b.reshape(-1)[0] if yb is not None else None
    if out.size <= CHUNK:
        # One block: flat operands directly, without an iterator to set up.
        x = x_scalar if xb is not None else _flat(a, shape)
        y = y_scalar if yb is not None else _flat(b, shape)
        r = out.reshape(-1)
        if compute(x, y, r, lo, hi, xb, yb):
            bad = mask(x, y, r, lo, hi)
            if np.any(bad):
                _raise_overflow(name, dtype, a, b, shape, int(np.argmax(bad)))
        return out
    iterator = np.nditer(  # type: ignore[call-overload]
        [*operands, out],
        flags=["external_loop", "buffered", "zerosize_ok", "refs_ok"],
        op_flags=[*(["readonly"] for _ in operands), ["writeonly"]],
        order="C",
        buffersize=CHUNK,
    )
    with iterator:
        for chunk in iterator:
            parts = list(chunk)
            r = parts.pop()
            x = x_scalar if xb is not None else parts.pop(0)
            y = y_scalar if yb is not None else parts.pop(0)
            if compute(x, y, r, lo, hi, xb, yb):
                bad = mask(x, y, r, lo, hi)
                if np.any(bad):
                    start = iterator.iterindex
                    _raise_overflow(name, dtype, a, b, shape, start + int(np.argmax(bad)))
    return out


def _flat(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if v.shape == shape and v.flags.c_contiguous:
        return v.reshape(-1)
    return np.broadcast_to(v, shape).reshape(-1)


def _scalar_bounds(v: np.ndarray) -> tuple[int, int] | None:
    if v.size != 1:
        return None
    value = int(v.reshape(-1)[0])
    return value, value


def _raise_overflow(
    name: str, dtype: DType, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...], flat: int
) -> None:
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    left = int(np.broadcast_to(a, shape)[index])
    right = int(np.broadcast_to(b, shape)[index])
    exact = {"add": left + right, "sub": left - right, "mul": left * right}[name]
    raise RangeError(
        f"{name}: {dtype.name} overflow at index {_index_text(index)}: "
        f"{left} {_SYMBOLS[name]} {right} = {exact} does not fit {_range_text(dtype)}"
    )


def checked_unary(name: str, dtype: DType, a: np.ndarray) -> np.ndarray:
    """``-a`` (``name == "neg"``) or ``abs(a)`` (``"abs"``), exact, as a new array.

    The only signed overflow is MIN; for unsigned, negating anything but 0 overflows and
    abs is the identity.
    """
    lo = _RANGES[dtype][0]
    if a.size == 0:
        return np.empty(a.shape, dtype=dtype.numpy)
    if dtype.is_signed:
        if int(a.min()) == lo:
            _raise_unary(name, dtype, a, a == lo)
    elif name == "neg":
        if int(a.max()) != 0:
            _raise_unary(name, dtype, a, a != 0)
        return np.zeros(a.shape, dtype=dtype.numpy)
    else:
        return np.array(a, dtype=dtype.numpy, order="C", copy=True)
    return np.asarray(np.negative(a, order="C") if name == "neg" else np.abs(a, order="C"))


def _raise_unary(name: str, dtype: DType, a: np.ndarray, mask: np.ndarray) -> None:
    index = first_index(mask)
    value = int(a[index])
    exact = -value if name == "neg" else abs(value)
    shown = f"-({value})" if name == "neg" else f"abs({value})"
    raise RangeError(
        f"{name}: {dtype.name} overflow at index {_index_text(index)}: "
        f"{shown} = {exact} does not fit {_range_text(dtype)}"
    )


# -- division, remainder and power (not blocked: their checks are single passes) ---------


def _check_divisor(name: str, dtype: DType, a: np.ndarray, b: np.ndarray, shape: Any) -> None:
    zero = np.broadcast_to(np.equal(b, 0), shape)
    if np.any(zero):
        index = first_index(zero)
        left = int(np.broadcast_to(a, shape)[index])
        raise DivisionError(
            f"{name}: {dtype.name} division by zero at index {_index_text(index)}: {left} / 0"
        )


def int_floor_divide(dtype: DType, a: np.ndarray, b: np.ndarray, shape: Any) -> np.ndarray:
    """Python's ``//`` (floors); zero divisors are DivisionError, ``MIN // -1`` RangeError."""
    _check_divisor("floor_div", dtype, a, b, shape)
    if dtype.is_signed:
        lo = _RANGES[dtype][0]
        bad = np.broadcast_to(np.equal(a, lo) & np.equal(b, -1), shape)
        if np.any(bad):
            index = first_index(bad)
            raise RangeError(
                f"floor_div: {dtype.name} overflow at index {_index_text(index)}: "
                f"{lo} // -1 = {-lo} does not fit {_range_text(dtype)}"
            )
    with np.errstate(all="ignore"):
        return np.asarray(np.floor_divide(a, b, order="C"))


def int_remainder(dtype: DType, a: np.ndarray, b: np.ndarray, shape: Any) -> np.ndarray:
    """Python's ``%`` (the result takes the divisor's sign); zero divisors are DivisionError."""
    _check_divisor("rem", dtype, a, b, shape)
    with np.errstate(all="ignore"):
        return np.asarray(np.remainder(a, b, order="C"))


def int_power(dtype: DType, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a ** b`` exactly, by vectorized square-and-multiply with checked products.

    A negative exponent is RangeError. Bases 0, 1 and -1 are settled directly; any other
    base overflows 64 bits once the exponent reaches the bit width, so at most six
    squaring rounds run, each over the whole (remaining) array at once.
    """
    lo, hi = _RANGES[dtype]
    base = np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1)
    expo = np.ascontiguousarray(np.broadcast_to(b, shape)).reshape(-1)
    if dtype.is_signed and expo.size and int(_min(expo)) < 0:
        index = first_index((expo < 0).reshape(shape))
        raise RangeError(
            f"pow: negative exponent at index {_index_text(index)}: "
            f"{int(base.reshape(shape)[index])} ** {int(expo.reshape(shape)[index])} is not an "
            f"integer; convert to a float dtype first"
        )
    result = np.ones(base.shape, dtype=dtype.numpy)
    result[base == 0] = 0
    result[(base == 0) & (expo == 0)] = 1
    if dtype.is_signed:
        odd = (expo & 1) == 1
        result[(base == -1) & odd] = -1
    rest = np.flatnonzero((base > 1) | (base < -1)) if dtype.is_signed else np.flatnonzero(base > 1)
    if rest.size:
        # Any base beyond +-1 overflows 64 bits once the exponent reaches the bit width.
        too_big = expo[rest] >= dtype.itemsize * 8
        small = np.where(too_big, 0, expo[rest]).astype(np.int64)
        overflow, powers = _power_loop(base[rest], small, lo, hi)
        overflow |= too_big
        if np.any(overflow):
            _raise_power(dtype, base, expo, shape, rest[overflow])
        result[rest] = powers
    return result.reshape(shape)


def _power_loop(
    base: np.ndarray, expo: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(overflow mask, wrapped powers)`` for bases with |base| >= 2 and exponents < 64."""
    result = np.ones(base.shape, dtype=base.dtype)
    overflow = np.zeros(base.shape, dtype=bool)
    while True:
        odd = (expo & 1) == 1
        if np.any(odd):
            r, s = result[odd], base[odd]
            overflow[odd] |= mul_overflow(r, s, lo, hi)
            result[odd] = r * s
        expo = expo >> 1
        active = expo > 0
        if not np.any(active):
            break
        s = base[active]
        # Squaring overflow with exponent bits left means the final |result| >= s * s.
        overflow[active] |= mul_overflow(s, s, lo, hi)
        base[active] = s * s
    return overflow, result


def _raise_power(
    dtype: DType, base: np.ndarray, expo: np.ndarray, shape: tuple[int, ...], flats: np.ndarray
) -> None:
    flat = int(np.min(flats))
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    left, right = int(base[flat]), int(expo[flat])
    exact = f" = {left**right}" if right * left.bit_length() <= 128 else ""
    shown = f"({left})" if left < 0 else str(left)
    raise RangeError(
        f"pow: {dtype.name} overflow at index {_index_text(index)}: "
        f"{shown} ** {right}{exact} does not fit {_range_text(dtype)}"
    )
