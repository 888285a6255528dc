"""Parsing and validating one safetensors file's header, before anything is mapped.

The format: an 8-byte little-endian unsigned header length ``N``, ``N`` bytes of UTF-8
JSON (an object mapping tensor names to ``{"dtype", "shape", "data_offsets"}`` plus an
optional ``"__metadata__"`` object of strings), then the data region, in which each
tensor's ``data_offsets`` are relative. Checks, in order: at least 8 bytes; ``N`` within
the reference library's cap and ``8 + N`` within the file; the header starts with ``{``,
is UTF-8 and strict JSON (repeated keys refused, depth capped); every entry has exactly
the three fields; a known dtype; a shape within MAX_RANK/MAX_ELEMENTS; two non-negative
int offsets with ``begin <= end``; ``numel * bits / 8 == end - begin`` exactly (Python
ints); and, sorted by offset, the entries tile the data region exactly (no gap, no
overlap, no trailing bytes).
"""

from __future__ import annotations

from typing import IO, Any

from .._core.dtype import DType
from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_ELEMENTS, MAX_RANK
from .._core.limits import MAX_SAFETENSORS_HEADER_BYTES as MAX_HEADER_BYTES
from .._core.limits import MAX_SAFETENSORS_HEADER_DEPTH as _HEADER_DEPTH
from .._kernels.strict_json import loads_strict
from ._budget import ParseBudget
from ._common import checked_shape, read_exact

__all__ = ["DTYPE_BITS", "MAX_HEADER_BYTES", "REFERENCE_ORDER", "Entry", "parse_header"]


# Every dtype name the format defines, with its size in bits and its strided DType.
# Names without a DType (sub-byte and exotic floats, complex) are validated like any
# other, so such files open; reading those tensors is a DTypeError.
DTYPE_BITS: dict[str, tuple[DType | None, int]] = {
    "BOOL": (DType.BOOL, 8),
    "U8": (DType.U8, 8),
    "I8": (DType.I8, 8),
    "U16": (DType.U16, 16),
    "I16": (DType.I16, 16),
    "U32": (DType.U32, 32),
    "I32": (DType.I32, 32),
    "U64": (DType.U64, 64),
    "I64": (DType.I64, 64),
    "F16": (DType.F16, 16),
    "BF16": (DType.BF16, 16),
    "F32": (DType.F32, 32),
    "F64": (DType.F64, 64),
    "F8_E4M3": (DType.F8_E4M3, 8),
    "F8_E5M2": (DType.F8_E5M2, 8),
    "F4": (None, 4),
    "F6_E2M3": (None, 6),
    "F6_E3M2": (None, 6),
    "F8_E8M0": (DType.F8_E8M0, 8),
    "F8_E4M3FNUZ": (None, 8),
    "F8_E5M2FNUZ": (None, 8),
    "C64": (None, 64),
}

# The reference writer orders tensors by this dtype order, descending (largest
# alignment first), then by name; saving in the same order gives identical files.
REFERENCE_ORDER = {
    name: rank
    for rank, name in enumerate(
        [
            "BOOL",
            "F4",
            "F6_E2M3",
            "F6_E3M2",
            "U8",
            "I8",
            "F8_E5M2",
            "F8_E4M3",
            "F8_E8M0",
            "F8_E4M3FNUZ",
            "F8_E5M2FNUZ",
            "I16",
            "U16",
            "F16",
            "BF16",
            "I32",
            "U32",
            "F32",
            "C64",
            "F64",
            "I64",
            "U64",
        ]
    )
}

_FIELDS = frozenset({"dtype", "shape", "data_offsets"})


class Entry:
    """One validated tensor entry; ``begin``/``end`` are absolute byte offsets in the file.

    ``dtype`` is the strided DType (None when strided has no DType for ``dtype_name``).
    """

    __slots__ = ("begin", "dims", "dtype", "dtype_name", "end", "name")

    def __init__(
        self, name: str, dtype_name: str, dims: tuple[int, ...], begin: int, end: int
    ) -> None:
        self.name = name
        self.dtype_name = dtype_name
        self.dtype = DTYPE_BITS[dtype_name][0]
        self.dims = dims
        self.begin = begin
        self.end = end


def parse_header(
    file: IO[bytes], size: int, where: str, budget: ParseBudget | None = None
) -> tuple[list[Entry], dict[str, str]]:
    """Validate the header of the open file of ``size`` bytes: (entries by offset, metadata).

    What parsing builds is charged to ``budget`` (a fresh one when None) before the JSON
    parser runs, so a header of many tiny objects is a LimitError, not gigabytes.
    """
    if size < 8:
        raise FormatError(
            f"{where}: {size} bytes is too short for safetensors (8-byte header length missing)"
        )
    length = int.from_bytes(read_exact(file, 8, where, "header length"), "little")
    if length > MAX_HEADER_BYTES:
        raise LimitError(
            f"{where}: header length {length} exceeds the cap of {MAX_HEADER_BYTES} bytes"
        )
    if 8 + length > size:
        raise FormatError(
            f"{where}: header length {length} runs past the end of the {size}-byte file"
        )
    header = read_exact(file, length, where, "header")
    if not header.startswith(b"{"):
        raise FormatError(f"{where}: the header must begin with '{{'")
    spend = ParseBudget(where) if budget is None else budget
    spend.grant(8 + length)
    parsed = loads_strict(
        header,
        f"{where}: header",
        _HEADER_DEPTH,
        lambda cost: spend.charge(cost, "the header's JSON objects"),
    )
    if type(parsed) is not dict:
        raise FormatError(f"{where}: the header must be a JSON object")
    # ``"__metadata__": null`` is read as no metadata, as the reference library reads it.
    found = parsed.pop("__metadata__", None)
    metadata = {} if found is None else _metadata(found, where)
    data_start = 8 + length
    data_size = size - data_start
    entries = []
    for name, spec in parsed.items():
        # The common, valid entry is checked inline; anything unusual takes the slow path,
        # which re-checks everything and names the exact problem.
        found = _plain_entry(name, spec, data_start)
        entries.append(found if found is not None else _entry(name, spec, where, data_start))
    _check_tiling(entries, data_start, data_size, where)
    return entries, metadata


