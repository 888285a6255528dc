"""Tensor files: safetensors (single and sharded), GGUF, NumPy ``.npy`` and ``.npz``, and
PyTorch checkpoints."""

from .gguf import GGUFFile, open_gguf
from .npy import load_npy, save_npy
from .npz import NpzFile, load_npz, open_npz
from .safetensors import SafetensorsFile, load_safetensors, open_safetensors, save_safetensors
from .torch import PyTorchFile, load_pytorch, open_pytorch

__all__ = [
    "GGUFFile",
    "NpzFile",
    "PyTorchFile",
    "SafetensorsFile",
    "load_npy",
    "load_npz",
    "load_pytorch",
    "load_safetensors",
    "open_gguf",
    "open_npz",
    "open_pytorch",
    "open_safetensors",
    "save_npy",
    "save_safetensors",
]
