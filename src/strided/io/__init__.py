"""Tensor files: safetensors (single and sharded), GGUF, NumPy ``.npy`` and PyTorch checkpoints."""

from .gguf import GGUFFile, open_gguf
from .npy import load_npy, save_npy
from .pytorch import PyTorchFile, load_pytorch, open_pytorch
from .safetensors import SafetensorsFile, load_safetensors, open_safetensors, save_safetensors

__all__ = [
    "GGUFFile",
    "PyTorchFile",
    "SafetensorsFile",
    "load_npy",
    "load_pytorch",
    "load_safetensors",
    "open_gguf",
    "open_pytorch",
    "open_safetensors",
    "save_npy",
    "save_safetensors",
]
