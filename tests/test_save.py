"""``st.save``, the one write door: the same bytes as ``strided convert`` / ``merge-lora``
for the same options, read back by the reference ``safetensors`` and ``gguf`` readers,
renames, refusals that leave nothing behind, every ``jobs``, bounded memory."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as hs

import strided as st
from strided.cli._merge_args import rename_rule
from strided.jobs import _save

from .httpserver import FileServer

ENV = {**os.environ, "PYTHONPATH": str(Path(st.__file__).resolve().parent.parent)}


def _source(path: Path) -> dict[str, np.ndarray]:
    """A small model with float, integer and BOOL tensors, GGUF-quantizable weights and
    a ``model.`` prefix, written by the reference safetensors writer with metadata."""
    rng = np.random.default_rng(7)
    arrays = {
        "model.layers.0.attn.weight": rng.standard_normal((8, 64)).astype(np.float32),
        "model.layers.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
        "model.layers.1.ffn.weight": rng.standard_normal((4, 32)).astype(np.float16),
        "model.embed.weight": rng.standard_normal((5, 32)).astype(np.float32),
        "model.ids": np.arange(-3, 4, dtype=np.int64),
        "model.mask": np.array([True, False, True]),
    }
    safetensors.numpy.save_file(arrays, str(path), metadata={"author": "me", "format": "pt"})
    return arrays


def _cli(*args: str) -> tuple[int, str, str]:
    found = subprocess.run(
        [sys.executable, "-m", "strided", *args], capture_output=True, text=True, timeout=300,
        env=ENV,
    )  # fmt: skip
    return found.returncode, found.stdout, found.stderr


def _tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (or ``path`` itself) by relative name, with its bytes."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


# (CLI options, st.save keywords, destination name)
CASES = [
    ([], {}, "a.safetensors"),
    (["--dtype", "BF16"], {"dtype": "BF16"}, "a.safetensors"),
    (["--dtype", "F64", "--name", "*weight"], {"dtype": st.DType.F64, "names": "*weight"},
     "a.safetensors"),
    (["--max-shard-size", "1KB"], {"max_shard_size": "1KB"}, "shards"),
    (["--max-shard-size", "100000"], {"max_shard_size": 100000}, "one"),
    (["--rename", r"^model\.=", "--rename", r"layers\.(\d+)=blk.\1"],
     {"rename": [(r"^model\.", ""), (r"layers\.(\d+)", r"blk.\1")]}, "a.safetensors"),
    # (BOOL has no ggml type: the mask is left out of GGUF)
    (["--dtype", "Q8_0", "--keep", "*ffn*", "--name", "*[!k]"],
     {"dtype": "Q8_0", "keep": "*ffn*", "names": "*[!k]"}, "a.gguf"),
    (["--dtype", "F16", "--max-shard-size", "2KB", "--name", "*[!k]"],
     {"dtype": "f16", "max_shard_size": 2000, "names": "*[!k]"}, "b.gguf"),
    (["--name", "model.ids"], {"names": "model.ids"}, "a.npy"),
    (["--name", "*attn.weight", "--dtype", "F16"], {"names": "*attn.weight", "dtype": "F16"},
     "a.json"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "keywords", "name"), CASES)
def test_save_writes_the_bytes_convert_writes(
    tmp_path: Path, options: list[str], keywords: dict[str, Any], name: str
) -> None:
    source = tmp_path / "src.safetensors"
    _source(source)
    (tmp_path / "cli").mkdir()
    (tmp_path / "py").mkdir()
    status, _, err = _cli("convert", str(source), str(tmp_path / "cli" / name), *options)
    assert status == 0, err
    report = st.save(tmp_path / "py" / name, str(source), **keywords)
    assert _tree(tmp_path / "py") == _tree(tmp_path / "cli")
    assert report.destination == str(tmp_path / "py" / name)
    assert sorted(report.files) == sorted(
        str(tmp_path / "py" / found) for found in _tree(tmp_path / "py")
    )
    assert report.format == {"npy": "npy", "json": "json", "gguf": "gguf"}.get(
        name.rsplit(".", 1)[-1], "safetensors"
    )


def test_safetensors_reader_reads_what_save_wrote_renamed_and_with_metadata(
    tmp_path: Path,
) -> None:
    arrays = _source(tmp_path / "src.safetensors")
    out = tmp_path / "out.safetensors"
    report = st.save(
        out, str(tmp_path / "src.safetensors"), rename=[(r"^model\.", "")],
        metadata={"author": "you", "license": "mit"},
    )  # fmt: skip
    assert report.tensors == len(arrays) and report.computed == 0 and report.skipped == ()
    loaded = safetensors.numpy.load_file(str(out))
    assert sorted(loaded) == sorted(name.removeprefix("model.") for name in arrays)
    for name, value in arrays.items():
        found = loaded[name.removeprefix("model.")]
        assert found.dtype == value.dtype and np.array_equal(found, value)
    with safetensors.safe_open(str(out), "np") as handle:
        assert handle.metadata() == {"author": "you", "license": "mit", "format": "pt"}


def test_gguf_reader_reads_what_save_wrote(tmp_path: Path) -> None:
    arrays = _source(tmp_path / "src.safetensors")
    out = tmp_path / "out.gguf"
    st.save(
        out, str(tmp_path / "src.safetensors"), dtype="Q8_0", names="*weight",
        rename=[(r"^model\.layers\.(\d+)\.", r"blk.\1."), (r"^model\.", "")],
        metadata={"general.architecture": "llama", "author": "you"},
    )  # fmt: skip
    reader = gguf.GGUFReader(str(out))
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    assert sorted(tensors) == [
        "blk.0.attn.weight", "blk.0.attn_norm.weight", "blk.1.ffn.weight", "embed.weight"
    ]  # fmt: skip
    attn = tensors["blk.0.attn.weight"]
    assert attn.tensor_type == gguf.GGMLQuantizationType.Q8_0
    expected = gguf.quants.quantize(arrays["model.layers.0.attn.weight"], attn.tensor_type)
    assert np.array_equal(np.asarray(attn.data).reshape(-1), expected.reshape(-1))
    norm = tensors["blk.0.attn_norm.weight"]
    assert norm.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(norm.data), arrays["model.layers.0.attn_norm.weight"])
    fields = reader.fields
    assert fields["author"].contents() == "you"  # replaced
    assert fields["general.architecture"].contents() == "llama"  # added
    assert fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0


def test_a_dcp_model_prefix_is_stripped_by_rename(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    pytest.importorskip("torch.distributed.checkpoint")
    from tests import dcpwrite

    folder = dcpwrite.cached(tmp_path_factory.getbasetemp(), "dcp-single", dcpwrite.write_single)
    out = tmp_path / "model.safetensors"
    st.save(out, str(folder), names="model.*", rename=[(r"^model\.", "")])
    loaded = safetensors.numpy.load_file(str(out))
    with st.open_checkpoint(str(folder)) as source:
        wanted = {name.removeprefix("model."): name for name in source if name.startswith("model.")}
        assert sorted(loaded) == sorted(wanted)
        for name, stored in wanted.items():
            tensor = source[stored]
            if tensor.dtype is st.DType.BF16:  # NumPy has no bfloat16: compare the bits
                assert loaded[name].tobytes() == tensor.numpy().tobytes()
            else:
                assert np.array_equal(loaded[name], tensor.numpy())


def test_rename_collisions_and_bad_regexes_are_refused_with_nothing_written(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src.safetensors"
    _source(source)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(st.FormatError, match=r"both become 'w'"):
        st.save(tmp_path / "o.safetensors", str(source), rename=[(r".*weight$", "w")])
    with pytest.raises(st.FormatError, match=r"does not compile"):
        st.save(tmp_path / "o.safetensors", str(source), rename=[("(", "x")])
    with pytest.raises(st.FormatError, match=r"becomes an empty name"):
        st.save(tmp_path / "o.gguf", str(source), names="model.ids", rename=[(".*", "")])
    with pytest.raises(st.FormatError, match=r"invalid group reference|cannot replace"):
        st.save(tmp_path / "o.gguf", str(source), rename=[("model", r"\3")])
    status, out, err = _cli(
        "convert", str(source), str(tmp_path / "o.gguf"), "--rename", r"\.\w+$=.x"
    )
    assert status == 1 and "both become" in err and out == ""
    status, _, err = _cli("convert", str(source), str(tmp_path / "o.safetensors"), "--rename", "(=")
    assert status == 2 and "does not compile" in err
    assert sorted(os.listdir(tmp_path)) == before


def test_rename_rule_splits_at_the_first_unescaped_equals() -> None:
    assert rename_rule(r"a\=b=c=d") == ("a=b", "c=d")
    assert rename_rule("x=") == ("x", "")
    assert rename_rule(r"(\d+)=<\1>") == (r"(\d+)", r"<\1>")


def test_cli_rename_names_with_equals(tmp_path: Path) -> None:
    source = tmp_path / "src.safetensors"
    safetensors.numpy.save_file({"k=1": np.ones(2, np.float32)}, str(source))
    out = tmp_path / "o.safetensors"
    status, _, err = _cli("convert", str(source), str(out), "--rename", r"k\=1=k\=2")
    assert status == 0, err
    assert list(safetensors.numpy.load_file(str(out))) == [r"k\=2"]  # REPLACEMENT is kept as is
    status, _, err = _cli(
        "convert", str(source), str(out), "--rename", r"k\=(\d)=k_\1", "--overwrite"
    )
    assert status == 0, err
    assert list(safetensors.numpy.load_file(str(out))) == ["k_1"]


@settings(max_examples=15, deadline=None)
@given(
    names=hs.lists(hs.from_regex(r"[a-c]{1,3}(\.[a-c0-9]{1,3}){0,2}", fullmatch=True),
                   min_size=1, max_size=6, unique=True),
    pattern=hs.sampled_from([r"a", r"^b", r"\.", r"(\w)\.(\w)", r"c$"]),
    replacement=hs.sampled_from(["", "x", r"\1", "a", "."]),
)  # fmt: skip
def test_rename_is_re_sub_or_a_collision(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], pattern: str, replacement: str
) -> None:
    import re

    folder = tmp_path_factory.mktemp("rename")
    tensors = {name: st.tensor([float(i)], "F32") for i, name in enumerate(names)}
    try:
        expected = [re.sub(pattern, replacement, name) for name in names]
    except re.error:
        with pytest.raises(st.FormatError):
            st.save(folder / "o.safetensors", tensors, rename=[(pattern, replacement)])
        assert not os.listdir(folder)
        return
    if len(set(expected)) < len(expected) or "" in expected:
        with pytest.raises(st.FormatError):
            st.save(folder / "o.safetensors", tensors, rename=[(pattern, replacement)])
        assert not os.listdir(folder)
        return
    st.save(folder / "o.safetensors", tensors, rename=[(pattern, replacement)])
    loaded = safetensors.numpy.load_file(str(folder / "o.safetensors"))
    assert {new: float(loaded[new][0]) for new in expected} == {
        new: float(i) for i, new in enumerate(expected)
    }


def test_every_jobs_gives_the_same_bytes(tmp_path: Path) -> None:
    source = tmp_path / "src.safetensors"
    rng = np.random.default_rng(1)
    arrays = {f"l{i}.weight": rng.standard_normal((512, 1024)).astype(np.float32) for i in range(6)}
    safetensors.numpy.save_file(arrays, str(source))
    for name, keywords in [
        ("a.safetensors", {"dtype": "BF16"}),
        ("s", {"dtype": "F16", "max_shard_size": "3MB"}),
        ("a.gguf", {"dtype": "Q4_0"}),
    ]:
        one = st.save(tmp_path / f"1{name}", str(source), jobs=1, **keywords)
        three = st.save(tmp_path / f"3{name}", str(source), jobs=3, **keywords)
        assert _tree(tmp_path / f"1{name}") == _tree(tmp_path / f"3{name}")
        assert len(one.files) == len(three.files)


def _adapter(tmp_path: Path, layers: int, size: int) -> tuple[Path, Path]:
    """A base of ``layers`` F32 (size, size) weights and a rank-8 LoRA adapter on each."""
    rng = np.random.default_rng(5)
    base = tmp_path / "base.safetensors"
    st.save_safetensors(
        str(base),
        {
            f"layers.{i}.weight": st.Tensor.from_numpy(
                rng.standard_normal((size, size), np.float32)
            )
            for i in range(layers)
        },
    )
    folder = tmp_path / "ad"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16})
    )
    lora = {}
    for i in range(layers):
        lora[f"base_model.model.layers.{i}.lora_A.weight"] = st.Tensor.from_numpy(
            rng.standard_normal((8, size), np.float32)
        )
        lora[f"base_model.model.layers.{i}.lora_B.weight"] = st.Tensor.from_numpy(
            rng.standard_normal((size, 8), np.float32)
        )
    st.save_safetensors(str(folder / "adapter_model.safetensors"), lora)
    return base, folder


def test_a_merged_checkpoint_saves_as_merge_lora_writes(tmp_path: Path) -> None:
    base, adapter = _adapter(tmp_path, 3, 64)
    status, out, err = _cli(
        "merge-lora", str(base), str(adapter), str(tmp_path / "cli.safetensors"),
        "--dtype", "BF16", "--rename", r"^layers=blk",
    )  # fmt: skip
    assert status == 0, err
    assert "3 tensors, 3 changed by the adapter" in out
    for jobs in (1, 3):
        with st.merge_lora(str(base), str(adapter)) as merged:
            report = st.save(
                tmp_path / f"py{jobs}.safetensors", merged, dtype="BF16",
                rename=[("^layers", "blk")], jobs=jobs,
            )  # fmt: skip
        assert report.computed == 3 and report.tensors == 3
        assert (tmp_path / f"py{jobs}.safetensors").read_bytes() == (
            tmp_path / "cli.safetensors"
        ).read_bytes()
    # as GGUF: computed here, blocks as the reference quantizes the merged values
    with st.merge_lora(str(base), str(adapter)) as merged:
        st.save(tmp_path / "m.gguf", merged, dtype="Q8_0", jobs=2)
        expected = merged["layers.1.weight"].numpy()
    tensor = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "m.gguf")).tensors}[
        "layers.1.weight"
    ]
    quantized = gguf.quants.quantize(expected, gguf.GGMLQuantizationType.Q8_0)
    assert np.array_equal(np.asarray(tensor.data).reshape(-1), quantized.reshape(-1))


def test_merge_takes_rename_and_writes_what_save_writes(tmp_path: Path) -> None:
    source = tmp_path / "src.safetensors"
    _source(source)
    out = tmp_path / "avg.safetensors"
    status, _, err = _cli(
        "merge", str(source), str(source), "--weights", "0.25,0.75", str(out),
        "--rename", r"^model\.=", "--rename", r"layers\.(\d+)=h\1",
    )  # fmt: skip
    assert status == 0, err
    with st.merge_linear([str(source), str(source)], ["0.25", "0.75"]) as merged:
        rules = [(r"^model\.", ""), (r"layers\.(\d+)", r"h\1")]
        st.save(tmp_path / "py.safetensors", merged, rename=rules)
    assert out.read_bytes() == (tmp_path / "py.safetensors").read_bytes()
    assert "h0.attn.weight" in safetensors.numpy.load_file(str(out))
    status, _, err = _cli("merge", str(source), str(source), "--weights", "1,0", str(out),
                          "--rename", "no-equals-sign", "--overwrite")  # fmt: skip
    assert status == 2 and "REGEX=REPLACEMENT" in err


def test_overwrite_and_formats_chosen_by_name(tmp_path: Path) -> None:
    tensors = {"w": st.tensor([[1.0, 2.0]], "F32")}
    out = tmp_path / "o.safetensors"
    st.save(out, tensors)
    first = out.read_bytes()
    with pytest.raises(FileExistsError):
        st.save(out, {"w": st.tensor([[3.0, 4.0]], "F32")})
    assert out.read_bytes() == first
    st.save(out, {"w": st.tensor([[3.0, 4.0]], "F32")}, overwrite=True)
    assert safetensors.numpy.load_file(str(out))["w"].tolist() == [[3.0, 4.0]]
    with pytest.raises(st.FormatError, match=r"o\.bin"):
        st.save(tmp_path / "o.bin", tensors)
    with pytest.raises(st.FormatError, match=r"'npz' is not one of"):
        st.save(tmp_path / "o.bin", tensors, format="npz")
    st.save(tmp_path / "o.bin", tensors, format="json")
    assert st.Tensor.from_json((tmp_path / "o.bin").read_text()) == tensors["w"]
    with pytest.raises(st.DTypeError, match="block type"):
        st.save(tmp_path / "q.safetensors", tensors, dtype="Q8_0")
    with pytest.raises(st.DTypeError, match="not a float"):
        st.save(tmp_path / "q.safetensors", tensors, dtype="I32")
    with pytest.raises(st.FormatError, match="keep applies to GGUF"):
        st.save(tmp_path / "q.safetensors", tensors, keep="*")
    with pytest.raises(st.FormatError, match="no tensor matches"):
        st.save(tmp_path / "q.safetensors", tensors, names="x*")
    two = {**tensors, "v": st.tensor([1], "I8")}
    with pytest.raises(st.FormatError, match="holds one tensor; 2 tensors are selected"):
        st.save(tmp_path / "two.npy", two)
    st.save(tmp_path / "v.npy", two, names="v")
    assert np.load(tmp_path / "v.npy").tolist() == [1]
    assert sorted(os.listdir(tmp_path)) == ["o.bin", "o.safetensors", "v.npy"]


def test_a_mapping_source_writes_what_convert_writes_of_the_same_tensors(tmp_path: Path) -> None:
    arrays = _source(tmp_path / "src.safetensors")
    plain = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file(arrays, str(plain))  # the same tensors, no metadata
    with st.open_checkpoint(str(plain)) as checkpoint:
        order = list(checkpoint)  # GGUF keeps the source's order
    tensors = {name: st.Tensor.from_numpy(arrays[name]) for name in order}
    for name, keywords in [("a.safetensors", {}), ("a.gguf", {"dtype": "Q8_0", "names": "*t"})]:
        st.save(tmp_path / f"map-{name}", tensors, jobs=3, **keywords)
        with st.open_checkpoint(str(plain)) as checkpoint:
            st.save(tmp_path / f"file-{name}", checkpoint, **keywords)
        assert (tmp_path / f"map-{name}").read_bytes() == (tmp_path / f"file-{name}").read_bytes()


def test_a_url_source_writes_what_the_local_file_gives(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    _source(served / "m.safetensors")
    server = FileServer(served)
    try:
        st.save(
            tmp_path / "remote.gguf", server.url("m.safetensors"), dtype="F16", names="*t", jobs=2
        )
        st.save(tmp_path / "remote.safetensors", server.url("m.safetensors"), jobs=2)
    finally:
        server.close()
    st.save(tmp_path / "local.gguf", str(served / "m.safetensors"), dtype="F16", names="*t")
    st.save(tmp_path / "local.safetensors", str(served / "m.safetensors"))
    assert (tmp_path / "remote.gguf").read_bytes() == (tmp_path / "local.gguf").read_bytes()
    remote = (tmp_path / "remote.safetensors").read_bytes()
    assert remote == (tmp_path / "local.safetensors").read_bytes()


def test_the_docstring_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(_save.save, "save", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 4


_MEMORY = """
import sys, threading, time, tracemalloc
import strided as st

