"""The ``strided`` command line: inspect, verify and convert tensor files.

Exit status: 0 on success, 1 on bad input (one line on stderr naming the file and the
problem, never a traceback), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import IO, Any

from ._dtype import DType
from ._errors import DataError, DTypeError
from ._limits import MAX_INSPECTION_SAMPLES
from ._scalar import Scalar
from ._sources import Entry, Source, open_source
from ._tensor import Tensor

__all__ = ["main"]


class _Failure(Exception):
    """A problem with one file: printed as one line, exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also used by ``python -m strided``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(
            "strided: error: a sub-command is required (inspect, verify, convert)", file=sys.stderr
        )
        return 2
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # The reader went away (``strided inspect ... | head``): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _Failure as failure:
        print(f"strided: {failure}", file=sys.stderr)
        return 1
    except (DataError, OSError, UnicodeError) as error:
        print(f"strided: {_with_path(args.path, error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("strided: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strided", description="Inspect, verify and convert tensor files."
    )
    commands = parser.add_subparsers(dest="command", metavar="{inspect,verify,convert}")

    inspect = commands.add_parser("inspect", help="list the tensors of a file, with samples")
    inspect.add_argument("path", help="safetensors, shard directory, index, GGUF, .npy or .json")
    inspect.add_argument("--name", default="*", help="only tensors whose name matches this glob")
    inspect.add_argument("--samples", type=_samples, default=1024, help="samples per tensor")
    inspect.add_argument("--strategy", choices=("head", "spread"), default="head")
    inspect.add_argument(
        "--group", action="store_true", help="fold names differing in layer numbers"
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON document")
    inspect.set_defaults(run=_inspect)

    verify = commands.add_parser("verify", help="validate a file and scan every element")
    verify.add_argument("path")
    verify.set_defaults(run=_verify)

    convert = commands.add_parser("convert", help="convert between safetensors, .npy and .json")
    convert.add_argument("path", metavar="SRC")
    convert.add_argument("dst", metavar="DST")
    convert.add_argument("--dtype", type=_dtype, default=None, help="convert values exactly")
    convert.set_defaults(run=_convert)
    return parser


def _samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= MAX_INSPECTION_SAMPLES:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_INSPECTION_SAMPLES}")
    return value


def _dtype(text: str) -> DType:
    try:
        return DType.parse(text)
    except DataError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
        if error.filename is not None:
            text = f"{os.fsdecode(error.filename)}: {text}"
    return " ".join(text.split())


def _with_path(path: str, error: BaseException) -> str:
    """One line naming ``path`` once (readers already start their messages with it)."""
    text = _one_line(error)
    return text if text.startswith(path) else f"{path}: {text}"


# -- inspect ------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    from ._inspect import TensorInspectionOptions

    source = open_source(args.path)
    options = TensorInspectionOptions(max_samples=args.samples, strategy=args.strategy)
    rows = []
    for entry in source:
        if not fnmatch.fnmatchcase(entry.name, args.name):
            continue
        rows.append(_summarize(source, entry, options))
    if args.group:
        rows = _group(rows)
    totals = {
        "tensors": sum(row["count"] for row in rows),
        "parameters": sum(row["numel"] for row in rows),
        "bytes": sum(row["bytes"] for row in rows),
    }
    document = {
        "path": args.path,
        "format": source.format,
        "metadata": source.metadata,
        "tensors": rows,
        "totals": totals,
    }
    if args.json:
        print(json.dumps(_json_safe(document), indent=1, allow_nan=False))
    else:
        _print_table(document)
    return 0


def _summarize(source: Source, entry: Entry, options: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": entry.name,
        "dtype": entry.dtype,
        "shape": list(entry.shape),
        "numel": entry.shape.numel,
        "bytes": entry.byte_len,
        "count": 1,
    }
    if not entry.readable:
        return row
    found = source.tensor(entry.name).inspect(options)
    row.update(
        sampled=found.sampled,
        min=None if found.min is None else str(found.min),
        max=None if found.max is None else str(found.max),
        mean=found.mean,
        nan=found.nan_count,
        inf=found.inf_count,
        zeros=found.zero_count,
    )
    return row


_LAYER_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)|(?<=_)\d+(?=\.)")


