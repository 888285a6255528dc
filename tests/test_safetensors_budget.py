"""A safetensors header is charged to the open's parse budget before it is parsed.

The estimate comes from one linear scan of the header text (its values and containers
outside strings), so a header of millions of tiny objects -- about 20 bytes of Python
objects per byte of text -- is refused before any object exists, while a real header
(about 8 bytes per byte) always fits.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import safetensors.numpy

import strided as st
from tests.budgetchild import opened_in_child


def test_a_header_of_tiny_objects_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    count = 2_200_000  # 31 MB of '"k0000000":{},' that would build about 600 MB
    header = ("{" + ",".join(f'"k{i:07d}":{{}}' for i in range(count)) + "}").encode()
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    result = opened_in_child(path)
    assert result["outcome"].startswith("LimitError"), result
    assert "JSON objects" in result["outcome"]
    assert result["grew_kib"] < 100 * 1024, result  # nothing of the 600 MB was built


def test_a_large_real_header_fits_the_budget(tmp_path: Path) -> None:
    # 150,000 tensors (a 17 MB header, larger than any real model's): opens, and reads
    # as the reference library reads it.
    arrays = {f"model.layers.{i}.mlp.weight": np.full(1, i, np.float32) for i in range(150_000)}
    path = tmp_path / "many.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    with st.open_checkpoint(path) as ckpt:
        assert len(ckpt) == len(arrays)
        assert ckpt["model.layers.149999.mlp.weight"].numpy()[0] == 149_999
