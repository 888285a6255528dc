"""PyTorch checkpoints (``torch.save`` files) read without running them.

A ``torch.save`` file is a pickle program plus raw storage bytes. The pickle is
interpreted as data by ``pickle._machine`` (nothing is imported or called); what it describes
is then checked against the bytes that are really there:

* the zip format (torch >= 1.6): one top-level folder holding ``data.pkl``,
  ``data/<key>`` (one member per storage, stored uncompressed) and ``byteorder``;
* the legacy format (``_use_new_zipfile_serialization=False``): pickles of the magic
  number, the protocol version and the system info, the object, the list of storage
  keys, then each storage as an 8-byte element count and its bytes, to the end of file;
* a ``pytorch_model.bin.index.json`` whose ``weight_map`` names the shards.

The format is recognized from the first bytes, never from the name. Every storage a
persistent id names must exist with exactly the size it claims; every tensor's offset
and extent must lie inside its storage. Tensors are read-only views of the mapped file
(one flat array per storage, so tensors that share a torch storage share a strided
storage: tied weights and slices), made when asked for. A view whose elements repeat
(a zero stride from ``expand``, an overlapping ``as_strided``) stays such a view: opening
or inspecting it never expands it, so a tiny file cannot claim gigabytes. Big-endian
archives are converted on copy (a storage at a time, at the tensor's own element size,
also for the untyped storages of ``_rebuild_tensor_v3``; at most 64 MiB of converted
storages are kept for reuse); a tensor with torch's negative bit is negated on copy
(for a view whose elements repeat, the storage elements it covers are negated, and it
stays a view of them). Otherwise the values are exactly the stored bits, as
``torch.load(path, weights_only=True)`` gives them.

One ``ParseBudget`` bounds what an open builds (``_budget``): it is granted the bytes
of every pickle and of the zip's central directory (and an index), and charged for
every object the pickle builds and every dotted name and metadata leaf the walk makes,
each time a shared (memoized) container is walked again.

Names (``pickle._walk``): tensors (and NumPy arrays, which are tensors too) anywhere
inside nested dicts, lists and tuples (sets read as lists in sorted text order;
Namespaces, AttributeDicts, defaultdicts and Counters as dicts) are named by the dotted
path of keys (list items by their index, keys that are not str by their text: ``3``,
``0.5``, ``True``, ``None``, ``(1, 2)``); a bare tensor at the top level is named after
the file's stem. Plain leaves (None, bool, int, float, str -- NumPy scalars as plain
numbers, complex numbers, paths and devices as their text -- ``torch.Size`` as a list of
ints, and a dtype as its name) are the metadata, under the same dotted names. Bytes,
types and bare storages are neither tensors nor metadata and are not reported; an
``OrderedDict``'s attributes (a state dict's ``_metadata``) are ignored. A name produced
twice is a FormatError.

Strict by default: a global outside the allow-list is a FormatError naming it. Opened
with ``lenient=True``, any other global becomes an inert record (never imported or
called) whose parts are walked for tensors; a pickled ``torch.nn.Module`` is named as
its ``state_dict()`` names it. Either way ``imports`` lists every ``(module, name)`` the
pickles named, in first-use order.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..._core.dtype import DType
from ..._core.errors import FormatError, IndexingError
from ..._core.limits import MAX_SWAPPED_CACHE_BYTES as SWAPPED_CACHE_BYTES
from ..._core.memory import guard_function, guard_methods
from ..._core.shape import Shape
from ..._core.storage import seal
from ..._tensor.construct import shaped
from ..._tensor.tensor import Tensor
from .._budget import ParseBudget
from .._common import (
    PathLike,
    TensorNames,
    file_size,
    index_shards,
    label,
    map_file,
    merge_shards,
    open_regular,
    tensor_of,
)
from .._detect import PICKLE_PROTO, TORCH_LEGACY_MAGIC, ZIP_MAGIC
from .._zip import ZipMember, read_zip, stored_bytes
from ..pickle import (
    GLOBALS,
    ArrayRef,
    Global,
    Leaf,
    StorageRef,
    TensorRef,
    array_values,
    describe,
    flatten,
    interpret,
)

__all__ = ["PyTorchFile", "load_pytorch", "open_pytorch"]

_LEGACY_PROTOCOL = 1001


class _Shard:
    """One opened ``torch.save`` file: its mapping, storage offsets and described tensors."""

    __slots__ = (
        "_arrays",
        "_swapped",
        "_swapped_bytes",
        "big_endian",
        "imports",
        "lenient",
        "metadata",
        "raw",
        "spans",
        "tensors",
        "where",
    )

    # The allow-list of globals this kind of file is read with (a class constant).
    TABLE: ClassVar[Mapping[str, Global]] = GLOBALS

    def __init__(
        self,
        path: str,
        budget: ParseBudget,
        lenient: bool = False,
        raw: np.ndarray[Any, Any] | None = None,
    ) -> None:
        """Open the file at ``path``; or, given ``raw`` (a flat read-only uint8 array: a
        span of a file mapped already, such as a distributed checkpoint's chunk), read
        the archive it holds in place, without copying it, ``path`` only labelling it."""
        self.where = path
        self.lenient = lenient
        # Every (module, name) the pickles name, in first-use order (a dict as an ordered set).
        self.imports: dict[tuple[str, str], None] = {}
        if raw is None:
            with open_regular(path) as file:
                raw = map_file(file, file_size(file), path)
        self.raw = raw
        self.big_endian = False
        storages: dict[str, StorageRef] = {}
        if bytes(self.raw[:4]) == ZIP_MAGIC:
            root, pickle_bytes, self.spans = self._zip(storages, budget)
        elif bytes(self.raw[:1]) == bytes([PICKLE_PROTO]):
            root, pickle_bytes, self.spans = self._legacy(storages, budget)
        else:
            raise FormatError(
                f"{path}: not a PyTorch checkpoint (first bytes {bytes(self.raw[:8])!r}); "
                "expected a zip archive or a legacy torch.save pickle stream"
            )
        self.tensors, self.metadata = flatten(root, Path(path).stem, path, pickle_bytes, budget)
        for name, ref in self.tensors.items():
            if type(ref) is TensorRef:
                _check_view(ref, f"{path}: tensor {name[:80]!r}")
        self._arrays: dict[tuple[str, DType], np.ndarray[Any, Any]] = {}
        self._swapped: OrderedDict[tuple[str, DType], np.ndarray[Any, Any]] = OrderedDict()
        self._swapped_bytes = 0

    def log(self, budget: ParseBudget, member: str | None) -> dict[tuple[str, str], None]:
        """The open's import record for ``member`` of this file (None: the file itself is
        the pickle), labelled ``member``, ``FILE:member`` for a shard of an index, or
        the file's name."""
        label = Path(self.where).name
        if member is not None:
            label = member if self.where == budget.where else f"{label}:{member}"
        return budget.imports.member(label, self.TABLE)

    def _mode(self) -> dict[str, Any]:
        """How every pickle of the file is interpreted: strict or lenient, imports kept."""
        return {"lenient": self.lenient, "imports": self.imports}

    def archive_pickle(
        self, members: dict[str, ZipMember], budget: ParseBudget
    ) -> tuple[str, memoryview]:
        """The archive's folder prefix and its ``data.pkl`` bytes (in place); grants the
        central directory to ``budget`` and sets ``big_endian`` from ``byteorder``."""
        where = self.where
        # The central directory and the end records: everything after the last member.
        ends = (member.data_offset + member.compressed_size for member in members.values())
        budget.grant(len(self.raw) - max(ends, default=0))
        prefix = _archive_folder(list(members), where)
        pickle_member = members.get(prefix + "data.pkl")
        if pickle_member is None:
            raise FormatError(f"{where}: the archive has no {prefix}data.pkl")
        order = members.get(prefix + "byteorder")
        if order is not None:
            text = bytes(stored_bytes(self.raw, order))
            if text not in (b"little", b"big"):
                raise FormatError(f"{where}: byteorder is {text[:20]!r}, not little or big")
            self.big_endian = text == b"big"
        return prefix, memoryview(stored_bytes(self.raw, pickle_member))  # type: ignore[arg-type]

    def _zip(
        self, storages: dict[str, StorageRef], budget: ParseBudget
    ) -> tuple[object, int, dict[str, int]]:
        where = self.where
        members = read_zip(self.raw, where)
        prefix, data = self.archive_pickle(members, budget)
        self.imports = self.log(budget, prefix + "data.pkl")
        root, end = interpret(
            data, 0, f"{where}: data.pkl", storages, budget=budget, **self._mode()
        )
        if end != len(data):
            raise FormatError(f"{where}: data.pkl has {len(data) - end} bytes after its STOP")
        return root, end, storage_spans(storages, members, prefix, where)

    def _legacy(
        self, storages: dict[str, StorageRef], budget: ParseBudget
    ) -> tuple[object, int, dict[str, int]]:
        where, data = self.where, memoryview(self.raw)  # type: ignore[arg-type]
        self.imports = self.log(budget, None)  # the five pickles of the stream: one member
        magic, pos = interpret(data, 0, where, budget=budget, **self._mode())
        if type(magic) is not int or magic != TORCH_LEGACY_MAGIC:
            raise FormatError(
                f"{where}: not a torch.save file: the first pickle holds {describe(magic)}, "
                "not the legacy magic number"
            )
        version, pos = interpret(data, pos, where, budget=budget, **self._mode())
        if type(version) is not int or version != _LEGACY_PROTOCOL:
            raise FormatError(f"{where}: legacy protocol version {describe(version)}, not 1001")
        info, pos = interpret(data, pos, where, budget=budget, **self._mode())
        if type(info) is not dict:
            raise FormatError(f"{where}: the system info is {describe(info)}, not a dict")
        start = pos
        root, pos = interpret(data, pos, where, storages, budget=budget, **self._mode())
        pickle_bytes = pos - start
        keys, pos = interpret(data, pos, where, budget=budget, **self._mode())
        if type(keys) is not list or any(type(key) is not str for key in keys):
            raise FormatError(f"{where}: the storage keys are {describe(keys)}, not strings")
        if len(set(keys)) != len(keys) or set(keys) != set(storages):
            missing = sorted(set(storages) - set(keys))[:3]
            raise FormatError(
                f"{where}: the storage key list does not match the storages the data names "
                f"(missing {missing}, repeated or unused keys: {len(keys) - len(storages)})"
            )
        spans = {}
        for key in keys:
            ref = storages[key]
            if len(data) - pos < 8:
                raise FormatError(f"{where}: storage {key!r}: the file ends before its size")
            count = int.from_bytes(data[pos : pos + 8], "little", signed=True)
            if count != ref.numel:
                raise FormatError(
                    f"{where}: storage {key!r} is stored with {count} elements, "
                    f"the data names {ref.numel}"
                )
            pos += 8
            if ref.nbytes > len(data) - pos:
                raise FormatError(
                    f"{where}: storage {key!r} needs {ref.nbytes} bytes, {len(data) - pos} remain"
                )
            spans[key] = pos
            pos += ref.nbytes
        if pos != len(data):
            raise FormatError(f"{where}: {len(data) - pos} bytes after the last storage")
        return root, pickle_bytes, spans

    def storage(self, ref: StorageRef, dtype: DType) -> np.ndarray[Any, Any]:
        """The storage as one flat read-only array of ``dtype`` (little-endian).

        A view of the mapped file, kept for the next tensor of the same storage; in a
        big-endian archive a byte-swapped copy, of which at most ``SWAPPED_CACHE_BYTES``
        are kept (a larger storage is converted each time it is asked for).
        """
        key = (ref.key, dtype)
        found = self._arrays.get(key)
        if found is None:
            found = self._swapped.get(key)
            if found is not None:
                self._swapped.move_to_end(key)
        if found is not None:
            return found
        size = dtype.itemsize
        start = self.spans[ref.key]
        region = memoryview(self.raw)[start : start + ref.nbytes // size * size]  # type: ignore[arg-type]
        if not self.big_endian or size == 1:
            array = np.frombuffer(region, dtype=dtype.numpy)
            self._arrays[key] = array
            return array
        swapped = np.frombuffer(region, dtype=f">u{size}").astype(f"<u{size}")
        array = seal(swapped.view(dtype.numpy))
        self._keep_swapped(key, array)
        return array

    def _keep_swapped(self, key: tuple[str, DType], array: np.ndarray[Any, Any]) -> None:
        """Keep a converted storage for reuse, dropping the least recently used ones."""
        if array.nbytes > SWAPPED_CACHE_BYTES:
            return
        self._swapped[key] = array
        self._swapped_bytes += array.nbytes
        while self._swapped_bytes > SWAPPED_CACHE_BYTES:
            self._swapped_bytes -= self._swapped.popitem(last=False)[1].nbytes

    def tensor(self, name: str, ref: TensorRef | ArrayRef, copy: bool) -> Tensor:
        """The tensor ``ref`` describes, as a view of its storage (or a copy).

        A NumPy array's tensor views its bytes in the pickle (or their copy).
        """
        if type(ref) is ArrayRef:
            try:
                return tensor_of(array_values(ref), ref.dtype, copy)
            except FormatError as exc:
                raise FormatError(f"{self.where}: tensor {name[:80]!r}: {exc}") from None
        assert type(ref) is TensorRef
        dtype = ref.dtype
        storage = self.storage(ref.storage, dtype)
        if 0 in ref.dims:
            return tensor_of(shaped(storage[:0], ref.dims), dtype, copy)
        if _may_overlap(ref.dims, ref.strides):
            return self._repeating(name, ref, storage, copy)
        view = _view(storage, ref, ref.offset)
        if dtype is DType.BOOL:
            bad = np.flatnonzero(view.view(np.uint8) > 1)
            if bad.size:
                raise FormatError(
                    f"{self.where}: tensor {name[:80]!r}: BOOL element {int(bad[0])} is not 0 or 1"
                )
        if ref.negate:
            return Tensor._adopt(_negated(view, dtype), dtype)
        return tensor_of(view, dtype, copy)

    def _repeating(
        self, name: str, ref: TensorRef, storage: np.ndarray[Any, Any], copy: bool
    ) -> Tensor:
        """A view whose elements repeat (a zero stride, overlapping strides), kept a view.

        Its logical size may exceed its storage by any factor, so nothing here touches
        the logical elements: the BOOL check, the negation and ``copy`` work on the span
        of storage elements the view covers, and the tensor views that span with the
        view's own strides (zero-copy over the file when nothing needs changing).
        """
        span = storage[ref.offset : _last_element(ref) + 1]
        if ref.dtype is DType.BOOL:
            bad = np.flatnonzero(span.view(np.uint8) > 1)
            if bad.size:
                raise FormatError(
                    f"{self.where}: tensor {name[:80]!r}: BOOL storage element "
                    f"{ref.offset + int(bad[0])} is not 0 or 1"
                )
        if ref.negate:
            return Tensor._wrap(_view(seal(_negated(span, ref.dtype)), ref, 0))
        if copy:
            return Tensor._wrap(_view(seal(span.copy()), ref, 0))
        return Tensor._wrap(_view(storage, ref, ref.offset))


def storage_spans(
    storages: dict[str, StorageRef], members: dict[str, ZipMember], prefix: str, where: str
) -> dict[str, int]:
    """Where each storage the pickle names starts in the file (member ``data/<key>``,
    whose size must be exactly the storage's); a missing member is a FormatError."""
    spans = {}
    for key, ref in storages.items():
        member = members.get(f"{prefix}data/{key}")
        if member is None:
            raise FormatError(f"{where}: storage {key!r} has no member {prefix}data/{key}")
        if member.size != ref.nbytes:
            raise FormatError(
                f"{where}: storage {key!r} claims {ref.nbytes} bytes "
                f"({ref.numel} x {ref.dtype.name}), its member holds {member.size}"
            )
        spans[key] = member.data_offset
    return spans


def _view(base: np.ndarray[Any, Any], ref: TensorRef, offset: int) -> np.ndarray[Any, Any]:
    """``ref``'s dims and strides over the flat array ``base``, from element ``offset``."""
    size = base.dtype.itemsize
    return np.ndarray(
        ref.dims,
        dtype=base.dtype,
        buffer=base,
        offset=offset * size,
        strides=tuple(step * size for step in ref.strides),
    )


def _archive_folder(names: list[str], where: str) -> str:
    """The one top-level folder every member of a torch zip archive lives in, with '/'."""
    folder = names[0].partition("/")[0] + "/" if names and "/" in names[0] else ""
    if not folder or any(not name.startswith(folder) for name in names):
        raise FormatError(f"{where}: the archive's members are not all in one top-level folder")
    return folder


def _check_view(ref: TensorRef, where: str) -> None:
    """The view's elements must lie inside its storage (validated with Python ints)."""
    elements = ref.storage.nbytes // ref.dtype.itemsize
    if 0 in ref.dims:
        return
    last = _last_element(ref)
    if last >= elements:
        raise FormatError(
            f"{where}: the view (offset {ref.offset}, size {list(ref.dims)}, stride "
            f"{list(ref.strides)}) reaches element {last}, its storage holds {elements} "
            f"{ref.dtype.name} elements"
        )


def _last_element(ref: TensorRef) -> int:
    """The storage element the view reaches last (strides are never negative)."""
    pairs = zip(ref.dims, ref.strides, strict=True)
    return ref.offset + sum((dim - 1) * step for dim, step in pairs)


def _stored_elements(ref: TensorRef) -> int:
    """How many storage elements the view's distinct elements can be (Python ints).

    numel when the elements do not repeat; otherwise bounded by the elements between the
    first and the last and by the product of the dims whose stride is not zero.
    """
    if 0 in ref.dims:
        return 0
    numel = math.prod(ref.dims)
    if not _may_overlap(ref.dims, ref.strides):
        return numel
    moving = math.prod(dim for dim, step in zip(ref.dims, ref.strides, strict=True) if step)
    return min(moving, _last_element(ref) - ref.offset + 1)


def _may_overlap(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True unless each axis steps past everything the smaller-stride axes cover."""
    reach = 0
    axes = sorted((step, dim) for dim, step in zip(dims, strides, strict=True) if dim > 1)
    for step, dim in axes:
        if step <= reach:
            return True
        reach += (dim - 1) * step
    return False


def _negated(view: np.ndarray[Any, Any], dtype: DType) -> np.ndarray[Any, Any]:
    """torch's negative bit resolved: sign flipped for floats, two's complement for ints."""
    if dtype.is_float:
        bits = np.dtype(f"<u{dtype.itemsize}")
        sign = np.array(1 << (8 * dtype.itemsize - 1), dtype=bits)
        flipped: np.ndarray[Any, Any] = (view.view(bits) ^ sign).view(dtype.numpy)
        return flipped
    negated: np.ndarray[Any, Any] = np.negative(view)
    return negated


@guard_methods
class PyTorchFile(TensorNames):
    """A lazily read PyTorch checkpoint (zip or legacy ``torch.save``, or a sharded one).

    Made by ``open_pytorch``. ``keys()`` lists tensor names in the order the pickle
    holds them (shard by shard), ``metadata`` the plain leaves under their dotted
    names, ``info(name)`` the dtype name and shape from the pickle alone, ``get(name)``
    a read-only tensor (a zero-copy view of the mapped file unless opened with
    ``copy=True``) and ``inspect(name, options)`` its inspection. A name that is not in
    the file is an IndexingError. ``imports`` lists the globals the pickles named.
    """

    __slots__ = ("_copy", "_imports", "_metadata", "_path", "import_table")

    _by_name: dict[str, tuple[_Shard, TensorRef | ArrayRef]]

    def __init__(self, path: str, shards: list[_Shard], copy: bool = False) -> None:
        """Private: use ``open_pytorch``."""
        self._path = path
        self._copy = copy
        self._by_name, self._metadata = merge_shards(path, shards, lambda shard: shard.tensors)
        named: dict[tuple[str, str], None] = {}
        for shard in shards:
            named.update(shard.imports)
        self._imports = tuple(named)
        # The allow-list the pickles were read with: what it holds is data (verdicts).
        self.import_table = shards[0].TABLE if shards else GLOBALS

    @property
    def imports(self) -> tuple[tuple[str, str], ...]:
        """Every ``(module, name)`` the pickles named through ``GLOBAL``/``STACK_GLOBAL``/
        ``INST``, in first-use order (shard by shard, each once), after the protocol 0-2
        renaming (``__builtin__.set`` is ``("builtins", "set")``)."""
        return self._imports

    @property
    def path(self) -> str:
        """The path this checkpoint was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, Leaf]:
        """A fresh copy of the plain leaves, by dotted name (``{}`` when there are none)."""
        return {key: list(value) if isinstance(value, list) else value
                for key, value in self._metadata.items()}  # fmt: skip

    def info(self, name: str) -> tuple[str, Shape]:
        """``(dtype_name, shape)`` of a tensor, from the pickle alone."""
        ref = self._lookup(name)[1]
        return ref.dtype.name, Shape._trusted(ref.dims)

    def stored_byte_len(self, name: str) -> int:
        """The bytes of storage tensor ``name``'s distinct elements occupy, from the pickle.

        ``numel x itemsize`` for a view whose elements do not repeat; for one whose
        elements repeat (a zero stride from ``expand``, an overlapping ``as_strided``)
        at most the elements between its first and last and at most the product of its
        dims whose stride is not zero: a ``torch.zeros(1).expand(2**33)`` stores 4 bytes.
        """
        ref = self._lookup(name)[1]
        if type(ref) is ArrayRef:
            return len(ref.raw)
        assert type(ref) is TensorRef
        return _stored_elements(ref) * ref.dtype.itemsize

    def get(self, name: str) -> Tensor:
        """The tensor ``name``: a read-only view of its storage in the mapped file.

        Tensors of one torch storage share one strided storage. Opened with
        ``copy=True``, an independent copy. Big-endian archives and negative-bit tensors
        give new tensors. A view whose elements repeat (a zero stride from ``expand``)
        stays a view with those strides, never expanded: its copies (``copy=True``, the
        negative bit) copy only the storage elements it covers. BOOL bytes other than 0
        and 1 are a FormatError.
        """
        shard, ref = self._lookup(name)
        return shard.tensor(name, ref, self._copy)

    def inspect(self, name: str, options: Any = None) -> Any:
        """``get(name).inspect(options)``: reads only the sampled elements."""
        tensor: Any = self.get(name)
        return tensor.inspect() if options is None else tensor.inspect(options)

    def _lookup(self, name: object) -> tuple[_Shard, TensorRef | ArrayRef]:
        found = self._by_name.get(name) if type(name) is str else None
        if found is None:
            raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")
        return found

    def __repr__(self) -> str:
        return f"PyTorchFile({self._path!r}, {len(self._by_name)} tensors)"


@guard_function
def open_pytorch(
    path: PathLike,
    copy: bool = False,
    *,
    budget: ParseBudget | None = None,
    lenient: bool = False,
) -> PyTorchFile:
    """Open a PyTorch checkpoint lazily, without running its pickle.

    ``path`` is a ``torch.save`` file (zip or legacy format, recognized from its first
    bytes) or a ``pytorch_model.bin.index.json`` whose ``weight_map`` names the shards
    (plain file names in the index's folder; each shard must hold exactly the tensors
    mapped to it; a name in two shards is a FormatError). The pickle is interpreted as
    data and every storage and view checked at once; tensor bytes are read only when a
    tensor is asked for. Tensors are views of the mapped file: it must not be modified
    or truncated while they live; ``copy=True`` gives independent copies. A path that
    cannot be opened raises the OSError unchanged; anything wrong with the content is a
    FormatError or LimitError naming the file.

    What the open builds (parsed objects, names, metadata) is charged to ``budget``,
    the open's one ``ParseBudget`` (a fresh one when None): past 64 MiB plus 16 times
    the pickle, central directory and index bytes read, a LimitError.

    A global outside the allow-list is a FormatError naming it, unless ``lenient``:
    then it becomes an inert record, never imported or called, whose arguments and state
    are walked for tensors, and a pickled ``torch.nn.Module`` gives the names and
    tensors of its ``state_dict()`` (see ``pickle._walk``). Records are charged to the
    budget like everything else the pickle builds.
    """
    text = label(path)
    spent = ParseBudget(text) if budget is None else budget
    with open_regular(text) as file:
        head = file.read(64)
    if head.lstrip(b" \t\r\n").startswith(b"{"):
        return PyTorchFile(text, _index_shards(text, spent, lenient), copy)
    return PyTorchFile(text, [_Shard(text, spent, lenient)], copy)


@guard_function
def load_pytorch(
    path: PathLike,
    copy: bool = False,
    *,
    budget: ParseBudget | None = None,
    lenient: bool = False,
) -> dict[str, Tensor]:
    """Every tensor of a PyTorch checkpoint by dotted name; raises as ``open_pytorch``.

    Tensors are zero-copy views of the mapped file unless ``copy=True``; ``budget`` and
    ``lenient`` as for ``open_pytorch``.
    """
    opened = open_pytorch(path, copy, budget=budget, lenient=lenient)
    return {name: shard.tensor(name, ref, copy) for name, (shard, ref) in opened._by_name.items()}


def _index_shards(path: str, budget: ParseBudget, lenient: bool) -> list[_Shard]:
    """The shards of an index, all opened against the one budget (granted the index)."""
    return index_shards(
        path,
        lambda shard: _Shard(shard, budget, lenient),
        lambda shard: shard.tensors,
        budget=budget,
    )
