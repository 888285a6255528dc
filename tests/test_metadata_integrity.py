"""Metadata is part of the checkpoint: hash, verify, diff and convert never drop or ignore
a tokenizer.

GGUF files are written by the reference ``gguf.GGUFWriter``; every expected canonical
text and digest is recomputed here from the definition with ``hashlib``, ``json`` and
NumPy's shortest F32 digits (rendered in Python's ``repr`` layout), never by strided.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors
from gguf import GGUFValueType as T
from gguf import GGUFWriter
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli import main
from strided.jobs._metadata_text import canonical, metadata_digest
from tests.gguf_oracle import read_kvs

Entry = tuple[str, Any, T, T | None]

# -- the definition, recomputed -------------------------------------------------------------


def f32_text(value: float) -> str:
    """F32's shortest round-trip digits (NumPy's Dragon4) in Python's repr layout."""
    x = np.float32(value)
    if np.isnan(x):
        return "nan"
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0.0" if np.signbit(x) else "0.0"
    mantissa, exponent = np.format_float_scientific(abs(x), unique=True, trim="-").split("e")
    digits, exp = mantissa.replace(".", ""), int(exponent)
    if -4 <= exp < 16:
        if exp >= len(digits) - 1:
            body = digits + "0" * (exp - len(digits) + 1) + ".0"
        elif exp >= 0:
            body = digits[: exp + 1] + "." + digits[exp + 1 :]
        else:
            body = "0." + "0" * (-exp - 1) + digits
    else:
        fraction = "." + digits[1:] if len(digits) > 1 else ""
        body = f"{digits[0]}{fraction}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return ("-" if x < 0 else "") + body


def text_of(value: Any, kind: T, sub: T | None = None) -> str:
    if kind is T.ARRAY:
        assert sub is not None
        items = [text_of(item, sub) for item in value]
        return json.dumps(items, ensure_ascii=False, separators=(",", ":"))
    if kind is T.STRING:
        return str(value)
    if kind is T.BOOL:
        return "true" if value else "false"
    if kind is T.FLOAT32:
        return f32_text(value)
    if kind is T.FLOAT64:
        return repr(float(value))
    return str(int(value))


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")


def digest(texts: dict[str, str]) -> str:
    lines = "".join(f"{escape(k)}\t{escape(texts[k])}\n" for k in sorted(texts, key=str.encode))
    return hashlib.sha256(lines.encode()).hexdigest()


def expected_texts(entries: Sequence[Entry]) -> dict[str, str]:
    texts = {"general.architecture": "llama"}  # the writer adds it
    for key, value, kind, sub in entries:
        if key != "general.alignment" and not key.startswith("split."):
            texts[key] = text_of(value, kind, sub)
    return texts


# -- files ----------------------------------------------------------------------------------

SPECIALS = ["!", '"', "\\", "\n", "\t", "Ġthe", "<|im_start|>", "<0x0A>", "ü", "😀", ""]
VOCAB = SPECIALS + [f"▁t{i}" for i in range(100_000 - len(SPECIALS))]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)
SCORES = [float(np.float32(-i / 7)) for i in range(len(VOCAB))]


def every_type() -> list[Entry]:
    return [
        ("t.u8", 255, T.UINT8, None),
        ("t.i8", -128, T.INT8, None),
        ("t.u16", 65535, T.UINT16, None),
        ("t.i16", -32768, T.INT16, None),
        ("llama.context_length", 4096, T.UINT32, None),
        ("t.i32", -(2**31), T.INT32, None),
        ("t.u64", 2**64 - 1, T.UINT64, None),
        ("t.i64", -(2**63), T.INT64, None),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5, T.FLOAT32, None),
        ("t.f64", 0.1, T.FLOAT64, None),
        ("t.bool", True, T.BOOL, None),
        ("t.str", "tab\there\nnew \\ line ü 😀", T.STRING, None),
        ("tokenizer.chat_template", TEMPLATE, T.STRING, None),
        ("t.strs", ["a", "", '"q"', "ü"], T.ARRAY, T.STRING),
        ("t.i32s", [1, -2, 3], T.ARRAY, T.INT32),
        ("t.f32s", [0.1, -0.0, 3.3, math.inf, math.nan, 1e-7, 1e20], T.ARRAY, T.FLOAT32),
        ("t.f64s", [0.1, 1e300, -0.0], T.ARRAY, T.FLOAT64),
        ("t.bools", [True, False], T.ARRAY, T.BOOL),
        ("tokenizer.ggml.tokens", VOCAB, T.ARRAY, T.STRING),
        ("tokenizer.ggml.scores", SCORES, T.ARRAY, T.FLOAT32),
        ("tokenizer.ggml.token_type", [1 + i % 3 for i in range(len(VOCAB))], T.ARRAY, T.INT32),
        ("tokenizer.ggml.merges", ["▁ t", "t 1", "Ġ the"], T.ARRAY, T.STRING),
    ]


WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4) / 3


def write_gguf(
    path: Path, entries: Sequence[Entry], tensors: dict[str, np.ndarray] | None = None
) -> Path:
    writer = GGUFWriter(str(path), "llama")
    for key, value, kind, sub in entries:
        if key == "general.alignment":
            writer.add_custom_alignment(value)
        else:
            writer.add_key_value(key, value, kind, sub)
    for name, array in ({"token_embd.weight": WEIGHT} if tensors is None else tensors).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def changed(entries: list[Entry], key: str, value: Any) -> list[Entry]:
    return [(k, value if k == key else v, kind, sub) for k, v, kind, sub in entries]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capsys.readouterr().out


def diff_json(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> tuple[int, dict[str, Any]]:
    status, out = cli(capsys, "diff", str(a), str(b), "--json")
    document = json.loads(out)
    assert document["same"] == (status == 0)
    return status, document


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    return write_gguf(folder / "model.gguf", every_type())


# -- the digest -----------------------------------------------------------------------------


def test_digest_of_no_metadata_and_of_a_small_dict() -> None:
    assert metadata_digest({}) == hashlib.sha256(b"").hexdigest()
    small = {
        "name": "a\tb",
        "layers": 32,
        "lr": 0.1,
        "flag": False,
        "none": None,
        "shape": (2, 4),
        "blob": b"\x00\xff",
        "nested": {"z": [1.5], "ä": "x", "a": np.float32(0.1)},
        "half": np.float16(0.1),
        "new\nkey": [["a"], "b"],
        "format": "pt",  # left out, as general.alignment and split.* are
        "general.alignment": 32,
        "split.count": 3,
    }
    # KEY<tab>CANONICAL<newline>, with \\, newline and tab escaped in both (so the
    # backslashes of JSON text inside a value are doubled).
    lines = "".join(
        [
            "blob\tb64:AP8=\n",
            "flag\tfalse\n",
            "half\t0.1\n",
            "layers\t32\n",
            "lr\t0.1\n",
            r"name" "\t" r"a\tb" "\n",
            r"nested" "\t" r'{"a":"0.1","z":"[\\"1.5\\"]","ä":"x"}' "\n",
            r"new\nkey" "\t" r'["[\\"a\\"]","b"]' "\n",
            "none\tnull\n",
            'shape\t["2","4"]\n',
        ]
    )
    assert metadata_digest(small) == hashlib.sha256(lines.encode()).hexdigest()


def test_canonical_text_keeps_the_stored_float_type() -> None:
    assert canonical(float(np.float32(1e-5))) == "9.999999747378752e-06"  # a Python float: F64
    assert canonical(float(np.float32(1e-5)), st.DType.F32) == "1e-05"
    assert canonical(np.float32(1e-5)) == "1e-05"
    assert canonical(np.float16(0.1)) == "0.1" and canonical(np.float64(0.1)) == "0.1"
    assert canonical([float(np.float32(0.1)), float(np.float32(-0.0))], st.DType.F32) == (
        '["0.1","-0.0"]'
    )
    assert canonical(np.uint64(2**64 - 1)) == str(2**64 - 1) and canonical(np.bool_(1)) == "true"
    assert canonical(["ü", "😀"]) == '["ü","😀"]'  # not \\u escapes


def test_gguf_of_every_type_digests_to_the_definition(model: Path) -> None:
    texts = expected_texts(every_type())
    assert texts["llama.attention.layer_norm_rms_epsilon"] == "1e-05"
    assert texts["t.f32s"] == '["0.1","-0.0","3.3","inf","nan","1e-07","1e+20"]'
    with st.open_checkpoint(model) as checkpoint:
        assert checkpoint.metadata_digest() == digest(texts)
        assert checkpoint.digest() != hashlib.sha256(b"").hexdigest()


F32_BITS = hs.integers(0, 2**32 - 1).map(lambda b: float(np.uint32(b).view(np.float32)))
KEYS = hs.text(hs.characters(codec="utf-8"), min_size=1, max_size=12).filter(
    lambda k: k != "format" and not k.startswith("split.") and k != "general.architecture"
)


@settings(max_examples=30, deadline=None)
@given(
    f32=hs.lists(F32_BITS, min_size=1, max_size=40),
    f64=hs.lists(hs.floats(), min_size=1, max_size=10),
    strings=hs.lists(hs.text(hs.characters(codec="utf-8"), max_size=8), min_size=1, max_size=8),
    keys=hs.lists(KEYS, min_size=5, max_size=5, unique=True),
)
def test_any_values_and_keys_digest_to_the_definition(
    tmp_path_factory: pytest.TempPathFactory,
    f32: list[float],
    f64: list[float],
    strings: list[str],
    keys: list[str],
) -> None:
    entries: list[Entry] = [
        (keys[0], f32, T.ARRAY, T.FLOAT32),
        (keys[1], f32[0], T.FLOAT32, None),
        (keys[2], f64, T.ARRAY, T.FLOAT64),
        (keys[3], strings, T.ARRAY, T.STRING),
        (keys[4], strings[0] or "x", T.STRING, None),
    ]
    path = write_gguf(tmp_path_factory.mktemp("any") / "any.gguf", entries)
    with st.open_checkpoint(path) as checkpoint:
        assert checkpoint.metadata_digest() == digest(expected_texts(entries))


# -- diff -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "index"),
    [
        ("tokenizer.ggml.tokens", [*VOCAB[:777], "▁swapped", *VOCAB[778:]], 777),
        ("tokenizer.chat_template", TEMPLATE.replace("<|im_end|>", "<|end|>"), None),
        ("llama.context_length", 4097, None),
    ],
)
def test_diff_names_the_one_changed_key(
    model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: Any,
    index: int | None,
) -> None:
    other = write_gguf(tmp_path / "other.gguf", changed(every_type(), key, value))
    status, document = diff_json(capsys, model, other)
    assert status == 1
    assert document["tensors"]["token_embd.weight"]["status"] == "identical"
    statuses = {k: entry["status"] for k, entry in document["metadata"].items()}
    assert statuses == {k: "differs" if k == key else "equal" for k in expected_texts(every_type())}
    entry = document["metadata"][key]
    if index is not None:
        assert entry["index"] == index and entry["items"] == {"a": 100_000, "b": 100_000}
        assert entry["first"] == {"a": VOCAB[777], "b": "▁swapped"}
    elif isinstance(value, str):
        assert entry["offset"] == TEMPLATE.index("<|im_end|>") + len("<|")
    else:
        assert (entry["a"], entry["b"]) == ("4096", "4097")
    status, out = cli(capsys, "diff", str(model), str(other))
    assert status == 1
    line = next(line for line in out.splitlines() if line.startswith("metadata differs"))
    assert key in line
    assert out.splitlines()[-1].endswith("metadata differs, tensors match")
    status, out = cli(capsys, "diff", str(model), str(other), "--ignore-metadata")
    assert status == 0 and out.splitlines()[-1].endswith("tensors match (metadata not compared)")


