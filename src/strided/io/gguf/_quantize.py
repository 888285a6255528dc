"""Quantization of float32 rows into GGUF tensor types, bit-identical to ``gguf.quants``.

``quantize(rows, type_name, where)`` turns a (n_rows, row_len) float32 array into the
bytes ``gguf.quants.quantize`` produces for F32, F16, BF16 and the block types Q8_0,
Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0 and MXFP4 (the kernels are in
``_quantize_blocks``). Work goes a bounded chunk of values at a time, with scratch
buffers reused across chunks, so a tensor of any size needs only its output plus a few
MiB.

What is refused (RangeError, naming ``where`` and the position):

* A block holding NaN or infinity: the reference computes its scale from the block's
  largest magnitude, so one NaN or infinity makes every value of the block NaN before
  the integer cast, and what lands in the file is whatever the platform's
  float-to-integer conversion yields (x86: zero codes, with an infinite or NaN scale)
  -- nothing a reader could take for the data.
* A block whose F16 scale (``d``; also Q4_1/Q5_1's minimum ``m``) rounds past 65504:
  Q8_0 from a largest magnitude of 65520 x 127 = 8321040, Q4_0 from 65520 x 8, Q5_0
  from 65520 x 16, TQ1_0/TQ2_0 from 65520, Q4_1/Q5_1 from a range (max - min) of 65520
  x 15 (x 31) or a minimum at or beyond +-65520 (each threshold where the float32
  scale reaches 65520, the midpoint that rounds to even, F16 infinity). The reference
  writes an infinite scale, which reads back as infinity or NaN; strided names the
  tensor, row and block instead. MXFP4's scale is E8M0 and cannot overflow.
* F16 and BF16: a finite value that rounds past the largest finite value (65504 for
  F16, about 3.39e38 for BF16). The reference writes infinity there; strided refuses
  it as its own ``convert`` does. NaN and infinities are representable and kept, with
  the reference's bits (NumPy's F16 cast; BF16 NaN made quiet, as ggml does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._core.errors import DTypeError, RangeError, ShapeError
from ._ggml import GGML_TYPES, GGMLType
from ._quantize_blocks import KERNELS, NonFinite, ScaleOverflow, Scratch

__all__ = ["FLOAT_TYPES", "QUANTIZABLE", "block_size", "quantize", "row_bytes"]

Array = np.ndarray[Any, Any]

# Block types the kernels write, and the plain float types.
QUANTIZABLE = frozenset(KERNELS)
FLOAT_TYPES = frozenset({"F32", "F16", "BF16"})
_TYPES: dict[str, GGMLType] = {
    kind.name: kind for kind in GGML_TYPES.values() if kind.name in QUANTIZABLE | FLOAT_TYPES
}

# Values per chunk (512 KiB of float32): large enough that NumPy's fixed cost per call
# (a kernel makes a few dozen) is small against the work, small enough that the chunk
# and its scratch buffers (a few MiB at most) stay near the core.
_CHUNK_VALUES = 1 << 17

_F16_MAX = np.float32(65504.0)
_BF16_MAX = np.float32(np.uint32(0x7F7F0000).view(np.float32))


def _kind(type_name: str) -> GGMLType:
    kind = _TYPES.get(type_name)
    if kind is None:
        known = ", ".join(sorted(_TYPES))
        raise DTypeError(f"cannot quantize to {type_name!r}: expected one of {known}")
    return kind


def block_size(type_name: str) -> int:
    """Values per block of ``type_name`` (1 for F32/F16/BF16); DTypeError if unknown."""
    return _kind(type_name).block_size


def row_bytes(type_name: str, row_len: int) -> int:
    """Bytes of one row of ``row_len`` values; ShapeError unless whole blocks."""
    kind = _kind(type_name)
    blocks, rest = divmod(row_len, kind.block_size)
    if rest:
        raise ShapeError(
            f"a row of {row_len} values is not a whole number of {type_name} blocks "
            f"({kind.block_size} values each)"
        )
    return blocks * kind.block_bytes


def quantize(rows: Array, type_name: str, where: str) -> Array:
    """``rows`` (float32, C-contiguous, (n_rows, row_len)) as ``type_name`` bytes.

    Returns a uint8 array of shape (n_rows, row_bytes) holding exactly what
    ``gguf.quants.quantize(rows, GGMLQuantizationType[type_name])`` produces (viewed as
    bytes) for every finite input. For F32 it is a read-only view of ``rows``' own
    bytes (shared, not copied); for every other type a new array. ``rows`` is never
    modified.

    Raises RangeError naming ``where``, the row and the columns for a block holding NaN
    or infinity, the row and block for a block whose F16 scale would overflow, and the
    element for an F16/BF16 value that overflows to infinity (see the module
    docstring); DTypeError for another type or a non-float32 array; ShapeError unless
    ``rows`` is 2-D, C-contiguous and each row a whole number of blocks. No
    floating-point warning escapes.
    """
    kind = _kind(type_name)
    if not isinstance(rows, np.ndarray) or rows.dtype != np.float32:
        found = rows.dtype if isinstance(rows, np.ndarray) else type(rows).__name__
        raise DTypeError(f"{where}: quantize takes float32 rows, not {found}")
    if rows.ndim != 2 or not rows.flags.c_contiguous:
        raise ShapeError(f"{where}: quantize takes a C-contiguous 2-D array of rows")
    n_rows, row_len = rows.shape
    width = row_bytes(type_name, row_len)
    if type_name == "F32":
        shared = rows.view(np.uint8)
        shared.flags.writeable = False
        return shared
    if rows.size == 0:
        return np.empty((n_rows, width), dtype=np.uint8)
    with np.errstate(all="ignore"):
        if type_name == "F16":
            # NumPy's own cast, in one call (the output is the only array it makes).
            out = rows.astype("<f2").view(np.uint8)
        else:
            out = np.empty((n_rows, width), dtype=np.uint8)
        if type_name in FLOAT_TYPES:
            _narrow(rows.reshape(-1), out.reshape(-1), type_name, row_len, where)
        else:
            _blocks(rows, out, kind, where)
    return out


def _blocks(rows: Array, out: Array, kind: GGMLType, where: str) -> None:
    kernel = KERNELS[kind.name]
    values = rows.reshape(-1, kind.block_size)
    blocks = out.reshape(-1, kind.block_bytes)
    step = max(1, _CHUNK_VALUES // kind.block_size)
    scratch = Scratch(step * kind.block_size)
    for start in range(0, values.shape[0], step):
        chunk = values[start : start + step]
        try:
            kernel(chunk, blocks[start : start + step], scratch)
        except NonFinite as error:
            raise _non_finite(rows, kind, start + error.block, where) from None
        except ScaleOverflow as error:
            raise _scale_overflow(rows, kind, start + error.block, error, where) from None


def _non_finite(rows: Array, kind: GGMLType, block: int, where: str) -> RangeError:
    per_row = rows.shape[1] // kind.block_size
    row, first = divmod(block, per_row)
    first *= kind.block_size
    values = rows[row, first : first + kind.block_size]
    column = first + int(np.flatnonzero(~np.isfinite(values))[0])
    return RangeError(
        f"{where}: row {row}, columns {first}-{first + kind.block_size - 1} (one "
        f"{kind.name} block) hold {float(rows[row, column])!r} at column {column}; a block "
        f"with NaN or infinity has no {kind.name} encoding"
    )


def _scale_overflow(
    rows: Array, kind: GGMLType, block: int, error: ScaleOverflow, where: str
) -> RangeError:
    per_row = rows.shape[1] // kind.block_size
    row, index = divmod(block, per_row)
    first = index * kind.block_size
    values = rows[row, first : first + kind.block_size]
    column = first + int(np.argmax(np.abs(values)))
    return RangeError(
        f"{where}: row {row}, block {index} (columns {first}-{first + kind.block_size - 1}, "
        f"one {kind.name} block): its {error.name} = {error.value!r} overflows F16 (largest "
        f"finite 65504.0); the block's largest magnitude is {float(rows[row, column])!r} at "
        f"column {column}"
    )


def _narrow(flat: Array, out: Array, type_name: str, row_len: int, where: str) -> None:
    """BF16 bytes of ``flat`` float32 values into ``out`` (F16: already there), then the
    overflow check; a chunk at a time."""
    target = out.view("<u2")
    limit = _F16_MAX if type_name == "F16" else _BF16_MAX
    scratch = np.empty(min(flat.size, _CHUNK_VALUES), dtype=np.uint32)
    for start in range(0, flat.size, _CHUNK_VALUES):
        chunk = flat[start : start + _CHUNK_VALUES]
        into = target[start : start + chunk.size]
        if type_name == "BF16":
            _bf16(chunk, into, scratch[: chunk.size])
        # NaN, infinity or a value near the top of the range: look closer.
        if not (np.max(chunk) <= limit and np.min(chunk) >= -limit):
            _special(chunk, into, start, type_name, row_len, where)


def _bf16(chunk: Array, into: Array, work: Array) -> None:
    """ggml's F32 -> BF16: round to nearest even on the bits; NaN made quiet."""
    bits = chunk.view(np.uint32)
    np.right_shift(bits, np.uint32(16), out=work)
    np.bitwise_and(work, np.uint32(1), out=work)
    np.add(work, np.uint32(0x7FFF), out=work)
    np.add(work, bits, out=work)  # wraps only for negative NaNs, replaced below
    np.right_shift(work, np.uint32(16), out=work)
    np.copyto(into, work, casting="unsafe")


def _special(
    chunk: Array, into: Array, start: int, type_name: str, row_len: int, where: str
) -> None:
    """A chunk holding NaN, infinity or values near the top of the range: BF16 NaNs
    made quiet (their top bits, quiet bit set), then RangeError for the first finite
    value that became infinite."""
    if type_name == "BF16":
        nan = np.flatnonzero(np.isnan(chunk))
        into[nan] = (chunk.view(np.uint32)[nan] >> np.uint32(16)) | np.uint32(0x0040)
    landed = (into & np.uint16(0x7FFF)) == np.uint16(0x7C00 if type_name == "F16" else 0x7F80)
    bad = np.flatnonzero(landed & np.isfinite(chunk))
    if bad.size:
        row, column = divmod(start + int(bad[0]), row_len)
        largest = "65504.0" if type_name == "F16" else "3.3895313892515355e+38"
        raise RangeError(
            f"{where}: element [{row}, {column}] = {float(chunk[bad[0]])!r} overflows "
            f"{type_name} (largest finite {largest})"
        )
