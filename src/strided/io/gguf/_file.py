"""GGUF files (versions 2 and 3, little-endian): metadata and tensors, zero-copy.

Layout: magic ``GGUF``, a u32 version, u64 tensor and key-value counts, the key-value
pairs (u64-length strings, u32 value types, arrays as element type + u64 count), the
tensor infos (name, u32 ``n_dims``, u64 dims innermost first, u32 ggml type, u64
offset), padding to ``general.alignment`` (default 32), then the tensor data.

Every count, length, dim and offset is checked against the caps and the bytes that
remain before anything is sized by it: a count whose entries could not fit in the rest
of the file is refused without reading on. Strings are capped at ``MAX_STRING_BYTES``,
all metadata values together at ``MAX_METADATA_VALUES``; an array may hold arrays (one
level of nesting, as the ``gguf`` writer produces for nested lists) whose elements are
not arrays themselves. Keys are non-empty, at most 65535 bytes and unique; tensor names
non-empty, at most 64 bytes and unique. Tensors: ``n_dims`` 1 to 4, dims within
MAX_RANK/MAX_ELEMENTS, a known ggml type, the innermost dim a multiple of the type's
block size, offsets aligned, spans inside the file and not overlapping: a tensor's
byte span is whole blocks by construction, so a claim larger than the file is refused
at open, before anything is sized by it.

Block-quantized tensors are dequantized to F32 exactly as the ``gguf`` package does
(``GGUFFile.get``), inspected by decoding only the sampled blocks (``GGUFFile.inspect``),
or read as their stored bytes (``GGUFFile.raw``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..._core.dtype import DType
from ..._core.errors import DTypeError, FormatError, IndexingError, LimitError
from ..._core.limits import MAX_GGUF_DIMS as _MAX_DIMS
from ..._core.limits import MAX_GGUF_HEADER_FETCH as MAX_HEADER_FETCH
from ..._core.limits import MAX_GGUF_KEY_BYTES as _MAX_KEY_BYTES
from ..._core.limits import MAX_GGUF_METADATA_VALUES as MAX_METADATA_VALUES
from ..._core.limits import MAX_GGUF_NAME_BYTES as _MAX_NAME_BYTES
from ..._core.limits import MAX_GGUF_STRING_BYTES as MAX_STRING_BYTES
from ..._core.memory import guard_function, guard_methods
from ..._core.shape import Shape
from ..._core.stored_float import F32Float, StoredFloatList
from ..._tensor.inspect import TensorInspection, TensorInspectionOptions, checked_options
from ..._tensor.tensor import Tensor
from .._budget import ITEM_BYTES, OBJECT_BYTES, TEXT_BYTES, ParseBudget
from .._common import (
    PathLike,
    TensorNames,
    checked_shape,
    file_size,
    label,
    map_file,
    open_regular,
    tensor_of,
)
from .._detect import GGUF_MAGIC
from .._storage import MappedStorage, Storage
from ._ggml import DEQUANTIZABLE, GGML_TYPES, ZERO_COPY, GGMLType
from ._ggml import dequantize as dequantize_blocks
from ._quant_inspect import quantized_inspection

__all__ = [
    "MAX_HEADER_FETCH",
    "MAX_METADATA_VALUES",
    "MAX_STRING_BYTES",
    "GGUFFile",
    "open_gguf",
    "open_gguf_charged",
    "parse_gguf",
]

_DEFAULT_ALIGNMENT = 32

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_STRING, _ARRAY, _BOOL, _FLOAT32 = 8, 9, 7, 6
# Value type id -> (name, little-endian NumPy dtype) for the fixed-size types.
_FIXED: dict[int, tuple[str, np.dtype[Any]]] = {
    0: ("UINT8", np.dtype("<u1")),
    1: ("INT8", np.dtype("<i1")),
    2: ("UINT16", np.dtype("<u2")),
    3: ("INT16", np.dtype("<i2")),
    4: ("UINT32", np.dtype("<u4")),
    5: ("INT32", np.dtype("<i4")),
    6: ("FLOAT32", np.dtype("<f4")),
    7: ("BOOL", np.dtype("<u1")),
    10: ("UINT64", np.dtype("<u8")),
    11: ("INT64", np.dtype("<i8")),
    12: ("FLOAT64", np.dtype("<f8")),
}
# The fewest bytes one value of each kind can take: bounds counts before reading.
_MIN_BYTES = {_STRING: 8, _ARRAY: 12} | {k: v[1].itemsize for k, v in _FIXED.items()}
# What one array element costs beside its list slot: nothing for the values Python
# shares (bools, and UINT8's 0..255 are cached small ints), an object for the others.
_OBJECT_COST = {0: 0, _BOOL: 0}
# A tensor info as held: its record, name, dims tuple and the dict/set slots naming it.
_TENSOR_INFO_BYTES = 4 * OBJECT_BYTES + 2 * (TEXT_BYTES + ITEM_BYTES) + _MAX_NAME_BYTES
_MIN_KV_BYTES = 8 + 1 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 1 + 4 + 8 + 4 + 8


class _TensorInfo:
    __slots__ = ("begin", "dims", "end", "kind", "name")

    def __init__(self, name: str, dims: tuple[int, ...], kind: GGMLType, begin: int, end: int):
        self.name = name
        self.dims = dims
        self.kind = kind
        self.begin = begin
        self.end = end


class _Reader:
    """A cursor over the file's first bytes that refuses to read past the end.

    ``buf`` holds the first ``loaded`` bytes of the ``size``-byte file: all of a mapped
    file, or, for a remote file, what was fetched so far; ``more(begin, end)`` fetches
    further bytes when a read that the checks allowed needs them (at least doubling
    what is held, never past ``MAX_HEADER_FETCH`` bytes in all).
    """

    __slots__ = ("budget", "buf", "granted", "loaded", "more", "pos", "size", "values", "where")

    def __init__(
        self,
        data: Any,
        size: int,
        where: str,
        more: Callable[[int, int], bytes] | None = None,
        budget: ParseBudget | None = None,
    ) -> None:
        self.buf = memoryview(data).cast("B")
        self.loaded = len(self.buf)
        self.size = size
        self.more = more
        self.pos = 0
        self.values = 0
        self.where = where
        self.budget = ParseBudget(where) if budget is None else budget
        self.granted = 0

    def charge(self, nbytes: int, what: str) -> None:
        """Charge what is about to be built to the open's budget, which grows by the
        header bytes read so far (so a value is charged before it exists)."""
        self.budget.grant(self.pos - self.granted)
        self.granted = self.pos
        self.budget.charge(nbytes, f"{what}")

    def need(self, count: int, what: str) -> None:
        if count > self.size - self.pos:
            raise FormatError(
                f"{self.where}: {what} needs {count} bytes at offset {self.pos}, "
                f"only {self.size - self.pos} remain"
            )
        if self.pos + count > self.loaded:
            self._grow(self.pos + count, what)

    def _grow(self, end: int, what: str) -> None:
        if end > MAX_HEADER_FETCH or self.more is None:
            raise LimitError(
                f"{self.where}: {what} ends at offset {end}, past the {MAX_HEADER_FETCH}-byte "
                "budget for a remote GGUF header"
            )
        end = min(max(end, 2 * self.loaded), self.size, MAX_HEADER_FETCH)
        self.buf = memoryview(bytes(self.buf) + self.more(self.loaded, end))
        self.loaded = len(self.buf)

    def u32(self, what: str) -> int:
        self.need(4, what)
        value: int = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        value: int = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return value

    def string(self, what: str, cap: int = MAX_STRING_BYTES) -> str:
        length = self.u64(f"{what} length")
        if length > cap:
            error = LimitError if cap == MAX_STRING_BYTES else FormatError
            raise error(f"{self.where}: {what} of {length} bytes exceeds {cap} bytes")
        self.need(length, what)
        data = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(
                f"{self.where}: {what} at offset {self.pos - length} is not UTF-8"
            ) from None

    def count_values(self, count: int, what: str) -> None:
        self.values += count
        if self.values > MAX_METADATA_VALUES:
            raise LimitError(
                f"{self.where}: {what}: metadata holds more than {MAX_METADATA_VALUES} values"
            )

    def value(self, vtype: int, what: str, depth: int = 0) -> tuple[Any, str]:
        """The value and its type's text (``"FLOAT32"``, ``"ARRAY[STRING]"``...)."""
        fixed = _FIXED.get(vtype)
        if fixed is not None:
            (value,) = self.fixed_array(vtype, 1, what)
            return (F32Float(value) if vtype == _FLOAT32 else value), fixed[0]
        if vtype == _STRING:
            return self.string(what), "STRING"
        if vtype != _ARRAY:
            raise FormatError(f"{self.where}: {what}: unknown value type {vtype}")
        item_type = self.u32(f"{what} element type")
        count = self.u64(f"{what} length")
        if item_type not in _MIN_BYTES:
            raise FormatError(f"{self.where}: {what}: unknown array element type {item_type}")
        if item_type == _ARRAY and depth >= 1:
            raise FormatError(f"{self.where}: {what}: arrays nested more than one level deep")
        self.need(count * _MIN_BYTES[item_type], f"{what} ({count} elements)")
        self.count_values(count, what)
        # A list slot per element, plus the element's own object where Python does not
        # share it (ints beyond the small cache, floats, strings; their text is bounded
        # by the header bytes it is read from).
        self.charge(count * (ITEM_BYTES + _OBJECT_COST.get(item_type, OBJECT_BYTES)), what)
        if item_type in _FIXED:
            return self.fixed_array(item_type, count, what), f"ARRAY[{_FIXED[item_type][0]}]"
        if item_type == _STRING:
            return self.string_array(count, what), "ARRAY[STRING]"
        items = [self.value(item_type, f"{what}[{i}]", depth + 1) for i in range(count)]
        inner = {text for _, text in items}
        text = inner.pop() if len(inner) == 1 else "ARRAY"
        return [value for value, _ in items], f"ARRAY[{text}]"

    def string_array(self, count: int, what: str) -> list[str]:
        # The hot loop of real files (vocabularies of 100k+ tokens): no per-item calls.
        # ``held`` is what is loaded: past it, ``need`` checks the file and fetches more.
        buf, pos, held, where = self.buf, self.pos, self.loaded, self.where
        unpack = _U64.unpack_from
        result: list[str] = []
        append = result.append
        for i in range(count):
            if held - pos < 8:
                self.pos = pos
                self.need(8, f"{what}[{i}] length")
                buf, held = self.buf, self.loaded
            length = unpack(buf, pos)[0]
            pos += 8
            if length > MAX_STRING_BYTES:
                raise LimitError(
                    f"{where}: {what}[{i}] of {length} bytes exceeds {MAX_STRING_BYTES}"
                )
            if length > held - pos:
                self.pos = pos
                self.need(length, f"{what}[{i}]")
                buf, held = self.buf, self.loaded
            try:
                append(str(buf[pos : pos + length], "utf-8"))
            except UnicodeDecodeError:
                raise FormatError(f"{where}: {what}[{i}] at offset {pos} is not UTF-8") from None
            pos += length
        self.pos = pos
        return result

    def fixed_array(self, vtype: int, count: int, what: str) -> list[Any]:
        dtype = _FIXED[vtype][1]
        self.need(count * dtype.itemsize, what)
        # One vectorized read, however long the array.
        values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
        self.pos += count * dtype.itemsize
        if vtype == _FLOAT32:  # the list says its elements' type once
            return StoredFloatList(values.tolist(), DType.F32)
        if vtype != _BOOL:
            result: list[Any] = values.tolist()
            return result
        bad = np.flatnonzero(values > 1)
        if bad.size:
            raise FormatError(f"{self.where}: {what}: BOOL value {int(values[bad[0]])}, not 0 or 1")
        return values.astype(np.bool_).tolist()  # type: ignore[no-any-return]


