"""NumPy ``.npy`` files: memory-mapped reading that never unpickles, atomic writing.

Layout: magic ``\\x93NUMPY``, a version byte pair (1.0, 2.0 or 3.0), a header length
(u16 for 1.0, u32 otherwise), a header that is a Python dict literal with exactly the
keys ``descr``, ``fortran_order`` and ``shape``, then the raw elements.

Reading checks, in order: magic and version; the header length against NumPy's cap
(10,000 bytes) and the file; the header is ASCII and parsed with ``ast.literal_eval``
(a literal parser: it evaluates nothing); exactly the three keys; ``descr`` a string in
a closed allow-list of plain little/big-endian numbers and bools (objects, structured,
strings, datetimes, complex and void dtypes are refused, so nothing is ever unpickled);
``fortran_order`` a bool; ``shape`` a tuple of ints within MAX_RANK/MAX_ELEMENTS; and
the data exactly ``numel * itemsize`` bytes to the end of the file. Trailing bytes are
refused (NumPy ignores them; strided keeps one reading of a file).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from typing import IO, Any, NamedTuple, NoReturn

import numpy as np

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError, LimitError
from .._core.limits import MAX_NPY_HEADER_BYTES as MAX_HEADER_BYTES
from .._core.memory import guard_function
from .._tensor.tensor import Tensor
from ._common import (
    PathLike,
    atomic_write,
    checked_shape,
    file_size,
    label,
    map_file,
    open_regular,
    read_exact,
    tensor_of,
    write_logical,
)
from ._detect import NPY_MAGIC

__all__ = [
    "HEAD_BYTES",
    "MAX_HEADER_BYTES",
    "NpyHeader",
    "check_npy_size",
    "load_npy",
    "npy_tensor",
    "npy_writer",
    "parse_npy_header",
    "save_npy",
]

# The most bytes a header can take: magic, version, a u32 length, then the header.
HEAD_BYTES = 12 + MAX_HEADER_BYTES
_KEYS = frozenset({"descr", "fortran_order", "shape"})

# descr -> (DType, stored byte order is big-endian). A closed table: descr text never
# reaches np.dtype().
_DESCR: dict[str, tuple[DType, bool]] = {}
for _dtype, _code in (
    (DType.I16, "i2"), (DType.I32, "i4"), (DType.I64, "i8"), (DType.U16, "u2"),
    (DType.U32, "u4"), (DType.U64, "u8"), (DType.F16, "f2"), (DType.F32, "f4"),
    (DType.F64, "f8"),
):  # fmt: skip
    _DESCR["<" + _code] = (_dtype, False)
    _DESCR[">" + _code] = (_dtype, True)
for _dtype, _code in ((DType.BOOL, "b1"), (DType.I8, "i1"), (DType.U8, "u1")):
    for _order in "|<>":
        _DESCR[_order + _code] = (_dtype, False)
# What save_npy writes for each DType (NumPy's own spelling).
_WRITE_DESCR = {dtype: np.dtype(dtype.numpy).str for dtype, big in _DESCR.values() if not big}


class NpyHeader(NamedTuple):
    """A validated ``.npy`` header: what the data holds and where it starts."""

    dtype: DType
    big_endian: bool
    fortran: bool
    dims: tuple[int, ...]
    data_start: int

    @property
    def nbytes(self) -> int:
        """The data's size in bytes: elements times itemsize."""
        numel = 1
        for dim in self.dims:
            numel *= dim
        return numel * self.dtype.itemsize


@guard_function
def load_npy(path: PathLike, copy: bool = False) -> Tensor:
    """The array in a ``.npy`` file as a Tensor, memory-mapped read-only.

    The tensor views the mapped file: the file must not be modified or truncated while
    it lives (replacing it by rename is safe). ``copy=True`` reads it into memory
    instead, independent of the file.

    Little-endian C-order data is a zero-copy view of the mapped file; Fortran-order
    data is a zero-copy (non-contiguous) view with the right logical values;
    big-endian data is converted to little-endian on copy. Never unpickles. A path
    that cannot be opened raises the OSError unchanged; content problems are a
    FormatError or LimitError (DTypeError for a dtype strided cannot represent), naming
    the file.
    """
    where = label(path)
    with open_regular(where) as file:
        size = file_size(file)
        head = read_exact(file, min(size, HEAD_BYTES), where, "header")
        header = parse_npy_header(head, size, where)
        check_npy_size(header, size, where)
        raw = map_file(file, size, where)
    return npy_tensor(raw[header.data_start :], header, where, copy)


