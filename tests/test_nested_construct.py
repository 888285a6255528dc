"""st.tensor from nested lists: shape first, allocation next, values last.

The shape comes from the first element of each level, so a list too large for memory
fails before a single leaf is converted; every container is still checked as the values
are filled in, so a ragged list is a ShapeError naming the index that does not fit.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st

D = st.DType
SRC = str(Path(st.__file__).resolve().parent.parent)


def _child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a Python child whose address space is capped at 4 GiB."""
    prelude = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,  # the old code walked 2**33 leaves first: many minutes
        env={"PYTHONPATH": SRC},
        check=False,
    )


def test_a_list_too_large_for_memory_fails_before_its_leaves_are_walked() -> None:
    # 2**17 references to one row of 2**16 floats: 2**33 elements (64 GiB as F64), under
    # MAX_ELEMENTS, held in a few hundred KiB of list.
    done = _child(
        """
        import strided as st
        values = [[0.0] * 2**16] * 2**17
        for build in (
            lambda: st.tensor(values, st.DType.F64),
            lambda: st.Tensor.from_scalars(st.DType.F64, (2**17, 2**16), iter(float, 1)),
            lambda: st.Tensor.zeros(st.DType.I8, (3,)).take([[0] * 2**16] * 2**17),
        ):
            try:
                build()
            except st.LimitError as error:
                print(error)
        """
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    assert lines[0] == (
        "tensor: shape [131072, 65536] of F64 needs 68719476736 bytes (64.0 GiB), "
        "more than this process can allocate"
    )
    assert lines[1].startswith("from_scalars: shape [131072, 65536] of F64 needs 68719476736")
    assert lines[2].startswith("take: shape [131072, 65536] of I64 needs 68719476736 bytes")


def test_a_repeated_row_that_fits_is_built() -> None:
    row = [1.5, -0.0, math.inf, 2.0**-1074]
    made = st.tensor([row] * 70_000, D.F64)  # more than one block of rows
    assert made.shape == (70_000, 4)
    expected = np.array([row] * 70_000, dtype=np.float64)
    assert made.to_le_bytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((70_001,), "F32"), ((3, 40_000), "I32"), ((66_000, 1), "F64"), ((1, 2, 50_000), "BF16")],
)
def test_values_span_blocks_in_row_major_order(shape: tuple[int, ...], dtype: str) -> None:
    """Results larger than a conversion block equal NumPy's, element for element."""
    array = np.arange(math.prod(shape), dtype=np.int64).reshape(shape) % 251 - 125
    nested = array.tolist()
    if dtype != "I32":
        nested = (array / 4).tolist()
    made = st.tensor(nested, dtype)
    assert made.shape == shape
    assert made.to_le_bytes() == np.array(nested, dtype=D.parse(dtype).numpy).tobytes()
    strings = st.tensor(np.vectorize(str)(np.array(nested)).tolist(), dtype)  # value by value
    assert strings == made


# -- ragged lists name the index -------------------------------------------------------


def _index_in(error: BaseException) -> list[int]:
    found = re.search(r"ragged nesting at (\[[0-9, ]*\])", str(error))
    assert found is not None, str(error)
    return [int(part) for part in found.group(1).strip("[]").split(",") if part.strip()]


@pytest.mark.parametrize(
    ("values", "index", "found"),
    [
        ([[1, 2], [3]], [1], "found a list of 1"),
        ([[1, 2], 3], [1], "found int 3"),
        ([[1.0, [2.0]], [3.0, 4.0]], [0, 1], "found a list"),
        ([[[1], [2]], [[3], [4, 5]]], [1, 1], "found a list of 2"),
        ([[[1], [2]], [[3], 4]], [1, 1], "found int 4"),
        ([[1], [2, 3]], [1], "found a list of 2"),  # the first row sets the shape
        ([[1, 2], (3,)], [1], "found a tuple of 1"),
        ([1, [2]], [1], "found a list"),
        ([[], [1]], [1], "found a list of 1"),
        ([[[]], [[], []]], [1], "found a list of 2"),
    ],
)
def test_ragged_nesting_names_the_index(values: Any, index: list[int], found: str) -> None:
    with pytest.raises(st.ShapeError, match="ragged nesting") as caught:
        st.tensor(values, D.F32)
    assert _index_in(caught.value) == index and found in str(caught.value)


