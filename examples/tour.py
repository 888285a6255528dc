"""The README's tour, run for real: ``make demo``."""

from __future__ import annotations

import strided as st


def show(label: str, value: object) -> None:
    print(f"{label:<36} {value}")


def main() -> None:
    t = st.tensor([[1, 2, 3], [4, 5, 6]], st.DType.I16)
    show("t.shape, t.strides", (str(t.shape), t.strides))
    v = t[:, ::-1]
    show("v = t[:, ::-1]: strides, shared", (v.strides, v.shares_storage(t)))
    show("v.tolist()", v.tolist())
    show("str(Scalar(F32, 0.1))", str(st.Scalar(st.DType.F32, 0.1)))
    try:
        st.Scalar(st.DType.I8, 300)
    except st.RangeError as error:
        show("Scalar(I8, 300)", f"RangeError: {error}")
    try:
        t[0, 0] = 9  # type: ignore[index]
    except TypeError as error:
        show("t[0, 0] = 9", f"TypeError: {error}")
    if hasattr(t, "at"):
        show("t.at[0, 0].set(9).tolist()", t.at[0, 0].set(9).tolist())
    show("t after all that", t.tolist())
    b = st.Tensor.from_le_bytes(st.DType.F32, [2], bytes(8))
    show("from_le_bytes over bytes", (b.tolist(), b.storage_byte_len))


if __name__ == "__main__":
    main()
