"""What a GGUF output holds: each tensor's ggml type, and the key/values, in order.

The type of each tensor follows the rules llama.cpp's own tools follow, so a model
runner loads the output:

* without a target type, every tensor keeps its type: a GGUF source's stored type
  (block-quantized tensors are copied block for block), a strided dtype that ggml has
  (F32, F16, BF16, F64, I8, I16, I32, I64), and F32 for the 8-bit floats ggml lacks;
* with a target ``T`` (``--dtype``, or one type for all in ``save_gguf``), a float
  tensor becomes ``T`` when its name ends in ``weight``, it has rank >= 2, its name
  contains none of ``_norm.weight``, ``ffn_gate_inp``, ``pos_embd``, ``token_types``,
  ``ssm_conv1d``, and its rows (last dim) are a multiple of ``T``'s block size; such a
  tensor whose rows are not a multiple becomes F16; every other float tensor becomes F32
  from a non-GGUF source (as ``convert_hf_to_gguf.py`` writes them) and keeps its stored
  type from a GGUF source (as ``llama-quantize`` does); tensors matching a ``keep``
  glob keep their type as without a target;
* integer tensors keep their type; U8, U16, U32, U64 and BOOL have no ggml type
  (DTypeError naming the tensor).

Key/values: a GGUF source's are copied in order with their types; another format's
metadata becomes string keys (its canonical text); ``split.*`` and ``general.alignment``
describe a source file's layout and are never copied; with a target,
``general.file_type`` is set to llama.cpp's number for it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError
from ..io.gguf import (
    BLOCK_TYPES,
    DEQUANTIZABLE,
    FILE_TYPES,
    GGML_BY_NAME,
    ZERO_COPY,
    KeyValue,
    TensorSpec,
    stored_bytes,
    value_type,
)
from ._checkpoint import admit, has_dtype
from ._gguf_text import restored_types, typed_key_values
from ._metadata_text import GGUF_TYPES_KEY, checkpoint_texts, gguf_types

if TYPE_CHECKING:
    from ._checkpoint import Checkpoint

__all__ = ["OUTPUT_TYPES", "GGUFItem", "gguf_key_values", "plan_gguf"]

# Every type a GGUF output can be asked for as a whole (``--dtype``).
OUTPUT_TYPES = ("F32", "F16", "BF16", *BLOCK_TYPES)
_EXCLUDED = ("_norm.weight", "ffn_gate_inp", "pos_embd", "token_types", "ssm_conv1d")
_PLAIN_FLOATS = ("F32", "F16", "BF16", "F64")


class GGUFItem(NamedTuple):
    """One tensor to write and how: ``copy`` its stored bytes, ``convert`` its values to
    a plain ggml type, or ``quantize`` its values as float32 rows into blocks.
    ``source`` is the name it is read under when the output renames it (empty:
    ``spec.name``)."""

    spec: TensorSpec
    mode: str
    byte_len: int
    source: str = ""

    @property
    def read_name(self) -> str:
        """The name the tensor has in the checkpoint it is read from."""
        return self.source or self.spec.name


def plan_gguf(
    checkpoint: Checkpoint,
    names: Sequence[str],
    target: str | Mapping[str, str] | None,
    keep: Sequence[str] = (),
    allow_expanded: bool = False,
) -> list[GGUFItem]:
    """The ggml type and mode of each named tensor (module docstring: the rules).

    ``target`` is one type for all (the rules apply), a mapping name -> type (exactly
    that type for the named tensors, the others keep theirs) or None. DTypeError for a
    tensor that cannot become the type asked (an integer tensor as a float type, a
    stored type strided cannot decode converted); FormatError for an unknown type name
    or a mapping naming a tensor not written. An expanded view is refused unless
    ``allow_expanded`` (``admit``).
    """
    infos = admit(checkpoint, names, allow_expanded)
    source_gguf = checkpoint.format == "gguf"
    if isinstance(target, Mapping):
        unknown = [name for name in target if name not in infos]
        if unknown:
            raise FormatError(f"types: {unknown[0][:80]!r} is not a tensor being written")
    elif target is not None and target not in OUTPUT_TYPES:
        raise FormatError(f"types: {str(target)[:40]!r} is not one of {', '.join(OUTPUT_TYPES)}")
    items = []
    for name in names:
        info = infos[name]
        stored = info.dtype
        kept = _kept_type(checkpoint, name, stored, source_gguf)
        if isinstance(target, Mapping):
            out = target.get(name, kept)
            _check_asked(checkpoint, name, stored, out)
        elif (
            target is None
            or not _is_float(stored)
            or any(fnmatch.fnmatchcase(name, glob) for glob in keep)
        ):
            out = kept
        else:
            out = _chosen(name, info.shape, target, kept if source_gguf else "F32")
        if out == stored:
            mode = "copy"
        else:
            if not checkpoint.readable(name):
                raise DTypeError(
                    f"{checkpoint.path}: tensor {name!r}: {stored} values cannot be decoded "
                    f"to become {out}"
                )
            mode = "quantize" if out in BLOCK_TYPES else "convert"
        spec = TensorSpec(name, out, info.shape)
        items.append(GGUFItem(spec, mode, stored_bytes(out, info.shape)))
    return items


def _is_float(stored: str) -> bool:
    return DType[stored].is_float if has_dtype(stored) else stored in DEQUANTIZABLE


def _kept_type(checkpoint: Checkpoint, name: str, stored: str, source_gguf: bool) -> str:
    """The type a tensor is written as when nothing asks otherwise."""
    if source_gguf or stored in ZERO_COPY:
        return stored
    if has_dtype(stored) and DType[stored].is_float:
        return "F32"  # the 8-bit floats: every value is an F32 exactly
    raise DTypeError(
        f"{checkpoint.path}: tensor {name!r}: {stored} has no ggml type (GGUF holds F32, "
        "F16, BF16, F64, I8, I16, I32, I64 and block-quantized floats)"
    )


def _chosen(name: str, shape: Any, target: str, other: str) -> str:
    """The rules for a float tensor given a target type (``other``: the non-weight type)."""
    if len(shape) < 2 or not name.endswith("weight") or any(part in name for part in _EXCLUDED):
        return other
    if shape[-1] % GGML_BY_NAME[target].block_size:
        return "F16"
    return target


def _check_asked(checkpoint: Checkpoint, name: str, stored: str, out: str) -> None:
    """An explicitly asked type: a known output type the tensor can become."""
    if out == stored:
        return
    if out not in GGML_BY_NAME:
        raise FormatError(f"types: {name!r}: {str(out)[:40]!r} is not a ggml type")
    if not _is_float(stored) or out not in (*_PLAIN_FLOATS, *BLOCK_TYPES):
        raise DTypeError(
            f"{checkpoint.path}: tensor {name!r}: {stored} cannot be written as {out} "
            "(float tensors become F32, F16, BF16, F64 or a block type; others keep their type)"
        )


def _layout_key(key: str) -> bool:
    return key == "general.alignment" or key.startswith("split.")


def gguf_key_values(
    checkpoint: Checkpoint,
    metadata: Mapping[str, Any] | None = None,
    file_type: str | None = None,
) -> list[KeyValue]:
    """The key/values of a GGUF output, in order.

    ``metadata`` None: the checkpoint's own (a GGUF source's with their types; other
    formats' as string keys of their canonical text, except the keys a
    ``__gguf_types__`` record names, which take the GGUF type it gives: so GGUF ->
    safetensors -> GGUF restores every key's type and value). A ``metadata`` mapping replaces
    them: each value typed by ``value_type``, except that a key the GGUF source has
    keeps the source's type. ``split.*`` and ``general.alignment`` of a source are
    dropped (``general.alignment`` given in ``metadata`` is kept: the writer pads by
    it). With ``file_type``, ``general.file_type`` (UINT32) is set to its number.
    """
    types = gguf_types(checkpoint) or {}
    if metadata is None:
        if checkpoint.format == "gguf":
            values = checkpoint._metadata
            kvs = [KeyValue(k, types[k], values[k]) for k in values if not _layout_key(k)]
        else:
            # A file written from a GGUF one records its keys' types: restore them.
            record = checkpoint._metadata.get(GGUF_TYPES_KEY)
            recorded = {} if record is None else restored_types(record, checkpoint.path)
            texts = checkpoint_texts(checkpoint)
            kvs = [KeyValue(*found) for found in typed_key_values(texts, recorded, checkpoint.path)]
    else:
        kvs = []
        for key, value in metadata.items():
            if type(key) is not str:
                raise FormatError(f"metadata: keys must be strings, found {type(key).__name__}")
            if key.startswith("split."):
                raise FormatError(f"metadata: {key!r} is written by the split layout only")
            kind = types.get(key) or value_type(value, f"metadata {key[:80]!r}")
            kvs.append(KeyValue(key, kind, value))
    if file_type is not None:
        entry = KeyValue("general.file_type", "UINT32", FILE_TYPES[file_type])
        at = next((i for i, kv in enumerate(kvs) if kv.key == entry.key), None)
        if at is None:
            kvs.append(entry)
        else:
            kvs[at] = entry
    return kvs
