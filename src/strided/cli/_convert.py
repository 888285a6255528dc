"""``strided convert``: any checkpoint to safetensors, ``.npy`` or strided JSON, exactly."""

from __future__ import annotations

import argparse
from typing import IO, Any

from .._checkpoint import open_checkpoint
from .._errors import DataError
from .._tensor import Tensor
from ._progress import Progress
from ._text import safe, tensor_error
from ._verify import CommandFailure

__all__ = ["run_convert", "target_format"]


def run_convert(args: argparse.Namespace) -> int:
    """Read every tensor of SRC and write DST atomically (nothing is left on failure).

    ``--dtype`` converts floating tensors only, as ``module.to(dtype)`` does in PyTorch:
    integer and BOOL tensors (token ids, masks) are copied unchanged.
    """
    target = target_format(args.dst)
    tensors: dict[str, Tensor] = {}
    with open_checkpoint(args.path) as checkpoint:
        total = sum(checkpoint.info(name).byte_len for name in checkpoint)
        done = 0
        with Progress(total, "convert") as progress:
            for name in checkpoint:
                try:
                    tensor = checkpoint[name]
                    if args.dtype is not None and tensor.dtype.is_float:
                        tensor = tensor.convert(args.dtype)
                except DataError as error:
                    raise CommandFailure(tensor_error(args.path, name, error)) from None
                tensors[name] = tensor
                done += checkpoint.info(name).byte_len
                progress.update(done)
        metadata = checkpoint.metadata
    try:
        _write(target, args.dst, tensors, metadata)
    except (DataError, OSError) as error:
        from ._text import with_path

        raise CommandFailure(with_path(args.dst, error)) from None
    print(f"{safe(args.path)} -> {safe(args.dst)}: {len(tensors)} tensors")
    return 0


def target_format(path: str) -> str:
    """The destination's format by its extension; CommandFailure for anything else."""
    lowered = path.lower()
    for suffix in ("safetensors", "npy", "json"):
        if lowered.endswith("." + suffix):
            return suffix
    raise CommandFailure(f"{safe(path)}: the destination must end in .safetensors, .npy or .json")


def _text_metadata(metadata: dict[str, Any]) -> dict[str, str]:
    """Metadata as safetensors strings: scalars as their text, lists left out."""
    text = {}
    for key, value in metadata.items():
        if isinstance(value, str):
            text[key] = value
        elif isinstance(value, bool):
            text[key] = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text[key] = repr(value)
    return text


def _write(kind: str, path: str, tensors: dict[str, Tensor], metadata: dict[str, Any]) -> None:
    from ..io import save_npy, save_safetensors
    from ..io._common import atomic_write

    if kind == "safetensors":
        save_safetensors(path, tensors, metadata=_text_metadata(metadata) or None)
        return
    if len(tensors) != 1:
        raise CommandFailure(
            f"{safe(path)}: .{kind} holds one tensor; the source has {len(tensors)}"
        )
    (tensor,) = tensors.values()
    if kind == "npy":
        save_npy(path, tensor)
    else:
        text = tensor.to_json().encode()

        def write(handle: IO[bytes]) -> None:
            handle.write(text)

        atomic_write(path, write)
