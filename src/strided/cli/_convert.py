"""``strided convert``: any checkpoint to safetensors (a file or shards), GGUF (a file or
split parts), ``.npy`` or JSON."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import IO

from .._core.errors import DataError
from .._tensor.tensor import Tensor
from ..io._shards import TargetExists, write_file
from ..io.npy import npy_writer
from ..jobs._checkpoint import Checkpoint, admit, open_checkpoint
from ..jobs._export import plan, text_metadata, write_safetensors
from ..jobs._gguf_export import write_gguf
from ..jobs._gguf_plan import gguf_key_values, plan_gguf
from ..jobs._pool import Runner, sharing, where
from ._progress import Progress
from ._text import one_line, safe, tensor_error, with_path
from ._verify import CommandFailure, count_of, skipped_members

__all__ = ["run_convert", "target_format"]

ARCHITECTURE_KEY = "general.architecture"  # the key llama.cpp chooses a model's code by


def run_convert(args: argparse.Namespace) -> int:
    """Read the tensors of SRC (matching ``--name``) and write DST atomically.

    ``--dtype`` converts floating tensors only, as ``module.to(dtype)`` does in PyTorch:
    integer and BOOL tensors (token ids, masks) are copied unchanged. Every format is
    written under a temporary name and renamed: nothing is left behind on failure, or
    when the process is killed. DST must not exist (an empty folder counts as absent)
    unless ``--overwrite``, which replaces a file by a file and a shard folder by a
    shard folder, once the new one is complete. An expanded view (logical size more
    than 2^20 x its stored bytes) is refused before anything is read unless
    ``--allow-expanded``; allowed, its logical values are written.

    A member of SRC that strided cannot read (an ``.npz`` object array, a distributed
    checkpoint's item that is not plain data) and that ``--name`` selects stops the
    command before anything is written unless ``--skip-unreadable``: then the readable
    tensors are written, and each skipped member is named on stderr and counted in the
    summary line.

    A ``.gguf`` DST is written by ``_write_gguf`` (``--dtype`` may then be a block type,
    ``--keep`` exempts tensors, ``--max-shard-size`` writes split parts beside DST).
    """
    if isinstance(args.dtype, str) and not args.dst.lower().endswith(".gguf"):
        raise CommandFailure(
            f"{safe(args.dst)}: --dtype {args.dtype} is a GGUF block type; the destination "
            "must end in .gguf",
            status=2,
        )
    if args.keep and not args.dst.lower().endswith(".gguf"):
        raise CommandFailure(f"{safe(args.dst)}: --keep applies to a .gguf destination", status=2)
    if args.dst.lower().endswith(".gguf"):
        target = "gguf"
    elif args.max_shard_size is not None:
        if args.dst.lower().endswith((".npy", ".json")):
            raise CommandFailure(
                f"{safe(args.dst)}: --max-shard-size writes a folder of safetensors shards",
                status=2,
            )
        target = "folder"
    else:
        target = target_format(args.dst)
    with open_checkpoint(args.path, lenient=args.lenient) as checkpoint:
        names = [name for name in checkpoint if fnmatch.fnmatchcase(name, args.name)]
        if not names and len(checkpoint):
            raise CommandFailure(f"{safe(args.path)}: no tensor matches {safe(repr(args.name))}")
        skipped = skipped_members(checkpoint, args.path, args.skip_unreadable, args.name)
        note = f", {count_of(len(skipped), 'unreadable member')} skipped" if skipped else ""
        if target in ("npy", "json"):
            _write_one(args, checkpoint, names, target)
            print(f"{safe(args.path)} -> {safe(args.dst)}: 1 tensor{note}")
            return 0
        if target == "gguf":
            written = _write_gguf(args, checkpoint, names)
            parts = f" in {len(written)} parts" if len(written) > 1 else ""
            counted = count_of(len(names), "tensor")
            print(f"{safe(args.path)} -> {safe(args.dst)}: {counted}{parts}{note}")
            return 0
        written = _write_safetensors(args, checkpoint, names)
    shards = f" in {len(written) - 1} shards" if len(written) > 2 else ""
    print(f"{safe(args.path)} -> {safe(args.dst)}: {count_of(len(names), 'tensor')}{shards}{note}")
    return 0


def _write_safetensors(
    args: argparse.Namespace, checkpoint: Checkpoint, names: list[str]
) -> list[str]:
    try:
        items = plan(checkpoint, names, args.dtype, args.allow_expanded)
        metadata = text_metadata(checkpoint)
    except DataError as error:
        raise CommandFailure(with_path(args.path, error)) from None
    total = sum(item.planned.byte_len for item in items)
    path = where(args.path, args.lenient)
    with (
        sharing((path, checkpoint)),
        Runner(args.jobs) as runner,
        Progress(total, "convert") as progress,
    ):
        try:
            return write_safetensors(
                    checkpoint, path, items, metadata, args.dst, args.max_shard_size, runner,
                    progress.update, args.overwrite,
                )  # fmt: skip
        except OSError as error:
            raise CommandFailure(destination_error(args.dst, error)) from None


def _write_gguf(args: argparse.Namespace, checkpoint: Checkpoint, names: list[str]) -> list[str]:
    """GGUF: types by llama.cpp's rules, key/values in order, split parts with a size."""
    target = args.dtype if args.dtype is None or isinstance(args.dtype, str) else args.dtype.name
    try:
        items = plan_gguf(checkpoint, names, target, args.keep, args.allow_expanded)
        kvs = gguf_key_values(checkpoint, None, target)
    except DataError as error:
        raise CommandFailure(with_path(args.path, error)) from None
    total = sum(item.byte_len for item in items)
    path = where(args.path, args.lenient)
    with (
        sharing((path, checkpoint)),
        Runner(args.jobs) as runner,
        Progress(total, "convert") as progress,
    ):
        try:
            written = write_gguf(
                    checkpoint, path, items, kvs, args.dst, args.max_shard_size, runner,
                    progress.update, args.overwrite,
                )  # fmt: skip
        except OSError as error:
            # A split part in the way is named itself.
            named = error.filename if isinstance(error.filename, str) else args.dst
            if os.path.abspath(named) == os.path.abspath(args.dst):
                named = args.dst
            raise CommandFailure(destination_error(named, error)) from None
        except DataError as error:
            raise CommandFailure(with_path(args.dst, error)) from None
    if not any(kv.key == ARCHITECTURE_KEY for kv in kvs):
        # The file is valid GGUF, but llama.cpp picks its model code by this key (and then
        # needs the model's own tensor names, hyper-parameters and tokenizer).
        print(
            f"strided: warning: {safe(args.path)} names no GGUF architecture "
            f"({ARCHITECTURE_KEY}): {safe(args.dst)} holds the tensors, but llama.cpp "
            "will not load it",
            file=sys.stderr,
        )
    return written


def target_format(path: str) -> str:
    """The destination's format by its extension; CommandFailure for anything else."""
    lowered = path.lower()
    for suffix in ("safetensors", "gguf", "npy", "json"):
        if lowered.endswith("." + suffix):
            return suffix
    raise CommandFailure(
        f"{safe(path)}: the destination must end in .safetensors, .gguf, .npy or .json "
        "(or be a folder, with --max-shard-size)"
    )


def destination_error(dst: str, error: OSError) -> str:
    """One line for an OSError writing ``dst``, named as given on the command line (and
    the way out when something is in the way)."""
    text = safe(" ".join((error.strerror or one_line(error)).split()))
    if isinstance(error, TargetExists):
        text += " (--overwrite replaces it)"
    return f"{safe(dst)}: {text}"


def _write_one(
    args: argparse.Namespace, checkpoint: Checkpoint, names: list[str], kind: str
) -> None:
    """The one selected tensor as ``.npy`` or JSON. The temporary file exists from the
    start, so the tensor is read and converted while a kill would still sweep it."""
    if len(names) != 1:
        raise CommandFailure(
            f"{safe(args.dst)}: .{kind} holds one tensor; {len(names)} tensors are selected "
            "(pick one with --name)"
        )
    (name,) = names

    def write(handle: IO[bytes]) -> None:
        try:
            admit(checkpoint, [name], args.allow_expanded)
            tensor: Tensor = checkpoint[name]
            if args.dtype is not None and tensor.dtype.is_float:
                tensor = tensor.convert(args.dtype)
        except (DataError, OSError) as error:
            raise CommandFailure(tensor_error(args.path, name, error)) from None
        try:
            if kind == "npy":
                npy_writer(tensor)(handle)
            else:
                handle.write(tensor.to_json().encode())
        except DataError as error:
            raise CommandFailure(with_path(args.dst, error)) from None

    try:
        write_file(args.dst, write, args.overwrite)
    except OSError as error:
        raise CommandFailure(destination_error(args.dst, error)) from None
