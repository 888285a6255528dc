"""The ``strided`` command line: inspect, verify, hash, diff and convert checkpoints.

Exit status: 0 on success, 1 on bad input (one line on stderr naming the file and the
problem, never a traceback), 2 on bad usage; ``diff`` exits 0 when the checkpoints
match, 1 when they differ and 2 on trouble. Everything printed that comes from a file
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
from .._jobs import EngineError, JobError
from .._limits import MAX_INSPECTION_SAMPLES
from ._text import job_error, one_line, with_path
from ._verify import CommandFailure

__all__ = ["main"]

_COMMANDS = "inspect, verify, hash, diff, convert"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also used by ``python -m strided``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"strided: error: a sub-command is required ({_COMMANDS})", file=sys.stderr)
        return 2
    if getattr(args, "scheduler", None) is not None and args.jobs != 1:
        parser.error("--jobs and --scheduler cannot be combined")
    stdout = sys.stdout
    sys.stdout = _Guarded(stdout)
    from ..io._http import TOKENS_VARIABLE

    remembered = os.environ.get(TOKENS_VARIABLE)
    try:
        _remember_token(args)
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
        return failure.status
    except JobError as error:
        print(f"strided: {job_error(error)}", file=sys.stderr)
        return 1
    except EngineError as error:
        print(f"strided: {one_line(error)}", file=sys.stderr)
        return 2
    except (DataError, OSError, UnicodeError) as error:
        print(f"strided: {with_path(args.path, error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("strided: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout
        if remembered is None:
            os.environ.pop(TOKENS_VARIABLE, None)
        else:
            os.environ[TOKENS_VARIABLE] = remembered


def _remember_token(args: argparse.Namespace) -> None:
    """``--token`` for the URLs named on the command line (worker processes see it too)."""
    if getattr(args, "token", None) is None:
        return
    from ..io._http import is_url, remember_token

    for path in (args.path, getattr(args, "other", None)):
        if isinstance(path, str) and is_url(path):
            remember_token(path, args.token)


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


_FORMATS = "safetensors (file, shard folder or index), GGUF, .npy, .npz, PyTorch or .json"
_Commands = Any  # argparse's sub-parser action (a private class)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strided",
        description="Inspect, verify, hash, diff and convert checkpoints of every format.",
    )
    commands = parser.add_subparsers(dest="command", metavar="{inspect,verify,hash,diff,convert}")
    _add_inspect(commands)
    _add_verify_and_hash(commands)
    _add_diff(commands)
    _add_convert(commands)
    for command in commands.choices.values():
        command.add_argument(
            "--token",
            default=None,
            help="bearer token sent to the origin of an http(s) URL given (never elsewhere)",
        )
    return parser


def _add_inspect(commands: _Commands) -> None:
    from ._inspect import run_inspect

    inspect = commands.add_parser("inspect", help="list the tensors of a checkpoint, with samples")
    inspect.add_argument("path", help=_FORMATS)
    inspect.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    inspect.add_argument("--samples", type=_samples, default=1024, help="samples per tensor")
    inspect.add_argument("--strategy", choices=("head", "spread"), default="head")
    inspect.add_argument(
        "--full", action="store_true", help="exact statistics over every element (reads all)"
    )
    inspect.add_argument(
        "--group", action="store_true", help="fold names differing in layer numbers"
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON document")
    inspect.add_argument(
        "--full-metadata",
        action="store_true",
        help="print metadata arrays whole (default: length and first items)",
    )
    _add_jobs(inspect)
    inspect.set_defaults(run=run_inspect)


def _add_verify_and_hash(commands: _Commands) -> None:
    from ._hash import run_hash
    from ._verify import run_verify

    verify = commands.add_parser(
        "verify", help="validate a checkpoint, scan every element, check a manifest"
    )
    verify.add_argument("path", help=_FORMATS)
    verify.add_argument(
        "--manifest", metavar="FILE", help="output of 'strided hash' to check the digests against"
    )
    _add_jobs(verify, scheduler=True)
    verify.set_defaults(run=run_verify)

    hashing = commands.add_parser("hash", help="content digests of every tensor and the whole")
    hashing.add_argument("path", help=_FORMATS)
    hashing.add_argument("--json", action="store_true", help="print one JSON document")
    _add_jobs(hashing, scheduler=True)
    hashing.set_defaults(run=run_hash)


def _add_diff(commands: _Commands) -> None:
    from ._diff import run_diff

    diff = commands.add_parser("diff", help="compare two checkpoints tensor by tensor, exactly")
    diff.add_argument("path", metavar="A", help=_FORMATS)
    diff.add_argument("other", metavar="B", help=_FORMATS)
    diff.add_argument("--atol", type=_tolerance, default=0.0, help="absolute tolerance")
    diff.add_argument("--rtol", type=_tolerance, default=0.0, help="relative tolerance (of B)")
    diff.add_argument(
        "--ulp", type=_ulps, default=None, help="floats also match within N representable values"
    )
    diff.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    diff.add_argument(
        "--ignore-metadata", action="store_true", help="compare tensors only, not metadata"
    )
    diff.add_argument("--json", action="store_true", help="print one JSON document")
    _add_jobs(diff, scheduler=True)
    diff.set_defaults(run=run_diff)


def _add_convert(commands: _Commands) -> None:
    from ._convert import run_convert

    convert = commands.add_parser(
        "convert", help="convert a checkpoint to safetensors (file or shards), .npy or .json"
    )
    convert.add_argument("path", metavar="SRC", help=_FORMATS)
    convert.add_argument(
        "dst", metavar="DST", help="*.safetensors, *.npy, *.json, or a folder (--max-shard-size)"
    )
    convert.add_argument(
        "--dtype",
        type=_float_dtype,
        default=None,
        help="convert floating tensors to this float dtype (integers and BOOL stay as they are)",
    )
    convert.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    convert.add_argument(
        "--max-shard-size",
        type=_size,
        default=None,
        metavar="SIZE",
        help="write a Hugging Face shard folder, shards at most SIZE (5GB, 500MB, 2GiB)",
    )
    _add_jobs(convert)
    convert.set_defaults(run=run_convert)


def _add_jobs(command: argparse.ArgumentParser, scheduler: bool = False) -> None:
    command.add_argument(
        "--jobs", type=_jobs, default=1, metavar="N", help="processes to use (default 1)"
    )
    if scheduler:
        command.add_argument(
            "--scheduler",
            type=_scheduler,
            default=None,
            metavar="ADDRESS",
            help="run on a Dask cluster: tcp://host:8786, or local:N for N local workers "
            "(needs strided[dask]; workers open the files by path)",
        )


def _jobs(text: str) -> int:
    return _integer(text, 1, 1024)


def _scheduler(text: str) -> str:
    if text.startswith("local:"):
        return f"local:{_jobs(text[len('local:') :])}"
    if not text or text != text.strip():
        raise argparse.ArgumentTypeError(f"not a scheduler address: {text!r}")
    return text


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, found {text!r}")
    return value


def _ulps(text: str) -> int:
    return _integer(text, 0)


def _size(text: str) -> int:
    from ..io._shards import parse_size

    try:
        return parse_size(text)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _samples(text: str) -> int:
    return _integer(text, 0, MAX_INSPECTION_SAMPLES)


def _integer(text: str, low: int, high: int | None = None) -> int:
    """``text`` as an int in ``[low, high]`` (no upper bound without ``high``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if high is None and value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}")
    if high is not None and not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
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
