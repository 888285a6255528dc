"""Content digests of tensors and checkpoints, defined so anyone can recompute them.

* A tensor's digest is the SHA-256 (64 lowercase hex digits) of the compact UTF-8 JSON
  text ``{"dtype":"F32","shape":[2,3]}`` followed by its logical row-major
  little-endian bytes. A tensor stored in a type strided has no DType for (a GGUF
  block-quantized type such as ``Q4_K``, a safetensors ``F4``) hashes its stored bytes
  under the stored type's name and its logical row-major shape.
* A checkpoint's digest is the SHA-256 of the lines ``NAME\\tTENSOR_DIGEST\\n``, one per
  tensor, names sorted by their UTF-8 bytes, with a backslash, newline or tab inside a
  name written ``\\\\``, ``\\n`` or ``\\t`` (as ``sha256sum`` escapes file names).

So a checkpoint's digest depends only on its tensors' names, dtypes, shapes and values:
not on the file format, the shard split, the order of tensors or header keys, or
metadata (which has its own digest, ``Checkpoint.metadata_digest``, defined in
``_metadata_text``). Memory that is already contiguous (a memory-mapped file) is hashed in place;
strided views are hashed a bounded piece at a time, never copied whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .pieces import pieces

if TYPE_CHECKING:
    from .._tensor.tensor import Tensor
    from ..jobs._checkpoint import Checkpoint

__all__ = [
    "checkpoint_digest",
    "combine",
    "digest_of",
    "escape_name",
    "preamble",
    "run_task",
    "sort_key",
    "stored_digest",
    "tensor_digest",
]

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t"}


def preamble(dtype_name: str, dims: Sequence[int]) -> bytes:
    """The text hashed before a tensor's bytes: ``{"dtype":"F32","shape":[2,3]}``."""
    shape = ",".join(str(int(dim)) for dim in dims)
    return f'{{"dtype":"{dtype_name}","shape":[{shape}]}}'.encode()


def _hash_array(
    dtype_name: str,
    dims: Sequence[int],
    array: np.ndarray[Any, Any],
    report: Callable[[int], None] | None = None,
) -> str:
    return _hash_pieces(dtype_name, dims, pieces(array), report)


def _hash_pieces(
    dtype_name: str,
    dims: Sequence[int],
    parts: Iterable[np.ndarray[Any, Any]],
    report: Callable[[int], None] | None = None,
) -> str:
    digest = hashlib.sha256(preamble(dtype_name, dims))
    done = 0
    for piece in parts:
        data = piece.view(np.uint8)
        digest.update(data.data)
        if report is not None:
            done += data.size
            report(done)
    return digest.hexdigest()


def tensor_digest(tensor: Tensor, report: Callable[[int], None] | None = None) -> str:
    """SHA-256 of ``{"dtype":...,"shape":[...]}`` and the tensor's logical row-major bytes.

    ``report(bytes_done)`` is called as the bytes are hashed (progress bars).
    """
    return _hash_array(tensor.dtype.name, tensor.shape, tensor.numpy(), report)


def stored_digest(
    type_name: str,
    dims: Sequence[int],
    stored: np.ndarray[Any, Any],
    report: Callable[[int], None] | None = None,
) -> str:
    """The digest of a tensor kept in a stored type strided cannot decode.

    ``stored`` is the tensor's stored bytes (flat ``uint8``), hashed under ``type_name``
    (``"Q4_K"``, ``"F4"``) and the logical row-major ``dims``.
    """
    return _hash_array(type_name, dims, stored, report)


def digest_of(
    checkpoint: Checkpoint, name: str, report: Callable[[int], None] | None = None
) -> str:
    """The digest of tensor ``name`` of an open checkpoint (stored bytes where undecodable).

    Tensors of a strided DType hash their values' bytes (a quantized GGUF tensor is NOT
    dequantized: its stored blocks are hashed under the ggml type's name).
    """
    from ..jobs._checkpoint import has_dtype

    info = checkpoint.info(name)
    chunks = checkpoint._chunks(name)
    if chunks is not None:
        # Stored as the bytes hashed (safetensors, GGUF): streamed, never held whole.
        return _hash_pieces(info.dtype, info.shape, chunks, report)
    if has_dtype(info.dtype):
        return tensor_digest(checkpoint[name], report)
    return stored_digest(info.dtype, info.shape, checkpoint._stored(name), report)


def escape_name(name: str) -> str:
    """``name`` with ``\\``, newline and tab written ``\\\\``, ``\\n``, ``\\t``."""
    if "\\" not in name and "\n" not in name and "\t" not in name:
        return name
    return "".join(_ESCAPES.get(char, char) for char in name)


def sort_key(name: str) -> bytes:
    """The order of names in a checkpoint digest: by UTF-8 bytes.

    Names read from JSON may hold lone surrogates, which have no UTF-8 form; they are
    encoded as UTF-8 would encode them (``surrogatepass``), so every name has a key.
    """
    return name.encode("utf-8", "surrogatepass")


def combine(digests: Iterable[tuple[str, str]]) -> str:
    """The checkpoint digest of ``(name, tensor_digest)`` pairs (in any order)."""
    ordered = sorted(digests, key=lambda item: sort_key(item[0]))
    total = hashlib.sha256()
    for name, digest in ordered:
        total.update(sort_key(f"{escape_name(name)}\t{digest}\n"))
    return total.hexdigest()


def checkpoint_digest(checkpoint: Checkpoint) -> str:
    """The digest of every tensor of ``checkpoint``, combined (see the module docstring)."""
    return combine((name, digest_of(checkpoint, name)) for name in checkpoint)


def run_task(task: tuple[str, Sequence[str]]) -> list[str]:
    """Digests of the named tensors of the checkpoint at a path (run in a worker)."""
    from .._core.errors import DataError
    from ..jobs._pool import JobError, opened

    path, names = task
    checkpoint = opened(path)
    found = []
    for name in names:
        try:
            found.append(digest_of(checkpoint, name))
        except DataError as error:
            raise JobError(path, name, str(error)) from None
    return found