@guard_methods
class GGUFFile(TensorNames):
    """An open GGUF file: metadata, and tensors read lazily as zero-copy views.

    Made by ``open_gguf``. ``version`` (2 or 3), ``metadata`` (a fresh dict of key ->
    Python int/float/bool/str/list on each access), ``metadata_types`` (key -> GGUF value
    type), ``keys()`` (tensor names in file order), ``name in f``, ``info(name)`` ->
    ``(ggml_type_name, Shape)``, ``raw(name)``, ``get(name, dequantize=False)`` and
    ``inspect(name, options)``. Shapes are row-major: GGUF lists dims innermost first, so
    they are reversed. A name not in the file is an IndexingError.

    ``close()`` (also on leaving a ``with`` block) releases the file: the handle offers no
    tensor afterwards (asking is a FormatError), while tensors already handed out stay
    valid, each holding the mapping it views.
    """

    __slots__ = ("_copy", "_metadata", "_path", "_storage", "_types", "_version")

    _by_name: dict[str, _TensorInfo]

    def __init__(
        self,
        path: str,
        version: int,
        metadata: tuple[dict[str, Any], dict[str, str]],
        tensors: dict[str, _TensorInfo],
        storage: Storage,
        copy: bool = False,
    ) -> None:
        """Private: use ``open_gguf``."""
        self._copy = copy
        self._path = path
        self._version = version
        self._metadata, self._types = metadata
        self._by_name = tensors
        self._storage: Storage | None = storage

    @property
    def path(self) -> str:
        """The path the file was opened from."""
        return self._path

    @property
    def version(self) -> int:
        """The GGUF version (2 or 3)."""
        return self._version

    @property
    def metadata(self) -> dict[str, Any]:
        """A fresh copy of the key-value metadata (lists copied too).

        Values are Python ints, floats, bools, strs and lists of them. A FLOAT32 value is
        the Python float equal to the stored F32 number exactly (``1e-05`` as F32 is
        ``9.999999747378752e-06``) that remembers its type (an ``F32Float``; an
        ``ARRAY[FLOAT32]``, nested too, is a ``StoredFloatList``, whose ``dtype`` is
        F32), so it is shown with F32's shortest text (``1e-05``) however deep it sits.
        """
        return {key: _copied(value) for key, value in self._metadata.items()}

    @property
    def metadata_types(self) -> dict[str, str]:
        """Key -> the GGUF type of its value: ``"UINT8"``, ``"INT8"``, ``"UINT16"``,
        ``"INT16"``, ``"UINT32"``, ``"INT32"``, ``"UINT64"``, ``"INT64"``, ``"FLOAT32"``,
        ``"FLOAT64"``, ``"BOOL"``, ``"STRING"``, or ``"ARRAY[T]"`` with ``T`` the element
        type. An array of arrays is ``"ARRAY[ARRAY[T]]"`` when every inner array holds
        ``T``, and ``"ARRAY[ARRAY]"`` when it is empty or its arrays differ.
        """
        return dict(self._types)

    def info(self, name: str) -> tuple[str, Shape]:
        """``(ggml_type_name, shape)``, the shape row-major (GGUF's dims reversed)."""
        found = self._lookup(name)
        return found.kind.name, Shape._trusted(found.dims)

    def raw(self, name: str) -> Tensor:
        """The tensor's stored bytes (any ggml type) as a 1-D ``U8`` tensor.

        A zero-copy read-only view of the mapped file (a copy when opened with
        ``copy=True``).
        """
        found = self._lookup(name)
        return tensor_of(self._span(found), DType.U8, self._copy)

    def get(self, name: str, dequantize: bool = False) -> Tensor:
        """The tensor ``name``.

        F32, F16, BF16, F64, I8, I16, I32 and I64 tensors are zero-copy read-only views
        of the mapped file (copies when opened with ``copy=True``; ``dequantize`` changes
        nothing for them). Block-quantized tensors of the types Q4_0, Q4_1, Q5_0, Q5_1,
        Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
        IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4 and NVFP4 need
        ``dequantize=True`` and give a new F32 tensor, bit-identical to
        ``gguf.quants.dequantize`` for every block (NaN and infinite scales included),
        decoded a bounded number of blocks at a time (memory beyond the result stays a
        few MiB); without it they are a DTypeError, as is every other ggml type
        (``raw`` still gives their bytes).
        """
        found = self._lookup(name)
        kind = found.kind
        dtype = ZERO_COPY.get(kind.name)
        if dtype is not None:
            return tensor_of(self._view(found, dtype), dtype, self._copy)
        self._check_quantized(found, dequantize)
        values = dequantize_blocks(kind, self._span(found), found.dims, self._where(found))
        return Tensor._adopt(values, DType.F32)

    def inspect(
        self, name: str, options: TensorInspectionOptions | None = None
    ) -> TensorInspection:
        """``get(name, dequantize=True).inspect(options)``, reading only what it samples.

        Plain tensors are inspected in place. For a block-quantized tensor only the
        blocks holding the sampled elements are decoded; the result equals inspecting
        the whole dequantized F32 tensor. ``options`` as for ``Tensor.inspect``
        (DTypeError for anything other than options or None).
        """
        found = self._lookup(name)
        options = checked_options(options)
        storage = self._opened()
        dtype = ZERO_COPY.get(found.kind.name)
        if dtype is not None:
            return storage.inspect(found.begin, found.dims, dtype, options)
        self._check_quantized(found, True)
        return quantized_inspection(found.kind, storage, found.begin, found.dims, options)

    def chunks(
        self, name: str, first: int = 0, last: int | None = None
    ) -> Iterator[np.ndarray[Any, Any]]:
        """Stored bytes ``[first, last)`` of tensor ``name`` (all by default) as bounded
        flat ``uint8`` pieces, in order."""
        found = self._lookup(name)
        end = found.end if last is None else found.begin + last
        return self._opened().chunks(found.begin + first, end)

    def close(self) -> None:
        """Release the file (closing twice is fine); tensors handed out stay valid."""
        super().close()
        if self._storage is not None:
            self._storage.close()
        self._storage = None

    def _opened(self) -> Storage:
        if self._storage is None:
            raise FormatError(f"{self._path}: the GGUF file is closed")
        return self._storage

    def _lookup(self, name: object) -> _TensorInfo:
        self._opened()
        found = self._by_name.get(name) if type(name) is str else None
        if found is None:
            raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")
        return found

    def _span(self, found: _TensorInfo) -> np.ndarray[Any, Any]:
        return self._opened().span(found.begin, found.end)

    def _view(self, found: _TensorInfo, dtype: DType) -> np.ndarray[Any, Any]:
        return self._span(found).view(dtype.numpy).reshape(found.dims)

    def _where(self, found: _TensorInfo) -> str:
        return f"{self._path}: tensor {found.name[:80]!r}"

    def _check_quantized(self, found: _TensorInfo, dequantize: bool) -> None:
        name = found.kind.name
        if name not in DEQUANTIZABLE:
            raise DTypeError(f"{self._where(found)}: ggml type {name} is not supported")
        if not dequantize:
            raise DTypeError(
                f"{self._where(found)}: {name} is block-quantized; "
                "pass dequantize=True for F32 values"
            )

    def __repr__(self) -> str:
        return f"GGUFFile({self._path!r}, version {self._version}, {len(self._by_name)} tensors)"


