"""Reading every element once: exact statistics, and the digest in the same pass.

The task behind ``strided verify`` and ``strided inspect --full``. A part of a tensor
yields exact ``Totals`` (``_kernels.exact_stats``); a part covering a whole tensor can also
yield its digest, hashed from the same pieces while they are in cache. Block-quantized
GGUF tensors are scanned through their dequantized values (their digest hashes the
stored blocks); tensors of stored types strided cannot decode are not scanned (only
hashed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .._core.dtype import DType
from .._core.errors import DataError
from .._kernels.digest import preamble, stored_digest
from .._kernels.exact_stats import Totals, totals
from .._kernels.pieces import pieces
from ._checkpoint import digest_of, has_dtype
from ._pool import JobError, Part, loaded, opened
from ._values import Source

__all__ = ["ScanTask", "run_task"]

_STEP = 1 << 20  # elements dequantized at a time for quantized tensors

ScanTask = tuple[str, Sequence[Part], bool]


def run_task(task: ScanTask) -> list[tuple[str | None, Totals | None]]:
    """``(digest or None, Totals or None)`` for each part of one task (run in a worker).

    ``Totals`` is None for a tensor whose values strided cannot decode; the digest is
    computed only when asked for (and then each part must be a whole tensor).
    """
    path, parts, digests = task
    found = []
    for part in parts:
        try:
            found.append(_scan(path, part, digests))
        except DataError as error:
            raise JobError(path, part.name, str(error), type(error)) from None
    return found


def _scan(path: str, part: Part, digests: bool) -> tuple[str | None, Totals | None]:
    checkpoint = opened(path)
    info = checkpoint.info(part.name)
    if has_dtype(info.dtype):
        dtype = DType[info.dtype]
        hasher = hashlib.sha256(preamble(info.dtype, info.shape)) if digests else None
        result = Totals()
        position = part.start
        size = dtype.itemsize
        # safetensors and GGUF: the stored bytes, streamed (a remote file is never held whole).
        chunks = checkpoint._chunks(part.name, part.start * size, part.stop * size)
        if chunks is None:
            parts = pieces(loaded(path, part.name).numpy(), part.start, part.stop)
        else:
            parts = (chunk.view(dtype.numpy) for chunk in chunks)
        for piece in parts:
            if hasher is not None:
                hasher.update(piece.view("u1").data)
            result = result.merge(totals([piece], dtype, position))
            position += piece.size
        return (hasher.hexdigest() if hasher is not None else None), result
    if not checkpoint.readable(part.name):
        return (digest_of(checkpoint, part.name) if digests else None), None
    # The stored blocks, read once (a remote tensor is fetched once) for both results.
    stored = checkpoint._stored(part.name)
    digest = stored_digest(info.dtype, info.shape, stored) if digests else None
    source = Source(checkpoint, part.name, stored=stored)
    result = Totals()
    for start in range(part.start, part.stop, _STEP):
        stop = min(start + _STEP, part.stop)
        result = result.merge(totals([source.values(start, stop)], source.dtype, start))
    return digest, result
