"""The README's tour, run for real by ``make demo``."""

from __future__ import annotations

from pathlib import Path

import strided as st

CHECKPOINT = Path(__file__).with_name("tiny-llama.safetensors")


def show(label: str, value: object) -> None:
    print(f"{label:<38} {value}")


def attempt(label: str, action: object) -> None:
    try:
        show(label, action())  # type: ignore[operator]
    except (st.DataError, TypeError) as error:
        show(label, f"{type(error).__name__}: {error}")


def main() -> None:
    t = st.tensor([[1, 2, 3], [4, 5, 6]], st.DType.I16)
    v = t[:, ::-1]
    show("t[:, ::-1] strides, shares storage", (v.strides, v.shares_storage(t)))
    show("v.tolist()", v.tolist())
    show("str(Scalar(F32, 0.1))", str(st.Scalar(st.DType.F32, 0.1)))
    attempt("Scalar(I8, 300)", lambda: st.Scalar(st.DType.I8, 300))
    attempt("t * 20000 (I16)", lambda: t * 20000)
    attempt("t[0, 0] = 9", lambda: t.__setitem__((0, 0), 9))
    show("t.at[0, 0].set(9).tolist()", t.at[0, 0].set(9).tolist())
    show("t.tolist() (unchanged)", t.tolist())
    small = st.tensor(["0.1", "-0.0", "nan"], st.DType.BF16)
    text = small.to_json()
    show("BF16 to_json", text)
    show("from_json(text) == small (bit for bit)", st.Tensor.from_json(text) == small)
    weights = st.load_safetensors(CHECKPOINT)
    q = weights["model.layers.0.self_attn.q_proj.weight"]
    show("q_proj: dtype, shape, mapped bytes", (q.dtype.name, str(q.shape), q.storage_byte_len))
    show("q_proj.inspect().mean", q.inspect().mean)
    q32 = q.convert(st.DType.F32)
    show("(q32 @ q32.mT)[0, 0]", (q32 @ q32.mT)[0, 0].item())


if __name__ == "__main__":
    main()