def anon():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
peak = [0]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon())
        time.sleep(0.001)
base, adapter, out, how = sys.argv[1:5]
merged = st.merge_lora(base, adapter)
start = anon()
sampler = threading.Thread(target=sample, daemon=True)
tracemalloc.start()
sampler.start()
if how == "save":
    st.save(out, merged)
elif how == "save_safetensors":
    st.save_safetensors(out, merged)
else:  # every merged tensor held at once
    st.save_safetensors(out, {name: merged[name] for name in merged})
done.set()
sampler.join()
print(tracemalloc.get_traced_memory()[1], max(peak[0], anon()) - start)
"""


@pytest.mark.parametrize("how", ["save", "save_safetensors", "dict"])
def test_saving_a_merged_model_stays_within_64_mib_and_its_largest_tensor(
    tmp_path: Path, how: str
) -> None:
    """24 merged F32 weights of 4 MiB (96 MiB): ``st.save`` and ``save_safetensors`` of
    the merged checkpoint hold one weight's delta at a time; a dict of the merged tensors
    holds them all."""
    base, adapter = _adapter(tmp_path, 24, 1024)
    found = subprocess.run(
        [sys.executable, "-c", _MEMORY, str(base), str(adapter), str(tmp_path / "o.safetensors"),
         how],
        capture_output=True, text=True, check=True, env=ENV, timeout=600,
    )  # fmt: skip
    traced, anonymous = (int(value) for value in found.stdout.split())
    bound = (64 << 20) + (4 << 20)  # 64 MiB plus the largest tensor (1024 x 1024 F32)
    if how != "dict":
        assert traced < bound, traced >> 20
        assert anonymous < bound, anonymous >> 20
    else:  # the bound is a real one: the whole-model writer passes it
        assert traced > bound, traced >> 20


def _gguf_source(path: Path) -> None:
    rng = np.random.default_rng(2)
    st.save_gguf(
        str(path),
        {
            "blk.0.attn.weight": st.Tensor.from_numpy(rng.standard_normal((4, 64), np.float32)),
            "blk.0.norm": st.Tensor.from_numpy(rng.standard_normal(64).astype(np.float16)),
        },
        types="Q8_0",
    )


@pytest.mark.parametrize("kind", ["safetensors", "gguf", "npy", "merged"])
def test_save_safetensors_of_a_checkpoint_streams_the_bytes_of_its_tensors(
    tmp_path: Path, kind: str
) -> None:
    """Given a Checkpoint, ``st.save_safetensors`` writes what it writes for a dict of the
    same tensors (metadata only as given), now one tensor at a time."""
    from strided.io import save_safetensors as whole

    if kind == "gguf":
        source = str(tmp_path / "src.gguf")
        _gguf_source(tmp_path / "src.gguf")
    elif kind == "npy":
        source = str(tmp_path / "src.npy")
        np.save(source, np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    else:
        source = str(tmp_path / "src.safetensors")
        _source(tmp_path / "src.safetensors")
    metadata = {"b": "2", "a": "1"}
    if kind == "merged":
        base, adapter = _adapter(tmp_path, 2, 16)
        opened: st.Checkpoint = st.merge_lora(str(base), str(adapter))
    else:
        opened = st.open_checkpoint(source)
    with opened as checkpoint:
        for given in (None, metadata):
            streamed, held = tmp_path / "streamed.safetensors", tmp_path / "held.safetensors"
            st.save_safetensors(streamed, checkpoint, given)
            whole(str(held), {name: checkpoint[name] for name in checkpoint}, given)
            assert streamed.read_bytes() == held.read_bytes()
            loaded = safetensors.numpy.load_file(str(streamed))
            assert sorted(loaded) == sorted(checkpoint)
