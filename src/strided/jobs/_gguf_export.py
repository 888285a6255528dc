"""Writing any checkpoint (or a mapping of tensors) as GGUF, one tensor at a time.

The types and key/values are planned first (``_gguf_plan``), so every file's header and
layout are known before any data is read; then each tensor's bytes go straight to their
offset: stored bytes streamed as they are (``copy``), or values read a bounded chunk at
a time, converted to a plain ggml type (``convert``, the exact conversion of
``Tensor.convert``) or quantized as float32 rows into blocks (``quantize``). With a
maximum part size the output is llama.cpp's split layout (``gguf_split``): tensors in
order fill a part until the next would pass the size (a larger tensor gets a part of
its own), part k carries ``split.no`` (UINT16, from 0), ``split.count`` (UINT16) and
``split.tensors.count`` (INT32) after the first part's other key/values.

Every part is written under a hidden temporary name beside its target and renamed
onto it once every part is complete (a ``Sweeper`` removes the temporary files should
the process be killed); the same input gives the same bytes for any number of worker
processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, FormatError, RangeError
from .._core.memory import guard_function
from .._kernels.convert import convert_array
from .._kernels.pieces import pieces
from .._tensor.tensor import Tensor
from ..io._common import PathLike, fsync_path, label
from ..io._reader import TensorsReader
from ..io._shards import OutputFile, Sweeper, check_file_target, naming
from ..io.gguf import (
    GGML_BY_NAME,
    QUANTIZABLE,
    GGUFLayout,
    KeyValue,
    alignment_of,
    encode_kv,
    gguf_layout,
    part_name,
    quantize,
)
from ._checkpoint import Checkpoint, has_dtype
from ._export import _convert_distinct
from ._gguf_plan import GGUFItem, gguf_key_values, plan_gguf
from ._pool import JobError, Runner, loaded, opened
from ._unreadable import unreadable_error
from ._values import Source

__all__ = ["gguf_task", "save_gguf", "write_gguf"]

_CHUNK_ELEMENTS = 1 << 19  # a multiple of every block size: chunks are whole blocks


def encode_range(
    checkpoint: Checkpoint, name: str, start: int, stop: int, out: str, tensor: Tensor | None
) -> np.ndarray[Any, Any]:
    """Elements ``[start, stop)`` of tensor ``name`` as the bytes of ggml type ``out``.

    ``start`` and ``stop`` are whole blocks of ``out`` (whole rows when a row fits a
    chunk). A plain type is the exact conversion of ``Tensor.convert``: RangeError
    naming the tensor and the element for a finite value beyond its range. A block type
    quantizes the values as float32 rows (exactly ``gguf.quants.quantize``): RangeError
    naming the tensor, the rows and the block for a block holding NaN or infinity or
    whose F16 scale would overflow.
    """
    where = f"{checkpoint.path}: tensor {name!r}"
    source = Source(checkpoint, name, tensor)
    values = source.values(start, stop)
    if out in QUANTIZABLE:
        row = checkpoint.info(name).shape[-1]
        if start % row == 0 and (stop - start) % row == 0:
            rows = _float32(values, source.dtype, where).reshape(-1, row)
            at = f" (row numbers from {start // row})" if start else ""
        else:  # part of one long row
            rows = _float32(values, source.dtype, where).reshape(1, -1)
            at = f" (the row of elements from {start})"
        return quantize(np.ascontiguousarray(rows), out, where + at).reshape(-1)
    target = DType[out]
    try:
        converted = convert_array(values, source.dtype, target)
    except RangeError as error:
        found = error
        if has_dtype(checkpoint.info(name).dtype):
            try:
                _convert_distinct(checkpoint[name], target)
            except RangeError as whole:
                found = whole  # names the element's index in the tensor
        raise RangeError(f"{where}: {found}") from None
    return np.ascontiguousarray(converted).reshape(-1).view(np.uint8)


def _float32(values: np.ndarray[Any, Any], dtype: DType, where: str) -> np.ndarray[Any, Any]:
    """Values as float32: exact from F16, BF16 and the 8-bit floats; rounded once from F64."""
    if dtype is DType.F32:
        return values
    try:
        return convert_array(values, dtype, DType.F32)
    except RangeError as error:
        raise RangeError(f"{where}: {error}") from None


def _chunk(item: GGUFItem) -> int:
    """Elements per task: whole rows when a row fits ``_CHUNK_ELEMENTS``, else whole
    blocks of one long row (every block size divides ``_CHUNK_ELEMENTS``)."""
    shape = item.spec.shape
    row = shape[-1] if len(shape) else 1
    if item.mode != "quantize" or not 0 < row <= _CHUNK_ELEMENTS:
        return _CHUNK_ELEMENTS
    return _CHUNK_ELEMENTS // row * row


GGUFTask = tuple[str, str, int, int, str]


def gguf_task(task: GGUFTask) -> np.ndarray[Any, Any]:
    """One chunk of one tensor in its output type (run in a worker process)."""
    path, name, start, stop, out = task
    checkpoint = opened(path)
    try:
        tensor = loaded(path, name) if has_dtype(checkpoint.info(name).dtype) else None
        return encode_range(checkpoint, name, start, stop, out, tensor)
    except DataError as error:
        raise JobError(path, name, str(error)) from None


def _copy_into(
    output: OutputFile,
    offset: int,
    checkpoint: Checkpoint,
    name: str,
    advance: Callable[[int], None],
) -> int:
    """Write the stored bytes of tensor ``name`` at ``offset``; the offset after them.

    A function of its own so that nothing of the tensor (a piece is a view of it) is
    still referenced once it returns: a tensor computed whole (a merged one) is
    released before the next is made.
    """
    for piece in _copied(checkpoint, name):
        output.write(offset, piece)
        offset += piece.size
        advance(piece.size)
    return offset


def _encode_into(output: OutputFile, offset: int, checkpoint: Checkpoint, item: GGUFItem) -> None:
    """Write tensor ``item`` converted or quantized at ``offset``, a chunk at a time; the
    tensor read whole for it is released on return, before the next one is read."""
    name, numel = item.spec.name, item.spec.shape.numel
    tensor = checkpoint[name] if has_dtype(checkpoint.info(name).dtype) else None
    step = _chunk(item)
    for start in range(0, numel, step):
        stop = min(start + step, numel)
        data = encode_range(checkpoint, name, start, stop, item.spec.type, tensor)
        output.write(offset, data)
        offset += data.size


def _ignore(count: int) -> None:
    """Progress nobody shows (``save_gguf``)."""


def _copied(checkpoint: Checkpoint, name: str) -> Iterator[np.ndarray[Any, Any]]:
    """The stored bytes of a tensor kept as it is, a bounded piece at a time."""
    parts = checkpoint._chunks(name)
    if parts is None:
        parts = pieces(checkpoint[name].numpy())
    for piece in parts:
        yield piece.view(np.uint8)


class _Part:
    """One output file: its target path, layout and the tensors it holds."""

    def __init__(self, target: str, layout: GGUFLayout, items: Sequence[GGUFItem]) -> None:
        self.target = target
        self.layout = layout
        self.items = items
        self.output: OutputFile | None = None


def _groups(items: Sequence[GGUFItem], max_size: int | None) -> list[list[GGUFItem]]:
    """Tensors in order, a new part when the next would take the current past
    ``max_size`` bytes (a larger tensor alone): how llama.cpp's writers split."""
    if max_size is None:
        return [list(items)]
    groups: list[list[GGUFItem]] = [[]]
    held = 0
    for item in items:
        if groups[-1] and held + item.byte_len > max_size:
            groups.append([])
            held = 0
        groups[-1].append(item)
        held += item.byte_len
    return groups


