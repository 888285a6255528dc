"""The one protocol every format's reader speaks to the door, and ``TensorInfo``.

``Reader`` is a small abstract class in the manner of ``collections.abc``: a format
implements ``format``, ``keys``, ``info``, ``get`` and ``close`` and inherits the rest
(no separate stored bytes, no ranges, no metadata, no unreadable members, inspection by
loading the tensor) until it has something better to offer. ``Checkpoint`` speaks only
this protocol, so a new format is one reader and one row of the opener table in
``_open``; nothing above ``io`` asks which format it holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._core.dtype import DType
from .._core.errors import DTypeError
from .._core.shape import Shape
from .._tensor.inspect import TensorInspection, TensorInspectionOptions
from .._tensor.tensor import Tensor
from .pickle import PickleImport

__all__ = ["Reader", "TensorInfo", "TensorsReader", "plain_len"]

_DTYPES = {dtype.name: dtype for dtype in DType}


class TensorInfo(NamedTuple):
    """A tensor as its file's header describes it, without reading its data.

    ``dtype`` is a ``DType`` name, or the stored type's own name where strided has no
    DType for it (``"Q4_K"``, ``"F4"``). ``byte_len`` is the stored size in bytes: what
    the file holds of the tensor. That is ``numel x itemsize`` for a plain tensor, the
    stored blocks of a quantized GGUF tensor, and for a PyTorch view whose elements
    repeat (``expand``) only the storage its distinct elements occupy, so
    ``torch.zeros(1).expand(2**33)`` stores 4 bytes. ``logical_len`` is the size of
    its logical values.
    """

    name: str
    dtype: str
    shape: Shape
    byte_len: int

    @property
    def logical_len(self) -> int:
        """The bytes of the logical values, ``numel x itemsize``: what a whole-tensor job
        reads, hashes or writes. Equal to ``byte_len`` except for an expanded PyTorch
        view (larger); for a stored type strided has no DType for, ``byte_len``."""
        dtype = _DTYPES.get(self.dtype)
        return self.byte_len if dtype is None else self.shape.numel * dtype.itemsize


def plain_len(shape: Shape, type_name: str) -> int:
    """``numel x itemsize`` of a tensor stored as plain elements (0 for a type name
    strided has no DType for: such a reader says nothing of its size)."""
    dtype = _DTYPES.get(type_name)
    return 0 if dtype is None else shape.numel * dtype.itemsize


class Reader(ABC):
    """One opened source of tensors, whatever its format.

    ``path`` is what it was opened from (a path or URL). ``imports`` is set by the door
    once the open succeeded: every global the source's pickles named, judged.
    """

    __slots__ = ("imports", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.imports: tuple[PickleImport, ...] = ()

    @property
    @abstractmethod
    def format(self) -> str:
        """The source's format, as ``Checkpoint.format`` names it."""

    @abstractmethod
    def keys(self) -> list[str]:
        """The tensor names, in file order."""

    @abstractmethod
    def info(self, name: str) -> TensorInfo:
        """The header facts of tensor ``name`` (a name from ``keys()``)."""

    @abstractmethod
    def get(self, name: str) -> Tensor:
        """Tensor ``name`` (a name from ``keys()``), decoded."""

    @abstractmethod
    def close(self) -> None:
        """Release what the reader holds; closing twice is fine."""

    @property
    def metadata(self) -> dict[str, Any]:
        """The source's metadata (``{}``: none). The caller copies before handing it out."""
        return {}

    def metadata_types(self) -> dict[str, str] | None:
        """Key -> the stored type of its value, where the format records one (GGUF);
        None where the type is only the Python value's."""
        return None

    @property
    def unreadable(self) -> dict[str, str]:
        """Members the source holds but strided cannot read, ``{name: reason}``."""
        return {}

    def unreadable_stored(self, name: str) -> Any:
        """The stored bytes of unreadable member ``name``; KeyError when there is none."""
        raise KeyError(name)

    def decodes(self, type_name: str) -> bool:
        """Whether ``get`` decodes a tensor stored as ``type_name`` (a ``TensorInfo``
        dtype); a fact of the format, so it holds after ``close`` too."""
        return type_name in _DTYPES

    def stored(self, name: str) -> Any:
        """The stored bytes of tensor ``name`` as a flat read-only uint8 array.

        Only formats with stored types strided cannot decode keep them apart from the
        tensor; the others are a DTypeError.
        """
        raise DTypeError(f"{self.path}: {self.format} tensors have no separate stored bytes")

    def chunks(self, name: str, first: int = 0, last: int | None = None) -> Iterator[Any] | None:
        """Stored bytes ``[first, last)`` of tensor ``name`` as bounded flat uint8 pieces
        in order, without assembling the tensor; None where the format cannot."""
        return None

    def assembled(self, name: str) -> bool:
        """Whether ``get(name)`` builds a new array from several stored pieces."""
        return False

    def inspect(self, name: str, options: TensorInspectionOptions | None) -> TensorInspection:
        """Inspect tensor ``name``; by default by loading it (readers that can sample
        without loading override this)."""
        tensor = self.get(name)
        return tensor.inspect() if options is None else tensor.inspect(options)


class TensorsReader(Reader):
    """Tensors already in hand (a ``.npy`` file, a strided JSON document): the reader
    of a format whose whole content is decoded at the open."""

    __slots__ = ("_format", "_tensors")

    def __init__(self, path: str, kind: str, tensors: dict[str, Tensor]) -> None:
        super().__init__(path)
        self._format = kind
        self._tensors = tensors

    @property
    def format(self) -> str:
        """The format the tensors were read from."""
        return self._format

    def keys(self) -> list[str]:
        """The names, in the order given."""
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        """The tensor's facts; its stored size is its logical size."""
        tensor = self._tensors[name]
        return TensorInfo(
            name, tensor.dtype.name, tensor.shape, plain_len(tensor.shape, tensor.dtype.name)
        )

    def get(self, name: str) -> Tensor:
        """The tensor itself."""
        return self._tensors[name]

    def close(self) -> None:
        """Nothing to release: the tensors live on."""
