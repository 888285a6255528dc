"""Helpers shared by the file readers and writers.

Reading: only regular files are opened (a FIFO or a device is refused without
blocking on it). Files are memory-mapped read-only and exposed as ONE flat read-only
``uint8`` array; every tensor is a view of it, so NumPy keeps the mapping alive for as
long as any tensor needs it (the mapping is never closed explicitly). A mapping keeps
no file descriptor open, so a checkpoint of thousands of shards stays within the usual
limit of open files. A mapped file must not be modified or truncated while tensors of
it live (a rewrite shows in them, a truncation kills the process with SIGBUS when a
vanished page is read); replacing it by rename is safe. Readers that take ``copy=True``
copy each tensor out of the mapping instead. Errors name the file.

Writing: ``atomic_write`` writes into a temporary file in the target's folder, flushes
and fsyncs it, then renames it over the target, so a crash or an error never leaves a
half-written file under the target name (and a failed write leaves the target as it was).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import secrets
import stat
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, Protocol, Self, TypeVar

import numpy as np

from .._core.dtype import DType
from .._core.errors import FormatError, LimitError, ShapeError
from .._core.limits import MAX_INDEX_BYTES, check_dims, describe
from .._core.limits import MAX_INDEX_DEPTH as _INDEX_DEPTH
from .._core.storage import ReadOnlyMemory, borrow
from .._kernels.strict_json import loads_strict
from .._tensor.tensor import Tensor

if TYPE_CHECKING:
    from ._budget import ParseBudget

__all__ = [
    "PathLike",
    "TensorNames",
    "atomic_write",
    "check_index_size",
    "check_shard",
    "checked_shape",
    "file_size",
    "fsync_path",
    "index_shards",
    "label",
    "map_file",
    "merge_shards",
    "open_regular",
    "parse_index",
    "read_exact",
    "same_bits",
    "tensor_of",
    "write_logical",
]

PathLike = str | os.PathLike[str]
S = TypeVar("S")

# Non-contiguous views are written in pieces of about this many bytes, so saving a
# transposed view never needs a second full-size copy in memory.
_CHUNK_BYTES = 1 << 22


def label(path: object) -> str:
    """The path as text (bytes paths are decoded as the OS does); FormatError for a non-path.

    Readers open the returned text, so an int is never taken for a file descriptor.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise FormatError(
            f"expected a path (str, bytes or os.PathLike), found {type(path).__name__}"
        )
    text = os.fsdecode(os.fspath(path))
    if "\0" in text:
        raise FormatError(f"{text[:80]!r}: a path cannot contain a NUL character")
    return text


def open_regular(path: str) -> IO[bytes]:
    """``path`` opened for binary reading; FormatError unless it is a regular file.

    The file is opened without blocking and checked with ``fstat`` on the open
    descriptor (no race with a rename), so a FIFO, socket or device is refused at once
    instead of hanging. A path that cannot be opened raises the OSError unchanged.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", path)
        if not stat.S_ISREG(mode):
            raise FormatError(f"{path}: not a regular file (a FIFO, socket or device)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def checked_shape(dims: Iterable[object], where: str) -> tuple[int, ...]:
    """``check_dims`` for a shape read from a file: bad dims are FormatError, caps LimitError.

    ``where`` (the file and the tensor) prefixes every message.
    """
    try:
        return check_dims(dims, "shape")
    except LimitError as exc:
        raise LimitError(f"{where}: {exc}") from None
    except ShapeError as exc:
        raise FormatError(f"{where}: {exc}") from None


def read_exact(file: IO[bytes], count: int, where: str, what: str) -> bytes:
    """Exactly ``count`` bytes (the caller has checked ``count`` against the file size)."""
    data = file.read(count)
    if len(data) != count:
        # Only possible when the file shrank after its size was checked.
        raise FormatError(
            f"{where}: {what}: expected {count} bytes, the file ended after {len(data)}"
        )
    return data


def map_file(file: IO[bytes], expected_size: int, where: str) -> np.ndarray[Any, Any]:
    """The whole open ``file`` as one flat read-only uint8 array over a read-only mapping.

    The mapping holds no file descriptor (the caller may close ``file`` at once) and is
    unmapped when the last array viewing it is gone. A 0-byte file cannot be mapped; it
    gives an empty read-only array instead. A size different from ``expected_size`` (the
    file changed while being opened) is a FormatError.
    """
    if expected_size == 0:
        return np.frombuffer(b"", dtype=np.uint8)
    if file_size(file) != expected_size:
        raise FormatError(f"{where}: the file changed size while it was being opened")
    if _LIBC is None:
        # No C library to map with (not a POSIX system): Python's mmap, which keeps a
        # descriptor per mapping.
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        return borrow(memoryview(mapping))
    return np.asarray(_Mapping(file.fileno(), expected_size, where))


def _c_library() -> Any:
    if os.name != "posix":
        return None
    try:
        # The process's own symbols, the C library's among them: finding the library by
        # name (ctypes.util.find_library) would run ldconfig at every start-up.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_int64,
        )  # fmt: skip
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _c_library()
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Mapping(ReadOnlyMemory):
    """A read-only shared mapping of a whole file that owns no file descriptor.

    As every ``ReadOnlyMemory``, it offers its memory to NumPy only read-only and cannot
    be copied (a copy would unmap the pages under live tensors). The pages are unmapped
    when the last array over them is garbage-collected, by a finalizer that no public
    method can run early (an explicit ``__del__()`` call could).
    """

    __slots__ = ("__weakref__",)

    def __new__(cls, fd: int, size: int, where: str) -> _Mapping:
        address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), where)
        self = object.__new__(cls)
        self._address = address
        self._size = size
        # Not at exit: arrays over the pages may still be read while Python shuts down.
        weakref.finalize(self, _LIBC.munmap, address, size).atexit = False
        return self


def tensor_of(view: np.ndarray[Any, Any], dtype: DType, copy: bool) -> Tensor:
    """A tensor over ``view`` (a read-only view of a mapped file), or a copy with ``copy``.

    A copy is independent of the file: later changes to it, or its truncation, cannot
    reach the tensor.
    """
    if copy:
        return Tensor._adopt(view.copy(order="C"), dtype)
    return Tensor._wrap(view)


def file_size(file: IO[bytes]) -> int:
    """The size in bytes of an open file."""
    return os.fstat(file.fileno()).st_size


def atomic_write(path: PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it onto ``path``.

    The data is flushed and fsynced before the rename. The temporary file gets the mode
    a plain ``open()`` would give (the process umask applies, and is never changed). On
    any error the temporary file is removed and ``path`` is left exactly as it was; an
    OSError names ``path`` (never the temporary file), other errors propagate unchanged.
    """
    target = os.path.abspath(label(path))
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
    folder, name = os.path.split(target)
    fd, temp = _create_beside(folder, name, target)
    try:
        with os.fdopen(fd, "wb") as file:
            fd = -1
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException as exc:
        if fd != -1:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError) and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or str(exc), target) from None
        raise
    fsync_path(folder)


