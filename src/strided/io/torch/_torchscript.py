"""TorchScript archives (``torch.jit.save``) read without running them.

A TorchScript archive is a zip with one top-level folder holding ``data.pkl`` (the
module objects), ``constants.pkl``, ``code/`` (each class as source text, deflated, with
``*.debug_pkl`` beside it), ``data/<key>`` and ``constants/<key>`` (storages),
``byteorder`` and ``version``. Loading it with torch compiles and runs ``code/``;
strided reads it as data:

* ``data.pkl`` is interpreted by ``pickle._machine`` with the allow-list of ``torch.save``
  files, plus ``torch.jit._pickle.build_{int,double,bool,tensor}list`` and
  ``restore_type_tag`` (each returns the value it is given), the typed storages
  TorchScript names for the element types ``torch.save`` stores untyped
  (``torch.UInt16Storage``, ``torch.Float8_e4m3fnStorage``, ...), and every
  ``__torch__.*`` global held as an inert record (the scripted classes; never imported
  or called). Any other global is refused as for a ``torch.save`` file, naming it;
  with ``lenient=True`` it becomes an inert record too.
* The tensors are the parameters and buffers each module class declares in its
  ``__parameters__ = [...]`` and ``__buffers__ = [...]`` lines of ``code/``, read as text
  (``_torchscript_code``). They are named as ``torch.jit.load(path).state_dict()``
  names them: from the root module, each module's parameters that hold a tensor, then
  its buffers that hold one (non-persistent buffers included: a scripted module does
  not tell them apart), in the order of its attributes, then each attribute holding a
  module (a record of a class declared ``class NAME(Module):``), recursively, with
  dotted names (``lin.weight``, ``seq.0.weight``; a module shared under two names is
  walked under both, its tensors shared). Plain tensor attributes, tensors inside
  other attributes, ``constants.pkl`` and ``traced_inputs.pkl`` are not state and are
  not read. There is no metadata.
* ``data.pkl``, ``constants.pkl``, ``byteorder`` and the ``data/`` and ``constants/``
  storages must be stored uncompressed (FormatError otherwise); other members may be
  deflated and are not read, except the ``code/`` members of the classes reached.
  Tensors are zero-copy views of the mapped file, exactly as for a ``torch.save`` zip
  (``_pytorch._Shard`` does the viewing: storages, big-endian archives, negative bits).

Bad input is a FormatError naming the file: a declared parameter or buffer the object
does not have, or that holds something other than a tensor or None; a module whose
class the code does not declare, or whose state is not a dict of attributes (a class
with ``__setstate__``: its state needs code); a module that contains itself; a name
produced twice. The walk is bounded like ``_pytorch._flatten``'s (names charged to the
budget, about two visits per pickle byte, nesting and name-length caps).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from ..._core.dtype import DType
from ..._core.errors import FormatError, LimitError
from ..._core.limits import MAX_PYTORCH_NAME as _MAX_NAME
from ..._core.limits import MAX_PYTORCH_NESTING as _MAX_NESTING
from ..._core.memory import guard_function
from .._budget import ITEM_BYTES, OBJECT_BYTES, ParseBudget, text_bytes
from .._common import PathLike, file_size, label, map_file, open_regular
from .._zip import DEFLATED, STORED, ZipMember, read_zip, stored_bytes
from ..pickle import GLOBALS, Global, Record, StorageRef, TensorRef, describe, interpret
from ._pytorch import PyTorchFile, _archive_folder, _check_view, _Shard, storage_spans
from ._torchscript_code import ClassDecl, CodeIndex

__all__ = ["TORCHSCRIPT_GLOBALS", "is_torchscript", "open_torchscript"]

_SCRIPTED = "__torch__"
_CUSTOM_CLASSES = "__torch__.torch.classes"  # C++ classes: no code, never modules
_STORED_MEMBERS = ("data.pkl", "constants.pkl", "byteorder")
_STORED_FOLDERS = ("data/", "constants/")


def _typed_list(kind: type | None, what: str) -> Any:
    """The rule of ``torch.jit._pickle.build_<what>list(items)``: the list itself."""

    def rule(m: Any, args: tuple[Any, ...]) -> object:
        if len(args) != 1 or type(args[0]) is not list:
            raise FormatError("expected one list")
        items = args[0]
        for item in items:
            if (type(item) is not kind) if kind else (type(item) is not TensorRef):
                raise FormatError(f"a {what} list holds {describe(item)}")
        return items

    return rule


def _restore_type_tag(m: Any, args: tuple[Any, ...]) -> object:
    """``restore_type_tag(value, type_text)``: the value (the tag is TorchScript's type)."""
    if len(args) != 2 or type(args[1]) is not str:
        raise FormatError("expected (value, type text)")
    return args[0]


_JIT_RULES = {
    "torch.jit._pickle.build_intlist": _typed_list(int, "int"),
    "torch.jit._pickle.build_doublelist": _typed_list(float, "double"),
    "torch.jit._pickle.build_boollist": _typed_list(bool, "bool"),
    "torch.jit._pickle.build_tensorlist": _typed_list(None, "tensor"),
    "torch.jit._pickle.restore_type_tag": _restore_type_tag,
}


class _ScriptGlobals(Mapping[str, Global]):
    """The allow-list of ``torch.save`` files and the ``torch.jit._pickle`` rules, plus
    every ``__torch__.*`` name as a record global.

    The ``__torch__`` names are an open family: looking one up gives its record global
    (split at the last dot into module and class, as torch splits a qualified name),
    made once per name; iterating lists only the fixed entries.
    """

    __slots__ = ("_fixed", "_records")

    def __init__(self, fixed: dict[str, Global]) -> None:
        self._fixed = fixed
        self._records: dict[str, Global] = {}

    def __getitem__(self, full: str) -> Global:
        found = self._fixed.get(full)
        if found is not None:
            return found
        if not full.startswith(_SCRIPTED + "."):
            raise KeyError(full)
        found = self._records.get(full)
        if found is None:
            module, _, name = full.rpartition(".")
            found = self._records[full] = Global(full, "record", origin=(module, name))
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._fixed)

    def __len__(self) -> int:
        return len(self._fixed)


