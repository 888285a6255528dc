"""The closed allow-list of globals a pickle may name, each understood as data.

``GLOBALS`` maps ``"module.name"`` to the ``Global`` marker the interpreter pushes for
it; nothing else is ever resolved, and nothing here is imported or called:

* rules applied by ``REDUCE``: ``collections.OrderedDict``, ``torch.Size``,
  ``_codecs.encode(text, "latin1")`` (how protocol 2 spells ``bytes``), the tensor
  rebuild functions ``torch._utils._rebuild_tensor`` (before torch 0.4), ``_v2`` /
  ``_v3``, ``_rebuild_parameter`` (``_with_state``) and
  ``torch._tensor._rebuild_from_type_v2``; the data-only objects of
  ``_builtins`` (sets, complex, bytes, paths, ``torch.device``, the layout) and
  NumPy's arrays, dtypes and scalars (``_numpy``, under ``numpy.core`` and
  NumPy 2's ``numpy._core``);
* classes that ``REDUCE`` or ``NEWOBJ`` make (``argparse.Namespace``, Lightning's
  ``AttributeDict`` in any module of its packages, ``collections.defaultdict`` and
  ``Counter``), held as dicts;
* types that are only arguments (``numpy.ndarray``, ``torch.Tensor``, a
  ``defaultdict``'s factory, ``ml_dtypes``' types naming a dtype);
* storage types (``torch.FloatStorage``..., also under ``torch.cuda``, and
  ``torch.storage.UntypedStorage``) and every torch dtype (``torch.float8_e4m3fn``...),
  which label a ``StorageRef`` or a tensor, or are data on their own.

``UNSUPPORTED`` names the storages and ``ml_dtypes`` types strided has no DType for, so
their refusal says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..._core.dtype import DType
from ..._core.errors import FormatError
from ._builtins import (
    DICT_CLASSES,
    FACTORIES,
    PATH_CLASSES,
    TENSOR_TYPES,
    bytes_of,
    complex_text,
    device_text,
    latin1,
    layout_text,
    make_dict,
    make_set,
    ordered_dict,
    path_text,
    rebuild_from_type,
)
from ._data import (
    Global,
    rebuild_legacy_tensor,
    rebuild_parameter,
    rebuild_tensor,
    torch_size,
)
from ._numpy import ML_DTYPES, ML_UNSUPPORTED, frombuffer, make_dtype, reconstruct, scalar

if TYPE_CHECKING:
    from ._machine import Machine

__all__ = ["GLOBALS", "UNSUPPORTED", "GlobalTable"]


def _encode(m: Machine, args: tuple[Any, ...]) -> object:
    """``_codecs.encode(text, "latin1")``: the bytes protocol 2 stores as latin-1 text."""
    if len(args) != 2 or type(args[0]) is not str or args[1] not in ("latin1", "latin-1"):
        raise FormatError("expected (text, 'latin1')")
    return latin1(m, args[0])


def _bare_bytes(m: Machine, args: tuple[Any, ...]) -> object:
    """``bytes()``: how protocol 2 writes empty bytes (other bytes come as ``_encode``)."""
    if args:
        raise FormatError(f"expected no arguments, found {len(args)}")
    return b""


_NUMPY = ("numpy.core", "numpy._core")
_RULES: dict[str, Callable[[Any, tuple[Any, ...]], object]] = {
    "collections.OrderedDict": ordered_dict,
    "_codecs.encode": _encode,
    "torch.Size": lambda m, args: torch_size(args),
    "torch._utils._rebuild_tensor": lambda m, args: rebuild_legacy_tensor(args),
    "torch._utils._rebuild_tensor_v2": lambda m, args: rebuild_tensor(args, False),
    "torch._utils._rebuild_tensor_v3": lambda m, args: rebuild_tensor(args, True),
    "torch._utils._rebuild_parameter": lambda m, args: rebuild_parameter(args, False),
    "torch._utils._rebuild_parameter_with_state": lambda m, args: rebuild_parameter(args, True),
    "torch._tensor._rebuild_from_type_v2": rebuild_from_type,
    "torch.device": device_text,
    "torch.serialization._get_layout": layout_text,
    "builtins.set": make_set(frozen=False),
    "builtins.frozenset": make_set(frozen=True),
    "builtins.complex": complex_text,
    "builtins.bytes": _bare_bytes,
    "builtins.bytearray": bytes_of,
    "numpy.dtype": make_dtype,
    **{f"{module}.multiarray._reconstruct": reconstruct for module in _NUMPY},
    **{f"{module}.multiarray.scalar": scalar for module in _NUMPY},
    **{f"{module}.numeric._frombuffer": frombuffer for module in _NUMPY},
    **{name: path_text(separator) for name, separator in PATH_CLASSES.items()},
}
# Classes whose objects NEWOBJ may make too (``copyreg.__newobj__``): dict-like data.
_CLASSES = {name: make_dict(name) for name in DICT_CLASSES if name != "AttributeDict"}
# Lightning's AttributeDict, wherever in these packages a version keeps it.
_ATTRIBUTE_DICT_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")
_ATTRIBUTE_DICT = Global("AttributeDict", "class", rule=make_dict("AttributeDict"))
# Types that are only ever arguments of other rules.
_TYPES = ("numpy.ndarray", *TENSOR_TYPES, *(name for name in FACTORIES if name not in _RULES))

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
    for name, rule in _CLASSES.items():
        table[name] = Global(name, "class", rule=rule)
    for name in _TYPES:
        table[name] = Global(name, "type")
    for name, dtype in ML_DTYPES.items():
        table[f"ml_dtypes.{name}"] = Global(f"ml_dtypes.{name}", "type", dtype)
    for name, dtype in _STORAGE_TYPES.items():
        for module in ("torch", "torch.cuda"):
            table[f"{module}.{name}"] = Global(f"{module}.{name}", "storage", dtype)
    table["torch.storage.UntypedStorage"] = Global("torch.storage.UntypedStorage", "untyped")
    # Every torch dtype is data on its own; one strided has no DType for is refused only
    # as the type of a tensor.
    for name in [*_DTYPE_NAMES, *_NO_DTYPE]:
        table[f"torch.{name}"] = Global(f"torch.{name}", "dtype", _DTYPE_NAMES.get(name))
    return table


class GlobalTable(Mapping[str, Global]):
    """The allow-list: exact names, and Lightning's ``AttributeDict`` in any module.

    ``table[name]`` finds an exact name, else ``<package>[.<module>...].AttributeDict``
    for the packages ``lightning``, ``pytorch_lightning`` and ``lightning_fabric``.
    Iteration lists the exact names only.
    """

    __slots__ = ("_exact",)

    def __init__(self, exact: dict[str, Global]) -> None:
        self._exact = exact

    def __getitem__(self, name: str) -> Global:
        found = self._exact.get(name)
        if found is not None:
            return found
        module, _, last = name.rpartition(".")
        if last == "AttributeDict" and module.split(".", 1)[0] in _ATTRIBUTE_DICT_PACKAGES:
            return _ATTRIBUTE_DICT
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._exact)

    def __len__(self) -> int:
        return len(self._exact)


# "module.name" -> the marker it stands for. Nothing else is ever resolved.
GLOBALS = GlobalTable(_allowed())
UNSUPPORTED = {
    **{
        f"ml_dtypes.{name}": "is an ml_dtypes type strided has no DType for"
        for name in ML_UNSUPPORTED
    },
    **{
        f"{module}.{name}": "is a storage of elements strided has no DType for"
        for name in _NO_STORAGE.split()
        for module in ("torch", "torch.cuda")
    },
}
