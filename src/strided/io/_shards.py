"""Writing safetensors files and Hugging Face shard folders: layout, headers, atomic commit.

Layout is decided from names, dtypes and shapes alone, before any data is read, so the
bytes of every tensor can be written straight to their final offsets (streamed from the
source, or converted a bounded chunk at a time). Headers are byte-for-byte those of
``save_safetensors`` (tensors by dtype alignment then name, metadata keys sorted): the
same tensors and metadata always give the same file, whatever order they came in.

Sharding follows the Hugging Face writer: tensors in a fixed order fill a shard until
the next one would pass the maximum size; a tensor larger than the maximum gets a shard
of its own. Shards are ``model-00001-of-00003.safetensors``...; the index
``model.safetensors.index.json`` holds ``metadata.total_size`` and ``weight_map``. When
everything fits one shard, one ``model.safetensors`` is written without an index.

Commit is atomic: files are written under hidden temporary names beside their target
and renamed onto it when complete; a folder is assembled under a hidden temporary name
from the finished files and renamed onto the target. Temporary files are removed on any
error, and a small helper process (``Sweeper``) removes them if the writing process is
killed outright, so an interrupted write leaves nothing behind. ``write_file`` does the
same for a file of any format (``.npy``, JSON).

One rule for what is already there, for files and folders alike: the target must not
exist (an empty folder counts as absent) unless ``overwrite`` is given; then a file is
replaced by a file and a shard folder by a shard folder, atomically, and only once the
new one is complete. A folder holding anything but safetensors shards and their index
is never replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from decimal import Decimal, InvalidOperation
from typing import IO, Any, NamedTuple

from .._core.errors import FormatError, LimitError
from .._core.shape import Shape
from ._common import fsync_path, label
from ._safetensors_header import MAX_HEADER_BYTES, REFERENCE_ORDER

__all__ = [
    "INDEX_NAME",
    "SINGLE_NAME",
    "Layout",
    "OutputFile",
    "Planned",
    "Sweeper",
    "TargetExists",
    "check_file_target",
    "check_folder_target",
    "commit_folder",
    "fsync_path",
    "index_bytes",
    "layout",
    "naming",
    "parse_size",
    "shard_groups",
    "shard_name",
    "write_file",
]

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)")
_WRITE_LIMIT = 1 << 30  # bytes per pwrite call (Linux writes at most ~2 GiB at once)


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number with a decimal (``5GB`` = 5·10⁹) or binary (``5GiB``) unit.

    Units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (any case); no unit means bytes;
    fractions are allowed (``1.5GB``) and rounded down to whole bytes. FormatError for
    anything else or a size below one byte.
    """
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _UNITS:
        raise FormatError(
            f"size {text[:40]!r}: expected a number and a unit such as 5GB, 500MB or 2GiB"
        )
    try:
        size = int(Decimal(match.group(1)) * _UNITS[unit])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise FormatError(f"size {text[:40]!r} is not a number") from None
    if size < 1:
        raise FormatError(f"size {text[:40]!r} is less than one byte")
    return size


class Planned(NamedTuple):
    """A tensor to write: its name, dtype name as stored, shape and byte length."""

    name: str
    dtype: str
    shape: Shape
    byte_len: int


class Layout(NamedTuple):
    """One output file: its header bytes and where each tensor's bytes go."""

    header: bytes
    offsets: dict[str, int]  # name -> absolute offset in the file
    size: int  # total file size


def layout(tensors: Sequence[Planned], metadata: Mapping[str, str] | None) -> Layout:
    """The safetensors layout ``save_safetensors`` would write for these tensors.

    FormatError for a name safetensors cannot hold (empty, ``__metadata__``) or text
    that is not valid Unicode; LimitError for a header beyond the format's cap.
    """
    ordered = sorted(tensors, key=lambda item: (-REFERENCE_ORDER[item.dtype], item.name))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    position = 0
    relative = {}
    for item in ordered:
        header[item.name] = {
            "dtype": item.dtype,
            "shape": list(item.shape),
            "data_offsets": [position, position + item.byte_len],
        }
        relative[item.name] = position
        position += item.byte_len
    for item in ordered:
        if not item.name or item.name == "__metadata__":
            raise FormatError(f"a safetensors file cannot hold a tensor named {item.name!r}")
    try:
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(
            "a tensor name or metadata text is not valid Unicode (a lone surrogate)"
        ) from None
    text += b" " * (-len(text) % 8)
    if len(text) > MAX_HEADER_BYTES:
        raise LimitError(f"a safetensors header of {len(text)} bytes exceeds {MAX_HEADER_BYTES}")
    start = 8 + len(text)
    head = len(text).to_bytes(8, "little") + text
    return Layout(
        head, {name: start + offset for name, offset in relative.items()}, start + position
    )


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    # Layer numbers compare as numbers: layers.2 before layers.10.
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part
    )


