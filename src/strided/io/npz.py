"""NumPy ``.npz`` archives (``np.savez``, ``np.savez_compressed``), read without unpickling.

An ``.npz`` is a zip archive whose members ``NAME.npy`` are ``.npy`` files; the tensor
is named ``NAME`` (dots and slashes kept). The archive is validated by the bounded zip
reader (``_zip``: end records, zip64, central directory against local headers, no
overlapping, duplicated or encrypted members, only stored or deflated members), then
every member's ``.npy`` header by the same parser ``load_npy`` uses, when the file is
opened. A member whose name does not end in ``.npy`` is a FormatError.

A member whose header is well formed but whose dtype strided has no DType for (a string
array, such as the ``format`` member every ``scipy.sparse.save_npz`` file holds; an
object array, which is pickled; a structured, complex, datetime or void array) does not
make the archive an error: it is listed in ``unreadable`` with the reason, its data is
never read or inflated (past the first bytes the header is read from, at most 10,012),
and the other members read as usual. Its header must still be
valid (``fortran_order`` a bool, a valid shape, and, where the dtype's size is known,
header and data filling the member exactly), and its descr must be one NumPy writes (a
byte order, a kind letter and a size, or a structured list); anything else is an error
for the whole archive, as a malformed member is.

Stored members (``np.savez``) are zero-copy views of the one mapping of the file.
Deflated members (``np.savez_compressed``) are inflated when read, into exactly the size
their validated header claims (header plus ``numel * itemsize`` data bytes, which the
zip directory must agree with): the header is read from the first inflated bytes (at
most the header cap), and inflating never goes past the claim, whatever the stream
holds. Big-endian and Fortran-order members give the right logical values, as
``load_npy`` does.

``inspect`` reads only the sampled elements: from the mapping for a stored member, and
for a deflated one by inflating the stream only up to the last byte a sample needs, in
bounded chunks, then stopping (head sampling of a 1 GiB member inflates a few KiB). In
a Fortran-order member logical order is not storage order, so spread samples may need
bytes near the end of the stream.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError, IndexingError
from .._core.limits import MAX_INFLATED_OBJECT_PICKLE
from .._core.memory import guard_function, guard_methods
from .._core.shape import Shape
from .._tensor.inspect import (
    TensorInspection,
    TensorInspectionOptions,
    checked_options,
    inspection,
    sample_positions,
)
from .._tensor.tensor import Tensor
from ._budget import ParseBudget
from ._common import (
    PathLike,
    TensorNames,
    checked_shape,
    file_size,
    label,
    map_file,
    open_regular,
)
from ._zip import (
    DEFLATED,
    STORED,
    ZipMember,
    inflate,
    inflate_gather,
    inflate_head,
    read_zip,
    stored_bytes,
)
from .npy import (
    HEAD_BYTES,
    NpyHeader,
    _literal,
    check_npy_size,
    npy_tensor,
    parse_npy_header,
)
from .pickle import object_pickle_start, record_pickle

__all__ = ["NpzFile", "load_npz", "open_npz"]

_METHODS = frozenset({STORED, DEFLATED})
_SUFFIX = ".npy"
# A plain descr as NumPy writes it (dtype.str): byte order, kind, size, datetime unit.
_PLAIN_DESCR = re.compile(r"([<>|=])([biufcmMOSUV])([0-9]{1,9})?(\[[0-9]{0,4}[A-Za-z]{1,3}\])?")
_KINDS = {
    "b": "bool", "i": "integer", "u": "unsigned integer", "f": "float", "c": "complex",
    "m": "timedelta", "M": "datetime", "O": "object", "S": "bytes", "U": "string",
    "V": "void",
}  # fmt: skip


class _Entry:
    """One member: its zip record, its validated ``.npy`` header, its message label."""

    __slots__ = ("header", "member", "where")

    def __init__(self, member: ZipMember, header: NpyHeader, where: str) -> None:
        self.member = member
        self.header = header
        self.where = where


@guard_methods
class NpzFile(TensorNames):
    """An opened ``.npz`` archive whose tensors are read lazily.

    Made by ``open_npz``. ``keys()`` lists the tensor names in archive order,
    ``metadata`` is always ``{}`` (the format has none), ``unreadable`` the members
    strided cannot read, ``info(name)`` gives the dtype name and shape from the
    validated header, ``get(name)`` the tensor and ``inspect(name, options)`` its
    inspection. A name that is not a tensor of the archive (an unreadable member
    included) is an IndexingError. ``close()`` (or leaving a ``with`` block) forgets
    the archive; tensors already read stay valid.
    """

    __slots__ = ("_copy", "_path", "_raw", "_unreadable", "_unreadable_members")

    def __init__(
        self,
        path: str,
        raw: np.ndarray[Any, Any],
        entries: dict[str, _Entry],
        copy: bool,
        unreadable: dict[str, tuple[str, ZipMember]],
    ) -> None:
        """Private: use ``open_npz``."""
        self._path = path
        self._raw: np.ndarray[Any, Any] | None = raw
        self._by_name: dict[str, _Entry] = entries
        self._copy = copy
        self._unreadable = {name: reason for name, (reason, _) in unreadable.items()}
        self._unreadable_members = {name: member for name, (_, member) in unreadable.items()}

    @property
    def path(self) -> str:
        """The path the archive was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, str]:
        """Always ``{}``: ``.npz`` archives carry no metadata."""
        return {}

    @property
    def unreadable(self) -> dict[str, str]:
        """A fresh dict ``{name: reason}`` of the members strided cannot read, in
        archive order (``{"format": "string array (<U3): no strided dtype"}``); their
        names are not in ``keys()``."""
        return dict(self._unreadable)

    def unreadable_stored(self, name: str) -> np.ndarray[Any, Any]:
        """The bytes an unreadable member occupies in the archive, exactly as stored
        (a deflated member's compressed stream, never inflated): a zero-copy read-only
        flat ``uint8`` view of the mapped file, for digests of what was not read.
        IndexingError for a name that is not an unreadable member (or once closed)."""
        member = self._unreadable_members.get(name) if type(name) is str else None
        raw = self._raw
        if member is None or raw is None:
            raise IndexingError(f"{self._path}: no unreadable member named {str(name)[:80]!r}")
        return raw[member.data_offset : member.data_offset + member.compressed_size]

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

    def inspect(self, name: str, options: Any = None) -> TensorInspection:
        """``get(name).inspect(options)``, reading only the bytes the samples need.

        A stored member's samples are gathered from the mapping; a deflated member is
        inflated only up to the last byte a sample needs, in bounded chunks, so its CRC
        (which covers the whole member) is not checked here, and a stream found corrupt
        or short on the way is a FormatError. BOOL bytes are checked where sampled
        (FormatError). The values and layout facts are those of the tensor ``get``
        gives; the samples are copies.
        """
        entry = self._lookup(name)
        raw = self._raw
        assert raw is not None  # _lookup refuses every name once closed
        return _inspection(raw, entry, checked_options(options), self._copy)

    def close(self) -> None:
        """Forget the archive (closing twice is fine); tensors already read stay valid."""
        super().close()
        self._raw = None
        self._unreadable = {}
        self._unreadable_members = {}

    def _lookup(self, name: object) -> _Entry:
        if type(name) is str:
            found = self._by_name.get(name)
            if found is not None:
                return found
            reason = self._unreadable.get(name)
            if reason is not None:
                raise IndexingError(f"{self._path}: member {name[:80]!r} is unreadable: {reason}")
        raise IndexingError(f"{self._path}: no tensor named {str(name)[:80]!r}")

    def __repr__(self) -> str:
        return f"NpzFile({self._path!r}, {len(self._by_name)} tensors)"


