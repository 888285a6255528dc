"""Merging LoRA adapters: exact W + s * (B @ A) against fractions.Fraction, real PEFT
adapters (names and targeting as PEFT writes them, merge_and_unload as a second
opinion), hostile adapters, and the command line."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hs

import strided as st
from strided._core.dtype import FLOAT_LAYOUTS
from strided._core.floats import round_exact
from strided._kernels.exact_affine import TARGETS, low_rank_update
from strided.cli import main

D = st.DType

# -- the kernel against exact rational arithmetic ------------------------------------------

# Values that make ties, cancellations and exact zeros likely, beside arbitrary bits.
_NICE = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 3.0, 2.0**-9, 2.0**-24, 2.0**-25, 2.0**-126, 65504.0]


@hs.composite
def _values(draw: hs.DrawFn, dtype: st.DType, shape: tuple[int, ...]) -> np.ndarray:
    """Finite values of ``dtype``: random bit patterns (subnormals, huge) or nice ones."""
    count = int(np.prod(shape))
    out = np.empty(count, dtype=dtype.numpy)
    for i in range(count):
        if draw(hs.booleans()):
            value = draw(hs.sampled_from(_NICE))
            out[i] = np.asarray(value).astype(dtype.numpy)
            if not np.isfinite(out[i].astype(np.float64)):
                out[i] = 0
        else:
            bits = draw(hs.integers(0, (1 << (8 * dtype.itemsize)) - 1))
            value = np.array([bits], dtype=f"<u{dtype.itemsize}").view(dtype.numpy)[0]
            with np.errstate(invalid="ignore"):  # a NaN bit pattern widens with a warning
                finite = np.isfinite(value.astype(np.float64))
            out[i] = value if finite else 0
    return out.reshape(shape)


def exact_update(
    weight: np.ndarray, left: np.ndarray, right: np.ndarray, scale: float
) -> list[list[Fraction]]:
    """``W + s * (L @ R)`` as exact rationals (the oracle)."""
    rows, cols = weight.shape
    return [
        [
            Fraction(float(weight[i, j]))
            + Fraction(scale)
            * sum(
                (
                    Fraction(float(left[i, k])) * Fraction(float(right[k, j]))
                    for k in range(left.shape[1])
                ),
                Fraction(0),
            )
            for j in range(cols)
        ]
        for i in range(rows)
    ]


def rounded(values: list[list[Fraction]], target: st.DType) -> np.ndarray | None:
    """Each exact value rounded once into ``target`` (None when one overflows)."""
    try:
        flat = [round_exact(target, value) for row in values for value in row]
    except st.RangeError:
        return None
    return np.array(flat, dtype=np.float64).reshape(len(values), -1)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.astype(np.float64).view(np.uint64), b.view(np.uint64)))


@settings(max_examples=250, deadline=None)
@given(hs.data())
def test_update_is_the_exact_value_rounded_once(data: hs.DataObject) -> None:
    weight_dtype = data.draw(hs.sampled_from(TARGETS))
    factor_dtype = data.draw(hs.sampled_from(TARGETS))
    target = data.draw(hs.sampled_from(TARGETS))
    rows, cols, rank = (data.draw(hs.integers(1, 4)) for _ in range(3))
    weight = data.draw(_values(weight_dtype, (rows, cols)))
    left = data.draw(_values(factor_dtype, (rows, rank)))
    right = data.draw(_values(factor_dtype, (rank, cols)))
    scale = data.draw(hs.sampled_from([1.0, 2.0, 0.5, 1 / 3, -16 / 7, 2.0**-40, 2.0**40]))
    want = rounded(exact_update(weight, left, right, scale), target)
    if want is None:
        with pytest.raises(st.RangeError, match="overflows"):
            low_rank_update(weight, weight_dtype, left, right, factor_dtype, scale, target)
        return
    got = low_rank_update(weight, weight_dtype, left, right, factor_dtype, scale, target)
    assert got.dtype == target.numpy
    # +0.0 for an exact zero; the oracle's round_exact gives +0.0 for Fraction(0) too.
    assert same_bits(got, want)


@pytest.mark.parametrize("target", [D.BF16, D.F16, D.F32])
def test_exact_ties_go_to_even_and_near_ties_to_their_side(target: st.DType) -> None:
    """1 + half an ulp is a tie (to even: 1); a hair above it rounds up. A path that
    rounded the F64 value first (double rounding) gets the second case wrong."""
    half = 2.0 ** -(FLOAT_LAYOUTS[target].mantissa_bits + 1)  # half an ulp of 1.0
    weight = np.ones((1, 3), dtype=target.numpy)
    # Row sums: half, half + 2**-80 (a hair above; F64 rounds it to the tie), half - 2**-80.
    left = np.array([[1.0, 1.0]])
    right = np.array([[half, half, half], [0.0, 2.0**-80, -(2.0**-80)]])
    got = low_rank_update(weight, target, left, right, D.F64, 1.0, target).astype(np.float64)
    up = 1.0 + 2 * half
    assert got.tolist() == [[1.0, up, 1.0]]
    assert got.tolist() == rounded(exact_update(weight, left, right, 1.0), target).tolist()


def test_cancellation_gives_plus_zero_and_tiny_results_keep_their_sign() -> None:
    weight = np.array([[1.5, -0.0, 2.0**-130, 2.0**-140]], dtype=np.float32)
    left = np.array([[1.0]], dtype=np.float32)
    right = np.array([[-1.5, 0.0, -(2.0**-129), -(2.0**-139)]], dtype=np.float32)
    got = low_rank_update(weight, D.F32, left, right, D.F32, 1.0, D.BF16).astype(np.float64)
    # 0 exactly; 0 (+0.0, as IEEE -0 + 0); -2**-130 (a BF16 subnormal); -2**-140 -> -0.0.
    assert [math.copysign(1.0, v) for v in got[0]] == [1.0, 1.0, -1.0, -1.0]
    assert got[0].tolist() == [0.0, 0.0, -(2.0**-130), 0.0]


def test_overflow_is_a_range_error_naming_the_element() -> None:
    weight = np.array([[1.0, 65504.0]], dtype=np.float16)
    left = np.ones((1, 1), dtype=np.float32)
    right = np.array([[0.0, 16.0]], dtype=np.float32)
    with pytest.raises(st.RangeError, match=r"element \[0, 1\] overflows F16"):
        low_rank_update(weight, D.F16, left, right, D.F32, 1.0, D.F16)


def test_non_finite_weights_stay() -> None:
    weight = np.array([[np.inf, np.nan, -np.inf]], dtype=np.float32)
    left = np.ones((1, 1), dtype=np.float32)
    right = np.ones((1, 3), dtype=np.float32)
    got = low_rank_update(weight, D.F32, left, right, D.F32, 1.0, D.BF16).astype(np.float64)
    assert got[0, 0] == np.inf and np.isnan(got[0, 1]) and got[0, 2] == -np.inf


# -- real PEFT adapters -----------------------------------------------------------------


def _peft() -> tuple[Any, Any, Any]:
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    return torch, peft, safetensors_torch


def _tiny_model(torch: Any) -> Any:
    nn = torch.nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(11, 6)
            self.body = nn.ModuleDict({"q_proj": nn.Linear(6, 5), "v_proj": nn.Linear(6, 5)})
            self.out_proj = nn.Linear(5, 4)
            self.classifier = nn.Linear(4, 3)

    return Tiny()


def _save_base(safetensors_torch: Any, model: Any, path: Path) -> dict[str, Any]:
    state = {
        name: value.detach().clone().contiguous() for name, value in model.state_dict().items()
    }
    safetensors_torch.save_file(state, str(path))
    return state


def _randomize(torch: Any, model: Any) -> None:
    """LoRA B is zero-initialised: random B (and A, and saved copies) make a real delta."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
                parameter.copy_(noise.to(parameter.dtype))


