"""PEFT LoRA adapter folders: the config read strictly, and what each tensor becomes.

An adapter folder holds ``adapter_config.json`` and ``adapter_model.safetensors`` (or
``adapter_model.bin``, read as data by strided's own pickle interpreter). ``read_adapter``
validates both against the base checkpoint, reading headers only, and returns one
``Recipe`` per base tensor that changes:

* ``base_model.model.<m>.lora_A.weight`` ``(r, in)`` and ``.lora_B.weight`` ``(out, r)``:
  ``<m>.weight`` (``(out, in)``, ``nn.Linear``) becomes ``W + s * (B @ A)``; Conv1D-style
  (GPT-2's ``Conv1D``, weight ``(in, out)``) ``W + s * (B @ A).T``. The layout is decided
  per module (``_layouts``): PEFT sets ``fan_in_fan_out`` per module while wrapping and
  saves whichever value it set last, so the config's flag is only a hint;
* ``base_model.model.<m>.lora_embedding_A`` ``(r, num)`` and ``lora_embedding_B``
  ``(dim, r)``: the embedding ``<m>.weight`` ``(num, dim)`` becomes
  ``W + s * (A.T @ B.T)``, as PEFT merges it;
* with ``lora_bias``, ``base_model.model.<m>.lora_B.bias``: ``<m>.bias`` becomes
  ``bias + s * b``;
* any other ``base_model.model.<m>.<p>`` (a ``modules_to_save`` copy): replaces
  ``<m>.<p>`` whole, converted exactly into the base tensor's dtype.

Per module, ``r`` and ``alpha`` are the ``rank_pattern`` / ``alpha_pattern`` values of the
first key (in the file's order) that matches the module name as PEFT matches it
(``re.match(rf"(.*\\.)?({key})$", module)``, by ``_lora_pattern``'s automaton, in time
linear in the name), else ``r`` / ``lora_alpha``; ``target_modules`` is never matched (the
adapter's tensors name the modules it changes); ``s`` is the
Python float ``alpha / r`` (``alpha / math.sqrt(r)`` with ``use_rslora``) times the
caller's scale, exactly the number PEFT multiplies by.
"""

from __future__ import annotations

import fnmatch
import math
import os
from typing import Any, NamedTuple

from .._core.dtype import DType
from .._core.errors import DTypeError, FormatError, LimitError, RangeError
from .._core.limits import (
    MAX_ADAPTER_CONFIG_BYTES,
    MAX_ADAPTER_CONFIG_DEPTH,
    MAX_ADAPTER_MODULE_CHARS,
)
from .._kernels.exact_affine import TARGETS
from .._kernels.strict_json import loads_strict
from ._checkpoint import Checkpoint, TensorInfo
from ._lora_pattern import KeyPattern

__all__ = ["CONFIG_NAME", "CONV1D", "LINEAR", "Adapter", "Recipe", "read_adapter", "weights_file"]

CONFIG_NAME = "adapter_config.json"
_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_PREFIX = "base_model.model."

# Fields that turn LoRA into another method with its own merge (PEFT's variants and
# layouts strided does not reproduce): refused when set to anything but their default.
_VARIANTS = {
    "use_dora": False,
    "use_qalora": False,
    "velora_config": None,
    "alora_invocation_tokens": None,
    "monteclora_config": None,
    "use_bdlora": None,
    "arrow_config": None,
    "kasa_config": None,
    "layer_replication": None,
    "trainable_token_indices": None,
    "target_parameters": None,
}
_PARTS = {
    "lora_A.weight": "A",
    "lora_B.weight": "B",
    "lora_B.bias": "bias",
    "lora_embedding_A": "embedding A",
    "lora_embedding_B": "embedding B",
}


class Recipe(NamedTuple):
    """How one base tensor changes (pickles: workers receive it).

    ``kind``: ``"linear"`` (``W + s * (B @ A)``), ``"transposed"`` (``W + s * (B @ A).T``:
    ``fan_in_fan_out`` and embeddings), ``"bias"`` (``bias + s * b``, ``b`` in ``b_name``)
    or ``"replace"`` (the adapter tensor ``a_name``).
    """

    target: str
    kind: str
    a_name: str
    b_name: str
    scale: float


LINEAR = "Linear"  # weight (out, in): W + s * (B @ A)
CONV1D = "Conv1D"  # weight (in, out), GPT-2's Conv1D: W + s * (B @ A).T


