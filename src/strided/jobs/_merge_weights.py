"""Merge weights as exact rationals: ``parse_weight`` reads one, ``check_weights``
bounds a set of them so the exact weighted sum stays within the kernel's integers."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction

from .._core.errors import FormatError, LimitError

__all__ = ["check_weights", "parse_weight"]

_MAX_DENOMINATOR = 1 << 64  # weights' common denominator (exact path: chunks of 26 bits)
_MAX_NUMERATOR = 1 << 78
_WEIGHT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def parse_weight(value: object) -> Fraction:
    """A merge weight as an exact rational.

    ``str``: decimal text (``0.5``, ``-1``, ``1e-2``, ``.25``), read exactly (``"0.1"`` is
    1/10, not the float nearest it); ``Fraction`` and ``int`` as they are; ``float``:
    its exact binary value (``0.1`` is 3602879701896397/2**55: pass text for tenths).
    FormatError for anything else, NaN or infinity.
    """
    if isinstance(value, bool):
        raise FormatError(f"merge weight {value!r} is not a number")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FormatError(f"merge weight {value!r} is not finite")
        return Fraction(value)
    if isinstance(value, str):
        if len(value) > 64 or not _WEIGHT_TEXT.fullmatch(value):
            raise FormatError(f"merge weight {value[:80]!r} is not decimal text such as 0.5")
        return Fraction(value)
    raise FormatError(f"merge weight {value!r} is not a number")


def check_weights(weights: Sequence[Fraction]) -> None:
    """LimitError when the weights' common denominator is not below 2^64 or a weight's
    numerator over it is not below 2^78 (the exact path's integer widths)."""
    denominator = math.lcm(*(weight.denominator for weight in weights))
    if denominator >= _MAX_DENOMINATOR:
        raise LimitError(
            f"merge weights {[str(w) for w in weights]}: their common denominator "
            f"{denominator} is not below 2^64 (use fewer digits)"
        )
    for weight in weights:
        if abs(weight * denominator) >= _MAX_NUMERATOR:
            raise LimitError(f"merge weight {weight} is too large (below 2^78 over 2^64)")
