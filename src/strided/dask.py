"""Checkpoints as Dask arrays, and exact sums of Dask arrays whatever their chunking.

Needs the optional extra (``pip install 'strided[dask]'``); importing this module
without Dask is an ImportError that says so. ``import strided`` never imports Dask.

* ``from_checkpoint(path, chunks="auto")`` gives ``{name: dask.array.Array}`` for
  every tensor of any checkpoint ``open_checkpoint`` reads. Nothing is read up front
  but the header: each chunk is read by the worker that computes it, which opens the
  checkpoint itself (memory-mapped where the format allows), so workers need the same
  filesystem. Dtypes are kept (BF16 and the 8-bit floats as ``ml_dtypes`` dtypes);
  block-quantized GGUF tensors are dequantized to F32, as ``checkpoint[name]`` does.
* ``exact_sum(array)`` is the sum ``Tensor.sum()`` defines, computed chunk by chunk:
  every chunk's partial sum is exact (a Python int, in units of the dtype's smallest
  subnormal for floats, with counts of NaN and infinities), partials are merged in a
  tree, and the total is rounded once. So the result does not depend on the chunking
  or on the number of workers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._core.dtype import DType
from ._core.errors import DTypeError, RangeError, ShapeError
from ._core.scalar import Scalar
from ._kernels.checked import int_range
from ._kernels.partials import ExactSum, combine, exact_partial
from ._kernels.pieces import pieces
from .io._http import is_url
from .jobs._checkpoint import has_dtype, open_checkpoint
from .jobs._dask_chunks import TensorChunks
from .jobs._dask_engine import require
from .jobs._pool import where

__all__ = ["exact_sum", "from_checkpoint"]

_dask = require("dask", "strided.dask")
_da = require("dask.array", "strided.dask")
_FAN_IN = 8  # partial sums merged per task of the reduction tree


def from_checkpoint(
    path: str | os.PathLike[str], chunks: Any = "auto", *, lenient: bool = False
) -> dict[str, Any]:
    """Every tensor of the checkpoint at ``path`` as a lazy ``dask.array.Array``.

    ``chunks`` is anything ``dask.array.from_array`` accepts (``"auto"``, an int, a
    tuple, a dict by axis), applied to each tensor, or a dict by tensor name of those
    (tensors it does not name get ``"auto"``); a chunking that does not fit a tensor
    is ShapeError naming it. Each chunk is read in the worker that computes it
    (a read-only view of the memory-mapped file where the format allows). Names are
    in file order; tensors whose stored type strided cannot decode (safetensors
    ``F4``...) are left out. F8_E5M2 chunks cross between processes as their bytes
    (Dask's wire format cannot describe that dtype) and arrive as F8_E5M2 again; the
    other dtypes travel as they are. The file is read only for its header here: opening
    failures raise as ``open_checkpoint`` does; the file must not change while the
    arrays are in use. ``path`` may be an http(s) URL (``strided[remote]``): each worker
    fetches only the rows of the chunks it computes (a quantized GGUF tensor whole).
    ``lenient`` is ``open_checkpoint``'s (here and in every worker).
    """
    location = where(os.fspath(path), lenient)
    arrays: dict[str, Any] = {}
    with open_checkpoint(location, lenient=lenient) as checkpoint:
        stamp = _stamp(location)
        for name in checkpoint:
            info = checkpoint.info(name)
            if has_dtype(info.dtype):
                dtype, quantized = DType[info.dtype], False
            elif checkpoint.readable(name):
                dtype, quantized = DType.F32, True
            else:
                continue
            shape = tuple(int(dim) for dim in info.shape)
            source = TensorChunks(location, name, shape, dtype.numpy, quantized, stamp)
            arrays[name] = _array(source, _chunks_of(chunks, name), stamp)
    return arrays


def _chunks_of(chunks: Any, name: str) -> Any:
    """The chunking asked for tensor ``name`` (a dict with str keys is by tensor name)."""
    if isinstance(chunks, Mapping) and any(isinstance(key, str) for key in chunks):
        return chunks.get(name, "auto")
    return chunks


def _stamp(path: str) -> tuple[int, ...]:
    """What identifies this state of the file (or folder of shards): sizes and times.

    A URL's state is unknown: each call gets its own, so workers fetch its header anew.
    """
    if is_url(path):
        return (uuid.uuid4().int,)
    try:
        found = [os.stat(path)]
        if os.path.isdir(path):
            found += [entry.stat() for entry in sorted(os.scandir(path), key=lambda e: e.name)]
    except OSError:
        return (0,)
    return tuple(value for item in found for value in (item.st_size, item.st_mtime_ns))


def _array(source: TensorChunks, chunks: Any, stamp: tuple[int, ...]) -> Any:
    try:
        normal = _da.core.normalize_chunks(chunks, source.shape, dtype=source.dtype)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise ShapeError(
            f"{source.path}: tensor {source.name!r} of shape {list(source.shape)}: chunks "
            f"{chunks!r} do not fit it ({error})"
        ) from None
    token = _dask.base.tokenize(source.path, source.name, str(source.dtype), normal, stamp)
    return _da.from_array(
        source,
        chunks=normal,
        name=f"strided-{token}",
        lock=False,
        asarray=False,
        fancy=False,
        meta=np.empty((0,) * source.ndim, dtype=source.dtype),
    )


def exact_sum(array: Any) -> Scalar:
    """The sum of every element of a Dask array, as ``Tensor.sum()`` defines it.

    Integers: exact; a total that does not fit the dtype is RangeError. F64: correctly
    rounded (the value of ``math.fsum``). F32, F16 and BF16: correctly rounded too
    (``Tensor.sum()`` may be one ulp away from that). NaN, or infinities of both signs,
    give NaN; a finite total past the largest value gives infinity; an exact zero is
    +0.0. BOOL: the number of true elements, as an I64 Scalar. The result is the same
    for any chunking and any number of workers. Computed at once with Dask's current
    scheduler. The 8-bit floats and dtypes strided does not have are DTypeError;
    something that is not a Dask array is DTypeError.
    """
    if not isinstance(array, _da.Array):
        raise DTypeError(f"exact_sum: expected a dask.array.Array, found {type(array).__name__}")
    dtype = DType.from_numpy(array.dtype)
    if dtype.is_storage_only:
        raise DTypeError(f"exact_sum: not defined for {dtype.name}; convert to a wider dtype first")
    partial = _dask.delayed(_partial, pure=False)  # fresh keys: a repeat is computed anew
    merge = _dask.delayed(combine, pure=False)
    level = [partial(block, dtype.name) for block in array.to_delayed().ravel().tolist()]
    while len(level) > 1:
        level = [merge(level[i : i + _FAN_IN]) for i in range(0, len(level), _FAN_IN)]
    found = level[0].compute() if level else ExactSum()
    return _finish(found, DType.I64 if dtype is DType.BOOL else dtype)


def _partial(block: Any, dtype_name: str) -> ExactSum:
    """The exact partial sum of one chunk (run in a worker)."""
    dtype = DType[dtype_name]
    values = np.asarray(block)
    if DType.from_numpy(values.dtype) is not dtype:
        raise DTypeError(f"exact_sum: a chunk holds {values.dtype}, the array says {dtype.name}")
    if dtype is DType.BOOL:  # a count (a NumPy bool may hold any nonzero byte)
        return ExactSum(int(np.count_nonzero(values)))
    values = np.asarray(values, dtype=dtype.numpy)  # little-endian
    return combine(exact_partial(piece, dtype) for piece in pieces(values))


def _finish(found: ExactSum, dtype: DType) -> Scalar:
    """The total of merged partials, rounded once into ``dtype``."""
    if not dtype.is_float:
        low, high = int_range(dtype)
        if not low <= found.total <= high:
            raise RangeError(
                f"exact_sum: the sum {found.total} does not fit {dtype.name} ({low} to {high})"
            )
        return Scalar._trusted(dtype, found.total)
    return Scalar._trusted(dtype, found.rounded(dtype))