@guard_function
def open_npz(path: PathLike, copy: bool = False, *, budget: ParseBudget | None = None) -> NpzFile:
    """Open an ``.npz`` archive lazily: the zip directory and every header are validated.

    The file is memory-mapped read-only. With ``copy=True`` each tensor ``get`` returns
    is independent of the file. A path that cannot be opened raises the OSError
    unchanged; anything wrong with the content is a FormatError, LimitError or
    DTypeError naming the file and the member: a malformed, encrypted or multi-disk
    archive, overlapping or duplicated members, a member not named ``*.npy``, a member
    neither stored nor deflated, a ``.npy`` header that fails validation (a descr NumPy
    never writes is a DTypeError), or a member whose size disagrees with its header.

    A valid member of a dtype strided has no DType for (string, object, structured,
    complex, datetime, void) is no error: it goes to ``unreadable`` with its reason and
    its data is never read as values, so nothing is ever unpickled. The pickle of an
    object-array member (``np.load(allow_pickle=True)`` would run it) is walked as inert
    records for the globals it names, recorded in ``budget``'s import log under the
    member's name (a deflated one of more than ``MAX_INFLATED_OBJECT_PICKLE`` bytes is
    noted there as unread instead); ``budget`` is the open's (a fresh one when None).
    """
    where = label(path)
    spent = ParseBudget(where) if budget is None else budget
    with open_regular(where) as file:
        size = file_size(file)
        raw = map_file(file, size, where)
    members = read_zip(raw, where, methods=_METHODS)
    entries: dict[str, _Entry] = {}
    unreadable: dict[str, tuple[str, ZipMember]] = {}
    for member_name, member in members.items():
        shown = f"{where}: member {member_name[:80]!r}"
        if not member_name.endswith(_SUFFIX):
            raise FormatError(f"{shown}: an .npz member must be named NAME.npy")
        name = member_name[: -len(_SUFFIX)]
        header = _member_header(raw, member, shown)
        if isinstance(header, str):
            unreadable[name] = (header, member)
            _record_pickle(raw, member, shown, spent)
        else:
            entries[name] = _Entry(member, header, shown)
    return NpzFile(where, raw, entries, copy, unreadable)


