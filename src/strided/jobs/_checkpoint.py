"""One door for every checkpoint file: ``open_checkpoint`` and the ``Checkpoint`` mapping.

The format is recognized from the file's first bytes, never from its name, by the one
ordered table of ``strided.io._detect`` (GGUF, safetensors framing, zip, ``.npy``,
pickle, JSON; a folder of shards), whose rows ``strided.io._open`` binds to openers for
paths and URLs. Each format's reader does the validation, charges what it builds to the
open's one parse budget and speaks the one ``Reader`` protocol (``strided.io._reader``);
this module only gives that protocol the read-only ``Mapping[str, Tensor]`` face, the
digests and the expansion check, and never asks which format it holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from .._core.dtype import DType
from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_EXPANSION
from .._core.memory import guard_function, guard_methods
from .._core.stored_float import copied
from .._kernels.digest import (
    UNREADABLE_PREFIX,
    combine,
    hash_array,
    hash_pieces,
    raw_digest,
    stored_digest,
)
from .._tensor.inspect import TensorInspection, TensorInspectionOptions
from .._tensor.tensor import Tensor
from ..io._budget import ParseBudget
from ..io._common import label
from ..io._http import is_url
from ..io._open import open_detected, open_url
from ..io._reader import Reader, TensorInfo
from ..io.pickle import PickleImport
from ._metadata_text import metadata_digest, shown, type_text
from ._unreadable import unreadable_error

__all__ = [
    "Checkpoint",
    "PickleImport",
    "TensorInfo",
    "admit",
    "digest_of",
    "has_dtype",
    "open_checkpoint",
    "open_local",
]

_DTYPES = {dtype.name: dtype for dtype in DType}


@guard_methods
class Checkpoint(Mapping[str, Tensor]):
    """An opened checkpoint of any supported format: a read-only mapping name -> Tensor.

    Made by ``open_checkpoint``. ``ckpt[name]`` loads one tensor: zero-copy wherever the
    stored bytes are plain little-endian elements (the file must then not be modified
    or truncated while the tensor lives; open with ``copy=True`` for tensors
    independent of the file), block-quantized GGUF tensors dequantized to F32. A
    missing name raises ``KeyError`` as every Mapping does; a tensor whose stored type
    strided cannot decode (``F4``, say) raises DTypeError (``info`` still describes it).
    ``keys()`` lists names in file order. ``format``, ``path``, ``metadata``,
    ``info(name)``, ``inspect(name, options)``, ``digest()``, ``metadata_digest()``,
    ``imports`` (the globals a pickle names, judged), ``unreadable`` (members the file
    holds but strided cannot read) and ``unreadable_digest(name)``; ``close()`` or
    ``with`` releases the reader (tensors already loaded stay valid).

    Example:
        >>> import os, tempfile, numpy as np, strided as st
        >>> path = os.path.join(tempfile.mkdtemp(), "weights.npz")
        >>> np.savez(path, w=np.arange(6, dtype=np.float32).reshape(2, 3), step=np.int64(7))
        >>> ckpt = st.open_checkpoint(path)
        >>> ckpt.format, sorted(ckpt), "w" in ckpt, len(ckpt)
        ('npz', ['step', 'w'], True, 2)
        >>> ckpt.info("w")
        TensorInfo(name='w', dtype='F32', shape=Shape([2, 3]), byte_len=24)
        >>> ckpt["w"].digest() == st.open_checkpoint(path)["w"].digest()
        True
        >>> ckpt.close()
    """

    __slots__ = ("_closed", "_face", "_format", "_infos", "_metadata", "_path")

    def __init__(self, reader: Reader) -> None:
        """The mapping face of one opened ``reader``; users call ``open_checkpoint`` (or
        ``merge_lora``/``merge_linear``), jobs hand their own readers here. The header
        facts and the metadata are read from the reader once."""
        self._path = reader.path
        self._format = reader.format
        self._face = reader
        self._closed = False
        self._infos = {name: reader.info(name) for name in reader.keys()}
        self._metadata = reader.metadata

    @property
    def format(self) -> str:
        """The source's format: ``"safetensors"``, ``"gguf"``, ``"npy"``, ``"npz"``,
        ``"pytorch"`` (``torch.save`` files and their shards), ``"torchscript"``,
        ``"dcp"`` (a distributed checkpoint), ``"json"``, or ``"merged"``
        (``merge_lora``/``merge_linear``)."""
        return self._format

    @property
    def path(self) -> str:
        """The path (or URL) the checkpoint was opened from."""
        return self._path

    @property
    def imports(self) -> tuple[PickleImport, ...]:
        """Every global the checkpoint's pickles name, as ``PickleImport(module, name,
        verdict, member)``, pickle by pickle in the order they were read and in
        first-use order within each (each once per member; the names after Python's
        protocol 0-2 renaming, ``__builtin__.set`` as ``builtins.set``). Every pickle a
        loader would run is included: a torch archive's ``data.pkl``, TorchScript's
        ``data.pkl`` and ``constants.pkl``, a distributed checkpoint's ``.metadata``
        and each non-tensor item, the pickle of an object-array ``.npz`` member.

        It is the interpreter's own record of the ``GLOBAL``/``STACK_GLOBAL``/``INST``
        opcodes it ran, so a name assembled through the memo or the stack is reported
        as what it resolved to. ``verdict`` is ``"data"`` (strict mode reads it as
        data), ``"dangerous"`` (it runs code or touches the system when unpickled:
        ``os.system``, ``builtins.eval``, ``torch.load``...) or ``"unknown"`` (any
        other, such as a model's own class; readable only with ``lenient=True``).
        Nothing named is ever imported or called. ``()`` for formats without pickles.
        """
        return self._face.imports

    @property
    def unreadable(self) -> dict[str, str]:
        """A fresh dict ``{name: reason}`` of the members the file holds but strided
        cannot read (``.npz``: string, object, structured arrays; a distributed
        checkpoint: non-tensor items that are not plain data); their names are not
        keys. ``{}`` for formats without such members, and once closed."""
        return {} if self._closed else dict(self._face.unreadable)

    def unreadable_digest(self, name: str) -> str:
        """SHA-256 (64 lowercase hex digits) of the bytes unreadable member ``name``
        occupies in the file, exactly as stored: an ``.npz`` member's stored or deflated
        bytes (never inflated), a distributed checkpoint item's ``torch.save`` archive.
        Nothing is decoded or unpickled. KeyError for a name not in ``unreadable``.
        """
        reader = self._opened()
        if type(name) is not str or name not in reader.unreadable:
            raise KeyError(name)
        return raw_digest(reader.unreadable_stored(name))

    @property
    def metadata(self) -> dict[str, Any]:
        """A fresh copy of the checkpoint's metadata (``{}`` when it has none).

        safetensors: the ``__metadata__`` strings; GGUF: the key-value pairs; PyTorch:
        the plain leaves beside the tensors, under their dotted names; a distributed
        checkpoint: each plain non-tensor item under its name, flattened as in a
        ``torch.save`` file (``optim.param_groups.0.betas.0``).
        """
        return {key: copied(value) for key, value in self._metadata.items()}

    @property
    def metadata_types(self) -> dict[str, str]:
        """Key -> the stored type of its value, as one text.

        GGUF: GGUF's names (``UINT32``, ``STRING``, ``ARRAY[FLOAT32]``,
        ``ARRAY[ARRAY[FLOAT32]]``). Other formats: ``F32``/``F16``/``BF16`` for a float
        that kept its stored type (a NumPy ``float32``/``float16`` scalar in a pickle),
        ``F64`` for a Python float, ``int``, ``str``, ``bool``, ``bytes``, ``null``,
        ``dict``, ``list[T]`` (``list[*]`` for mixed or empty lists).
        """
        stored = self._face.metadata_types()
        if stored is not None:
            return stored
        return {key: type_text(value) for key, value in self._metadata.items()}

    def display_metadata(self) -> dict[str, Any]:
        """``metadata`` for people: each float stored in a narrower type (a GGUF FLOAT32,
        a NumPy ``float32``) as the float of its shortest text in that type.

        A GGUF FLOAT32 ``1e-05`` is stored as the F32 nearest to it, which as a Python
        float prints ``9.999999747378752e-06``; here it is the float of F32's shortest
        round-trip text (``1e-05``), which rounds back to the same F32. At any depth.
        """
        return {key: shown(value) for key, value in self._metadata.items()}

    def info(self, name: str) -> TensorInfo:
        """The tensor's name, dtype name, shape and stored byte length, from the header."""
        found = self._infos.get(name) if type(name) is str else None
        if found is None:
            raise KeyError(name)
        return found

    def inspect(
        self, name: str, options: TensorInspectionOptions | None = None
    ) -> TensorInspection:
        """Inspect tensor ``name`` reading only its sampled elements.

        For a block-quantized GGUF tensor only the blocks holding samples are decoded.
        """
        self.info(name)  # KeyError for a missing name
        return self._opened().inspect(name, options)

    def digest(self, *, allow_expanded: bool = False, skip_unreadable: bool = False) -> str:
        """The checkpoint's content digest: 64 lowercase hex digits.

        SHA-256 of the lines ``NAME\\tTENSOR_DIGEST\\n`` for every tensor, names sorted
        by their UTF-8 bytes (``\\``, newline and tab in a name written ``\\\\``,
        ``\\n``, ``\\t``), where each tensor's digest is ``Tensor.digest()`` (a tensor
        of a stored type strided cannot decode, such as a quantized GGUF tensor, hashes
        its stored bytes under that type's name). Independent of the file format,
        shard split, tensor order and metadata. Reads every tensor once, a bounded
        piece at a time.

        A tensor whose logical size (``info(name).logical_len``) is more than
        ``MAX_EXPANSION`` (2**20) times its stored bytes (``byte_len``: a PyTorch
        ``expand`` view) is a LimitError naming it, raised before any data is read,
        unless ``allow_expanded=True``: then it is hashed by its logical bytes like any
        tensor, which costs time in its logical size (memory stays bounded).

        A checkpoint with ``unreadable`` members is a FormatError naming them (a digest
        that left them out would vouch for what it never saw), unless
        ``skip_unreadable=True``: then each adds the line ``*unreadable*:NAME\\tDIGEST``
        (``unreadable_digest``), so files that differ only there digest differently.
        """
        unreadable = self.unreadable
        if unreadable and not skip_unreadable:
            raise unreadable_error(self._path, unreadable)
        names = list(admit(self, self, allow_expanded))
        pairs = [(name, digest_of(self, name)) for name in names]
        pairs += [(UNREADABLE_PREFIX + name, self.unreadable_digest(name)) for name in unreadable]
        return combine(pairs)

    def metadata_digest(self) -> str:
        """The metadata's digest: 64 lowercase hex digits, the same in every format.

        SHA-256 of the lines ``KEY\\tCANONICAL\\n``, keys sorted by their UTF-8 bytes,
        key and text escaped as names are (``\\\\``, ``\\n``, ``\\t``). CANONICAL is the
        value's text: a str itself, an int decimal, a bool ``true``/``false``, None
        ``null``, a float the shortest text of its stored type (a GGUF FLOAT32 value as
        F32, a Python float as F64), bytes ``b64:`` and base64, a list the compact JSON
        array of its elements' texts (``ensure_ascii=False``), a dict the JSON object of
        its values' texts, keys sorted. The stored type is not part of it (a GGUF u32
        ``4096`` and a safetensors ``"4096"`` are equal). ``format``,
        ``general.alignment`` and ``split.*`` keys are left out: they describe the file,
        not the model. A GGUF tokenizer is digested whole; nothing is copied.
        """
        return metadata_digest(self._metadata)

    def _stored(self, name: str) -> Any:
        """Private: the stored bytes of tensor ``name`` as a flat read-only uint8 array.

        For the formats with stored types strided cannot decode (safetensors, GGUF);
        DTypeError for the others.
        """
        self.info(name)
        return self._opened().stored(name)

    def _chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """Private: stored bytes ``[first, last)`` of tensor ``name`` (all by default) as
        bounded flat uint8 pieces, in order, never the whole tensor at once.

        For safetensors and GGUF, whose tensors are stored as their logical row-major
        little-endian bytes (or as the blocks a quantized digest hashes): views of a
        mapped file, or streamed from a remote one. For a distributed checkpoint, the
        logical bytes read through its chunks. None for the formats that cannot.
        """
        self.info(name)
        return self._opened().chunks(name, first, last)

    def _assembled(self, name: str) -> bool:
        """Private: whether ``ckpt[name]`` builds a new array from stored pieces (a
        distributed checkpoint's tensor of several chunks). Jobs then read it by range
        through ``_chunks``, so no whole copy of it is ever held."""
        self.info(name)
        return self._opened().assembled(name)

    def readable(self, name: str) -> bool:
        """Whether ``ckpt[name]`` can decode the tensor's stored type."""
        return self._face.decodes(self.info(name).dtype)

    def __getitem__(self, name: str) -> Tensor:
        self.info(name)
        return self._opened().get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._infos))

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, name: object) -> bool:
        return type(name) is str and name in self._infos

    def close(self) -> None:
        """Release the file; tensors already loaded stay valid. Closing twice is fine."""
        if not self._closed:
            self._closed = True
            self._face.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _opened(self) -> Reader:
        if self._closed:
            raise FormatError(f"{self._path}: the checkpoint is closed")
        return self._face

    def __repr__(self) -> str:
        count = len(self._infos)
        tensors = f"{count} tensor" if count == 1 else f"{count} tensors"
        return f"Checkpoint({self._path!r}, format={self._format!r}, {tensors})"


