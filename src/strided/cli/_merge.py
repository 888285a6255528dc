"""``strided merge-lora`` and ``strided merge``: merged checkpoints written as safetensors.

Both build a lazy merged checkpoint (``strided.jobs._merge``), which checks everything
that headers can tell before any byte is written, then hand it to ``convert``'s writer:
atomic, deterministic, sharded on request, the same bytes for every ``--jobs``.
"""

from __future__ import annotations

import argparse
import sys

from .._core.dtype import DType
from .._core.errors import DataError
from ..jobs._checkpoint import Checkpoint
from ..jobs._merge import merge_linear, merge_lora
from ..jobs._save import prepare, write
from ._convert import destination_error
from ._progress import Progress
from ._text import one_line, safe
from ._verify import CommandFailure, count_of

__all__ = ["layouts_text", "run_merge", "run_merge_lora"]


def run_merge_lora(args: argparse.Namespace) -> int:
    """Merge ADAPTER into BASE and write OUT; see ``strided merge-lora --help``."""
    _check_destination(args.dst, args.max_shard_size)
    try:
        merged = merge_lora(
            args.path,
            args.adapter,
            args.scale,
            fan_in_fan_out=args.fan_in_fan_out,
            lenient=args.lenient,
        )
    except DataError as error:
        raise CommandFailure(_line([args.path, args.adapter], error)) from None
    if merged.layouts:
        print(f"merge-lora: {layouts_text(merged.layouts)}", file=sys.stderr)
    with merged:
        changed = _write(args, merged)
    print(
        f"{safe(args.path)} + {safe(args.adapter)} -> {safe(args.dst)}: "
        f"{count_of(len(merged), 'tensor')}, {changed:,} changed by the adapter"
    )
    return 0


def run_merge(args: argparse.Namespace) -> int:
    """Average A, B, ... with ``--weights`` and write OUT; see ``strided merge --help``."""
    paths: list[str] = [args.path, *args.others]
    inputs, args.dst = paths[:-1], paths[-1]
    if len(inputs) < 2:
        raise CommandFailure("merge: give at least two checkpoints, then OUT", status=2)
    if len(args.weights) != len(inputs):
        raise CommandFailure(
            f"merge: {len(inputs)} checkpoints need {len(inputs)} weights, "
            f"--weights gives {len(args.weights)}",
            status=2,
        )
    _check_destination(args.dst, args.max_shard_size)
    try:
        merged = merge_linear(inputs, args.weights, lenient=args.lenient)
    except DataError as error:
        raise CommandFailure(_line(inputs, error)) from None
    with merged:
        _write(args, merged)
    print(f"{len(inputs)} checkpoints -> {safe(args.dst)}: {count_of(len(merged), 'tensor')}")
    return 0


def layouts_text(layouts: dict[str, str]) -> str:
    """The layout of each square module, grouped: ``square modules: Conv1D a, b; Linear c``."""
    groups: dict[str, list[str]] = {}
    for module, layout in layouts.items():
        groups.setdefault(layout, []).append(safe(module))
    parts = [f"{layout} {', '.join(names)}" for layout, names in sorted(groups.items())]
    return f"square modules: {'; '.join(parts)}"


def _check_destination(dst: str, shard_size: int | None) -> None:
    if shard_size is None and not dst.lower().endswith(".safetensors"):
        raise CommandFailure(
            f"{safe(dst)}: merges write safetensors: OUT must end in .safetensors "
            "(or be a folder, with --max-shard-size)",
            status=2,
        )
    if shard_size is not None and dst.lower().endswith((".npy", ".json")):
        raise CommandFailure(
            f"{safe(dst)}: --max-shard-size writes a folder of safetensors shards", status=2
        )


def _write(args: argparse.Namespace, merged: Checkpoint) -> int:
    """Write every tensor of ``merged`` to ``args.dst``; returns how many were computed."""
    dtype = DType[args.dtype] if args.dtype is not None else None
    kind = "safetensors" if args.max_shard_size is None else "folder"
    try:
        job = prepare(
                merged, kind, list(merged), dtype=dtype, rename=args.rename,
                allow_expanded=args.allow_expanded, jobs=args.jobs,
            )  # fmt: skip
    except DataError as error:
        raise CommandFailure(_line([args.path], error)) from None
    try:
        write(
                job, args.dst, max_shard_size=args.max_shard_size, overwrite=args.overwrite,
                meter=Progress, label="merge",
            )  # fmt: skip
    except OSError as error:
        raise CommandFailure(destination_error(args.dst, error)) from None
    return sum(1 for item in job.items if item.mode == "computed")


def _line(paths: list[str], error: DataError) -> str:
    """One line naming a file once: the message's own when it names one of ``paths``."""
    text = one_line(error)
    if any(text.startswith(safe(path)) for path in paths):
        return text
    return f"{safe(paths[0])}: {text}"
