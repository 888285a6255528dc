"""Writing GGUF version 3: key/values with their GGUF types, tensor infos, aligned data.

A GGUF file is its header (magic ``GGUF``, version, tensor and key/value counts, the
key/values, the tensor infos), zero padding up to the alignment, then each tensor's
bytes at an offset that is a multiple of the alignment (32 unless a
``general.alignment`` key says otherwise), each padded with zeros to the next multiple,
as ggml and the ``gguf`` package write them. This module builds the header bytes and
the layout from names, types and shapes alone, before any tensor data is read, so the
writers (``strided.jobs._gguf_export``, ``strided.jobs._set_metadata``) can stream each
tensor to its offset.

Key/value types are named as ``GGUFFile.metadata_types`` names them: ``UINT8``,
``INT8``, ``UINT16``, ``INT16``, ``UINT32``, ``INT32``, ``UINT64``, ``INT64``,
``FLOAT32``, ``FLOAT64``, ``BOOL``, ``STRING``, ``ARRAY[T]`` and ``ARRAY[ARRAY[T]]``
(``ARRAY[ARRAY]``: inner arrays whose element types differ or are empty; each is then
typed by its values as ``value_type`` types a list). A value that does not fit its type
is a FormatError naming the key; nothing is written.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._core.errors import FormatError, LimitError, ShapeError
from ..._core.limits import MAX_GGUF_DIMS, MAX_GGUF_KEY_BYTES, MAX_GGUF_NAME_BYTES
from ..._core.limits import MAX_GGUF_STRING_BYTES as MAX_STRING_BYTES
from ..._core.shape import Shape
from ..._core.stored_float import StoredFloat, StoredFloatList
from ._ggml import GGML_TYPES, GGMLType
from ._quantize import QUANTIZABLE

__all__ = [
    "BLOCK_TYPES",
    "DEFAULT_ALIGNMENT",
    "FILE_TYPES",
    "GGML_BY_NAME",
    "GGUFLayout",
    "KeyValue",
    "TensorSpec",
    "alignment_of",
    "check_tensor",
    "encode_kv",
    "gguf_layout",
    "stored_bytes",
    "tensor_info",
    "value_type",
]

DEFAULT_ALIGNMENT = 32
GGML_BY_NAME: dict[str, GGMLType] = {kind.name: kind for kind in GGML_TYPES.values()}
# The block types written by quantizing float32 rows (``_quantize``: those
# ``gguf.quants.quantize`` produces besides plain F32, F16 and BF16).
BLOCK_TYPES = tuple(sorted(QUANTIZABLE))
# ``general.file_type`` (llama.cpp's ``llama_ftype``) for each type ``--dtype`` writes.
FILE_TYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "BF16": 32,
    "TQ1_0": 36,
    "TQ2_0": 37,
    "MXFP4": 38,
}

_STRING, _ARRAY = 8, 9
# Scalar type name -> (type id, little-endian NumPy dtype).
_SCALARS: dict[str, tuple[int, np.dtype[Any]]] = {
    "UINT8": (0, np.dtype("<u1")),
    "INT8": (1, np.dtype("<i1")),
    "UINT16": (2, np.dtype("<u2")),
    "INT16": (3, np.dtype("<i2")),
    "UINT32": (4, np.dtype("<u4")),
    "INT32": (5, np.dtype("<i4")),
    "FLOAT32": (6, np.dtype("<f4")),
    "BOOL": (7, np.dtype("<u1")),
    "UINT64": (10, np.dtype("<u8")),
    "INT64": (11, np.dtype("<i8")),
    "FLOAT64": (12, np.dtype("<f8")),
}
_INT_RANGES = {
    name: (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for name, (_, dtype) in _SCALARS.items()
    if dtype.kind in "iu" and name != "BOOL"
}
_F32_MAX = float(np.finfo(np.float32).max)
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class KeyValue(NamedTuple):
    """One key/value to write: its key, GGUF type name and Python value."""

    key: str
    type: str
    value: Any


class TensorSpec(NamedTuple):
    """One tensor to write: name, ggml type name and row-major shape."""

    name: str
    type: str
    shape: Shape


class GGUFLayout(NamedTuple):
    """One output file: its header bytes (padded), where each tensor goes, its size."""

    header: bytes
    offsets: dict[str, int]  # name -> absolute offset of the tensor's first byte
    size: int


def value_type(value: object, where: str) -> str:
    """The GGUF type a Python or NumPy value is written as, when none is given.

    A NumPy scalar keeps its own type (``np.uint16`` is ``UINT16``, ``np.float64``
    ``FLOAT64``); a 1-D NumPy array is an ``ARRAY`` of its element type. ``bool`` is
    ``BOOL``; ``str`` is ``STRING``; ``int`` is ``UINT32`` when ``0 <= v < 2**32``,
    ``INT32`` when negative and within INT32, else ``INT64`` or ``UINT64``, the type
    llama.cpp reads counts and sizes as; ``float`` is ``FLOAT32`` (the nearest F32, the
    type llama.cpp reads every float key as; ``np.float64`` keeps F64), a float read in
    a narrower type (``F32Float``, ``StoredFloatList`` elements) too. A list or
    tuple is an ``ARRAY``: of ``STRING``, ``BOOL`` or ``FLOAT32`` when its elements
    all are strings, bools or floats, of ``INT32`` when its integers all fit (else
    ``INT64``, else ``UINT64``), of arrays (one level) when its elements are lists; an
    empty list is ``ARRAY[INT32]`` (``ARRAY[FLOAT32]`` when read from one). FormatError
    for anything else (None, bytes, mixed lists), naming ``where``.
    """
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise FormatError(f"{where}: a NumPy array value must be 1-D, found {value.ndim}-D")
        return f"ARRAY[{_numpy_type(value.dtype, where)}]"
    if isinstance(value, np.generic):
        return _numpy_type(value.dtype, where)
    if type(value) is bool:
        return "BOOL"
    if type(value) is str:
        return "STRING"
    if type(value) is int:
        if 0 <= value < 2**32:
            return "UINT32"
        for name in ("INT32", "INT64", "UINT64"):
            low, high = _INT_RANGES[name]
            if low <= value <= high:
                return name
        raise FormatError(f"{where}: the integer {value} fits no GGUF integer type")
    if type(value) is float or isinstance(value, StoredFloat):
        return "FLOAT32"
    if isinstance(value, (list, tuple)):
        return f"ARRAY[{_element_type(value, where)}]"
    raise FormatError(f"{where}: a {type(value).__name__} value cannot be a GGUF key/value")


def _numpy_type(dtype: np.dtype[Any], where: str) -> str:
    if dtype == np.bool_:
        return "BOOL"
    for name, (_, stored) in _SCALARS.items():
        if name != "BOOL" and dtype == stored:
            return name
    raise FormatError(f"{where}: NumPy {dtype} has no GGUF value type")


def _element_type(items: Sequence[Any], where: str) -> str:
    if not items:
        # An empty array read from a FLOAT32 array still says so.
        return "FLOAT32" if isinstance(items, StoredFloatList) else "INT32"
    # A float read in a narrower type (an F32 from a GGUF file) is a float here.
    kinds = {float if issubclass(kind, StoredFloat) else kind for kind in set(map(type, items))}
    if all(issubclass(kind, (list, tuple)) for kind in kinds):
        inner = {_element_type(item, where) for item in items}
        return f"ARRAY[{inner.pop()}]" if len(inner) == 1 else "ARRAY"
    if len(kinds) != 1 or kinds.pop() not in (str, bool, int, float):
        raise FormatError(f"{where}: a list value must hold one kind of str, bool, int or float")
    first = items[0]
    if type(first) is int:
        low, high = min(items), max(items)
        for name in ("INT32", "INT64", "UINT64"):
            if _INT_RANGES[name][0] <= low and high <= _INT_RANGES[name][1]:
                return name
        raise FormatError(f"{where}: the integers of the list fit no GGUF integer type")
    return {str: "STRING", bool: "BOOL", float: "FLOAT32"}[type(first)]


def encode_kv(key: str, type_name: str, value: Any) -> bytes:
    """One key/value as stored: the key, the u32 type id, the value.

    FormatError naming the key when the key is empty, longer than 65535 bytes or not
    valid Unicode, the type is unknown, or the value does not fit the type (an integer
    out of range, a finite float beyond F32's range for ``FLOAT32``, a non-bool for
    ``BOOL``, a non-string for ``STRING``, a non-list for an ``ARRAY``).
    """
    where = f"key {key[:80]!r}"
    if type(key) is not str or not key:
        raise FormatError(f"{where}: keys must be non-empty strings")
    key_bytes = _utf8(key, where)
    if len(key_bytes) > MAX_GGUF_KEY_BYTES:
        raise FormatError(f"{where}: a key of {len(key_bytes)} bytes exceeds {MAX_GGUF_KEY_BYTES}")
    return _U64.pack(len(key_bytes)) + key_bytes + _typed(type_name, value, where, 0)


def _typed(type_name: str, value: Any, where: str, depth: int) -> bytes:
    """The u32 type id and the value's bytes."""
    if type_name == "STRING":
        return _U32.pack(_STRING) + _string(value, where)
    scalar = _SCALARS.get(type_name)
    if scalar is not None:
        return _U32.pack(scalar[0]) + _numbers(type_name, [value], where)
    if not (type_name.startswith("ARRAY") and depth < 2):
        raise FormatError(f"{where}: unknown GGUF value type {type_name[:40]!r}")
    array = isinstance(value, np.ndarray)
    if not (isinstance(value, (list, tuple)) or (array and value.ndim == 1)):
        raise FormatError(f"{where}: an {type_name} value must be a list")
    items = value.tolist() if isinstance(value, np.ndarray) else list(value)
    inner = type_name[6:-1] if type_name.startswith("ARRAY[") and type_name[-1] == "]" else ""
    if type_name == "ARRAY" or inner == "ARRAY":
        if depth:
            raise FormatError(f"{where}: arrays nest at most one level deep")
        inner = _element_type(items, where)
    if inner == "STRING":
        body = b"".join(_string(item, f"{where}[{i}]") for i, item in enumerate(items))
        return _U32.pack(_ARRAY) + _U32.pack(_STRING) + _U64.pack(len(items)) + body
    if inner in _SCALARS:
        head = _U32.pack(_ARRAY) + _U32.pack(_SCALARS[inner][0]) + _U64.pack(len(items))
        return head + _numbers(inner, items, where)
    if inner.startswith("ARRAY") and depth == 0:
        parts = []
        for i, item in enumerate(items):
            if not isinstance(item, (list, tuple, np.ndarray)):
                raise FormatError(f"{where}[{i}]: an {inner} element must be a list")
            element = inner if inner != "ARRAY" else f"ARRAY[{_element_type(list(item), where)}]"
            parts.append(_typed(element, item, f"{where}[{i}]", depth + 1)[4:])
        head = _U32.pack(_ARRAY) + _U32.pack(_ARRAY) + _U64.pack(len(items))
        return head + b"".join(parts)
    raise FormatError(f"{where}: unknown GGUF value type {type_name[:40]!r}")


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"{where}: text is not valid Unicode (a lone surrogate)") from None


