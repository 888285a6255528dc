"""Models saved whole with ``torch.save(model)`` by the lenient-mode tests.

A module of its own so that the oracle, ``torch.load(weights_only=False)`` run in a
child process, can import the classes the pickles name (``tests.lenient_models.*``).
``oracle_state`` is what the child reports: every tensor of the loaded object (a
model's ``state_dict()``, prefixed by its dotted path inside the dicts and lists that
hold it, and plain tensors there by their paths), with its bytes and the identity of
its storage.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from torch import nn

__all__ = ["MODELS", "Encoder", "Shared", "Tied", "Tiny", "Wide", "oracle_state"]


class Block(nn.Module):
    """A custom block: a parameter, a None parameter, buffers of each kind."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.gain = nn.Parameter(torch.linspace(-1.0, 1.0, width))
        self.register_parameter("unused", None)
        self.register_buffer("steps", torch.arange(3, dtype=torch.int64))
        self.register_buffer("cache", torch.full((width,), 7.0), persistent=False)
        self.register_buffer("missing", None)
        self.scale = torch.ones(2)  # a plain attribute: not in the state dict
        self.width = width


class Encoder(nn.Module):
    """Nested Sequential, ModuleList, ModuleDict, a None child, BatchNorm's int buffer."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.LayerNorm(width))
        self.blocks = nn.ModuleList([Block(width) for _ in range(2)])
        self.heads = nn.ModuleDict(
            {"cls": nn.Linear(width, 2, bias=False), "seq": nn.Conv1d(width, 2, 3)}
        )
        self.norm = nn.BatchNorm1d(width)
        self.add_module("absent", None)
        self.name = "encoder"


class Tied(nn.Module):
    """A language model whose output layer shares the embedding's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.body = nn.Linear(3, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


class Shared(nn.Module):
    """One child module reachable under two names."""

    def __init__(self) -> None:
        super().__init__()
        inner = nn.Linear(2, 2)
        self.first = inner
        self.second = inner
        self.half = nn.Linear(2, 2).to(torch.bfloat16)


class Tiny(nn.Module):
    """A small custom model that a larger checkpoint holds among other things."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([[1.5, -2.0], [0.25, 3.0]]))
        self.register_buffer("count", torch.tensor(4, dtype=torch.int32))


class Wide(nn.Module):
    """About 21 MB of weights (more than one task of a job), the last layer tied."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(1024, 1024) for _ in range(5)])
        self.out = nn.Linear(1024, 1024)
        self.out.weight = self.layers[0].weight


MODELS = {"encoder": Encoder, "tied": Tied, "shared": Shared}


def _entries(obj: Any, prefix: str) -> dict[str, Any]:
    """Tensors by dotted name: a module's ``state_dict()``, dicts and lists walked."""
    if isinstance(obj, nn.Module):
        return {f"{prefix}{name}": tensor for name, tensor in obj.state_dict().items()}
    if isinstance(obj, torch.Tensor):
        return {prefix[:-1]: obj}
    if not isinstance(obj, (dict, list, tuple)):
        return {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    found: dict[str, Any] = {}
    for key, value in items:
        found.update(_entries(value, f"{prefix}{key}."))
    return found


def oracle_state(path: str) -> dict[str, Any]:
    """``{name: [dtype, shape, hex bytes, storage pointer]}`` of the state dicts in the
    file, loaded with ``torch.load(weights_only=False)`` (only files a test wrote)."""
    obj = torch.load(path, weights_only=False, map_location="cpu")
    entries = _entries(obj, "")
    return {
        name: [
            str(tensor.dtype).removeprefix("torch."),
            list(tensor.shape),
            tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes().hex(),
            tensor.untyped_storage().data_ptr(),
        ]
        for name, tensor in entries.items()
    }


if __name__ == "__main__":
    # One path: its state; several: {path: state} (one child for many files).
    states = {path: oracle_state(path) for path in sys.argv[1:]}
    print(json.dumps(states[sys.argv[1]] if len(states) == 1 else states))
