"""``st.save``: the one door through which every checkpoint is written.

A source (a path or URL, an open or merged ``Checkpoint``, a mapping of tensors) is
planned first (``prepare``: which tensors, under which names, in which types, with
which metadata), so nothing is read before the whole output is known and checked;
then ``write`` streams one tensor, or one bounded chunk of one, at a time through the
writers of ``_export`` (safetensors files and shard folders), ``_gguf_export`` (GGUF
files and split parts) or ``write_file`` (one ``.npy`` or JSON tensor). ``strided
convert``, ``merge`` and ``merge-lora`` call the same two steps and only add their
own wording of errors and summaries.

Worker processes reopen a source by its path; a source that exists only in this
process (a mapping, a ``Checkpoint`` built in memory, a merged checkpoint written as
GGUF) is read by this process alone, which gives the same bytes.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import IO, Any, NamedTuple

from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, FormatError
from .._core.memory import guard_function
from .._tensor.tensor import Tensor
from ..io._http import is_url
from ..io._shards import parse_size, write_file
from ..io.gguf import KeyValue
from ..io.npy import npy_writer
from ..io.safetensors import _checked_metadata
from ..io.safetensors import save_safetensors as _save_tensors
from ._checkpoint import Checkpoint, admit, open_checkpoint
from ._export import Item, plan, text_metadata, write_safetensors
from ._gguf_export import _in_memory, write_gguf
from ._gguf_plan import OUTPUT_TYPES, gguf_key_values, plan_gguf
from ._merge import MergedCheckpoint, merge_items, sources_of
from ._pool import JobError, Runner, sharing, where
from ._sweep import Meter, check_workers, no_meter, skipped_unreadable, token_scope

__all__ = [
    "SavePlan",
    "SaveReport",
    "TensorReadError",
    "compile_rename",
    "prepare",
    "save",
    "save_safetensors",
    "select",
    "target_kind",
    "write",
]

FORMATS = ("safetensors", "gguf", "npy", "json")
Rename = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class SaveReport:
    """What ``st.save`` wrote.

    ``destination`` as given; ``format`` the one written (``"safetensors"``,
    ``"gguf"``, ``"npy"`` or ``"json"``); ``files`` every file written, as paths (a
    shard folder's shards and index inside it, GGUF split parts beside the
    destination); ``tensors`` how many tensors were written; ``computed`` how many of
    them a merge computed (0 for other sources); ``skipped`` the unreadable members
    left out with ``skip_unreadable=True``.
    """

    destination: str
    format: str
    files: tuple[str, ...]
    tensors: int
    computed: int
    skipped: tuple[str, ...]


class TensorReadError(Exception):
    """Reading or converting tensor ``name`` for a one-tensor output failed with
    ``error`` (a DataError or OSError): the command line names the source for it, the
    Python face raises ``error`` itself."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(name, error)
        self.name = name
        self.error = error


class SavePlan(NamedTuple):
    """Everything decided before a byte is written.

    ``kind`` is ``safetensors`` (one file), ``folder`` (safetensors shards), ``gguf``,
    ``npy`` or ``json``; ``items`` the writer's items (``Item`` or ``GGUFItem``, under
    their output names; for ``npy``/``json`` the selected source names); ``metadata``
    safetensors ``__metadata__`` strings, GGUF key/values, or the float DType of a
    ``npy``/``json`` output (None: none); ``path`` what worker processes open;
    ``shares`` the open checkpoints tasks run here may use; ``jobs`` the worker count
    the source allows.
    """

    kind: str
    checkpoint: Checkpoint
    items: list[Any]
    metadata: Any
    path: str
    shares: list[tuple[str, Checkpoint]]
    jobs: int
    names: list[str]


def target_kind(destination: str, format: str | None, max_shard_size: int | None) -> str:
    """What ``destination`` becomes: ``format`` when given, else its extension
    (``.safetensors``, ``.gguf``, ``.npy``, ``.json``; with ``max_shard_size`` anything
    but ``.gguf`` is a shard folder). FormatError naming what does not fit."""
    lowered = destination.lower()
    if format is None:
        found = next((kind for kind in FORMATS if lowered.endswith("." + kind)), None)
        if found is None and max_shard_size is None:
            raise FormatError(
                f"{destination}: the destination must end in .safetensors, .gguf, .npy or "
                ".json (or be a folder, with max_shard_size), or format must name one"
            )
        format = found or "safetensors"
    elif format not in FORMATS:
        raise FormatError(f"format {str(format)[:40]!r} is not one of {', '.join(FORMATS)}")
    if max_shard_size is not None and format in ("npy", "json"):
        raise FormatError(f"{destination}: max_shard_size writes shards of safetensors or GGUF")
    if format == "safetensors" and max_shard_size is not None:
        return "folder"
    return format


