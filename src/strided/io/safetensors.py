"""safetensors files: zero-copy loading, lazy opening, sharded checkpoints, atomic saving.

Loading memory-maps each file read-only and makes every tensor a view of one flat
``uint8`` array over the whole mapping; that array is the tensors' shared storage, so
tensors of one file ``shares_storage`` each other and their ``storage_byte_len`` is the
file's size, and a tensor's ``offset`` counts its own elements from the start of the
file (rounded down for a tensor the file places at an offset that is not a multiple of
its itemsize; such unaligned tensors read correctly). Nothing is read from the data
region until a tensor's elements are used (BOOL tensors excepted: their bytes are
checked to be 0 or 1 when the tensor is made).
The header is validated completely before the file is mapped (see
``_safetensors_header``). As with any memory map, a file truncated or rewritten in
place by another process while mapped is outside what a reader can defend against.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import IO, Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError, IndexingError, LimitError
from .._core.memory import guard_function, guard_methods
from .._core.shape import Shape
from .._tensor.inspect import checked_options, sample_positions
from .._tensor.tensor import Tensor
from ._budget import ParseBudget
from ._common import (
    PathLike,
    TensorNames,
    atomic_write,
    file_size,
    index_shards,
    label,
    map_file,
    merge_shards,
    open_regular,
    tensor_of,
    write_logical,
)
from ._safetensors_header import MAX_HEADER_BYTES, REFERENCE_ORDER, Entry, parse_header
from ._storage import MappedStorage, Storage

__all__ = ["SafetensorsFile", "load_safetensors", "open_safetensors", "save_safetensors"]


class _Shard:
    """One validated file: its entries, metadata and the storage holding its bytes."""

    __slots__ = ("entries", "metadata", "storage", "where")

    def __init__(self, path: str, budget: ParseBudget | None = None) -> None:
        with open_regular(path) as file:
            size = file_size(file)
            entries, metadata = parse_header(file, size, path, budget)
            raw = map_file(file, size, path)
        self._set(path, MappedStorage(raw, path), entries, metadata)

    @classmethod
    def of(
        cls, where: str, storage: Storage, entries: list[Entry], metadata: dict[str, str]
    ) -> _Shard:
        """A shard whose header was parsed elsewhere (a remote file)."""
        self = cls.__new__(cls)
        self._set(where, storage, entries, metadata)
        return self

    def _set(
        self, where: str, storage: Storage, entries: list[Entry], metadata: dict[str, str]
    ) -> None:
        self.where = where
        self.storage = storage
        self.metadata = metadata
        self.entries = {entry.name: entry for entry in entries}


@guard_methods
class SafetensorsFile(TensorNames):
    """A lazily read safetensors file, or a sharded checkpoint opened as one collection.

    Made by ``open_safetensors``. ``keys()`` lists the tensor names (shard by shard, in
    data order), ``metadata`` is the ``__metadata__`` strings (``{}`` when absent; merged
    across shards), ``info(name)`` gives the dtype name and shape without touching the
    data, ``get(name)`` a zero-copy read-only Tensor and ``inspect(name, options)`` its
    inspection. A name that is not in the file is an IndexingError.
    """

    __slots__ = ("_copy", "_metadata", "_path", "_shards")

    _by_name: dict[str, tuple[_Shard, Entry]]

    def __init__(self, path: str, shards: list[_Shard], copy: bool = False) -> None:
        """Private: use ``open_safetensors``."""
        self._path = path
        self._copy = copy
        self._shards = shards
        self._by_name, self._metadata = merge_shards(path, shards, lambda shard: shard.entries)

    @property
    def path(self) -> str:
        """The path this collection was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, str]:
        """A copy of the ``__metadata__`` strings (``{}`` when the file has none)."""
        return dict(self._metadata)

    def info(self, name: str) -> tuple[str, Shape]:
        """``(dtype_name, shape)`` of a tensor, from the header alone.

        The dtype name is the file's (``"F32"``, or e.g. ``"F4"`` for dtypes strided
        cannot represent, which ``get`` refuses).
        """
        entry = self._lookup(name)[1]
        return entry.dtype_name, Shape._trusted(entry.dims)

    def get(self, name: str) -> Tensor:
        """The tensor ``name`` as a zero-copy, read-only view of the mapped file.

        Opened with ``copy=True``, a new tensor in memory, independent of the file.

        A dtype the format defines but strided has no DType for (``F4``, ``F6_*``,
        ``F8_E8M0``, the ``FNUZ`` floats, ``C64``) is a DTypeError; BOOL bytes other than
        0 and 1 are a FormatError.
        """
        shard, entry = self._lookup(name)
        return _tensor(shard, entry, self._copy)

    def inspect(self, name: str, options: Any = None) -> Any:
        """``get(name).inspect(options)``, reading only the sampled elements.

        Opened with ``copy=True``, the layout facts are those of the copy ``get`` gives
        (``storage_byte_len`` is the tensor's own size). Over HTTP they are those of the
        file opened locally (``storage_byte_len`` is the file's size), so a URL and its
        file inspect alike. BOOL bytes are checked where sampled (FormatError), and in a
        local file without ``copy``, all of them, as ``get`` does.
        """

        shard, entry = self._lookup(name)
        options = checked_options(options)
        if entry.dtype is DType.BOOL:
            if isinstance(shard.storage, MappedStorage) and not self._copy:
                return _tensor(shard, entry, False).inspect(options)
            positions = sample_positions(options, Shape._trusted(entry.dims).numel)
            sampled = shard.storage.units(entry.begin, 1, positions).reshape(-1)
            _check_bool(shard, entry, sampled, positions=positions)
        found = shard.storage.inspect(entry.begin, entry.dims, _dtype(shard, entry), options)
        return replace(found, storage_byte_len=found.byte_len) if self._copy else found

    def chunks(
        self, name: str, first: int = 0, last: int | None = None
    ) -> Iterator[np.ndarray[Any, Any]]:
        """Stored bytes ``[first, last)`` of tensor ``name`` (all by default) as bounded
        flat ``uint8`` pieces, in order.

        BOOL bytes other than 0 and 1 are a FormatError (raised at the piece holding one).
        """
        shard, entry = self._lookup(name)
        begin = entry.begin + first
        end = entry.end if last is None else entry.begin + last
        return _checked_chunks(shard, entry, shard.storage.chunks(begin, end), first)

    def stored(self, name: str) -> np.ndarray[Any, Any]:
        """The stored bytes of tensor ``name`` as one flat read-only ``uint8`` array."""
        shard, entry = self._lookup(name)
        return shard.storage.span(entry.begin, entry.end)

    def close(self) -> None:
        """Forget the file and release its storage; tensors handed out stay valid."""
        super().close()
        for shard in self._shards:
            shard.storage.close()

    def _lookup(self, name: object) -> tuple[_Shard, Entry]:
        found = self._by_name.get(name) if type(name) is str else None
        if found is None:
            raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")
        return found

    def __repr__(self) -> str:
        return f"SafetensorsFile({self._path!r}, {len(self._by_name)} tensors)"


