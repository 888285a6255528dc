"""``format(scalar, spec)``: Python's format-spec mini-language on a Scalar's exact value.

Floats with a presentation type or a precision go through ``float.__format__``, which
rounds the exact binary value correctly (a Scalar's value is exact in a Python float),
except ``"%"``, which multiplies by 100 in floating point there and so goes through
``Decimal``.
Integers with a float presentation type go through ``Decimal`` beyond 2**53, so
``format(2**63 - 1, ".0f")`` is exact where ``int.__format__`` rounds through a float.
Without a type or a precision a float is the canonical text ``str(s)`` (shortest in its
own dtype), padded, signed and grouped as the spec says.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import TYPE_CHECKING

from .dtype import DType
from .errors import FormatError, LimitError

if TYPE_CHECKING:
    from .scalar import Scalar

__all__ = ["format_scalar"]

_SPEC = re.compile(
    r"(?:(?P<fill>.)?(?P<align>[<>=^]))?(?P<sign>[-+ ])?(?P<z>z)?(?P<alt>\#)?(?P<zero>0)?"
    r"(?P<width>[0-9]+)?(?P<grouping>[,_])?(?:\.(?P<precision>[0-9]+))?(?P<type>[a-zA-Z%])?",
    re.DOTALL,
)
_FLOAT_TYPES = frozenset("eEfFgG%")
_EXPONENT = re.compile(r"([eE][+-])([0-9])(?![0-9])")


def format_scalar(scalar: Scalar, spec: object) -> str:
    """``format(scalar, spec)`` (see ``Scalar``); FormatError for a spec that does not fit."""
    if not isinstance(spec, str):
        raise FormatError(f"format spec must be a str, found {type(spec).__name__}")
    if spec == "":
        return str(scalar)
    parts = _SPEC.fullmatch(spec)
    if parts is None:
        raise FormatError(f"invalid format spec {spec[:40]!r} for {scalar!r}")
    if len(parts["width"] or "") > 7 or len(parts["precision"] or "") > 7:
        raise LimitError(f"format spec {spec[:40]!r}: width and precision are capped at 10**7")
    dtype, value = scalar.dtype, scalar.value
    try:
        if dtype is DType.BOOL:
            return format(str(scalar), spec)
        if isinstance(value, float):
            if parts["type"] is None and parts["precision"] is None:
                return _pad(str(scalar), parts)
            if parts["type"] == "%" and math.isfinite(value):
                return format(Decimal(value), spec)  # float's "%" multiplies inexactly
            return format(value, spec)
        if parts["type"] in _FLOAT_TYPES:
            return _exact_float_style(value, parts)
        return format(value, spec)
    except (ValueError, TypeError) as error:
        raise FormatError(f"invalid format spec {spec[:40]!r} for {scalar!r}: {error}") from None


def _exact_float_style(value: int, parts: re.Match[str]) -> str:
    """An integer under a float presentation type, exactly (``int.__format__`` would
    round it through a float), in Python's style: two-digit exponents, precision 6."""
    if -(2**53) <= value <= 2**53:  # exact in a float
        return format(float(value), parts.group(0))
    core = "".join(parts[name] or "" for name in ("sign", "z", "alt"))
    core += f"{',' if parts['grouping'] else ''}.{parts['precision'] or 6}{parts['type']}"
    text = _EXPONENT.sub(r"\g<1>0\g<2>", format(Decimal(value), core))
    if parts["grouping"] == "_":  # Decimal groups only with ","
        text = text.replace(",", "_")
    return _pad(text, parts, canonical=False)


def _pad(text: str, parts: re.Match[str], canonical: bool = True) -> str:
    """``text`` with the fill, alignment and width of ``parts``; for the canonical text
    of a float also its sign, ``z`` and grouping options."""
    if canonical and parts["z"] and text.startswith("-") and float(text) == 0.0:
        text = text[1:]
    sign = text[0] if text[:1] in ("-", "+", " ") else ""
    body = text[len(sign) :]
    if canonical and not sign and parts["sign"] in ("+", " "):
        sign = parts["sign"]
    fill = parts["fill"] or ("0" if parts["zero"] else " ")
    align = parts["align"] or ("=" if parts["zero"] else ">")
    width = int(parts["width"] or 0)
    separator = parts["grouping"] if canonical else None
    if separator and body[:1].isdigit():
        digits = len(body) - len(body.lstrip("0123456789"))
        whole, rest = body[:digits], body[digits:]
        body = _group(whole, separator) + rest
        while fill + align == "0=" and len(sign) + len(body) < width:
            whole = "0" + whole  # zero padding is grouped too, as Python does
            body = _group(whole, separator) + rest
    padding = max(0, width - len(sign) - len(body))
    if align == "=":
        return sign + fill * padding + body
    if align == "<":
        return sign + body + fill * padding
    if align == "^":
        left = padding // 2
        return fill * left + sign + body + fill * (padding - left)
    return fill * padding + sign + body


def _group(digits: str, separator: str) -> str:
    groups = [digits[max(0, end - 3) : end] for end in range(len(digits), 0, -3)]
    return separator.join(reversed(groups))
