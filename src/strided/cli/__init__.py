"""The ``strided`` command line: inspect, verify, hash, diff and convert checkpoints.

Exit status: 0 on success, 1 on bad input (one line on stderr naming the file and the
problem, never a traceback), 2 on bad usage; ``diff`` exits 0 when the checkpoints
match, 1 when they differ and 2 on trouble. Everything printed that comes from a file
(names, metadata, messages) is escaped, so a file cannot drive the terminal.

Start-up time: this module imports only the standard library and strided's light
modules. NumPy, the readers and the job engine are imported inside the function of the
command that runs, so ``--help``, ``--version`` and usage errors answer at once. That
is the reason for every import inside a function in this module. ml_dtypes (about a
second to load on its own) comes only when a BF16 or 8-bit float NumPy type is needed
(see ``strided._dtype``), so a command on NumPy's own dtypes never loads it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .._core.errors import DataError
from .._core.limits import MAX_INSPECTION_SAMPLES, MAX_JOBS
from .._core.version import VERSION
from ._commands import add_scan, add_set_metadata, add_skip_unreadable, add_verify_and_hash
from ._merge_args import COMMANDS, add_merges, add_rename
from ._text import job_error, one_line, with_path

if TYPE_CHECKING:
    from .._core.dtype import DType

__all__ = ["main"]

_COMMANDS = ", ".join(
    ("inspect", "verify", "hash", "diff", "convert", "scan", "set-metadata", *COMMANDS)
)


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
    try:
        status = _run(args)
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
    except KeyboardInterrupt:
        print("strided: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        reported = _reported(args, error)
        if reported is None:
            raise
        message, status = reported
        print(f"strided: {message}", file=sys.stderr)
        return status
    finally:
        sys.stdout = stdout


def _run(args: argparse.Namespace) -> int:
    """Run the chosen command, with ``--token`` remembered for its URLs while it runs."""
    from ..io._http import TOKENS_VARIABLE

    remembered = os.environ.get(TOKENS_VARIABLE)
    try:
        _remember_token(args)
        return int(args.run(args))
    finally:
        if remembered is None:
            os.environ.pop(TOKENS_VARIABLE, None)
        else:
            os.environ[TOKENS_VARIABLE] = remembered


def _reported(args: argparse.Namespace, error: Exception) -> tuple[str, int] | None:
    """The one line and exit status for an error a command raised; None for a bug."""
    # Raised by the command that ran, so these modules are loaded already.
    from ..jobs._pool import EngineError, JobError
    from ._verify import CommandFailure

    if isinstance(error, CommandFailure):
        return str(error), error.status
    if isinstance(error, JobError):
        return job_error(error), 1
    if isinstance(error, EngineError):
        return one_line(error), 2
    if isinstance(error, (DataError, OSError, UnicodeError)):
        return with_path(args.path, error), 1
    return None


def _remember_token(args: argparse.Namespace) -> None:
    """``--token`` for the URLs named on the command line (worker processes see it too)."""
    if getattr(args, "token", None) is None:
        return
    from ..io._http import is_url, remember_token

    paths = args.path if isinstance(args.path, list) else [args.path]  # scan takes several
    for path in (*paths, getattr(args, "other", None)):
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


_PATH = (
    "a local path or an http(s) URL: safetensors (file, shard folder or index), GGUF, "
    ".npy, .npz, PyTorch or strided .json"
)
_EXIT = "exit status: 0 success, 1 bad input (one line on stderr), 2 bad usage."
_Commands = Any  # argparse's sub-parser action (a private class)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strided",
        description="Inspect, verify, hash, diff and convert checkpoints of every format.",
        epilog=f"{_EXIT}\n(diff: 0 the same, 1 different, 2 trouble.)\n\n"
        "'strided COMMAND --help' shows a command's options and an example.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-V", "--version", action=_Version, help="print the version of strided and exit"
    )
    commands = parser.add_subparsers(dest="command", metavar="{" + _COMMANDS.replace(" ", "") + "}")
    _add_inspect(commands)
    add_verify_and_hash(
        commands, _command, _PATH, (_add_jobs, _add_expanded, _add_lenient), _run_verify, _run_hash
    )
    _add_diff(commands)
    _add_convert(commands)
    add_scan(commands, _command, _run_scan)
    add_set_metadata(commands, _command, _run_set_metadata)
    helpers = (_add_jobs, _add_expanded, _add_lenient, _size)
    add_merges(commands, _command, *helpers, _run_merge_lora, _run_merge)
    for name, command in commands.choices.items():
        if name == "set-metadata":
            continue  # edits local files only: no URL, no token
        command.add_argument(
            "--token",
            default=None,
            help="bearer token sent to the origin of an http(s) URL given (never elsewhere)",
        )
    return parser


def _run_merge_lora(args: argparse.Namespace) -> int:
    from ._merge import run_merge_lora

    return run_merge_lora(args)


def _run_merge(args: argparse.Namespace) -> int:
    from ._merge import run_merge

    return run_merge(args)


def _run_scan(args: argparse.Namespace) -> int:
    from ._scan import run_scan

    return run_scan(args)


def _run_set_metadata(args: argparse.Namespace) -> int:
    from ._set_metadata import run_set_metadata

    return run_set_metadata(args)


def _command(
    commands: _Commands,
    name: str,
    summary: str,
    details: str,
    example: str,
    status: str = _EXIT,
) -> argparse.ArgumentParser:
    """A sub-command whose help shows its usage, what it does, its exit status and one
    example (``details`` is wrapped by hand: the formatter keeps it as written)."""
    return commands.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{details}\n\n{status}",
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add_inspect(commands: _Commands) -> None:
    inspect = _command(
        commands,
        "inspect",
        "list the tensors of a checkpoint, with samples",
        "Name, dtype, shape, bytes and a summary of sampled values per tensor, then the\n"
        "metadata and totals; reads only headers and samples (--full reads everything).\n"
        "On a terminal the table fits its width (COLUMNS): long names wrap; into a pipe\n"
        "or file every row stays on one line. --name matching no tensor is an error\n"
        "(exit 1).",
        "strided inspect model.safetensors --group",
    )
    inspect.add_argument("path", metavar="PATH", help=_PATH)
    inspect.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    inspect.add_argument(
        "--samples", type=_samples, default=1024, help="samples per tensor (default 1024)"
    )
    inspect.add_argument(
        "--strategy",
        choices=("head", "spread"),
        default="head",
        help="which elements are sampled: head (default) the first N in row-major order, "
        "spread N evenly spaced over the whole tensor",
    )
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
    _add_expanded(inspect, "with --full: ")
    _add_lenient(inspect)
    inspect.set_defaults(run=_run_inspect)


def _add_diff(commands: _Commands) -> None:
    diff = _command(
        commands,
        "diff",
        "compare two checkpoints tensor by tensor, exactly",
        "Tensors are matched by name and compared by value (exact unless --atol,\n"
        "--rtol or --ulp), whatever the formats and dtypes of the two sides.",
        "strided diff model.safetensors model.gguf --ulp 1",
        "exit status: 0 everything compared matches, 1 something differs, 2 bad usage\n"
        "or unreadable input (the diff and cmp convention).",
    )
    diff.add_argument("path", metavar="A", help=_PATH)
    diff.add_argument("other", metavar="B", help="the checkpoint to compare with (as A)")
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
    add_skip_unreadable(diff, "their stored bytes' digests are compared")
    _add_jobs(diff, scheduler=True)
    _add_expanded(diff)
    _add_lenient(diff)
    diff.set_defaults(run=_run_diff)


def _add_convert(commands: _Commands) -> None:
    convert = _command(
        commands,
        "convert",
        "convert a checkpoint to safetensors (file or shards), GGUF, .npy or .json",
        "The format of DST follows its extension. DST must not exist: an existing file\n"
        "or folder is refused unless --overwrite is given, and then replaced whole\n"
        "(an empty folder counts as absent). Atomic for every format: the output is\n"
        "written under a temporary name and renamed; a failure leaves nothing behind.\n"
        "A .gguf DST takes F32, F16, BF16 or a block type as --dtype, given to weight\n"
        "tensors of rank >= 2 as llama.cpp does (--keep exempts tensors), and with\n"
        "--max-shard-size writes llama.cpp's split parts DST-00001-of-0000N.gguf.",
        "strided convert model.gguf model.safetensors --dtype BF16",
    )
    convert.add_argument("path", metavar="SRC", help=_PATH)
    convert.add_argument(
        "dst",
        metavar="DST",
        help="*.safetensors, *.gguf, *.npy, *.json, or a folder (with a shard size)",
    )
    convert.add_argument(
        "--dtype",
        type=_float_dtype,
        default=None,
        help="convert floating tensors to this float dtype (integers and BOOL stay as they are); "
        "for .gguf also Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, TQ1_0, TQ2_0 or MXFP4",
    )
    convert.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    convert.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="GLOB",
        help="GGUF output: tensors matching this glob keep their float type (repeatable)",
    )
    convert.add_argument(
        "--max-shard-size",
        type=_size,
        default=None,
        metavar="SIZE",
        help="write a Hugging Face shard folder (GGUF: split parts), shards at most SIZE "
        "(5GB, 500MB, 2GiB)",
    )
    convert.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing DST (a file by a file, a shard folder by a shard folder)",
    )
    add_rename(convert)
    add_skip_unreadable(convert, "the readable tensors are written")
    _add_jobs(convert)
    _add_expanded(convert)
    _add_lenient(convert)
    convert.set_defaults(run=_run_convert)


# Each command's module is imported when the command runs (see the module docstring).


def _run_inspect(args: argparse.Namespace) -> int:
    from ._inspect import run_inspect

    return run_inspect(args)


def _run_verify(args: argparse.Namespace) -> int:
    from ._verify import run_verify

    return run_verify(args)


def _run_hash(args: argparse.Namespace) -> int:
    from ._hash import run_hash

    return run_hash(args)


def _run_diff(args: argparse.Namespace) -> int:
    from ._diff import run_diff

    return run_diff(args)


def _run_convert(args: argparse.Namespace) -> int:
    from ._convert import run_convert

    return run_convert(args)


class _Version(argparse.Action):
    """``--version``: prints ``strided X.Y.Z`` and exits 0 (looked up only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"strided {version()}")
        parser.exit(0)