class Adapter(NamedTuple):
    """What ``read_adapter`` found: the recipes by base tensor name (in the base's
    order), and the layout each square module was merged in (``LINEAR`` or ``CONV1D``,
    by module name, sorted)."""

    recipes: dict[str, Recipe]
    layouts: dict[str, str]


class _Pending(NamedTuple):
    """A linear LoRA module whose layout is decided once every module is known."""

    module: str
    a: TensorInfo
    b: TensorInfo
    scale: float
    weight: tuple[int, ...]  # the base weight's shape


class _Config(NamedTuple):
    r: int
    alpha: float | int
    rank_pattern: list[tuple[KeyPattern, int]]
    alpha_pattern: list[tuple[KeyPattern, float | int]]
    rslora: bool
    fan_in_fan_out: bool
    lora_bias: bool
    modules_to_save: list[str]


def weights_file(folder: str) -> str:
    """The adapter's weights: ``adapter_model.safetensors``, else ``adapter_model.bin``.

    OSError when ``folder`` is not a readable folder with ``adapter_config.json``;
    FormatError naming the folder when it holds neither weights file.
    """
    if not os.path.isdir(folder):
        raise NotADirectoryError(
            20, "not an adapter folder (adapter_config.json + weights)", folder
        )
    if not os.path.isfile(os.path.join(folder, CONFIG_NAME)):
        raise FileNotFoundError(2, f"no {CONFIG_NAME} in the adapter folder", folder)
    for name in _WEIGHTS:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise FormatError(f"{folder}: no {' or '.join(_WEIGHTS)} in the adapter folder")


def read_config(folder: str) -> _Config:
    """``adapter_config.json`` of a LoRA adapter, every field used checked for its type.

    FormatError naming the file and the field for malformed JSON, a wrong type or value,
    another PEFT method, or a LoRA variant whose merge differs (DoRA ``use_dora``, ...);
    pattern keys PEFT's matcher would backtrack on and strided's automaton cannot take
    (back-references, look-arounds, more than ``MAX_PATTERN_STATES`` states, ...);
    LimitError for an oversized file or a pattern key longer than ``MAX_PATTERN_CHARS``.
    """
    path = os.path.join(folder, CONFIG_NAME)
    with open(path, "rb") as handle:
        data = handle.read(MAX_ADAPTER_CONFIG_BYTES + 1)
    if len(data) > MAX_ADAPTER_CONFIG_BYTES:
        raise LimitError(
            f"{path}: more than {MAX_ADAPTER_CONFIG_BYTES} bytes: not an adapter config"
        )
    config = loads_strict(data, path, MAX_ADAPTER_CONFIG_DEPTH)
    if not isinstance(config, dict):
        raise FormatError(f"{path}: expected a JSON object, found {type(config).__name__}")
    field = _Fields(path, config)
    kind = field.get("peft_type", str, None)
    if kind != "LORA":
        raise FormatError(f"{path}: peft_type {kind!r} is not LORA: only LoRA adapters merge")
    for name, default in _VARIANTS.items():
        if name in config and config[name] not in (default, [], {}):
            raise FormatError(
                f"{path}: {name} = {_short(config[name])}: this LoRA variant is not supported "
                "(its merge is not W + s * B @ A)"
            )
    if config.get("init_lora_weights") == "mica":
        raise FormatError(f"{path}: init_lora_weights 'mica' is a LoRA variant not supported")
    rank = field.rank("r", config.get("r"))
    alpha = field.number("lora_alpha", config.get("lora_alpha"))
    ranks = field.patterns("rank_pattern", field.rank)
    alphas = field.patterns("alpha_pattern", field.number)
    saved = field.get("modules_to_save", list, None) or []
    if not all(isinstance(item, str) for item in saved):
        raise FormatError(f"{path}: modules_to_save must be a list of strings")
    return _Config(
        rank,
        alpha,
        ranks,
        alphas,
        field.flag("use_rslora"),
        field.flag("fan_in_fan_out"),
        field.flag("lora_bias"),
        list(saved),
    )


