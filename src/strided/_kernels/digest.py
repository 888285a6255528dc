"""Content digests of tensors and checkpoints, defined so anyone can recompute them.

* A tensor's digest is the SHA-256 (64 lowercase hex digits) of the compact UTF-8 JSON
  text ``{"dtype":"F32","shape":[2,3]}`` followed by its logical row-major
  little-endian bytes. A tensor stored in a type strided has no DType for (a GGUF
  block-quantized type such as ``Q4_K``, a safetensors ``F4``) hashes its stored bytes
  under the stored type's name and its logical row-major shape.
* A checkpoint's digest is the SHA-256 of the lines ``NAME\\tTENSOR_DIGEST\\n``, one per
  tensor, names sorted by their UTF-8 bytes, with a backslash, newline or tab inside a
  name written ``\\\\``, ``\\n`` or ``\\t`` (as ``sha256sum`` escapes file names).
* A member a checkpoint holds but strided cannot read (an ``.npz`` object array, a
  distributed checkpoint's item that is not plain data), when a job is told to skip
  it, has the SHA-256 of its stored bytes alone (``raw_digest``); it joins the
  checkpoint's lines as ``*unreadable*:NAME\\tDIGEST`` (``UNREADABLE_PREFIX``), so two
  files that differ only in such a member never hash alike.

So a checkpoint's digest depends only on its tensors' names, dtypes, shapes and values:
not on the file format, the shard split, the order of tensors or header keys, or
metadata (which has its own digest, ``Checkpoint.metadata_digest``, defined in
``_metadata_text``). Memory that is already contiguous (a memory-mapped file) is hashed in place;
strided views are hashed a bounded piece at a time, never copied whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .pieces import pieces

__all__ = [
    "UNREADABLE_PREFIX",
    "combine",
    "escape_name",
    "hash_array",
    "hash_pieces",
    "preamble",
    "raw_digest",
    "sort_key",
    "stored_digest",
]

UNREADABLE_PREFIX = "*unreadable*:"
_RAW_PIECE = 1 << 24  # bytes hashed between progress reports


def preamble(dtype_name: str, dims: Sequence[int]) -> bytes:
    """The text hashed before a tensor's bytes: ``{"dtype":"F32","shape":[2,3]}``."""
    shape = ",".join(str(int(dim)) for dim in dims)
    return f'{{"dtype":"{dtype_name}","shape":[{shape}]}}'.encode()


def hash_array(
    dtype_name: str,
    dims: Sequence[int],
    array: np.ndarray[Any, Any],
    report: Callable[[int], None] | None = None,
) -> str:
    """SHA-256 hex of the preamble and ``array``'s logical row-major bytes.

    ``report(bytes_done)`` is called as the bytes are hashed (progress bars).
    """
    return hash_pieces(dtype_name, dims, pieces(array), report)


def hash_pieces(
    dtype_name: str,
    dims: Sequence[int],
    parts: Iterable[np.ndarray[Any, Any]],
    report: Callable[[int], None] | None = None,
) -> str:
    """SHA-256 hex of the preamble and the bytes of ``parts``, in order."""
    digest = hashlib.sha256(preamble(dtype_name, dims))
    done = 0
    for piece in parts:
        data = piece.view(np.uint8)
        digest.update(data.data)
        if report is not None:
            done += data.size
            report(done)
    return digest.hexdigest()


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
    return hash_array(type_name, dims, stored, report)


def raw_digest(stored: np.ndarray[Any, Any], report: Callable[[int], None] | None = None) -> str:
    """SHA-256 hex of the flat ``uint8`` array ``stored`` alone (no preamble: the bytes
    have no dtype or shape strided knows), hashed in place a bounded piece at a time."""
    digest = hashlib.sha256()
    for start in range(0, stored.size, _RAW_PIECE):
        digest.update(stored[start : start + _RAW_PIECE].data)
        if report is not None:
            report(min(start + _RAW_PIECE, stored.size))
    return digest.hexdigest()


def escape_name(name: str) -> str:
    """``name`` with ``\\``, newline and tab written ``\\\\``, ``\\n``, ``\\t``.

    Three passes in C, not a Python step per character: a metadata text can be a
    vocabulary's megabytes of JSON, full of backslashes. Backslashes go first, so the
    ones the later passes write are not doubled.
    """
    if "\\" not in name and "\n" not in name and "\t" not in name:
        return name
    return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


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