def _parts(
    destination: str,
    items: Sequence[GGUFItem],
    kvs: Sequence[KeyValue],
    max_shard_size: int | None,
    overwrite: bool,
) -> list[_Part]:
    """Every output file's target and layout; nothing is created yet."""
    target = check_file_target(destination, overwrite)
    where = label(destination)
    by_key = {kv.key: (kv.type, kv.value) for kv in kvs}
    alignment = alignment_of(by_key, where)
    body = [encode_kv(*kv) for kv in kvs]
    groups = _groups(items, max_shard_size)
    if len(groups) == 1:
        specs = [item.spec for item in items]
        return [_Part(target, gguf_layout(body, len(body), specs, alignment, where), items)]
    folder, base = os.path.split(target)
    stem = base[: -len(".gguf")] if base.lower().endswith(".gguf") else base
    parts = []
    for number, group in enumerate(groups):
        split = [
            encode_kv("split.no", "UINT16", number),
            encode_kv("split.count", "UINT16", len(groups)),
            encode_kv("split.tensors.count", "INT32", len(items)),
        ]
        kv_bytes = (body if number == 0 else []) + split
        named = os.path.join(folder, part_name(stem, number, len(groups)))
        path = check_file_target(named, overwrite)
        specs = [item.spec for item in group]
        layout = gguf_layout(kv_bytes, len(kv_bytes), specs, alignment, where)
        parts.append(_Part(path, layout, group))
    return parts


