"""The ``strided`` command line: inspect, verify and convert checkpoints of every format.

Exit status: 0 on success, 1 on bad input (one line on stderr naming the file and the
problem, never a traceback), 2 on bad usage. Everything printed that comes from a file
(names, metadata, messages) is escaped, so a file cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .._dtype import DType
from .._errors import DataError
from .._limits import MAX_INSPECTION_SAMPLES
from ._text import one_line, with_path
from ._verify import CommandFailure

__all__ = ["main"]

_COMMANDS = "inspect, verify, convert"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also used by ``python -m strided``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"strided: error: a sub-command is required ({_COMMANDS})", file=sys.stderr)
        return 2
    stdout = sys.stdout
    sys.stdout = _Guarded(stdout)
    try:
        status = int(args.run(args))
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # The reader went away (``strided inspect ... | head``): not an error of ours.
        _silence_stdout()
        return 0
    except _OutputError as error:
        _silence_stdout()
        print(f"strided: <stdout>: {one_line(error.cause)}", file=sys.stderr)
        return 1
    except CommandFailure as failure:
        print(f"strided: {failure}", file=sys.stderr)
        return 1
    except (DataError, OSError, UnicodeError) as error:
        print(f"strided: {with_path(args.path, error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("strided: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout


class _OutputError(Exception):
    """Writing to stdout failed (a full disk, a closed file): reported against <stdout>."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Guarded:
    """stdout whose write errors are told apart from errors reading the input files."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _OutputError(error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _OutputError(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    # Point stdout at devnull so the interpreter's final flush stays quiet.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except (OSError, ValueError):
        pass


def _parser() -> argparse.ArgumentParser:
    from ._convert import run_convert
    from ._inspect import run_inspect
    from ._verify import run_verify

    parser = argparse.ArgumentParser(
        prog="strided", description="Inspect, verify and convert checkpoints of every format."
    )
    commands = parser.add_subparsers(dest="command", metavar="{inspect,verify,convert}")
    formats = "safetensors (file, shard folder or index), GGUF, .npy, .npz, PyTorch or .json"

    inspect = commands.add_parser("inspect", help="list the tensors of a checkpoint, with samples")
    inspect.add_argument("path", help=formats)
    inspect.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    inspect.add_argument("--samples", type=_samples, default=1024, help="samples per tensor")
    inspect.add_argument("--strategy", choices=("head", "spread"), default="head")
    inspect.add_argument(
        "--group", action="store_true", help="fold names differing in layer numbers"
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON document")
    inspect.add_argument(
        "--full-metadata",
        action="store_true",
        help="print metadata arrays whole (default: length and first items)",
    )
    inspect.set_defaults(run=run_inspect)

    verify = commands.add_parser("verify", help="validate a checkpoint and scan every element")
    verify.add_argument("path", help=formats)
    verify.set_defaults(run=run_verify)

    convert = commands.add_parser(
        "convert", help="convert a checkpoint to safetensors, .npy or .json"
    )
    convert.add_argument("path", metavar="SRC", help=formats)
    convert.add_argument("dst", metavar="DST", help="*.safetensors, *.npy or *.json")
    convert.add_argument(
        "--dtype",
        type=_float_dtype,
        default=None,
        help="convert floating tensors to this float dtype (integers and BOOL stay as they are)",
    )
    convert.set_defaults(run=run_convert)
    return parser


def _samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= MAX_INSPECTION_SAMPLES:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_INSPECTION_SAMPLES}")
    return value


def _float_dtype(text: str) -> DType:
    try:
        dtype = DType.parse(text)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not dtype.is_float:
        raise argparse.ArgumentTypeError(
            f"{dtype.name} is not a float dtype; --dtype converts floating tensors only"
        )
    return dtype