def _peft_bound(
    ours: np.ndarray, theirs: np.ndarray, exact64: np.ndarray, delta: np.ndarray,
    magnitude: np.ndarray, target: st.DType, rank: int,
) -> None:  # fmt: skip
    """PEFT computes delta = fl32(fl32(B @ A) * s) (F32 accumulation: at most
    (r + 1) * 2**-24 * |s| * sum|B||A| off), rounds it into W's dtype (half an ulp of
    delta there) and rounds W + delta (half an ulp of the result): it may differ from
    the exact value by the sum of those, and from ours by one ulp of the result more."""

    def ulp(values: np.ndarray) -> np.ndarray:
        """The gap above each value's rounding into ``target`` (powers of two, in F64)."""
        exponent = np.frexp(np.abs(values.astype(target.numpy).astype(np.float64)))[1]
        layout = FLOAT_LAYOUTS[target]
        return np.ldexp(1.0, np.maximum(exponent - 1, layout.emin) - layout.mantissa_bits)

    theirs64 = theirs.astype(np.float64)
    bound = 0.5 * ulp(theirs64) + 0.5 * ulp(delta) + (rank + 2) * 2.0**-24 * magnitude
    assert np.all(np.abs(theirs64 - exact64) <= bound * 1.001 + 2.0**-1000)
    assert np.all(np.abs(ours.astype(np.float64) - exact64) <= 0.5 * ulp(ours) * 1.000001)


_TORCH_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16"])
@pytest.mark.parametrize("serialization", ["safetensors", "bin"])
def test_peft_adapter_merges_like_merge_and_unload_but_exactly(
    tmp_path: Path, dtype: str, serialization: str
) -> None:
    torch, peft, safetensors_torch = _peft()
    torch.manual_seed(0)
    model = _tiny_model(torch).to(getattr(torch, _TORCH_DTYPES[dtype]))
    base = _save_base(safetensors_torch, model, tmp_path / "base.safetensors")
    config = peft.LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "out_proj", "embed"],
        rank_pattern={"body.v_proj": 2},  # a dotted key: matched as PEFT matches it
        alpha_pattern={"out_proj": 3},
        modules_to_save=["classifier"],
    )
    wrapped = peft.get_peft_model(model, config)
    _randomize(torch, wrapped)
    adapter = tmp_path / "adapter"
    wrapped.save_pretrained(str(adapter), safe_serialization=serialization == "safetensors")
    assert (adapter / f"adapter_model.{serialization}").exists()
    lora = {name: value.detach().float().numpy() for name, value in wrapped.state_dict().items()}
    reference = {k: v.detach() for k, v in wrapped.merge_and_unload().state_dict().items()}

    with st.merge_lora(str(tmp_path / "base.safetensors"), str(adapter)) as merged:
        assert sorted(merged) == sorted(base)  # the base's names
        assert sorted(merged) == sorted(reference)  # and merge_and_unload's
        for name in merged:
            assert merged.info(name).dtype == dtype
            assert list(merged[name].shape) == list(reference[name].shape)
        scales = {"body.q_proj": 8 / 4, "body.v_proj": 8 / 2, "out_proj": 3 / 4, "embed": 2.0}
        for module, scale in scales.items():
            name = f"{module}.weight"
            weight = base[name].float().numpy()
            if module == "embed":
                a = lora[f"base_model.model.{module}.lora_embedding_A.default"]
                b = lora[f"base_model.model.{module}.lora_embedding_B.default"]
                left, right = a.T, b.T
            else:
                left = lora[f"base_model.model.{module}.lora_B.default.weight"]
                right = lora[f"base_model.model.{module}.lora_A.default.weight"]
            exact = exact_update(weight, left, right, scale)
            ours = merged[name].convert(D.F64).numpy()
            assert same_bits(ours, rounded(exact, D[dtype]))
            theirs = reference[name].float().numpy()
            exact64 = np.array([[float(v) for v in row] for row in exact])
            delta = exact64 - weight.astype(np.float64)
            magnitude = abs(scale) * (np.abs(left).astype(np.float64) @ np.abs(right))
            _peft_bound(ours, theirs, exact64, delta, magnitude, D[dtype], left.shape[1])
        # modules_to_save replaces the classifier; untouched tensors are the base's bits.
        saved = lora["base_model.model.classifier.modules_to_save.default.weight"]
        assert np.array_equal(merged["classifier.weight"].convert(D.F32).numpy(), saved)
        assert np.array_equal(saved, reference["classifier.weight"].float().numpy())
        kept = merged["body.q_proj.bias"].numpy().tobytes()
        assert kept == base["body.q_proj.bias"].view(torch.uint8).numpy().tobytes()


