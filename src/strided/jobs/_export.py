"""Writing any checkpoint out as safetensors (one file or a shard folder), streaming.

Every tensor is planned before any data is read (name, output dtype, shape, bytes), so
the output's layout is known and each tensor's bytes go straight to their offset:

* ``copy``: a tensor kept as it is streams its logical bytes from the source (views of
  a memory-mapped file are written without any copy; strided views a bounded piece at
  a time);
* ``raw``: a safetensors tensor of a type strided cannot decode (``F4``...) is copied
  byte for byte;
* ``convert``: a tensor that changes dtype (``--dtype``, or a quantized GGUF tensor
  that becomes F32) is converted a bounded chunk at a time, by the worker processes
  when there are several; only the calling process writes.
* ``computed``: a tensor made by other jobs (a merged adapter, an average) carries its
  own tasks, each giving the bytes of a run of elements; they run like conversions.

The same tensors and metadata give the same bytes whatever the source's format, shard
split, order, or the number of workers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, RangeError
from .._kernels.convert import convert_array
from .._kernels.pieces import pieces
from ..io._safetensors_header import DTYPE_BITS
from ..io._shards import (
    INDEX_NAME,
    OutputFile,
    Planned,
    Sweeper,
    check_file_target,
    check_folder_target,
    commit_folder,
    fsync_path,
    index_bytes,
    layout,
    naming,
    shard_groups,
    shard_name,
)
from ._checkpoint import admit, has_dtype
from ._metadata_text import GGUF_TYPES_KEY, checkpoint_texts, gguf_types
from ._pool import JobError, Runner, loaded, opened
from ._values import Source

if TYPE_CHECKING:
    from .._tensor.tensor import Tensor
    from ._checkpoint import Checkpoint

__all__ = ["Item", "Task", "plan", "text_metadata", "write_safetensors"]

_CHUNK_ELEMENTS = 1 << 19  # elements per conversion chunk: temporaries stay ~12 MiB


# A computed item's task: ``function(argument)`` gives the little-endian bytes (uint8)
# of consecutive elements starting at element ``first``; it runs in a worker process,
# so the function is a module-level one and the argument pickles.
Task = tuple[Callable[[Any], "np.ndarray[Any, Any]"], Any, int]


class Item(NamedTuple):
    """One tensor to write: what it becomes and how (``copy``, ``raw``, ``convert``, or
    ``computed`` by its ``tasks``). ``source`` is the name it is read under when the
    output renames it (empty: ``planned.name``)."""

    planned: Planned
    mode: str
    target: DType | None
    tasks: tuple[Task, ...] = ()
    source: str = ""

    @property
    def read_name(self) -> str:
        """The name the tensor has in the checkpoint it is read from."""
        return self.source or self.planned.name


def plan(
    checkpoint: Checkpoint,
    names: Sequence[str],
    dtype: DType | None,
    allow_expanded: bool = False,
) -> list[Item]:
    """How each named tensor is written; ``dtype`` converts floating tensors only.

    A quantized GGUF tensor becomes F32 (or ``dtype``). A tensor of a stored type
    strided cannot decode can only be copied byte for byte into safetensors, and only
    from safetensors (DTypeError otherwise, naming the tensor). An expanded view is a
    LimitError unless ``allow_expanded`` (``_jobs.admit``); allowed, it is written as
    its logical values, streamed a bounded piece at a time.
    """
    items = []
    infos = admit(checkpoint, names, allow_expanded)
    for name in names:
        info = infos[name]
        if has_dtype(info.dtype):
            source = DType[info.dtype]
            target = dtype if dtype is not None and source.is_float else source
            mode = "copy" if target is source else "convert"
        elif checkpoint.readable(name):
            target, mode = dtype or DType.F32, "convert"
        elif checkpoint.format == "safetensors" and info.dtype in DTYPE_BITS:
            items.append(Item(Planned(name, info.dtype, info.shape, info.byte_len), "raw", None))
            continue
        else:
            raise DTypeError(
                f"{checkpoint.path}: tensor {name!r}: {info.dtype} values cannot be read or "
                "written to safetensors"
            )
        byte_len = info.shape.numel * target.itemsize
        items.append(Item(Planned(name, target.name, info.shape, byte_len), mode, target))
    return items


def text_metadata(checkpoint: Checkpoint) -> dict[str, str]:
    """The checkpoint's metadata as safetensors ``__metadata__`` strings, nothing dropped.

    Every value becomes its canonical text (``_metadata_text``: integers decimal,
    booleans ``true``/``false``, None ``null``, floats the shortest text of the type
    they were stored as, a GGUF FLOAT32 value as F32 ``1e-05``; lists and tokenizer
    vocabularies as compact JSON arrays of their elements' texts), so the metadata
    digest and ``diff`` find the source and the output equal. ``general.alignment`` and
    ``split.*`` describe the source file's layout and are not copied; ``format`` is
    kept when the source has a text one and is ``pt`` otherwise, as Hugging Face
    loaders require it. From a GGUF source, ``__gguf_types__`` records (as a compact
    JSON object, keys sorted) the GGUF type of every key that is not a plain STRING, so a
    GGUF written from the output restores each key's type and value; a safetensors
    source's own ``__gguf_types__`` is kept.
    """
    text = checkpoint_texts(checkpoint)
    source_format = checkpoint._metadata.get("format")
    text["format"] = source_format if type(source_format) is str else "pt"
    types = gguf_types(checkpoint)
    if types is not None:
        kept = {key: kind for key, kind in types.items() if key in text and kind != "STRING"}
        if kept:
            text[GGUF_TYPES_KEY] = json.dumps(
                kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            )
    elif type(checkpoint._metadata.get(GGUF_TYPES_KEY)) is str:
        text[GGUF_TYPES_KEY] = checkpoint._metadata[GGUF_TYPES_KEY]  # kept for a GGUF output
    return text


ConvertTask = tuple[str, str, int, int, str]


def convert_task(task: ConvertTask) -> np.ndarray[Any, Any]:
    """Elements ``[start, stop)`` of one tensor converted into a dtype (run in a worker).

    A value that does not fit raises the error ``Tensor.convert`` gives for the whole
    tensor, so the message names the element's index in the tensor.
    """
    path, name, start, stop, target_name = task
    target = DType[target_name]
    checkpoint = opened(path)
    try:
        # A tensor assembled from chunks is read by range instead (never held whole).
        whole = has_dtype(checkpoint.info(name).dtype) and not checkpoint._assembled(name)
        tensor = loaded(path, name) if whole else None
        source = Source(checkpoint, name, tensor)
        try:
            values = convert_array(source.values(start, stop), source.dtype, target)
        except RangeError:
            _convert_distinct(checkpoint[name], target)  # raises, naming the element
            raise
        return np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    except DataError as error:
        raise JobError(path, name, str(error)) from None


def _call(task: tuple[Callable[[Any], Any], Any]) -> Any:
    """Run one task in a worker: ``function(argument)``."""
    function, argument = task
    return function(argument)


def _convert_distinct(tensor: Tensor, target: DType) -> None:
    """``tensor.convert(target)`` at the cost of its distinct elements, for its RangeError.

    Axes along which the tensor repeats (stride 0: an ``expand`` view) are converted at
    index 0 only. The first element that does not fit, in row-major order, has index 0
    on those axes, so the error names it exactly as converting the whole tensor would,
    without converting its logical size.
    """
    keep = tuple(slice(0, 1) if step == 0 else slice(None) for step in tensor.strides)
    tensor[keep].convert(target)


class _Writer:
    """Streams planned tensors into output files; conversions go through the runner."""

    def __init__(
        self, checkpoint: Checkpoint, path: str, runner: Runner, report: Callable[[int], None]
    ) -> None:
        self.checkpoint = checkpoint
        self.path = path  # what workers open
        self.runner = runner
        self.report = report
        self.done = 0

    def fill(self, jobs: Sequence[tuple[OutputFile, int, Item]]) -> None:
        """Write every ``(file, offset, item)``: copies here, then the conversions."""
        conversions: list[tuple[Callable[[Any], Any], Any]] = []
        places: list[tuple[OutputFile, int]] = []
        for output, offset, item in jobs:
            if item.mode == "computed":
                itemsize = DType[item.planned.dtype].itemsize
                for function, argument, first in item.tasks:
                    conversions.append((function, argument))
                    places.append((output, offset + first * itemsize))
            elif item.mode == "convert":
                assert item.target is not None
                step = _CHUNK_ELEMENTS  # a multiple of every ggml block size
                numel = item.planned.shape.numel
                for start in range(0, numel, step):
                    stop = min(start + step, numel)
                    task = (self.path, item.read_name, start, stop, item.target.name)
                    conversions.append((convert_task, task))
                    places.append((output, offset + start * item.target.itemsize))
            else:
                self._copy(output, offset, item)
        for (output, offset), data in zip(
            places, self.runner.imap(_call, conversions), strict=True
        ):
            output.write(offset, data)
            self._advance(data.size)

    def _copy(self, output: OutputFile, offset: int, item: Item) -> None:
        name = item.read_name
        try:
            # safetensors and GGUF store the very bytes written: streamed as stored.
            parts = self.checkpoint._chunks(name)
            if parts is None:
                parts = pieces(self.checkpoint[name].numpy())
            for piece in parts:
                data = piece.view(np.uint8)
                output.write(offset, data)
                offset += data.size
                self._advance(data.size)
        except DataError as error:
            raise JobError(self.checkpoint.path, name, str(error)) from None

    def _advance(self, count: int) -> None:
        self.done += count
        self.report(self.done)


def write_safetensors(
    checkpoint: Checkpoint,
    path: str,
    items: Sequence[Item],
    metadata: Mapping[str, str] | None,
    destination: str,
    max_shard_size: int | None,
    runner: Runner,
    report: Callable[[int], None],
    overwrite: bool = False,
) -> list[str]:
    """Write ``items`` of ``checkpoint`` (opened by workers at ``path``) to ``destination``.

    ``metadata`` None (or empty) writes no ``__metadata__``. Without
    ``max_shard_size``: one safetensors file. With it: a folder in the Hugging
    Face layout (one ``model.safetensors`` when everything fits one shard). Atomic:
    nothing appears at ``destination`` unless everything was written, and a failure
    leaves nothing behind. ``destination`` must not exist (an empty folder counts as
    absent) unless ``overwrite``: then a file is replaced by the new file and a shard
    folder by the new folder, once complete (``check_file_target`` and
    ``check_folder_target`` say what is refused, as an OSError). Returns the files
    written (relative to ``destination`` for a folder).
    """
    writer = _Writer(checkpoint, path, runner, report)
    planned = [item.planned for item in items]
    by_name = {item.planned.name: item for item in items}
    if max_shard_size is None:
        target = check_file_target(destination, overwrite)
        groups = [planned]
    else:
        target = check_folder_target(destination, overwrite)
        groups = shard_groups(planned, max_shard_size)
    folder = os.path.dirname(target)
    outputs: list[tuple[str, OutputFile]] = []
    runner.start()  # forked workers must not inherit the sweeper's pipe or the outputs
    sweeper = Sweeper()
    try:
        with naming(target):  # the destination is named, never a temporary file
            jobs: list[tuple[OutputFile, int, Item]] = []
            for number, group in enumerate(groups):
                shape = layout(group, metadata)
                name = shard_name(number, len(groups))
                hidden = os.path.basename(target) if max_shard_size is None else name
                output = OutputFile(folder, hidden, shape.size, sweeper)
                outputs.append((name, output))
                output.write(0, shape.header)
                jobs.extend(
                    (output, shape.offsets[item.name], by_name[item.name]) for item in group
                )
            writer.fill(jobs)
            if max_shard_size is None:
                check_file_target(target, overwrite)  # still free, after the work
                outputs[0][1].commit(target)
                fsync_path(folder)
                return [target]
            extra = {INDEX_NAME: index_bytes(groups)} if len(groups) > 1 else {}
            commit_folder(target, outputs, extra, sweeper, overwrite)
            return [name for name, _ in outputs] + list(extra)
    finally:
        for _, output in outputs:
            output.discard()
        sweeper.close()