def _group(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold rows whose names differ only in layer numbers (``layers.#.mlp.weight  ×6``)."""
    groups: dict[tuple[str, str, tuple[int, ...]], dict[str, Any]] = {}
    for row in rows:
        key = (_LAYER_NUMBER.sub("#", row["name"]), row["dtype"], tuple(row["shape"]))
        if key not in groups:
            groups[key] = dict(row, name=key[0], count=0, numel=0, bytes=0)
            for stat in ("sampled", "nan", "inf", "zeros"):
                if stat in row:
                    groups[key][stat] = 0
            groups[key]["mean"] = None
        group = groups[key]
        group["count"] += 1
        group["numel"] += row["numel"]
        group["bytes"] += row["bytes"]
        if row.get("mean") is not None:
            # The group's mean weighs each member's sample mean by its sample count.
            weight = group.get("_weight", 0) + row["sampled"]
            previous = 0.0 if group["mean"] is None else group["mean"]
            group["mean"] = previous + (row["mean"] - previous) * row["sampled"] / weight
            group["_weight"] = weight
        for stat in ("sampled", "nan", "inf", "zeros"):
            if stat in row:
                group[stat] += row[stat]
        group["min"] = _extreme(group.get("min"), row.get("min"), row["dtype"], min)
        group["max"] = _extreme(group.get("max"), row.get("max"), row["dtype"], max)
    for group in groups.values():
        group.pop("_weight", None)
    return list(groups.values())


def _extreme(a: str | None, b: str | None, dtype_name: str, pick: Any) -> str | None:
    """The smaller (``min``) or larger (``max``) of two canonical scalar texts, exactly.

    Values are compared as exact Scalars of their dtype (I64 extremes do not collapse
    into one float); between zeros, -0.0 counts as the smaller, as inspection does.
    """
    if a is None or b is None:
        return a if b is None else b
    dtype = DType.parse(dtype_name)

    def key(text: str) -> tuple[Any, bool]:
        value = Scalar.parse(dtype, text).value
        return value, math.copysign(1.0, value) > 0 if isinstance(value, float) else True

    return pick(a, b, key=key)  # type: ignore[no-any-return]


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as canonical strings and bytes/others as text.

    So ``--json`` always prints strict JSON (no ``NaN`` or ``Infinity`` tokens). Nesting
    is bounded: metadata is at most a list of lists (GGUF), rows are flat dicts.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _print_table(document: dict[str, Any]) -> None:
    header = ("name", "dtype", "shape", "bytes", "min", "max", "mean", "nan", "inf")
    lines = [header]
    for row in document["tensors"]:
        name = row["name"] + (f"  ×{row['count']}" if row["count"] > 1 else "")
        mean = row.get("mean")
        lines.append(
            (
                name,
                row["dtype"],
                "[" + ", ".join(str(d) for d in row["shape"]) + "]",
                _bytes(row["bytes"]),
                _text(row.get("min")),
                _text(row.get("max")),
                "-" if mean is None else f"{mean:.6g}",
                _text(row.get("nan")),
                _text(row.get("inf")),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"{document['path']} ({document['format']})")
    for key, value in document["metadata"].items():
        print(f"  {key}: {_short(value)}")
    for line in lines:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
    totals = document["totals"]
    print(
        f"{totals['tensors']} tensors, {totals['parameters']:,} parameters, "
        f"{_bytes(totals['bytes'])}"
    )


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _short(value: object, limit: int = 80) -> str:
    text = repr(value) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


# -- verify -------------------------------------------------------------------------------


_CHUNK = 1 << 22  # elements per scan step: bounded memory for NaN/inf checks


def _verify(args: argparse.Namespace) -> int:
    from ._progress import Progress

    source = open_source(args.path)
    total = sum(entry.byte_len for entry in source)
    problems = []
    skipped = []
    done = 0
    with Progress(total, "verify") as progress:
        for entry in source:
            try:
                tensor = source.tensor(entry.name)
            except DTypeError:
                # Structure is validated; only the values of this type cannot be decoded.
                skipped.append(f"{entry.name}: {entry.dtype} values not scanned")
                continue
            except DataError as error:
                raise _Failure(f"{args.path}: tensor {entry.name!r}: {_one_line(error)}") from None
            nan, inf = _scan(tensor, lambda scanned, base=done: progress.update(base + scanned))
            done += entry.byte_len
            progress.update(done)
            if nan or inf:
                problems.append(f"{entry.name}: {nan} NaN, {inf} inf")
    for line in problems + skipped:
        print(line)
    state = "clean" if not problems else f"{len(problems)} tensors with NaN or inf"
    print(f"{args.path}: {len(source.entries)} tensors, {_bytes(total)}: {state}")
    return 0 if not problems else 1


def _scan(tensor: Tensor, report: Any) -> tuple[int, int]:
    """NaN and infinity counts, scanning blocks of whole rows of the view in place.

    Blocks follow the first axis, so a strided view (a Fortran-order ``.npy``, say) is
    never copied whole; each block's temporaries stay near ``_CHUNK`` elements.
    """
    import numpy as np

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


# -- convert ------------------------------------------------------------------------------


def _convert(args: argparse.Namespace) -> int:
    from ._progress import Progress
    from ._sources import detect_format

    target = _target_format(args.dst)
    source = open_source(args.path)
    if detect_format(args.path) == "gguf":
        raise _Failure(f"{args.path}: convert reads safetensors, .npy and .json, not GGUF")
    tensors: dict[str, Tensor] = {}
    done = 0
    with Progress(sum(entry.byte_len for entry in source), "convert") as progress:
        for entry in source:
            try:
                tensor = source.tensor(entry.name)
                if args.dtype is not None and tensor.dtype is not args.dtype:
                    tensor = tensor.convert(args.dtype)
            except DataError as error:
                raise _Failure(f"{args.path}: tensor {entry.name!r}: {_one_line(error)}") from None
            tensors[entry.name] = tensor
            done += entry.byte_len
            progress.update(done)
    try:
        _write(target, args.dst, tensors, source.metadata)
    except (DataError, OSError) as error:
        raise _Failure(f"{args.dst}: {_one_line(error)}") from None
    print(f"{args.path} -> {args.dst}: {len(tensors)} tensors")
    return 0


def _target_format(path: str) -> str:
    lowered = path.lower()
    for suffix in ("safetensors", "npy", "json"):
        if lowered.endswith("." + suffix):
            return suffix
    raise _Failure(f"{path}: the destination must end in .safetensors, .npy or .json")


def _write(kind: str, path: str, tensors: dict[str, Tensor], metadata: dict[str, Any]) -> None:
    from .io import save_npy, save_safetensors
    from .io._common import atomic_write

    if kind == "safetensors":
        text_metadata = {k: v for k, v in metadata.items() if isinstance(v, str)}
        save_safetensors(path, tensors, metadata=text_metadata or None)
        return
    if len(tensors) != 1:
        raise _Failure(f"{path}: .{kind} holds one tensor; the source has {len(tensors)}")
    (tensor,) = tensors.values()
    if kind == "npy":
        save_npy(path, tensor)
    else:
        text = tensor.to_json().encode()

        def write(handle: IO[bytes]) -> None:
            handle.write(text)

        atomic_write(path, write)
