"""``strided set-metadata``: change GGUF key/values or safetensors ``__metadata__``.

The runner of the command whose parser ``_commands`` defines; imported when the command
runs (see the package docstring: start-up time). The work is ``strided.set_metadata``'s
(``jobs._set_metadata_job``); this module parses, calls and prints.
"""

from __future__ import annotations

import argparse
import os

from ..jobs._set_metadata import TYPE_NAMES, Edit
from ..jobs._set_metadata_job import apply
from ._convert import destination_error
from ._text import safe
from ._verify import CommandFailure

__all__ = ["run_set_metadata"]


def run_set_metadata(args: argparse.Namespace) -> int:
    """Apply the changes; exit 1 (nothing written) when a value does not fit."""
    if not args.sets and not args.delete:
        raise CommandFailure("set-metadata: give KEY=VALUE pairs or --delete KEY", status=2)
    edit = Edit(args.sets, args.delete, TYPE_NAMES[args.type] if args.type else None)
    try:
        report = apply(args.path, edit, args.out, args.overwrite)
    except OSError as error:
        if args.out is None or not _names(error, args.out):
            raise  # reading PATH (or replacing it): reported against PATH
        raise CommandFailure(destination_error(args.out, error)) from None
    if args.json:
        print(report.to_json())
        return 0
    # Counted as given: a key set twice counts twice (the report keeps its last type).
    shown = safe(report.path)
    print(f"{shown} ({report.format}): {len(args.sets)} set, {len(args.delete)} deleted; "
          "tensors unchanged")  # fmt: skip
    return 0


def _names(error: OSError, path: str) -> bool:
    """Whether ``error`` is about ``path``."""
    named = error.filename
    return isinstance(named, str) and os.path.abspath(named) == os.path.abspath(path)