@guard_function
def load_npz(path: PathLike, copy: bool = False) -> dict[str, Tensor]:
    """Every tensor of an ``.npz`` archive, by name, in archive order.

    Stored members are zero-copy views of the mapped file (which must then not be
    modified or truncated while they live) unless ``copy=True``; deflated members are
    inflated into memory. Members strided cannot read are left out (``open_npz`` lists
    them in ``unreadable``). Raises as ``open_npz`` and ``NpzFile.get``.
    """
    with open_npz(path, copy) as opened:
        return {name: opened.get(name) for name in opened.keys()}


def _member_header(raw: np.ndarray[Any, Any], member: ZipMember, where: str) -> NpyHeader | str:
    """The member's validated header, or the reason strided cannot read a valid one."""
    limit = min(member.size, HEAD_BYTES)
    if member.method == STORED:
        head = stored_bytes(raw, member)[:limit].tobytes()
    else:
        head = inflate_head(raw, member, limit, where)
    try:
        header = parse_npy_header(head, member.size, where, "member")
    except DTypeError:
        # Raised only once magic, version, length and the literal's keys are valid.
        return _unreadable_reason(head, member.size, where)
    check_npy_size(header, member.size, where, "member")
    return header


def _record_pickle(
    raw: np.ndarray[Any, Any], member: ZipMember, where: str, budget: ParseBudget
) -> None:
    """Record what the pickle of an object-array member names (nothing for others)."""
    if member.method == STORED:
        content = stored_bytes(raw, member)
        start = object_pickle_start(content[:HEAD_BYTES].tobytes())
    else:
        start = object_pickle_start(inflate_head(raw, member, min(member.size, HEAD_BYTES), where))
        if start is not None and member.size > MAX_INFLATED_OBJECT_PICKLE:
            budget.imports.skipped(
                member.name,
                f"its pickle deflates to {member.size} bytes, more than the "
                f"{MAX_INFLATED_OBJECT_PICKLE} a scan inflates",
            )
            return
        if start is not None:
            content = inflate(raw, member, member.size, where)
    if start is None or start > member.size:
        return
    data = memoryview(content[start:])  # type: ignore[arg-type]
    record_pickle(data, member.name, f"{where}: pickle", budget)


def _unreadable_reason(head: bytes, size: int, where: str) -> str:
    """Why a member whose descr is outside the allow-list cannot be read.

    ``parse_npy_header`` has validated everything before the descr; the rest of the
    header is validated here as it would be for a readable member. A descr NumPy never
    writes is a DTypeError, a bad ``fortran_order`` or shape a FormatError (LimitError
    for the shape caps), a size mismatch (where the dtype's size is known) a FormatError.
    """
    width = 2 if (head[6], head[7]) == (1, 0) else 4
    data_start = 8 + width + int.from_bytes(head[8 : 8 + width], "little")
    parsed = _literal(head[8 + width : data_start].decode("ascii"), (head[6], head[7]), where)
    descr, fortran, shape = parsed["descr"], parsed["fortran_order"], parsed["shape"]
    if type(fortran) is not bool:
        raise FormatError(f"{where}: fortran_order must be True or False")
    if type(shape) is not tuple:
        raise FormatError(f"{where}: shape must be a tuple of ints")
    dims = checked_shape(shape, where)
    reason, itemsize = _descr_reason(descr, where)
    if itemsize is not None:
        numel = 1
        for dim in dims:
            numel *= dim
        if data_start + numel * itemsize != size:
            raise FormatError(
                f"{where}: shape {list(dims)} of {descr} needs {numel * itemsize} data bytes, "
                f"the member holds {size - data_start}"
            )
    return reason