def test_vocabularies_of_different_sizes_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Vocabulary-only files (no tensors), as tokenizer GGUFs are shipped.
    big = [f"t{i}" for i in range(151_936)]
    a = write_gguf(tmp_path / "a.gguf", [("tokenizer.ggml.tokens", big, T.ARRAY, T.STRING)], {})
    small = [("tokenizer.ggml.tokens", big[:50_257], T.ARRAY, T.STRING)]
    b = write_gguf(tmp_path / "b.gguf", small, {})
    status, out = cli(capsys, "diff", str(a), str(b))
    assert status == 1
    assert "151,936 vs 50,257 items" in out and "the checkpoints match" not in out
    digests = []
    for path in (a, b):
        status, out = cli(capsys, "hash", str(path))
        lines = out.splitlines()
        assert lines[-1] == f"{hashlib.sha256(b'').hexdigest()}  *checkpoint*"  # no tensors
        digests.append(lines[-2])
    assert digests[0] != digests[1]
    texts = {
        "general.architecture": "llama",
        "tokenizer.ggml.tokens": text_of(big, T.ARRAY, T.STRING),
    }
    assert digests[0] == f"{digest(texts)}  *metadata*"


def test_a_change_of_type_is_reported_between_ggufs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write_gguf(tmp_path / "a.gguf", [("n", 4096, T.UINT32, None)])
    b = write_gguf(tmp_path / "b.gguf", [("n", "4096", T.STRING, None)])
    # The canonical text records no type: the digests agree by design ...
    assert st.open_checkpoint(a).metadata_digest() == st.open_checkpoint(b).metadata_digest()
    # ... and diff, seeing both stored types, says what changed.
    status, document = diff_json(capsys, a, b)
    assert status == 1
    assert document["metadata"]["n"] == {
        "status": "type differs",
        "a": "4096",
        "b": "4096",
        "offset": 4,
        "types": {"a": "UINT32", "b": "STRING"},
    }
    status, out = cli(capsys, "diff", str(a), str(b))
    assert any(line.startswith("metadata type differs  n ") for line in out.splitlines())
    assert "UINT32 vs STRING" in out