def _string(value: Any, where: str) -> bytes:
    if type(value) is not str and not isinstance(value, np.str_):
        raise FormatError(f"{where}: a STRING value must be a str, found {type(value).__name__}")
    data = _utf8(str(value), where)
    if len(data) > MAX_STRING_BYTES:
        raise LimitError(f"{where}: a string of {len(data)} bytes exceeds {MAX_STRING_BYTES}")
    return _U64.pack(len(data)) + data


def _numbers(type_name: str, items: list[Any], where: str) -> bytes:
    """``items`` as little-endian values of a fixed-size type, every one checked."""
    dtype = _SCALARS[type_name][1]
    if type_name == "BOOL":
        for i, item in enumerate(items):
            if type(item) is not bool and not isinstance(item, np.bool_):
                raise FormatError(f"{where}: BOOL needs true or false, found {_shown(item, i)}")
        return np.array(items, dtype=np.uint8).tobytes()
    if dtype.kind == "f":
        values = []
        for i, item in enumerate(items):
            if type(item) is bool or not isinstance(item, (int, float, np.integer, np.floating)):
                raise FormatError(f"{where}: {type_name} needs a number, found {_shown(item, i)}")
            number = float(item)
            # Beyond F32's maximum, only values within half an ulp of it round to it.
            if type_name == "FLOAT32" and math.isfinite(number) and abs(number) > _F32_MAX:
                with np.errstate(over="ignore"):
                    rounded = np.float32(number)
                if not np.isfinite(rounded):
                    raise FormatError(f"{where}: {number!r} is beyond FLOAT32's range")
            values.append(number)
        with np.errstate(over="ignore"):
            return np.array(values, dtype=np.float64).astype(dtype).tobytes()
    low, high = _INT_RANGES[type_name]
    for i, item in enumerate(items):
        if type(item) is bool or not isinstance(item, (int, np.integer)):
            raise FormatError(f"{where}: {type_name} needs an integer, found {_shown(item, i)}")
        if not low <= int(item) <= high:
            raise FormatError(f"{where}: {int(item)} does not fit {type_name} ({low}..{high})")
    return np.array([int(item) for item in items], dtype=dtype).tobytes()


