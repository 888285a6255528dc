"""Tensor methods that hand tensors to NumPy, PyTorch, JAX and any DLPack consumer.

How NumPy treats a tensor (see ``InteropMethods``): ``np.asarray`` and every NumPy
function and ufunc read it through a fresh read-only zero-copy view and return NumPy's
own result, while a NumPy array or scalar on the left of a Python operator still meets
the tensor's own (checked) operator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._core.limits import MAX_FOREIGN_NESTING as _MAX_NESTING
from .._core.storage import fresh_view
from .._kernels.dlpack import CPU_DEVICE, export_capsule, import_array
from .base import TensorInternals

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["InteropMethods", "foreign_hint"]

# The ufuncs behind Python's binary operators: NumPy's own operators call them, so
# ``ndarray + t`` arrives here as ``np.add(ndarray, t)``. Each maps to the method a left
# operand answers with, the one a right operand answers with, and the symbol.
_OPERATORS: dict[Any, tuple[str, str, str]] = {
    np.add: ("__add__", "__radd__", "+"),
    np.subtract: ("__sub__", "__rsub__", "-"),
    np.multiply: ("__mul__", "__rmul__", "*"),
    np.true_divide: ("__truediv__", "__rtruediv__", "/"),
    np.floor_divide: ("__floordiv__", "__rfloordiv__", "//"),
    np.remainder: ("__mod__", "__rmod__", "%"),
    np.power: ("__pow__", "__rpow__", "** or pow()"),
    np.divmod: ("__divmod__", "__rdivmod__", "divmod()"),
    np.left_shift: ("__lshift__", "__rlshift__", "<<"),
    np.right_shift: ("__rshift__", "__rrshift__", ">>"),
    np.bitwise_and: ("__and__", "__rand__", "&"),
    np.bitwise_or: ("__or__", "__ror__", "|"),
    np.bitwise_xor: ("__xor__", "__rxor__", "^"),
    np.matmul: ("__matmul__", "__rmatmul__", "@"),
    np.equal: ("__eq__", "__eq__", "=="),
    np.not_equal: ("__ne__", "__ne__", "!="),
    np.less: ("__lt__", "__gt__", "<"),
    np.less_equal: ("__le__", "__ge__", "<="),
    np.greater: ("__gt__", "__lt__", ">"),
    np.greater_equal: ("__ge__", "__le__", ">="),
}
_FOREIGN = {"torch": "a PyTorch tensor", "jax": "a JAX array", "jaxlib": "a JAX array"}


class InteropMethods(TensorInternals):
    """Mixin of Tensor: the NumPy and DLPack protocols.

    * ``np.asarray(t)`` / ``t.__array__()``: a fresh read-only zero-copy view;
      ``np.array(t)``, ``__array__(copy=True)`` or another ``dtype``: a fresh writable
      copy. PyTorch ignores NumPy's read-only flag, so ``torch.from_numpy(np.asarray(t))``
      (or of ``t.numpy()``) could write into the tensor: hand tensors to PyTorch with
      ``torch.tensor(t)``, ``torch.from_dlpack(t)`` or ``torch.as_tensor(t)`` (copies).
    * ``t.__dlpack__()``: by default a fresh copy the consumer owns (``torch.from_dlpack``,
      ``torch.as_tensor``, ``torch.tensor``, ``np.from_dlpack``, ``jax.dlpack``);
      ``copy=False``: the memory itself, read-only flagged (see ``__dlpack__``).
    * Every NumPy function (``np.max(t)``, ``np.mean(t)``, ``np.concatenate([t, u])``)
      and ufunc (``np.exp(t)``, ``np.add.reduce(t)``) runs on read-only views of the
      tensors and returns NumPy's result (or raises NumPy's error); a tensor passed as
      ``out=`` is a TypeError (tensors never change).
    * Except Python's operators. NumPy's own operators call ufuncs (``ndarray + t`` is
      ``np.add(ndarray, t)``), so the ufuncs behind the binary operators (``np.add`` ...
      ``np.matmul``, the comparisons), called with two operands and no keywords, are
      the operator itself whenever a tensor is an operand: ``np.float32(2) * t`` and
      ``np.add(t, u)`` are strided's checked arithmetic (overflow is RangeError),
      ``ndarray + t`` is a DTypeError like ``t + ndarray`` (wrap the array with
      ``Tensor.from_numpy`` first), ``ndarray == t`` is False like ``t == ndarray``
      (``==`` is structural), and ``ndarray < t`` is a TypeError like ``t > ndarray``.
      For NumPy's element-wise result, pass ``np.asarray(t)``.
    """

    __slots__ = ()

    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: object = None,
        dl_device: object = None,
        copy: bool | None = None,
    ) -> object:
        """A DLPack capsule of the tensor (the DLPack / array API protocol).

        By default, and with ``copy=True``, the capsule holds a fresh C-contiguous copy
        that the consumer owns and may write (its ``IS_COPIED`` flag is set), so nothing a
        consumer does reaches the tensor. ``copy=False`` shares the tensor's memory
        without copying, in a versioned (DLPack >= 1.0) capsule flagged read-only; the
        capsule and the consumer's array keep the memory alive. A consumer that ignores
        the flag (PyTorch 2.13 does) must not write through it: that can corrupt memory
        other tensors share, or crash on a read-only memory-mapped file.

        BF16 goes out as DLPack's bfloat16 and the 8-bit floats as DLPack 1.1's
        ``float8_e4m3fn`` / ``float8_e5m2`` / ``float8_e8m0fnu`` (PyTorch has all of
        them; NumPy's ``from_dlpack`` has none and raises its own error: use
        ``np.asarray(t)``, an ml_dtypes array, there).

        Raises BufferError for ``copy=False`` when the consumer takes only unversioned
        capsules (``max_version`` None or below ``(1, 0)``), for ``copy=False`` on a
        view with negative strides (PyTorch cannot take them), and for a ``dl_device``
        other than the CPU ``(1, 0)``; ValueError for a ``stream`` other than None (a
        CPU tensor has no stream) and for malformed arguments.
        """
        return export_capsule(self._array, self._dtype, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device; every tensor lives in host memory."""
        return CPU_DEVICE

    @classmethod
    def from_dlpack(cls, x: object) -> Tensor:
        """A tensor copied from any DLPack producer: a PyTorch tensor, a JAX array,
        another library's tensor, or a DLPack capsule (a NumPy array, ml_dtypes ones
        included, is taken as ``from_numpy`` takes it). Always copies.

        Every strided dtype is understood, BF16 and the 8-bit floats included. Data
        that is not on the CPU or of a type strided lacks (complex, other 8-bit floats)
        is FormatError / DTypeError, a failing producer FormatError, and shapes over
        the limits LimitError; ``x`` is never changed.
        """
        if isinstance(x, np.ndarray):  # NumPy cannot export ml_dtypes arrays
            return cls.from_numpy(x)  # type: ignore[attr-defined,no-any-return]
        array = import_array(x)
        return cls.from_numpy(array)  # type: ignore[attr-defined,no-any-return]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy 2's protocol: by default a fresh read-only zero-copy view (new array
        objects each call, never writable); with ``copy=True`` or another ``dtype`` a
        fresh writable copy the caller owns. ``copy=False`` with a dtype change is
        ValueError, as NumPy's protocol requires.

        So ``np.asarray(t)`` shares the tensor's memory, read-only, and ``np.array(t)``
        copies. The view is safe in NumPy, but not through ``torch.from_numpy``, which
        ignores the read-only flag (it only warns): writing into
        ``torch.from_numpy(np.asarray(t))`` changes the tensor, and crashes on a
        memory-mapped file. Use ``torch.tensor(t)``, ``torch.from_dlpack(t)``,
        ``torch.as_tensor(t)`` or ``torch.from_numpy(np.array(t))``: each copies."""
        if dtype is not None and np.dtype(dtype) != self._array.dtype:
            if copy is False:
                raise ValueError("__array__: a copy is needed to change the dtype")
            return self._array.astype(dtype)
        return self._array.copy() if copy else fresh_view(self._array)

    def __array_function__(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Any NumPy function given tensors: NumPy's result on read-only views of them."""
        if not all(issubclass(kind, (InteropMethods, np.ndarray)) for kind in types):
            return NotImplemented
        _refuse_out(kwargs.get("out"), getattr(func, "__name__", "function"))
        implementation = getattr(func, "_implementation", func)
        return implementation(*_views(args, 0), **_views(kwargs, 0))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Any NumPy ufunc given tensors: NumPy's result on read-only views of them.

        The ufuncs behind Python's binary operators, called with two operands and no
        keywords, are the operator itself when a tensor is an operand (see the class
        docstring); ``out=`` a tensor, and ``ufunc.at`` on one, are TypeError.
        """
        name = f"{ufunc.__name__}.{method}" if method != "__call__" else ufunc.__name__
        _refuse_out(kwargs.get("out"), name)
        if method == "at" and inputs and isinstance(inputs[0], InteropMethods):
            _refuse_out(inputs[0], name)
        if _has_other_override((*inputs, *_as_tuple(kwargs.get("out")))):
            return NotImplemented
        if method == "__call__" and not kwargs and len(inputs) == 2 and ufunc in _OPERATORS:
            return _as_operator(ufunc, inputs[0], inputs[1])
        return getattr(ufunc, method)(*_views(inputs, 0), **_views(kwargs, 0))


def _as_operator(ufunc: Any, left: Any, right: Any) -> Any:
    """``left <op> right`` as Python evaluates it, asking only the tensor operands (a
    NumPy operand has declined already: its operator is what called the ufunc)."""
    forward, reflected, symbol = _OPERATORS[ufunc]
    result: Any = NotImplemented
    method = getattr(type(left), forward, None) if isinstance(left, InteropMethods) else None
    if method is not None:
        result = method(left, right)
    method = getattr(type(right), reflected, None) if isinstance(right, InteropMethods) else None
    if result is NotImplemented and method is not None:
        result = method(right, left)
    if result is not NotImplemented:
        return result
    if ufunc is np.equal or ufunc is np.not_equal:
        return (left is right) is (ufunc is np.equal)  # a tensor equals only a tensor
    names = f"{type(left).__name__!r} and {type(right).__name__!r}"
    if symbol in ("<", "<=", ">", ">="):
        raise TypeError(f"{symbol!r} not supported between instances of {names}")
    raise TypeError(f"unsupported operand type(s) for {symbol}: {names}")


def _refuse_out(out: Any, name: str) -> None:
    if any(isinstance(item, InteropMethods) for item in _as_tuple(out)):
        raise TypeError(
            f"{name}: a Tensor cannot be written to (out=, ufunc.at): tensors are "
            f"immutable; compute into a NumPy array, or use the result and wrap it with "
            f"Tensor.from_numpy"
        )


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)


def _has_other_override(values: tuple[Any, ...]) -> bool:
    """True when an operand of another library overrides ufuncs (NumPy asks it next)."""
    default = np.ndarray.__array_ufunc__
    for value in values:
        override = getattr(type(value), "__array_ufunc__", default)
        if override is not default and not isinstance(value, InteropMethods):
            return True
    return False


def _views(value: Any, depth: int) -> Any:
    """``value`` with every tensor in it (through lists, tuples and dicts) replaced by a
    fresh read-only view."""
    if isinstance(value, InteropMethods):
        return fresh_view(value._array)
    if depth >= _MAX_NESTING:
        return value
    kind = type(value)
    if kind is tuple or kind is list:
        return kind(_views(item, depth + 1) for item in value)
    if kind is dict:
        return {key: _views(item, depth + 1) for key, item in value.items()}
    return value


def foreign_hint(value: object) -> str | None:
    """For a PyTorch tensor or JAX array: how to bring it in (``Tensor.from_dlpack``).

    Detected by the type's module name: strided never imports either library.
    """
    module = getattr(type(value), "__module__", "") or ""
    what = _FOREIGN.get(module.partition(".")[0])
    if what is None:
        return None
    return (
        f"{what} ({module}.{type(value).__name__}); use Tensor.from_dlpack(x), which "
        f"copies any DLPack producer"
    )