def test_file_layout_keys_are_never_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = {"w": st.Tensor.from_numpy(WEIGHT)}
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    extra = {"format": "pt", "general.alignment": "32", "split.count": "3", "split.no": "0"}
    st.save_safetensors(a, tensors, metadata={"k": "v", **extra})
    st.save_safetensors(b, tensors, metadata={"k": "v", "format": "tf"})
    for path in (a, b):
        assert st.open_checkpoint(path).metadata_digest() == digest({"k": "v"})
    status, document = diff_json(capsys, a, b)
    assert status == 0 and document["metadata"] == {"k": {"status": "equal"}}
    status, out = cli(capsys, "diff", str(a), str(b))
    assert out.splitlines()[-1].endswith("1 metadata key: 1 equal: tensors and metadata match")


# -- convert --------------------------------------------------------------------------------


def test_gguf_to_safetensors_keeps_every_key(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aligned = write_gguf(tmp_path / "aligned.gguf", [*every_type(), ("general.alignment", 64,
                         T.UINT32, None)])  # fmt: skip
    out = tmp_path / "model.safetensors"
    status, _ = cli(capsys, "convert", str(aligned), str(out))
    assert status == 0
    with safetensors.safe_open(str(out), "np") as reference:
        written = reference.metadata()
    types = json.loads(written.pop("__gguf_types__"))  # the record a GGUF output restores
    assert written == {**expected_texts(every_type()), "format": "pt"}
    assert types == {key: kind for key, kind, _ in read_kvs(aligned) if key in written
                     and kind != "STRING"}  # fmt: skip
    assert json.loads(written["tokenizer.ggml.tokens"]) == VOCAB
    assert json.loads(written["tokenizer.ggml.scores"]) == [f32_text(x) for x in SCORES]
    # Source and output: equal metadata digests, and diff compares and matches it.
    documents = [json.loads(cli(capsys, "hash", str(p), "--json")[1]) for p in (aligned, out)]
    assert documents[0]["metadata_digest"] == documents[1]["metadata_digest"]
    assert documents[0]["metadata_digest"] == digest(expected_texts(every_type()))
    status, text = cli(capsys, "diff", str(aligned), str(out))
    assert status == 0, text
    assert text.splitlines()[-1].endswith(
        f"{len(expected_texts(every_type()))} metadata keys: "
        f"{len(expected_texts(every_type()))} equal: tensors and metadata match"
    )
    # One value rewritten: the digests and diff tell the files apart.
    edited = write_gguf(tmp_path / "edited.gguf", changed(every_type(), "t.u8", 254))
    edited_digest = json.loads(cli(capsys, "hash", str(edited), "--json")[1])["metadata_digest"]
    assert edited_digest != documents[1]["metadata_digest"]
    status, document = diff_json(capsys, edited, out)
    assert status == 1 and document["metadata"]["t.u8"]["status"] == "differs"


def test_pytorch_and_npz_sources_keep_the_same_canonical_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = pytest.importorskip("torch")
    source = tmp_path / "ckpt.pt"
    torch.save(
        {
            "model": {"w": torch.arange(6, dtype=torch.float32)},
            "epoch": 3,
            "lr": 0.1,
            "note": None,
            "shape": torch.Size([2, 4]),
            "flag": True,
            "name": "run\t1",
        },
        source,
    )
    texts = {"epoch": "3", "lr": "0.1", "note": "null", "shape": '["2","4"]', "flag": "true",
             "name": "run\t1"}  # fmt: skip
    assert st.open_checkpoint(source).metadata_digest() == digest(texts)
    out = tmp_path / "ckpt.safetensors"
    assert cli(capsys, "convert", str(source), str(out))[0] == 0
    with safetensors.safe_open(str(out), "np") as reference:
        assert reference.metadata() == {**texts, "format": "pt"}
    status, text = cli(capsys, "diff", str(source), str(out))
    assert status == 0 and text.splitlines()[-1].endswith("tensors and metadata match")
    npz = tmp_path / "x.npz"
    np.savez(npz, w=np.arange(6, dtype=np.float32))
    assert cli(capsys, "convert", str(npz), str(tmp_path / "x.safetensors"))[0] == 0
    with safetensors.safe_open(str(tmp_path / "x.safetensors"), "np") as reference:
        assert reference.metadata() == {"format": "pt"}


# -- hash and verify ------------------------------------------------------------------------


def test_manifest_catches_a_changed_key(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "model.gguf"
    target.write_bytes(model.read_bytes())
    manifests = {}
    for form in ("text", "json"):
        _, manifests[form] = cli(
            capsys, "hash", str(target), *(["--json"] if form == "json" else [])
        )
    lines = manifests["text"].splitlines()
    assert lines[-2] == f"{digest(expected_texts(every_type()))}  *metadata*"
    write_gguf(target, changed(every_type(), "tokenizer.chat_template", TEMPLATE + " "))
    for form, text in manifests.items():
        manifest = tmp_path / f"manifest.{form}"
        manifest.write_text(text)
        status, out = cli(capsys, "verify", str(target), "--manifest", str(manifest))
        assert status == 1, form
        assert "metadata: digest differs from the manifest" in out
        assert out.splitlines()[-1].endswith(": metadata digest differs")  # tensors are fine


def test_an_old_manifest_checks_tensors_and_says_metadata_was_not_checked(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "model.gguf"
    target.write_bytes(model.read_bytes())
    _, text = cli(capsys, "hash", str(target))
    _, document = cli(capsys, "hash", str(target), "--json")
    # What strided wrote before metadata was digested: tensor lines, then DIGEST  PATH.
    *tensor_lines, _, last = text.splitlines()
    old_text = "\n".join([*tensor_lines, last.replace("*checkpoint*", str(target))]) + "\n"
    old_json = json.loads(document)
    del old_json["metadata_digest"]
    for name, old in (("old.txt", old_text), ("old.json", json.dumps(old_json))):
        manifest = tmp_path / name
        manifest.write_text(old)
        write_gguf(target, changed(every_type(), "t.u8", 1))  # metadata changed: unseen
        status, out = cli(capsys, "verify", str(target), "--manifest", str(manifest))
        assert status == 0, out
        assert "metadata not checked" in out
        assert out.splitlines()[-1].endswith("clean, digests match (metadata not checked)")
        write_gguf(target, every_type(), {"token_embd.weight": WEIGHT + 1})  # a tensor changed
        status, out = cli(capsys, "verify", str(target), "--manifest", str(manifest))
        assert status == 1 and "token_embd.weight: digest differs from the manifest" in out


def test_names_starting_with_a_star_never_read_as_the_digest_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "stars.safetensors"
    arrays = {"*metadata*": np.ones(2, np.float32), "*checkpoint*": np.zeros(1, np.int64),
              "*x": np.arange(3, dtype=np.uint8)}  # fmt: skip
    st.save_safetensors(path, {k: st.Tensor.from_numpy(v) for k, v in arrays.items()},
                        metadata={"k": "v"})  # fmt: skip
    status, text = cli(capsys, "hash", str(path))
    lines = text.splitlines()
    assert [line.startswith("\\") for line in lines] == [True, True, True, False, False]
    assert [line.split("  ", 1)[1] for line in lines] == [
        "*checkpoint*", "*metadata*", "*x", "*metadata*", "*checkpoint*"
    ]  # fmt: skip
    manifest = tmp_path / "manifest"
    manifest.write_text(text)
    status, out = cli(capsys, "verify", str(path), "--manifest", str(manifest))
    assert status == 0 and out.splitlines()[-1].endswith("clean, digests match"), out
    st.save_safetensors(path, {k: st.Tensor.from_numpy(v) for k, v in arrays.items()},
                        metadata={"k": "w"})  # fmt: skip
    status, out = cli(capsys, "verify", str(path), "--manifest", str(manifest))
    assert status == 1 and "metadata digest differs" in out