@pytest.mark.filterwarnings("ignore:Adapter 'default'")  # PEFT mistakes lora_B.bias for a shard
def test_peft_rslora_and_lora_bias(tmp_path: Path) -> None:
    torch, peft, safetensors_torch = _peft()
    torch.manual_seed(1)
    model = _tiny_model(torch)
    base = _save_base(safetensors_torch, model, tmp_path / "base.safetensors")
    config = peft.LoraConfig(
        r=3, lora_alpha=5, target_modules=["q_proj", "out_proj"], use_rslora=True, lora_bias=True
    )
    wrapped = peft.get_peft_model(model, config)
    _randomize(torch, wrapped)
    wrapped.save_pretrained(str(tmp_path / "adapter"))
    lora = {name: value.detach().numpy() for name, value in wrapped.state_dict().items()}
    reference = {k: v.detach().numpy() for k, v in wrapped.merge_and_unload().state_dict().items()}
    scale = 5 / math.sqrt(3)
    merged = st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "adapter"), 0.5)
    for module in ("body.q_proj", "out_proj"):
        prefix = f"base_model.model.{module}"
        weight = base[f"{module}.weight"].numpy()
        left, right = (
            lora[f"{prefix}.lora_B.default.weight"],
            lora[f"{prefix}.lora_A.default.weight"],
        )
        exact = exact_update(weight, left, right, scale * 0.5)
        assert same_bits(merged[f"{module}.weight"].convert(D.F64).numpy(), rounded(exact, D.F32))
        bias = base[f"{module}.bias"].numpy()[None, :]
        b = lora[f"{prefix}.lora_B.default.bias"][None, :]
        exact_bias = exact_update(bias, np.ones((1, 1)), b, scale * 0.5)
        got = merged[f"{module}.bias"].convert(D.F64).numpy()[None, :]
        assert same_bits(got, rounded(exact_bias, D.F32))
    full = st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "adapter"))
    np.testing.assert_allclose(full["out_proj.bias"].numpy(), reference["out_proj.bias"], rtol=1e-6)
    merged.close()
    full.close()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # peft 0.21 on transformers 5
def test_peft_gpt2_fan_in_fan_out(tmp_path: Path) -> None:
    torch, peft, safetensors_torch = _peft()
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(2)
    config = transformers.GPT2Config(
        n_embd=16, n_layer=2, n_head=2, n_positions=8, vocab_size=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).to(torch.bfloat16)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight")  # tied to the embedding: Hugging Face files store it once
    safetensors_torch.save_file(state, str(tmp_path / "base.safetensors"))
    lora_config = peft.LoraConfig(
        r=4, lora_alpha=16, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True
    )
    wrapped = peft.get_peft_model(model, lora_config)
    _randomize(torch, wrapped)
    wrapped.save_pretrained(str(tmp_path / "adapter"))
    lora = {k: v.detach().float().numpy() for k, v in wrapped.state_dict().items()}
    reference = {k: v.detach() for k, v in wrapped.merge_and_unload().state_dict().items()}
    with st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "adapter")) as merged:
        assert set(merged) == set(reference) - {"lm_head.weight"}
        # The square attn.c_proj follows c_attn's (non-square, transposed) layout.
        assert merged.layouts == {f"transformer.h.{i}.attn.c_proj": "Conv1D" for i in range(2)}
        changed = 0
        for name in merged:
            module = name.removesuffix(".weight")
            prefix = f"base_model.model.{module}"
            if f"{prefix}.lora_A.default.weight" not in lora:
                assert (
                    merged[name].numpy().tobytes()
                    == state[name].view(torch.uint8).numpy().tobytes()
                )
                continue
            changed += 1
            weight = state[name].float().numpy()  # Conv1D: (in, out)
            a = lora[f"{prefix}.lora_A.default.weight"]  # (r, in)
            b = lora[f"{prefix}.lora_B.default.weight"]  # (out, r)
            exact = exact_update(weight, a.T, b.T, 4.0)
            ours = merged[name].convert(D.F64).numpy()
            assert same_bits(ours, rounded(exact, D.BF16))
            exact64 = np.array([[float(v) for v in row] for row in exact])
            magnitude = 4.0 * (np.abs(a.T).astype(np.float64) @ np.abs(b.T))
            _peft_bound(
                ours, reference[name].float().numpy(), exact64, exact64 - weight, magnitude,
                D.BF16, 4,
            )  # fmt: skip
        assert changed == 6  # c_attn, attn.c_proj and mlp.c_proj of both layers