def _dtype(shard: _Shard, entry: Entry) -> DType:
    if entry.dtype is None:
        raise DTypeError(
            f"{shard.where}: tensor {entry.name[:80]!r}: dtype {entry.dtype_name} "
            "has no strided equivalent"
        )
    return entry.dtype


def _check_bool(
    shard: _Shard,
    entry: Entry,
    data: np.ndarray[Any, Any],
    at: int = 0,
    positions: np.ndarray[Any, Any] | None = None,
) -> None:
    """FormatError unless every byte of ``data`` is 0 or 1: bytes ``at``... of a BOOL
    tensor, or its bytes at ``positions``."""
    bad = np.flatnonzero(data > 1)
    if bad.size:
        first = int(bad[0])
        index = at + first if positions is None else int(positions[first])
        raise FormatError(
            f"{shard.where}: tensor {entry.name[:80]!r}: BOOL byte {index} is "
            f"{int(data[first])}, not 0 or 1"
        )


def _checked_chunks(
    shard: _Shard, entry: Entry, chunks: Iterator[np.ndarray[Any, Any]], at: int
) -> Iterator[np.ndarray[Any, Any]]:
    for piece in chunks:
        if entry.dtype is DType.BOOL:
            _check_bool(shard, entry, piece, at)
        at += piece.size
        yield piece


def _tensor(shard: _Shard, entry: Entry, copy: bool) -> Tensor:
    dtype = _dtype(shard, entry)
    span = shard.storage.span(entry.begin, entry.end)
    if dtype is DType.BOOL:
        _check_bool(shard, entry, span)
    # NumPy collapses the view's base onto the storage's flat array.
    return tensor_of(span.view(dtype.numpy).reshape(entry.dims), dtype, copy)


@guard_function
def open_safetensors(path: PathLike, copy: bool = False) -> SafetensorsFile:
    """Open a safetensors file lazily: the header is validated and the file mapped.

    Tensors are zero-copy views of the mapping: the file must not be modified or
    truncated while they live (replacing it by rename is safe). With ``copy=True`` each
    tensor ``get`` returns is copied into memory, independent of the file.

    ``path`` may also be a directory (every ``*.safetensors`` file in it is a shard) or
    a ``*.safetensors.index.json`` whose ``weight_map`` names the shards (plain file
    names in the index's folder; each shard must hold exactly the tensors mapped to it).
    A tensor name in two shards is a FormatError; the shards' ``__metadata__`` are merged
    (a key with different values in two shards is a FormatError). A path that cannot
    be opened raises the OSError unchanged; anything wrong with the content is a
    FormatError or LimitError naming the file and the tensor.
    """
    text = label(path)
    if os.path.isdir(text):
        names = sorted(
            entry.name
            for entry in os.scandir(text)
            if entry.name.endswith(".safetensors") and entry.is_file()
        )
        if not names:
            raise FormatError(f"{text}: the folder holds no *.safetensors files")
        spent = ParseBudget(text)
        shards = [_Shard(os.path.join(text, name), spent) for name in names]
    elif text.endswith(".json"):
        shards = _index_shards(text)
    else:
        shards = [_Shard(text)]
    return SafetensorsFile(text, shards, copy)


