"""The ``.metadata`` of a distributed checkpoint (``torch.distributed.checkpoint``), read as data.

A DCP folder holds a pickle, ``.metadata`` (protocol 4), describing every item of the
state dict, and one or more ``*.distcp`` files holding the items' bytes. The pickle is
run by the interpreter of ``pickle._machine`` with the allow-list of torch checkpoints plus the
few classes DCP writes, each made an inert record (never imported, never called):

* ``Metadata`` (``state_dict_metadata``, ``planner_data``, ``storage_data``,
  ``storage_meta``, ``version``), ``StorageMeta``;
* ``TensorStorageMetadata`` (``properties``, ``size``, ``chunks``), ``TensorProperties``
  (its BUILD state is the tuple ``(dtype, layout, requires_grad, memory_format,
  pin_memory)``, or a dict in older files: only the dtype is used, the other fields are
  accepted whatever they hold), ``ChunkStorageMetadata`` (``offsets``, ``sizes``),
  ``BytesStorageMetadata``;
* ``MetadataIndex`` (``fqn``, ``offset``, ``index``) keying ``storage_data``, and the
  ``_StorageInfo`` span each key maps to (``relative_path``, ``offset``, ``length``,
  ``transform_descriptors``);
* ``torch.serialization._get_layout``, ``_MEM_FORMAT_ENCODING`` (inside the properties)
  and ``pathlib`` paths (the checkpoint id inside ``StorageMeta``), ``torch.Size`` and
  the ``torch.<dtype>`` globals as in torch checkpoints.

Any other global (``os.system``...) is a FormatError naming it, raised as the pickle is
read: nothing is ever run. Fields missing from a BUILD state take their class defaults
(None). ``describe_layout`` turns the records into plain facts, checking each as it
goes: names are text; sizes, offsets and lengths are ints in range; every relative path
is a plain file name (no ``/``, ``\\``, ``..`` or drive); a span with transform
descriptors (``stream.zstd``...) is refused naming them; every tensor's chunks lie
inside it, have its rank, and each has exactly one span. Whether the chunks cover the
tensor exactly once is checked by ``_dcp_grid``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ..._core.dtype import DType
from ..._core.errors import DataError, FormatError, LimitError
from ..._core.limits import check_dims
from .._budget import ITEM_BYTES, OBJECT_BYTES, ParseBudget
from ..pickle import GLOBALS, Global, Machine, Record, TorchSize, describe

__all__ = [
    "DCP_GLOBALS",
    "DCP_METADATA_MEMBER",
    "Chunk",
    "Layout",
    "Span",
    "TensorEntry",
    "read_layout",
]

_METADATA = "torch.distributed.checkpoint.metadata"
_FILESYSTEM = "torch.distributed.checkpoint.filesystem"
# Before torch 2.0 the same classes lived under torch.distributed._shard.checkpoint.
_OLD = "torch.distributed._shard.checkpoint"
_CLASSES = {
    "Metadata": (f"{_METADATA}.Metadata", f"{_OLD}.metadata.Metadata"),
    "TensorStorageMetadata": (
        f"{_METADATA}.TensorStorageMetadata",
        f"{_OLD}.metadata.TensorStorageMetadata",
    ),
    "TensorProperties": (
        f"{_METADATA}.TensorProperties",
        f"{_OLD}.metadata.TensorProperties",
        "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
    ),
    "ChunkStorageMetadata": (
        f"{_METADATA}.ChunkStorageMetadata",
        f"{_OLD}.metadata.ChunkStorageMetadata",
    ),
    "BytesStorageMetadata": (
        f"{_METADATA}.BytesStorageMetadata",
        f"{_OLD}.metadata.BytesStorageMetadata",
    ),
    "MetadataIndex": (f"{_METADATA}.MetadataIndex", f"{_OLD}.metadata.MetadataIndex"),
    "StorageMeta": (f"{_METADATA}.StorageMeta",),
    "_StorageInfo": (f"{_FILESYSTEM}._StorageInfo", f"{_OLD}.filesystem._StorageInfo"),
}
# Records accepted only where DCP puts them (inside properties and StorageMeta); their
# contents are never used.
_INERT = (
    f"{_METADATA}._MEM_FORMAT_ENCODING",
    "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
    "torch.serialization._get_layout",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib.PurePosixPath",
    "pathlib.PureWindowsPath",
    "pathlib._local.PosixPath",
    "pathlib._local.WindowsPath",
)
_KIND_OF = {full: kind for kind, names in _CLASSES.items() for full in names}
_MAX_OFFSET = 1 << 62  # offsets and lengths beyond this are not a real file's
DCP_METADATA_MEMBER = ".metadata"  # how the import record names the metadata pickle


def _table() -> dict[str, Global]:
    table = dict(GLOBALS)
    for full in (*_KIND_OF, *_INERT):
        module, _, name = full.rpartition(".")
        # A name the torch allow-list already understands as data keeps its rule.
        table.setdefault(full, Global(full, "record", origin=(module, name)))
    return table


# The globals a ``.metadata`` pickle may name: torch's allow-list plus DCP's records.
DCP_GLOBALS = _table()
_DTYPES_BY_TEXT = {
    f"torch.{marker.name.rpartition('.')[2]}": marker.dtype
    for marker in GLOBALS.values()
    if marker.kind == "dtype" and marker.dtype is not None
}


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes ``[offset, offset + length)`` of the file ``relative_path`` in the folder."""

    relative_path: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """One stored piece of a tensor: its offsets and sizes along each dim, and its span."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """A tensor of the checkpoint: its fully qualified name, dtype, dims and chunks."""

    fqn: str
    dtype: DType
    dims: tuple[int, ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """What ``.metadata`` says: tensors and byte items by name, in the pickle's order,
    and every global the pickle names (``imports``, first-use order)."""

    tensors: dict[str, TensorEntry]
    items: dict[str, Span]
    imports: tuple[tuple[str, str], ...]


class _Machine(Machine):
    """The interpreter, letting records be dict keys (``storage_data`` is keyed by
    ``MetadataIndex`` records). A record is hashed by its identity, which the file
    cannot choose, so crafted keys cannot collide."""

    __slots__ = ()

    def key(self, key: object) -> Any:
        if type(key) is Record:
            return key
        return super().key(key)


def read_layout(data: memoryview, where: str, budget: ParseBudget) -> Layout:
    """The layout ``.metadata`` (``data``, the whole file) describes; ``where`` names it.

    Every global outside ``DCP_GLOBALS`` is a FormatError naming it (nothing is
    imported or called), as is anything DCP does not write where it writes it;
    LimitError when a cap or ``budget`` (the open's parse budget) is exceeded.
    """
    imports = budget.imports.member(DCP_METADATA_MEMBER, DCP_GLOBALS)
    machine = _Machine(data, 0, where, None, budget, DCP_GLOBALS, False, imports)
    try:
        root, end = machine.run()
    except FormatError:
        # Refused at its first foreign global, where pickle.load would go on: the rest is
        # walked as inert records only so the import log lists everything it names.
        _record_all(data, where, budget, imports)
        raise
    except DataError:
        raise
    except (ValueError, OverflowError, struct.error) as exc:
        raise machine.fail(f"bad argument ({type(exc).__name__})") from None
    machine.settle(machine.owed, "the pickle's objects")
    if end != len(data):
        raise FormatError(f"{where}: {len(data) - end} bytes after the pickle's STOP")
    return _Walk(where, budget).layout(root, tuple(imports))


def _record_all(
    data: memoryview, where: str, budget: ParseBudget, imports: dict[tuple[str, str], None]
) -> None:
    """Run the pickle leniently for the globals it names (into ``imports``); its value
    and any fault of its own are dropped (the strict run's error is the one raised)."""
    try:
        _Machine(data, 0, where, None, budget, DCP_GLOBALS, True, imports).run()
    except (DataError, ValueError, OverflowError, struct.error):
        pass


class _Walk:
    """Turns the records into a ``Layout``, checking every field it reads."""

    def __init__(self, where: str, budget: ParseBudget) -> None:
        self.where = where
        self.budget = budget

    def fail(self, message: str) -> FormatError:
        return FormatError(f"{self.where}: {message}")

    def fields(self, value: object, kind: str, names: tuple[str, ...]) -> dict[str, object]:
        """The fields of a record of ``kind``: its dict state, missing ones None.

        Fields the class does not have are ignored (later versions may add some).
        """
        if type(value) is not Record or _KIND_OF.get(f"{value.module}.{value.name}") != kind:
            raise self.fail(f"expected a {kind}, found {describe(value)}")
        if value.args or value.kwargs or value.items or value.listed:
            raise self.fail(f"the {kind} record holds arguments or items DCP never writes")
        state = value.state
        if state is None:
            state = {}
        if type(state) is tuple and len(state) == 2 and type(state[1]) is dict:
            state = state[1]  # (dict state, slot state) of a class with __slots__
        if type(state) is not dict:
            raise self.fail(f"the state of a {kind} is {describe(state)}, not a dict")
        return {name: state.get(name) for name in names}

    def layout(self, root: object, imports: tuple[tuple[str, str], ...]) -> Layout:
        top = self.fields(
            root,
            "Metadata",
            ("state_dict_metadata", "planner_data", "storage_data", "storage_meta", "version"),
        )
        if top["storage_meta"] is not None:
            self.fields(top["storage_meta"], "StorageMeta", ())
        version = top["version"]
        if version is not None and type(version) is not str:
            raise self.fail(f"the version is {describe(version)}, not a str")
        spans = self.spans(top["storage_data"])
        described = top["state_dict_metadata"]
        if type(described) is not dict:
            raise self.fail(f"state_dict_metadata is {describe(described)}, not a dict")
        tensors: dict[str, TensorEntry] = {}
        items: dict[str, Span] = {}
        for fqn, entry in described.items():
            if type(fqn) is not str:
                raise self.fail(f"the item name {describe(fqn)} is not a str")
            if type(entry) is Record and _KIND_OF.get(f"{entry.module}.{entry.name}") == (
                "BytesStorageMetadata"
            ):
                self.fields(entry, "BytesStorageMetadata", ())
                items[fqn] = self.span_of(spans, fqn, None)
            else:
                tensors[fqn] = self.tensor(fqn, entry, spans)
        return Layout(tensors, items, imports)

    def spans(self, storage_data: object) -> dict[tuple[str, str], Span]:
        """``storage_data`` keyed by (fqn, offsets text); a key given twice is refused."""
        if type(storage_data) is not dict:
            raise self.fail(f"storage_data is {describe(storage_data)}, not a dict")
        self.budget.charge((OBJECT_BYTES + 2 * ITEM_BYTES) * len(storage_data), "spans")
        found: dict[tuple[str, str], Span] = {}
        for index, info in storage_data.items():
            key_fields = self.fields(index, "MetadataIndex", ("fqn", "offset"))
            fqn = key_fields["fqn"]
            if type(fqn) is not str:
                raise self.fail(f"a storage_data key names {describe(fqn)}, not a str")
            offset = key_fields["offset"]
            where = f"the span of {fqn[:80]!r}"
            offsets = None if offset is None else self.dims(offset, f"{where}: the offset")
            key = (fqn, _offsets_text(offsets))
            self.budget.charge_text(len(key[1]), "spans")
            if key in found:
                raise self.fail(f"{where} at {key[1]} is given twice")
            found[key] = self.span(info, where)
        return found

    def span(self, info: object, where: str) -> Span:
        fields = self.fields(
            info, "_StorageInfo", ("relative_path", "offset", "length", "transform_descriptors")
        )
        transforms = fields["transform_descriptors"]
        if transforms is not None and (type(transforms) not in (list, tuple) or transforms):
            listed = list(transforms)[:4] if isinstance(transforms, (list, tuple)) else None
            shown = describe(transforms) if listed is None else ", ".join(map(describe, listed))
            raise self.fail(
                f"{where} is stored through transforms ({shown}), which strided does not read"
            )
        path = fields["relative_path"]
        if not _plain_file_name(path):
            raise self.fail(
                f"{where} names the file {describe(path)}: only a plain file name inside the "
                "checkpoint folder is allowed"
            )
        assert isinstance(path, str)
        offset, length = fields["offset"], fields["length"]
        for what, value in (("offset", offset), ("length", length)):
            if type(value) is not int or not 0 <= value < _MAX_OFFSET:
                raise self.fail(f"{where}: the {what} {describe(value)} is not an int >= 0")
        assert isinstance(offset, int) and isinstance(length, int)
        return Span(path, offset, length)

    def span_of(
        self, spans: dict[tuple[str, str], Span], fqn: str, offsets: tuple[int, ...] | None
    ) -> Span:
        found = spans.get((fqn, _offsets_text(offsets)))
        if found is None:
            at = "" if offsets is None else f" (chunk at {list(offsets)})"
            raise self.fail(f"storage_data has no span for {fqn[:80]!r}{at}")
        return found

    def tensor(self, fqn: str, entry: object, spans: dict[tuple[str, str], Span]) -> TensorEntry:
        where = f"tensor {fqn[:80]!r}"
        fields = self.fields(entry, "TensorStorageMetadata", ("properties", "size", "chunks"))
        dtype = self.dtype(fields["properties"], where)
        dims = self.dims(fields["size"], f"{where}: the size")
        try:
            check_dims(dims, f"{self.where}: {where}: size")
        except LimitError:
            raise
        except DataError as exc:
            raise self.fail(str(exc)) from None
        listed = fields["chunks"]
        if type(listed) is not list:
            raise self.fail(f"{where}: the chunks are {describe(listed)}, not a list")
        self.budget.charge((OBJECT_BYTES + ITEM_BYTES) * len(listed), "chunks")
        chunks = []
        for chunk in listed:
            parts = self.fields(chunk, "ChunkStorageMetadata", ("offsets", "sizes"))
            offsets = self.dims(parts["offsets"], f"{where}: chunk offsets")
            sizes = self.dims(parts["sizes"], f"{where}: chunk sizes")
            if len(offsets) != len(dims) or len(sizes) != len(dims):
                raise self.fail(
                    f"{where}: a chunk at {list(offsets)} of sizes {list(sizes)} does not "
                    f"have the tensor's {len(dims)} dims"
                )
            for axis, (start, size, dim) in enumerate(zip(offsets, sizes, dims, strict=True)):
                if start + size > dim:
                    raise self.fail(
                        f"{where}: the chunk at {list(offsets)} of sizes {list(sizes)} "
                        f"reaches past dim {axis} of size {list(dims)}"
                    )
            span = self.span_of(spans, fqn, offsets)
            chunks.append(Chunk(offsets, sizes, span))
        if not chunks:
            raise self.fail(f"{where} has no chunks")
        return TensorEntry(fqn, dtype, dims, tuple(chunks))

    def dtype(self, properties: object, where: str) -> DType:
        """The dtype of a TensorProperties record (its other fields are not used)."""
        if (
            type(properties) is not Record
            or _KIND_OF.get(f"{properties.module}.{properties.name}") != "TensorProperties"
        ):
            raise self.fail(f"{where}: the properties are {describe(properties)}")
        state = properties.state
        found = state[0] if type(state) is tuple and state else None
        if type(state) is dict:
            found = state.get("dtype")
        if isinstance(found, Global) and found.kind == "dtype" and found.dtype is not None:
            return found.dtype
        if type(found) is str and found in _DTYPES_BY_TEXT:
            return _DTYPES_BY_TEXT[found]
        raise self.fail(f"{where}: the dtype is {describe(found)}, not a torch dtype")

    def dims(self, value: object, what: str) -> tuple[int, ...]:
        """A ``torch.Size`` (or a tuple or list) of ints in range, as a tuple."""
        dims = value.dims if type(value) is TorchSize else value
        if type(dims) not in (tuple, list):
            raise self.fail(f"{what} is {describe(value)}, not a torch.Size")
        assert isinstance(dims, (tuple, list))
        if len(dims) > 64 or any(type(d) is not int or not 0 <= d < _MAX_OFFSET for d in dims):
            raise self.fail(f"{what} must be at most 64 ints >= 0, found {describe(value)}")
        self.budget.charge(OBJECT_BYTES + ITEM_BYTES * len(dims), "sizes")
        return tuple(dims)


def _offsets_text(offsets: tuple[int, ...] | None) -> str:
    """A span's key text: str-keyed, so no hash the file chooses (ints are checked small)."""
    return "-" if offsets is None else ",".join(map(str, offsets))


def _plain_file_name(name: object) -> bool:
    return (
        type(name) is str
        and 0 < len(name) <= 4096
        and name not in (".", "..")
        and not any(char in name for char in "/\\:\x00")
    )