def _copied(value: Any) -> Any:
    # Arrays hold arrays only or none (one level deep); ``copy`` keeps a StoredFloatList.
    if isinstance(value, list):
        nested = value and isinstance(value[0], list)
        return [_copied(item) for item in value] if nested else value.copy()
    return value


@guard_function
def open_gguf(path: PathLike, copy: bool = False) -> GGUFFile:
    """Open a GGUF file (version 2 or 3, little-endian): validate it whole, map it read-only.

    Plain tensors are zero-copy views of the mapping: the file must not be modified or
    truncated while they live (replacing it by rename is safe). With ``copy=True``,
    ``get`` copies them into memory, independent of the file.

    The file is mapped first (a mapping allocates no memory) and parsed in place;
    metadata is parsed at once, tensor data is never read until used. A path that cannot be opened
    raises the OSError unchanged; malformed content is a FormatError (LimitError for
    caps) naming the file, the key or tensor, and the problem. See the module docstring
    for every check. What the header builds (keys, values, tensor names) may cost at
    most 64 MiB + 16 x the header's bytes.
    """
    return open_gguf_charged(path, copy, None)


def open_gguf_charged(path: PathLike, copy: bool, budget: ParseBudget | None) -> GGUFFile:
    """``open_gguf``, charging what the header builds to ``budget`` (the open's one
    budget, when the file is part of a bigger open; a fresh one when None)."""
    where = label(path)
    with open_regular(where) as file:
        size = file_size(file)
        raw = map_file(file, size, where)
    version, metadata, tensors = parse_gguf(_Reader(raw.data, size, where, budget=budget))
    return GGUFFile(where, version, metadata, tensors, MappedStorage(raw, where), copy)