# TorchScript's pickler names a storage after its element type's C++ name, also for the
# types ``torch.save`` writes as untyped storages (torch.jit.load reads them all).
_SCRIPT_STORAGES = {
    "UInt16Storage": DType.U16, "UInt32Storage": DType.U32, "UInt64Storage": DType.U64,
    "Float8_e4m3fnStorage": DType.F8_E4M3, "Float8_e5m2Storage": DType.F8_E5M2,
    "Float8_e8m0fnuStorage": DType.F8_E8M0,
}  # fmt: skip

# The fixed part of what a TorchScript data.pkl may name (the scripted classes aside).
TORCHSCRIPT_GLOBALS: dict[str, Global] = {
    **GLOBALS,
    **{name: Global(name, "call", rule=rule) for name, rule in _JIT_RULES.items()},
    **{
        f"torch.{name}": Global(f"torch.{name}", "storage", dtype)
        for name, dtype in _SCRIPT_STORAGES.items()
    },
}


def is_torchscript(names: Iterable[str]) -> bool:
    """Whether zip member names are a TorchScript archive's: ``data.pkl``,
    ``constants.pkl`` and a ``code/`` member in one top-level folder."""
    names = list(names)
    folders = {name[: -len("data.pkl")] for name in names if name.endswith("/data.pkl")}
    return any(f"{folder}constants.pkl" in names for folder in folders) and any(
        name.startswith(f"{folder}code/") for folder in folders for name in names
    )