def compile_rename(rename: Rename | None) -> list[tuple[re.Pattern[str], str]]:
    """``(regex, replacement)`` pairs compiled; FormatError for a pair that is not two
    strings or a regex that does not compile."""
    rules = []
    for pair in rename or ():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise FormatError(f"rename: expected (regex, replacement) pairs, found {pair!r:.80}")
        pattern, replacement = pair
        if type(pattern) is not str or type(replacement) is not str:
            raise FormatError(f"rename: regex and replacement must be strings, found {pair!r:.80}")
        try:
            rules.append((re.compile(pattern), replacement))
        except re.error as error:
            raise FormatError(f"rename: regex {pattern[:80]!r} does not compile: {error}") from None
    return rules


def renamed(names: Sequence[str], rules: Sequence[tuple[re.Pattern[str], str]]) -> list[str]:
    """Each name after every rule in order (``re.sub``: all matches, ``\\1``
    back-references). FormatError when two names become one, a name becomes empty, or
    a replacement refers to a group its regex lacks."""
    if not rules:
        return list(names)
    out: list[str] = []
    first: dict[str, str] = {}
    for name in names:
        new = name
        for pattern, replacement in rules:
            try:
                new = pattern.sub(replacement, new)
            except (re.error, IndexError) as error:
                raise FormatError(
                    f"rename: {replacement[:80]!r} cannot replace {pattern.pattern[:80]!r}: {error}"
                ) from None
        if not new:
            raise FormatError(f"rename: {name[:80]!r} becomes an empty name")
        if new in first:
            raise FormatError(
                f"rename: {first[new][:80]!r} and {name[:80]!r} both become {new[:80]!r}"
            )
        first[new] = name
        out.append(new)
    return out


def select(checkpoint: Checkpoint, glob: str, where_: str) -> list[str]:
    """The tensor names matching ``glob``; FormatError when none does (of some)."""
    names = [name for name in checkpoint if fnmatch.fnmatchcase(name, glob)]
    if not names and len(checkpoint):
        raise FormatError(f"{where_}: no tensor matches {glob!r}")
    return names


def _source(checkpoint: Checkpoint, lenient: bool, jobs: int) -> tuple[str, int]:
    """The path workers open for ``checkpoint``, and the jobs it allows: a file or URL
    is reopened by every worker; a checkpoint held only here is read here."""
    path = checkpoint.path
    if checkpoint.format in ("tensors", "merged") or not (is_url(path) or os.path.exists(path)):
        return f"<memory {id(checkpoint):x}>", 1
    return where(path, lenient), jobs


def prepare(
    checkpoint: Checkpoint,
    kind: str,
    names: Sequence[str],
    *,
    dtype: DType | str | None = None,
    keep: Sequence[str] = (),
    rename: Rename | None = None,
    metadata: Mapping[str, Any] | None = None,
    allow_expanded: bool = False,
    lenient: bool = False,
    jobs: int = 1,
    source_path: str | None = None,
) -> SavePlan:
    """Plan writing ``names`` of ``checkpoint`` as ``kind`` (``target_kind``).

    ``dtype`` converts floating tensors (a ggml block type name for GGUF); ``keep``
    globs GGUF output keeps in their float type; ``rename`` is applied to every name
    (collisions refused here); ``metadata`` replaces or adds keys; ``source_path``
    (the command line's ``where(SRC)``) is what workers open instead of the
    checkpoint's own path. Raises the DataErrors of planning (an unknown or non-float
    dtype, a type a tensor cannot become, an expanded view, a rename collision); reads
    no tensor data.
    """
    rules = compile_rename(rename)
    outputs = renamed(names, rules)
    if kind in ("npy", "json"):
        if metadata:
            raise FormatError(f".{kind} holds one tensor and no metadata")
        if keep:
            raise FormatError("keep applies to GGUF output")
        converted = _float_dtype(dtype) if dtype is not None else None
        return SavePlan(kind, checkpoint, list(names), converted, "", [], 1, outputs)
    path, allowed = _source(checkpoint, lenient, jobs)
    if source_path is not None:
        path, allowed = source_path, jobs
    shares = [(path, checkpoint)]
    if kind == "gguf":
        target = dtype.name if isinstance(dtype, DType) else dtype
        if target is not None and target.upper() in OUTPUT_TYPES:
            target = target.upper()
        items: list[Any] = plan_gguf(checkpoint, names, target, keep, allow_expanded)
        items = [
            item._replace(spec=item.spec._replace(name=new), source=item.spec.name)
            for item, new in zip(items, outputs, strict=True)
        ]
        return SavePlan(
            kind, checkpoint, items, _gguf_metadata(checkpoint, metadata, target), path,
            shares, allowed, outputs,
        )  # fmt: skip
    if keep:
        raise FormatError("keep applies to GGUF output")
    converted = _float_dtype(dtype) if dtype is not None else None
    if isinstance(checkpoint, MergedCheckpoint):
        items, path = merge_items(checkpoint, names, converted, allow_expanded)
        shares, allowed = sources_of(checkpoint), jobs
    else:
        items = plan(checkpoint, names, converted, allow_expanded)
    items = [
        item._replace(planned=item.planned._replace(name=new), source=item.planned.name)
        for item, new in zip(items, outputs, strict=True)
    ]
    text = text_metadata(checkpoint)
    for key, value in (metadata or {}).items():
        if type(key) is not str or type(value) is not str:
            raise FormatError(
                f"metadata: safetensors keys and values are strings, found {key!r:.80}: "
                f"{value!r:.80}"
            )
        text[key] = value
    return SavePlan(kind, checkpoint, items, text, path, shares, allowed, outputs)


