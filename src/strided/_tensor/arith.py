"""Tensor methods for element-wise arithmetic, comparisons and convert (BinaryOp).

There is no promotion: both operands have one dtype, and a Python number or string on
either side is first converted exactly into it (``Scalar(t.dtype, v)``). Floats follow
IEEE 754 through NumPy (F16 and BF16 are widened exactly to F32, computed, and rounded
once). Integers are exact: NumPy computes the wrapped result and ``_kernels.checked`` proves
nothing wrapped, or raises RangeError naming the first offending element.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.dtype import DType, as_dtype
from .._core.errors import DTypeError
from .._core.limits import check_dims
from .._core.scalar import Scalar
from .._core.shape import Shape
from .._kernels import checked as _checked
from .._kernels.convert import convert_array, narrow, widen
from .base import TensorInternals

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["ArithMethods", "BinaryOp", "check_arithmetic"]


class BinaryOp(enum.Enum):
    """An element-wise binary operation, for ``Tensor.binary`` and ``Tensor.scalar_binary``.

    EQ, NE, LT, LE, GT and GE give BOOL tensors; every other op gives the operands' dtype.
    """

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOOR_DIV = "floor_div"
    REM = "rem"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    XOR = "xor"

    def __repr__(self) -> str:
        return f"BinaryOp.{self.name}"


_FLOAT_UFUNCS = {
    BinaryOp.ADD: np.add,
    BinaryOp.SUB: np.subtract,
    BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: np.true_divide,
    BinaryOp.FLOOR_DIV: np.floor_divide,
    BinaryOp.REM: np.remainder,
    BinaryOp.POW: np.power,
    BinaryOp.MAXIMUM: np.maximum,
    BinaryOp.MINIMUM: np.minimum,
}
_COMPARE_UFUNCS = {
    BinaryOp.EQ: np.equal,
    BinaryOp.NE: np.not_equal,
    BinaryOp.LT: np.less,
    BinaryOp.LE: np.less_equal,
    BinaryOp.GT: np.greater,
    BinaryOp.GE: np.greater_equal,
}
_BITWISE_UFUNCS = {
    BinaryOp.AND: np.bitwise_and,
    BinaryOp.OR: np.bitwise_or,
    BinaryOp.XOR: np.bitwise_xor,
    BinaryOp.MAXIMUM: np.maximum,
    BinaryOp.MINIMUM: np.minimum,
}
_CHECKED = {BinaryOp.ADD: "add", BinaryOp.SUB: "sub", BinaryOp.MUL: "mul"}
_BOOL_OPS = frozenset({BinaryOp.EQ, BinaryOp.NE, *_BITWISE_UFUNCS})
_BY_NAME = {op.name: op for op in BinaryOp} | {op.value.upper(): op for op in BinaryOp}


def check_arithmetic(what: str, dtype: DType) -> None:
    """DTypeError for the storage-only FP8 dtypes, which support no arithmetic."""
    if dtype.is_storage_only:
        raise DTypeError(
            f"{what}: {dtype.name} is storage-only and supports no arithmetic; convert to F32 first"
        )


def _as_op(op: object) -> BinaryOp:
    if isinstance(op, BinaryOp):
        return op
    if isinstance(op, str) and op.upper() in _BY_NAME:
        return _BY_NAME[op.upper()]
    raise DTypeError(f"expected a BinaryOp, found {type(op).__name__} {str(op)[:40]!r}")


def _scalar_array(dtype: DType, value: object) -> np.ndarray:
    """``value`` converted exactly into ``dtype``, as a rank-0 array."""
    return np.asarray(Scalar(dtype, value).value, dtype=dtype.numpy)


def _result_shape(op: BinaryOp, a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    if a.shape == b.shape or b.ndim == 0:
        return a.shape
    if a.ndim == 0:
        return b.shape

    try:
        dims = Shape(a.shape).broadcast(b.shape)
    except Exception as error:
        raise type(error)(f"{op.value}: {error}") from None
    return check_dims(dims, op.value)


def compute(op: BinaryOp, dtype: DType, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, DType]:
    """``op`` applied to two arrays of ``dtype`` (broadcast): ``(result, result dtype)``."""
    check_arithmetic(op.value, dtype)
    if dtype is DType.BOOL and op not in _BOOL_OPS:
        raise DTypeError(
            f"{op.value}: not defined for BOOL (BOOL supports eq, ne, and, or, xor, "
            f"maximum, minimum); convert to an integer dtype first"
        )
    shape = _result_shape(op, a, b)
    compare = _COMPARE_UFUNCS.get(op)
    if compare is not None:
        if dtype in (DType.F16, DType.BF16):
            a, b = widen(a, dtype), widen(b, dtype)
        return compare(a, b, order="C"), DType.BOOL
    if dtype.is_float:
        return _float_op(op, dtype, a, b), dtype
    if dtype is DType.BOOL:
        return np.asarray(_BITWISE_UFUNCS[op](a, b, order="C")), dtype
    return _int_op(op, dtype, a, b, shape), dtype


def _float_op(op: BinaryOp, dtype: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ufunc = _FLOAT_UFUNCS.get(op)
    if ufunc is None:
        raise DTypeError(f"{op.value}: bitwise ops are not defined for {dtype.name}")
    if dtype in (DType.F32, DType.F64):
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(a, b, order="C"))
    # F16 and BF16: exact widening to F32, one F32 operation, one rounding back.
    with np.errstate(all="ignore"):
        wide = ufunc(widen(a, dtype), widen(b, dtype))
    return narrow(wide, dtype)


def _int_op(
    op: BinaryOp, dtype: DType, a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    name = _CHECKED.get(op)
    if name is not None:
        return _checked.checked_binary(name, dtype, a, b, shape)
    if op is BinaryOp.FLOOR_DIV:
        return _checked.int_floor_divide(dtype, a, b, shape)
    if op is BinaryOp.REM:
        return _checked.int_remainder(dtype, a, b, shape)
    if op is BinaryOp.POW:
        return _checked.int_power(dtype, a, b, shape)
    if op is BinaryOp.DIV:
        raise DTypeError(
            f"div: true division is not defined for {dtype.name}; convert to a float dtype "
            f"first, or use // (FLOOR_DIV)"
        )
    return np.asarray(_BITWISE_UFUNCS[op](a, b, order="C"))


class ArithMethods(TensorInternals):
    """Mixin of Tensor: element-wise arithmetic, comparisons and convert (BinaryOp)."""

    __slots__ = ()

    # NumPy must not turn ``ndarray + tensor`` or ``np.float32(2) * tensor`` into an
    # unchecked ndarray: this makes NumPy defer to our reflected operators instead.
    __array_ufunc__ = None

    def binary(self, op: BinaryOp, rhs: Tensor) -> Tensor:
        """``op`` element-wise with ``rhs``, a tensor of the same dtype; shapes broadcast.

        Mixed dtypes are DTypeError (no promotion), as are ops the dtype does not support
        (DIV on integers, bitwise ops on floats, most ops on BOOL, anything on FP8).
        Integer ADD/SUB/MUL/POW overflow is RangeError naming the first offending index,
        a zero divisor in FLOOR_DIV/REM DivisionError. The result is a new tensor.
        """
        op = _as_op(op)
        if not isinstance(rhs, ArithMethods):
            raise DTypeError(
                f"{op.value}: rhs must be a Tensor, found {type(rhs).__name__}; "
                f"use scalar_binary for scalars"
            )
        return _tensor_op(op, self, rhs)

    def scalar_binary(self, op: BinaryOp, s: object) -> Tensor:
        """``op`` between every element and the scalar ``s`` (the tensor on the left).

        ``s`` is a Python number, a string, or a Scalar, converted exactly into this
        tensor's dtype as ``Scalar(t.dtype, s)`` (so RangeError/FormatError/DTypeError as
        there; a Scalar of another dtype is DTypeError). Otherwise as ``binary``.
        """
        return _scalar_op(_as_op(op), self, s, reflected=False)

    def eq(self, other: object) -> Tensor:
        """Element-wise ``==`` (IEEE: NaN equals nothing) as a BOOL tensor."""
        return _operand_op(BinaryOp.EQ, self, other, reflected=False)

    def ne(self, other: object) -> Tensor:
        """Element-wise ``!=`` (IEEE: NaN differs from everything) as a BOOL tensor."""
        return _operand_op(BinaryOp.NE, self, other, reflected=False)

    def lt(self, other: object) -> Tensor:
        """Element-wise ``<`` as a BOOL tensor (DTypeError on BOOL)."""
        return _operand_op(BinaryOp.LT, self, other, reflected=False)

    def le(self, other: object) -> Tensor:
        """Element-wise ``<=`` as a BOOL tensor (DTypeError on BOOL)."""
        return _operand_op(BinaryOp.LE, self, other, reflected=False)

    def gt(self, other: object) -> Tensor:
        """Element-wise ``>`` as a BOOL tensor (DTypeError on BOOL)."""
        return _operand_op(BinaryOp.GT, self, other, reflected=False)

    def ge(self, other: object) -> Tensor:
        """Element-wise ``>=`` as a BOOL tensor (DTypeError on BOOL)."""
        return _operand_op(BinaryOp.GE, self, other, reflected=False)

    def neg(self) -> Tensor:
        """Element-wise negation. Integer MIN and non-zero unsigned values are RangeError."""
        return _unary(self, "neg", _float_neg)

    def __abs__(self) -> Tensor:
        """Element-wise absolute value. Signed integer MIN is RangeError (no wrap)."""
        return _unary(self, "abs", _float_abs)

    def abs(self) -> Tensor:
        """``abs(t)``: element-wise absolute value (RangeError for signed integer MIN)."""
        return self.__abs__()

    def __neg__(self) -> Tensor:
        return self.neg()

    def convert(self, dtype: DType | str) -> Tensor:
        """The values in another dtype, exactly.

        To integer or BOOL targets every value must be representable (1.5 -> I32,
        300 -> I8, NaN -> I32, 2 -> BOOL are RangeError). To float targets values round
        to nearest-even once; a finite value that overflows (for F8_E4M3: beyond 464) is
        RangeError; infinities and NaN carry over (NaN only, into F8_E4M3). F8_E8M0 does
        not round: every value must be exactly one of its powers of two, or NaN
        (RangeError otherwise, naming the element). Converting to the tensor's own dtype
        returns the tensor itself.
        """
        target = as_dtype(dtype)
        source = self._dtype
        if target is source:
            return self  # type: ignore[return-value]
        return self._adopt(convert_array(self._array, source, target), target)

    def astype(self, dtype: DType | str) -> Tensor:
        """``convert(dtype)``, spelled as NumPy spells it: the same exact conversion,
        the same errors. Unlike ``ndarray.astype`` nothing ever wraps or truncates
        silently, and there is no ``copy`` argument: a tensor never changes, so
        converting to its own dtype returns the tensor itself.

        Example:
            >>> import strided as st
            >>> t = st.tensor([1, 2, 300], st.DType.I32)
            >>> t.astype("F16").to_json()
            '{"dtype":"F16","shape":[3],"data":["1.0","2.0","300.0"]}'
            >>> t.astype(st.DType.I8)
            Traceback (most recent call last):
            ...
            strided.RangeError: ...
        """
        return self.convert(dtype)

    # -- Python operators: a tensor or a scalar-like on either side ----------------------

    def __add__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.ADD, self, other, reflected=False)

    def __radd__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.ADD, self, other, reflected=True)

    def __sub__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.SUB, self, other, reflected=False)

    def __rsub__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.SUB, self, other, reflected=True)

    def __mul__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.MUL, self, other, reflected=False)

    def __rmul__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.MUL, self, other, reflected=True)

    def __truediv__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.DIV, self, other, reflected=False)

    def __rtruediv__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.DIV, self, other, reflected=True)

    def __floordiv__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.FLOOR_DIV, self, other, reflected=False)

    def __rfloordiv__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.FLOOR_DIV, self, other, reflected=True)

    def __mod__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.REM, self, other, reflected=False)

    def __rmod__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.REM, self, other, reflected=True)

    def __pow__(self, other: object, modulo: object = None) -> Tensor:
        if modulo is not None:
            raise DTypeError("pow: three-argument pow() is not supported")
        return _operand_op(BinaryOp.POW, self, other, reflected=False)

    def __rpow__(self, other: object, modulo: object = None) -> Tensor:
        if modulo is not None:
            raise DTypeError("pow: three-argument pow() is not supported")
        return _operand_op(BinaryOp.POW, self, other, reflected=True)

    def __and__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.AND, self, other, reflected=False)

    def __rand__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.AND, self, other, reflected=True)

    def __or__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.OR, self, other, reflected=False)

    def __ror__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.OR, self, other, reflected=True)

    def __xor__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.XOR, self, other, reflected=False)

    def __rxor__(self, other: object) -> Tensor:
        return _operand_op(BinaryOp.XOR, self, other, reflected=True)


def _tensor_op(op: BinaryOp, left: ArithMethods, right: ArithMethods) -> Tensor:
    dtype = left._dtype
    if right._dtype is not dtype:
        raise DTypeError(
            f"{op.value}: dtypes differ ({dtype.name} and {right._dtype.name}); there is no "
            f"implicit promotion, convert one side first"
        )
    result, result_dtype = compute(op, dtype, left._array, right._array)
    return left._adopt(result, result_dtype)


def _scalar_op(op: BinaryOp, tensor: ArithMethods, value: object, reflected: bool) -> Tensor:
    dtype = tensor._dtype
    check_arithmetic(op.value, dtype)
    scalar = _scalar_array(dtype, value)
    left, right = (scalar, tensor._array) if reflected else (tensor._array, scalar)
    result, result_dtype = compute(op, dtype, left, right)
    return tensor._adopt(result, result_dtype)


def _operand_op(op: BinaryOp, tensor: ArithMethods, other: Any, reflected: bool) -> Tensor:
    if isinstance(other, ArithMethods):
        return _tensor_op(op, other, tensor) if reflected else _tensor_op(op, tensor, other)
    if isinstance(other, np.ndarray):
        raise DTypeError(
            f"{op.value}: cannot combine a Tensor with a numpy.ndarray; wrap it with "
            f"Tensor.from_numpy(array, dtype) first"
        )
    return _scalar_op(op, tensor, other, reflected)


def _unary(
    tensor: ArithMethods, op: str, float_kernel: Callable[[np.ndarray, DType], np.ndarray]
) -> Tensor:
    """neg / abs: the dtype checks, then the float kernel or the checked integer one."""
    dtype = tensor._dtype
    check_arithmetic(op, dtype)
    if dtype is DType.BOOL:
        raise DTypeError(f"{op}: not defined for BOOL; convert to an integer dtype first")
    if dtype.is_float:
        return tensor._adopt(float_kernel(tensor._array, dtype), dtype)
    return tensor._adopt(_checked.checked_unary(op, dtype, tensor._array), dtype)


def _float_neg(array: np.ndarray, dtype: DType) -> np.ndarray:
    negated: np.ndarray = np.negative(array, order="C")
    return negated


def _float_abs(array: np.ndarray, dtype: DType) -> np.ndarray:
    # Clearing the sign bit is exact in every float format, NaN payloads too.
    bits = np.dtype(f"<u{dtype.itemsize}")
    mask = np.asarray((1 << (8 * dtype.itemsize - 1)) - 1, dtype=bits)
    cleared: np.ndarray = np.bitwise_and(array.view(bits), mask, order="C")
    return cleared.view(dtype.numpy)
