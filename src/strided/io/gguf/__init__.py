"""The GGUF family: reading, split files, writing, and the ggml block kernels.

``_file`` reads one GGUF file (``GGUFFile``) and ``_split`` a model split across
several; ``_write`` lays out and encodes a GGUF file for the exporters. ``_ggml`` is the
registry of ggml tensor types and their dequantizing kernels (``_quants`` for the basic
blocks, ``_quants_k`` for the k-quants, ``_quants_iq`` with ``_iq_grids`` for the
i-quants); ``_quantize`` with ``_quantize_blocks`` writes blocks, and ``_quant_inspect``
samples quantized tensors for inspection. The rest of the package uses only the names
below (``_Reader`` and ``parse_gguf`` let the remote reader parse a header it fetched).
"""

from ._file import GGUFFile, _Reader, open_gguf, open_gguf_charged, parse_gguf
from ._ggml import DEQUANTIZABLE, GGML_TYPES, ZERO_COPY, dequantize
from ._quantize import QUANTIZABLE, quantize
from ._split import SplitGGUF, folder_first_part, open_split, part_name
from ._write import (
    BLOCK_TYPES,
    FILE_TYPES,
    GGML_BY_NAME,
    GGUFLayout,
    KeyValue,
    TensorSpec,
    alignment_of,
    encode_kv,
    gguf_layout,
    stored_bytes,
    tensor_info,
    value_type,
)

__all__ = [
    "BLOCK_TYPES",
    "DEQUANTIZABLE",
    "FILE_TYPES",
    "GGML_BY_NAME",
    "GGML_TYPES",
    "QUANTIZABLE",
    "ZERO_COPY",
    "GGUFFile",
    "GGUFLayout",
    "KeyValue",
    "SplitGGUF",
    "TensorSpec",
    "_Reader",
    "alignment_of",
    "dequantize",
    "encode_kv",
    "folder_first_part",
    "gguf_layout",
    "open_gguf",
    "open_gguf_charged",
    "open_split",
    "parse_gguf",
    "part_name",
    "quantize",
    "stored_bytes",
    "tensor_info",
    "value_type",
]
