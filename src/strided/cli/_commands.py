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

__all__ = ["Runner", "add_scan", "add_set_metadata"]

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
        "GGUF key/values keep their order; an existing key keeps its type, a new key\n"
        "is a string unless --type (a value starting with [ is then a JSON array of\n"
        "that type). general.alignment and split.* cannot change. safetensors\n"
        "__metadata__ values are strings. The file is rewritten atomically (in place\n"
        "unless -o); tensor bytes are copied unchanged, so 'strided hash' gives the\n"
        "same checkpoint digest. A value that does not fit its type changes nothing.",
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
        "--type", choices=_TYPES, default=None, help="GGUF type of new keys (default: str)"
    )
    parser.add_argument(
        "-o", dest="out", metavar="OUT", default=None, help="write to OUT instead of PATH"
    )
    parser.add_argument("--overwrite", action="store_true", help="with -o: replace an existing OUT")
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
        "Reads every pickle a loader would run as data (nothing is imported or run):\n"
        "torch archives, TorchScript data.pkl/constants.pkl, bare pickle files,\n"
        "object arrays in .npy/.npz, a distributed checkpoint's .metadata and items.\n"
        "Lists every module.name each names, with the member it comes from: 'data'\n"
        "(read by default), 'unknown' (needs --lenient: a model's own classes, for\n"
        "instance) or 'DANGEROUS' (runs code or touches the system if unpickled:\n"
        "os.system, builtins.eval, torch.utils.collect_env.run, torch.load...).\n"
        "Formats without pickles name nothing.",
        "strided scan model.pt pytorch_model.bin checkpoints/step_1000",
        "exit status: 0 every import is data, 1 some import is unknown or dangerous\n"
        "(also in a file that then fails to open), 2 a file or pickle cannot be read\n"
        "and nothing unknown or dangerous was seen (or bad usage).",
    )
    scan.add_argument("path", metavar="PATH", nargs="+", help="checkpoints to scan")
    scan.add_argument("--json", action="store_true", help="print one JSON document")
    scan.set_defaults(run=run)