def has_dtype(type_name: str) -> bool:
    """Whether a stored type name (``TensorInfo.dtype``) is a strided DType's name."""
    return type_name in _DTYPES


@guard_function
def open_checkpoint(
    path: str | os.PathLike[str] | bytes,
    copy: bool = False,
    *,
    lenient: bool = False,
    token: str | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> Checkpoint:
    """Open any supported checkpoint, recognizing its format from its first bytes.

    safetensors (a file, a folder of shards, or a ``*.safetensors.index.json``), GGUF,
    ``.npy``, ``.npz``, PyTorch checkpoints (zip and legacy, read without running them;
    also sharded through ``pytorch_model.bin.index.json``), TorchScript archives
    (``format`` ``"torchscript"``), a distributed checkpoint folder of
    ``torch.distributed.checkpoint`` or its ``.metadata`` as one model (``format``
    ``"dcp"``), and strided JSON. Headers are
    validated at once; tensor data is read only when a tensor is asked for. ``copy=True``
    makes every tensor a copy independent of the file. A path that cannot be opened
    raises the OSError unchanged; an unrecognized or malformed file is a FormatError
    (LimitError for caps) naming the file.

    A pickle (PyTorch) is interpreted as data, never run. By default a global outside
    strict mode's allow-list is a FormatError naming it. With ``lenient=True`` any
    other global becomes an inert record, never imported or called, whose arguments
    and state are walked for tensors; a pickled ``torch.nn.Module`` (``torch.save(model)``)
    gives exactly the names and tensors of its ``state_dict()``. ``imports`` lists what
    the pickles named, with verdicts. For formats without pickles ``lenient`` changes
    nothing.

    An ``http://`` or ``https://`` URL of a safetensors file, a
    ``*.safetensors.index.json`` (shards resolved relative to it) or a GGUF file is read
    with HTTP range requests (needs ``pip install 'strided[remote]'``): headers and
    metadata at once within fixed budgets, ``inspect`` only the sampled elements,
    ``ckpt[name]`` exactly that tensor's bytes (tensors are copies in memory, as with
    ``copy=True``), ``digest()`` streaming each tensor in bounded pieces. ``token`` is
    sent as a bearer token only to the URL's origin (scheme, host, port), never across
    a redirect to another; without it, ``HF_TOKEN`` is sent only to the Hugging Face
    endpoint (``https://huggingface.co`` or ``HF_ENDPOINT``). ``timeout`` is seconds
    for connecting and for each read, or a ``(connect, read)`` pair; a header or sample
    request also fails once ``timeout`` (the read figure) seconds have passed since it
    started, and a tensor streamed whole is abandoned when any ``timeout``-second window
    brings less than 64 KiB per second (``token`` and ``timeout`` are ignored for a
    local path, so one call serves both). A refused connection or a failed name lookup
    fails at once; a URL that does not parse is a FormatError. Network and HTTP
    failures are OSError (FileNotFoundError for 404), a misbehaving server a
    FormatError, each naming the URL. ``close()`` closes the HTTP client.

    Args:
        path: a file, a folder, or an http(s) URL.
        copy: tensors copied into memory instead of views of the file.
        lenient: read unknown pickle globals as inert records (never run).
        token: a bearer token for a URL's origin. timeout: seconds, for URLs.

    Returns:
        A ``Checkpoint``; close it (or use ``with``) when done.

    Raises:
        FormatError / LimitError for a malformed or hostile file, OSError when the path
        cannot be read.

    Example:
        >>> import os, tempfile, numpy as np, strided as st
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> st.save_safetensors(path, {"w": st.tensor([[1.0, 2.0]], st.DType.BF16)})
        >>> with st.open_checkpoint(path) as ckpt:
        ...     print(ckpt.format, list(ckpt), ckpt.info("w").shape)
        ...     print(ckpt["w"].astype("F32").to_json())
        safetensors ['w'] [1, 2]
        {"dtype":"F32","shape":[1,2],"data":["1.0","2.0"]}
    """

    if is_url(path):
        assert isinstance(path, str)
        return Checkpoint(open_url(path, token, timeout))
    where = label(path)
    return open_local(where, copy, lenient, ParseBudget(where))


def open_local(where: str, copy: bool, lenient: bool, budget: ParseBudget) -> Checkpoint:
    """``open_checkpoint`` of the local path ``where``, charging ``budget``, whose import
    log keeps what the pickles named even when the open fails (``strided scan``)."""
    return Checkpoint(open_detected(where, copy, budget, lenient))


def digest_of(
    checkpoint: Checkpoint, name: str, report: Callable[[int], None] | None = None
) -> str:
    """The digest of tensor ``name`` of an open checkpoint (stored bytes where undecodable).

    Tensors of a strided DType hash their values' bytes (a quantized GGUF tensor is NOT
    dequantized: its stored blocks are hashed under the ggml type's name).
    """
    info = checkpoint.info(name)
    chunks = checkpoint._chunks(name)
    if chunks is not None:
        # Stored as the bytes hashed (safetensors, GGUF): streamed, never held whole.
        return hash_pieces(info.dtype, info.shape, chunks, report)
    if has_dtype(info.dtype):
        tensor = checkpoint[name]
        return hash_array(tensor.dtype.name, tensor.shape, tensor.numpy(), report)
    return stored_digest(info.dtype, info.shape, checkpoint._stored(name), report)


_EXPANSION_BITS = MAX_EXPANSION.bit_length() - 1  # MAX_EXPANSION is a power of two


def admit(
    checkpoint: Checkpoint, names: Iterable[str], allow_expanded: bool = False
) -> dict[str, TensorInfo]:
    """The header facts of the tensors a job is about to read, by name, in order.

    Every job calls this before it reads any tensor data. A tensor whose logical size
    (``TensorInfo.logical_len``) is more than ``MAX_EXPANSION`` times its stored bytes
    (``byte_len``: a PyTorch ``expand`` view, whose few stored bytes describe a huge
    tensor) is a LimitError naming the file and the tensor, unless ``allow_expanded``:
    the job's time (never its memory) would grow with the logical size. Reads headers
    only; KeyError for a name not in the checkpoint.
    """
    infos = {}
    for name in names:
        info = checkpoint.info(name)
        logical = info.logical_len
        if not allow_expanded and logical > info.byte_len * MAX_EXPANSION:
            raise LimitError(
                f"{checkpoint.path}: tensor {name!r}: logical size {logical} bytes is more "
                f"than 2^{_EXPANSION_BITS} x its {info.byte_len} stored bytes (an expanded "
                "view); pass --allow-expanded (allow_expanded=True) to process it"
            )
        infos[name] = info
    return infos
