"""Each format's file class behind the ``Reader`` protocol: how big its tensors are
stored, what it can hand out without decoding, and what it cannot read.

The file classes (``SafetensorsFile``, ``GGUFFile``, ``PyTorchFile``, ``DcpFile``,
``NpzFile``) keep their public faces (``info`` gives ``(type name, shape)``, GGUF's
``get`` takes ``dequantize``); these thin readers say what those faces mean for the
door, so no caller needs to know which one it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._tensor.inspect import TensorInspection, TensorInspectionOptions
from .._tensor.tensor import Tensor
from ._reader import Reader, TensorInfo, plain_len
from ._safetensors_header import DTYPE_BITS
from .gguf import DEQUANTIZABLE, GGML_TYPES, GGUFFile, SplitGGUF
from .npz import NpzFile
from .safetensors import SafetensorsFile
from .torch import DcpFile, PyTorchFile

__all__ = ["DcpReader", "GGUFReader", "NpzReader", "PyTorchReader", "SafetensorsReader"]

# ggml type name -> (elements per block, bytes per block)
_BLOCKS = {kind.name: (kind.block_size, kind.block_bytes) for kind in GGML_TYPES.values()}


class _FileReader(Reader):
    """A reader over one of ``strided.io``'s file classes, ``source``."""

    __slots__ = ("source",)

    def __init__(self, path: str, source: Any) -> None:
        super().__init__(path)
        self.source = source

    def keys(self) -> list[str]:
        """The source's names, in file order."""
        names: list[str] = self.source.keys()
        return names

    @property
    def metadata(self) -> dict[str, Any]:
        """The source's metadata."""
        found: dict[str, Any] = self.source.metadata
        return found

    def get(self, name: str) -> Tensor:
        """The source's tensor."""
        found: Tensor = self.source.get(name)
        return found

    def inspect(self, name: str, options: TensorInspectionOptions | None) -> TensorInspection:
        """The source's inspection, which reads only the sampled elements."""
        found: TensorInspection = self.source.inspect(name, options)
        return found

    def close(self) -> None:
        """Close the source."""
        self.source.close()


class SafetensorsReader(_FileReader):
    """A safetensors file, a set of shards or an index, local or over HTTP. Tensors are
    stored as their logical little-endian bytes (sub-byte floats packed), so their
    stored bytes and ranges are handed out as they lie."""

    __slots__ = ()
    source: SafetensorsFile

    @property
    def format(self) -> str:
        """``"safetensors"``."""
        return "safetensors"

    def info(self, name: str) -> TensorInfo:
        """Sized by bits: also for dtypes strided cannot hold (F4 packs two per byte)."""
        dtype_name, shape = self.source.info(name)
        return TensorInfo(name, dtype_name, shape, shape.numel * DTYPE_BITS[dtype_name][1] // 8)

    def stored(self, name: str) -> Any:
        """The tensor's bytes as stored."""
        return self.source.stored(name)

    def chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """Views of the mapped file, or pieces streamed from a remote one."""
        return self.source.chunks(name, first, last)


class GGUFReader(_FileReader):
    """A GGUF file (or the parts of a split model), local or over HTTP, whose ``get``
    dequantizes block-quantized tensors to F32; stored bytes are the blocks."""

    __slots__ = ()
    source: GGUFFile | SplitGGUF

    @property
    def format(self) -> str:
        """``"gguf"``."""
        return "gguf"

    def info(self, name: str) -> TensorInfo:
        """Sized by the type's blocks."""
        type_name, shape = self.source.info(name)
        block_size, block_bytes = _BLOCKS[type_name]
        return TensorInfo(name, type_name, shape, shape.numel // block_size * block_bytes)

    def metadata_types(self) -> dict[str, str] | None:
        """GGUF's type names of the metadata values (``UINT32``, ``ARRAY[STRING]``)."""
        return dict(self.source.metadata_types)

    def decodes(self, type_name: str) -> bool:
        """A strided DType, or a block-quantized type ``get`` dequantizes."""
        return super().decodes(type_name) or type_name in DEQUANTIZABLE

    def get(self, name: str) -> Tensor:
        """The tensor, dequantized to F32 when block-quantized."""
        return self.source.get(name, dequantize=self.info(name).dtype in DEQUANTIZABLE)

    def stored(self, name: str) -> Any:
        """The tensor's stored bytes (blocks for a quantized type)."""
        return self.source.raw(name).numpy()

    def chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """The stored bytes in bounded pieces."""
        return self.source.chunks(name, first, last)


class PyTorchReader(_FileReader):
    """A ``torch.save`` archive (zip or legacy, or shards through an index) or a
    TorchScript archive: ``kind`` says which. A view's stored size is the storage its
    distinct elements occupy."""

    __slots__ = ("_kind",)
    source: PyTorchFile | DcpFile

    def __init__(self, path: str, source: PyTorchFile | DcpFile, kind: str) -> None:
        super().__init__(path, source)
        self._kind = kind

    @property
    def format(self) -> str:
        """``"pytorch"``, ``"torchscript"`` or ``"dcp"``."""
        return self._kind

    def info(self, name: str) -> TensorInfo:
        """Sized by the stored elements."""
        dtype_name, shape = self.source.info(name)
        return TensorInfo(name, dtype_name, shape, self.source.stored_byte_len(name))


class DcpReader(PyTorchReader):
    """A ``torch.distributed.checkpoint`` folder: tensors may be assembled from chunks,
    which ranges read piece by piece; non-tensor items that are not plain data are
    unreadable members."""

    __slots__ = ()
    source: DcpFile

    def __init__(self, path: str, source: DcpFile) -> None:
        super().__init__(path, source, "dcp")

    @property
    def unreadable(self) -> dict[str, str]:
        """Items that are neither tensors nor plain data."""
        return self.source.unreadable

    def unreadable_stored(self, name: str) -> Any:
        """The item's ``torch.save`` archive as stored."""
        return self.source.unreadable_stored(name)

    def assembled(self, name: str) -> bool:
        """Whether the tensor spans several chunks."""
        return self.source.assembled(name)

    def chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """The logical bytes through the chunks, never the whole tensor at once."""
        return self.source.chunks(name, first, last)


class NpzReader(_FileReader):
    """A NumPy ``.npz`` archive; string, object and structured members are unreadable."""

    __slots__ = ()
    source: NpzFile

    @property
    def format(self) -> str:
        """``"npz"``."""
        return "npz"

    def info(self, name: str) -> TensorInfo:
        """Sized as plain elements."""
        dtype_name, shape = self.source.info(name)
        return TensorInfo(name, dtype_name, shape, plain_len(shape, dtype_name))

    @property
    def unreadable(self) -> dict[str, str]:
        """The members strided cannot read."""
        return self.source.unreadable

    def unreadable_stored(self, name: str) -> Any:
        """The member's stored (or deflated) bytes."""
        return self.source.unreadable_stored(name)
