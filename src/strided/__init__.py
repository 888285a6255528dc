"""strided: immutable, exact, strided tensors for machine-learning inference data.

The public names are loaded on first use (PEP 562): ``import strided`` itself imports
neither NumPy nor ml_dtypes (the latter alone takes about a second to load), so the
``strided`` command starts at once and a program pays only for what it touches.
``from strided import Tensor``, ``strided.Tensor``, ``dir(strided)`` and ``__all__``
work as for any module, and type checkers see the imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._core.version import VERSION

if TYPE_CHECKING:
    from ._core.dtype import DType
    from ._core.errors import (
        DataError,
        DivisionError,
        DTypeError,
        FormatError,
        IndexingError,
        LimitError,
        RangeError,
        ShapeError,
    )
    from ._core.limits import MAX_ELEMENTS, MAX_INSPECTION_SAMPLES, MAX_RANK
    from ._core.scalar import Scalar
    from ._core.shape import Shape
    from ._tensor.arith import BinaryOp
    from ._tensor.inspect import TensorInspection, TensorInspectionOptions
    from ._tensor.join import concatenate, stack, where
    from ._tensor.tensor import Tensor, tensor
    from .io import (
        GGUFFile,
        SafetensorsFile,
        load_npy,
        load_safetensors,
        open_gguf,
        open_safetensors,
        save_npy,
    )
    from .jobs._checkpoint import Checkpoint, PickleImport, TensorInfo, open_checkpoint
    from .jobs._diff_job import diff
    from .jobs._diff_report import DiffReport
    from .jobs._faces import hash, verify
    from .jobs._gguf_export import save_gguf
    from .jobs._hash import HashReport, TensorDigest
    from .jobs._merge import MergedCheckpoint, merge_linear, merge_lora
    from .jobs._pickle_scan import ScannedFile, ScanReport, scan
    from .jobs._save import SaveReport, save, save_safetensors
    from .jobs._set_metadata_job import SetMetadataReport, set_metadata
    from .jobs._verify import ManifestCheck, TensorCheck, VerifyReport

__version__ = VERSION

__all__ = [
    "MAX_ELEMENTS",
    "MAX_INSPECTION_SAMPLES",
    "MAX_RANK",
    "BinaryOp",
    "Checkpoint",
    "DType",
    "DTypeError",
    "DataError",
    "DiffReport",
    "DivisionError",
    "FormatError",
    "GGUFFile",
    "HashReport",
    "IndexingError",
    "LimitError",
    "ManifestCheck",
    "MergedCheckpoint",
    "PickleImport",
    "RangeError",
    "SafetensorsFile",
    "SaveReport",
    "Scalar",
    "ScanReport",
    "ScannedFile",
    "SetMetadataReport",
    "Shape",
    "ShapeError",
    "Tensor",
    "TensorCheck",
    "TensorDigest",
    "TensorInfo",
    "TensorInspection",
    "TensorInspectionOptions",
    "VerifyReport",
    "concatenate",
    "diff",
    "hash",
    "load_npy",
    "load_safetensors",
    "merge_linear",
    "merge_lora",
    "open_checkpoint",
    "open_gguf",
    "open_safetensors",
    "save",
    "save_gguf",
    "save_npy",
    "save_safetensors",
    "scan",
    "set_metadata",
    "stack",
    "tensor",
    "verify",
    "where",
]

# The module each public name lives in (the TYPE_CHECKING block above, for people).
_HOMES = {
    "BinaryOp": "._tensor.arith",
    "Checkpoint": ".jobs._checkpoint",
    "TensorInfo": ".jobs._checkpoint",
    "PickleImport": ".jobs._checkpoint",
    "open_checkpoint": ".jobs._checkpoint",
    "hash": ".jobs._faces",
    "verify": ".jobs._faces",
    "HashReport": ".jobs._hash",
    "TensorDigest": ".jobs._hash",
    "ManifestCheck": ".jobs._verify",
    "TensorCheck": ".jobs._verify",
    "VerifyReport": ".jobs._verify",
    "diff": ".jobs._diff_job",
    "DiffReport": ".jobs._diff_report",
    "SetMetadataReport": ".jobs._set_metadata_job",
    "set_metadata": ".jobs._set_metadata_job",
    "save_gguf": ".jobs._gguf_export",
    "MergedCheckpoint": ".jobs._merge",
    "merge_linear": ".jobs._merge",
    "merge_lora": ".jobs._merge",
    "ScanReport": ".jobs._pickle_scan",
    "ScannedFile": ".jobs._pickle_scan",
    "scan": ".jobs._pickle_scan",
    "SaveReport": ".jobs._save",
    "save": ".jobs._save",
    "DType": "._core.scalar",  # DType.min/max return Scalars: bound there
    "DataError": "._core.errors",
    "DivisionError": "._core.errors",
    "DTypeError": "._core.errors",
    "FormatError": "._core.errors",
    "IndexingError": "._core.errors",
    "LimitError": "._core.errors",
    "RangeError": "._core.errors",
    "ShapeError": "._core.errors",
    "TensorInspection": "._tensor.inspect",
    "TensorInspectionOptions": "._tensor.inspect",
    "concatenate": "._tensor.join",
    "stack": "._tensor.join",
    "MAX_ELEMENTS": "._core.limits",
    "MAX_INSPECTION_SAMPLES": "._core.limits",
    "MAX_RANK": "._core.limits",
    "Scalar": "._core.scalar",
    "where": "._tensor.join",
    "Shape": "._core.shape",
    "Tensor": "._tensor.tensor",
    "tensor": "._tensor.tensor",
    "GGUFFile": ".io",
    "SafetensorsFile": ".io",
    "load_npy": ".io",
    "load_safetensors": ".io",
    "open_gguf": ".io",
    "open_safetensors": ".io",
    "save_npy": ".io",
    "save_safetensors": ".jobs._save",
}


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if not TYPE_CHECKING:
    # Hidden from type checkers, so a misspelt ``strided.Tensr`` stays an error for them.

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value  # found directly from now on
        return value