def npy_tensor(data: np.ndarray[Any, Any], header: NpyHeader, where: str, copy: bool) -> Tensor:
    """The tensor ``header`` describes over ``data``, its exactly ``nbytes`` uint8 bytes.

    Little-endian data becomes a view of ``data`` (Fortran order transposed, without a
    copy), or a copy with ``copy``; big-endian data is converted into a new tensor.
    BOOL bytes other than 0 and 1 are a FormatError.
    """
    dtype, big_endian, fortran, dims = header.dtype, header.big_endian, header.fortran, header.dims
    if dtype is DType.BOOL:
        bad = np.flatnonzero(data > 1)
        if bad.size:
            first = int(bad[0])
            raise FormatError(f"{where}: BOOL byte {first} is {int(data[first])}, not 0 or 1")
    stored_dims = dims[::-1] if fortran else dims
    if big_endian:
        stored = data.view(dtype.numpy.newbyteorder(">")).reshape(stored_dims)
        return Tensor._adopt(stored.T if fortran else stored, dtype)
    view = data.view(dtype.numpy).reshape(stored_dims)
    # Transposing the reversed-shape view gives the logical array without a copy.
    return tensor_of(view.T if fortran else view, dtype, copy)


def check_npy_size(header: NpyHeader, size: int, where: str, container: str = "file") -> None:
    """FormatError unless header and data fill exactly the ``size`` bytes of the container."""
    expected = header.nbytes
    if header.data_start + expected != size:
        raise FormatError(
            f"{where}: shape {list(header.dims)} of {header.dtype.name} needs {expected} data "
            f"bytes, the {container} holds {size - header.data_start}"
        )