def write_gguf(
    checkpoint: Checkpoint,
    path: str,
    items: Sequence[GGUFItem],
    kvs: Sequence[KeyValue],
    destination: str,
    max_shard_size: int | None,
    runner: Runner,
    report: Callable[[int], None],
    overwrite: bool = False,
) -> list[str]:
    """Write ``items`` of ``checkpoint`` (opened by workers at ``path``) as GGUF.

    One file at ``destination``; with ``max_shard_size`` and more than one part, the
    parts ``NAME-00001-of-0000N.gguf`` beside it (``NAME`` the destination's name
    without ``.gguf``). Each target must not exist unless ``overwrite`` (OSError, as
    ``check_file_target`` says). Parts are written under temporary names and renamed
    into place once all are complete; on failure nothing is left. Conversions run on
    ``runner``; errors of a tensor are JobErrors. Returns the files written.
    """
    parts = _parts(destination, items, kvs, max_shard_size, overwrite)
    runner.start()  # forked workers must not inherit the sweeper's pipe or the outputs
    sweeper = Sweeper()
    done = [0]

    def advance(count: int) -> None:
        done[0] += count
        report(done[0])

    try:
        with naming(parts[0].target):
            jobs: list[tuple[OutputFile, int, GGUFItem]] = []
            for part in parts:
                folder, name = os.path.split(part.target)
                part.output = OutputFile(folder, name, part.layout.size, sweeper)
                part.output.write(0, part.layout.header)
                offsets = part.layout.offsets
                jobs.extend((part.output, offsets[item.spec.name], item) for item in part.items)
            _fill(checkpoint, path, jobs, runner, advance)
            for part in parts:
                check_file_target(part.target, overwrite)  # still free, after the work
            for part in parts:
                assert part.output is not None
                part.output.commit(part.target)
            fsync_path(os.path.dirname(parts[0].target))
            return [part.target for part in parts]
    finally:
        for part in parts:
            if part.output is not None:
                part.output.discard()
        sweeper.close()