class _Fields:
    """Typed access to a config's fields; errors name the file and the field."""

    def __init__(self, path: str, config: dict[str, Any]) -> None:
        self.path = path
        self.config = config

    def fail(self, name: str, expected: str, value: Any) -> FormatError:
        return FormatError(f"{self.path}: {name} must be {expected}, found {_short(value)}")

    def get(self, name: str, kind: type, default: Any) -> Any:
        value = self.config.get(name, default)
        if value is not None and type(value) is not kind:
            raise self.fail(name, f"a {kind.__name__} or null", value)
        return value

    def flag(self, name: str) -> bool:
        value = self.config.get(name, False)
        if type(value) is not bool:
            raise self.fail(name, "true or false", value)
        return value

    def rank(self, name: str, value: Any) -> int:
        if type(value) is not int or not 0 < value <= 1 << 20:
            raise self.fail(name, "a whole number from 1 to 2^20", value)
        return value

    def number(self, name: str, value: Any) -> float | int:
        if type(value) is int and abs(value) <= 1 << 53:
            return value
        if type(value) is float and math.isfinite(value):
            return value
        raise self.fail(name, "a finite number", value)

    def patterns(self, name: str, check: Any) -> list[tuple[KeyPattern, Any]]:
        """The keys of a pattern field compiled for linear-time matching, in order."""
        found = self.get(name, dict, None) or {}
        compiled = []
        for key, value in found.items():
            check(f"{name}[{key!r}]", value)
            compiled.append((KeyPattern(key, f"{self.path}: {name}"), value))
        return compiled


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _pattern_value(patterns: list[tuple[KeyPattern, Any]], module: str, default: Any) -> Any:
    """PEFT's ``get_pattern_key``: the value of the first key (in the file's order) that
    matches the module name, in time linear in the name."""
    for pattern, value in patterns:
        if pattern.matches(module):
            return value
    return default


def read_adapter(
    folder: str,
    adapter: Checkpoint,
    base: Checkpoint,
    scale: float,
    fan_in_fan_out: tuple[str, ...] | None = None,
) -> Adapter:
    """Recipes by base tensor name for the adapter at ``folder`` (its weights opened as
    ``adapter``) against ``base``, in the base's tensor order, and the layout of each
    square module. Headers only.

    ``fan_in_fan_out``: globs of the modules the caller states are Conv1D-style (every
    other module is then Linear-style); None lets the shapes and the config decide
    (``_layouts``).

    FormatError naming the tensor or module for an adapter tensor outside
    ``base_model.model.``, a module without its A or B, a target with no base tensor,
    shapes that do not agree (with the stated layout, when there is one), square
    modules whose layout is ambiguous (all of them named), ``r`` not equal to A's first
    dim, Conv adapters or DoRA magnitudes; DTypeError for factors or base tensors that
    are not F16/BF16/F32/F64 or A and B of different dtypes.
    """
    config = read_config(folder)
    modules: dict[str, dict[str, TensorInfo]] = {}
    recipes: dict[str, Recipe] = {}
    pending: list[_Pending] = []
    where = adapter.path
    for name in adapter:
        if not name.startswith(_PREFIX):
            raise FormatError(f"{where}: tensor {name!r} is not under {_PREFIX!r} (not PEFT)")
        rest = name[len(_PREFIX) :]
        for suffix, part in _PARTS.items():
            if rest.endswith("." + suffix):
                module = rest[: -len(suffix) - 1]
                modules.setdefault(module, {})[part] = adapter.info(name)
                break
        else:
            if ".lora_" in f".{rest}":
                raise FormatError(
                    f"{where}: tensor {name!r} is not a LoRA weight strided merges "
                    "(DoRA magnitudes, Conv or other variants are not supported)"
                )
            _replacement(where, name, rest, config, adapter, base, recipes)
    for module, parts in modules.items():
        _module(where, module, parts, config, base, scale, recipes, pending)
    layouts = _layouts(where, pending, config.fan_in_fan_out, fan_in_fan_out, base)
    for item in pending:
        kind = "transposed" if layouts[item.module] == CONV1D else "linear"
        _add(
            where,
            recipes,
            Recipe(f"{item.module}.weight", kind, item.a.name, item.b.name, item.scale),
        )
    square = {item.module for item in pending if item.a.shape[1] == item.b.shape[0]}
    return Adapter(
        {name: recipes[name] for name in base if name in recipes},
        {module: layouts[module] for module in sorted(square)},
    )


