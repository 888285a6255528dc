"""The argument parsers of the commands added since the first five, kept light.

Each ``add_*`` defines one sub-command on ``commands`` (``command`` makes a sub-parser
whose help shows a description, the exit status and one example) and sets ``run``, the
function ``cli`` gives it: that function imports the command's runner when the command
runs, so ``strided --help`` loads no job module (start-up time).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = [
    "Runner",
    "add_allow_nonfinite",
    "add_scan",
    "add_set_metadata",
    "add_skip_unreadable",
]

Runner = Callable[[argparse.Namespace], int]

_TYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "str")


def add_set_metadata(
    commands: Any, command: Callable[..., argparse.ArgumentParser], run: Runner
) -> None:
    """Add the ``set-metadata`` sub-command (``command`` makes a sub-parser with help)."""
    parser = command(
        commands,
        "set-metadata",
        "set or delete metadata of a GGUF or safetensors file, tensors untouched",
        "GGUF key/values keep their order; an existing key keeps its type. A new key\n"
        "takes llama.cpp's type when it is one of llama.cpp's known keys\n"
        "(llama.context_length is u32, tokenizer.chat_template str), else it needs\n"
        "--type (a value starting with [ is then a JSON array of that type). Integers\n"
        "have at most 20 digits; floats are decimals, nan, inf or -inf.\n"
        "general.alignment and split.* cannot change. safetensors __metadata__ values\n"
        "are strings. The file is rewritten atomically (in place unless -o; a symbolic\n"
        "link's target is rewritten and the link kept); tensor bytes are copied\n"
        "unchanged, so 'strided hash' gives the same checkpoint digest. A value that\n"
        "does not fit its type, or a file another writer replaced meanwhile, changes\n"
        "nothing. Local files only.",
        'strided set-metadata model.gguf tokenizer.chat_template="$(cat chat.jinja)"',
    )
    parser.add_argument("path", metavar="PATH", help="a GGUF or safetensors file")
    parser.add_argument(
        "sets", metavar="KEY=VALUE", nargs="*", type=_assignment, help="keys to set"
    )
    parser.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="a key to delete (repeatable)"
    )
    parser.add_argument(
        "--type",
        choices=_TYPES,
        default=None,
        help="GGUF type of new keys that are not llama.cpp's known keys (required for them)",
    )
    parser.add_argument(
        "-o", dest="out", metavar="OUT", default=None, help="write to OUT instead of PATH"
    )
    parser.add_argument("--overwrite", action="store_true", help="with -o: replace an existing OUT")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document: the path written, its format, each key set with its "
        "type, the keys deleted",
    )
    parser.set_defaults(run=run)


def _assignment(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text[:40]!r}")
    return key, value


def add_scan(commands: Any, command: Callable[..., argparse.ArgumentParser], run: Runner) -> None:
    """Register ``scan`` with the command line's sub-parsers (``command`` makes one)."""
    scan = command(
        commands,
        "scan",
        "list the globals a checkpoint's pickles name, judged data, unknown or dangerous",
        "Reads each PyTorch pickle as data (nothing is imported or run, in any mode)\n"
        "and lists every module.name it names, in first-use order: 'data' (read by\n"
        "default), 'unknown' (needs --lenient: a model's own classes, for instance) or\n"
        "'DANGEROUS' (runs code or touches the system if unpickled: os.system,\n"
        "builtins.eval, subprocess.Popen, torch.load...). Formats without pickles\n"
        "name nothing.",
        "strided scan model.pt pytorch_model.bin",
        "exit status: 0 every import is data, 1 some import is unknown or dangerous,\n"
        "2 a file cannot be read (or bad usage).",
    )
    scan.add_argument("path", metavar="PATH", nargs="+", help="checkpoints to scan")
    scan.add_argument("--json", action="store_true", help="print one JSON document")
    scan.set_defaults(run=run)


def add_skip_unreadable(command: argparse.ArgumentParser, what: str) -> None:
    """The ``--skip-unreadable`` option (``cli._unreadable``); ``what`` says what the
    command records of the members it skips."""
    command.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="go on past members strided cannot read (an .npz object or string array, a "
        "distributed checkpoint item that is not plain data), naming each on stderr "
        f"(without it they stop the command, exit 1); {what}",
    )


def add_allow_nonfinite(command: argparse.ArgumentParser) -> None:
    """``verify --allow-nonfinite GLOB``: tensors that may hold NaN or infinity."""
    command.add_argument(
        "--allow-nonfinite",
        action="append",
        default=[],
        metavar="GLOB",
        help="tensors matching this glob may hold NaN or inf: still reported, no longer a "
        "failure (repeatable; Lightning's ModelCheckpoint stores kth_value as inf)",
    )