# -- hostile adapters -------------------------------------------------------------------


def _plain_adapter(folder: Path, tensors: dict[str, np.ndarray], **config: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    settings_ = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, **config}
    (folder / "adapter_config.json").write_text(json.dumps(settings_))
    st.save_safetensors(
        str(folder / "adapter_model.safetensors"),
        {name: st.Tensor.from_numpy(value) for name, value in tensors.items()},
    )


def _plain_base(path: Path, dtype: Any = np.float32) -> None:
    rng = np.random.default_rng(3)
    st.save_safetensors(
        str(path),
        {
            "layer.weight": st.Tensor.from_numpy(rng.standard_normal((3, 4)).astype(dtype)),
            "layer.bias": st.Tensor.from_numpy(np.zeros(3, dtype=dtype)),
            "ids": st.Tensor.from_numpy(np.arange(5, dtype=np.int64)),
        },
    )


def _good_tensors(dtype: Any = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    return {
        "base_model.model.layer.lora_A.weight": rng.standard_normal((2, 4)).astype(dtype),
        "base_model.model.layer.lora_B.weight": rng.standard_normal((3, 2)).astype(dtype),
    }


def test_plain_adapter_merges_and_cli_output_is_the_same_for_every_jobs(tmp_path: Path) -> None:
    _plain_base(tmp_path / "base.safetensors")
    tensors = _good_tensors()
    _plain_adapter(tmp_path / "ad", tensors)
    merged = st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), 1.5)
    base = st.load_safetensors(str(tmp_path / "base.safetensors"))
    exact = exact_update(
        base["layer.weight"].numpy(),
        tensors["base_model.model.layer.lora_B.weight"],
        tensors["base_model.model.layer.lora_A.weight"],
        2.0 * 1.5,
    )
    assert same_bits(merged["layer.weight"].convert(D.F64).numpy(), rounded(exact, D.F32))
    assert merged["ids"] == base["ids"] and merged.format == "merged"
    outputs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}.safetensors"
        args = [str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), str(out)]
        assert main(["merge-lora", *args, "--scale", "1.5", "--jobs", jobs]) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    written = st.load_safetensors(str(tmp_path / "out1.safetensors"))
    assert {name: t.digest() for name, t in written.items()} == {
        name: merged[name].digest() for name in merged
    }
    # --dtype BF16 rounds the exact value once into BF16 (not the F32 result again).
    out = tmp_path / "bf16.safetensors"
    args = [str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), str(out)]
    assert main(["merge-lora", *args, "--scale", "1.5", "--dtype", "bf16"]) == 0
    got = st.load_safetensors(str(out))
    assert same_bits(got["layer.weight"].convert(D.F64).numpy(), rounded(exact, D.BF16))
    assert got["ids"].dtype is D.I64


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], error: type, text: str) -> None:
    """The API raises ``error`` matching ``text``; the command exits 1 naming it and writes
    nothing."""
    with pytest.raises(error, match=text):
        st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "ad"))
    out = tmp_path / "out.safetensors"
    args = [str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), str(out)]
    assert main(["merge-lora", *args]) == 1
    assert re.search(text, capsys.readouterr().err)
    assert {path.name for path in tmp_path.iterdir()} == {"base.safetensors", "ad"}


@pytest.mark.parametrize(
    ("change", "error", "text"),
    [
        ({"rename": "other"}, st.FormatError, "base .* has no tensor 'other.weight'"),
        ({"shape": (3, 3)}, st.FormatError, "the LoRA weights give shape"),
        ({"config": {"use_dora": True}}, st.FormatError, "use_dora"),
        ({"config": {"r": 3}}, st.FormatError, "r is 3"),
        ({"config": {"r": "2"}}, st.FormatError, "r must be"),
        ({"config": {"peft_type": "IA3"}}, st.FormatError, "not LORA"),
        ({"config": {"rank_pattern": {r"(a)\1": 2}}}, st.FormatError, "refused"),
        ({"config": {"alpha_pattern": {"x" * 257: 2}}}, st.LimitError, "longer than 256"),
        ({"dtype_b": np.float16}, st.DTypeError, "is F32 but"),
        ({"json": b'{"r": 2, "r": 2}'}, st.FormatError, "appears more than once"),
        ({"json": b"{not json"}, st.FormatError, "invalid JSON"),
        ({"extra": "base_model.model.layer.lora_magnitude_vector"}, st.FormatError, "DoRA"),
        ({"extra": "base_model.model.layer.weight"}, st.FormatError, "modules_to_save"),
        ({"extra": "layer.lora_A.weight"}, st.FormatError, "not under"),
    ],
)
def test_bad_adapters_are_typed_errors_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], error: type,
    text: str,
) -> None:  # fmt: skip
    _plain_base(tmp_path / "base.safetensors")
    tensors = _good_tensors()
    if "rename" in change:
        tensors = {k.replace(".layer.", f".{change['rename']}."): v for k, v in tensors.items()}
    if "shape" in change:
        tensors["base_model.model.layer.lora_B.weight"] = np.ones((3, 2), np.float32)
        tensors["base_model.model.layer.lora_A.weight"] = np.ones((2, 3), np.float32)
    if "dtype_b" in change:
        key = "base_model.model.layer.lora_B.weight"
        tensors[key] = tensors[key].astype(change["dtype_b"])
    if "extra" in change:
        tensors[change["extra"]] = np.ones((3, 4), np.float32)
    _plain_adapter(tmp_path / "ad", tensors, **change.get("config", {}))
    if "json" in change:
        (tmp_path / "ad" / "adapter_config.json").write_bytes(change["json"])
    _refused(tmp_path, capsys, error, text)


