"""Opening a local checkpoint with the reader ``_detect``'s table picks: one opener per
row of the table, bound by the row's name (a zip is TorchScript, PyTorch or ``.npz`` by
its members, JSON a shard index or a tensor document by its first key), and
``open_detected``, the door's way in for local paths. Every opener takes ``(path, copy,
budget, lenient)``; ``lenient`` matters only to the readers of pickles.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .._core.errors import FormatError
from .._core.limits import MAX_INDEX_BYTES
from .._core.shape import Shape
from .._kernels.strict_json import loads_strict
from .._tensor.tensor import Tensor
from ._budget import ParseBudget
from ._common import check_index_size, file_size, map_file, open_regular
from ._detect import (
    DCP_MAGIC,
    DCP_MAGIC_BYTES,
    DCP_METADATA,
    HEAD_BYTES,
    JSON_SPACE,
    detect,
    folder_format,
    matching,
)
from ._object_pickles import object_pickle_start, record_pickle
from ._zip import DEFLATED, STORED, read_zip
from .dcp import open_dcp
from .gguf import open_gguf
from .gguf_split import folder_first_part, open_split
from .npy import HEAD_BYTES as NPY_HEAD_BYTES
from .npy import load_npy
from .npz import open_npz
from .pytorch import open_pytorch
from .safetensors import SafetensorsFile, _index_shards, _Shard, open_safetensors
from .torchscript import is_torchscript, open_torchscript

__all__ = ["OPENERS", "Opened", "SingleReader", "open_detected"]

_INDEX_KEYS = (b'"metadata"', b'"weight_map"')
_TENSOR_KEYS = (b'"dtype"', b'"shape"', b'"data"')  # the keys of a strided tensor document
_FIRST_KEY_BYTES = 4096  # whitespace allowed before an index's first key


class Opened(NamedTuple):
    """What an opener returns: the format's name for the door, and its reader."""

    kind: str
    reader: Any


