"""The arguments of ``strided merge-lora`` and ``strided merge``.

Light on purpose (the standard library only): the parser is built at every start, and
the command's module with NumPy and the job engine is imported only when it runs.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["COMMANDS", "add_merges", "add_rename", "rename_rule"]

COMMANDS = ("merge-lora", "merge")
_DTYPES = ("F16", "BF16", "F32", "F64")
_OUT = "a *.safetensors file, or a folder with --max-shard-size"


def add_merges(
    commands: Any,
    command: Callable[..., argparse.ArgumentParser],
    add_jobs: Callable[[argparse.ArgumentParser], None],
    add_expanded: Callable[[argparse.ArgumentParser], None],
    add_lenient: Callable[[argparse.ArgumentParser], None],
    size: Callable[[str], int],
    run_merge_lora: Callable[[argparse.Namespace], int],
    run_merge: Callable[[argparse.Namespace], int],
) -> None:
    """Add both commands to ``commands`` with the command line's own helpers (the
    sub-command maker, ``--jobs``, ``--allow-expanded``, ``--lenient`` and the
    ``--max-shard-size`` type) and the functions that run them (they import the job
    when it runs)."""
    lora = command(
        commands,
        "merge-lora",
        "merge a PEFT LoRA adapter into its base checkpoint, exactly",
        "BASE is the model's checkpoint with Hugging Face names (safetensors, PyTorch,\n"
        "DCP, NumPy); ADAPTER the folder PEFT's save_pretrained wrote (adapter_config.json\n"
        "+ adapter_model.safetensors or .bin, read as data). Each merged element is\n"
        "W + s * (B @ A) computed exactly and rounded once into W's dtype (or --dtype),\n"
        "s = lora_alpha / r (per module: rank_pattern, alpha_pattern; rslora) x --scale.\n"
        "Each module's layout (nn.Linear or GPT-2's Conv1D) comes from its shapes; the\n"
        "layout given to square modules is listed on stderr.\n"
        "Output is written atomically and is the same bytes for every --jobs; a bad\n"
        "adapter is refused before anything is written.",
        "strided merge-lora Llama-3.2-1B/ my-adapter/ merged/ --max-shard-size 5GB",
    )
    lora.add_argument("path", metavar="BASE", help="the base checkpoint (path or URL)")
    lora.add_argument("adapter", metavar="ADAPTER", help="the PEFT adapter folder")
    lora.add_argument("dst", metavar="OUT", help=_OUT)
    lora.add_argument(
        "--scale", type=_scale, default=1.0, metavar="S", help="multiply the adapter's s by S"
    )
    lora.add_argument(
        "--fan-in-fan-out",
        action="append",
        default=None,
        metavar="GLOB",
        help="modules matching GLOB are Conv1D-style (weight (in, out)), every other one "
        "Linear-style (repeatable); without it each module's shape decides, and square "
        "ones follow fan_in_fan_out when that is unambiguous",
    )
    _common(lora, add_jobs, add_expanded, size)
    add_lenient(lora)
    lora.set_defaults(run=run_merge_lora)

    linear = command(
        commands,
        "merge",
        "average checkpoints with exact weights",
        "Every float element is the weighted sum of the inputs' values, computed exactly\n"
        "and rounded once into its dtype (or --dtype); weights are decimal text read\n"
        "exactly (0.1 is one tenth). Inputs need the same names, shapes and dtypes;\n"
        "integer and BOOL tensors must be identical and are copied. Output is written\n"
        "atomically and is the same bytes for every --jobs.",
        "strided merge a.safetensors b.safetensors --weights 0.7,0.3 avg.safetensors",
    )
    linear.add_argument("path", metavar="A", help="the first checkpoint (path or URL)")
    linear.add_argument(
        "others", metavar="B ... OUT", nargs="+", help=f"more checkpoints, then OUT: {_OUT}"
    )
    linear.add_argument(
        "--weights",
        required=True,
        type=_weights,
        metavar="W1,W2[,...]",
        help="one weight per checkpoint, comma-separated decimals",
    )
    _common(linear, add_jobs, add_expanded, size)
    add_lenient(linear)
    linear.set_defaults(run=run_merge)
    linear.__class__ = _Intermixed  # OUT may follow --weights
    linear.usage = (
        "strided merge [-h] A B [C ...] --weights W1,W2[,...] OUT [--dtype D]\n"
        "               [--max-shard-size SIZE] [--overwrite] [--rename REGEX=REPLACEMENT]\n"
        "               [--jobs N] [--lenient]"
    )


class _Intermixed(argparse.ArgumentParser):
    """A sub-command parser whose positionals may come before and after options
    (``merge A B --weights 0.5,0.5 OUT``): plain argparse gives every positional to the
    first run of them and refuses the rest."""

    _inside = False

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inside:  # the intermixed parse calls this method itself
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


def _common(
    command: argparse.ArgumentParser,
    add_jobs: Callable[[argparse.ArgumentParser], None],
    add_expanded: Callable[[argparse.ArgumentParser], None],
    size: Callable[[str], int],
) -> None:
    command.add_argument(
        "--dtype",
        type=str.upper,
        choices=_DTYPES,
        default=None,
        help="write floating tensors in this dtype (merged ones rounded once, directly)",
    )
    command.add_argument(
        "--max-shard-size",
        type=size,
        default=None,
        metavar="SIZE",
        help="write a Hugging Face shard folder, shards at most SIZE (5GB, 500MB, 2GiB)",
    )
    command.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUT (a file by a file, a shard folder by a shard folder)",
    )
    add_rename(command)
    add_jobs(command)
    add_expanded(command)


def add_rename(command: argparse.ArgumentParser) -> None:
    """``--rename 'REGEX=REPLACEMENT'``, repeatable, applied in order to every name."""
    command.add_argument(
        "--rename",
        action="append",
        type=rename_rule,
        default=[],
        metavar="REGEX=REPLACEMENT",
        help="rename tensors: re.sub(REGEX, REPLACEMENT, name), rules applied in order "
        "(repeatable; a literal = in REGEX is written \\=)",
    )


def rename_rule(text: str) -> tuple[str, str]:
    """``REGEX=REPLACEMENT`` split at the first ``=`` not written ``\\=`` (which stands for
    ``=`` in REGEX); the regex must compile."""
    index = 0
    while True:
        index = text.find("=", index)
        if index < 0:
            raise argparse.ArgumentTypeError(f"expected REGEX=REPLACEMENT, found {text!r}")
        if index == 0 or text[index - 1] != "\\":
            break
        index += 1
    pattern, replacement = text[:index].replace("\\=", "="), text[index + 1 :]
    try:
        re.compile(pattern)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"regex {pattern!r} does not compile: {error}") from None
    return pattern, replacement


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or text.strip().lower().lstrip("+-") in ("inf", "nan"):
        raise argparse.ArgumentTypeError(f"must be a finite number, found {text!r}")
    return value


def _weights(text: str) -> list[str]:
    items = text.split(",")
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, found {text!r}")
    return items
