"""The error hierarchy of strided.

Every failure on bad input raises one of these, and each also inherits the matching
built-in exception so that plain ``except ValueError`` clauses keep working::

    DataError(Exception)
    ├── ShapeError(DataError, ValueError)            bad dims, reshape/broadcast mismatch
    ├── LimitError(DataError, ValueError)            MAX_RANK / MAX_ELEMENTS / other caps
    ├── DTypeError(DataError, TypeError)             unknown or mixed dtypes, unsupported op
    ├── IndexingError(DataError, IndexError)         index out of range, bad selector
    ├── RangeError(DataError, OverflowError)         value does not fit; integer overflow
    ├── DivisionError(DataError, ZeroDivisionError)  integer division by zero
    └── FormatError(DataError, ValueError)           malformed text, JSON, bytes or file
"""

from __future__ import annotations

__all__ = [
    "DTypeError",
    "DataError",
    "DivisionError",
    "FormatError",
    "IndexingError",
    "LimitError",
    "RangeError",
    "ShapeError",
]


class DataError(Exception):
    """Base of every error strided raises on bad input."""


class ShapeError(DataError, ValueError):
    """Bad dims, or shapes that do not match (reshape, broadcast, matmul)."""


class LimitError(DataError, ValueError):
    """A hard cap was exceeded: MAX_RANK, MAX_ELEMENTS, or a reader's size cap."""


class DTypeError(DataError, TypeError):
    """Unknown dtype, mixed dtypes, or an operation the dtype does not support."""


class IndexingError(DataError, IndexError):
    """An index is out of range, or a selector is not a basic index."""


class RangeError(DataError, OverflowError):
    """A value does not fit the dtype, or integer arithmetic overflowed."""


class DivisionError(DataError, ZeroDivisionError):
    """Integer division or remainder by zero."""


class FormatError(DataError, ValueError):
    """Malformed text, JSON, bytes or file content."""