def _metadata(value: Any, where: str) -> dict[str, str]:
    if type(value) is not dict:
        raise FormatError(f"{where}: __metadata__ must be an object of strings")
    for key, item in value.items():
        if type(item) is not str:
            raise FormatError(
                f"{where}: __metadata__[{key[:80]!r}] must be a string, found {_json_type(item)}"
            )
    return value


def _plain_entry(name: str, spec: Any, data_start: int) -> Entry | None:
    if type(spec) is not dict or len(spec) != 3:
        return None
    dtype_name: Any = spec.get("dtype")
    shape = spec.get("shape")
    offsets = spec.get("data_offsets")
    known = DTYPE_BITS.get(dtype_name) if type(dtype_name) is str else None
    if known is None or type(shape) is not list or len(shape) > MAX_RANK:
        return None
    if type(offsets) is not list or len(offsets) != 2:
        return None
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
        return None
    nonzero = 1
    numel = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            return None
        numel *= dim
        if dim:
            nonzero *= dim
    if nonzero > MAX_ELEMENTS or numel * known[1] != (end - begin) * 8:
        return None
    return Entry(name, dtype_name, tuple(shape), data_start + begin, data_start + end)


def _entry(name: str, spec: Any, where: str, data_start: int) -> Entry:
    at = f"{where}: tensor {name[:80]!r}"
    if type(spec) is not dict:
        raise FormatError(f"{at}: entry must be an object, found {_json_type(spec)}")
    if spec.keys() != _FIELDS:
        missing = sorted(_FIELDS - spec.keys())
        extra = sorted(k[:40] for k in spec.keys() - _FIELDS)
        raise FormatError(
            f"{at}: entry must have exactly dtype, shape and data_offsets "
            f"(missing {missing}, unexpected {extra})"
        )
    dtype_name = spec["dtype"]
    if type(dtype_name) is not str or dtype_name not in DTYPE_BITS:
        shown = dtype_name[:40] if type(dtype_name) is str else _json_type(dtype_name)
        raise FormatError(f"{at}: unknown dtype {shown!r}")
    bits = DTYPE_BITS[dtype_name][1]
    shape = spec["shape"]
    if type(shape) is not list:
        raise FormatError(f"{at}: shape must be a list of ints, found {_json_type(shape)}")
    dims = checked_shape(shape, at)
    offsets = spec["data_offsets"]
    if (
        type(offsets) is not list
        or len(offsets) != 2
        or type(offsets[0]) is not int
        or type(offsets[1]) is not int
    ):
        raise FormatError(f"{at}: data_offsets must be a list of two ints")
    begin, end = offsets
    if begin < 0 or end < begin:
        raise FormatError(f"{at}: data_offsets [{begin}, {end}] must satisfy 0 <= begin <= end")
    numel = 1
    for dim in dims:
        numel *= dim
    total_bits = numel * bits
    if total_bits % 8 or total_bits // 8 != end - begin:
        raise FormatError(
            f"{at}: shape {list(dims)} of {dtype_name} needs {total_bits / 8:g} bytes, "
            f"data_offsets [{begin}, {end}] span {end - begin}"
        )
    return Entry(name, dtype_name, dims, data_start + begin, data_start + end)


def _check_tiling(entries: list[Entry], data_start: int, data_size: int, where: str) -> None:
    # Sorting by (begin, end) puts empty tensors before a tensor starting at the same
    # offset; the tiling rule then needs each begin to equal the previous end.
    entries.sort(key=lambda e: (e.begin, e.end))
    expected = data_start
    for entry in entries:
        if entry.end - data_start > data_size:
            raise FormatError(
                f"{where}: tensor {entry.name[:80]!r} ends at data offset "
                f"{entry.end - data_start}, past the {data_size}-byte data region"
            )
        if entry.begin != expected:
            problem = "overlaps the previous tensor" if entry.begin < expected else "leaves a gap"
            raise FormatError(
                f"{where}: tensor {entry.name[:80]!r} begins at data offset "
                f"{entry.begin - data_start}, expected {expected - data_start} ({problem})"
            )
        expected = entry.end
    if expected - data_start != data_size:
        raise FormatError(
            f"{where}: the tensors cover {expected - data_start} bytes of the "
            f"{data_size}-byte data region (trailing bytes)"
        )


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}
    names |= {float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
