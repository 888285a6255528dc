"""NumPy ``.npz`` archives (``np.savez``, ``np.savez_compressed``), read without unpickling.

An ``.npz`` is a zip archive whose members ``NAME.npy`` are ``.npy`` files; the tensor
is named ``NAME`` (dots and slashes kept). The archive is validated by the bounded zip
reader (``_zip``: end records, zip64, central directory against local headers, no
overlapping, duplicated or encrypted members, only stored or deflated members), then
every member's ``.npy`` header by the same parser ``load_npy`` uses, when the file is
opened. A member whose name does not end in ``.npy`` is a FormatError.

Stored members (``np.savez``) are zero-copy views of the one mapping of the file.
Deflated members (``np.savez_compressed``) are inflated when read, into exactly the size
their validated header claims (header plus ``numel * itemsize`` data bytes, which the
zip directory must agree with): the header is read from the first inflated bytes (at
most the header cap), and inflating never goes past the claim, whatever the stream
holds. Big-endian and Fortran-order members give the right logical values, as
``load_npy`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import FormatError, IndexingError
from .._shape import Shape
from .._tensor import Tensor
from ._common import PathLike, TensorNames, file_size, label, map_file, open_regular
from ._zip import DEFLATED, STORED, ZipMember, inflate, inflate_head, read_zip, stored_bytes
from .npy import HEAD_BYTES, NpyHeader, check_npy_size, npy_tensor, parse_npy_header

__all__ = ["NpzFile", "load_npz", "open_npz"]

_METHODS = frozenset({STORED, DEFLATED})
_SUFFIX = ".npy"


class _Entry:
    """One member: its zip record, its validated ``.npy`` header, its message label."""

    __slots__ = ("header", "member", "where")

    def __init__(self, member: ZipMember, header: NpyHeader, where: str) -> None:
        self.member = member
        self.header = header
        self.where = where


class NpzFile(TensorNames):
    """An opened ``.npz`` archive whose tensors are read lazily.

    Made by ``open_npz``. ``keys()`` lists the tensor names in archive order,
    ``metadata`` is always ``{}`` (the format has none), ``info(name)`` gives the
    dtype name and shape from the validated header, ``get(name)`` the tensor and
    ``inspect(name, options)`` its inspection. A name that is not in the archive is an
    IndexingError. ``close()`` (or leaving a ``with`` block) forgets the archive;
    tensors already read stay valid.
    """

    __slots__ = ("_copy", "_path", "_raw")

    def __init__(
        self, path: str, raw: np.ndarray[Any, Any], entries: dict[str, _Entry], copy: bool
    ) -> None:
        """Private: use ``open_npz``."""
        self._path = path
        self._raw: np.ndarray[Any, Any] | None = raw
        self._by_name: dict[str, _Entry] = entries
        self._copy = copy

    @property
    def path(self) -> str:
        """The path the archive was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, str]:
        """Always ``{}``: ``.npz`` archives carry no metadata."""
        return {}

    def info(self, name: str) -> tuple[str, Shape]:
        """``(dtype_name, shape)`` of a tensor, from its validated header alone."""
        header = self._lookup(name).header
        return header.dtype.name, Shape._trusted(header.dims)

    def get(self, name: str) -> Tensor:
        """The tensor ``name``, read-only.

        A stored member is a zero-copy view of the mapped file (the file must not be
        modified or truncated while it lives); opened with ``copy=True``, a copy in
        memory independent of the file. A deflated member is inflated into a new tensor
        (independent of the file either way); a stream that is corrupt, shorter or
        longer than its header claims, or whose CRC-32 is wrong, is a FormatError. BOOL
        bytes other than 0 and 1 are a FormatError; big-endian data is converted.
        """
        entry = self._lookup(name)
        raw = self._raw
        assert raw is not None  # _lookup refuses every name once closed
        return _tensor(raw, entry, self._copy)

    def inspect(self, name: str, options: Any = None) -> Any:
        """``get(name).inspect(options)``: reads only the sampled elements."""
        tensor: Any = self.get(name)
        return tensor.inspect() if options is None else tensor.inspect(options)

    def close(self) -> None:
        """Forget the archive (closing twice is fine); tensors already read stay valid."""
        super().close()
        self._raw = None

    def _lookup(self, name: object) -> _Entry:
        found = self._by_name.get(name) if type(name) is str else None
        if found is None:
            raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")
        return found

    def __repr__(self) -> str:
        return f"NpzFile({self._path!r}, {len(self._by_name)} tensors)"


def open_npz(path: PathLike, copy: bool = False) -> NpzFile:
    """Open an ``.npz`` archive lazily: the zip directory and every header are validated.

    The file is memory-mapped read-only. With ``copy=True`` each tensor ``get`` returns
    is independent of the file. A path that cannot be opened raises the OSError
    unchanged; anything wrong with the content is a FormatError, LimitError or
    DTypeError naming the file and the member: a malformed, encrypted or multi-disk
    archive, overlapping or duplicated members, a member not named ``*.npy``, a member
    neither stored nor deflated, a ``.npy`` header that fails validation (object,
    structured and other dtypes outside the allow-list are refused, so nothing is ever
    unpickled), or a member whose size disagrees with its header.
    """
    where = label(path)
    with open_regular(where) as file:
        size = file_size(file)
        raw = map_file(file, size, where)
    members = read_zip(raw, where, methods=_METHODS)
    entries: dict[str, _Entry] = {}
    for member_name, member in members.items():
        shown = f"{where}: member {member_name[:80]!r}"
        if not member_name.endswith(_SUFFIX):
            raise FormatError(f"{shown}: an .npz member must be named NAME.npy")
        header = _member_header(raw, member, shown)
        entries[member_name[: -len(_SUFFIX)]] = _Entry(member, header, shown)
    return NpzFile(where, raw, entries, copy)


def load_npz(path: PathLike, copy: bool = False) -> dict[str, Tensor]:
    """Every tensor of an ``.npz`` archive, by name, in archive order.

    Stored members are zero-copy views of the mapped file (which must then not be
    modified or truncated while they live) unless ``copy=True``; deflated members are
    inflated into memory. Raises as ``open_npz`` and ``NpzFile.get``.
    """
    with open_npz(path, copy) as opened:
        return {name: opened.get(name) for name in opened.keys()}


def _member_header(raw: np.ndarray[Any, Any], member: ZipMember, where: str) -> NpyHeader:
    limit = min(member.size, HEAD_BYTES)
    if member.method == STORED:
        head = stored_bytes(raw, member)[:limit].tobytes()
    else:
        head = inflate_head(raw, member, limit, where)
    header = parse_npy_header(head, member.size, where, "member")
    check_npy_size(header, member.size, where, "member")
    return header


def _tensor(raw: np.ndarray[Any, Any], entry: _Entry, copy: bool) -> Tensor:
    member, header = entry.member, entry.header
    if member.method == STORED:
        content = stored_bytes(raw, member)
    else:
        # Exactly header + data bytes: check_npy_size made them the directory's size.
        content = inflate(raw, member, header.data_start + header.nbytes, entry.where)
        copy = False  # already a private array, independent of the file
    return npy_tensor(content[header.data_start :], header, entry.where, copy)