def _float_dtype(dtype: DType | str) -> DType:
    """``dtype`` (a DType or its name) as a float DType: DTypeError otherwise."""
    if (
        isinstance(dtype, str)
        and dtype.upper() in OUTPUT_TYPES
        and dtype.upper() not in DType.__members__
    ):
        raise DTypeError(f"dtype {dtype} is a GGUF block type: the destination must be GGUF")
    found = dtype if isinstance(dtype, DType) else DType.parse(dtype)
    if not found.is_float:
        raise DTypeError(f"{found.name} is not a float dtype; dtype converts floating tensors only")
    return found


def _gguf_metadata(
    checkpoint: Checkpoint, metadata: Mapping[str, Any] | None, target: str | None
) -> list[KeyValue]:
    """The checkpoint's key/values (``gguf_key_values``), ``metadata``'s replacing keys
    in place or added at the end, each typed as ``save_gguf`` types it."""
    kvs = gguf_key_values(checkpoint, None, target)
    if not metadata:
        return kvs
    at = {kv.key: index for index, kv in enumerate(kvs)}
    for kv in gguf_key_values(checkpoint, metadata, None):
        if kv.key in at:
            kvs[at[kv.key]] = kv
        else:
            at[kv.key] = len(kvs)
            kvs.append(kv)
    return kvs


def write(
    job: SavePlan,
    destination: str,
    *,
    max_shard_size: int | None = None,
    overwrite: bool = False,
    meter: Meter = no_meter,
    label: str = "convert",
    allow_expanded: bool = False,
) -> list[str]:
    """Write a planned job to ``destination`` atomically; the files written (shards
    relative to their folder, as ``write_safetensors`` returns them).

    OSError for a destination that is in the way (``FileExistsError`` unless
    ``overwrite``) or cannot be written; JobError for a tensor that fails while
    streamed; TensorReadError for the one tensor of a ``.npy``/JSON output.
    """
    if job.kind in ("npy", "json"):
        _write_one(job, destination, overwrite, allow_expanded)
        return [destination]
    total = sum(
        item.planned.byte_len if isinstance(item, Item) else item.byte_len for item in job.items
    )
    with ExitStack() as stack:
        stack.enter_context(sharing(*job.shares))
        runner = stack.enter_context(Runner(job.jobs))
        progress = stack.enter_context(meter(total, label))
        report = progress.update if progress is not None else _ignore
        if job.kind == "gguf":
            return write_gguf(
                job.checkpoint, job.path, job.items, job.metadata, destination, max_shard_size,
                runner, report, overwrite,
            )  # fmt: skip
        return write_safetensors(
            job.checkpoint, job.path, job.items, job.metadata, destination, max_shard_size,
            runner, report, overwrite,
        )  # fmt: skip


def _ignore(done: int) -> None:
    """A progress report nobody shows."""


def _write_one(job: SavePlan, destination: str, overwrite: bool, allow_expanded: bool) -> None:
    """The one selected tensor as ``.npy`` or JSON. The temporary file exists from the
    start, so the tensor is read and converted while a kill would still sweep it."""
    if len(job.names) != 1:
        raise FormatError(
            f"{destination}: .{job.kind} holds one tensor; {len(job.names)} tensors are "
            "selected (pick one with a name glob)"
        )
    (name,) = job.items

    def fill(handle: IO[bytes]) -> None:
        try:
            admit(job.checkpoint, [name], allow_expanded)
            tensor: Tensor = job.checkpoint[name]
            if job.metadata is not None and tensor.dtype.is_float:
                tensor = tensor.convert(job.metadata)
        except (DataError, OSError) as error:
            raise TensorReadError(name, error) from None
        if job.kind == "npy":
            npy_writer(tensor)(handle)
        else:
            handle.write(tensor.to_json().encode())

    write_file(destination, fill, overwrite)


