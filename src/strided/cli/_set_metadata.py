"""``strided set-metadata``: change GGUF key/values or safetensors ``__metadata__``.

The parser is defined here and added to the command line by ``add_set_metadata``; the
job's modules (NumPy, the readers) are imported when the command runs, as for every
command (see the package docstring: start-up time).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

__all__ = ["add_set_metadata", "run_set_metadata"]

_TYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "str")


def add_set_metadata(commands: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
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
    parser.set_defaults(run=run_set_metadata)


def _assignment(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, found {text[:40]!r}")
    return key, value


def run_set_metadata(args: argparse.Namespace) -> int:
    """Apply the changes; exit 1 (nothing written) when a value does not fit."""
    from ..jobs._set_metadata import TYPE_NAMES, Edit, set_metadata
    from ._convert import destination_error
    from ._text import safe
    from ._verify import CommandFailure

    if not args.sets and not args.delete:
        raise CommandFailure("set-metadata: give KEY=VALUE pairs or --delete KEY", status=2)
    edit = Edit(args.sets, args.delete, TYPE_NAMES[args.type] if args.type else None)
    try:
        kind = set_metadata(args.path, edit, args.out, args.overwrite)
    except OSError as error:
        if args.out is None or not _names(error, args.out):
            raise  # reading PATH (or replacing it): reported against PATH
        raise CommandFailure(destination_error(args.out, error)) from None
    shown = safe(args.out or args.path)
    print(f"{shown} ({kind}): {len(args.sets)} set, {len(args.delete)} deleted; tensors unchanged")
    return 0


def _names(error: OSError, path: str) -> bool:
    """Whether ``error`` is about ``path``."""
    named = error.filename
    return isinstance(named, str) and os.path.abspath(named) == os.path.abspath(path)