def _shown(item: object, index: int) -> str:
    return f"{str(item)[:40]!r} ({type(item).__name__}) at [{index}]"


def stored_bytes(type_name: str, shape: Shape) -> int:
    """The bytes a tensor of ggml type ``type_name`` and ``shape`` takes (whole blocks)."""
    kind = GGML_BY_NAME[type_name]
    return shape.numel // kind.block_size * kind.block_bytes


def check_tensor(spec: TensorSpec, where: str) -> None:
    """FormatError/ShapeError unless ggml can hold the tensor as ``spec`` says.

    The name must be non-empty valid Unicode of fewer than 64 bytes (ggml's limit,
    counting its terminating zero); the type a known ggml type; the shape of rank 1 to
    4 (a rank-0 tensor is written as shape ``[1]``, ggml having no rank 0), its last
    dim a multiple of the type's block size.
    """
    name = spec.name
    encoded = _utf8(name, f"{where}: tensor {name[:80]!r}") if type(name) is str else b""
    if not encoded or len(encoded) >= MAX_GGUF_NAME_BYTES:
        raise FormatError(
            f"{where}: tensor {str(name)[:80]!r}: GGUF tensor names are 1 to "
            f"{MAX_GGUF_NAME_BYTES - 1} bytes, found {len(encoded)}"
        )
    kind = GGML_BY_NAME.get(spec.type)
    if kind is None:
        raise FormatError(f"{where}: tensor {name!r}: unknown ggml type {spec.type[:40]!r}")
    if len(spec.shape) > MAX_GGUF_DIMS:
        raise ShapeError(
            f"{where}: tensor {name!r}: GGUF holds at most {MAX_GGUF_DIMS} dims, "
            f"shape {list(spec.shape)} has {len(spec.shape)}"
        )
    row = spec.shape[-1] if len(spec.shape) else 1
    if row % kind.block_size:
        raise ShapeError(
            f"{where}: tensor {name!r}: rows of {row} values are not a multiple of the "
            f"{spec.type} block size {kind.block_size}"
        )


