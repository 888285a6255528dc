"""``strided convert``: any checkpoint to safetensors (a file or shards), GGUF (a file or
split parts), ``.npy`` or JSON."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys

from .._core.errors import DataError
from ..io._shards import TargetExists
from ..jobs._checkpoint import Checkpoint, open_checkpoint
from ..jobs._pool import where
from ..jobs._save import TensorReadError, prepare, write
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
    kind = "safetensors" if args.max_shard_size is None else "folder"
    try:
        job = prepare(
                checkpoint, kind, names, dtype=args.dtype, rename=args.rename,
                allow_expanded=args.allow_expanded, lenient=args.lenient, jobs=args.jobs,
                source_path=where(args.path, args.lenient),
            )  # fmt: skip
    except DataError as error:
        raise CommandFailure(with_path(args.path, error)) from None
    try:
        return write(
                job, args.dst, max_shard_size=args.max_shard_size, overwrite=args.overwrite,
                meter=Progress, label="convert",
            )  # fmt: skip
    except OSError as error:
        raise CommandFailure(destination_error(args.dst, error)) from None


def _write_gguf(args: argparse.Namespace, checkpoint: Checkpoint, names: list[str]) -> list[str]:
    """GGUF: types by llama.cpp's rules, key/values in order, split parts with a size."""
    try:
        job = prepare(
                checkpoint, "gguf", names, dtype=args.dtype, keep=args.keep, rename=args.rename,
                allow_expanded=args.allow_expanded, lenient=args.lenient, jobs=args.jobs,
                source_path=where(args.path, args.lenient),
            )  # fmt: skip
    except DataError as error:
        raise CommandFailure(with_path(args.path, error)) from None
    try:
        written = write(
                job, args.dst, max_shard_size=args.max_shard_size, overwrite=args.overwrite,
                meter=Progress, label="convert",
            )  # fmt: skip
    except OSError as error:
        # A split part in the way is named itself.
        named = error.filename if isinstance(error.filename, str) else args.dst
        if os.path.abspath(named) == os.path.abspath(args.dst):
            named = args.dst
        raise CommandFailure(destination_error(named, error)) from None
    except DataError as error:
        raise CommandFailure(with_path(args.dst, error)) from None
    if not any(kv.key == ARCHITECTURE_KEY for kv in job.metadata):
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
    """The one selected tensor as ``.npy`` or JSON (``jobs._save.write``)."""
    if len(names) != 1:
        raise CommandFailure(
            f"{safe(args.dst)}: .{kind} holds one tensor; {len(names)} tensors are selected "
            "(pick one with --name)"
        )
    try:
        job = prepare(checkpoint, kind, names, dtype=args.dtype, rename=args.rename)
    except DataError as error:
        raise CommandFailure(with_path(args.path, error)) from None
    try:
        write(job, args.dst, overwrite=args.overwrite, allow_expanded=args.allow_expanded)
    except TensorReadError as error:
        raise CommandFailure(tensor_error(args.path, error.name, error.error)) from None
    except DataError as error:
        raise CommandFailure(with_path(args.dst, error)) from None
    except OSError as error:
        raise CommandFailure(destination_error(args.dst, error)) from None
