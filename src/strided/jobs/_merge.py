"""Model transforms, streamed and exact: a LoRA adapter merged into its base, and
weighted averages of checkpoints.

``merge_lora`` and ``merge_linear`` return lazy ``Checkpoint`` objects: opening reads
headers only, and ``ckpt[name]`` computes one tensor (a weight and its delta at a
time). Every merged float element is the exact real value computed from the stored
values, rounded once into the output dtype by ``_kernels.exact_affine``; the result is
the same bits on every machine and for any split of the work.

For writing, ``merge_items`` turns a merged checkpoint into the writer's items: tensors
that do not change are copied (or converted) from their source as ``convert`` does,
merged ones are ``computed`` by tasks over bounded runs of rows (or elements), which the
worker processes of ``--jobs`` run after opening the files themselves by path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .._core.dtype import DType
from .._core.errors import DataError, DTypeError, FormatError, RangeError
from .._core.memory import guard_function
from .._core.shape import Shape
from .._kernels.convert import convert_array
from .._kernels.exact_affine import TARGETS, low_rank_update, weighted_sum
from .._tensor.tensor import Tensor
from ..io._reader import Reader
from ..io._shards import Planned
from ._checkpoint import Checkpoint, TensorInfo, has_dtype, open_checkpoint
from ._export import Item, Task
from ._export import plan as plan_copies
from ._lora import Recipe, read_adapter, weights_file
from ._merge_weights import check_weights, parse_weight
from ._pool import JobError, opened, where
from ._values import Source

__all__ = [
    "MergedCheckpoint",
    "merge_items",
    "merge_linear",
    "merge_lora",
    "parse_weight",
    "sources_of",
]

_TASK_BYTES = 1 << 22  # output bytes per task: a few bounded blocks of the kernel


class _Merge(NamedTuple):
    """What a worker needs to compute tensors of a merged checkpoint (pickles)."""

    kind: str  # "lora" or "linear"
    paths: tuple[str, ...]  # lora: (base, adapter weights); linear: the inputs
    recipes: dict[str, Recipe]  # lora only
    weights: tuple[Fraction, ...]  # linear only


class _MergeReader(Reader):
    """The reader of a merged checkpoint: the first source's names, header facts and
    metadata; ``get`` computes a merged tensor from the open sources.

    Unchanged tensors are the first source's own (zero-copy where it is); a computed
    one is made once, without a second copy, so a merged tensor is held once while it
    is made and read.
    """

    __slots__ = ("closed", "layouts", "merge", "owned", "sources")

    def __init__(
        self,
        merge: _Merge,
        sources: tuple[Checkpoint, ...],
        owned: tuple[Checkpoint, ...],
        layouts: dict[str, str],
    ) -> None:
        super().__init__(sources[0].path)
        self.merge = merge
        self.sources = sources
        self.owned = owned
        self.layouts = layouts
        self.closed = False

    @property
    def format(self) -> str:
        """Always ``"merged"``."""
        return "merged"

    def keys(self) -> list[str]:
        """The first source's names, in its order."""
        return list(self.sources[0])

    def info(self, name: str) -> TensorInfo:
        """The first source's facts: a merge keeps every name's dtype and shape."""
        return self.sources[0].info(name)

    @property
    def metadata(self) -> dict[str, Any]:
        """A copy of the first source's metadata."""
        return self.sources[0].metadata

    def get(self, name: str) -> Tensor:
        """Tensor ``name`` of the merge: computed when the merge changes it."""
        if self.closed:
            raise FormatError(f"{self.path}: the merged checkpoint is closed")
        info = self.sources[0].info(name)
        dtype = DType[info.dtype]
        shape = tuple(info.shape)
        if self.merge.kind == "lora":
            recipe = self.merge.recipes.get(name)
            if recipe is None:
                return self.sources[0][name]
            rows = shape[0] if shape else 1
            data = _lora_rows(self.sources, recipe, name, 0, rows, dtype)
        else:
            numel = info.shape.numel
            data = _linear_run(self.sources, self.merge.weights, name, 0, numel, dtype)
        return _adopted(data, dtype, shape)

    def close(self) -> None:
        """Close the sources the merge opened (never the ones it was given)."""
        self.closed = True
        for checkpoint in self.owned:
            checkpoint.close()


