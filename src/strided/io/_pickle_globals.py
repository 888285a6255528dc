"""The closed allow-list of globals a pickle may name, each understood as data.

``GLOBALS`` maps ``"module.name"`` to the ``Global`` marker the interpreter pushes for
it; nothing else is ever resolved, and nothing here is imported or called:

* rebuild rules applied by ``REDUCE``: ``collections.OrderedDict``, ``torch.Size``,
  ``_codecs.encode(text, "latin1")`` (how protocol 2 spells ``bytes``), the tensor
  rebuild functions ``torch._utils._rebuild_tensor_v2`` / ``_v3`` and
  ``_rebuild_parameter`` (``_with_state``);
* storage types (``torch.FloatStorage``..., also under ``torch.cuda``, and
  ``torch.storage.UntypedStorage``) and dtypes (``torch.float8_e4m3fn``...), which only
  ever label a ``StorageRef`` or a tensor.

``UNSUPPORTED`` names the torch dtypes and storages strided has no DType for, so their
refusal says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._core.dtype import DType
from .._core.errors import FormatError, LimitError
from ._pickle_data import Global, ordered_dict, rebuild_parameter, rebuild_tensor, torch_size

if TYPE_CHECKING:
    from ._pickle import Machine

__all__ = ["GLOBALS", "UNSUPPORTED"]


def _encode(m: Machine, args: tuple[Any, ...]) -> object:
    """``_codecs.encode(text, "latin1")``: the bytes protocol 2 stores as latin-1 text.

    All such bytes together may not exceed the pickle's own size (the text is in the
    pickle; a memo reference may not encode it again and again).
    """
    if len(args) != 2 or type(args[0]) is not str or args[1] not in ("latin1", "latin-1"):
        raise FormatError("expected (text, 'latin1')")
    m.bytes_budget -= len(args[0])
    if m.bytes_budget < 0:
        raise LimitError("the pickle makes more bytes than it holds")
    try:
        return args[0].encode("latin-1")
    except UnicodeEncodeError:
        raise FormatError("the text holds characters beyond latin-1") from None


_RULES: dict[str, Callable[[Any, tuple[Any, ...]], object]] = {
    "collections.OrderedDict": lambda m, args: ordered_dict(args),
    "_codecs.encode": _encode,
    "torch.Size": lambda m, args: torch_size(args),
    "torch._utils._rebuild_tensor_v2": lambda m, args: rebuild_tensor(args, False),
    "torch._utils._rebuild_tensor_v3": lambda m, args: rebuild_tensor(args, True),
    "torch._utils._rebuild_parameter": lambda m, args: rebuild_parameter(args, False),
    "torch._utils._rebuild_parameter_with_state": lambda m, args: rebuild_parameter(args, True),
}

# The element type of each typed storage class torch writes (torch.cuda.* in old files).
_STORAGE_TYPES = {
    "BoolStorage": DType.BOOL, "CharStorage": DType.I8, "ShortStorage": DType.I16,
    "IntStorage": DType.I32, "LongStorage": DType.I64, "ByteStorage": DType.U8,
    "HalfStorage": DType.F16, "BFloat16Storage": DType.BF16, "FloatStorage": DType.F32,
    "DoubleStorage": DType.F64,
}  # fmt: skip
# torch's dtype names; E8M0 is read once strided has a DType for it, refused until then.
_DTYPE_NAMES: dict[str, DType | None] = {
    "bool": DType.BOOL, "int8": DType.I8, "int16": DType.I16, "int32": DType.I32,
    "int64": DType.I64, "uint8": DType.U8, "uint16": DType.U16, "uint32": DType.U32,
    "uint64": DType.U64, "float16": DType.F16, "bfloat16": DType.BF16, "float32": DType.F32,
    "float64": DType.F64, "float8_e4m3fn": DType.F8_E4M3, "float8_e5m2": DType.F8_E5M2,
    "float8_e8m0fnu": getattr(DType, "F8_E8M0", None),
}  # fmt: skip
_NO_DTYPE = (
    "complex32 complex64 complex128 float8_e4m3fnuz float8_e5m2fnuz float4_e2m1fn_x2 "
    "qint8 quint8 qint32 quint4x2 quint2x4 bits1x8 bits2x4 bits4x2 bits8 bits16 "
    + " ".join(f"uint{bits} int{bits}" for bits in range(1, 8))
).split() + [name for name, dtype in _DTYPE_NAMES.items() if dtype is None]
_NO_STORAGE = "ComplexFloatStorage ComplexDoubleStorage QInt8Storage QUInt8Storage "
_NO_STORAGE += "QInt32Storage QUInt4x2Storage QUInt2x4Storage"


def _allowed() -> dict[str, Global]:
    table: dict[str, Global] = {}
    for name, rule in _RULES.items():
        table[name] = Global(name, "call", rule=rule)
    for name, dtype in _STORAGE_TYPES.items():
        for module in ("torch", "torch.cuda"):
            table[f"{module}.{name}"] = Global(f"{module}.{name}", "storage", dtype)
    table["torch.storage.UntypedStorage"] = Global("torch.storage.UntypedStorage", "untyped")
    for name, found in _DTYPE_NAMES.items():
        if found is not None:
            table[f"torch.{name}"] = Global(f"torch.{name}", "dtype", found)
    return table


# "module.name" -> the marker it stands for. Nothing else is ever resolved.
GLOBALS = _allowed()
UNSUPPORTED = {
    **{f"torch.{name}": "is a torch dtype strided has no DType for" for name in _NO_DTYPE},
    **{
        f"{module}.{name}": "is a storage of elements strided has no DType for"
        for name in _NO_STORAGE.split()
        for module in ("torch", "torch.cuda")
    },
}
