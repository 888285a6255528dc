"""The GGUF type of every key gguf-py's ``GGUFWriter.add_*`` methods write, read from
gguf-py's own source (installed in the test environment).

Each ``add_*`` method of ``GGUFWriter`` that writes a key named by
``gguf.constants.Keys`` is parsed (never run): the typed writer it calls
(``add_uint32``, ``add_float32``, ``add_string``, ``add_array`` ...) gives the type, the
element type of an array comes from the method's annotation (``Sequence[float]`` is
FLOAT32, ``Sequence[int]`` INT32, ``bytes`` UINT8), and a key written through
``.format(arch=self.arch)`` is the template ``{arch}.…``. A method that writes one key
as a scalar or as an array (``add_head_count(int | Sequence[int])``) gives both.

``python -m tests.gguf_known_keys`` prints the table as strided carries it
(``strided/jobs/_gguf_keys.py``); ``derived()`` is what the tests compare it with.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import gguf
from gguf import GGUFWriter
from gguf.constants import Keys

__all__ = ["derived"]

_WRITERS = {
    "add_uint8": "UINT8",
    "add_int8": "INT8",
    "add_uint16": "UINT16",
    "add_int16": "INT16",
    "add_uint32": "UINT32",
    "add_int32": "INT32",
    "add_uint64": "UINT64",
    "add_int64": "INT64",
    "add_float32": "FLOAT32",
    "add_float64": "FLOAT64",
    "add_bool": "BOOL",
    "add_string": "STRING",
    "add_array": "ARRAY",
}
_ELEMENTS = {"float": "FLOAT32", "int": "INT32", "str": "STRING", "bool": "BOOL"}


def _key(node: ast.expr) -> str | None:
    """The key text a ``Keys.A.B`` (or ``Keys.A.B.format(arch=...)``) expression names."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr != "format":
            return None
        node = node.func.value
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id != "Keys":
        return None
    value: object = Keys
    for part in reversed(parts):
        value = getattr(value, part)
    return value if isinstance(value, str) else None


def _element(annotation: str) -> str | None:
    """An array's element type from a parameter annotation (the last Sequence[...])."""
    if annotation.strip() == "bytes":
        return "UINT8"
    found = None
    for piece in annotation.split("Sequence[")[1:]:
        inner = piece.split("]")[0].strip()
        found = _ELEMENTS.get(inner, "INT32" if inner == "TokenType" else found)
    return found


def derived() -> dict[str, str]:
    """Key (``{arch}`` templates kept) -> GGUF type text, ``A|B`` when a method writes
    either; keys whose array element type the source does not state are left out."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(GGUFWriter)))
    table: dict[str, list[str]] = {}
    for method in ast.walk(tree):
        if not isinstance(method, ast.FunctionDef) or not method.name.startswith("add_"):
            continue
        if method.name in _WRITERS or method.name == "add_key_value":
            continue
        annotations = {
            arg.arg: ast.unparse(arg.annotation) for arg in method.args.args if arg.annotation
        }
        for call in ast.walk(method):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            kind = _WRITERS.get(call.func.attr)
            if kind is None or len(call.args) < 2:
                continue
            key = _key(call.args[0])
            if key is None:
                if isinstance(call.args[0], ast.Name):  # key = Keys....; self.add_x(key, v)
                    key = _assigned(method, call.args[0].id)
                if key is None:
                    continue
            if kind == "ARRAY":
                value = call.args[1]
                name = value.args[0] if isinstance(value, ast.Call) and value.args else value
                element = _element(annotations.get(getattr(name, "id", ""), ""))
                if element is None:
                    continue
                kind = f"ARRAY[{element}]"
            kinds = table.setdefault(key, [])
            if kind not in kinds:
                kinds.append(kind)
    # The scalar type first, then the array type.
    ordered = {
        key: sorted(kinds, key=lambda kind: kind.startswith("ARRAY"))
        for key, kinds in table.items()
    }
    return {key: "|".join(kinds) for key, kinds in ordered.items()}


def _assigned(method: ast.FunctionDef, name: str) -> str | None:
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            return _key(node.value)
    return None


if __name__ == "__main__":
    print(f"# gguf-py {gguf.__version__ if hasattr(gguf, '__version__') else ''}")
    for key, kind in sorted(derived().items()):
        print(f'    "{key}": "{kind}",')
