"""``strided verify``: validate a checkpoint whole and scan every element for NaN and infinity."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from .._checkpoint import open_checkpoint
from .._errors import DataError
from .._tensor import Tensor
from ._progress import Progress
from ._text import byte_size, safe, tensor_error

__all__ = ["CommandFailure", "run_verify"]

_CHUNK = 1 << 22  # elements per scan step: bounded memory for NaN/inf checks


class CommandFailure(Exception):
    """A problem with one file: printed as one line, exit status 1."""


def run_verify(args: argparse.Namespace) -> int:
    """Exit 0 only when every tensor was read and scanned and none holds NaN or inf.

    A tensor whose stored type strided cannot decode is validated structurally but not
    scanned; it is listed, counted, and makes the exit status 1.
    """
    with open_checkpoint(args.path) as checkpoint:
        total = sum(checkpoint.info(name).byte_len for name in checkpoint)
        problems: list[str] = []
        skipped: list[str] = []
        done = 0
        with Progress(total, "verify") as progress:
            for name in checkpoint:
                info = checkpoint.info(name)
                if not checkpoint.readable(name):
                    skipped.append(f"{safe(name)}: {safe(info.dtype)} values not scanned")
                    continue
                try:
                    tensor = checkpoint[name]
                except DataError as error:
                    raise CommandFailure(tensor_error(args.path, name, error)) from None

                def report(scanned: int, base: int = done) -> None:
                    progress.update(base + scanned)

                nan, inf = scan(tensor, report)
                done += info.byte_len
                progress.update(done)
                if nan or inf:
                    problems.append(f"{safe(name)}: {nan} NaN, {inf} inf")
        count = len(checkpoint)
    for line in problems + skipped:
        print(line)
    states = []
    if problems:
        states.append(f"{len(problems)} tensors with NaN or inf")
    if skipped:
        states.append(f"{len(skipped)} of {count} tensors not scanned")
    state = ", ".join(states) if states else "clean"
    print(f"{safe(args.path)}: {count} tensors, {byte_size(total)}: {state}")
    return 1 if states else 0


def scan(tensor: Tensor, report: Callable[[int], None]) -> tuple[int, int]:
    """NaN and infinity counts, scanning blocks of whole rows of the view in place.

    Blocks follow the first axis, so a strided view (a Fortran-order ``.npy``, say) is
    never copied whole; each block's temporaries stay near ``_CHUNK`` elements.
    """
    if not tensor.dtype.is_float:
        return 0, 0
    array = tensor.numpy()
    if array.ndim == 0:
        array = array.reshape(1)
    per_row = max(array.size // max(array.shape[0], 1), 1)
    step = max(_CHUNK // per_row, 1)
    nan = inf = 0
    for start in range(0, array.shape[0], step):
        block = array[start : start + step]
        with np.errstate(invalid="ignore"):  # ml_dtypes flags NaN payloads as "invalid"
            nan += int(np.count_nonzero(np.isnan(block)))
            inf += int(np.count_nonzero(np.isinf(block)))
        report((start + block.shape[0]) * per_row * tensor.dtype.itemsize)
    return nan, inf