def parse_npy_header(head: bytes, size: int, where: str, container: str = "file") -> NpyHeader:
    """The validated header of a ``.npy`` of ``size`` bytes whose first bytes are ``head``.

    ``head`` holds the first ``min(size, HEAD_BYTES)`` bytes (fewer only when the data
    ended early, which is a FormatError if the header needs them). Raises FormatError,
    LimitError (header cap, shape caps) or DTypeError (a dtype outside the allow-list);
    ``container`` names what holds the bytes in messages.
    """
    if size < 10:
        raise FormatError(f"{where}: {size} bytes is too short for a .npy file")
    if head[:6] != NPY_MAGIC[: len(head)] or len(head) < 10:
        _short_head(head, where)
    version = (head[6], head[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise FormatError(f"{where}: .npy version {version[0]}.{version[1]} is not supported")
    width = 2 if version == (1, 0) else 4
    if len(head) < 8 + width:
        _short_head(head, where)
    length = int.from_bytes(head[8 : 8 + width], "little")
    if length > MAX_HEADER_BYTES:
        raise LimitError(f"{where}: header of {length} bytes exceeds the cap of {MAX_HEADER_BYTES}")
    data_start = 8 + width + length
    if data_start > size:
        raise FormatError(f"{where}: header length {length} runs past the end of the {container}")
    if data_start > len(head):
        _short_head(head, where)
    header = head[8 + width : data_start]
    if not header.isascii():
        raise FormatError(f"{where}: the header is not ASCII")
    parsed = _literal(header.decode("ascii"), version, where)
    if type(parsed) is not dict or parsed.keys() != _KEYS:
        raise FormatError(
            f"{where}: the header must be a dict of exactly descr, fortran_order, shape"
        )
    descr, fortran, shape = parsed["descr"], parsed["fortran_order"], parsed["shape"]
    if type(descr) is not str:
        raise DTypeError(f"{where}: descr {_short(descr)} is not a plain dtype (structured?)")
    if descr not in _DESCR:
        raise DTypeError(f"{where}: dtype {descr[:40]!r} is not supported")
    if type(fortran) is not bool:
        raise FormatError(f"{where}: fortran_order must be True or False, found {_short(fortran)}")
    if type(shape) is not tuple:
        raise FormatError(f"{where}: shape must be a tuple of ints, found {_short(shape)}")
    dims = checked_shape(shape, where)
    dtype, big_endian = _DESCR[descr]
    return NpyHeader(dtype, big_endian, fortran, dims, data_start)


def _short_head(head: bytes, where: str) -> NoReturn:
    if head[:6] != NPY_MAGIC[: len(head)]:
        raise FormatError(f"{where}: not a .npy file (bad magic)")
    raise FormatError(f"{where}: the data ends inside the .npy header ({len(head)} bytes)")


_LONG_SUFFIX = re.compile(r"[0-9][lL]")


def _literal(text: str, version: tuple[int, int], where: str) -> Any:
    """The header's Python literal, never evaluated as code; a repeated key is refused.

    Headers of versions 1.0 and 2.0 written by Python 2 may spell ints as longs
    (``(2L, 3L)``); as NumPy does, the ``L`` suffixes are dropped when the text does not
    parse otherwise.
    """
    try:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            if version == (3, 0) or _LONG_SUFFIX.search(text) is None:
                raise
            tree = ast.parse(_without_longs(text), mode="eval")
        parsed = ast.literal_eval(tree)
        # literal_eval lets a repeated key win silently; one reading means refusing it.
        # Keys are compared as values, so 'shape' and u'shape' are the same key.
        keys = []
        if isinstance(tree.body, ast.Dict):
            keys = [ast.literal_eval(key) for key in tree.body.keys if key is not None]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise FormatError(f"{where}: the header is not a Python literal") from None
    if len(keys) != len(set(keys)):
        raise FormatError(f"{where}: the header repeats a key")
    return parsed


def _without_longs(text: str) -> str:
    """``text`` with Python 2's long suffix dropped from integer literals."""
    pieces = []
    previous = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            is_suffix = token.type == tokenize.NAME and token.string in ("L", "l")
            after_number = (
                previous is not None
                and previous.type == tokenize.NUMBER
                and previous.end == token.start
            )
            if not (is_suffix and after_number):
                pieces.append(token.string if token.type != tokenize.NEWLINE else "")
            previous = token
    except (tokenize.TokenError, SyntaxError):
        raise SyntaxError("not a literal") from None
    return " ".join(pieces)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@guard_function
def save_npy(path: PathLike, tensor: Tensor) -> None:
    """Write ``tensor`` as a version 1.0 ``.npy`` file that ``numpy.load`` reads.

    The data is the tensor's logical row-major elements (C order), so strided views
    are saved as what they show. BF16 and the FP8 dtypes have no ``.npy`` name (NumPy
    would write an opaque void type) and are a DTypeError: convert them, or use
    safetensors. The write is atomic (temporary file renamed onto ``path``).
    """
    atomic_write(path, npy_writer(tensor))


def npy_writer(tensor: Tensor) -> Callable[[IO[bytes]], None]:
    """What ``save_npy`` writes, as a function writing it to an open binary file.

    Checked at once: DTypeError for a non-Tensor or a dtype with no ``.npy`` name. The
    function shares the tensor's storage (nothing is copied until it writes).
    """
    if not isinstance(tensor, Tensor):
        raise DTypeError(f"save_npy: expected a Tensor, found {type(tensor).__name__}")
    descr = _WRITE_DESCR.get(tensor.dtype)
    if descr is None:
        raise DTypeError(
            f"save_npy: {tensor.dtype.name} has no .npy dtype; convert it or use safetensors"
        )
    shape = tuple(tensor.shape)
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    # NumPy pads with spaces so the data starts on a 64-byte boundary, then a newline.
    header = text.encode("ascii") + b" " * (-(len(text) + 11) % 64) + b"\n"
    array: np.ndarray[Any, Any] = tensor.numpy()

    def write(file: IO[bytes]) -> None:
        file.write(NPY_MAGIC + b"\x01\x00" + len(header).to_bytes(2, "little"))
        file.write(header)
        write_logical(file, array)

    return write
