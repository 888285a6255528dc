"""Inspecting a block-quantized tensor by decoding only the blocks that hold samples."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._core.dtype import DType
from ..._core.shape import Shape
from ..._tensor.inspect import (
    TensorInspection,
    TensorInspectionOptions,
    inspection,
    sample_positions,
)
from ._ggml import GGMLType, sample

__all__ = ["quantized_inspection"]


def quantized_inspection(
    kind: GGMLType,
    storage: Any,
    begin: int,
    dims: tuple[int, ...],
    options: TensorInspectionOptions,
) -> TensorInspection:
    """What ``inspect(options)`` of the dequantized F32 tensor (C-contiguous, shape
    ``dims``, stored from byte ``begin`` of ``storage``) returns, computed from the
    few blocks holding the samples: only those blocks are read from the storage.
    """
    shape = Shape._trusted(dims)
    positions = sample_positions(options, shape.numel)
    owner = positions // kind.block_size
    needed, slot = np.unique(owner, return_inverse=True)
    blocks = storage.units(begin, kind.block_bytes, needed)
    # The same positions within the gathered blocks: increasing, as ``sample`` wants.
    local = slot.reshape(-1) * kind.block_size + positions % kind.block_size
    values = sample(kind, blocks.reshape(-1), local)
    numel = shape.numel
    layout = (shape.strides(), numel * 4, numel * 4, True)
    return inspection(DType.F32, shape, positions, values, layout)
