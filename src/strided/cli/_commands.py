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
    "add_verify_and_hash",
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


def add_verify_and_hash(
    commands: Any,
    command: Callable[..., argparse.ArgumentParser],
    path_help: str,
    helpers: tuple[Callable[..., None], Callable[..., None], Callable[..., None]],
    run_verify: Runner,
    run_hash: Runner,
) -> None:
    """Add ``verify`` and ``hash`` with the command line's helpers (``--jobs``,
    ``--allow-expanded``, ``--lenient``) and the functions that run them."""
    add_jobs, add_expanded, add_lenient = helpers
    verify = command(
        commands,
        "verify",
        "validate a checkpoint, scan every element, check a manifest",
        "Checks the structure, then scans every element for NaN and infinity; with\n"
        "--manifest also checks every digest against the output of 'strided hash'.",
        "strided verify model.safetensors --manifest model.sha256",
        "exit status: 0 clean, 1 a problem found or bad input, 2 bad usage.",
    )
    verify.add_argument("path", metavar="PATH", help=path_help)
    verify.add_argument(
        "--manifest", metavar="FILE", help="output of 'strided hash' to check the digests against"
    )
    _add_name(verify, "with --manifest only its lines matching it are expected")
    verify.add_argument("--json", action="store_true", help="print one JSON document")
    add_allow_nonfinite(verify)
    add_skip_unreadable(verify, "with --manifest their stored bytes' digests are checked")
    add_jobs(verify, scheduler=True)
    add_expanded(verify)
    add_lenient(verify)
    verify.set_defaults(run=run_verify)

    hashing = command(
        commands,
        "hash",
        "SHA-256 content digests of every tensor and of the whole checkpoint",
        "Prints 'DIGEST  NAME' per tensor (the sha256sum layout, names sorted by their\n"
        "UTF-8 bytes), then 'DIGEST  *metadata*' (the metadata: every key and its\n"
        "canonical value text, sorted; 'format', 'general.alignment' and 'split.*' left\n"
        "out, and a value's stored type does not count), then 'DIGEST  *checkpoint*'\n"
        "(every tensor's name and digest). Neither depends on the file format, the shard\n"
        "split or the tensor order; the checkpoint digest ignores the metadata. Every\n"
        "tensor is read.",
        "strided hash model.safetensors > model.sha256",
    )
    hashing.add_argument("path", metavar="PATH", help=path_help)
    _add_name(hashing, "the checkpoint digest then covers them alone")
    hashing.add_argument("--json", action="store_true", help="print one JSON document")
    add_skip_unreadable(hashing, "each gets a line 'DIGEST  *unreadable*:NAME' (its stored bytes)")
    add_jobs(hashing, scheduler=True)
    add_expanded(hashing)
    add_lenient(hashing)
    hashing.set_defaults(run=run_hash)


def _add_name(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument(
        "--name",
        default="*",
        metavar="GLOB",
        help=f"only tensors whose name matches this glob (matching none is an error); {what}",
    )
