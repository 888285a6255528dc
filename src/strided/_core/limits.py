"""Hard caps, and the one shape check every constructor runs before it allocates."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

from .errors import DataError, LimitError, ShapeError

__all__ = [
    "MAX_ELEMENTS",
    "MAX_INSPECTION_SAMPLES",
    "MAX_RANK",
    "check_dims",
    "describe",
    "full_int_text",
    "int_text",
    "to_dim",
]

MAX_RANK = 32
MAX_ELEMENTS = 2**34
MAX_INSPECTION_SAMPLES = 65536


def to_dim(value: object, what: str = "dim") -> int:
    """Return ``value`` as a Python int dim; ``bool``, floats and negatives are ShapeError."""
    if type(value) is int:
        dim = value
    elif isinstance(value, bool):
        raise ShapeError(f"{what} must be an int, found bool {value!r}")
    else:
        try:
            dim = operator.index(value)  # type: ignore[arg-type]
        except Exception:  # a hostile __index__ may raise anything
            raise ShapeError(
                f"{what} must be an int, found {type(value).__name__} {describe(value)}"
            ) from None
    if dim < 0:
        raise ShapeError(f"{what} must be non-negative, found {int_text(dim)}")
    return dim


def check_dims(dims: object, what: str = "shape") -> tuple[int, ...]:
    """Validate a caller-supplied shape against MAX_RANK and MAX_ELEMENTS.

    The products are Python ints (arbitrary precision), so a shape whose product would
    wrap a 64-bit integer is a LimitError rather than a small number. The product of the
    non-zero dims is bounded too, so ``[0, 2**40]`` is refused although it is empty.
    """
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
        raise ShapeError(f"{what} must be a sequence of ints, found {type(dims).__name__}")
    try:
        return _check_dims(iter(dims), what)
    except DataError:
        raise
    except Exception as error:  # a hostile __iter__ / __next__
        raise ShapeError(f"{what}: cannot read the dims ({type(error).__name__})") from None


def _check_dims(dims: Iterator[object], what: str) -> tuple[int, ...]:
    result: list[int] = []
    nonzero_product = 1
    for i, raw in enumerate(dims):
        if i >= MAX_RANK:
            raise LimitError(f"{what}: rank exceeds MAX_RANK ({MAX_RANK})")
        dim = to_dim(raw, f"{what}[{i}]")
        if dim:
            nonzero_product *= dim
            if nonzero_product > MAX_ELEMENTS:
                dims_text = ", ".join(int_text(d) for d in [*result, dim])
                raise LimitError(
                    f"{what}: more than MAX_ELEMENTS ({MAX_ELEMENTS}) elements "
                    f"(dims so far [{dims_text}])"
                )
        result.append(dim)
    return tuple(result)


def int_text(value: int) -> str:
    """``str(value)`` for error messages: ``<N-bit int>`` for ints past 64 bits (a hostile
    dim must not fill a message with thousands of digits, and str() refuses 4300)."""
    if value.bit_length() > 64:
        return f"<{value.bit_length()}-bit int>"
    return str(value)


def full_int_text(value: int) -> str:
    """``str(value)`` in full; ``<N-bit int>`` only past the digits the interpreter lets
    ``str()`` write (``sys.set_int_max_str_digits``, 4300 by default)."""
    try:
        return str(value)
    except ValueError:
        return f"<{value.bit_length()}-bit int>"


def describe(value: object) -> str:
    """A short, safe text of any value for an error message (never raises)."""
    if type(value) is int:
        return int_text(value)
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace our error with its own
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


# -- what one open may build ---------------------------------------------------------

# Opening a checkpoint may build at most BUDGET_BASE + BUDGET_FACTOR x the bytes of every
# header, index, central directory and pickle it reads (io/_budget.ParseBudget).
BUDGET_BASE = 64 << 20
BUDGET_FACTOR = 16
