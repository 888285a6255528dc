"""Split GGUF models (llama.cpp's ``gguf-split`` layout) opened as one collection.

A model split in N parts is the files ``NAME-00001-of-0000N.gguf`` ...
``NAME-0000N-of-0000N.gguf`` in one folder. Part k (counting from 0) carries the keys
``split.no`` = k, ``split.count`` = N and ``split.tensors.count`` (the tensors of all
parts together); the first part also carries every other key/value of the model, so
the collection's metadata is the first part's.

Opening the first part (or a folder holding one split model) opens every part and
checks that they agree: each part exists, says it is part k of N, counts the same
total, no tensor name appears in two parts and the parts hold exactly the total. Any
disagreement is a FormatError naming the part. Opening another part alone as a
checkpoint is a FormatError pointing at the first part; ``open_gguf`` still opens any
single file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..._core.errors import FormatError, IndexingError
from ..._core.memory import guard_methods
from ..._core.shape import Shape
from ..._tensor.inspect import TensorInspection, TensorInspectionOptions
from ..._tensor.tensor import Tensor
from .._budget import ParseBudget
from .._common import TensorNames
from ._file import GGUFFile, open_gguf_charged

__all__ = ["SPLIT_KEYS", "SplitGGUF", "folder_first_part", "open_split", "part_name", "part_of"]

SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS = "split.no", "split.count", "split.tensors.count"
SPLIT_KEYS = (SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS)
_PART = re.compile(r"(.+)-([0-9]{5})-of-([0-9]{5})\.gguf", re.DOTALL)


def part_name(stem: str, index: int, count: int) -> str:
    """``NAME-00001-of-00003.gguf`` for part ``index`` (from 0) of ``count``."""
    return f"{stem}-{index + 1:05d}-of-{count:05d}.gguf"


def part_of(path: str) -> tuple[str, int, int] | None:
    """``(stem, index from 0, count)`` when the file name follows the split pattern."""
    found = _PART.fullmatch(os.path.basename(path))
    if found is None:
        return None
    return found.group(1), int(found.group(2)) - 1, int(found.group(3))


def split_facts(handle: GGUFFile) -> tuple[int, int, int] | None:
    """``(split.no, split.count, split.tensors.count)`` of a part; None for a file that
    is not split (no ``split.count``, or a count of 1). FormatError for a part whose
    split keys are missing or are not integers."""
    metadata = handle.metadata
    count = metadata.get(SPLIT_COUNT)
    if count is None or count == 1:
        return None
    values = []
    for key in SPLIT_KEYS:
        value = metadata.get(key)
        if type(value) is not int:
            raise FormatError(
                f"{handle.path}: a split GGUF part needs the integer key {key}, found {value!r}"
            )
        values.append(value)
    number, total, tensors = values
    if not 0 <= number < total:
        raise FormatError(f"{handle.path}: {SPLIT_NO} {number} is not below {SPLIT_COUNT} {total}")
    return number, total, tensors


def folder_first_part(folder: str) -> str:
    """The file to open for a folder of GGUF files: the first part of the one split
    model it holds, or its one GGUF file. FormatError when that is ambiguous."""
    names = sorted(name for name in os.listdir(folder) if name.endswith(".gguf"))
    firsts = [name for name in names if (part_of(name) or ("", -1, 0))[1] == 0]
    if len(firsts) == 1:
        return os.path.join(folder, firsts[0])
    if not firsts and len(names) == 1:
        return os.path.join(folder, names[0])
    shown = ", ".join(repr(name[:80]) for name in (firsts or names)[:4])
    raise FormatError(
        f"{folder}: a folder of GGUF files must hold one model (one first part "
        f"NAME-00001-of-0000N.gguf, or one file); found {shown}"
    )


def open_split(first: GGUFFile, copy: bool, budget: ParseBudget) -> GGUFFile | SplitGGUF:
    """``first`` itself when it is not split; else every part of its model, checked."""
    facts = split_facts(first)
    if facts is None:
        return first
    number, count, total = facts
    where = first.path
    named = part_of(where)
    if number != 0:
        hint = f" ({part_name(named[0], 0, count)})" if named else ""
        raise FormatError(
            f"{where}: part {number + 1} of a GGUF model split in {count}; open its "
            f"first part{hint}"
        )
    if named is None or named[1:] != (0, count):
        raise FormatError(
            f"{where}: the first part of a GGUF model split in {count} must be named "
            f"NAME-00001-of-{count:05d}.gguf to find the other parts"
        )
    folder = os.path.dirname(where)
    parts = [first]
    try:
        for index in range(1, count):
            path = os.path.join(folder, part_name(named[0], index, count))
            if not os.path.exists(path):
                raise FormatError(f"{path}: part {index + 1} of {count} of {where} is missing")
            part = open_gguf_charged(path, copy, budget)
            parts.append(part)
            if split_facts(part) != (index, count, total):
                raise FormatError(
                    f"{path}: says it is part {_described(part)}, expected part "
                    f"{index + 1} of {count} with {total} tensors in all"
                )
        return SplitGGUF(parts, total)
    except BaseException:
        for part in parts[1:]:
            part.close()
        raise


def _described(part: GGUFFile) -> str:
    try:
        facts = split_facts(part)
    except FormatError as error:
        return f"? ({error})"
    if facts is None:
        return "1 of 1 (no split keys)"
    return f"{facts[0] + 1} of {facts[1]} with {facts[2]} tensors in all"


@guard_methods
class SplitGGUF(TensorNames):
    """The parts of a split GGUF model as one collection, with ``GGUFFile``'s methods.

    Tensor names run through the parts in order; ``metadata`` and ``metadata_types``
    are the first part's; ``path`` and ``version`` are the first part's. Each method
    asks the part holding the tensor. ``close()`` closes every part.
    """

    __slots__ = ("_parts",)

    _by_name: dict[str, GGUFFile]

    def __init__(self, parts: list[GGUFFile], total: int) -> None:
        """Private: made by ``open_split``; FormatError for a duplicate or a wrong total."""
        self._parts = parts
        self._by_name = {}
        for part in parts:
            for name in part.keys():
                if name in self._by_name:
                    raise FormatError(
                        f"{part.path}: tensor {name!r} is also in {self._by_name[name].path}"
                    )
                self._by_name[name] = part
        if len(self._by_name) != total:
            raise FormatError(
                f"{parts[0].path}: the {len(parts)} parts hold {len(self._by_name)} tensors, "
                f"split.tensors.count says {total}"
            )

    @property
    def path(self) -> str:
        """The first part's path."""
        return self._parts[0].path

    @property
    def parts(self) -> list[str]:
        """The paths of every part, in order."""
        return [part.path for part in self._parts]

    @property
    def version(self) -> int:
        """The first part's GGUF version."""
        return self._parts[0].version

    @property
    def metadata(self) -> dict[str, Any]:
        """The first part's key/values (a fresh copy)."""
        return self._parts[0].metadata

    @property
    def metadata_types(self) -> dict[str, str]:
        """The first part's key/value types."""
        return self._parts[0].metadata_types

    def _part(self, name: str) -> GGUFFile:
        found = self._by_name.get(name) if type(name) is str else None
        if found is None:
            raise IndexingError(f"{self.path}: no tensor named {str(name)[:80]!r}")
        return found

    def info(self, name: str) -> tuple[str, Shape]:
        """``(ggml_type_name, shape)`` as ``GGUFFile.info``."""
        return self._part(name).info(name)

    def raw(self, name: str) -> Tensor:
        """The stored bytes, as ``GGUFFile.raw``."""
        return self._part(name).raw(name)

    def get(self, name: str, dequantize: bool = False) -> Tensor:
        """The tensor, as ``GGUFFile.get``."""
        return self._part(name).get(name, dequantize)

    def inspect(
        self, name: str, options: TensorInspectionOptions | None = None
    ) -> TensorInspection:
        """As ``GGUFFile.inspect``."""
        return self._part(name).inspect(name, options)

    def chunks(
        self, name: str, first: int = 0, last: int | None = None
    ) -> Iterator[np.ndarray[Any, Any]]:
        """As ``GGUFFile.chunks``."""
        return self._part(name).chunks(name, first, last)

    def close(self) -> None:
        """Close every part (twice is fine)."""
        super().close()
        for part in self._parts:
            part.close()

    def __repr__(self) -> str:
        return f"SplitGGUF({self.path!r}, {len(self._parts)} parts, {len(self._by_name)} tensors)"
