"""Handing tensors to NumPy, PyTorch and JAX: DLPack, ``__array__`` and NumPy's protocols.

Oracles: the logical little-endian bytes of the tensor (``to_le_bytes``) against the
bytes each consumer holds; NumPy's own result on ``t.numpy()`` for NumPy functions.
Every default path is written into afterwards, and the tensor must not change.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import pickle
import subprocess
import sys
import threading
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as hs

import strided as st
from strided._kernels.dlpack import _structs

from .strategies import ALL_DTYPES, arrays, basic_indices, shapes

D = st.DType
T = st.Tensor
_BITS_ONLY = {D.BF16, D.F8_E4M3, D.F8_E5M2, D.F8_E8M0}  # np.from_dlpack has none of them


def _torch() -> Any:
    return pytest.importorskip("torch")


def _torch_dtype(dtype: st.DType) -> Any:
    torch = _torch()
    names = {D.BOOL: "bool", D.BF16: "bfloat16", D.F8_E4M3: "float8_e4m3fn"}
    names |= {D.F8_E5M2: "float8_e5m2", D.F8_E8M0: "float8_e8m0fnu"}
    return getattr(torch, names.get(dtype, dtype.numpy.name))


def _torch_bytes(result: Any) -> bytes:
    torch = _torch()
    flat = result.reshape(-1).contiguous()
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _scribble_torch(result: Any) -> None:
    torch = _torch()
    if result.numel():
        result.reshape(-1).view(torch.uint8).fill_(0x5A)


def _address(t: st.Tensor) -> int:
    return int(t.numpy().__array_interface__["data"][0])


Recipe = tuple[str, tuple[int, ...], bytes, str, Any]


@hs.composite
def recipes(draw: hs.DrawFn, dtypes: list[st.DType] = ALL_DTYPES) -> Recipe:
    """Any dtype, rank 0..3 (empty included), as a plain, transposed, reversed, stepped
    or indexed view: picklable, for a subprocess too (see ``build``)."""
    dtype = draw(hs.sampled_from(dtypes))
    shape = draw(shapes(0, 3, 4))
    raw = draw(arrays(dtype, shape)).tobytes()
    kind = draw(hs.sampled_from(["plain", "transpose", "reverse", "step", "index"]))
    index = draw(basic_indices(shape)) if kind == "index" else None
    return dtype.name, shape, raw, kind, index


def build(recipe: Recipe) -> st.Tensor:
    """The tensor view a recipe describes."""
    dtype, shape, raw, kind, index = recipe
    t = T.from_le_bytes(dtype, shape, raw)
    if kind == "transpose":
        return t.transpose()
    if kind == "reverse" and t.ndim:
        return t[(slice(None, None, -1),) * t.ndim]
    if kind == "step" and t.ndim:
        return t[..., ::2]
    return t[index] if kind == "index" else t


def tensors(dtypes: list[st.DType] = ALL_DTYPES) -> hs.SearchStrategy[st.Tensor]:
    return recipes(dtypes).map(build)


def _reversed(t: st.Tensor) -> bool:
    return t.numel > 0 and any(s < 0 and d > 1 for s, d in zip(t.strides, t.shape, strict=True))


# -- PyTorch ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_torch_default_paths_copy(t: st.Tensor) -> None:
    torch = _torch()
    before = t.to_le_bytes()
    for convert in (torch.from_dlpack, torch.as_tensor, torch.tensor, torch.asarray):
        result = convert(t)
        assert result.dtype == _torch_dtype(t.dtype)
        assert tuple(result.shape) == t.shape
        assert _torch_bytes(result) == before
        _scribble_torch(result)
        assert t.to_le_bytes() == before


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_torch_zero_copy(t: st.Tensor) -> None:
    torch = _torch()
    if _reversed(t):
        with pytest.raises(BufferError, match="negative strides"):
            t.__dlpack__(copy=False, max_version=(1, 0))
        with pytest.raises(BufferError, match="negative strides"):
            torch.from_dlpack(t, copy=False)
        return
    for result in (
        torch.from_dlpack(t.__dlpack__(copy=False, max_version=(1, 0))),
        torch.from_dlpack(t, copy=False),
    ):
        assert result.dtype == _torch_dtype(t.dtype)
        assert tuple(result.shape) == t.shape
        assert _torch_bytes(result) == t.to_le_bytes()
        if t.numel:
            assert result.data_ptr() == _address(t)


def test_torch_rank_zero_and_bfloat16_values() -> None:
    torch = _torch()
    half = st.tensor([[1.5, -2.0], [0.25, 3.0]], D.BF16)
    assert torch.equal(torch.as_tensor(half), torch.tensor([[1.5, -2.0], [0.25, 3.0]]).bfloat16())
    scalar = T.scalar(st.Scalar(D.I64, -(2**63)))
    assert torch.as_tensor(scalar).shape == () and torch.as_tensor(scalar).item() == -(2**63)
    assert torch.tensor(T.scalar(st.Scalar(D.F8_E4M3, 448))).float().item() == 448.0


def test_copy_capsule_flags() -> None:
    # Each capsule is kept alive while its structs are read: they are freed with it.
    t = st.tensor([1.0, 2.0], D.F32)
    capsule = t.__dlpack__(max_version=(1, 0))
    managed, _ = _structs(capsule)
    assert managed is not None and managed.flags == 2  # IS_COPIED, writable
    capsule = t.__dlpack__(copy=False, max_version=(1, 0))
    managed, _ = _structs(capsule)
    assert managed is not None and managed.flags == 1  # READ_ONLY
    capsule = t.convert(D.F8_E5M2).__dlpack__(copy=False, max_version=(1, 0))
    managed, tensor = _structs(capsule)
    assert managed is not None and (managed.major, managed.minor) >= (1, 1)
    assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (12, 8, 1)
    capsule = t.__dlpack__()
    managed, tensor = _structs(capsule)
    assert managed is None and tensor.device_type == 1 and tensor.ndim == 1


def test_dlpack_refusals() -> None:
    t = st.tensor([[1, 2], [3, 4]], D.I32)
    assert t.__dlpack_device__() == (1, 0)
    for old in (None, (0, 8)):
        with pytest.raises(BufferError, match="unversioned"):
            t.__dlpack__(copy=False, max_version=old)
    with pytest.raises(BufferError, match="device"):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device="cpu")
    t.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 3))
    with pytest.raises(ValueError, match="stream"):
        t.__dlpack__(stream=1)
    with pytest.raises(ValueError, match="copy"):
        t.__dlpack__(copy="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_version"):
        t.__dlpack__(max_version="1.0")
    with pytest.raises(TypeError):
        t.__dlpack__(None)  # type: ignore[misc]
    # A length-1 axis may be reversed: its stride moves nothing.
    column = t[:, :1][::-1, ::-1][::-1]
    assert column.strides[1] == -1
    np.testing.assert_array_equal(
        np.from_dlpack(column, copy=False), np.array([[1], [3]], dtype=np.int32)
    )


def test_consumer_keywords() -> None:
    torch = _torch()
    t = st.tensor([1.0, 2.0], D.F32)
    for result in (torch.from_dlpack(t, device="cpu"), torch.from_dlpack(t, copy=True)):
        result.add_(1)
        assert result.tolist() == [2.0, 3.0] and t.tolist() == [1.0, 2.0]
    assert np.from_dlpack(t, device="cpu", copy=True).flags.writeable


# -- lifetimes -------------------------------------------------------------------------


def _owner(t: st.Tensor) -> weakref.ref[np.ndarray]:
    return weakref.ref(t._storage.base._owned)  # type: ignore[union-attr]


def test_consumer_keeps_the_memory_alive_and_releases_it() -> None:
    torch = _torch()
    t = T.from_numpy(np.arange(1000, dtype=np.float32))
    owner = _owner(t)
    capsule = t.__dlpack__(copy=False, max_version=(1, 0))
    del t
    gc.collect()
    assert owner() is not None  # the unconsumed capsule holds it
    del capsule
    gc.collect()
    assert owner() is None  # the capsule destructor ran the deleter

    t = T.from_numpy(np.arange(1000, dtype=np.float32))
    owner = _owner(t)
    result = torch.from_dlpack(t, copy=False)
    view = np.from_dlpack(t, copy=False)
    del t
    gc.collect()
    assert owner() is not None and float(result[999]) == 999.0 and view[999] == 999
    del result
    gc.collect()
    assert owner() is not None  # NumPy's array still holds it
    del view
    gc.collect()
    assert owner() is None


def test_release_from_another_thread_and_many_round_trips() -> None:
    torch = _torch()
    t = T.from_numpy(np.arange(10, dtype=np.int64))
    owner = _owner(t)
    results = [torch.from_dlpack(t, copy=False) for _ in range(200)]
    results += [torch.from_dlpack(t) for _ in range(200)]
    del t
    thread = threading.Thread(target=results.clear)
    thread.start()
    thread.join()
    gc.collect()
    assert owner() is None


def test_default_copies_are_freed() -> None:
    """Copies handed out (consumed or not) are freed with their consumer or capsule."""
    torch = _torch()
    t = T.from_numpy(np.zeros(1 << 18, dtype=np.float32))  # 1 MiB
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(64):
            torch.from_dlpack(t).add_(1)
            np.from_dlpack(t)[0] = 1
            t.__dlpack__(max_version=(1, 0))
            t.__dlpack__()
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < (1 << 20) and peak < (8 << 20)


def test_capsule_dying_during_an_exception_keeps_the_exception() -> None:
    t = st.tensor([1.0], D.F32)

    def consume(*args: object) -> None:
        raise AssertionError("not reached")

    def fail() -> None:
        consume(t.__dlpack__(copy=False, max_version=(1, 0)), t.__dlpack__(), 1 / 0)

    with pytest.raises(ZeroDivisionError):
        fail()
    torch = _torch()

    def fail_in_torch() -> None:  # the consumer's tensor runs the deleter while unwinding
        consume(torch.from_dlpack(t, copy=False), torch.from_dlpack(t), 1 / 0)

    with pytest.raises(ZeroDivisionError):
        fail_in_torch()


# -- NumPy ---------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_numpy_paths(t: st.Tensor) -> None:
    before = t.to_le_bytes()
    view = np.asarray(t)
    assert view.dtype == t.dtype.numpy and view.shape == t.shape
    assert not view.flags.writeable and view is not np.asarray(t)
    assert np.ascontiguousarray(view).tobytes() == before
    shared = t.__array__(copy=False)
    assert not shared.flags.writeable
    if t.numel:
        assert np.shares_memory(shared, t.numpy())
    copies = [np.array(t), t.__array__(copy=True), np.asarray(t, copy=True)]
    if t.dtype not in _BITS_ONLY:
        copies.append(np.from_dlpack(t))
        zero_copy = None if _reversed(t) else np.from_dlpack(t, copy=False)
        if zero_copy is not None:
            assert not zero_copy.flags.writeable and zero_copy.tobytes() == before
    for copy in copies:
        assert copy.dtype == t.dtype.numpy and copy.shape == t.shape
        assert copy.flags.writeable and copy.tobytes() == before
        copy.reshape(-1).view(np.uint8)[...] = 0x5A
        assert t.to_le_bytes() == before


def test_numpy_has_no_bfloat16_dlpack_but_asarray_works() -> None:
    t = st.tensor([1.0, 2.5], D.BF16)
    with pytest.raises((RuntimeError, BufferError)):
        np.from_dlpack(t)
    assert np.asarray(t).dtype == ml_dtypes.bfloat16


def test_array_protocol_dtype_and_copy() -> None:
    t = st.tensor([1.0, 2.5], D.F32)
    widened = t.__array__(np.float64)
    assert widened.dtype == np.float64 and widened.flags.writeable
    assert np.asarray(t, dtype=np.float64).tolist() == [1.0, 2.5]
    with pytest.raises(ValueError, match="copy"):
        t.__array__(np.float64, copy=False)
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float64, copy=False)
    assert t.__array__(np.float32, copy=False).flags.writeable is False


_SIGNALLING_NAN = st.Tensor.from_numpy(np.array([0x7F800001], np.uint32).view(np.float32))
_ZERO = st.tensor(0.0, D.F32)


@settings(max_examples=60, deadline=None)
@given(tensors([D.F32, D.I32, D.F64, D.U8, D.BF16]), tensors([D.F32, D.I32]))
@example(st.tensor(float("nan"), D.BF16), _ZERO)
@example(st.tensor(float("inf"), D.F32), _ZERO)
@example(_SIGNALLING_NAN, _ZERO)
@example(st.Tensor.from_numpy(np.array([0x7F81], np.uint16).view(ml_dtypes.bfloat16)), _ZERO)
def test_numpy_functions_give_numpy_results(t: st.Tensor, u: st.Tensor) -> None:
    a = t.numpy()
    # NumPy's own floating-point warnings (ptp of inf, a signalling NaN) are NumPy's.
    with np.errstate(all="ignore"):
        if t.numel and t.dtype is not D.BF16:
            for function in (np.max, np.min, np.argmax, np.argmin, np.mean, np.ptp):
                assert np.array_equal(function(t), function(a), equal_nan=True)
                if t.ndim:
                    assert np.array_equal(function(t, axis=0), function(a, axis=0), equal_nan=True)
        assert type(np.sum(t)) is type(np.sum(a))
        assert np.array_equal(np.exp(t), np.exp(a), equal_nan=True)
        total = np.add.reduce(t, axis=None)
        assert np.array_equal(total, np.add.reduce(a, axis=None), equal_nan=True)
        assert np.array_equal(np.sort(t, axis=None), np.sort(a, axis=None), equal_nan=True)
    pieces = [t.reshape(-1), u.reshape(-1)]
    try:
        expected = np.concatenate([piece.numpy() for piece in pieces])
    except Exception as error:  # no common dtype: NumPy's own error
        with pytest.raises(type(error)):
            np.concatenate(pieces)
    else:
        with np.errstate(all="ignore"):  # isnan of a signalling NaN
            assert np.array_equal(np.concatenate(pieces), expected, equal_nan=True)
    assert not np.transpose(t).flags.writeable and isinstance(np.transpose(t), np.ndarray)


def test_numpy_cannot_write_into_a_tensor() -> None:
    t = st.tensor([1.0, 2.0], D.F32)
    a = np.zeros(2, np.float32)
    with pytest.raises(TypeError, match="immutable"):
        np.exp(a, out=t)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="immutable"):
        np.sum(a, out=t)
    with pytest.raises(TypeError, match="immutable"):
        np.add.at(t, [0], 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only"):
        np.copyto(t, a)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only"):
        np.put(t, [0], [5.0])  # type: ignore[arg-type]
    a += t  # writes only into the caller's array
    assert a.tolist() == [1.0, 2.0] and t.tolist() == [1.0, 2.0]


def test_operators_with_numpy_on_the_left_stay_strided() -> None:
    t = st.tensor([2**31 - 1, 1], D.I32)
    a = np.array([1, 2], dtype=np.int32)
    with pytest.raises(st.DTypeError, match="from_numpy"):
        _ = a + t
    with pytest.raises(st.DTypeError, match="from_numpy"):
        _ = t + a  # type: ignore[operator]
    product = np.int32(2) * st.tensor([3, 4], D.I32)
    assert isinstance(product, T) and product.tolist() == [6, 8]
    with pytest.raises(st.RangeError):
        _ = np.int32(1) + t
    with pytest.raises(st.RangeError):
        np.add(t, t)
    assert np.multiply(t, 1) == t
    two, three = st.tensor([[2]], D.I32), st.tensor([[3]], D.I32)
    assert np.matmul(two, three) == st.tensor([[6]], D.I32)
    assert (a == t) is False and (t == a) is False and (a != t) is True  # type: ignore[comparison-overlap]
    assert np.equal(t, t) is True and np.not_equal(t, t) is False
    with pytest.raises(TypeError, match="'<' not supported"):
        _ = a < t  # type: ignore[operator]
    with pytest.raises(TypeError, match="unsupported operand"):
        _ = a << t  # type: ignore[operator]
    assert np.less(np.asarray(t), 2).tolist() == [False, True]


# -- JAX -----------------------------------------------------------------------------
# In a subprocess: once imported, JAX warns at every fork, and checkpoint jobs fork.

_JAX_CHECKS = """
import pickle, sys
import jax, jax.numpy as jnp, numpy as np
import strided as st
from tests.test_interop import build