class _ScriptShard(_Shard):
    """One opened TorchScript archive, viewed with ``_Shard``'s storage machinery.

    ``imports`` lists every ``(module, name)`` data.pkl names, in first-use order.
    """

    __slots__ = ()

    TABLE: ClassVar[Mapping[str, Global]] = _ScriptGlobals(TORCHSCRIPT_GLOBALS)

    def __init__(self, path: str, budget: ParseBudget, lenient: bool = False) -> None:
        # Everything ``_Shard.__init__`` sets, read the TorchScript way.
        self.where = path
        self.lenient = lenient
        with open_regular(path) as file:
            size = file_size(file)
            self.raw = map_file(file, size, path)
        self.big_endian = False
        members = read_zip(self.raw, path, methods=frozenset({STORED, DEFLATED}))
        _check_stored(members, _archive_folder(list(members), path), path)
        prefix, data = self.archive_pickle(members, budget)
        storages: dict[str, StorageRef] = {}
        imports = self.log(budget, prefix + "data.pkl")
        root, end = interpret(
            data,
            0,
            f"{path}: data.pkl",
            storages,
            budget=budget,
            table=self.TABLE,
            lenient=lenient,
            imports=imports,
        )
        if end != len(data):
            raise FormatError(f"{path}: data.pkl has {len(data) - end} bytes after its STOP")
        self.imports = imports
        self.spans = storage_spans(storages, members, prefix, path)
        constants = members.get(prefix + "constants.pkl")
        if constants is not None:
            # torch.jit.load unpickles it too, so what it names is recorded; its values
            # (the code's constants) are no state and are not kept.
            interpret(
                memoryview(stored_bytes(self.raw, constants)),  # type: ignore[arg-type]
                0,
                f"{path}: constants.pkl",
                {},
                budget=budget,
                table=self.TABLE,
                lenient=True,
                imports=self.log(budget, prefix + "constants.pkl"),
            )
        code = CodeIndex(self.raw, members, prefix, path, budget)
        state = _state(root, code, path, end, budget)
        self.metadata = {}
        for name, ref in state.items():
            _check_view(ref, f"{path}: tensor {name[:80]!r}")
        self.tensors = dict(state)
        self._arrays: dict[tuple[str, DType], Any] = {}
        self._swapped: OrderedDict[tuple[str, DType], Any] = OrderedDict()
        self._swapped_bytes = 0


def _check_stored(members: dict[str, ZipMember], prefix: str, where: str) -> None:
    """The members read in place (pickles, byteorder, storages) must be stored."""
    for name, member in members.items():
        inside = name[len(prefix) :]
        if member.method != STORED and (
            inside in _STORED_MEMBERS or inside.startswith(_STORED_FOLDERS)
        ):
            raise FormatError(
                f"{where}: member {name[:120]!r} is compressed; a TorchScript archive "
                "stores it uncompressed"
            )


class _Walk:
    """The state-dict walk over module records (see the module docstring)."""

    __slots__ = ("budget", "code", "sorted_out", "tensors", "visits", "where")

    def __init__(self, code: CodeIndex, where: str, pickle_bytes: int, budget: ParseBudget):
        self.code = code
        # Each module record's tensors and children, by identity (see ``enter``).
        self.sorted_out: dict[
            int, tuple[list[tuple[str, TensorRef]], list[tuple[str, Record]]]
        ] = {}
        self.where = where
        self.budget = budget
        self.tensors: dict[str, TensorRef] = {}
        self.visits = 2 * pickle_bytes + 4096

    def module_class(self, record: Record) -> ClassDecl | None:
        """The record's class if it is a module class; None for any other object.

        A scripted class (``__torch__.*``, not a C++ custom class) the code does not
        declare is a FormatError: torch could not load it either.
        """
        module = record.module
        if not (module == _SCRIPTED or module.startswith(_SCRIPTED + ".")):
            return None  # a lenient record of some other global: never a module
        if module == _CUSTOM_CLASSES or module.startswith(_CUSTOM_CLASSES + "."):
            return None
        found = self.code.lookup(module, record.name)
        if found is None:
            raise FormatError(
                f"{self.where}: class {record.name[:80]!r} of {describe(record)} is not "
                f"declared in {self.code.member_name(module)[:200]}"
            )
        return found if found.module else None

    def name(self, prefix: str, key: str) -> str:
        self.visits -= 1
        if self.visits < 0:
            raise LimitError(f"{self.where}: the modules refer to their parts too many times")
        if len(prefix) + len(key) >= _MAX_NAME:
            raise LimitError(f"{self.where}: a dotted name longer than {_MAX_NAME} characters")
        length = len(prefix) + 1 + len(key)
        self.budget.charge(ITEM_BYTES + text_bytes(length, prefix, key), "dotted names")
        return f"{prefix}.{key}" if prefix else key

    def enter(self, record: Record, decl: ClassDecl, prefix: str) -> Iterator[tuple[str, Record]]:
        """Name the module's own tensors; returns its child modules, in attribute order.

        A module shared by several parents is checked and sorted out once, at its first
        visit; a later visit costs only the names it makes.
        """
        found = self.sorted_out.get(id(record))  # records live as long as the walk
        if found is None:
            found = self.sorted_out[id(record)] = self.sort_out(record, decl, prefix)
        tensors, children = found
        for key, value in tensors:
            self.add(self.name(prefix, key), value)
        return iter(children)

    def sort_out(
        self, record: Record, decl: ClassDecl, prefix: str
    ) -> tuple[list[tuple[str, TensorRef]], list[tuple[str, Record]]]:
        """The module's tensors (parameters, then buffers) and child modules, checked."""
        shown = f"{self.where}: module {prefix or '(root)'!r} ({describe(record)[2:]})"
        state = record.state
        if type(state) is not dict:
            raise FormatError(
                f"{shown}: its state is {describe(state)}, not a dict of attributes "
                "(a class with __setstate__ needs its code)"
            )
        if decl.parameters is None or decl.buffers is None:
            raise FormatError(f"{shown}: class {decl.name!r} has no __parameters__ or __buffers__")
        self.budget.charge(OBJECT_BYTES + 2 * ITEM_BYTES * len(state), "module walk")
        for key in state:
            if type(key) is not str:
                raise FormatError(f"{shown}: attribute {describe(key)} is not named by a text")
        if set(decl.parameters) & set(decl.buffers):
            raise FormatError(f"{shown}: an attribute is declared both parameter and buffer")
        tensors = []
        for kind, declared in (("parameter", decl.parameters), ("buffer", decl.buffers)):
            missing = [name for name in declared if name not in state]
            if missing:
                raise FormatError(f"{shown}: no attribute {missing[0][:80]!r}, a declared {kind}")
            wanted = set(declared)
            for key, value in state.items():
                if key not in wanted or value is None:
                    continue  # torch skips a parameter or buffer that is None
                if type(value) is not TensorRef:
                    raise FormatError(f"{shown}: {kind} {key[:80]!r} is {describe(value)}")
                tensors.append((key, value))
        children = []
        for key, value in state.items():
            if type(value) is Record:
                child = self.module_class(value)
                if child is not None:
                    children.append((key, value))
        return tensors, children

    def add(self, name: str, ref: TensorRef) -> None:
        if name in self.tensors:
            raise FormatError(f"{self.where}: the name {name[:120]!r} is produced twice")
        self.tensors[name] = ref


