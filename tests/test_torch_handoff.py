"""Handing tensors to PyTorch and NumPy without handing over their memory.

``torch.tensor(t)``, ``torch.from_dlpack(t)``, ``torch.as_tensor(t)``, ``torch.asarray(t)``
and ``np.array(t)`` copy: writing into what they return leaves the tensor (and the file
it is mapped from) as it was. ``np.asarray(t)`` / ``t.numpy()`` are read-only views, which
``torch.from_numpy`` would share anyway (PyTorch ignores the flag and only warns).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

import strided as st

from .test_interop import tensors

D = st.DType
_ML = {D.BF16, D.F8_E4M3, D.F8_E5M2, D.F8_E8M0}  # torch.from_numpy has no ml_dtypes


def _scribble(array: np.ndarray) -> None:
    if array.size:
        array.reshape(-1).view(np.uint8)[...] = 0x5A


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_np_array_copies_and_the_views_stay_read_only(t: st.Tensor) -> None:
    before = t.to_le_bytes()
    copied = np.array(t)
    assert copied.flags.writeable and copied.flags.owndata
    assert copied.tobytes() == before
    _scribble(copied)
    assert t.to_le_bytes() == before
    for view in (np.asarray(t), t.numpy()):
        assert not view.flags.writeable
        if view.size:
            with pytest.raises(ValueError, match="read-only"):
                view[...] = view.copy()
    if t.numel and t.dtype not in _ML:
        torch = pytest.importorskip("torch")
        safe = torch.from_numpy(np.array(t))
        safe.reshape(-1).view(torch.uint8).fill_(0xA5)
        assert t.to_le_bytes() == before


# In a child: if a default path ever shared a read-only mapping, a write would crash.
_MAPPED = """
import sys, warnings
import numpy as np, torch
import strided as st

path = sys.argv[1]
original = open(path, "rb").read()
tensors = st.load_safetensors(path)  # memory-mapped
spellings = {
    "torch.tensor": torch.tensor,
    "torch.from_dlpack": torch.from_dlpack,
    "torch.as_tensor": torch.as_tensor,
    "torch.asarray": torch.asarray,
    "torch.from_numpy(np.array)": lambda t: torch.from_numpy(np.array(t)),
}
for name, t in sorted(tensors.items()):
    before = t.to_le_bytes()
    for spelling, convert in spellings.items():
        if spelling.endswith("(np.array)") and name == "bf16":
            continue  # torch.from_numpy takes no ml_dtypes array
        result = convert(t)
        result.reshape(-1).view(torch.uint8).fill_(0x5A)
        assert t.to_le_bytes() == before, (name, spelling)
        print(name, spelling, "copied")
assert open(path, "rb").read() == original
# The unsafe spelling, not written through: PyTorch takes the read-only view as it is.
plain = st.tensor([1.0, 2.0], "F32")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    shared = torch.from_numpy(np.asarray(plain))
print("from_numpy shares:", shared.data_ptr() == np.asarray(plain).ctypes.data)
print("warned:", any("not writable" in str(w.message) for w in caught))
"""


def test_default_torch_paths_copy_a_memory_mapped_tensor(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "weights.safetensors"
    st.save_safetensors(
        path,
        {
            "f32": st.tensor([[1.5, -2.0], [0.25, 3.0]], D.F32),
            "bf16": st.tensor([1.5, -0.0, 65280.0], D.BF16),
            "i64": st.tensor([-(2**63), 7], D.I64),
        },
    )
    env: dict[str, Any] = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", _MAPPED, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert sum(line.endswith(" copied") for line in lines) == 5 + 4 + 5
    assert "from_numpy shares: True" in lines and "warned: True" in lines