def shard_groups(tensors: Sequence[Planned], max_size: int) -> list[list[Planned]]:
    """Tensors split into shards as the Hugging Face writer splits them.

    The order is fixed by the names alone (natural order: layer numbers as numbers, then
    the names themselves), so the split never depends on the order tensors came in.
    """
    ordered = sorted(tensors, key=lambda item: (_natural(item.name), item.name))
    shards: list[list[Planned]] = []
    current: list[Planned] = []
    held = 0
    for item in ordered:
        if item.byte_len > max_size:
            shards.append([item])
            continue
        if held + item.byte_len > max_size and current:
            shards.append(current)
            current, held = [], 0
        current.append(item)
        held += item.byte_len
    if current or not shards:
        shards.append(current)
    return shards


def shard_name(index: int, count: int) -> str:
    """``model-00001-of-00003.safetensors``; ``model.safetensors`` for a single shard."""
    if count == 1:
        return SINGLE_NAME
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def index_bytes(groups: Sequence[Sequence[Planned]]) -> bytes:
    """The index JSON of a sharded folder, written as the Hugging Face writer writes it."""
    weight_map = {
        item.name: shard_name(number, len(groups))
        for number, group in enumerate(groups)
        for item in group
    }
    total = sum(item.byte_len for group in groups for item in group)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    return (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()


# Run as ``python -I -S -c``: remembers hex-encoded paths ("+" adds, "-" forgets) and,
# when its input ends, removes those still listed (files, or folders with their files).
_SWEEPER = """
import os, shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
paths = set()
for line in sys.stdin.buffer:
    path = bytes.fromhex(line[1:].strip().decode())
    if line[:1] == b"+":
        paths.add(path)
    else:
        paths.discard(path)
for path in paths:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
"""


class Sweeper:
    """A tiny helper process that removes temporary files if this process dies first.

    ``add(path)`` before creating a temporary file or folder, ``forget(path)`` once it
    is renamed away or removed. If this process ends without ``close()`` (killed, even
    by SIGKILL), the helper's input ends and it removes everything still listed; so an
    interrupted write leaves nothing behind. Started in its own session, so a Ctrl-C at
    the terminal does not stop it before it has cleaned up.
    """

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SWEEPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _send(self, sign: bytes, path: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(sign + os.fsencode(path).hex().encode() + b"\n")
        self._process.stdin.flush()

    def add(self, path: str) -> None:
        """Remove ``path`` should this process die before ``forget(path)``."""
        self._send(b"+", path)

    def forget(self, path: str) -> None:
        """``path`` was committed or removed: leave it alone."""
        self._send(b"-", path)

    def close(self) -> None:
        """End the helper (it removes whatever is still listed) and wait for it."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        self._process.wait()


class OutputFile:
    """A file being written under a hidden temporary name beside its final place.

    ``write(offset, data)`` writes at an absolute offset (in any order); ``commit``
    renames the finished file onto its target; ``discard()`` removes it. The sweeper
    removes it should the process die before either.
    """

    def __init__(self, folder: str, name: str, size: int, sweeper: Sweeper) -> None:
        self.sweeper = sweeper
        self.temp: str | None = None
        self.fd = -1
        self.temp, self.fd = _create_hidden(folder, name, sweeper)
        try:
            os.ftruncate(self.fd, size)
        except BaseException:
            self.discard()
            raise

    def write(self, offset: int, data: Any) -> None:
        """Write ``data`` (a bytes-like object) at ``offset``, completely."""
        view = memoryview(data).cast("B")
        while view.nbytes:
            written = os.pwrite(self.fd, view[:_WRITE_LIMIT], offset)
            view = view[written:]
            offset += written

    def commit(self, target: str) -> None:
        """Flush the data to disk and rename the file onto ``target`` (replacing a file)."""
        assert self.temp is not None
        os.fsync(self.fd)
        self._close()
        os.replace(self.temp, target)
        self.sweeper.forget(self.temp)
        self.temp = None

    def discard(self) -> None:
        """Close and remove the file (nothing is left); safe to call twice."""
        self._close()
        if self.temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temp)
            self.sweeper.forget(self.temp)
            self.temp = None

    def _close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def _hidden_name(folder: str, name: str) -> str:
    return os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")


def _create_hidden(folder: str, name: str, sweeper: Sweeper) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = _hidden_name(folder, name)
        sweeper.add(temp)
        try:
            # Mode 0o666: the umask applies, as for open(path, "wb").
            return temp, os.open(temp, flags, 0o666)
        except FileExistsError:
            sweeper.forget(temp)
            continue
        except BaseException:
            sweeper.forget(temp)
            raise
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.path.join(folder, name))


class TargetExists(FileExistsError):
    """Something is already where the output goes, and overwriting was not asked for."""


def check_file_target(path: str, overwrite: bool = False) -> str:
    """The absolute path of a file to write; OSError when it cannot be written there.

    A folder at ``path`` is IsADirectoryError (never replaced by a file); anything else
    there is TargetExists unless ``overwrite``.
    """
    target = os.path.abspath(label(path))
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
    if not overwrite and os.path.lexists(target):
        raise TargetExists(errno.EEXIST, "already exists", target)
    return target


def check_folder_target(path: str, overwrite: bool = False) -> str:
    """The absolute folder path to create; OSError when something is in the way.

    Absent or an empty folder: fine. A non-empty folder: TargetExists unless
    ``overwrite``, and even then only a folder of safetensors shards and their index
    may be replaced (anything else there, such as a ``config.json``, is kept and the
    folder refused). A file or a link there: FileExistsError.
    """
    target = os.path.abspath(label(path))
    if os.path.lexists(target):
        if not os.path.isdir(target) or os.path.islink(target):
            raise FileExistsError(errno.EEXIST, "exists and is not a folder", target)
        entries = sorted(os.listdir(target))
        if entries and not overwrite:
            raise TargetExists(errno.EEXIST, "the folder exists and is not empty", target)
        others = [name for name in entries if not _shard_file(target, name)]
        if others:
            raise OSError(
                errno.ENOTEMPTY,
                f"the folder holds more than safetensors shards ({others[0][:80]!r}); not replaced",
                target,
            )
    return target


def _shard_file(folder: str, name: str) -> bool:
    """Whether ``name`` in ``folder`` is a file that a shard folder holds."""
    path = os.path.join(folder, name)
    return (
        name.endswith((".safetensors", ".safetensors.index.json"))
        and os.path.isfile(path)
        and not os.path.islink(path)
    )


@contextlib.contextmanager
def naming(target: str) -> Iterator[None]:
    """An OSError raised inside names ``target`` (never a temporary file beside it)."""
    try:
        yield
    except OSError as error:
        if error.filename == target:
            raise
        raise OSError(error.errno, error.strerror or str(error), target) from None


def write_file(
    path: str,
    write: Callable[[IO[bytes]], None],
    overwrite: bool = False,
    guard: Callable[[], AbstractContextManager[None]] | None = None,
) -> None:
    """Write the file ``path`` through ``write(handle)``: atomically, leaving nothing behind.

    The hidden temporary file beside ``path`` is created before ``write`` runs (so an
    unwritable folder fails before any work), flushed to disk and renamed onto ``path``
    when ``write`` returns. It is removed on any error, and by a ``Sweeper`` should this
    process be killed. ``path`` is checked by ``check_file_target`` (before ``write``
    and again before the rename). The rename happens inside ``guard()`` when given (a
    lock and a last check of the caller's; what it raises leaves ``path`` untouched).
    An OSError of the writing names ``path``, never the temporary file; errors raised
    by ``write`` or ``guard`` themselves propagate unchanged.
    """
    target = check_file_target(path, overwrite)
    folder, name = os.path.split(target)
    sweeper = Sweeper()
    output: OutputFile | None = None
    try:
        with naming(target):
            output = OutputFile(folder, name, 0, sweeper)
        with os.fdopen(output.fd, "wb", closefd=False) as handle:
            write(handle)
        with guard() if guard is not None else contextlib.nullcontext(), naming(target):
            check_file_target(target, overwrite)
            output.commit(target)
        fsync_path(folder)
    finally:
        if output is not None:
            output.discard()
        sweeper.close()


def commit_folder(
    target: str,
    files: Sequence[tuple[str, OutputFile]],
    extra: Mapping[str, bytes],
    sweeper: Sweeper,
    overwrite: bool = False,
) -> None:
    """Move finished ``files`` (name, OutputFile) and small ``extra`` files into a hidden
    folder beside ``target``, then rename that folder onto ``target``.

    ``target`` is checked again by ``check_folder_target``. An absent or empty target is
    replaced by one rename; with ``overwrite`` a shard folder there is exchanged with
    the new one in one step (Linux; elsewhere two renames) and then removed.
    """
    parent = os.path.dirname(target)
    building = _hidden_name(parent, os.path.basename(target))
    sweeper.add(building)
    try:
        os.mkdir(building)
        for name, output in files:
            output.commit(os.path.join(building, name))
        for name, data in extra.items():
            small = OutputFile(building, name, len(data), sweeper)
            small.write(0, data)
            small.commit(os.path.join(building, name))
        fsync_path(building)
        check_folder_target(target, overwrite)
        if os.path.isdir(target) and os.listdir(target):
            # ``building`` now holds the old folder, removed below (or by the sweeper).
            _exchange(building, target)
        else:
            os.rename(building, target)  # replaces an empty folder there, atomically
    finally:
        shutil.rmtree(building, ignore_errors=True)
        sweeper.forget(building)
    fsync_path(parent)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(new: str, old: str) -> None:
    """Swap folders ``new`` and ``old``: ``old``'s path shows the new folder at once.

    Linux's ``renameat2(RENAME_EXCHANGE)`` swaps the two in one step. Where it is
    missing, ``old`` is moved aside and ``new`` renamed into its place (put back should
    that fail), so for an instant neither is at ``old``'s path.
    """
    if sys.platform.startswith("linux"):
        rename = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
        if rename is not None:
            found = rename(
                _AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(old), _RENAME_EXCHANGE
            )
            if found == 0:
                return
            code = ctypes.get_errno()
            if code not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise OSError(code, os.strerror(code), old)
    aside = _hidden_name(os.path.dirname(old), os.path.basename(old))
    os.rename(old, aside)
    try:
        os.rename(new, old)
    except BaseException:
        os.rename(aside, old)
        raise
    os.rename(aside, new)