@contextmanager
def _opened(source: Any, lenient: bool, token: str | None, where_: str) -> Iterator[Checkpoint]:
    """The source as a Checkpoint: a path or URL opened (and closed after), a
    Checkpoint as it is, a mapping of tensors held in memory."""
    if isinstance(source, Checkpoint):
        yield source
        return
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise FormatError(f"save: the source path must be text, found {path!r:.80}")
        with token_scope(token, path), open_checkpoint(path, lenient=lenient, token=token) as found:
            yield found
        return
    if isinstance(source, Mapping):
        yield _in_memory(source, where_)
        return
    raise FormatError(
        f"save: the source must be a path, a URL, a Checkpoint or a mapping of name -> "
        f"Tensor, found {type(source).__name__}"
    )


@guard_function
def save(
    destination: str | os.PathLike[str],
    source: str | os.PathLike[str] | Checkpoint | Mapping[str, Tensor],
    *,
    format: str | None = None,
    dtype: DType | str | None = None,
    names: str | None = None,
    keep: str | Sequence[str] | None = None,
    max_shard_size: int | str | None = None,
    rename: Rename | None = None,
    metadata: Mapping[str, Any] | None = None,
    jobs: int = 1,
    overwrite: bool = False,
    lenient: bool = False,
    skip_unreadable: bool = False,
    allow_expanded: bool = False,
    token: str | None = None,
) -> SaveReport:
    """Write a checkpoint, streamed, exact and atomic: ``strided convert`` in Python.

    One tensor (or one bounded chunk of one) is read, converted and written at a time,
    so memory grows by at most 64 MiB plus the largest tensor, even for a merged
    checkpoint from ``merge_lora`` or ``merge_linear``, which is computed as it is
    written. The output is written under a temporary name and renamed into place; a
    failure leaves nothing behind. The same tensors and metadata give the same bytes
    for every ``jobs`` and whatever the source's format, shard split or order.

    Args:
        destination: the file (``.safetensors``, ``.gguf``, ``.npy``, ``.json``) or,
            with ``max_shard_size``, the shard folder (Hugging Face layout) or the
            first GGUF part's name.
        source: a checkpoint path or http(s) URL (opened and closed here), an open
            ``Checkpoint`` (a lazy merged one included; not closed), or a mapping of
            name -> Tensor.
        format: ``"safetensors"``, ``"gguf"``, ``"npy"`` or ``"json"``; None takes it
            from the destination's extension.
        dtype: a float ``DType`` or its name, applied to floating tensors (integers and
            BOOL are copied); for GGUF also a block type (``"Q8_0"``, ``"Q4_0"``...)
            given by llama.cpp's rules, as ``strided convert --dtype``.
        names: a glob (``fnmatch``, case-sensitive) of the tensors written; None: all.
        keep: GGUF only: a glob, or several, of tensors that keep their float type.
        max_shard_size: shard size in bytes, an int or text (``"5GB"``, ``"5GiB"``).
        rename: ``(regex, replacement)`` pairs applied in order to every name with
            ``re.sub`` (all matches, ``\\1`` back-references).
        metadata: keys that replace or are added to the source's metadata (safetensors:
            strings; GGUF: typed as ``save_gguf`` types them).
        jobs: worker processes (1 to 1024). Sources that exist only in this process (a
            mapping, a merged checkpoint written as GGUF) are read here alone.
        overwrite: replace an existing destination (a file by a file, a shard folder by
            a shard folder) once the new one is complete.
        lenient: open a PyTorch source whose globals strict mode refuses as inert
            records (never imported or run); pass it too when ``source`` is a
            Checkpoint opened with ``lenient=True`` (worker processes reopen its file).
        skip_unreadable: write the readable tensors of a source holding members strided
            cannot read, listing the others in ``SaveReport.skipped``.
        allow_expanded: write views whose logical size is more than 2^20 times their
            stored bytes.
        token: a bearer token sent only to the origin of an http(s) ``source``.

    Returns:
        A ``SaveReport`` naming the format and files written and counting the tensors.

    Raises:
        FileExistsError: the destination exists and ``overwrite`` is False.
        FormatError: a destination or format that is not one of the four, ``names``
            matching nothing, a rename that does not compile or gives two tensors one
            name, an unreadable member without ``skip_unreadable``.
        DTypeError: a dtype that is not a float type, or that a tensor cannot become.
        RangeError: a value that does not fit the output dtype (naming the tensor).
        LimitError: a cap exceeded (``jobs``, an expanded view, a header).
        OSError: the source cannot be opened or the destination written.

    Example:
        >>> import strided as st
        >>> weights = {"model.w": st.tensor([[1.0, 2.0]], "F32")}
        >>> report = st.save("out.safetensors", weights, rename=[(r"^model\\.", "")])
        >>> report.files, report.tensors
        (('out.safetensors',), 1)
        >>> list(st.open_checkpoint("out.safetensors"))
        ['w']
    """
    check_workers("save", jobs, None)
    target = os.fspath(destination)
    if not isinstance(target, str):
        raise FormatError(f"save: the destination must be a path, found {target!r:.80}")
    size = parse_size(max_shard_size) if isinstance(max_shard_size, str) else max_shard_size
    if size is not None and (type(size) is not int or size < 1):
        raise FormatError(f"save: max_shard_size must be a positive int or text, found {size!r}")
    kind = target_kind(target, format, size)
    globs = [keep] if isinstance(keep, str) else list(keep or ())
    if dtype is not None and kind != "gguf" and not isinstance(dtype, DType):
        _float_dtype(dtype)
    with _opened(source, lenient, token, target) as checkpoint:
        glob = "*" if names is None else names
        selected = select(checkpoint, glob, checkpoint.path)
        skipped = skipped_unreadable(checkpoint, checkpoint.path, skip_unreadable, None, glob)
        job = prepare(
            checkpoint, kind, selected, dtype=dtype, keep=globs, rename=rename,
            metadata=metadata, allow_expanded=allow_expanded, lenient=lenient, jobs=jobs,
        )  # fmt: skip
        try:
            written = write(
                job, target, max_shard_size=size, overwrite=overwrite,
                allow_expanded=allow_expanded,
            )  # fmt: skip
        except JobError as error:
            raise error.as_data_error() from None
        except TensorReadError as error:
            raise error.error from None
    if kind == "folder":
        written = [os.path.join(target, name) for name in written]
    elif len(written) == 1:
        written = [target]  # as given, not made absolute
    else:  # GGUF split parts, beside the destination
        folder = os.path.dirname(target)
        written = [os.path.join(folder, os.path.basename(part)) for part in written]
    computed = sum(1 for item in job.items if isinstance(item, Item) and item.mode == "computed")
    return SaveReport(
        target, "safetensors" if kind == "folder" else kind, tuple(written), len(selected),
        computed, tuple(skipped),
    )  # fmt: skip


