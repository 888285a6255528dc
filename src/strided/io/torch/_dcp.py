"""Distributed checkpoints (``torch.distributed.checkpoint``, DCP) read as one model.

FSDP and DTensor training save a folder: a pickled ``.metadata`` and ``*.distcp``
files (one per rank and writer thread). Every item of the state dict -- a tensor chunk
or a non-tensor value (``BYTE_IO``) -- is a complete ``torch.save`` zip archive at a
span ``(relative_path, offset, length)`` of one of those files. This reader:

* reads ``.metadata`` as data (``_dcp_metadata``: DCP's classes as inert records, any
  other global a FormatError naming it, nothing run);
* maps every ``.distcp`` file the metadata names (a plain file name in the folder; a
  missing one is a FormatError naming it) and checks every span lies inside its file
  and is large enough for the elements its chunk claims, before anything is read;
* checks that each tensor's chunks cover it exactly once (``_dcp_grid``);
* reads a chunk's archive in place (the PyTorch reader over the span, zero-copy) when
  its values are needed, checking that it holds exactly one plain tensor with the
  chunk's dtype and sizes.

Names are DCP's fully qualified names (``model.layers.0.weight``, optimizer state
under its own names), in ``.metadata``'s order. A tensor of one chunk is a zero-copy
view of the mapped file; a tensor of several is assembled chunk by chunk into one new
array. ``chunks`` streams a tensor's logical row-major bytes in bounded pieces and
``inspect`` reads only the chunks holding samples, so digests, scans, comparisons and
copies never hold a whole tensor. A ``BYTE_IO`` item whose archive builds plain data
(None, bool, int, float, str, bytes, lists, tuples, dicts with text keys) is metadata,
flattened under its name as the PyTorch reader flattens the same value in a
``torch.save`` file (``optim.param_groups.0.betas.0``); any other is listed in
``unreadable`` with the reason. Every global an item's pickle names is recorded in the
open's import log under ``FILE:fqn`` (``torch.load(weights_only=False)`` runs it when
the folder is loaded); so is ``.metadata``'s, under ``.metadata``.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._core.errors import FormatError, IndexingError, LimitError
from ..._core.limits import MAX_PYTORCH_NESTING
from ..._core.memory import guard_function, guard_methods
from ..._core.shape import Shape
from ..._tensor.inspect import (
    TensorInspection,
    checked_options,
    inspection,
    sample_positions,
)
from ..._tensor.tensor import Tensor
from .._budget import ITEM_BYTES, ParseBudget
from .._common import PathLike, TensorNames, file_size, label, map_file, open_regular
from .._detect import DCP_METADATA, ZIP_MAGIC, matching
from .._zip import read_zip, stored_bytes
from ..pickle import GLOBALS, PickledSet, TensorRef, TorchSize, describe, flatten, interpret
from ._dcp_grid import Grid
from ._dcp_metadata import DCP_GLOBALS, Layout, Span, TensorEntry, read_layout
from ._pytorch import _archive_folder, _may_overlap, _Shard

__all__ = ["DcpFile", "open_dcp"]

_CACHED_CHUNKS = 16  # chunk archives kept open for the next read (views: no copies)
_PLAIN = (type(None), bool, int, float, str, bytes)


@guard_methods
class DcpFile(TensorNames):
    """A distributed checkpoint folder, read lazily as one set of named tensors.

    Made by ``open_dcp``. ``keys()`` lists the tensors' names in ``.metadata``'s order,
    ``metadata`` the plain non-tensor items, ``unreadable`` the other non-tensor items
    (``{name: reason}``), ``imports`` every global ``.metadata`` names. ``info(name)``
    gives dtype name and shape from ``.metadata`` alone, ``get(name)`` the tensor,
    ``inspect`` and ``chunks`` read only what they need. A name that is not a tensor of
    the checkpoint is an IndexingError.
    """

    __slots__ = (
        "_cache",
        "_copy",
        "_files",
        "_folder",
        "_grids",
        "_lock",
        "_metadata",
        "_path",
        "_tensors",
        "_unreadable",
        "_unreadable_spans",
        "imports",
    )

    # What ``.metadata`` is read with: DCP's own classes are data there (verdicts).
    import_table = DCP_GLOBALS

    def __init__(self, path: str, folder: str, layout: Layout, budget: ParseBudget, copy: bool):
        """Private: use ``open_dcp``."""
        self._path = path
        self._folder = folder
        self._copy = copy
        self._tensors = layout.tensors
        self.imports = layout.imports
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, int], Tensor] = OrderedDict()
        self._files = _map_files(folder, layout)
        for entry in layout.tensors.values():
            _check_spans(self._files, entry, folder)
        self._grids = {
            fqn: Grid.check(entry, f"{folder}: tensor {fqn[:80]!r}", budget)
            for fqn, entry in layout.tensors.items()
        }
        self._by_name = dict.fromkeys(layout.tensors)
        self._metadata: dict[str, Any] = {}
        self._unreadable: dict[str, str] = {}
        self._unreadable_spans: dict[str, Span] = {}
        for fqn, span in layout.items.items():
            value, reason = self._item(fqn, span, budget)
            if reason is not None:
                self._unreadable[fqn] = reason
                self._unreadable_spans[fqn] = span
                continue
            for name, leaf in value.items():
                if name in self._metadata or name in self._by_name:
                    raise FormatError(f"{folder}: the name {name[:120]!r} is produced twice")
                self._metadata[name] = leaf

    @property
    def path(self) -> str:
        """The path this checkpoint was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, Any]:
        """The plain non-tensor items by name (shared: ``Checkpoint`` copies them)."""
        return self._metadata

    @property
    def unreadable(self) -> dict[str, str]:
        """``{name: reason}`` of the non-tensor items that are not plain data."""
        return dict(self._unreadable)

    def unreadable_stored(self, name: str) -> np.ndarray[Any, Any]:
        """The bytes of an unreadable item's span (its whole ``torch.save`` archive) as
        stored: a zero-copy read-only flat ``uint8`` view of the mapped file, for digests
        of what was not read. IndexingError for a name that is not an unreadable item;
        FormatError once closed."""
        span = self._unreadable_spans.get(name) if type(name) is str else None
        if span is None:
            raise IndexingError(f"{self._path}: no unreadable item named {str(name)[:80]!r}")
        return self._span(span)

    def info(self, name: str) -> tuple[str, Shape]:
        """``(dtype_name, shape)`` of a tensor, from ``.metadata`` alone."""
        entry = self._lookup(name)[0]
        return entry.dtype.name, Shape._trusted(entry.dims)

    def stored_byte_len(self, name: str) -> int:
        """The bytes the tensor's chunks hold: its logical size (they tile it once)."""
        entry = self._lookup(name)[0]
        return math.prod(entry.dims) * entry.dtype.itemsize

    def assembled(self, name: str) -> bool:
        """Whether ``get(name)`` builds a new array (several chunks hold the tensor)."""
        entry = self._lookup(name)[0]
        return len(entry.chunks) > 1 and math.prod(entry.dims) > 0

    def get(self, name: str) -> Tensor:
        """The tensor ``name``: a zero-copy view of the file when it is one chunk,
        else a new array filled chunk by chunk (each chunk read in place, never held
        twice). Opened with ``copy=True``, always independent of the files. A chunk
        that is not a plain tensor of the chunk's dtype and sizes is a FormatError.
        """
        entry = self._lookup(name)[0]
        if math.prod(entry.dims) == 0:
            return Tensor._adopt(np.empty(entry.dims, dtype=entry.dtype.numpy), entry.dtype)
        if len(entry.chunks) == 1:
            tensor = self._chunk(entry, 0)
            if self._copy:
                return Tensor._adopt(tensor.numpy().copy(), entry.dtype)
            return tensor
        out = np.empty(entry.dims, dtype=entry.dtype.numpy)
        for index, chunk in enumerate(entry.chunks):
            if 0 in chunk.sizes:
                continue
            box = tuple(
                slice(start, start + size)
                for start, size in zip(chunk.offsets, chunk.sizes, strict=True)
            )
            out[box] = self._array(entry, index)
        return Tensor._adopt(out, entry.dtype)

    def inspect(self, name: str, options: Any = None) -> TensorInspection:
        """``get(name).inspect(options)``, reading only the chunks that hold samples.

        The layout facts are those of the tensor ``get`` gives (a new contiguous array
        for a tensor of several chunks); the samples are copies.
        """
        entry, grid = self._lookup(name)
        options = checked_options(options)
        numel = math.prod(entry.dims)
        if len(entry.chunks) == 1 or numel == 0:
            return self.get(name).inspect(options)
        positions = sample_positions(options, numel)
        coords = np.stack(np.unravel_index(positions, entry.dims), axis=1)
        owners = grid.owners(coords)
        values = np.empty(positions.size, dtype=entry.dtype.numpy)
        for index in np.unique(owners).tolist():
            mask = owners == index
            local = coords[mask] - np.array(entry.chunks[index].offsets, dtype=np.int64)
            values[mask] = self._array(entry, index)[tuple(local.T)]
        strides = tuple(math.prod(entry.dims[axis + 1 :]) for axis in range(len(entry.dims)))
        nbytes = numel * entry.dtype.itemsize
        layout = (strides, nbytes, nbytes, True)
        return inspection(entry.dtype, Shape._trusted(entry.dims), positions, values, layout)

    def chunks(
        self, name: str, first: int = 0, last: int | None = None
    ) -> Iterator[np.ndarray[Any, Any]]:
        """Logical row-major bytes ``[first, last)`` of tensor ``name`` (all by default;
        whole elements) as bounded flat ``uint8`` pieces, in order.

        Pieces inside one chunk are zero-copy views of the mapped file; rows that
        several chunks share are assembled a bounded block at a time.
        """
        entry, grid = self._lookup(name)
        size = entry.dtype.itemsize
        stop = math.prod(entry.dims) if last is None else last // size
        pieces = grid.rows(entry, lambda index: self._array(entry, index), first // size, stop)
        return (piece.view(np.uint8) for piece in pieces)

    def close(self) -> None:
        """Forget the folder (closing twice is fine); tensors handed out stay valid."""
        super().close()
        self._files = {}
        with self._lock:
            self._cache.clear()

    def _lookup(self, name: object) -> tuple[TensorEntry, Grid]:
        if type(name) is str and name in self._by_name:
            return self._tensors[name], self._grids[name]
        raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")

    def _where(self, span: Span) -> str:
        end = span.offset + span.length
        return f"{self._folder}/{span.relative_path} (bytes {span.offset}..{end})"

    def _array(self, entry: TensorEntry, index: int) -> np.ndarray[Any, Any]:
        return self._chunk(entry, index).numpy()

    def _chunk(self, entry: TensorEntry, index: int) -> Tensor:
        """Chunk ``index`` of ``entry`` as a tensor over its span (kept for reuse)."""
        key = (entry.fqn, index)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        chunk = entry.chunks[index]
        raw = self._span(chunk.span)
        where = f"{self._where(chunk.span)}: {entry.fqn[:80]!r} chunk at {list(chunk.offsets)}"
        shard = _Shard(where, ParseBudget(where), raw=raw)
        if len(shard.tensors) != 1 or shard.metadata:
            raise FormatError(f"{where}: the archive holds {len(shard.tensors)} tensors, not one")
        ref = next(iter(shard.tensors.values()))
        if type(ref) is not TensorRef:
            raise FormatError(f"{where}: the archive holds a NumPy array, not a torch tensor")
        if ref.dtype is not entry.dtype or ref.dims != chunk.sizes:
            raise FormatError(
                f"{where}: the archive holds a {ref.dtype.name} tensor of shape "
                f"{list(ref.dims)}, .metadata says {entry.dtype.name} {list(chunk.sizes)}"
            )
        if _may_overlap(ref.dims, ref.strides):
            raise FormatError(f"{where}: the chunk is a view whose elements repeat")
        tensor = shard.tensor(entry.fqn, ref, False)
        if not shard.big_endian:  # a converted copy is not kept: memory stays bounded
            with self._lock:
                self._cache[key] = tensor
                while len(self._cache) > _CACHED_CHUNKS:
                    self._cache.popitem(last=False)
        return tensor

    def _span(self, span: Span) -> np.ndarray[Any, Any]:
        raw = self._files.get(span.relative_path)
        if raw is None:
            raise FormatError(f"{self._path}: the checkpoint is closed")
        return raw[span.offset : span.offset + span.length]

    def _item(self, fqn: str, span: Span, budget: ParseBudget) -> tuple[Any, str | None]:
        """A ``BYTE_IO`` item's flattened metadata and None, or None and why it is not
        plain data."""
        raw = self._span(span)
        where = f"{self._where(span)}: item {fqn[:80]!r}"
        members = read_zip(raw, where)
        ends = (member.data_offset + member.compressed_size for member in members.values())
        budget.grant(len(raw) - max(ends, default=0))
        prefix = _archive_folder(list(members), where)
        member = members.get(prefix + "data.pkl")
        if member is None:
            raise FormatError(f"{where}: the archive has no {prefix}data.pkl")
        data = memoryview(stored_bytes(raw, member))  # type: ignore[arg-type]
        storages: dict[str, Any] = {}
        # torch.load(weights_only=False) runs this pickle when the folder is loaded, so
        # every global it names is recorded; lenient, so the record is complete (any
        # record makes the item unreadable, never run).
        named = f"{span.relative_path}:{fqn}"
        imports = budget.imports.member(named, GLOBALS)
        try:
            root, end = interpret(
                data,
                0,
                f"{where}: data.pkl",
                storages,
                budget=budget,
                lenient=True,
                imports=imports,
            )
        except LimitError:
            raise
        except FormatError as error:
            budget.imports.skipped(named, str(error))  # not read to its end: not judged
            return None, str(error)
        if end != len(data):
            raise FormatError(f"{where}: data.pkl has {len(data) - end} bytes after its STOP")
        if storages:
            return None, "it holds tensors (only plain data is metadata)"
        reason = _plain(root, len(data), where, budget)[1]
        if reason is not None:
            return None, reason
        # Named as the PyTorch reader names the same value in a torch.save file (lists,
        # tuples and dicts become dotted keys), so the dcp_to_torch_save file of this
        # folder has the same metadata.
        return flatten({fqn: root}, fqn, where, len(data), budget)[1], None

    def __repr__(self) -> str:
        return f"DcpFile({self._path!r}, {len(self._by_name)} tensors)"


def _map_files(folder: str, layout: Layout) -> dict[str, np.ndarray[Any, Any]]:
    """Every file the spans name, mapped; a missing one is a FormatError naming it."""
    names = dict.fromkeys(span.relative_path for span in layout.items.values())
    for entry in layout.tensors.values():
        names.update(dict.fromkeys(chunk.span.relative_path for chunk in entry.chunks))
    files = {}
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open_regular(path) as file:
                files[name] = map_file(file, file_size(file), path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise FormatError(
                f"{folder}: .metadata names the file {name!r}, which is not in the folder"
            ) from None
    for fqn, span in layout.items.items():
        _inside(files, span, f"{folder}: item {fqn[:80]!r}")
    return files


def _inside(files: dict[str, np.ndarray[Any, Any]], span: Span, where: str) -> None:
    size = int(files[span.relative_path].size)
    if span.offset + span.length > size:
        raise FormatError(
            f"{where}: its span (bytes {span.offset}..{span.offset + span.length}) runs past "
            f"the end of {span.relative_path!r} ({size} bytes)"
        )


def _check_spans(files: dict[str, np.ndarray[Any, Any]], entry: TensorEntry, folder: str) -> None:
    """Each chunk's span lies inside its file, can hold the chunk's elements, and is a
    zip archive (a folder written as safetensors is named as such)."""
    for chunk in entry.chunks:
        span = chunk.span
        at = f"{folder}: tensor {entry.fqn[:80]!r} chunk at {list(chunk.offsets)}"
        _inside(files, span, at)
        needed = math.prod(chunk.sizes) * entry.dtype.itemsize
        if needed > span.length:
            raise FormatError(
                f"{at}: {needed} bytes of {entry.dtype.name} elements cannot be in its span "
                f"of {span.length} bytes"
            )
        if not needed:
            continue
        raw = files[span.relative_path]
        head = bytes(raw[span.offset : span.offset + 16])
        if head[:4] != ZIP_MAGIC:
            # DCP's safetensors writer puts one safetensors file where the spans begin.
            found = matching(head, int(raw.size) - span.offset)
            if found is not None and found.name == "safetensors":
                raise FormatError(
                    f"{at}: the chunk is stored as safetensors (a folder written with "
                    "SerializationFormat.SAFETENSORS), which strided does not read"
                )
            raise FormatError(f"{at}: its span does not begin with a torch.save zip archive")


def _plain(
    root: object, pickle_bytes: int, where: str, budget: ParseBudget
) -> tuple[Any, str | None]:
    """``root`` as plain data (tuples and torch.Size as lists, sets as lists in stored
    order), or None and the reason it is not. Walked without recursion; shared parts
    are copied at each use, at most two visits per pickle byte (LimitError past that)."""

    def convert(value: object) -> tuple[object, object | None]:
        """(converted value or a new empty container, the source to fill it from)."""
        kind = type(value)
        if kind in _PLAIN:
            return value, None
        if kind is TorchSize:
            assert isinstance(value, TorchSize)
            return list(value.dims), None
        if kind in (list, tuple) or kind is PickledSet:
            return [], value
        if isinstance(value, dict):
            return {}, value
        raise _NotPlain(describe(value))

    visits = 2 * pickle_bytes + 4096
    try:
        top, source = convert(root)
        stack: list[tuple[object, object, int]] = [(top, source, 0)] if source is not None else []
        while stack:
            target, source, depth = stack.pop()
            if depth >= MAX_PYTORCH_NESTING:
                raise FormatError(f"{where}: containers nest deeper than {MAX_PYTORCH_NESTING}")
            items = source.items() if isinstance(source, dict) else enumerate(_listed(source))
            for key, value in items:
                visits -= 1
                if visits < 0:
                    raise LimitError(f"{where}: the data refers to its parts too many times")
                budget.charge(ITEM_BYTES, "metadata values")
                if isinstance(target, dict) and type(key) is not str:
                    raise _NotPlain(f"a dict key {describe(key)}")
                made, inner = convert(value)
                if isinstance(target, dict):
                    target[key] = made
                else:
                    assert isinstance(target, list)
                    target.append(made)
                if inner is not None:
                    stack.append((made, inner, depth + 1))
    except _NotPlain as error:
        return None, f"it holds {error}, not plain data"
    return top, None


def _listed(source: object) -> list[object] | tuple[object, ...]:
    if type(source) is PickledSet:
        return source.items
    assert isinstance(source, (list, tuple))
    return source


class _NotPlain(Exception):
    """A value that is not plain data (internal: turned into an ``unreadable`` reason)."""


@guard_function
def open_dcp(path: PathLike, copy: bool = False, *, budget: ParseBudget | None = None) -> DcpFile:
    """Open a distributed checkpoint lazily, without running its pickle.

    ``path`` is the folder (holding ``.metadata``) or its ``.metadata`` file. The
    metadata is read as data and every span, chunk layout and non-tensor item checked
    at once; tensor chunks are read when a tensor is asked for. Tensors of one chunk
    are views of the mapped files (which must not be modified or truncated while they
    live); ``copy=True`` gives independent copies. A path that cannot be opened raises
    the OSError unchanged; anything wrong with the content (a missing ``.distcp`` file
    included) is a FormatError or LimitError naming the file.

    What the open builds is charged to ``budget`` (a fresh one when None): past 64 MiB
    plus 16 times the pickle and zip directory bytes read, a LimitError.
    """
    text = label(path)
    folder = text if os.path.isdir(text) else os.path.dirname(text) or "."
    spent = ParseBudget(text) if budget is None else budget
    where = os.path.join(folder, DCP_METADATA)
    with open_regular(where) as file:
        raw = map_file(file, file_size(file), where)
    layout = read_layout(memoryview(raw), where, spent)  # type: ignore[arg-type]
    return DcpFile(text, folder, layout, spent, copy)