def _state(
    root: object, code: CodeIndex, where: str, pickle_bytes: int, budget: ParseBudget
) -> dict[str, TensorRef]:
    """The root module's state dict as tensor references, walked without recursion."""
    walk = _Walk(code, where, pickle_bytes, budget)
    decl = walk.module_class(root) if type(root) is Record else None
    if decl is None:
        raise FormatError(f"{where}: data.pkl holds {describe(root)}, not a scripted module")
    assert type(root) is Record
    path = [root]  # the modules being walked, to refuse one that contains itself
    stack: list[tuple[Iterator[tuple[str, Record]], str]] = [(walk.enter(root, decl, ""), "")]
    while stack:
        children, prefix = stack[-1]
        step = next(children, None)
        if step is None:
            stack.pop()
            path.pop()
            continue
        key, child = step
        name = walk.name(prefix, key)
        if any(child is seen for seen in path):
            raise FormatError(f"{where}: module {name[:120]!r} contains itself")
        if len(stack) >= _MAX_NESTING:
            raise FormatError(f"{where}: modules nest deeper than {_MAX_NESTING} levels")
        child_decl = walk.module_class(child)
        assert child_decl is not None  # ``enter`` lists only module records
        path.append(child)
        stack.append((walk.enter(child, child_decl, name), name))
    return walk.tensors


@guard_function
def open_torchscript(
    path: PathLike,
    copy: bool = False,
    *,
    budget: ParseBudget | None = None,
    lenient: bool = False,
) -> PyTorchFile:
    """Open a TorchScript archive (``torch.jit.save``) lazily, running none of it.

    The tensors are the module's state dict (see the module docstring), named as
    ``torch.jit.load(path).state_dict()`` names them, as zero-copy read-only views of
    the mapped file (``copy=True``: independent copies); the file must not be modified
    or truncated while they live. ``code/`` is read as text for its declaration lines
    only, never compiled or run. ``lenient=True`` holds globals outside the allow-list
    as inert records instead of refusing them. A path that cannot be opened raises the
    OSError unchanged; anything wrong with the content is a FormatError or LimitError
    naming the file. What the open builds is charged to ``budget`` (a fresh one when
    None): past 64 MiB plus 16 times the pickle, central directory and declaration
    bytes read, a LimitError.
    """
    text = label(path)
    spent = ParseBudget(text) if budget is None else budget
    return PyTorchFile(text, [_ScriptShard(text, spent, lenient)], copy)
