"""Write the small example checkpoint that ``make demo`` inspects (well under 1 MiB).

Run ``python examples/make_example.py`` to regenerate ``examples/tiny-llama.safetensors``;
the values are deterministic, so the file is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

import strided as st

HIDDEN, FFN, LAYERS, VOCAB = 64, 128, 4, 256


def build() -> dict[str, st.Tensor]:
    rng = np.random.default_rng(0)

    def weight(*shape: int, dtype: object = ml_dtypes.bfloat16) -> st.Tensor:
        values = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        return st.Tensor.from_numpy(values.astype(dtype))

    tensors = {"model.embed_tokens.weight": weight(VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.self_attn.q_proj.weight"] = weight(HIDDEN, HIDDEN)
        tensors[f"{prefix}.self_attn.k_proj.weight"] = weight(HIDDEN // 4, HIDDEN)
        tensors[f"{prefix}.self_attn.v_proj.weight"] = weight(HIDDEN // 4, HIDDEN)
        tensors[f"{prefix}.self_attn.o_proj.weight"] = weight(HIDDEN, HIDDEN)
        tensors[f"{prefix}.mlp.up_proj.weight"] = weight(FFN, HIDDEN)
        tensors[f"{prefix}.mlp.down_proj.weight"] = weight(HIDDEN, FFN)
        tensors[f"{prefix}.input_layernorm.weight"] = st.Tensor.full(st.DType.F32, [HIDDEN], 1.0)
    tensors["model.norm.weight"] = st.Tensor.full(st.DType.F32, [HIDDEN], 1.0)
    tensors["lm_head.weight"] = weight(VOCAB, HIDDEN)
    tensors["model.rotary.inv_freq"] = st.Tensor.from_numpy(
        (1.0 / 10000 ** (np.arange(0, 16, 2) / 16)).astype(np.float32)
    )
    tensors["model.vocab_ids"] = st.Tensor.from_numpy(np.arange(VOCAB, dtype=np.int64))
    return tensors


def main() -> None:
    path = Path(__file__).with_name("tiny-llama.safetensors")
    metadata = {"format": "pt", "model_type": "llama", "note": "strided demo checkpoint"}
    st.save_safetensors(path, build(), metadata=metadata)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