def test_non_finite_factor_is_refused_when_read_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plain_base(tmp_path / "base.safetensors")
    tensors = _good_tensors()
    tensors["base_model.model.layer.lora_A.weight"][1, 2] = np.nan
    _plain_adapter(tmp_path / "ad", tensors)
    merged = st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "ad"))
    with pytest.raises(st.FormatError, match=r"element \[1, 2\] is not finite"):
        merged["layer.weight"]
    for jobs in ("1", "2"):
        out = tmp_path / "out.safetensors"
        args = [str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), str(out)]
        assert main(["merge-lora", *args, "--jobs", jobs]) == 1
        assert "is not finite" in capsys.readouterr().err
        assert not out.exists()


def test_gguf_base_and_integer_weight_are_refused(tmp_path: Path) -> None:
    st.save_safetensors(
        str(tmp_path / "base.safetensors"),
        {"layer.weight": st.Tensor.from_numpy(np.ones((3, 4), dtype=np.int32))},
    )
    _plain_adapter(tmp_path / "ad", _good_tensors())
    with pytest.raises(st.DTypeError, match=r"'layer\.weight' is I32"):
        st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "ad"))
    with pytest.raises(st.FormatError, match=r"finite number"):
        st.merge_lora(str(tmp_path / "base.safetensors"), str(tmp_path / "ad"), math.inf)


def test_merging_streams_one_weight_at_a_time(tmp_path: Path) -> None:
    """Peak traced memory of the command in a child: 64 MiB of F32 weights (16 x 4 MiB)
    each with an adapter merge in far less than the base (a whole-model merge holds it
    all, plus the deltas)."""
    rng = np.random.default_rng(5)
    weights = {
        f"layers.{i}.weight": st.Tensor.from_numpy(rng.standard_normal((1024, 1024), np.float32))
        for i in range(16)
    }
    st.save_safetensors(str(tmp_path / "base.safetensors"), weights)
    lora = {}
    for i in range(16):
        lora[f"base_model.model.layers.{i}.lora_A.weight"] = rng.standard_normal((8, 1024))
        lora[f"base_model.model.layers.{i}.lora_B.weight"] = rng.standard_normal((1024, 8))
    _plain_adapter(
        tmp_path / "ad", {k: v.astype(np.float32) for k, v in lora.items()}, r=8, lora_alpha=16
    )
    script = (
        "import sys, tracemalloc\n"
        "from strided.cli import main\n"
        "tracemalloc.start()\n"
        "status = main(sys.argv[1:])\n"
        "print(status, tracemalloc.get_traced_memory()[1])\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", script, "merge-lora", str(tmp_path / "base.safetensors"),
         str(tmp_path / "ad"), str(tmp_path / "out.safetensors")],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    status, peak = found.stdout.split()[-2:]
    assert status == "0"
    assert int(peak) < 40 << 20, int(peak) >> 20  # the base alone is 64 MiB
    shutil.rmtree(tmp_path / "ad")


def test_a_whole_pickled_model_merges_with_lenient(tmp_path: Path) -> None:
    """torch.save(model) needs --lenient (its classes are records, never run); the merge
    then equals the merge into the model's state_dict, for every --jobs."""
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(5)
    model = torch.nn.ModuleDict({"layer": torch.nn.Linear(4, 3)})
    torch.save(model, str(tmp_path / "whole.pt"))
    state = {name: value.detach().contiguous() for name, value in model.state_dict().items()}
    safetensors_torch.save_file(state, str(tmp_path / "state.safetensors"))
    _plain_adapter(tmp_path / "ad", _good_tensors())
    refused = tmp_path / "refused.safetensors"
    assert main(["merge-lora", str(tmp_path / "whole.pt"), str(tmp_path / "ad"), str(refused)]) == 1
    assert not refused.exists()
    expected = tmp_path / "expected.safetensors"
    args = [str(tmp_path / "ad")]
    assert main(["merge-lora", str(tmp_path / "state.safetensors"), *args, str(expected)]) == 0
    for jobs in ("1", "2"):
        out = tmp_path / f"lenient{jobs}.safetensors"
        whole = str(tmp_path / "whole.pt")
        assert main(["merge-lora", whole, *args, str(out), "--lenient", "--jobs", jobs]) == 0
        assert out.read_bytes() == expected.read_bytes()
    with st.merge_lora(str(tmp_path / "whole.pt"), str(tmp_path / "ad"), lenient=True) as merged:
        assert sorted(merged) == ["layer.bias", "layer.weight"]


# -- exact values past the range: RangeError, never inf, NaN or OverflowError -------------

_EXTREME = [0.0, 1.0, -1.5, 3.0, 2.0**250, -(2.0**300), 1e300, 2.0**-250, -(2.0**-600), 5e-324]


