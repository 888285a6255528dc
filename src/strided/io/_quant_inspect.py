"""Inspecting a block-quantized tensor by decoding only the blocks that hold samples."""

from __future__ import annotations

from itertools import repeat
from typing import Any

import numpy as np

from .._construct import python_values
from .._dtype import DType
from .._inspect import TensorInspection, TensorInspectionOptions, _positions, _statistics
from .._limits import MAX_INSPECTION_SAMPLES
from .._scalar import Scalar
from .._shape import Shape
from ._ggml import GGMLType, sample

__all__ = ["quantized_inspection"]


def quantized_inspection(
    kind: GGMLType,
    data: np.ndarray[Any, Any],
    dims: tuple[int, ...],
    options: TensorInspectionOptions,
) -> TensorInspection:
    """What ``inspect(options)`` of the dequantized F32 tensor (C-contiguous, shape
    ``dims``) returns, computed from the few blocks of ``data`` holding the samples."""
    shape = Shape._trusted(dims)
    numel = shape.numel
    count = min(options.max_samples, MAX_INSPECTION_SAMPLES, numel)
    positions = _positions(options.strategy, count, numel)
    values = sample(kind, data, positions)
    exact = python_values(values, DType.F32)
    scalars = map(Scalar._trusted, repeat(DType.F32), exact)
    return TensorInspection(
        dtype=DType.F32,
        shape=shape,
        strides=shape.strides(),
        numel=numel,
        byte_len=numel * 4,
        storage_byte_len=numel * 4,
        is_contiguous=True,
        samples=tuple(zip(positions.tolist(), scalars, strict=True)),
        sampled=count,
        complete=count == numel,
        **_statistics(values, DType.F32),
    )