def _open_gguf(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    # The first part of a split model opens every part (``gguf_split``).
    return Opened("gguf", open_split(open_gguf(where, copy=copy, budget=budget), copy, budget))


def _open_safetensors(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    return Opened("safetensors", SafetensorsFile(where, [_Shard(where, budget)], copy))


def _open_zip(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    with open_regular(where) as file:
        raw = map_file(file, file_size(file), where)
    members = read_zip(raw, where, methods=frozenset({STORED, DEFLATED}))
    if is_torchscript(members):
        return Opened("pytorch", open_torchscript(where, copy, budget=budget, lenient=lenient))
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in members):
        return _open_pickle(where, copy, budget, lenient)
    return Opened("npz", open_npz(where, copy, budget=budget))


def _open_npy(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(NPY_HEAD_BYTES)
        start = object_pickle_start(head)
        if start is not None and start <= size:
            # np.load(allow_pickle=True) would run it: record what it names first (the
            # array itself is refused below, as strided holds no object arrays).
            raw = map_file(file, size, where)
            data = memoryview(raw[start:])  # type: ignore[arg-type]
            record_pickle(data, Path(where).name, f"{where}: pickle", budget)
    return Opened("npy", SingleReader(Path(where).stem, load_npy(where, copy=copy)))


def _open_pickle(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    with open_regular(where) as file:
        head = file.read(DCP_MAGIC_BYTES)
    if DCP_MAGIC in head:  # a distributed checkpoint's .metadata: its folder is the model
        return Opened("pytorch", open_dcp(where, copy, budget=budget))
    return Opened("pytorch", open_pytorch(where, copy, budget=budget, lenient=lenient))


def _open_json(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Opened:
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(_FIRST_KEY_BYTES)
        if not _is_index(head):
            # A strided tensor document: its parser bounds the work by the text's size.
            data = head + file.read()
            return Opened("json", SingleReader(Path(where).stem, Tensor.from_json(data)))
    check_index_size(size, where)  # at the file's size, before the index is read
    if _first_shard_format(where) == "pickle":
        return Opened("pytorch", open_pytorch(where, copy, budget=budget, lenient=lenient))
    return Opened("safetensors", SafetensorsFile(where, _index_shards(where, budget), copy))


def _is_index(head: bytes) -> bool:
    """Whether a JSON text's first key is one only a shard index has."""
    body = head.lstrip(JSON_SPACE)[1:].lstrip(JSON_SPACE)
    return body.startswith(_INDEX_KEYS)


def _first_shard_format(index: str) -> str:
    """The table's name for the format of the index's first shard (by its first bytes).

    ``"safetensors"`` when the shard cannot be found or read: the safetensors index
    reader then validates the whole index and every shard and names the problem.
    """
    with open_regular(index) as file:
        parsed = loads_strict(file.read(MAX_INDEX_BYTES + 1), index, 16)
    shards = parsed.get("weight_map") if type(parsed) is dict else None
    first = next(iter(shards.values()), None) if type(shards) is dict else None
    if type(first) is not str or os.path.basename(first) != first or first in ("", ".", ".."):
        return "safetensors"
    try:
        with open_regular(os.path.join(os.path.dirname(index), first)) as file:
            size = file_size(file)
            head = file.read(HEAD_BYTES)
    except OSError:
        return "safetensors"
    found = matching(head, size)
    return "pickle" if found is not None and found.name in ("zip", "pickle") else "safetensors"


# The opener of each row of ``_detect.FORMATS``, by the row's name.
OPENERS: dict[str, Callable[[str, bool, ParseBudget, bool], Opened]] = {
    "gguf": _open_gguf,
    "safetensors": _open_safetensors,
    "zip": _open_zip,
    "npy": _open_npy,
    "pickle": _open_pickle,
    "json": _open_json,
}


def open_detected(where: str, copy: bool, budget: ParseBudget, lenient: bool = False) -> Opened:
    """Open a local file or folder with the reader the table picks for it.

    A folder holding ``.metadata`` is a distributed checkpoint, one holding the parts of
    a split GGUF model is that model (``_detect.folder_format``), any other a set of
    ``*.safetensors`` shards. ``lenient`` reaches the readers of ``torch.save`` pickles
    (unknown globals become inert records); a distributed checkpoint's ``.metadata`` is
    always read by its own allow-list, and the other formats have no globals. A path
    that cannot be opened raises its OSError unchanged; content the chosen reader
    refuses is its DataError.
    """
    if os.path.isdir(where):
        if os.path.isfile(os.path.join(where, DCP_METADATA)):
            return Opened("pytorch", open_dcp(where, copy, budget=budget))
        names = sorted(os.listdir(where))
        found = _checkpoint_files(where, names)
        indexes = [path for path, index in found.items() if index]
        if len(found) == 1 or len(indexes) == 1:
            # One file, or one shard index naming the rest (pytorch_model.bin.index.json).
            return open_detected((indexes or list(found))[0], copy, budget, lenient)
        if folder_format(names) == "gguf":
            return _open_gguf(folder_first_part(where), copy, budget, lenient)
        if found and not any(name.endswith(".safetensors") for name in names):
            shown = ", ".join(repr(os.path.basename(path)[:80]) for path in list(found)[:4])
            more = f" and {len(found) - 4} more" if len(found) > 4 else ""
            raise FormatError(
                f"{where}: the folder holds {len(found)} checkpoint files ({shown}{more}); "
                "open one of them"
            )
        return Opened("safetensors", open_safetensors(where, copy))
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(HEAD_BYTES)
    return OPENERS[detect(head, size, where).name](where, copy, budget, lenient)


def _checkpoint_files(folder: str, names: list[str]) -> dict[str, bool]:
    """The files in ``folder`` that the table reads as tensors, by their first bytes,
    each with whether it is a shard index.

    A shard index counts (it names the tensors); other JSON -- ``config.json``,
    ``tokenizer.json``, ``generation_config.json`` -- does not: only a JSON text whose
    first key is an index's or a strided tensor document's is a checkpoint. Files that
    cannot be read are skipped (opening the one that is left reports on its own).
    """
    found: dict[str, bool] = {}
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        try:
            with open_regular(path) as file:
                size = file_size(file)
                head = file.read(_FIRST_KEY_BYTES)
        except OSError:
            continue
        entry = matching(head[:HEAD_BYTES], size)
        if entry is None:
            continue
        index = entry.name == "json" and _is_index(head)
        if entry.name == "json" and not (index or _is_tensor_document(head)):
            continue
        found[path] = index
    return found


def _is_tensor_document(head: bytes) -> bool:
    """Whether a JSON text's first key is one of a strided tensor document's."""
    body = head.lstrip(JSON_SPACE)[1:].lstrip(JSON_SPACE)
    return body.startswith(_TENSOR_KEYS)


class SingleReader:
    """One tensor already in hand (``.npy``, a strided JSON document), named ``name``."""

    __slots__ = ("name", "tensor")

    def __init__(self, name: str, tensor: Tensor) -> None:
        self.name = name
        self.tensor = tensor

    @property
    def metadata(self) -> dict[str, Any]:
        """Always empty: these files carry no metadata."""
        return {}

    def keys(self) -> list[str]:
        """The one name."""
        return [self.name]

    def info(self, name: str) -> tuple[str, Shape]:
        """The tensor's dtype name and shape."""
        return self.tensor.dtype.name, self.tensor.shape

    def get(self, name: str) -> Tensor:
        """The tensor (the one name is checked by the caller)."""
        return self.tensor

    def close(self) -> None:
        """Nothing to release."""