def _descr_reason(descr: object, where: str) -> tuple[str, int | None]:
    """(reason, itemsize or None when the data's size is not fixed by the descr)."""
    if type(descr) is list:
        if descr and all(type(field) is tuple and 2 <= len(field) <= 3 for field in descr):
            return "structured array: no strided dtype", None
        raise DTypeError(f"{where}: descr is neither a dtype nor a list of fields")
    found = _PLAIN_DESCR.fullmatch(descr) if type(descr) is str else None
    sized = found is not None and (found[3] is not None or found[2] == "O")
    if found is None or not sized or (found[4] is not None and found[2] not in "mM"):
        raise DTypeError(f"{where}: dtype {str(descr)[:40]!r} is not supported")
    kind = found[2]
    if kind == "O":
        return f"object array ({descr}): pickled, never unpickled", None
    size = int(found[3]) * (4 if kind == "U" else 1)
    return f"{_KINDS[kind]} array ({descr}): no strided dtype", size


def _inspection(
    raw: np.ndarray[Any, Any], entry: _Entry, options: TensorInspectionOptions, copy: bool
) -> TensorInspection:
    """The inspection of ``get``'s tensor, from the bytes of the sampled elements only."""
    member, header = entry.member, entry.header
    dtype, dims, item = header.dtype, header.dims, header.dtype.itemsize
    shape = Shape._trusted(dims)
    positions = sample_positions(options, shape.numel)
    stored = positions
    if header.fortran and len(dims) > 1 and positions.size:
        # Fortran order stores element (i, j, ...) at its column-major index.
        stored = np.ravel_multi_index(np.unravel_index(positions, dims), dims, order="F")
    order = np.argsort(stored, kind="stable")
    offsets = (header.data_start + stored[order] * item)[:, None] + np.arange(item)
    if member.method == STORED:
        gathered = stored_bytes(raw, member)[offsets.reshape(-1)]
    else:
        gathered = inflate_gather(raw, member, offsets.reshape(-1), entry.where)
    elements = np.empty((positions.size, item), dtype=np.uint8)
    elements[order] = gathered.reshape(-1, item)
    flat = elements.reshape(-1)
    if dtype is DType.BOOL:
        bad = np.flatnonzero(flat > 1)
        if bad.size:
            first = int(bad[0])
            raise FormatError(
                f"{entry.where}: BOOL byte {int(stored[first])} is {int(flat[first])}, not 0 or 1"
            )
    source = dtype.numpy.newbyteorder(">") if header.big_endian else dtype.numpy
    values = flat.view(source).astype(dtype.numpy)
    return inspection(dtype, shape, positions, values, _layout(raw, entry, shape, copy))


def _layout(
    raw: np.ndarray[Any, Any], entry: _Entry, shape: Shape, copy: bool
) -> tuple[tuple[int, ...], int, int, bool]:
    """(strides, byte_len, storage_byte_len, is_contiguous) of the tensor ``get`` gives."""
    member, header = entry.member, entry.header
    nbytes = header.nbytes
    if header.big_endian or (copy and member.method == STORED):
        return shape.strides(), nbytes, nbytes, True  # a new C-order array of its own
    storage = int(raw.size) if member.method == STORED else member.size
    if not header.fortran:
        return shape.strides(), nbytes, storage, True
    # A transposed view: C-contiguous by NumPy's rule only when at most one axis has
    # more than one element, or when it has none.
    long_axes = sum(1 for dim in header.dims if dim > 1)
    return shape.strides("F"), nbytes, storage, shape.numel == 0 or long_axes <= 1


def _tensor(raw: np.ndarray[Any, Any], entry: _Entry, copy: bool) -> Tensor:
    member, header = entry.member, entry.header
    if member.method == STORED:
        content = stored_bytes(raw, member)
    else:
        # Exactly header + data bytes: check_npy_size made them the directory's size.
        content = inflate(raw, member, header.data_start + header.nbytes, entry.where)
        copy = False  # already a private array, independent of the file
    return npy_tensor(content[header.data_start :], header, entry.where, copy)