def _create_beside(folder: str, name: str, target: str) -> tuple[int, str]:
    """A new, empty, uniquely named hidden file in ``folder``: (descriptor, path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            # Mode 0o666: the kernel applies the umask, exactly as for open(path, "wb").
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, target) from None
    raise FileExistsError(errno.EEXIST, "no free temporary name", target)


def fsync_path(path: str) -> None:
    """Best-effort fsync of a file or folder by path (makes renames in a folder durable)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_logical(file: IO[bytes], array: np.ndarray[Any, Any]) -> None:
    """Write ``array``'s elements as packed bytes in logical row-major order.

    Contiguous arrays are written straight from their memory; strided views (transposed,
    reversed, sliced) are copied a bounded piece at a time.
    """
    if array.size == 0:
        return
    if array.flags.c_contiguous or array.nbytes <= _CHUNK_BYTES:
        packed = np.ascontiguousarray(array).reshape(-1)
        file.write(packed.view(np.uint8).data)
        return
    if array.ndim == 1:
        step = max(1, _CHUNK_BYTES // array.itemsize)
        for start in range(0, array.shape[0], step):
            write_logical(file, array[start : start + step])
        return
    row_bytes = array.nbytes // array.shape[0]
    rows = max(1, _CHUNK_BYTES // row_bytes)
    for start in range(0, array.shape[0], rows):
        # A piece of whole rows; a single row larger than a chunk is split further.
        write_logical(file, array[start : start + rows] if rows > 1 else array[start])


def index_shards(
    path: str,
    open_shard: Callable[[str], S],
    names_in: Callable[[S], Iterable[str]],
    *,
    budget: ParseBudget | None = None,
) -> list[S]:
    """The shards a ``*.index.json`` names (``{"metadata": ..., "weight_map": ...}``).

    ``weight_map`` maps each tensor name to a plain file name in the index's folder;
    each shard is opened with ``open_shard`` and must hold exactly the names mapped to
    it (``names_in``). Shards come in file-name order. Anything else is a FormatError
    (LimitError past the size cap) naming the index. ``budget``, the open's parse
    budget, is granted the index's bytes once their size has passed the cap.
    """
    with open_regular(path) as file:
        size = file_size(file)
        check_index_size(size, path)
        if budget is not None:
            budget.grant(size)
        data = read_exact(file, size, path, "index")
    expected = parse_index(data, path)
    folder = os.path.dirname(os.path.abspath(path))
    shards = []
    for shard_name in sorted(expected):
        shard_path = os.path.join(folder, shard_name)
        if not os.path.isfile(shard_path):
            raise FormatError(f"{path}: shard {shard_name!r} listed in weight_map does not exist")
        shard = open_shard(shard_path)
        check_shard(path, shard_name, set(names_in(shard)), expected[shard_name])
        shards.append(shard)
    return shards


def check_index_size(size: int, path: str) -> None:
    """LimitError for an index of more than ``MAX_INDEX_BYTES`` (checked before reading it)."""
    if size > MAX_INDEX_BYTES:
        raise LimitError(f"{path}: index of {size} bytes exceeds the cap of {MAX_INDEX_BYTES}")


def parse_index(data: bytes, path: str) -> dict[str, set[str]]:
    """The shards an index's bytes name: shard file name -> the tensor names mapped to it."""

    index = loads_strict(data, path, _INDEX_DEPTH)
    if type(index) is not dict:
        raise FormatError(f"{path}: the index must be a JSON object of metadata and weight_map")
    unexpected = sorted(key[:40] for key in index if key not in ("metadata", "weight_map"))
    if unexpected:
        raise FormatError(f"{path}: unexpected keys {unexpected} (only metadata and weight_map)")
    if type(index.get("metadata", {})) is not dict:
        raise FormatError(f"{path}: metadata must be an object")
    weight_map = index.get("weight_map")
    if type(weight_map) is not dict or not weight_map:
        raise FormatError(f"{path}: weight_map must be a non-empty object of name -> shard file")
    expected: dict[str, set[str]] = {}
    for name, shard_name in weight_map.items():
        if not _is_plain_file_name(shard_name):
            raise FormatError(
                f"{path}: weight_map[{name[:80]!r}] = {describe(shard_name)} is not a plain "
                "file name in the index's folder"
            )
        expected.setdefault(shard_name, set()).add(name)
    return expected


def check_shard(path: str, shard_name: str, held: set[str], expected: set[str]) -> None:
    """FormatError unless a shard holds exactly the names the index maps to it."""
    if held != expected:
        missing = sorted(expected - held)[:5]
        extra = sorted(held - expected)[:5]
        raise FormatError(
            f"{path}: shard {shard_name!r} does not match weight_map "
            f"(missing {missing}, not listed {extra})"
        )


def _is_plain_file_name(name: object) -> bool:
    return (
        type(name) is str
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
        and os.path.basename(name) == name
    )


class _Shard(Protocol):
    where: str
    metadata: Any


Sh = TypeVar("Sh", bound=_Shard)
E = TypeVar("E")


def merge_shards(
    path: str, shards: Iterable[Sh], tensors_of: Callable[[Sh], dict[str, E]]
) -> tuple[dict[str, tuple[Sh, E]], dict[str, Any]]:
    """One name table ``name -> (shard, entry)`` and one metadata dict over ``shards``.

    Each shard has ``where`` and ``metadata``; ``tensors_of(shard)`` gives its entries.
    A name in two shards, or a metadata key with two values, is a FormatError. Values
    are compared by their bits (``same_bits``): a NaN agrees with itself.
    """
    by_name: dict[str, tuple[Sh, E]] = {}
    metadata: dict[str, Any] = {}
    for shard in shards:
        for name, entry in tensors_of(shard).items():
            if name in by_name:
                other = by_name[name][0].where
                raise FormatError(
                    f"{path}: tensor {name[:80]!r} appears in both {other} and {shard.where}"
                )
            by_name[name] = (shard, entry)
        for key, value in shard.metadata.items():
            known = metadata.setdefault(key, value)
            if known is not value and not same_bits(known, value):
                raise FormatError(
                    f"{path}: shards disagree on metadata {key[:80]!r} ({shard.where})"
                )
    return by_name, metadata


_DOUBLE = struct.Struct("<d")


def same_bits(first: object, second: object) -> bool:
    """True when two plain values hold the same bits: the same types, floats bit for bit.

    A NaN equals itself (``==`` would say it differs even from itself), ``0.0`` and
    ``-0.0`` differ, ``1`` and ``True`` differ; lists, tuples and dicts agree item by item
    (walked without recursion); anything else compares with ``==``.
    """
    pending = [(first, second)]
    while pending:
        one, other = pending.pop()
        if type(one) is not type(other):
            return False
        if isinstance(one, float):
            assert isinstance(other, float)
            if _DOUBLE.pack(one) != _DOUBLE.pack(other):
                return False
        elif isinstance(one, (list, tuple)):
            assert isinstance(other, (list, tuple))
            if len(one) != len(other):
                return False
            pending.extend(zip(one, other, strict=True))
        elif isinstance(one, dict):
            assert isinstance(other, dict)
            if list(one) != list(other):
                return False
            pending.extend((one[key], other[key]) for key in one)
        elif one != other:
            return False
    return True


class TensorNames:
    """``keys()``, iteration, ``len`` and ``in`` over a file's tensors, in the file's order.

    Subclasses fill ``_by_name`` (name -> whatever locates the tensor) when they open.
    """

    __slots__ = ("_by_name",)

    _by_name: dict[str, Any]

    def keys(self) -> list[str]:
        """The tensor names, in file order (shard by shard for a sharded checkpoint)."""
        return list(self._by_name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def close(self) -> None:
        """Forget the file: names and tensors are no longer offered (closing twice is fine).

        Tensors already handed out stay valid: each keeps the mapping it views alive,
        and the mapping is released when the last of them is gone.
        """
        self._by_name = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