def _layouts(
    where: str,
    pending: list[_Pending],
    flag: bool,
    stated: tuple[str, ...] | None,
    base: Checkpoint,
) -> dict[str, str]:
    """The layout of every linear module.

    A Linear weight is ``(out, in)`` and a Conv1D one ``(in, out)``, with ``out`` B's
    first dim and ``in`` A's second. Stated globs decide every module (a shape that
    contradicts the statement is a FormatError). Otherwise a non-square module takes
    the layout its shape needs; a square one follows the saved flag when nothing
    contradicts it: Linear-style under ``fan_in_fan_out: false`` when no non-square
    module is Conv1D-style, Conv1D-style under ``true`` when the non-square modules show
    that layout and none shows the other (GPT-2: ``c_attn`` shows it, the square
    ``attn.c_proj`` follows). Otherwise it is ambiguous, and every ambiguous module is
    named in one FormatError. PEFT saves the value it set for the module it wrapped
    last, so ``false`` beside Conv1D-style modules means a Linear and a Conv1D were both
    wrapped (a GPT-2 classifier with ``score`` targeted): merging the square modules
    Linear-style there could transpose a Conv1D one silently.
    """
    found: dict[str, str] = {}
    square: list[str] = []
    for item in pending:
        out, inner = item.b.shape[0], item.a.shape[1]
        fits = [
            layout
            for layout, shape in ((LINEAR, (out, inner)), (CONV1D, (inner, out)))
            if item.weight == shape
        ]
        if stated is not None:
            layout = CONV1D if any(fnmatch.fnmatchcase(item.module, g) for g in stated) else LINEAR
            if layout not in fits:
                raise _mismatch(where, item, base, layout, "as fan_in_fan_out states")
            found[item.module] = layout
        elif not fits:
            raise _mismatch(where, item, base, LINEAR, "")
        elif out != inner:
            found[item.module] = fits[0]
        else:
            square.append(item.module)
    shown = {found[item.module] for item in pending if item.module in found}
    if not flag and CONV1D not in shown:
        found.update((module, LINEAR) for module in square)
    elif flag and shown == {CONV1D}:
        found.update((module, CONV1D) for module in square)
    elif square:
        if not shown:
            evidence = "no non-square module shows the layout"
        elif shown == {LINEAR}:
            evidence = "the non-square modules are Linear-style"
        elif shown == {CONV1D}:
            evidence = "the non-square modules are Conv1D-style"
        else:
            evidence = "the non-square modules show both layouts"
        raise FormatError(
            f"{where}: adapter_config.json says fan_in_fan_out {str(flag).lower()}, but PEFT "
            f"saves only the value it set last and {evidence}: the layout of the square modules "
            f"{', '.join(sorted(square))} is ambiguous; state it with --fan-in-fan-out GLOB "
            "(Python fan_in_fan_out=[globs]) naming the Conv1D-style modules"
        )
    return found


def _mismatch(where: str, item: _Pending, base: Checkpoint, layout: str, why: str) -> FormatError:
    """The shapes of a module fit no layout (or not the stated one)."""
    out, inner = item.b.shape[0], item.a.shape[1]
    if why:
        shape = [inner, out] if layout == CONV1D else [out, inner]
        given = f"shape {shape} ({layout}-style, {why})"
    else:
        given = f"shape {[out, inner]} (Linear-style) or {[inner, out]} (Conv1D-style)"
    return FormatError(
        f"{where}: module {item.module!r}: the LoRA weights give {given}, the base "
        f"{base.path}'s {item.module + '.weight'!r} is {list(item.weight)}"
    )


def _replacement(
    where: str,
    name: str,
    target: str,
    config: _Config,
    adapter: Checkpoint,
    base: Checkpoint,
    recipes: dict[str, Recipe],
) -> None:
    """A ``modules_to_save`` tensor: it replaces the base tensor of the same name."""
    module = target.rpartition(".")[0]
    if not any(module.endswith(saved) for saved in config.modules_to_save):
        raise FormatError(
            f"{where}: tensor {name!r} is neither a LoRA weight nor in modules_to_save "
            f"{config.modules_to_save}"
        )
    if target not in base:
        raise FormatError(f"{where}: tensor {name!r} replaces {target!r}, which the base lacks")
    info, found = base.info(target), adapter.info(name)
    if found.shape != info.shape:
        raise FormatError(
            f"{where}: tensor {name!r} has shape {list(found.shape)}, the base's {target!r} "
            f"{list(info.shape)}"
        )
    source, kind = _dtype(found.dtype), _dtype(info.dtype)
    if source is None or kind is None or source.is_float != kind.is_float:
        raise DTypeError(
            f"{where}: tensor {name!r} ({found.dtype}) cannot replace the base's {target!r} "
            f"({info.dtype})"
        )
    _add(where, recipes, Recipe(target, "replace", name, "", 1.0))


