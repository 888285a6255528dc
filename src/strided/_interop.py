"""Tensor methods that hand tensors to NumPy, PyTorch, JAX and any DLPack consumer.

How NumPy treats a tensor (see ``InteropMethods``): ``np.asarray`` and every NumPy
function and ufunc read it through a fresh read-only zero-copy view and return NumPy's
own result, while a NumPy array or scalar on the left of a Python operator still meets
the tensor's own (checked) operator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._base import TensorInternals
from ._construct import fresh_view
from ._dlpack import CPU_DEVICE, export_capsule, import_array

if TYPE_CHECKING:
    from ._tensor import Tensor

__all__ = ["InteropMethods", "foreign_hint"]

# The ufuncs behind Python's binary operators, and the method a tensor on the right
# answers them with (NumPy calls ``ufunc(left, tensor)`` for ``left <op> tensor``).
_REFLECTED: dict[Any, tuple[str, str]] = {
    np.add: ("__radd__", "+"),
    np.subtract: ("__rsub__", "-"),
    np.multiply: ("__rmul__", "*"),
    np.true_divide: ("__rtruediv__", "/"),
    np.floor_divide: ("__rfloordiv__", "//"),
    np.remainder: ("__rmod__", "%"),
    np.power: ("__rpow__", "** or pow()"),
    np.divmod: ("__rdivmod__", "divmod()"),
    np.left_shift: ("__rlshift__", "<<"),
    np.right_shift: ("__rrshift__", ">>"),
    np.bitwise_and: ("__rand__", "&"),
    np.bitwise_or: ("__ror__", "|"),
    np.bitwise_xor: ("__rxor__", "^"),
    np.matmul: ("__rmatmul__", "@"),
    np.equal: ("__eq__", "=="),
    np.not_equal: ("__ne__", "!="),
    np.less: ("__gt__", "<"),
    np.less_equal: ("__ge__", "<="),
    np.greater: ("__lt__", ">"),
    np.greater_equal: ("__le__", ">="),
}
_NUMPY_OPERAND = (np.ndarray, np.generic)
_MAX_NESTING = 64
_FOREIGN = {"torch": "a PyTorch tensor", "jax": "a JAX array", "jaxlib": "a JAX array"}


class InteropMethods(TensorInternals):
    """Mixin of Tensor: the NumPy and DLPack protocols.

    * ``np.asarray(t)`` / ``t.__array__()``: a fresh read-only zero-copy view;
      ``__array__(copy=True)`` or another ``dtype``: a fresh writable copy.
    * ``t.__dlpack__()``: by default a fresh copy the consumer owns (``torch.from_dlpack``,
      ``torch.as_tensor``, ``torch.tensor``, ``np.from_dlpack``, ``jax.dlpack``);
      ``copy=False``: the memory itself, read-only flagged (see ``__dlpack__``).
    * Every NumPy function (``np.max(t)``, ``np.concatenate([t, u])``) and ufunc
      (``np.exp(t)``, ``np.add(t, u)``) runs on read-only views of the tensors and returns
      NumPy's result; a tensor passed as ``out=`` is a TypeError (tensors never change).
    * One exception, because NumPy routes its operators through ufuncs: a binary
      operator with a NumPy array or scalar on the left and a tensor on the right is the
      tensor's own operator, as for a Python number. ``np.float32(2) * t`` is checked
      tensor arithmetic, ``ndarray + t`` is a DTypeError like ``t + ndarray`` (wrap the
      array with ``Tensor.from_numpy``), ``ndarray == t`` is False like ``t == ndarray``,
      and ``ndarray < t`` is a TypeError like ``t > ndarray``. NumPy cannot tell an
      operator from the call, so ``np.add(x, t)`` with a NumPy ``x`` on the left means
      ``x + t`` too.
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
        """A tensor copied from any DLPack producer: a PyTorch tensor, a JAX or NumPy
        array, another library's tensor, or a DLPack capsule. Always copies.

        Every strided dtype is understood, BF16 and the 8-bit floats included. Data
        that is not on the CPU or of a type strided lacks (complex, other 8-bit floats)
        is FormatError / DTypeError, a failing producer FormatError, and shapes over
        the limits LimitError; ``x`` is never changed.
        """
        array, dtype = import_array(x)
        return cls.from_numpy(array)  # type: ignore[attr-defined,no-any-return]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy 2's protocol: by default a fresh read-only zero-copy view (new array
        objects each call, never writable); with ``copy=True`` or another ``dtype`` a
        fresh writable copy the caller owns. ``copy=False`` with a dtype change is
        ValueError, as NumPy's protocol requires."""
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

        A binary operator with a NumPy array or scalar on the left is the tensor's own
        operator (see the class docstring); ``out=`` a tensor, and ``ufunc.at`` on one,
        are TypeError.
        """
        name = f"{ufunc.__name__}.{method}" if method != "__call__" else ufunc.__name__
        _refuse_out(kwargs.get("out"), name)
        if method == "at" and inputs and isinstance(inputs[0], InteropMethods):
            _refuse_out(inputs[0], name)
        if _has_other_override((*inputs, *_as_tuple(kwargs.get("out")))):
            return NotImplemented
        if (
            method == "__call__"
            and not kwargs
            and len(inputs) == 2
            and ufunc in _REFLECTED
            and isinstance(inputs[0], _NUMPY_OPERAND)
            and isinstance(inputs[1], InteropMethods)
        ):
            return _as_operator(ufunc, inputs[0], inputs[1])
        return getattr(ufunc, method)(*_views(inputs, 0), **_views(kwargs, 0))


def _as_operator(ufunc: Any, left: Any, tensor: InteropMethods) -> Any:
    """``left <op> tensor`` as Python evaluates it once ``left`` has declined."""
    name, symbol = _REFLECTED[ufunc]
    method = getattr(type(tensor), name, None)
    result = NotImplemented if method is None else method(tensor, left)
    if result is not NotImplemented:
        return result
    if ufunc is np.equal:
        return False  # a tensor equals only a tensor
    if ufunc is np.not_equal:
        return True
    raise TypeError(
        f"unsupported operand type(s) for {symbol}: {type(left).__name__!r} and "
        f"{type(tensor).__name__!r}"
    )


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