@guard_function
def save_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, Tensor] | Checkpoint,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` (name -> Tensor, or a ``Checkpoint``) and optional ``metadata``
    strings as safetensors.

    The file is the one the reference library writes for the same tensors (same header
    order, 8-byte aligned header padded with spaces) and each tensor's logical row-major
    bytes, so transposed, reversed and sliced views are saved as what they show. Names
    must be non-empty strings other than ``__metadata__`` (FormatError); values must be
    Tensors (DTypeError); metadata must map strings to strings (FormatError). The write
    is atomic: a temporary file in the same folder is renamed onto ``path``, so on any
    error ``path`` is left as it was.

    Given a ``Checkpoint`` (a lazy merged one from ``merge_lora`` or ``merge_linear``
    included), the same bytes are written one tensor, or one bounded chunk of one, at a
    time, as ``save`` writes them: memory grows by at most 64 MiB plus the largest
    tensor instead of holding every tensor. Only ``metadata`` is written, never the
    checkpoint's own (``save`` copies that).
    """
    if not isinstance(tensors, Checkpoint) or (metadata is not None and not metadata):
        _save_tensors(path, tensors, metadata)
        return
    text = _checked_metadata(metadata) if metadata is not None else None
    names = list(tensors)
    if isinstance(tensors, MergedCheckpoint):
        items, source = merge_items(tensors, names, None, True)
        shares = sources_of(tensors)
    else:
        items = plan(tensors, names, None, True)
        source = f"<memory {id(tensors):x}>"
        shares = [(source, tensors)]
    target = os.fspath(path)
    if not isinstance(target, str):
        raise FormatError(f"save_safetensors: the path must be text, found {target!r:.80}")
    try:
        with sharing(*shares), Runner(1) as runner:
            write_safetensors(tensors, source, items, text, target, None, runner, _ignore, True)
    except JobError as error:
        raise error.as_data_error() from None
