"""The top-level names the contract promises, and nothing private leaking into __all__."""

from __future__ import annotations

import strided as st

PROMISED = [
    "DataError",
    "ShapeError",
    "LimitError",
    "DTypeError",
    "IndexingError",
    "RangeError",
    "DivisionError",
    "FormatError",
    "DType",
    "Scalar",
    "Shape",
    "Tensor",
    "BinaryOp",
    "TensorInspectionOptions",
    "TensorInspection",
    "MAX_RANK",
    "MAX_ELEMENTS",
    "MAX_INSPECTION_SAMPLES",
    "tensor",
    "load_safetensors",
    "open_safetensors",
    "save_safetensors",
    "save_gguf",
    "open_gguf",
    "load_npy",
    "save_npy",
    "merge_lora",
    "merge_linear",
    "hash",
    "verify",
    "HashReport",
    "VerifyReport",
    "save",
    "SaveReport",
]


def test_every_promised_name_is_exported() -> None:
    missing = [name for name in PROMISED if name not in st.__all__]
    assert not missing


def test_all_is_sorted_unique_and_importable() -> None:
    assert len(set(st.__all__)) == len(st.__all__)
    for name in st.__all__:
        assert hasattr(st, name), name
    assert not [name for name in st.__all__ if name.startswith("_") and name != "__version__"]


def test_public_names_have_docstrings() -> None:
    for name in st.__all__:
        value = getattr(st, name)
        if callable(value) and not isinstance(value, type(st.DType.I8)):
            assert (value.__doc__ or "").strip(), name


def test_optional_extras_are_never_imported_statically() -> None:
    """``mypy --strict src`` must pass without the optional extras installed: no module
    may import them by statement (they are looked up by name at run time)."""
    import ast
    from pathlib import Path

    optional = {"orjson", "dask", "distributed", "httpx", "torch", "pickle"}
    for path in Path(st.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert not optional & set(names), f"{path.name} imports {names}"


def test_public_signatures_carry_no_private_types() -> None:
    """Every parameter of a public function names only types a user can import: none of
    strided's private classes (a budget, a reader) and nothing spelt with a leading ``_``."""
    import inspect
    import re

    private = {"ParseBudget", "Reader", "GGUFReader", "ImportLog", "Machine"}
    for name in st.__all__:
        value = getattr(st, name)
        functions = [value] if inspect.isfunction(value) else []
        if inspect.isclass(value):
            functions = [
                member
                for attribute, member in vars(value).items()
                if inspect.isfunction(member) and not attribute.startswith("_")
            ]
        for function in functions:
            for parameter in inspect.signature(function).parameters.values():
                if parameter.annotation is inspect.Parameter.empty:
                    continue
                text = str(parameter.annotation)
                words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
                assert not words & private, (name, function.__name__, parameter.name, text)
                assert not any(word.startswith("_") for word in words), (name, parameter.name)