def _fill(
    checkpoint: Checkpoint,
    path: str,
    jobs: Sequence[tuple[OutputFile, int, GGUFItem]],
    runner: Runner,
    advance: Callable[[int], None],
) -> None:
    """Copies here, in order; then every conversion chunk through the runner."""
    tasks: list[GGUFTask] = []
    places: list[tuple[OutputFile, int]] = []
    for output, offset, item in jobs:
        name, out = item.read_name, item.spec.type
        if item.mode == "copy":
            try:
                offset = _copy_into(output, offset, checkpoint, name, advance)
            except DataError as error:
                raise JobError(checkpoint.path, name, str(error)) from None
            continue
        numel, step = item.spec.shape.numel, _chunk(item)
        kind = GGML_BY_NAME[out]
        for start in range(0, numel, step):
            tasks.append((path, name, start, min(start + step, numel), out))
            places.append((output, offset + start // kind.block_size * kind.block_bytes))
    for (output, offset), data in zip(places, runner.imap(gguf_task, tasks), strict=True):
        output.write(offset, data)
        advance(data.size)


def _in_memory(tensors: Mapping[str, Tensor], where: str) -> Checkpoint:
    """``tensors`` as a private in-memory checkpoint (format ``"tensors"``)."""
    if not isinstance(tensors, Mapping):
        raise DTypeError(f"{where}: tensors must be a mapping of name -> Tensor or a Checkpoint")
    held: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if type(name) is not str:
            raise FormatError(f"{where}: tensor names must be strings, found {name!r:.80}")
        if not isinstance(tensor, Tensor):
            raise DTypeError(f"{where}: {name!r} is a {type(tensor).__name__}, not a Tensor")
        held[name] = tensor
    return Checkpoint(TensorsReader(where, "tensors", held))


@guard_function
def save_gguf(
    path: PathLike,
    tensors: Mapping[str, Tensor] | Checkpoint,
    metadata: Mapping[str, Any] | None = None,
    types: str | Mapping[str, str] | None = None,
    *,
    skip_unreadable: bool = False,
) -> None:
    """Write ``tensors`` as a GGUF v3 file that llama.cpp, ``gguf.GGUFReader`` and
    strided read.

    ``tensors``: a mapping of name -> Tensor, or an open ``Checkpoint`` of any format
    (a GGUF one's block-quantized tensors are copied block for block unless ``types``
    changes them). Names are kept (1 to 63 bytes: FormatError otherwise, ggml's limit),
    shapes written in ggml's reversed dim order (rank 1 to 4; rank 0 as ``[1]``).

    ``metadata``: key -> value, written in order; a value's GGUF type is its own for a
    NumPy scalar or 1-D array, ``BOOL``/``STRING`` for bool/str, ``UINT32`` for an int
    in ``[0, 2**32)`` (else ``INT32``, ``INT64``, ``UINT64``: the first that holds it),
    ``FLOAT32`` for a float (the nearest F32; ``np.float64`` for ``FLOAT64``), and an
    ``ARRAY`` of such for a list. A key a GGUF ``tensors`` checkpoint has keeps the
    source's type. None: a GGUF checkpoint's own key/values with their types (other
    checkpoints' metadata as strings; nothing for a mapping). ``split.*`` keys are
    refused; ``general.alignment`` (a UINT32 power of two) sets the alignment the data
    is padded to (32 without it).

    ``types``: None keeps every tensor's type (8-bit floats become F32, which holds
    them exactly; U8, U16, U32, U64 and BOOL have no ggml type: DTypeError). One type
    name for all (``"F16"``...) applies llama.cpp's rules, as ``strided convert --dtype``
    does: ``weight`` tensors of rank >= 2 (not norms, ``ffn_gate_inp``, ``pos_embd``,
    ``token_types``, ``ssm_conv1d``) take it, other float tensors become F32 (a GGUF
    source's keep their stored type), and ``general.file_type`` is set. A mapping name
    -> type gives exactly that type to each tensor it names (float tensors only; the
    others keep theirs). Conversion is exact rounding to nearest-even; a finite value
    beyond the target's range is a RangeError naming the tensor and element.

    The tensors are converted and written one bounded chunk at a time (memory beyond
    the inputs stays a few MiB); the write is atomic (a temporary file renamed onto
    ``path``, which is replaced if it exists), so on any error ``path`` is left as it
    was. Nothing is shared with the inputs.

    A Checkpoint holding members strided cannot read (``Checkpoint.unreadable``: an
    ``.npz`` object array, a distributed checkpoint's item that is not plain data) is a
    FormatError naming them, before anything is written, unless ``skip_unreadable=True``
    (``strided convert --skip-unreadable``): then its readable tensors are written.
    """
    where = label(path)
    checkpoint = tensors if isinstance(tensors, Checkpoint) else _in_memory(tensors, where)
    unreadable = checkpoint.unreadable
    if unreadable and not skip_unreadable:
        raise unreadable_error(checkpoint.path, unreadable)
    names = list(checkpoint)
    items = plan_gguf(checkpoint, names, types)
    file_type = types if isinstance(types, str) else None
    kvs = gguf_key_values(checkpoint, metadata, file_type)
    (part,) = _parts(where, items, kvs, None, True)
    _write_here(checkpoint, part)


def _write_here(checkpoint: Checkpoint, part: _Part) -> None:
    """Write one part in this process (``save_gguf``): DataErrors keep their class."""
    sweeper = Sweeper()
    folder, name = os.path.split(part.target)
    try:
        with naming(part.target):
            part.output = OutputFile(folder, name, part.layout.size, sweeper)
            part.output.write(0, part.layout.header)
        for item in part.items:
            offset = part.layout.offsets[item.spec.name]
            if item.mode == "copy":
                _copy_into(part.output, offset, checkpoint, item.spec.name, _ignore)
            else:
                _encode_into(part.output, offset, checkpoint, item)
        with naming(part.target):
            part.output.commit(part.target)
        fsync_path(folder)
    finally:
        if part.output is not None:
            part.output.discard()
        sweeper.close()
