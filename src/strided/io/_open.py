"""Opening a checkpoint with the reader ``_detect``'s table picks: each row of the
table is bound by its name to its openers, one for a local path and one for a URL (a
zip is TorchScript, PyTorch or ``.npz`` by its members, JSON a shard index or a tensor
document by its first key). ``open_detected`` is the door's way in for local paths,
``open_url`` for http(s) URLs; both give a ``Reader`` (``_reader``). Every local opener
takes ``(path, copy, budget, lenient)``; ``lenient`` matters only to the readers of
pickles.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .._core.errors import FormatError
from .._core.limits import MAX_INDEX_BYTES
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
from ._reader import Reader, TensorsReader
from ._readers import DcpReader, GGUFReader, NpzReader, PyTorchReader, SafetensorsReader
from ._zip import DEFLATED, STORED, read_zip
from .gguf import folder_first_part, open_gguf_charged, open_split
from .npy import HEAD_BYTES as NPY_HEAD_BYTES
from .npy import load_npy
from .npz import open_npz
from .pickle import judge_log, object_pickle_start, record_pickle
from .remote import RemoteStorage, open_remote, remote_gguf, remote_safetensors
from .safetensors import SafetensorsFile, _index_shards, _Shard, open_safetensors
from .torch import is_torchscript, open_dcp, open_pytorch, open_torchscript

__all__ = ["OPENERS", "Opener", "open_detected", "open_url"]

_INDEX_KEYS = (b'"metadata"', b'"weight_map"')
_TENSOR_KEYS = (b'"dtype"', b'"shape"', b'"data"')  # the keys of a strided tensor document
_FIRST_KEY_BYTES = 4096  # whitespace allowed before an index's first key


def _open_gguf(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
    # The first part of a split model opens every part (``gguf._split``).
    return GGUFReader(where, open_split(open_gguf_charged(where, copy, budget), copy, budget))


def _open_safetensors(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
    return SafetensorsReader(where, SafetensorsFile(where, [_Shard(where, budget)], copy))


def _open_zip(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
    with open_regular(where) as file:
        raw = map_file(file, file_size(file), where)
    members = read_zip(raw, where, methods=frozenset({STORED, DEFLATED}))
    if is_torchscript(members):
        script = open_torchscript(where, copy, budget=budget, lenient=lenient)
        return PyTorchReader(where, script, "torchscript")
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in members):
        return _open_pickle(where, copy, budget, lenient)
    return NpzReader(where, open_npz(where, copy, budget=budget))


def _open_npy(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
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
    return TensorsReader(where, "npy", {Path(where).stem: load_npy(where, copy=copy)})


def _open_pickle(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
    with open_regular(where) as file:
        head = file.read(DCP_MAGIC_BYTES)
    if DCP_MAGIC in head:  # a distributed checkpoint's .metadata: its folder is the model
        return DcpReader(where, open_dcp(where, copy, budget=budget))
    torch_file = open_pytorch(where, copy, budget=budget, lenient=lenient)
    return PyTorchReader(where, torch_file, "pytorch")


def _open_json(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(_FIRST_KEY_BYTES)
        if not _is_index(head):
            # A strided tensor document: its parser bounds the work by the text's size.
            data = head + file.read()
            return TensorsReader(where, "json", {Path(where).stem: Tensor.from_json(data)})
    check_index_size(size, where)  # at the file's size, before the index is read
    if _first_shard_format(where) == "pickle":
        torch_file = open_pytorch(where, copy, budget=budget, lenient=lenient)
        return PyTorchReader(where, torch_file, "pytorch")
    return SafetensorsReader(where, SafetensorsFile(where, _index_shards(where, budget), copy))


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


class Opener(NamedTuple):
    """How one row of ``_detect.FORMATS`` is opened: ``local(path, copy, budget,
    lenient)`` for a file, ``remote(storage)`` for a URL (None: the format is not
    range-addressable, so it is not read over HTTP)."""

    local: Callable[[str, bool, ParseBudget, bool], Reader]
    remote: Callable[[RemoteStorage], Reader] | None


def _remote_gguf(storage: RemoteStorage) -> Reader:
    return GGUFReader(storage.url, remote_gguf(storage))


def _remote_safetensors(storage: RemoteStorage) -> Reader:
    return SafetensorsReader(storage.url, remote_safetensors(storage, False))


def _remote_index(storage: RemoteStorage) -> Reader:
    # Any JSON over HTTP is read as a shard index: its reader names anything that is not.
    return SafetensorsReader(storage.url, remote_safetensors(storage, True))


# The openers of each row of ``_detect.FORMATS``, by the row's name.
OPENERS: dict[str, Opener] = {
    "gguf": Opener(_open_gguf, _remote_gguf),
    "safetensors": Opener(_open_safetensors, _remote_safetensors),
    "zip": Opener(_open_zip, None),
    "npy": Opener(_open_npy, None),
    "pickle": Opener(_open_pickle, None),
    "json": Opener(_open_json, _remote_index),
}


def open_url(url: str, token: str | None, timeout: float | tuple[float, float] | None) -> Reader:
    """Open an http(s) URL with the remote opener of the row the table picks for its
    first bytes. FormatError for a format not read over HTTP; the connection is closed
    when the open fails."""
    storage = open_remote(url, token, timeout)
    try:
        head = storage.read(0, min(storage.size, HEAD_BYTES))
        kind = detect(head, storage.size, url).name
        remote = OPENERS[kind].remote
        if remote is None:
            raise FormatError(
                f"{url}: over HTTP, strided reads safetensors files, safetensors shard "
                f"indexes and GGUF files (this is {kind})"
            )
        return remote(storage)
    except BaseException:
        storage.close()
        raise


def open_detected(where: str, copy: bool, budget: ParseBudget, lenient: bool = False) -> Reader:
    """Open a local file or folder with the reader the table picks for it (see
    ``_detected``); the reader's ``imports`` are every global the open's pickles named,
    judged, from whichever member they came (``.npz``/``.npy`` object arrays too)."""
    reader = _detected(where, copy, budget, lenient)
    reader.imports = judge_log(budget.imports)
    return reader


def _detected(where: str, copy: bool, budget: ParseBudget, lenient: bool) -> Reader:
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
            return DcpReader(where, open_dcp(where, copy, budget=budget))
        names = sorted(os.listdir(where))
        found = _checkpoint_files(where, names)
        indexes = [path for path, index in found.items() if index]
        if len(found) == 1 or len(indexes) == 1:
            # One file, or one shard index naming the rest (pytorch_model.bin.index.json).
            return _detected((indexes or list(found))[0], copy, budget, lenient)
        if folder_format(names) == "gguf":
            return _open_gguf(folder_first_part(where), copy, budget, lenient)
        if found and not any(name.endswith(".safetensors") for name in names):
            shown = ", ".join(repr(os.path.basename(path)[:80]) for path in list(found)[:4])
            more = f" and {len(found) - 4} more" if len(found) > 4 else ""
            raise FormatError(
                f"{where}: the folder holds {len(found)} checkpoint files ({shown}{more}); "
                "open one of them"
            )
        return SafetensorsReader(where, open_safetensors(where, copy))
    with open_regular(where) as file:
        size = file_size(file)
        head = file.read(HEAD_BYTES)
    return OPENERS[detect(head, size, where).name].local(where, copy, budget, lenient)


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
