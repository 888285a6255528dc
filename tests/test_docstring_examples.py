"""The runnable examples in the public docstrings run, and show what they claim.

Each example is a doctest; a failed or missing example fails here, so the docstrings
a user reads (``help(st.open_checkpoint)``) stay true.
"""

from __future__ import annotations

import doctest
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import strided as st

EXAMPLES: list[tuple[str, Callable[..., Any] | type]] = [
    ("open_checkpoint", st.open_checkpoint),
    ("Checkpoint", st.Checkpoint),
    ("Tensor.astype", st.Tensor.astype),
    ("scan", st.scan),
    ("merge_lora", st.merge_lora),
    ("save", st.save),
    ("hash", st.hash),
    ("verify", st.verify),
    ("diff", st.diff),
    ("set_metadata", st.set_metadata),
]


@pytest.mark.parametrize(("name", "target"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_the_example_runs(
    name: str, target: Callable[..., Any] | type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # an example may write files where it runs
    finder = doctest.DocTestFinder(recurse=False)
    flags = doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL
    runner = doctest.DocTestRunner(optionflags=flags)
    tests = [test for test in finder.find(target, name, globs={}) if test.examples]
    assert tests, f"{name} has no example"
    for test in tests:
        runner.run(test, clear_globs=True)
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 3
