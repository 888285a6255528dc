"""Tensor files: safetensors (single and sharded), GGUF and NumPy ``.npy``."""

from .gguf import GGUFFile, open_gguf
from .npy import load_npy, save_npy
from .safetensors import SafetensorsFile, load_safetensors, open_safetensors, save_safetensors

__all__ = [
    "GGUFFile",
    "SafetensorsFile",
    "load_npy",
    "load_safetensors",
    "open_gguf",
    "open_safetensors",
    "save_npy",
    "save_safetensors",
]