def parse_gguf(
    reader: _Reader,
) -> tuple[int, tuple[dict[str, Any], dict[str, str]], dict[str, _TensorInfo]]:
    """Validate a GGUF header read through ``reader`` from the file's start:
    (version, (metadata, metadata types), tensor infos by name with absolute offsets).
    """
    where, size = reader.where, reader.size
    reader.need(4, "magic")
    if bytes(reader.buf[0:4]) != GGUF_MAGIC:
        raise FormatError(f"{where}: not a GGUF file (magic {bytes(reader.buf[0:4])!r})")
    reader.pos = 4
    version = reader.u32("version")
    if version not in (2, 3):
        if int.from_bytes(version.to_bytes(4, "little"), "big") in (2, 3):
            raise FormatError(f"{where}: big-endian GGUF files are not supported")
        raise FormatError(f"{where}: GGUF version {version} is not supported (only 2 and 3)")
    tensor_count = reader.u64("tensor count")
    kv_count = reader.u64("key-value count")
    # Bounded by the file's size only: the bytes are fetched as they are parsed.
    if kv_count * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_BYTES > size - reader.pos:
        reader.need(
            kv_count * _MIN_KV_BYTES + tensor_count * _MIN_TENSOR_BYTES,
            f"{kv_count} key-value pairs and {tensor_count} tensor infos",
        )
    metadata, types = _read_metadata(reader, kv_count)
    alignment = _alignment(reader, metadata, types)
    tensors = _read_tensor_infos(reader, tensor_count)
    data_start = -(-reader.pos // alignment) * alignment
    _place_tensors(tensors, data_start, alignment, size, where)
    return version, (metadata, types), {t.name: t for t in tensors}


def _read_metadata(reader: _Reader, count: int) -> tuple[dict[str, Any], dict[str, str]]:
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for i in range(count):
        key = reader.string(f"key {i}", _MAX_KEY_BYTES)
        if not key:
            raise FormatError(f"{reader.where}: key {i} is empty")
        if key in metadata:
            raise FormatError(f"{reader.where}: key {key[:80]!r} appears more than once")
        vtype = reader.u32(f"type of {key[:80]!r}")
        reader.count_values(1, key[:80])
        reader.charge(2 * (TEXT_BYTES + ITEM_BYTES) + OBJECT_BYTES + len(key), key[:80])
        metadata[key], types[key] = reader.value(vtype, f"value of {key[:80]!r}")
    return metadata, types


def _alignment(reader: _Reader, metadata: dict[str, Any], types: dict[str, str]) -> int:
    if "general.alignment" not in metadata:
        return _DEFAULT_ALIGNMENT
    value = metadata["general.alignment"]
    if types["general.alignment"] != "UINT32" or value <= 0 or value & (value - 1):
        raise FormatError(
            f"{reader.where}: general.alignment must be a non-zero power of two of type "
            f"UINT32, found {value!r} of type {types['general.alignment']}"
        )
    return int(value)


def _read_tensor_infos(reader: _Reader, count: int) -> list[_TensorInfo]:
    tensors: list[_TensorInfo] = []
    seen: set[str] = set()
    for i in range(count):
        reader.charge(_TENSOR_INFO_BYTES, f"tensor info {i}")
        name = reader.string(f"tensor {i} name", _MAX_NAME_BYTES)
        where = f"{reader.where}: tensor {name!r}"
        if not name or name in seen:
            raise FormatError(f"{where}: tensor names must be non-empty and unique")
        seen.add(name)
        n_dims = reader.u32(f"tensor {name!r} n_dims")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise FormatError(f"{where}: n_dims is {n_dims}, expected 1 to {_MAX_DIMS}")
        reader.need(8 * n_dims, f"tensor {name!r} dims")
        inner_first = struct.unpack_from(f"<{n_dims}Q", reader.buf, reader.pos)
        reader.pos += 8 * n_dims
        type_id = reader.u32(f"tensor {name!r} type")
        offset = reader.u64(f"tensor {name!r} offset")
        kind = GGML_TYPES.get(type_id)
        if kind is None:
            raise FormatError(f"{where}: unknown ggml type id {type_id}")
        dims = checked_shape(inner_first[::-1], where)
        if inner_first[0] % kind.block_size:
            raise FormatError(
                f"{where}: innermost dim {inner_first[0]} is not a multiple of the "
                f"{kind.name} block size {kind.block_size}"
            )
        numel = 1
        for dim in dims:
            numel *= dim
        nbytes = numel // kind.block_size * kind.block_bytes
        # ``begin``/``end`` hold the relative offset until _place_tensors makes them absolute.
        tensors.append(_TensorInfo(name, dims, kind, offset, offset + nbytes))
    return tensors


def _place_tensors(
    tensors: list[_TensorInfo], data_start: int, alignment: int, size: int, where: str
) -> None:
    for info in tensors:
        if info.begin % alignment:
            raise FormatError(
                f"{where}: tensor {info.name!r} offset {info.begin} is not a multiple of "
                f"the alignment {alignment}"
            )
        info.begin += data_start
        info.end += data_start
        if info.end > size:
            raise FormatError(
                f"{where}: tensor {info.name!r} spans bytes {info.begin}..{info.end}, "
                f"past the end of the {size}-byte file"
            )
    previous: _TensorInfo | None = None
    for info in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if previous is not None and info.begin < previous.end:
            raise FormatError(f"{where}: tensors {previous.name!r} and {info.name!r} overlap")
        previous = info
