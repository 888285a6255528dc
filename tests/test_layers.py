"""The package's layers: every import points down, and no modules import each other in a loop.

The folders are the layers, lowest first: ``_core`` (errors, limits, dtypes, scalars,
shapes), ``_kernels`` (arrays in, arrays out), ``_tensor`` (the Tensor class and its
mixins), ``io`` (formats), ``jobs`` (whole-checkpoint work), ``cli``, and the face
(``strided/__init__.py``, ``__main__.py``, ``dask.py``). A module may import its own
layer and the layers below it, never one above. Every import statement is read with
``ast`` -- at module level, inside functions and under ``TYPE_CHECKING`` -- relative or
absolute, so an import hidden in a function cannot carry an arrow upward either.

Imports of strided's own modules inside functions are refused, with two exceptions that
exist for start-up time, not to dodge a loop: the package's ``__init__`` resolves public
names on first use (PEP 562), and ``cli/__init__`` imports a command's modules only when
that command runs, so ``strided --help`` loads neither NumPy nor the readers.

A loop is looked for among the imports that run (``TYPE_CHECKING`` blocks are left out:
they never execute), module to module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import strided

ROOT = Path(strided.__file__).parent
LAYERS = ("_core", "_kernels", "_tensor", "io", "jobs", "cli")  # lowest first
FACE = len(LAYERS)  # __init__, __main__, dask: the top
START_UP_LAZY = frozenset({"strided", "strided.cli"})


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ["strided", *path.relative_to(ROOT).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def layer(module: str) -> int:
    """The layer index of a module of the package (higher is further up)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return FACE


class Import:
    """One imported module of the package, where it is imported and how."""

    def __init__(self, target: str, line: int, in_function: bool, type_only: bool) -> None:
        self.target = target
        self.line = line
        self.in_function = in_function
        self.type_only = type_only


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "strided"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    if source.split(".")[0] != "strided":
        return []
    # ``from pkg import name``: the submodule when ``name`` is one, else ``pkg`` itself.
    return [
        f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
        for alias in node.names
    ]


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports(module: str) -> Iterator[Import]:
    """Every import of the package's own modules in ``module``, wherever it stands."""
    path, is_package = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def walk(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, is_package, child):
                    yield Import(target, child.lineno, in_function, type_only)
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, in_function or function, type_only or _is_type_checking(child))

    yield from walk(tree, False, False)


def test_the_walk_sees_every_layer_and_imports_in_functions() -> None:
    assert {layer(module) for module in MODULES} == set(range(FACE + 1))
    # The face's lazy homes are real imports inside functions: the walk must see them.
    lazy = [item for item in imports("strided.cli") if item.in_function]
    assert any(layer(item.target) == LAYERS.index("jobs") for item in lazy)
    assert all(item.target in MODULES for module in MODULES for item in imports(module))


def test_every_import_points_down() -> None:
    upward = [
        f"{module}:{item.line} imports {item.target}"
        for module in MODULES
        for item in imports(module)
        if layer(item.target) > layer(module)
    ]
    assert upward == []


def test_no_import_of_the_package_inside_a_function() -> None:
    hidden = [
        f"{module}:{item.line} imports {item.target} inside a function"
        for module in MODULES
        if module not in START_UP_LAZY
        for item in imports(module)
        if item.in_function and not item.type_only
    ]
    assert hidden == []


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for item in imports(module):
            if not item.type_only and item.target != module:
                graph[module].add(item.target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One loop of ``graph`` as ``[a, b, ..., a]``, or None when it has none."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def test_find_cycle_reports_a_loop() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle() -> None:
    cycle = find_cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


# What the checkpoint door may take from ``io``: the reader protocol, the opener table
# and the helpers every format shares. No format's own module.
DOOR_IO = frozenset(
    {
        "strided.io._reader",
        "strided.io._open",
        "strided.io._budget",
        "strided.io._common",
        "strided.io._http",
        "strided.io.pickle",
    }
)
FORMAT_NAMES = frozenset(
    {"safetensors", "gguf", "npy", "npz", "pytorch", "torchscript", "dcp", "json", "merged"}
)


def test_the_checkpoint_door_speaks_only_the_reader_protocol() -> None:
    """``Checkpoint`` never asks which format it holds: ``jobs/_checkpoint`` imports no
    format's module (so it can test no reader class) and compares nothing to a format
    name; a new format is a reader and a row of the opener table, not an edit here."""
    module = "strided.jobs._checkpoint"
    from_io = {item.target for item in imports(module) if layer(item.target) == LAYERS.index("io")}
    assert from_io <= DOOR_IO, sorted(from_io - DOOR_IO)
    tree = ast.parse(MODULES[module][0].read_text(encoding="utf-8"))
    switches = [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for side in (node.left, *node.comparators)
        if isinstance(side, ast.Constant) and side.value in FORMAT_NAMES
    ]
    assert switches == []