@settings(max_examples=200, deadline=None)
@given(hs.data())
def test_extreme_f64_factors_and_scales_round_exactly_or_are_range_errors(
    data: hs.DataObject,
) -> None:
    """F64 factors past 2**+-200 and scales such as 1e300 (the Python-integer tier):
    a finite exact value comes out correctly rounded, one past the target's range is a
    RangeError naming the element, against fractions.Fraction."""
    target = data.draw(hs.sampled_from(TARGETS))
    rows, cols, rank = (data.draw(hs.integers(1, 3)) for _ in range(3))

    def draw(shape: tuple[int, int]) -> np.ndarray:
        picks = [data.draw(hs.sampled_from(_EXTREME)) for _ in range(shape[0] * shape[1])]
        return np.array(picks, dtype=np.float64).reshape(shape)

    weight, left, right = draw((rows, cols)), draw((rows, rank)), draw((rank, cols))
    scale = data.draw(hs.sampled_from([1.0, 1e300, -1e300, 2.0**-900, 0.5]))
    want = rounded(exact_update(weight, left, right, scale), target)
    if want is None:
        with pytest.raises(st.RangeError, match="overflows"):
            low_rank_update(weight, D.F64, left, right, D.F64, scale, target)
        return
    got = low_rank_update(weight, D.F64, left, right, D.F64, scale, target)
    assert same_bits(got, want)


def test_merge_lora_past_the_range_is_a_range_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--scale 1e300 with F64 factors near 2**±250: out of range is a RangeError (API and
    command, nothing written); in range is the exact value rounded once."""
    weight = np.array([[1.0, -2.0], [0.5, 4.0]])
    base_tensors = {"layer.weight": st.Tensor.from_numpy(weight)}
    st.save_safetensors(str(tmp_path / "base.safetensors"), base_tensors)
    a = np.array([[2.0**250, 1.0], [0.0, 2.0**-250]])
    b = np.array([[1.0, 0.0], [0.0, 1.0]])
    _plain_adapter(
        tmp_path / "ad",
        {"base_model.model.layer.lora_A.weight": a, "base_model.model.layer.lora_B.weight": b},
        r=2, lora_alpha=2,
    )  # fmt: skip
    base, ad = str(tmp_path / "base.safetensors"), str(tmp_path / "ad")
    with st.merge_lora(base, ad, 1e300) as merged, pytest.raises(st.RangeError, match="overflows"):
        merged["layer.weight"]
    out = tmp_path / "out.safetensors"
    assert main(["merge-lora", base, ad, str(out), "--scale", "1e300"]) == 1
    assert "overflows F64" in capsys.readouterr().err
    assert not out.exists()
    with st.merge_lora(base, ad, 2.0**-300) as merged:
        got = merged["layer.weight"].numpy()
    want = rounded(exact_update(weight, b, a, 2.0**-300), D.F64)
    assert same_bits(got, want)
    # s = alpha / r x S itself past F64 (2.0 x 1e308): refused when the adapter is read.
    config = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    (tmp_path / "ad" / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": 4}))
    with pytest.raises(st.RangeError, match=r"module 'layer': the scale s = 2\.0 .* overflows"):
        st.merge_lora(base, ad, 1e308)


# -- layouts: nn.Linear (out, in) or GPT-2's Conv1D (in, out), decided per module ----------


def _mixed_model(torch: Any) -> Any:
    """A non-square and a square nn.Linear, a non-square and a square GPT-2 Conv1D, in
    that order: PEFT wraps them in order, flips fan_in_fan_out per module, and saves the
    last value (True)."""
    conv1d = pytest.importorskip("transformers.pytorch_utils").Conv1D
    nn = torch.nn

    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wide = nn.Linear(6, 10)  # weight (10, 6)
            self.square = nn.Linear(6, 6)
            self.conv = conv1d(12, 6)  # weight (6, 12): (in, out)
            self.sq_conv = conv1d(6, 6)

    return Mixed()


@pytest.mark.filterwarnings("ignore:fan_in_fan_out is set")  # PEFT flips it per module
def test_peft_adapter_over_linear_and_conv1d_modules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The saved flag (True: the last module wrapped was a Conv1D) cannot say which
    layout the square modules have: refused, naming both, until the caller states it;
    then each module merges as PeftModel.from_pretrained(...).merge_and_unload() does,
    but exactly."""
    torch, peft, safetensors_torch = _peft()
    torch.manual_seed(3)
    model = _mixed_model(torch)
    base = _save_base(safetensors_torch, model, tmp_path / "base.safetensors")
    config = peft.LoraConfig(
        r=2, lora_alpha=6, target_modules=["wide", "square", "conv", "sq_conv"]
    )
    wrapped = peft.get_peft_model(model, config)
    _randomize(torch, wrapped)
    wrapped.save_pretrained(str(tmp_path / "ad"))
    saved = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert saved["fan_in_fan_out"] is True  # the last value PEFT set, not each module's
    lora = {k: v.detach().numpy() for k, v in wrapped.state_dict().items()}
    fresh = _mixed_model(torch)
    fresh.load_state_dict(safetensors_torch.load_file(str(tmp_path / "base.safetensors")))
    reloaded = peft.PeftModel.from_pretrained(fresh, str(tmp_path / "ad"))
    reference = {k: v.detach().numpy() for k, v in reloaded.merge_and_unload().state_dict().items()}
    base_path, ad = str(tmp_path / "base.safetensors"), str(tmp_path / "ad")

    with pytest.raises(st.FormatError, match="square modules sq_conv, square is ambiguous"):
        st.merge_lora(base_path, ad)
    out = tmp_path / "out.safetensors"
    assert main(["merge-lora", base_path, ad, str(out)]) == 1
    assert "sq_conv, square is ambiguous" in capsys.readouterr().err
    assert not out.exists()
    # A statement the shapes contradict: conv's (6, 12) weight is not (12, 6).
    with pytest.raises(st.FormatError, match=r"module 'conv'.*Linear-style"):
        st.merge_lora(base_path, ad, fan_in_fan_out=["sq_conv"])

    with st.merge_lora(base_path, ad, fan_in_fan_out=["conv", "sq_conv"]) as merged:
        assert merged.layouts == {"sq_conv": "Conv1D", "square": "Linear"}
        for module in ("wide", "square", "conv", "sq_conv"):
            name = f"{module}.weight"
            weight = base[name].numpy()
            a = lora[f"base_model.model.{module}.lora_A.default.weight"]
            b = lora[f"base_model.model.{module}.lora_B.default.weight"]
            left, right = (a.T, b.T) if "conv" in module else (b, a)
            exact = exact_update(weight, left, right, 3.0)
            ours = merged[name].convert(D.F64).numpy()
            assert same_bits(ours, rounded(exact, D.F32)), module
            exact64 = np.array([[float(v) for v in row] for row in exact])
            magnitude = 3.0 * (np.abs(left).astype(np.float64) @ np.abs(right))
            _peft_bound(
                ours, reference[name], exact64, exact64 - weight, magnitude, D.F32, 2
            )  # fmt: skip
        digests = {name: merged[name].digest() for name in merged}
    args = ["--fan-in-fan-out", "conv", "--fan-in-fan-out", "sq_*"]
    assert main(["merge-lora", base_path, ad, str(out), *args]) == 0
    assert "square modules: Conv1D sq_conv; Linear square" in capsys.readouterr().err
    written = st.load_safetensors(str(out))
    assert {name: t.digest() for name, t in written.items()} == digests


