"""One door for every checkpoint file: ``open_checkpoint`` and the ``Checkpoint`` mapping.

The format is recognized from the file's first bytes, never from its name:

* ``GGUF`` magic: GGUF;  ``\\x93NUMPY``: ``.npy``;
* a zip archive (``PK``): a PyTorch zip checkpoint when it holds ``<folder>/data.pkl``,
  otherwise ``.npz``;
* a pickle (``\\x80`` and a protocol number): a legacy PyTorch checkpoint;
* ``{``: JSON, either a shard index (it has a ``weight_map``; safetensors or PyTorch by
  its shards) or a strided tensor document;
* an 8-byte little-endian length followed by ``{``: safetensors;
* a folder: its ``*.safetensors`` shards.

Each format's reader does the validation; this module only dispatches and gives every
format the same read-only ``Mapping[str, Tensor]`` face.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from ._dtype import DType
from ._errors import DTypeError, FormatError
from ._inspect import TensorInspection, TensorInspectionOptions
from ._memory import guard_function, guard_methods
from ._metadata_text import metadata_digest
from ._shape import Shape
from ._tensor import Tensor

__all__ = ["Checkpoint", "TensorInfo", "has_dtype", "open_checkpoint"]

FORMATS = ("safetensors", "gguf", "npy", "npz", "pytorch", "json")
_DTYPES = {dtype.name: dtype for dtype in DType}


class TensorInfo(NamedTuple):
    """A tensor as its file's header describes it, without reading its data.

    ``dtype`` is a ``DType`` name, or the stored type's own name where strided has no
    DType for it (``"Q4_K"``, ``"F4"``); ``byte_len`` is the stored size in bytes.
    """

    name: str
    dtype: str
    shape: Shape
    byte_len: int


class _Reader(Protocol):
    """What a format's reader offers the door (the file classes of ``strided.io``)."""

    def keys(self) -> list[str]: ...
    def get(self, name: str) -> Tensor: ...
    def close(self) -> None: ...


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
    ``info(name)``, ``inspect(name, options)``, ``digest()``, ``metadata_digest()``;
    ``close()`` or ``with`` releases the reader (tensors already loaded stay valid).
    """

    __slots__ = ("_float32_keys", "_format", "_infos", "_metadata", "_path", "_reader")

    def __init__(
        self,
        path: str,
        kind: str,
        reader: _Reader,
        infos: dict[str, TensorInfo],
        metadata: dict[str, Any],
    ) -> None:
        """Private: use ``open_checkpoint``."""
        self._path = path
        self._format = kind
        self._reader: _Reader | None = reader
        self._infos = infos
        self._metadata = metadata
        self._float32_keys: frozenset[str] = frozenset()

    @property
    def format(self) -> str:
        """``"safetensors"``, ``"gguf"``, ``"npy"``, ``"npz"``, ``"pytorch"`` or ``"json"``."""
        return self._format

    @property
    def path(self) -> str:
        """The path (or URL) the checkpoint was opened from."""
        return self._path

    @property
    def metadata(self) -> dict[str, Any]:
        """A fresh copy of the checkpoint's metadata (``{}`` when it has none).

        safetensors: the ``__metadata__`` strings; GGUF: the key-value pairs; PyTorch:
        the plain leaves beside the tensors, under their dotted names.
        """
        return {key: _copied(value) for key, value in self._metadata.items()}

    def display_metadata(self) -> dict[str, Any]:
        """``metadata`` for people: GGUF FLOAT32 values as their shortest F32 text's value.

        A GGUF FLOAT32 ``1e-05`` is stored as the F32 nearest to it, which as a Python
        float prints ``9.999999747378752e-06``; here it is the float of F32's shortest
        round-trip text (``1e-05``), which rounds back to the same F32.
        """
        shown = self.metadata
        for key in self._float32_keys:
            value = shown[key]
            shown[key] = [_f32(v) for v in value] if isinstance(value, list) else _f32(value)
        return shown

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
        reader = self._open_reader()
        inspect = getattr(reader, "inspect", None)
        if inspect is not None:
            found: TensorInspection = inspect(name, options)
            return found
        tensor = self[name]
        return tensor.inspect() if options is None else tensor.inspect(options)

    def digest(self) -> str:
        """The checkpoint's content digest: 64 lowercase hex digits.

        SHA-256 of the lines ``NAME\\tTENSOR_DIGEST\\n`` for every tensor, names sorted
        by their UTF-8 bytes (``\\``, newline and tab in a name written ``\\\\``,
        ``\\n``, ``\\t``), where each tensor's digest is ``Tensor.digest()`` (a tensor
        of a stored type strided cannot decode, such as a quantized GGUF tensor, hashes
        its stored bytes under that type's name). Independent of the file format,
        shard split, tensor order and metadata. Reads every tensor once.
        """
        from ._digest import checkpoint_digest

        return checkpoint_digest(self)

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
        return metadata_digest(self._metadata, self._float32_keys)

    def _stored(self, name: str) -> Any:
        """Private: the stored bytes of tensor ``name`` as a flat read-only uint8 array.

        For safetensors and GGUF files (the formats with stored types strided cannot
        decode); DTypeError for the others.
        """
        self.info(name)
        reader = self._open_reader()
        if isinstance(reader, _GGUFReader):
            return reader.handle.raw(name).numpy()
        if self._format == "safetensors":
            return reader.stored(name)  # type: ignore[attr-defined]
        raise DTypeError(f"{self._path}: {self._format} tensors have no separate stored bytes")

    def _chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """Private: stored bytes ``[first, last)`` of tensor ``name`` (all by default) as
        bounded flat uint8 pieces, in order.

        For safetensors and GGUF, whose tensors are stored as their logical row-major
        little-endian bytes (or as the blocks a quantized digest hashes): views of a
        mapped file, or streamed from a remote one. None for the other formats.
        """
        self.info(name)
        reader = self._open_reader()
        if isinstance(reader, _GGUFReader):
            found: Iterator[Any] = reader.handle.chunks(name, first, last)
            return found
        if self._format == "safetensors":
            found = reader.chunks(name, first, last)  # type: ignore[attr-defined]
            return found
        return None

    def readable(self, name: str) -> bool:
        """Whether ``ckpt[name]`` can decode the tensor's stored type."""
        dtype = self.info(name).dtype
        return dtype in _DTYPES or (self._format == "gguf" and _dequantizable(dtype))

    def __getitem__(self, name: str) -> Tensor:
        self.info(name)
        return self._open_reader().get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._infos))

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, name: object) -> bool:
        return type(name) is str and name in self._infos

    def close(self) -> None:
        """Release the file; tensors already loaded stay valid. Closing twice is fine."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _open_reader(self) -> _Reader:
        if self._reader is None:
            raise FormatError(f"{self._path}: the checkpoint is closed")
        return self._reader

    def __repr__(self) -> str:
        return f"Checkpoint({self._path!r}, format={self._format!r}, {len(self._infos)} tensors)"


def _f32(value: float) -> float:
    from ._scalar import Scalar

    return float(str(Scalar(DType.F32, value)))


def has_dtype(type_name: str) -> bool:
    """Whether a stored type name (``TensorInfo.dtype``) is a strided DType's name."""
    return type_name in _DTYPES


