"""Every hard cap in one place (shapes, samples, parse budgets, what each reader accepts),
and the one shape check every constructor runs before it allocates."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

from .errors import DataError, LimitError, ShapeError

__all__ = [
    "MAX_ELEMENTS",
    "MAX_EXPANSION",
    "MAX_INSPECTION_SAMPLES",
    "MAX_JOBS",
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
MAX_JOBS = 1024  # processes one job may use (--jobs, jobs=)


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


# -- what a job may do with a view whose elements repeat -------------------------------

# A checkpoint job (hash, verify, diff, convert, inspect --full) refuses a tensor whose
# logical bytes exceed its stored bytes more than this many times (an ``expand`` view:
# a 1.5 KB file can describe 32 GiB), unless allowed explicitly: its work costs the
# logical size while the file holds only the stored bytes.
MAX_EXPANSION = 2**20

# -- caps on what a reader accepts ---------------------------------------------------
# Every cap on hostile input lives here; the module that applies it imports it by name
# (often under its old local name, e.g. io.npy's MAX_HEADER_BYTES).

# Text and values
MAX_DIGITS = 4300  # digits in a numeric text (Python's own int-from-str limit)
MAX_JSON_BRACKETS = 64  # nesting of a tensor JSON document's data
MAX_FOREIGN_NESTING = 64  # containers searched for tensors in a NumPy call's arguments

# File headers and indexes
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000  # the reference implementation's cap on N
MAX_SAFETENSORS_HEADER_DEPTH = 3  # top object, tensor entry (or __metadata__), a list
# Index files of real checkpoints are a few hundred KiB; metadata may nest a little.
MAX_INDEX_BYTES = 100_000_000
MAX_INDEX_DEPTH = 16
MAX_NPY_HEADER_BYTES = 10_000  # an .npy header's text (NumPy writes well under this)
# A deflated .npz object-array member is inflated up to this many bytes to record the
# globals its pickle names; a larger one is left unread (and a scan says so, never clean).
MAX_INFLATED_OBJECT_PICKLE = 1 << 26
MAX_GGUF_STRING_BYTES = 1 << 26  # one GGUF string
MAX_GGUF_HEADER_FETCH = 1 << 28  # a remote GGUF header is fetched as parsed, this in all
MAX_GGUF_METADATA_VALUES = 1 << 24  # metadata values (array elements included)
MAX_GGUF_KEY_BYTES = 65535  # one metadata key
MAX_GGUF_NAME_BYTES = 64  # one tensor name (GGML_MAX_NAME)
MAX_GGUF_DIMS = 4  # a tensor's dims (GGML_MAX_DIMS)

# Zip archives (.npz, PyTorch)
MAX_ZIP_MEMBERS = 1 << 20
# All member names together; the directory of a real checkpoint is a few MiB at most.
MAX_ZIP_NAME_BYTES = 1 << 26
# Deflate codes at most 258 bytes per 2 bits, so no stream expands more than 1032-fold.
MAX_DEFLATE_RATIO = 1032
# The code/ members of one TorchScript archive inflated to find the declarations (real
# archives hold a few MiB of code); each is inflated whole, one at a time.
MAX_TORCHSCRIPT_CODE_BYTES = 1 << 26

# Pickles (PyTorch checkpoints, read as data)
MAX_PICKLE_OPCODES = 1 << 24  # opcodes one pickle may run (each pushes at most one value)
MAX_PICKLE_MEMO = 1 << 22  # memo entries
MAX_PICKLE_MARKS = 256  # open MARKs at once
MAX_PICKLE_LINE = 1 << 16  # text arguments of protocol 0 opcodes
MAX_PICKLE_LONG_BYTES = 256  # LONG4 payload (LONG1 cannot exceed 255 bytes either)
MAX_PICKLE_NUMBER_TEXT = 1024  # a protocol 0 INT, LONG or FLOAT argument, in characters
# Far beyond any real storage; keeps byte strides of size-1 axes inside 64 bits.
MAX_PICKLE_STRIDE = 1 << 48
MAX_PYTORCH_NESTING = 256  # dicts/lists/tuples inside each other
MAX_PYTORCH_NAME = 1 << 16  # characters in a dotted name
# Byte-swapped storages of a big-endian archive kept for reuse (least recently used go).
MAX_SWAPPED_CACHE_BYTES = 64 << 20
# Distributed checkpoints: the cells a tensor's chunk boundaries cut it into (DCP writes
# one cell per chunk); each cell costs 4 bytes while the chunks are checked.
MAX_DCP_GRID_CELLS = 1 << 22

# set-metadata: the digits of an integer value's text (u64's largest, 2**64 - 1, has 20).
MAX_METADATA_INTEGER_DIGITS = 20

# Remote files and manifests
MAX_REDIRECTS = 5
MAX_MANIFEST_BYTES = 1 << 28  # a ``strided verify`` manifest

# LoRA adapters. A config is a few KB; anything near this is not one.
MAX_ADAPTER_CONFIG_BYTES = 1 << 24
MAX_ADAPTER_CONFIG_DEPTH = 16  # JSON nesting of adapter_config.json
MAX_ADAPTER_MODULE_CHARS = 1024  # a module name matched against pattern keys (real: ~100)
# rank_pattern / alpha_pattern keys are regular expressions, matched by strided's own
# automaton (linear in the name); real keys are short module paths.
MAX_PATTERN_CHARS = 256  # characters in one key
MAX_PATTERN_STATES = 2000  # automaton states of one key, bounded repetitions unrolled
MAX_PATTERN_DEPTH = 32  # groups nested inside each other in one key
# Members a job's refusal names when a checkpoint holds some it cannot read (the rest
# are counted, so one error line stays short; --skip-unreadable lists every one).
MAX_UNREADABLE_NAMED = 8