with jax.enable_x64(True):
    for recipe in pickle.loads(sys.stdin.buffer.read()):
        t = build(recipe)
        before = t.to_le_bytes()
        for result in (jnp.asarray(t), jnp.array(t), jax.dlpack.from_dlpack(t)):
            assert result.dtype == t.dtype.numpy and result.shape == t.shape, (recipe, result)
            assert np.asarray(result).tobytes() == before, recipe
        back = st.Tensor.from_dlpack(jnp.asarray(t))
        assert back.dtype is t.dtype and back.to_le_bytes() == before, recipe
try:
    st.Tensor.from_numpy(jnp.zeros(2))
except st.DTypeError as error:
    assert "JAX array" in str(error) and "Tensor.from_dlpack" in str(error), error
else:
    raise AssertionError("from_numpy took a JAX array")
print("checked")
"""


@settings(max_examples=3, deadline=None)
@given(hs.lists(recipes(), min_size=40, max_size=40))
def test_jax(batch: list[Recipe]) -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *sys.path]))
    done = subprocess.run(
        [sys.executable, "-c", _JAX_CHECKS],
        input=pickle.dumps(batch),
        capture_output=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == b"checked", done.stderr.decode()[-3000:]


# -- Tensor.from_dlpack and foreign types ---------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(tensors())
def test_from_dlpack_round_trips(t: st.Tensor) -> None:
    torch = _torch()
    before = t.to_le_bytes()
    source = torch.from_dlpack(t)
    for x in (source, t, np.array(t)):
        back = T.from_dlpack(x)
        assert back.dtype is t.dtype and back.shape == t.shape and back.to_le_bytes() == before
    if t.ndim >= 2:  # a non-contiguous producer
        assert T.from_dlpack(source.mT).to_le_bytes() == t.mT.to_le_bytes()
    if not _reversed(t):
        capsule_copy = T.from_dlpack(t.__dlpack__(copy=False, max_version=(1, 0)))
        assert capsule_copy.to_le_bytes() == before and not capsule_copy.shares_storage(t)
    _scribble_torch(source)
    assert T.from_dlpack(t).to_le_bytes() == before


def test_from_dlpack_copies_and_refuses() -> None:
    torch = _torch()
    source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    copied = T.from_dlpack(source)
    source.fill_(-1)
    assert copied.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert T.from_dlpack(torch.utils.dlpack.to_dlpack(torch.ones(2))).tolist() == [1.0, 1.0]
    assert T.from_dlpack(np.arange(4)[::-1]).tolist() == [3, 2, 1, 0]
    with pytest.raises(st.DTypeError, match="__dlpack__"):
        T.from_dlpack([1, 2])
    with pytest.raises(st.DTypeError, match="code 5"):
        T.from_dlpack(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(st.FormatError, match="__dlpack__ failed"):
        T.from_dlpack(torch.zeros(2, requires_grad=True))
    with pytest.raises(st.LimitError, match="MAX_RANK"):
        T.from_dlpack(torch.zeros((1,) * 33))
    used = st.tensor([1.0], D.F32).__dlpack__(max_version=(1, 0))
    torch.from_dlpack(used)
    with pytest.raises(st.FormatError, match="used_dltensor_versioned"):
        T.from_dlpack(used)


def test_from_numpy_names_the_dlpack_door() -> None:
    torch = _torch()
    with pytest.raises(st.DTypeError, match=r"PyTorch tensor.*Tensor\.from_dlpack"):
        T.from_numpy(torch.zeros(2))
    with pytest.raises(st.DTypeError, match=r"numpy\.ndarray"):
        T.from_numpy([1, 2])