def _copied(value: Any) -> Any:
    return [_copied(item) for item in value] if isinstance(value, list) else value


def _dequantizable(type_name: str) -> bool:
    from .io._ggml import DEQUANTIZABLE

    return type_name in DEQUANTIZABLE


@guard_function
def open_checkpoint(
    path: str | os.PathLike[str] | bytes,
    copy: bool = False,
    *,
    token: str | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> Checkpoint:
    """Open any supported checkpoint, recognizing its format from its first bytes.

    safetensors (a file, a folder of shards, or a ``*.safetensors.index.json``), GGUF,
    ``.npy``, ``.npz``, PyTorch checkpoints (zip and legacy, read without running them;
    also sharded through ``pytorch_model.bin.index.json``) and strided JSON. Headers are
    validated at once; tensor data is read only when a tensor is asked for. ``copy=True``
    makes every tensor a copy independent of the file. A path that cannot be opened
    raises the OSError unchanged; an unrecognized or malformed file is a FormatError
    (LimitError for caps) naming the file.

    An ``http://`` or ``https://`` URL of a safetensors file, a
    ``*.safetensors.index.json`` (shards resolved relative to it) or a GGUF file is read
    with HTTP range requests (needs ``pip install 'strided[remote]'``): headers and
    metadata at once within fixed budgets, ``inspect`` only the sampled elements,
    ``ckpt[name]`` exactly that tensor's bytes (tensors are copies in memory, as with
    ``copy=True``), ``digest()`` streaming each tensor in bounded pieces. ``token`` is
    sent as a bearer token only to the URL's origin (scheme, host, port), never across
    a redirect to another; without it, ``HF_TOKEN`` is sent only to the Hugging Face
    endpoint (``https://huggingface.co`` or ``HF_ENDPOINT``). ``timeout`` is seconds
    for connecting and for each read, or a ``(connect, read)`` pair (``token`` and
    ``timeout`` are ignored for a local path, so one call serves both). Network and HTTP
    failures are OSError (FileNotFoundError for 404), a misbehaving server a
    FormatError, each naming the URL. ``close()`` closes the HTTP client.
    """
    from .io._common import label, open_regular
    from .io._http import is_url

    if is_url(path):
        assert isinstance(path, str)
        return _remote(path, token, timeout)
    where = label(path)
    if os.path.isdir(where):
        return _safetensors(where, copy, folder=True)
    with open_regular(where) as file:
        head = file.read(16)
    kind = _sniff(head, where)
    if kind == "safetensors":
        return _safetensors(where, copy)
    if kind == "gguf":
        return _gguf(where, copy)
    if kind == "npy":
        return _single(where, "npy", _npy(where, copy))
    if kind == "zip":
        return _npz(where, copy) if _zip_kind(where) == "npz" else _pytorch(where, copy)
    if kind == "pickle":
        return _pytorch(where, copy)
    return _json(where, copy)


def _sniff(head: bytes, where: str) -> str:
    if head.startswith(b"GGUF"):
        return "gguf"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"  # a pickle's PROTO opcode: a legacy torch.save file
    if head.lstrip(b" \t\r\n").startswith(b"{"):
        return "json"
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    raise FormatError(
        f"{where}: not a checkpoint strided recognizes (first bytes {head[:8]!r}); "
        "expected safetensors, GGUF, .npy, .npz, a PyTorch checkpoint or strided JSON"
    )


def _safetensors(where: str, copy: bool, folder: bool = False) -> Checkpoint:
    from .io.safetensors import SafetensorsFile, _Shard, open_safetensors

    reader = (
        open_safetensors(where, copy) if folder else SafetensorsFile(where, [_Shard(where)], copy)
    )
    return _from_safetensors(where, reader)


def _from_safetensors(where: str, reader: Any) -> Checkpoint:
    from .io._safetensors_header import DTYPE_BITS

    infos = {}
    for name in reader.keys():
        dtype_name, shape = reader.info(name)
        # Sized by bits: also for dtypes strided cannot hold (F4 packs two per byte).
        byte_len = shape.numel * DTYPE_BITS[dtype_name][1] // 8
        infos[name] = TensorInfo(name, dtype_name, shape, byte_len)
    return Checkpoint(where, "safetensors", reader, infos, reader.metadata)


def _remote(url: str, token: str | None, timeout: float | tuple[float, float] | None) -> Checkpoint:
    from .io.remote import open_remote, remote_gguf, remote_safetensors, sniffed

    storage = open_remote(url, token, timeout)
    try:
        kind = sniffed(storage, _sniff(storage.read(0, min(storage.size, 16)), url))
        if kind == "gguf":
            return _from_gguf(url, remote_gguf(storage))
        return _from_safetensors(url, remote_safetensors(storage, kind == "index"))
    except BaseException:
        storage.close()
        raise


def _gguf(where: str, copy: bool) -> Checkpoint:
    from .io import open_gguf

    return _from_gguf(where, open_gguf(where, copy=copy))


def _from_gguf(where: str, handle: Any) -> Checkpoint:
    from .io._ggml import GGML_TYPES

    sizes = {kind.name: (kind.block_size, kind.block_bytes) for kind in GGML_TYPES.values()}
    infos = {}
    for name in handle.keys():
        type_name, shape = handle.info(name)
        block_size, block_bytes = sizes[type_name]
        infos[name] = TensorInfo(name, type_name, shape, shape.numel // block_size * block_bytes)
    checkpoint = Checkpoint(where, "gguf", _GGUFReader(handle), infos, handle.metadata)
    checkpoint._float32_keys = frozenset(
        key for key, kind in handle.metadata_types.items() if kind in ("FLOAT32", "ARRAY[FLOAT32]")
    )
    return checkpoint


class _GGUFReader:
    """A GGUF file whose ``get`` dequantizes block-quantized tensors."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def keys(self) -> list[str]:
        return list(self.handle.keys())

    def get(self, name: str) -> Tensor:
        tensor: Tensor = self.handle.get(name, dequantize=_dequantizable(self.handle.info(name)[0]))
        return tensor

    def inspect(self, name: str, options: TensorInspectionOptions | None) -> TensorInspection:
        # Decodes only the blocks that hold the samples.
        found: TensorInspection = self.handle.inspect(name, options)
        return found

    def close(self) -> None:
        self.handle.close()


class _SingleReader:
    """One tensor already in hand (``.npy``, strided JSON)."""

    __slots__ = ("name", "tensor")

    def __init__(self, name: str, tensor: Tensor) -> None:
        self.name = name
        self.tensor = tensor

    def keys(self) -> list[str]:
        return [self.name]

    def get(self, name: str) -> Tensor:
        return self.tensor

    def close(self) -> None:
        pass


def _single(where: str, kind: str, tensor: Tensor) -> Checkpoint:
    name = Path(where).stem
    info = TensorInfo(name, tensor.dtype.name, tensor.shape, tensor.byte_len)
    return Checkpoint(where, kind, _SingleReader(name, tensor), {name: info}, {})


def _npy(where: str, copy: bool) -> Tensor:
    from .io import load_npy

    return load_npy(where, copy=copy)


def _json(where: str, copy: bool) -> Checkpoint:
    from .io._common import open_regular

    with open_regular(where) as file:
        data = file.read()
    # A tensor document's entries are scalar texts: it can never hold this key.
    if b'"weight_map"' not in data:
        return _single(where, "json", Tensor.from_json(data))
    del data
    if _first_shard_kind(where) == "pytorch":
        return _pytorch(where, copy)
    from .io.safetensors import SafetensorsFile, _index_shards

    return _from_safetensors(where, SafetensorsFile(where, _index_shards(where), copy))


def _first_shard_kind(index: str) -> str:
    """``"pytorch"`` when the index's first shard is a PyTorch file, else ``"safetensors"``.

    The shard's first bytes decide, as for any checkpoint; the index reader then
    validates the whole index and every shard.
    """
    from ._strict_json import loads_strict
    from .io._common import open_regular

    with open_regular(index) as file:
        parsed = loads_strict(file.read(), index, 16)
    shards = parsed.get("weight_map") if type(parsed) is dict else None
    first = next(iter(shards.values()), None) if type(shards) is dict else None
    if type(first) is not str or os.path.basename(first) != first or first in ("", ".", ".."):
        return "safetensors"  # its reader names the problem
    try:
        with open_regular(os.path.join(os.path.dirname(index), first)) as file:
            head = file.read(16)
    except OSError:
        return "safetensors"
    return "pytorch" if head.startswith(b"PK") or head[:1] == b"\x80" else "safetensors"


def _zip_kind(where: str) -> str:
    """``"pytorch"`` for a zip holding ``<folder>/data.pkl`` (torch.save), else ``"npz"``."""
    from .io._common import file_size, map_file, open_regular
    from .io._zip import DEFLATED, STORED, read_zip

    with open_regular(where) as file:
        raw = map_file(file, file_size(file), where)
    members = read_zip(raw, where, methods=frozenset({STORED, DEFLATED}))
    is_torch = any(name == "data.pkl" or name.endswith("/data.pkl") for name in members)
    return "pytorch" if is_torch else "npz"


def _npz(where: str, copy: bool) -> Checkpoint:
    from .io.npz import open_npz

    return _from_reader(where, "npz", open_npz(where, copy))


def _pytorch(where: str, copy: bool) -> Checkpoint:
    from .io.pytorch import open_pytorch

    return _from_reader(where, "pytorch", open_pytorch(where, copy))


def _from_reader(where: str, kind: str, reader: Any) -> Checkpoint:
    """A reader whose ``info`` gives (DType name, shape) of readable tensors."""
    infos = {}
    for name in reader.keys():
        dtype_name, shape = reader.info(name)
        itemsize = _DTYPES[dtype_name].itemsize if dtype_name in _DTYPES else 0
        infos[name] = TensorInfo(name, dtype_name, shape, shape.numel * itemsize)
    return Checkpoint(where, kind, reader, infos, reader.metadata)
