"""Floats that remember the type they were stored in.

A GGUF FLOAT32 value or a NumPy ``float32`` scalar in a pickle is read as the Python
float of exactly the same value, but its canonical text is the shortest text that
rounds back in its *stored* type (``0.1``, not ``0.10000000149011612``). The type
travels with the value: each narrower float type has a ``float`` subclass whose class
attribute ``dtype`` names it, so a value keeps its width inside lists, nested arrays
and dicts, through copies and pickling, while it still is a ``float`` for every caller
(equal, hashed and computed with as the same number; arithmetic on it gives plain
floats). A plain Python ``float`` is F64.

An array read in one stored type (a GGUF ``ARRAY[FLOAT32]``: a vocabulary's 262,144
scores) is a ``StoredFloatList``: a ``list`` of plain floats whose ``dtype`` says what
its float elements were stored as. Making every element a ``StoredFloat`` instead
would cost a garbage-collected object per element (instances of a Python-defined class
always are), several times a plain float's price in time and memory; the list carries
the width once. A nest (GGUF ``ARRAY[ARRAY[FLOAT32]]``) is a list of such lists, so
every depth keeps its width.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from .dtype import DType

__all__ = [
    "STORED_FLOATS",
    "BF16Float",
    "F8E4M3Float",
    "F8E5M2Float",
    "F8E8M0Float",
    "F16Float",
    "F32Float",
    "StoredFloat",
    "StoredFloatList",
    "copied",
    "float_dtype",
    "stored_float",
]


class StoredFloat(float):
    """A float whose value was stored in the narrower float type ``dtype``.

    Its value is exact (every value of those types is a Python float). It compares,
    hashes and computes as the plain float it equals; ``repr`` is float's.
    """

    __slots__ = ()
    dtype: ClassVar[DType]


class F32Float(StoredFloat):
    """A float stored as F32 (GGUF FLOAT32, NumPy ``float32``)."""

    __slots__ = ()
    dtype = DType.F32


class F16Float(StoredFloat):
    """A float stored as F16 (NumPy ``float16``)."""

    __slots__ = ()
    dtype = DType.F16


class BF16Float(StoredFloat):
    """A float stored as BF16 (``ml_dtypes.bfloat16``)."""

    __slots__ = ()
    dtype = DType.BF16


class F8E4M3Float(StoredFloat):
    """A float stored as F8_E4M3 (``ml_dtypes.float8_e4m3fn``)."""

    __slots__ = ()
    dtype = DType.F8_E4M3


class F8E5M2Float(StoredFloat):
    """A float stored as F8_E5M2 (``ml_dtypes.float8_e5m2``)."""

    __slots__ = ()
    dtype = DType.F8_E5M2


class F8E8M0Float(StoredFloat):
    """A float stored as F8_E8M0 (``ml_dtypes.float8_e8m0fnu``)."""

    __slots__ = ()
    dtype = DType.F8_E8M0


STORED_FLOATS: dict[DType, type[StoredFloat]] = {
    kind.dtype: kind
    for kind in (F32Float, F16Float, BF16Float, F8E4M3Float, F8E5M2Float, F8E8M0Float)
}


def stored_float(dtype: DType, value: float) -> float:
    """``value`` (exact in ``dtype``) as a float that remembers ``dtype``.

    F64 gives a plain ``float``; a float type without a class here (``F4``, ``F6_*``)
    is a KeyError: no reader stores metadata in those.
    """
    if dtype is DType.F64:
        return float(value)
    return STORED_FLOATS[dtype](value)


def float_dtype(value: float) -> DType:
    """The type ``value`` was stored in: its ``dtype`` for a ``StoredFloat``, else F64."""
    return value.dtype if isinstance(value, StoredFloat) else DType.F64


class StoredFloatList(list[float]):
    """A list whose float elements were all stored as ``dtype`` (a GGUF FLOAT32 array).

    The elements are plain floats holding the stored values exactly; the list says
    their type once. ``copy()`` keeps it (slicing gives a plain list, as for every list
    subclass).
    """

    __slots__ = ("dtype",)

    def __init__(self, items: Iterable[float] = (), dtype: DType = DType.F32) -> None:
        """A list of ``items``, each a float exact in ``dtype``."""
        super().__init__(items)
        self.dtype = dtype

    def copy(self) -> StoredFloatList:
        """A shallow copy that keeps ``dtype``."""
        return StoredFloatList(self, self.dtype)


def copied(value: Any) -> Any:
    """A metadata value with every list and dict copied (to any depth), the lists' and
    floats' stored types kept; other values (immutable) are shared."""
    if isinstance(value, StoredFloatList):
        return value.copy()
    if isinstance(value, list):
        # A vocabulary of strings is copied in one call, not one per element.
        if not any(issubclass(kind, (list, dict)) for kind in set(map(type, value))):
            return value[:]
        return [copied(item) for item in value]
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    return value
