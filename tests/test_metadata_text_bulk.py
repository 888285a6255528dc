"""The metadata digest of a big vocabulary: bulk paths that write exactly the definition.

A 262,144-token tokenizer's canonical text is megabytes of JSON, full of escapes. The
bulk paths (orjson for strings and ints, vectorized float texts, escaping by
``str.replace``) must give the text the definition gives: ``json.dumps(...,
ensure_ascii=False, separators=(",", ":"))`` of the elements' texts, then ``\\``,
newline and tab escaped. Expected digests are recomputed here with ``json``,
``hashlib`` and NumPy's shortest F32 digits, from files ``gguf.GGUFWriter`` wrote.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided._kernels.bulk_format import json_int_texts, json_strings
from strided._kernels.digest import escape_name
from strided.jobs._metadata_text import canonical, metadata_digest
from tests.test_metadata_types import shortest

COMPACT = {"ensure_ascii": False, "separators": (",", ":")}


def reference_escape(text: str) -> str:
    """The definition, one character at a time."""
    table = {"\\": "\\\\", "\n": "\\n", "\t": "\\t"}
    return "".join(table.get(char, char) for char in text)


def digest_of(texts: dict[str, str]) -> str:
    lines = "".join(
        f"{reference_escape(key)}\t{reference_escape(texts[key])}\n"
        for key in sorted(texts, key=lambda k: k.encode("utf-8", "surrogatepass"))
    )
    return hashlib.sha256(lines.encode("utf-8", "surrogatepass")).hexdigest()


# Any text, control characters, quotes, backslashes, U+2028 and astral characters
# included (GGUF strings are UTF-8: no lone surrogates).
TOKENS = hs.lists(hs.text(hs.characters(codec="utf-8"), max_size=12), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(text=hs.text(hs.characters(), max_size=200))
def test_escaping_equals_the_definition(text: str) -> None:
    assert escape_name(text) == reference_escape(text)


@settings(max_examples=80, deadline=None)
@given(
    items=hs.lists(
        hs.text(hs.characters() | hs.sampled_from(["\ud800", "\udcff"]), max_size=12), max_size=40
    )
)
def test_json_strings_equals_json_dumps(items: list[str]) -> None:
    """Lone surrogates included (orjson refuses them; json writes them as they are)."""
    assert json_strings(items) == json.dumps(items, **COMPACT)


def test_json_strings_of_every_character() -> None:
    characters = [chr(code) for code in range(0x110000)]
    assert json_strings(characters) == json.dumps(characters, **COMPACT)


@settings(max_examples=80, deadline=None)
@given(
    items=hs.lists(
        hs.integers(-(2**63), 2**64 - 1) | hs.integers(-(2**80), 2**80), min_size=1, max_size=40
    )
)
def test_json_int_texts_equals_the_texts_of_the_ints(items: list[int]) -> None:
    assert json_int_texts(items) == json.dumps([str(item) for item in items], **COMPACT)


def _write(path: Path, tokens: list[str], scores: list[float], types: list[int]) -> None:
    writer = GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_tensor("token_embd.weight", np.zeros((2, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _expected(tokens: list[str], scores: list[float], types: list[int]) -> dict[str, str]:
    return {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": json.dumps(tokens, **COMPACT),
        "tokenizer.ggml.scores": json.dumps([shortest(np.float32(x)) for x in scores], **COMPACT),
        "tokenizer.ggml.token_type": json.dumps([str(t) for t in types], **COMPACT),
    }


@settings(max_examples=30, deadline=None)
@given(
    tokens=TOKENS,
    bits=hs.lists(hs.integers(0, 2**32 - 1), min_size=1, max_size=60),
    types=hs.lists(hs.integers(-(2**31), 2**31 - 1), min_size=1, max_size=60),
)
def test_a_vocabulary_digests_to_the_definition(
    tmp_path_factory: pytest.TempPathFactory, tokens: list[str], bits: list[int], types: list[int]
) -> None:
    scores = np.array(bits, dtype=np.uint32).view(np.float32).tolist()
    path = tmp_path_factory.mktemp("v") / "v.gguf"
    _write(path, tokens, scores, types)
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata_digest() == digest_of(_expected(tokens, scores, types))


def _python_calls(work: Callable[[], object]) -> int:
    """How many Python-level function calls (and generator resumptions) ``work`` makes:
    a measure of per-element Python work that does not depend on the machine's speed."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls


def test_a_262k_vocabulary_digests_to_the_definition(tmp_path: Path) -> None:
    """The size the bulk paths are for, with the tokens real vocabularies hold; the
    digest makes no Python call per token or per character (it once stepped through
    the escaped JSON text one character at a time: millions of generator steps)."""
    endings = ["", "\n", "\t", '"', "\\", "\x00", "\u2028", "é", "日本", "\U0001f600"]
    count = 262_144
    tokens = [f"\u2581t{i}{endings[i % len(endings)]}" for i in range(count)]
    scores = np.random.default_rng(0).standard_normal(count).astype(np.float32).tolist()
    types = [1 + i % 6 for i in range(count)]
    path = tmp_path / "vocab.gguf"
    _write(path, tokens, scores, types)
    expected = _expected(tokens, scores, types)
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata_digest() == digest_of(expected)
        assert _python_calls(checkpoint.metadata_digest) < 5_000


def test_mixed_and_huge_lists_take_the_exact_path() -> None:
    values = [1, "a", 2**70, True, None, 0.5, [1, "b\n"]]
    expected = json.dumps(["1", "a", str(2**70), "true", "null", "0.5", '["1","b\\n"]'], **COMPACT)
    assert canonical(values) == expected
    assert canonical([2**64, -1]) == json.dumps([str(2**64), "-1"], **COMPACT)
    assert canonical(["\ud800x", "y"]) == json.dumps(["\ud800x", "y"], **COMPACT)
    texts = {"k": canonical(["\ud800x"])}
    assert metadata_digest({"k": ["\ud800x"]}) == digest_of(texts)
    assert canonical([]) == "[]" and canonical(()) == "[]"