def _adopted(data: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """A freshly computed merged array (nobody else holds it) as a tensor of ``shape``:
    without a copy when the kernel's output already owns its memory in ``dtype``, so
    a large merged tensor is never held twice while it becomes a tensor."""
    if data.flags.owndata and data.flags.c_contiguous and data.dtype == dtype.numpy:
        if data.shape == shape:
            return Tensor._adopt(data, dtype)
        if data.ndim == 1 and data.size == math.prod(shape):
            return Tensor._adopt_flat(data, shape)
    return Tensor._adopt(np.array(data.view(dtype.numpy).reshape(shape)), dtype)


# -- LoRA -----------------------------------------------------------------------------------


class MergedCheckpoint(Checkpoint):
    """The lazy ``Checkpoint`` that ``merge_lora`` and ``merge_linear`` return.

    A ``Checkpoint`` in every respect (``format`` is ``"merged"``), plus ``layouts``.
    """

    __slots__ = ("_merged",)

    def __init__(self, reader: _MergeReader) -> None:
        """Private: made by ``merge_lora`` and ``merge_linear``."""
        super().__init__(reader)
        self._merged = reader

    @property
    def layouts(self) -> dict[str, str]:
        """A fresh dict: the layout each square LoRA module was merged in, by module name
        (sorted): ``"Linear"`` (weight ``(out, in)``: ``W + s * (B @ A)``) or
        ``"Conv1D"`` (GPT-2's ``Conv1D``, weight ``(in, out)``: ``W + s * (B @ A).T``).
        Square modules are the ones whose shapes cannot tell; ``{}`` for
        ``merge_linear``."""
        return dict(self._merged.layouts)

    def _merge_reader(self) -> _MergeReader:
        """Private: the merge's reader, while the checkpoint is open (what the writers
        plan computed tensors from)."""
        if self._merged.closed:
            raise FormatError(f"{self.path}: the checkpoint is closed")
        return self._merged


@guard_function
def merge_lora(
    base: str | os.PathLike[str] | Checkpoint,
    adapter: str | os.PathLike[str],
    scale: float = 1.0,
    *,
    fan_in_fan_out: Sequence[str] | None = None,
    lenient: bool = False,
) -> MergedCheckpoint:
    """A PEFT LoRA adapter merged into its base checkpoint, as a lazy ``Checkpoint``.

    ``base`` is a path (opened here, closed with the result) or an open ``Checkpoint``
    (used, never closed here) whose names are the model's Hugging Face names:
    safetensors, PyTorch, DCP, NumPy; a GGUF base is a FormatError. ``adapter`` is the
    folder ``save_pretrained`` wrote: ``adapter_config.json`` plus
    ``adapter_model.safetensors`` or ``adapter_model.bin`` (read as data, never run).

    The result has the base's names, shapes, dtypes and metadata, with ``format``
    ``"merged"`` and the base's ``path``. Reading a tensor that the adapter changes
    computes it: ``W + s * (B @ A)`` (transposed for a Conv1D-style module; ``W + s *
    (A.T @ B.T)`` for embeddings; ``bias + s * b`` with ``lora_bias``), each element the
    exact real value of the stored numbers rounded once into W's dtype, where ``s`` is
    the Python float ``alpha / r`` (``alpha / math.sqrt(r)`` with ``use_rslora``), per
    module from ``rank_pattern`` / ``alpha_pattern``, times ``scale``. A
    ``modules_to_save`` tensor replaces its base tensor, converted exactly into its
    dtype. Other tensors are the base's own (zero-copy where the base is). Non-finite
    weight elements stay as they are.

    Layouts: PEFT saves ``fan_in_fan_out`` as it last set it while wrapping modules, so
    each module's layout comes from its shapes. A weight of shape ``(out, in)`` (B's
    first dim, A's second) is ``nn.Linear``-style, ``(in, out)`` Conv1D-style. A square
    module (``out == in``) is Linear-style under ``fan_in_fan_out: false``; under
    ``true``, Conv1D-style when the non-square modules are all Conv1D-style (GPT-2),
    else ambiguous: a FormatError naming every ambiguous module, unless
    ``fan_in_fan_out`` (a list of globs, ``fnmatch`` style; one text is one glob;
    ``[]``: every module Linear-style) states the layout: matching
    modules are Conv1D-style, every other module Linear-style. The result's
    ``layouts`` tells which layout each square module got.

    Everything about the adapter is checked before this returns, from headers:
    FormatError naming the module or tensor for a module with no base weight, shapes
    that disagree, ``r`` unlike A's first dim, DoRA and other variants, Conv adapters, a
    config that does not parse, an ambiguous layout, a pattern key that cannot be
    matched in linear time; RangeError for a module whose ``s`` overflows F64;
    DTypeError for weights that are not F16/BF16/F32/F64 or A and B of different
    dtypes. Reading a tensor may raise FormatError (a NaN or
    infinity in A, B or b) or RangeError (a merged element past the dtype's largest
    finite value: an exact value past the range is never inf, NaN or another
    exception), naming the tensor and the element. OSError for paths that cannot be
    opened. ``scale`` must be a finite float.

    Example (a rank-1 adapter written by hand; PEFT writes the same two files):
        >>> import json, os, tempfile, numpy as np, strided as st
        >>> folder = tempfile.mkdtemp()
        >>> base = os.path.join(folder, "base.safetensors")
        >>> eye = st.Tensor.from_numpy(np.eye(2, dtype=np.float32))
        >>> st.save_safetensors(base, {"layer.weight": eye})
        >>> adapter = os.path.join(folder, "adapter")
        >>> os.mkdir(adapter)
        >>> with open(os.path.join(adapter, "adapter_config.json"), "w") as file:
        ...     json.dump({"peft_type": "LORA", "r": 1, "lora_alpha": 2}, file)
        >>> st.save_safetensors(os.path.join(adapter, "adapter_model.safetensors"), {
        ...     "base_model.model.layer.lora_A.weight": st.tensor([[1.0, 0.0]], st.DType.F32),
        ...     "base_model.model.layer.lora_B.weight": st.tensor([[0.5], [0.25]], st.DType.F32),
        ... })
        >>> with st.merge_lora(base, adapter) as merged:  # W + (2 / 1) * B @ A, exactly
        ...     print(merged.format, merged.layouts, merged["layer.weight"].to_json())
        merged {'layer': 'Linear'} {"dtype":"F32","shape":[2,2],"data":["2.0","0.0","0.5","1.0"]}

    A GPT-2 adapter needs no option (its square ``attn.c_proj`` follows ``c_attn``);
    ``st.merge_lora("gpt2/", "adapter/", fan_in_fan_out=["*.c_*"])`` states the layout
    where the shapes cannot tell it.

    ``lenient=True`` opens a base path leniently (a whole pickled model gives its
    ``state_dict()`` tensors; nothing in it is run) and has worker processes reopen it
    so; pass it too when ``base`` is a checkpoint opened with ``lenient=True``. The
    adapter is always read strictly.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise FormatError(f"merge_lora: scale must be a finite number, found {scale!r}")
    globs = _globs(fan_in_fan_out)
    folder = os.fspath(adapter)
    if not isinstance(folder, str):
        raise FormatError(f"merge_lora: the adapter must be a folder path, found {folder!r}")
    owned: list[Checkpoint] = []
    try:
        if isinstance(base, Checkpoint):
            opened_base = base
        else:
            opened_base = open_checkpoint(base, lenient=lenient)
            owned.append(opened_base)
        if opened_base.format == "gguf":
            raise FormatError(
                f"{opened_base.path}: a GGUF base cannot take a PEFT adapter (its tensor "
                "names are not Hugging Face names); use the model's safetensors"
            )
        weights = open_checkpoint(weights_file(folder))
        owned.append(weights)
        found = read_adapter(folder, weights, opened_base, float(scale), globs)
        paths = (where(opened_base.path, lenient), where(weights.path))
        merge = _Merge("lora", paths, found.recipes, ())
        sources = (opened_base, weights)
        return MergedCheckpoint(_MergeReader(merge, sources, tuple(owned), dict(found.layouts)))
    except BaseException:
        for checkpoint in owned:
            checkpoint.close()
        raise


def _globs(value: object) -> tuple[str, ...] | None:
    """``fan_in_fan_out`` as a tuple of globs (one text is one glob), or None."""
    if value is None:
        return None
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(g, str) for g in items):
        raise FormatError(f"merge_lora: fan_in_fan_out must be a list of globs, found {value!r}")
    return tuple(items)


def _lora_rows(
    sources: Sequence[Checkpoint],
    recipe: Recipe,
    name: str,
    start: int,
    stop: int,
    target: DType,
) -> np.ndarray:
    """Rows ``[start, stop)`` of the merged tensor ``name`` in ``target``, as an array."""
    base, adapter = sources[0], sources[1]
    weight = base[name]
    where_text = f"{adapter.path}: tensor {name!r}"
    if recipe.kind == "replace":
        whole = adapter[recipe.a_name].numpy()
        # Rows of a 2-D tensor; anything else is one run.
        replacement = whole[start:stop] if whole.ndim == 2 else whole.reshape(-1)
        try:
            return convert_array(replacement, DType[adapter.info(recipe.a_name).dtype], target)
        except RangeError as error:
            raise RangeError(f"{where_text}: {error}") from None
    a = adapter[recipe.a_name]
    factor = a.dtype
    if recipe.kind == "bias":
        left = np.ones((1, 1), dtype=factor.numpy)
        right = _finite(adapter, recipe.a_name, a.numpy()).reshape(1, -1)
        values = weight.numpy()[start:stop].reshape(1, -1)
        shape: tuple[int, ...] = (1, weight.shape[0])
        first = start
    else:
        b = adapter[recipe.b_name]
        a_values = _finite(adapter, recipe.a_name, a.numpy())
        b_values = _finite(adapter, recipe.b_name, b.numpy())
        if recipe.kind == "linear":
            left, right = b_values[start:stop], a_values
        else:
            left, right = a_values[:, start:stop].T, b_values.T
        values = weight.numpy()[start:stop]
        shape = tuple(weight.shape)
        first = start * shape[1]
    try:
        result = low_rank_update(
            values, weight.dtype, left, right, factor, recipe.scale, target, first, shape
        )
    except RangeError as error:
        raise RangeError(f"{base.path}: tensor {name!r}: merged {error}") from None
    return result.reshape(-1) if recipe.kind == "bias" else result


def _finite(checkpoint: Checkpoint, name: str, values: np.ndarray) -> np.ndarray:
    """The adapter tensor's values, refused when one is NaN or infinite."""
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values.astype(np.float32) if values.dtype.itemsize < 4 else values)
    if bad.any():
        index = ", ".join(str(int(i)) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
        raise FormatError(
            f"{checkpoint.path}: tensor {name!r}: element [{index}] is not finite; the "
            "merged weights would not be numbers"
        )
    return values


def lora_task(argument: tuple[_Merge, str, int, int, str]) -> np.ndarray:
    """Rows ``[start, stop)`` of a merged LoRA tensor as bytes (run in a worker)."""
    merge, name, start, stop, target = argument
    try:
        sources = tuple(opened(path) for path in merge.paths)
        data = _lora_rows(sources, merge.recipes[name], name, start, stop, DType[target])
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    except DataError as error:
        raise JobError(merge.paths[0], name, str(error)) from None


# -- weighted averages ----------------------------------------------------------------------


@guard_function
def merge_linear(
    checkpoints: Sequence[str | os.PathLike[str] | Checkpoint],
    weights: Sequence[object],
    *,
    lenient: bool = False,
) -> MergedCheckpoint:
    """The weighted sum ``sum_i weights[i] * checkpoints[i]``, as a lazy ``Checkpoint``.

    Each checkpoint is a path (opened here, closed with the result) or an open
    ``Checkpoint`` (never closed here); all must have the same tensor names, and for
    each name the same shape and dtype. Weights: one per checkpoint, each decimal text,
    ``Fraction``, ``int`` or ``float`` (``parse_weight``); they need not sum to 1.

    Every F16/BF16/F32/F64 element is the exact weighted sum of the stored values,
    rounded once into its dtype; an element holding NaN or an infinity in any input is
    what IEEE arithmetic makes of it. Integer and BOOL tensors must be identical in
    every input and are copied. The result has the first checkpoint's names, order,
    metadata and path, and ``format`` ``"merged"``.

    Checked before this returns, from headers: FormatError naming the tensor for names
    that differ, shapes that differ; DTypeError for dtypes that differ or a tensor
    strided cannot average (FP8, quantized); FormatError for bad weights, LimitError
    for weights with too many digits. Reading a tensor may raise FormatError (integer
    tensors that differ, naming the first element) or RangeError (an element past the
    dtype's largest finite value).

    ``lenient=True`` opens the paths leniently (whole pickled models give their
    ``state_dict()`` tensors; nothing is run), and worker processes reopen them so.
    """
    exact = tuple(parse_weight(weight) for weight in weights)
    if not checkpoints or len(exact) != len(checkpoints):
        raise FormatError(
            f"merge_linear: {len(checkpoints)} checkpoints need as many weights, found {len(exact)}"
        )
    check_weights(exact)
    owned: list[Checkpoint] = []
    try:
        sources = []
        for item in checkpoints:
            if isinstance(item, Checkpoint):
                sources.append(item)
            else:
                sources.append(open_checkpoint(item, lenient=lenient))
                owned.append(sources[-1])
        _agree(sources)
        merge = _Merge("linear", tuple(where(c.path, lenient) for c in sources), {}, exact)
        return MergedCheckpoint(_MergeReader(merge, tuple(sources), tuple(owned), {}))
    except BaseException:
        for checkpoint in owned:
            checkpoint.close()
        raise


def _agree(sources: Sequence[Checkpoint]) -> None:
    first = sources[0]
    names = list(first)
    for other in sources[1:]:
        missing = [name for name in names if name not in other]
        extra = [name for name in other if name not in first]
        if missing or extra:
            name, side = (missing[0], first.path) if missing else (extra[0], other.path)
            raise FormatError(
                f"{side}: tensor {name!r} is not in every checkpoint: merged checkpoints "
                "must hold the same names"
            )
    for name in names:
        info = first.info(name)
        for other in sources[1:]:
            found = other.info(name)
            if found.shape != info.shape:
                raise FormatError(
                    f"{other.path}: tensor {name!r} has shape {list(found.shape)}, "
                    f"{first.path} {list(info.shape)}"
                )
            if found.dtype != info.dtype:
                raise DTypeError(
                    f"{other.path}: tensor {name!r} is {found.dtype}, {first.path} {info.dtype}"
                )
        if not has_dtype(info.dtype) or (
            DType[info.dtype].is_float and DType[info.dtype] not in TARGETS
        ):
            raise DTypeError(
                f"{first.path}: tensor {name!r} is {info.dtype}: only F16, BF16, F32 and F64 "
                "tensors are averaged (integer and BOOL ones copied)"
            )


def _linear_run(
    sources: Sequence[Checkpoint],
    weights: Sequence[Fraction],
    name: str,
    start: int,
    stop: int,
    target: DType,
) -> np.ndarray:
    """Elements ``[start, stop)`` of the merged tensor ``name`` in ``target`` (flat)."""
    info = sources[0].info(name)
    dtype = DType[info.dtype]
    runs = [Source(source, name).values(start, stop) for source in sources]
    if not dtype.is_float:
        for source, run in zip(sources[1:], runs[1:], strict=True):
            differ = run != runs[0]
            if differ.any():
                flat = start + int(np.argmax(differ))
                index = ", ".join(str(int(i)) for i in np.unravel_index(flat, tuple(info.shape)))
                raise FormatError(
                    f"{source.path}: tensor {name!r}: element [{index}] differs from "
                    f"{sources[0].path}: {dtype.name} tensors must be identical to be merged"
                )
        return np.ascontiguousarray(runs[0])
    try:
        return weighted_sum(
            runs, [dtype] * len(runs), weights, target, start, tuple(info.shape) or (1,)
        )
    except RangeError as error:
        raise RangeError(f"{sources[0].path}: tensor {name!r}: merged {error}") from None


def linear_task(argument: tuple[_Merge, str, int, int, str]) -> np.ndarray:
    """Elements ``[start, stop)`` of a merged average as bytes (run in a worker)."""
    merge, name, start, stop, target = argument
    try:
        sources = tuple(opened(path) for path in merge.paths)
        data = _linear_run(sources, merge.weights, name, start, stop, DType[target])
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    except DataError as error:
        raise JobError(merge.paths[0], name, str(error)) from None


# -- the writer's items ---------------------------------------------------------------------


def sources_of(merged: MergedCheckpoint) -> list[tuple[str, Checkpoint]]:
    """``(path workers open, open checkpoint)`` of each source of a merged checkpoint,
    for ``_pool.sharing``: tasks run in this process use the open ones."""
    reader = merged._merge_reader()
    return list(zip(reader.merge.paths, reader.sources, strict=True))


def merge_items(
    merged: MergedCheckpoint,
    names: Sequence[str],
    dtype: DType | None,
    allow_expanded: bool = False,
) -> tuple[list[Item], str]:
    """The writer's items for ``names`` of a checkpoint made by ``merge_lora`` or
    ``merge_linear``, and the path unchanged tensors are read from (the base's, or the
    first input's). ``dtype`` converts floating tensors, merged ones rounded once into
    it directly (F16, BF16, F32 or F64: DTypeError otherwise).
    """
    reader = merged._merge_reader()
    merge = reader.merge
    if dtype is not None and dtype not in TARGETS:
        raise DTypeError(f"merged tensors are written as F16, BF16, F32 or F64, not {dtype.name}")
    base = reader.sources[0]
    if merge.kind == "lora":
        changed = [name for name in names if name in merge.recipes]
    else:
        changed = list(names)
    copies = {
        item.planned.name: item
        for item in plan_copies(base, [n for n in names if n not in changed], dtype, allow_expanded)
    }
    items = []
    for name in names:
        if name in copies:
            items.append(copies[name])
            continue
        info = merged.info(name)
        source = DType[info.dtype]
        target = dtype if dtype is not None and source.is_float else source
        planned = Planned(name, target.name, info.shape, info.shape.numel * target.itemsize)
        tasks = tuple(_tasks(merge, info, target))
        items.append(Item(planned, "computed", target, tasks))
    return items, merge.paths[0]


def _tasks(merge: _Merge, info: TensorInfo, target: DType) -> Iterator[Task]:
    """Bounded runs of one merged tensor: rows for LoRA weights, elements otherwise."""
    shape: Shape = info.shape
    if merge.kind == "lora" and merge.recipes[info.name].kind != "bias" and len(shape) == 2:
        width = max(shape[1], 1)
        step = max(1, _TASK_BYTES // (width * target.itemsize))
        for start in range(0, shape[0], step):
            stop = min(start + step, shape[0])
            yield lora_task, (merge, info.name, start, stop, target.name), start * width
        return
    function = lora_task if merge.kind == "lora" else linear_task
    numel = shape.numel
    if merge.kind == "lora":  # a bias: one run
        yield function, (merge, info.name, 0, shape[0] if shape else 1, target.name), 0
        return
    step = max(1, _TASK_BYTES // target.itemsize)
    for start in range(0, numel, step):
        yield function, (merge, info.name, start, min(start + step, numel), target.name), start