def tensor_info(spec: TensorSpec, offset: int) -> bytes:
    """A tensor info as stored: name, dims innermost first, ggml type id, relative offset."""
    name = spec.name.encode("utf-8")
    dims = tuple(spec.shape)[::-1] or (1,)
    return b"".join(
        (
            _U64.pack(len(name)),
            name,
            _U32.pack(len(dims)),
            struct.pack(f"<{len(dims)}Q", *dims),
            _U32.pack(GGML_BY_NAME[spec.type].type_id),
            _U64.pack(offset),
        )
    )


def gguf_layout(
    kvs: Iterable[bytes],
    count: int,
    tensors: Sequence[TensorSpec],
    alignment: int = DEFAULT_ALIGNMENT,
    where: str = "GGUF",
    version: int = 3,
) -> GGUFLayout:
    """The header and layout of a GGUF file of ``count`` encoded key/values ``kvs``
    (``encode_kv``) and ``tensors``, in the order given.

    Each tensor starts at a multiple of ``alignment`` past the data's start (itself the
    header's end rounded up to ``alignment``); the file ends padded to ``alignment``.
    FormatError/ShapeError for a tensor ggml cannot hold (``check_tensor``) or a name
    given twice.
    """
    seen: set[str] = set()
    infos = []
    relative: dict[str, int] = {}
    position = 0
    for spec in tensors:
        check_tensor(spec, where)
        if spec.name in seen:
            raise FormatError(f"{where}: tensor {spec.name!r} is given twice")
        seen.add(spec.name)
        infos.append(tensor_info(spec, position))
        relative[spec.name] = position
        position += _padded(stored_bytes(spec.type, spec.shape), alignment)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), count)
    header = b"".join((head, *kvs, *infos))
    header += bytes(-len(header) % alignment)
    start = len(header)
    return GGUFLayout(
        header, {name: start + offset for name, offset in relative.items()}, start + position
    )


def _padded(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def alignment_of(kvs: Mapping[str, tuple[str, Any]], where: str) -> int:
    """The alignment a ``general.alignment`` key (type, value) asks for; 32 without one.

    FormatError unless it is a UINT32 power of two.
    """
    found = kvs.get("general.alignment")
    if found is None:
        return DEFAULT_ALIGNMENT
    kind, value = found
    if kind != "UINT32" or type(value) is not int or value <= 0 or value & (value - 1):
        raise FormatError(
            f"{where}: general.alignment must be a UINT32 power of two, found {value!r} "
            f"of type {kind}"
        )
    return value
