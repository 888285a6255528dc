"""strided: immutable, exact, strided tensors for machine-learning inference data."""

from ._arith import BinaryOp
from ._checkpoint import Checkpoint, TensorInfo, open_checkpoint
from ._dtype import DType
from ._errors import (
    DataError,
    DivisionError,
    DTypeError,
    FormatError,
    IndexingError,
    LimitError,
    RangeError,
    ShapeError,
)
from ._inspect import TensorInspection, TensorInspectionOptions
from ._join import concatenate, stack
from ._limits import MAX_ELEMENTS, MAX_INSPECTION_SAMPLES, MAX_RANK
from ._scalar import Scalar
from ._select import where
from ._shape import Shape
from ._tensor import Tensor, tensor
from .io import (
    GGUFFile,
    SafetensorsFile,
    load_npy,
    load_safetensors,
    open_gguf,
    open_safetensors,
    save_npy,
    save_safetensors,
)

__version__ = "0.2.0"

__all__ = [
    "MAX_ELEMENTS",
    "MAX_INSPECTION_SAMPLES",
    "MAX_RANK",
    "BinaryOp",
    "Checkpoint",
    "DType",
    "DTypeError",
    "DataError",
    "DivisionError",
    "FormatError",
    "GGUFFile",
    "IndexingError",
    "LimitError",
    "RangeError",
    "SafetensorsFile",
    "Scalar",
    "Shape",
    "ShapeError",
    "Tensor",
    "TensorInfo",
    "TensorInspection",
    "TensorInspectionOptions",
    "concatenate",
    "load_npy",
    "load_safetensors",
    "open_checkpoint",
    "open_gguf",
    "open_safetensors",
    "save_npy",
    "save_safetensors",
    "stack",
    "tensor",
    "where",
]