def _module(
    where: str,
    module: str,
    parts: dict[str, TensorInfo],
    config: _Config,
    base: Checkpoint,
    scale: float,
    recipes: dict[str, Recipe],
    pending: list[_Pending],
) -> None:
    """The recipes of one LoRA module (its weight, and its bias with ``lora_bias``); a
    linear module's weight waits in ``pending`` for its layout."""
    if len(module) > MAX_ADAPTER_MODULE_CHARS:  # matched against patterns below: bounded first
        raise LimitError(f"{where}: module name of {len(module)} characters")
    embedding = "embedding A" in parts or "embedding B" in parts
    a_key, b_key = ("embedding A", "embedding B") if embedding else ("A", "B")
    if embedding and ("A" in parts or "B" in parts):
        raise FormatError(f"{where}: module {module!r} has both linear and embedding LoRA weights")
    for key in (a_key, b_key):
        if key not in parts:
            raise FormatError(f"{where}: module {module!r} has no LoRA {key} weight")
    a, b = parts[a_key], parts[b_key]
    for info in (a, b):
        if len(info.shape) != 2:
            raise FormatError(
                f"{where}: tensor {info.name!r} has shape {list(info.shape)}: only 2-D "
                "(linear and embedding) LoRA weights merge; Conv adapters are not supported"
            )
    factor = _float(where, a)
    if _float(where, b) is not factor:
        raise DTypeError(
            f"{where}: module {module!r}: {a.name!r} is {a.dtype} but {b.name!r} is {b.dtype}"
        )
    rank = _pattern_value(config.rank_pattern, module, config.r)
    alpha = _pattern_value(config.alpha_pattern, module, config.alpha)
    if a.shape[0] != rank or b.shape[1] != rank:
        raise FormatError(
            f"{where}: module {module!r}: r is {rank} but {a.name!r} has shape "
            f"{list(a.shape)} and {b.name!r} {list(b.shape)}"
        )
    factor_scale = alpha / math.sqrt(rank) if config.rslora else alpha / rank
    s = float(factor_scale) * scale
    if not math.isfinite(s):
        raise RangeError(
            f"{where}: module {module!r}: the scale s = {float(factor_scale)!r} (alpha / r) "
            f"x {scale!r} overflows F64"
        )
    target = f"{module}.weight"
    if embedding:
        _base_float(where, base, target, module, (a.shape[1], b.shape[0]))
        _add(where, recipes, Recipe(target, "transposed", a.name, b.name, s))
    else:
        _base_float(where, base, target, module, None)
        pending.append(_Pending(module, a, b, s, tuple(base.info(target).shape)))
    bias = parts.get("bias")
    if bias is not None:
        if not config.lora_bias:
            raise FormatError(f"{where}: tensor {bias.name!r} is present but lora_bias is false")
        if _float(where, bias) is not factor:
            raise DTypeError(f"{where}: tensor {bias.name!r} is {bias.dtype}, its B {b.dtype}")
        _base_float(where, base, f"{module}.bias", module, (b.shape[0],))
        _add(where, recipes, Recipe(f"{module}.bias", "bias", bias.name, bias.name, s))


def _base_float(
    where: str,
    base: Checkpoint,
    target: str,
    module: str,
    shape: tuple[int, ...] | None,
) -> None:
    """The base has ``target``, a float tensor of ``shape`` (any 2-D one for None)."""
    if target not in base:
        raise FormatError(
            f"{where}: module {module!r} has LoRA weights but the base {base.path} has no "
            f"tensor {target!r}"
        )
    info = base.info(target)
    if shape is None and len(info.shape) != 2:
        raise FormatError(
            f"{where}: module {module!r} has linear LoRA weights, but the base's {target!r} "
            f"has shape {list(info.shape)}, not a 2-D weight"
        )
    if shape is not None and tuple(info.shape) != shape:
        raise FormatError(
            f"{where}: module {module!r}: the LoRA weights give shape {list(shape)}, the "
            f"base's {target!r} is {list(info.shape)}"
        )
    dtype = _dtype(info.dtype)
    if dtype not in TARGETS:
        raise DTypeError(
            f"{base.path}: tensor {target!r} is {info.dtype}: LoRA merges into F16, BF16, "
            "F32 or F64 weights (convert the base first)"
        )


def _float(where: str, info: TensorInfo) -> DType:
    dtype = _dtype(info.dtype)
    if dtype not in TARGETS:
        raise DTypeError(
            f"{where}: tensor {info.name!r} is {info.dtype}: LoRA weights must be F16, BF16, "
            "F32 or F64"
        )
    assert dtype is not None
    return dtype


def _dtype(name: str) -> DType | None:
    return DType.__members__.get(name)


def _add(where: str, recipes: dict[str, Recipe], recipe: Recipe) -> None:
    if recipe.target in recipes:
        raise FormatError(f"{where}: the base tensor {recipe.target!r} is changed twice")
    recipes[recipe.target] = recipe