@hs.composite
def ragged(draw: hs.DrawFn) -> tuple[Any, list[int]]:
    """A regular nested list with one container or leaf spoiled, and the spoiled index.

    The spoiled place is off the first-element chain (index not all zeros), which is
    where the shape is read from.
    """
    shape = [draw(hs.integers(2, 4)), *draw(hs.lists(hs.integers(1, 4), max_size=3))]
    nested: Any = list(range(math.prod(shape)))
    for dim in reversed(shape[1:]):
        nested = [nested[i : i + dim] for i in range(0, len(nested), dim)]
    depth = draw(hs.integers(1, len(shape)))  # the length of the spoiled item's index
    index = [draw(hs.integers(0, dim - 1)) for dim in shape[:depth]]
    if not any(index):
        index[0] = 1
    parent = nested
    for i in index[:-1]:
        parent = parent[i]
    target = parent[index[-1]]
    how = draw(hs.sampled_from(["longer", "shorter", "value"])) if depth < len(shape) else "nest"
    if how == "longer":
        target.append(target[0])
    elif how == "shorter":
        target.pop()
    elif how == "value":
        parent[index[-1]] = 7
    else:
        parent[index[-1]] = [target]
    return nested, index


@settings(max_examples=300, deadline=None)
@given(ragged(), hs.sampled_from([D.F64, D.I16, D.BF16]))
def test_ragged_lists_name_the_spoiled_index(case: tuple[Any, list[int]], dtype: st.DType) -> None:
    nested, index = case
    with pytest.raises(st.ShapeError) as caught:
        st.tensor(nested, dtype)
    assert _index_in(caught.value) == index


def test_a_ragged_row_past_the_first_block_is_found() -> None:
    rows = [[0.5, 1.5]] * 100_000 + [[2.5]]
    with pytest.raises(st.ShapeError) as caught:
        st.tensor(rows, D.F32)
    assert _index_in(caught.value) == [100_000]
    values: list[Any] = ["0.25"] * 100_000 + [["1"]]  # value by value, past a block
    with pytest.raises(st.ShapeError) as caught:
        st.tensor(values, D.F32)
    assert _index_in(caught.value) == [100_000]


# -- from_scalars streams its iterable --------------------------------------------------


def test_from_scalars_counts_and_takes_at_most_one_value_too_many() -> None:
    taken = 0

    def endless() -> Any:
        nonlocal taken
        while True:
            taken += 1
            yield 1.0

    with pytest.raises(st.ShapeError, match=r"needs 70000 values, found more than 70000"):
        st.Tensor.from_scalars(D.F32, (70_000,), endless())
    assert taken == 70_001
    with pytest.raises(st.ShapeError, match=r"needs 70000 values, found 69999"):
        st.Tensor.from_scalars(D.F32, (700, 100), iter([1.0] * 69_999))
    made = st.Tensor.from_scalars(D.I64, (7, 10_000), iter(range(70_000)))
    assert made.tolist() == np.arange(70_000).reshape(7, 10_000).tolist()


def test_from_scalars_keeps_only_a_block_of_its_iterable() -> None:
    """A generator of fresh floats: the values are converted as they come, not listed."""
    count = 1 << 20
    tracemalloc.start()
    try:
        made = st.Tensor.from_scalars(D.F32, (count,), (float(i) for i in range(count)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert made.tolist() == [float(i) for i in range(count)]
    # Listing the 2**20 floats first (as before) peaked at 9x the 4 MiB result; block by
    # block it is the result plus one block's temporaries (about 2x).
    assert peak <= 3 * made.byte_len