def version() -> str:
    """The installed distribution's version, else the package's ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version("strided")
    except metadata.PackageNotFoundError:
        return VERSION


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


def _add_lenient(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--lenient",
        action="store_true",
        help="read PyTorch pickles that name globals strict mode refuses (a whole model, "
        "custom classes): they become inert records, never imported or run; a pickled "
        "nn.Module gives its state_dict tensors ('strided scan' lists the globals)",
    )


def _add_expanded(command: argparse.ArgumentParser, when: str = "") -> None:
    command.add_argument(
        "--allow-expanded",
        action="store_true",
        help=f"{when}process tensors whose logical size is more than 2^20 x their stored bytes "
        "(a PyTorch expand view): the work then costs their logical size",
    )


def _jobs(text: str) -> int:
    return _integer(text, 1, MAX_JOBS)


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


def _float_dtype(text: str) -> DType | str:
    from .._core.dtype import DType
    from ..jobs._gguf_plan import OUTPUT_TYPES

    if text.upper() in OUTPUT_TYPES and text.upper() not in DType.__members__:
        return text.upper()  # a GGUF block type
    try:
        dtype = DType.parse(text)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not dtype.is_float:
        raise argparse.ArgumentTypeError(
            f"{dtype.name} is not a float dtype; --dtype converts floating tensors only"
        )
    return dtype
