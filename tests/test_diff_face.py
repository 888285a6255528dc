"""``strided.diff``, the Python face of ``strided diff``: the same report as the command.

Every case runs the command (``--json`` and the table) and the function on the same
files: ``report.to_json()`` is the command's JSON, ``report.lines()`` its table, and
``report.ok`` its exit status. The table's metadata texts are cut from the report's
(``table_text``), checked against cutting the full text (``shorten``) with Hypothesis.
"""

from __future__ import annotations

import doctest
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from gguf import GGUFValueType as T
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from strided.io import _http
from strided.jobs._diff import shorten
from strided.jobs._diff_report import JSON_TEXT, TABLE_TEXT, table_text
from tests.gguf_oracle import write_reference
from tests.httpserver import FileServer
from tests.test_unreadable_jobs import sparse_like


def save(path: Path, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> Path:
    safetensors.numpy.save_file(arrays, str(path), metadata=metadata)
    return path


def both(
    capsys: pytest.CaptureFixture[str], a: Path, b: Path, options: list[str], **keywords: Any
) -> st.DiffReport:
    """The function's report, checked against the command's JSON, table and status."""
    report = st.diff(a, b, **keywords)
    status = main(["diff", str(a), str(b), "--json", *options])
    out = capsys.readouterr().out
    assert out == report.to_json() + "\n"
    assert report.ok == report.same == (status == 0)
    assert report.same == json.loads(out)["same"]
    status = main(["diff", str(a), str(b), *options])
    out = capsys.readouterr().out
    assert out == "".join(f"{line}\n" for line in report.lines(str(a), str(b)))
    assert report.ok == (status == 0)
    return report


LONG = "".join(chr(0x41 + i % 26) for i in range(700))


def pairs(tmp: Path) -> dict[str, tuple[Path, Path]]:
    """Pairs of checkpoints that exercise every status and every metadata shape."""
    w = (np.arange(12, dtype=np.float32) / 4).reshape(3, 4)  # exact in F16 too
    changed = w.copy()
    changed[2, 1] = 7.0
    found = {
        "identical": (
            save(tmp / "i1.safetensors", {"w": w}, {"k": "v"}),
            save(tmp / "i2.safetensors", {"w": w}, {"k": "v"}),
        ),
        "statuses": (
            save(tmp / "s1.safetensors", {"w": w, "h": w, "a": w, "s": w, "k": w}),
            save(
                tmp / "s2.safetensors",
                {
                    "w": changed,
                    "h": w.astype(np.float16),
                    "b": w,
                    "s": w.T.copy(),
                    "k": np.ones((3, 4), np.int32),
                },
            ),
        ),
        "infinite": (
            save(tmp / "f1.safetensors", {"x": np.array([np.inf, 1.0], np.float64)}),
            save(tmp / "f2.safetensors", {"x": np.array([1.0, 1.0], np.float64)}),
        ),
        "metadata": (
            save(
                tmp / "m1.safetensors",
                {"w": w},
                {
                    "short": "a",
                    "mid": LONG[:150],
                    "long": LONG,
                    "late": LONG,
                    "gone": LONG[:300],
                    "same": "x",
                    "\x1bescape": "\x1b[31m",
                },
            ),
            save(
                tmp / "m2.safetensors",
                {"w": w},
                {
                    "short": "b",
                    "mid": LONG[:149] + "!",
                    "long": LONG[:350] + "?" + LONG[351:],
                    "late": LONG[:690] + "?" + LONG[691:],
                    "new": LONG[5:250],
                    "same": "x",
                },
            ),
        ),
    }
    gguf_a, gguf_b = tmp / "g1.gguf", tmp / "g2.gguf"
    write_reference(gguf_a, [("tokenizer.ggml.tokens", ["a", LONG, "c"], T.ARRAY, T.STRING),
                             ("n", 3, T.UINT32, None)], {"w": w})  # fmt: skip
    write_reference(gguf_b, [("tokenizer.ggml.tokens", ["a", LONG + "!", "c", "d"], T.ARRAY,
                              T.STRING), ("n", 3, T.INT32, None)], {"w": changed})  # fmt: skip
    found["gguf"] = (gguf_a, gguf_b)
    found["formats"] = (gguf_a, save(tmp / "x.safetensors", {"w": w}))
    return found


CASES: list[tuple[str, list[str], dict[str, Any]]] = [
    ("identical", [], {}),
    ("statuses", [], {}),
    ("statuses", ["--atol", "6.5"], {"atol": "6.5"}),
    ("statuses", ["--atol", "6.5"], {"atol": 6.5}),
    ("statuses", ["--rtol", "0.1", "--ulp", "3"], {"rtol": 0.1, "ulp": 3}),
    ("statuses", ["--name", "[hw]"], {"names": "[hw]"}),
    ("statuses", ["--jobs", "2"], {"jobs": 2}),
    ("infinite", [], {}),
    ("metadata", [], {}),
    ("metadata", ["--ignore-metadata"], {"ignore_metadata": True}),
    ("gguf", [], {}),
    ("formats", [], {}),
]


@pytest.mark.parametrize(("case", "options", "keywords"), CASES)
def test_the_function_reports_what_the_command_prints(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    options: list[str],
    keywords: dict[str, Any],
) -> None:
    a, b = pairs(tmp_path)[case]
    report = both(capsys, a, b, options, **keywords)
    assert report.same == (case == "identical" or "ignore_metadata" in keywords)
    if case == "statuses":
        statuses = {name: entry["status"] for name, entry in report.tensors.items()}
        expected = {
            "a": "only in A",
            "b": "only in B",
            "h": "equal",
            "k": "kind differs",
            "s": "shape differs",
            "w": "equal" if keywords.get("atol") else "differs",
        }
        assert statuses == {name: expected[name] for name in statuses}  # fmt: skip
    if case == "infinite":
        assert report.tensors["x"]["max_abs"] == math.inf
    if case == "metadata" and not keywords:
        assert report.metadata is not None
        assert report.metadata["long"]["offset"] == 350
        assert len(report.metadata["long"]["a"]) > JSON_TEXT


def test_the_table_is_the_command_s_on_a_pair_with_every_kind_of_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = pairs(tmp_path)["metadata"]
    lines = st.diff(a, b).lines(str(a), str(b))
    assert lines[:2] == [f"A: {a}", f"B: {b}"]
    long_row = next(line for line in lines if "  long  " in line)
    assert "first difference at character 350" in long_row and "(700 characters)" in long_row
    assert not any("\x1b" in line for line in lines)  # escaped, as the command prints it


@settings(max_examples=300, deadline=None)
@given(
    hs.text(alphabet=hs.sampled_from("ab… (),0123456789c"), max_size=4 * JSON_TEXT),
    hs.integers(min_value=0, max_value=4 * JSON_TEXT),
)
def test_the_table_text_is_the_full_text_cut_to_the_table_s_length(text: str, at: int) -> None:
    at = min(at, len(text))
    assert table_text(shorten(text, JSON_TEXT, at), at) == shorten(text, TABLE_TEXT, at)


def test_skipped_unreadable_members_are_reported_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = sparse_like(tmp_path / "a.npz", np.savez)
    b = sparse_like(tmp_path / "b.npz", np.savez, note=2)
    report = both(capsys, a, b, ["--skip-unreadable"], skip_unreadable=True)
    assert {name: entry["status"] for name, entry in report.unreadable.items()} == {
        "format": "identical",
        "obj": "differs",
    }
    assert not report.ok
    main(["diff", str(a), str(b), "--skip-unreadable"])
    assert capsys.readouterr().err.count("skipped unreadable member") == 4


def test_unreadable_members_without_skipping_are_a_format_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = sparse_like(tmp_path / "a.npz", np.savez)
    with pytest.raises(st.FormatError, match="skip_unreadable=True"):
        st.diff(a, a)
    assert main(["diff", str(a), str(a)]) == 1


def bad_file(tmp: Path) -> Path:
    path = tmp / "bad.safetensors"
    path.write_bytes((16).to_bytes(8, "little") + b'{"w": [1, 2]}   ')
    return path


ERRORS: list[tuple[Callable[[Path], tuple[Path, Path]], list[str], dict[str, Any], type]] = [
    (lambda tmp: (tmp / "missing.safetensors", tmp / "a.safetensors"), [], {}, FileNotFoundError),
    (lambda tmp: (tmp / "a.safetensors", bad_file(tmp)), [], {}, st.FormatError),
]


@pytest.mark.parametrize(("files", "options", "keywords", "error"), ERRORS)
def test_bad_input_raises_the_typed_error_the_command_reports(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: Callable[[Path], tuple[Path, Path]],
    options: list[str],
    keywords: dict[str, Any],
    error: type,
) -> None:
    save(tmp_path / "a.safetensors", {"w": np.ones(2, np.float32)})
    a, b = files(tmp_path)
    with pytest.raises(error):
        st.diff(a, b, **keywords)
    assert main(["diff", str(a), str(b), *options]) == 2
    assert capsys.readouterr().err.startswith("strided: ")


@pytest.mark.parametrize(
    ("keywords", "error"),
    [
        ({"atol": "abc"}, st.FormatError),
        ({"atol": "-1"}, st.RangeError),
        ({"rtol": math.nan}, st.RangeError),
        ({"rtol": "inf"}, st.RangeError),
        ({"atol": 10**400}, st.RangeError),
        ({"atol": True}, st.FormatError),
        ({"ulp": -1}, st.RangeError),
        ({"ulp": 1.0}, st.FormatError),
        ({"jobs": 0}, st.LimitError),  # as st.hash and st.verify: one check of workers
        ({"jobs": 1025}, st.LimitError),
        ({"jobs": 2, "scheduler": "local:2"}, st.FormatError),
    ],
)
def test_options_out_of_range_are_typed_errors(
    tmp_path: Path, keywords: dict[str, Any], error: type
) -> None:
    a = save(tmp_path / "a.safetensors", {"w": np.ones(2, np.float32)})
    with pytest.raises(error):
        st.diff(a, a, **keywords)


def test_the_docstring_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(st.diff, "diff", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_token_goes_to_the_url_s_origin_for_this_call_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_http.TOKENS_VARIABLE, raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    local = save(tmp_path / "w.safetensors", {"w": np.arange(8, dtype=np.float32)}, {"k": "v"})
    server = FileServer(tmp_path)
    try:
        url = server.url("w.safetensors")
        report = st.diff(url, local, token="s3cret", jobs=2)
        assert report.ok and report.tensors["w"]["status"] == "identical"
        assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer s3cret"}
        assert _http.TOKENS_VARIABLE not in os.environ  # forgotten after the call
        server.reset()
        status = main(["diff", url, str(local), "--json", "--token", "t0ken"])
        assert status == 0 and capsys.readouterr().out == report.to_json() + "\n"
        assert {headers.get("Authorization") for _, headers in server.requests} == {"Bearer t0ken"}
    finally:
        server.close()