def _square_adapter(folder: Path, base: Path, **config: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    weight = rng.standard_normal((3, 3)).astype(np.float32)
    st.save_safetensors(str(base), {"layer.weight": st.Tensor.from_numpy(weight)})
    tensors = _good_tensors()
    tensors["base_model.model.layer.lora_A.weight"] = rng.standard_normal((2, 3)).astype(np.float32)
    _plain_adapter(folder, tensors, **config)
    return {"W": weight, **tensors}


@pytest.mark.parametrize(
    ("flag", "stated", "layout"),
    [
        (False, None, "Linear"),
        (True, None, None),
        (True, [], "Linear"),
        (False, ["lay*"], "Conv1D"),
    ],
)
def test_square_module_layout_follows_the_rule(
    tmp_path: Path, flag: bool, stated: list[str] | None, layout: str | None
) -> None:
    """A lone square module: Linear under false; under true nothing shows its layout, so
    it is ambiguous; a stated layout (an empty list: all Linear) decides."""
    found = _square_adapter(tmp_path / "ad", tmp_path / "base.safetensors", fan_in_fan_out=flag)
    args = (str(tmp_path / "base.safetensors"), str(tmp_path / "ad"))
    if layout is None:
        with pytest.raises(st.FormatError, match="square modules layer is ambiguous"):
            st.merge_lora(*args, fan_in_fan_out=stated)
        return
    a, b = (
        found["base_model.model.layer.lora_A.weight"],
        found["base_model.model.layer.lora_B.weight"],
    )
    left, right = (a.T, b.T) if layout == "Conv1D" else (b, a)
    with st.merge_lora(*args, fan_in_fan_out=stated) as merged:
        assert merged.layouts == {"layer": layout}
        want = rounded(exact_update(found["W"], left, right, 2.0), D.F32)
        assert same_bits(merged["layer.weight"].convert(D.F64).numpy(), want)


# -- pattern keys: matched as PEFT matches them, in time linear in the name ----------------

_NAME_PARTS = ["model", "layers", "0", "1", "12", "self_attn", "q_proj", "v_proj", "mlp", "a"]
_KEY_PARTS = [
    "q_proj", "v_proj", "layers", "self_attn", "mlp", "0", "1", "a", "_", r"\.", ".", r"\d",
    "[0-9]", "[^.]", "+", "*", "?", "{1,2}", "{2}", "(", ")", "(?:", "|", ".*", "^", "$",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    hs.lists(hs.sampled_from(_NAME_PARTS), min_size=1, max_size=6),
    hs.lists(hs.sampled_from(_KEY_PARTS), min_size=1, max_size=7),
)
def test_pattern_keys_match_as_peft_matches_them(
    name_parts: list[str], key_parts: list[str]
) -> None:
    """Plain module paths and simple regular expressions: strided's automaton agrees
    with PEFT's own get_pattern_key (re.match(rf"(.*\\.)?({key})$", name))."""
    get_pattern_key = pytest.importorskip("peft.utils.other").get_pattern_key
    from strided.jobs._lora_pattern import KeyPattern

    name, key = ".".join(name_parts), "".join(key_parts)
    try:
        re.compile(rf"(.*\.)?({key})$")
    except re.error:
        return  # not a key PEFT accepts
    assume(key != name)  # get_pattern_key returns the name itself when nothing matches
    peft_says = get_pattern_key([key], name) == key
    if re.search(r"[*+?}]\+", key):  # possessive quantifiers: refused, not matched
        with pytest.raises(st.FormatError, match=r"possessive .*\(refused\)"):
            KeyPattern(key, "test")
        return
    assert KeyPattern(key, "test").matches(name) == peft_says, (key, name)


def test_pattern_keys_peft_accepts_are_matched_in_order() -> None:
    from strided.jobs._lora_pattern import KeyPattern

    get_pattern_key = pytest.importorskip("peft.utils.other").get_pattern_key
    keys = [
        "q_proj", "body.v_proj", r"layers\.0\..*", r"layers\.\d+\.self_attn\.(q|k)_proj",
        r"model\.layers\.(1[0-5]|[0-9])\.mlp", "^mlp$", r"\Amlp\Z", "a)|(b", r"[\]a-]+",
        r"x{,2}", r"x{}", r"\x71_proj", r"(?P<part>self_attn)\.v_proj", "(a|aa)*c",
    ]  # fmt: skip
    names = [
        "q_proj", "model.q_proj", "body.v_proj", "xbody.v_proj", "layers.0.q_proj",
        "model.layers.7.self_attn.k_proj", "model.layers.12.mlp", "model.layers.16.mlp",
        "mlp", "a.mlp", "mlp\n", "aa", "a]-", "x{}", "xx", "self_attn.v_proj", "aac",
    ]  # fmt: skip
    compiled = [KeyPattern(key, "test") for key in keys]
    for name in names:
        first = next((p.key for p in compiled if p.matches(name)), name)
        assert first == get_pattern_key(keys, name), name


_HOSTILE_CHILD = """
import sys
import strided as st
try:
    with st.merge_lora(sys.argv[1], sys.argv[2]) as merged:
        merged[sys.argv[3]]
    print("merged")
except st.DataError as error:
    print(type(error).__name__ + ": " + str(error))
"""


@pytest.mark.parametrize(
    ("field", "value", "outcome"),
    [
        ("rank_pattern", {"a{0,999}" * 28: 2}, "FormatError: .* of more than 2000 states .*"),
        ("rank_pattern", {r"(\w+)\1x": 2}, r"FormatError: .*escape '\\\\1'.* \(refused\)"),
        ("rank_pattern", {"(a|aa)*c": 5, "(a{0,9}){0,9}b": 2}, "merged"),
        ("alpha_pattern", {"((a|a)+)+c": 3}, "merged"),
        ("target_modules", "(a|aa)*c" + "a{0,999}" * 28, "merged"),
    ],
)
def test_hostile_pattern_keys_are_refused_or_matched_linearly(
    tmp_path: Path, field: str, value: Any, outcome: str
) -> None:
    """Keys that make Python's re backtrack for ages on the module name a...ab: refused
    before matching, or matched by the automaton (the module then takes the key's r when
    it matches: here the last key does); target_modules is never matched. In a child."""
    module = "a" * 40 + "b"
    rng = np.random.default_rng(6)
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    st.save_safetensors(
        str(tmp_path / "base.safetensors"), {f"{module}.weight": st.Tensor.from_numpy(weight)}
    )
    tensors = {
        f"base_model.model.{module}.lora_A.weight": rng.standard_normal((2, 4)).astype(np.float32),
        f"base_model.model.{module}.lora_B.weight": rng.standard_normal((3, 2)).astype(np.float32),
    }
    _plain_adapter(tmp_path / "ad", tensors, **{field: value})
    found = subprocess.run(
        [sys.executable, "-c", _HOSTILE_CHILD, str(tmp_path / "base.safetensors"),
         str(tmp_path / "ad"), f"{module}.weight"],
        capture_output=True, text=True, timeout=300, check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert re.fullmatch(outcome, found.stdout.strip()), found.stdout


@pytest.mark.parametrize(
    ("flag", "wide_shape", "expected"),
    [
        (True, (3, 5), "Conv1D"),  # GPT-2: the non-square module is Conv1D-style
        (True, (5, 3), "the non-square modules are Linear-style"),
        # false beside a Conv1D-style module: the last module PEFT wrapped was a Linear
        # and a Conv1D was wrapped too, so the square one could be either
        (False, (3, 5), "the non-square modules are Conv1D-style"),
        (False, (5, 3), "Linear"),  # false, nothing contradicts it: Linear-style
    ],
)
def test_square_module_follows_the_non_square_ones(
    tmp_path: Path, flag: bool, wide_shape: tuple[int, int], expected: str
) -> None:
    """A non-square module (A (2, 3), B (5, 2)) takes the layout its base shape needs
    whatever the flag says; the square one follows the rule."""
    rng = np.random.default_rng(9)
    base = {
        "wide.weight": rng.standard_normal(wide_shape).astype(np.float32),
        "sq.weight": rng.standard_normal((3, 3)).astype(np.float32),
    }
    st.save_safetensors(
        str(tmp_path / "base.safetensors"), {k: st.Tensor.from_numpy(v) for k, v in base.items()}
    )
    tensors = {
        "base_model.model.wide.lora_A.weight": rng.standard_normal((2, 3)).astype(np.float32),
        "base_model.model.wide.lora_B.weight": rng.standard_normal((5, 2)).astype(np.float32),
        "base_model.model.sq.lora_A.weight": rng.standard_normal((2, 3)).astype(np.float32),
        "base_model.model.sq.lora_B.weight": rng.standard_normal((3, 2)).astype(np.float32),
    }
    _plain_adapter(tmp_path / "ad", tensors, fan_in_fan_out=flag)
    args = (str(tmp_path / "base.safetensors"), str(tmp_path / "ad"))
    if expected not in ("Linear", "Conv1D"):
        text = f"{expected}: the layout of the square modules sq is ambiguous"
        with pytest.raises(st.FormatError, match=text):
            st.merge_lora(*args)
        return
    with st.merge_lora(*args) as merged:
        assert merged.layouts == {"sq": expected}
        for module, layout in (("wide", "Conv1D" if wide_shape == (3, 5) else "Linear"),
                               ("sq", expected)):  # fmt: skip
            a = tensors[f"base_model.model.{module}.lora_A.weight"]
            b = tensors[f"base_model.model.{module}.lora_B.weight"]
            left, right = (a.T, b.T) if layout == "Conv1D" else (b, a)
            want = rounded(exact_update(base[f"{module}.weight"], left, right, 2.0), D.F32)
            assert same_bits(merged[f"{module}.weight"].convert(D.F64).numpy(), want), module