@guard_function
def load_safetensors(path: PathLike, copy: bool = False) -> dict[str, Tensor]:
    """Every tensor of a safetensors file (or sharded checkpoint), as zero-copy views.

    The file is memory-mapped read-only; no tensor data is copied or read (BOOL tensors
    are scanned for bytes other than 0 and 1), so the file must not be modified or
    truncated while the tensors live. ``copy=True`` reads every tensor into memory
    instead, independent of the file (as the reference library's ``load_file`` does).
    Raises as ``open_safetensors`` and ``SafetensorsFile.get`` (a dtype strided cannot
    represent is a DTypeError).
    """
    opened = open_safetensors(path, copy)
    return {name: _tensor(shard, entry, copy) for name, (shard, entry) in opened._by_name.items()}


def _index_shards(path: str, budget: ParseBudget | None = None) -> list[_Shard]:
    """The shards of a ``*.safetensors.index.json``, all charged to one parse budget."""
    spent = ParseBudget(path) if budget is None else budget
    return index_shards(
        path, lambda shard: _Shard(shard, spent), lambda shard: shard.entries, budget=spent
    )


@guard_function
def save_safetensors(
    path: PathLike, tensors: Mapping[str, Tensor], metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (name -> Tensor) and optional ``metadata`` strings as safetensors.

    The file is the one the reference library writes for the same tensors (same header
    order, 8-byte aligned header padded with spaces) and each tensor's logical row-major
    bytes, so transposed, reversed and sliced views are saved as what they show. Names
    must be non-empty strings other than ``__metadata__`` (FormatError); values must be
    Tensors (DTypeError); metadata must map strings to strings (FormatError). The write
    is atomic: a temporary file in the same folder is renamed onto ``path``, so on any
    error ``path`` is left as it was.
    """
    items = _checked_tensors(tensors)
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = _checked_metadata(metadata)
    # The reference's order: largest dtype alignment first, then by name.
    items.sort(key=lambda item: (-REFERENCE_ORDER[item[1].dtype.name], item[0]))
    offset = 0
    for name, tensor in items:
        span = tensor.byte_len
        header[name] = {
            "dtype": tensor.dtype.name,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + span],
        }
        offset += span
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER_BYTES:
        raise LimitError(
            f"save_safetensors: header of {len(text)} bytes exceeds {MAX_HEADER_BYTES}"
        )

    def write(file: IO[bytes]) -> None:
        file.write(len(text).to_bytes(8, "little"))
        file.write(text)
        for _, tensor in items:
            write_logical(file, tensor.numpy())

    atomic_write(path, write)


def _checked_tensors(tensors: object) -> list[tuple[str, Tensor]]:
    if not isinstance(tensors, Mapping):
        raise FormatError(
            f"save_safetensors: tensors must be a mapping of names to Tensors, "
            f"found {type(tensors).__name__}"
        )
    items = list(tensors.items())
    for name, tensor in items:
        if type(name) is not str or not name or name == "__metadata__":
            raise FormatError(
                f"save_safetensors: tensor name {str(name)[:80]!r} must be a non-empty "
                "string other than '__metadata__'"
            )
        _check_encodable(name, "tensor name")
        if not isinstance(tensor, Tensor):
            raise DTypeError(
                f"save_safetensors: {name[:80]!r} is a {type(tensor).__name__}, not a Tensor"
            )
    return items


def _checked_metadata(metadata: object) -> dict[str, str]:
    if not isinstance(metadata, Mapping):
        raise FormatError(
            f"save_safetensors: metadata must map strings to strings, "
            f"found {type(metadata).__name__}"
        )
    checked: dict[str, str] = {}
    for key, value in metadata.items():
        if type(key) is not str or type(value) is not str:
            raise FormatError(
                f"save_safetensors: metadata must map strings to strings, found "
                f"{type(key).__name__} -> {type(value).__name__} for {str(key)[:80]!r}"
            )
        _check_encodable(key, "metadata key")
        _check_encodable(value, "metadata value")
        checked[key] = value
    return dict(sorted(checked.items()))


def _check_encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"save_safetensors: {what} {text[:80]!r} is not valid Unicode") from None
