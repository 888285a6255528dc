"""What each global a pickle names would do if it were loaded: ``data``, ``dangerous`` or
``unknown``.

strided never imports or calls what a pickle names; the verdict says what
``pickle.load``/``torch.load(weights_only=False)`` would have done with it, so a user
can judge a file before anyone loads it another way.

* ``"data"``: strict mode understands the global as data (it is in the interpreter's
  allow-list, ``_globals.GLOBALS``, or in the table a reader passes).
* ``"dangerous"``: a callable that runs code, imports, or touches the system (files,
  processes, the network, the interpreter's own state), or a gadget that calls
  whatever it is handed. Judged by the table below, the one place it is written: whole
  modules (torch's own helpers that ``exec``, ``eval``, compile, import or start
  processes among them: ``torch.jit``, ``torch.fx``, ``torch.serialization``,
  ``torch.utils.collect_env``...), single names, every ``builtins`` name but the
  constructors strict mode reads, and any dunder name (``torch.__getattr__`` imports).
* ``"unknown"``: anything else, such as a model's own classes (``mymodel.Net``) and
  library classes. Loading such a file with ``pickle`` would import that module and
  run its code, which strided cannot vouch for; strided opens it only with
  ``lenient=True``, and then as inert data.

The table cannot be complete (Python reaches any callable through some attribute chain:
``torch.serialization`` holds ``torch``, which holds ``os``), which is why ``unknown``
is never "safe": ``strided scan`` exits 1 for unknown and dangerous alike. The table
names what scanners and published exploits use, so a report points at them plainly:
whole modules (and their submodules) whose every name is dangerous, single names of
otherwise harmless modules, and attribute chains (protocol 4 lets a name be
``"Path.unlink"`` or ``"os.system"`` looked up on the module) that pass through a
dangerous module or a dunder attribute (``__globals__``, ``__builtins__``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .._imports import ImportLog
from ._data import Global
from ._globals import GLOBALS

__all__ = [
    "DANGEROUS_MODULES",
    "DANGEROUS_NAMES",
    "PickleImport",
    "judge",
    "judge_log",
    "verdict",
]


class PickleImport(NamedTuple):
    """One global a pickle names: ``module``, ``name`` (as the unpickler would look them
    up, after the protocol 0-2 renaming), the ``verdict`` (``"data"``, ``"dangerous"``
    or ``"unknown"``) and the ``member``: which pickle of the checkpoint names it
    (``archive/data.pkl``, ``archive/constants.pkl``, an ``.npz`` member ``x.npy``, a
    distributed checkpoint's ``.metadata`` or item ``__0_0.distcp:optim.state``, a
    shard ``model-00001.bin:archive/data.pkl``, or the file's own name for a file that
    is itself a pickle)."""

    module: str
    name: str
    verdict: str
    member: str = ""

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


# Every name of these modules (and of their submodules) runs code, imports, or reaches
# the operating system, the network or the interpreter's internals.
DANGEROUS_MODULES = frozenset(
    {
        # processes, threads, signals and the operating system
        "os", "posix", "nt", "subprocess", "_posixsubprocess", "pty", "signal", "fcntl",
        "resource", "multiprocessing", "_thread", "threading", "concurrent", "asyncio",
        "platform", "ctypes", "_ctypes", "_winapi", "msvcrt", "winreg", "_winreg",
        # files
        "shutil", "tempfile", "mmap", "shelve",
        # running or compiling code, importing modules, the interpreter's own state
        "sys", "importlib", "imp", "zipimport", "pkgutil", "runpy", "code", "codeop",
        "compileall", "py_compile", "timeit", "doctest", "trace", "cProfile", "profile",
        "pdb", "bdb", "pydoc", "site", "gc", "inspect", "types", "idlelib", "distutils",
        "setuptools", "pip", "ensurepip", "venv",
        # deserializers that run what their input says
        "pickle", "_pickle", "cPickle", "marshal", "dill", "cloudpickle", "joblib", "yaml",
        # the network and the browser
        "socket", "_socket", "ssl", "http", "urllib", "urllib2", "ftplib", "smtplib",
        "poplib", "imaplib", "telnetlib", "xmlrpc", "socketserver", "webbrowser",
        "requests", "httpx", "aiohttp",
        # torch helpers that run, compile, import or evaluate code, start processes or
        # load another file (read in torch's own sources: exec, eval, subprocess,
        # importlib, pickle.load); torch.jit._pickle, which only rebuilds lists, is not
        "torch.serialization", "torch.hub", "torch.package", "torch._dynamo",
        "torch._inductor", "torch.compiler", "torch._export", "torch.export", "torch.fx",
        "torch.jit", "torch.onnx", "torch.utils.cpp_extension", "torch.utils.collect_env",
        "torch.utils._config_module", "torch.utils._pytree", "torch.utils._traceback",
        "torch.utils.data.datapipes", "torch.utils.model_dump", "torch._guards",
        "torch._library", "torch._strobelight", "torch.utils._strobelight",
        "torch.cuda._memory_viz", "torch.multiprocessing", "torch.distributed.run",
        "torch.distributed.launch", "torch.distributed.launcher",
        "torch.distributed.elastic", "torch.distributed.rpc", "torch.backends.xeon",
        "torch._functorch", "torch._higher_order_ops",
        # NumPy's build and test helpers run compilers, subprocesses and code strings
        "numpy.f2py", "numpy.distutils", "numpy.testing",
    }
)  # fmt: skip

# Submodules of a dangerous module that only build data (their names are judged as any
# other module's).
_HARMLESS_SUBMODULES = frozenset({"torch.jit._pickle"})

# Single names of modules that are otherwise harmless (or that strict mode reads).
DANGEROUS_NAMES = frozenset(
    {
        # builtins that run code, import, reach any attribute, or open files
        *(
            f"builtins.{name}"
            for name in (
                "eval", "exec", "compile", "execfile", "getattr", "setattr", "delattr",
                "__import__", "open", "input", "breakpoint", "globals", "locals", "vars",
                "__build_class__", "__loader__", "help", "exit", "quit", "apply",
                "reload", "file",
            )
        ),
        # callables that reach any attribute or call any method they are handed
        "functools.partial", "functools.partialmethod", "functools.reduce",
        "operator.attrgetter", "operator.methodcaller", "operator.call",
        "_operator.attrgetter", "_operator.methodcaller", "_operator.call",
        # changing how later pickles are read
        "copyreg.add_extension", "copyreg.remove_extension", "copyreg.pickle",
        "copyreg.constructor", "copyreg.clear_extension_cache",
        # files
        "io.open", "io.FileIO", "io.open_code", "_io.open", "_io.FileIO", "_io.open_code",
        "codecs.open", "pathlib.Path.write_text", "pathlib.Path.write_bytes",
        "pathlib.Path.unlink", "pathlib.Path.rmdir", "pathlib.Path.open",
        "logging.config.listen", "logging.config.fileConfig", "logging.config.dictConfig",
        # loaders that unpickle, compile or run another file
        "torch.load", "torch.serialization.load", "torch._weights_only_unpickler.load",
        "torch.jit.load", "torch.jit._serialization.load", "torch.hub.load",
        "torch.hub.load_state_dict_from_url", "torch.hub.download_url_to_file",
        "torch.storage._load_from_bytes", "torch.compile", "torch.ops.load_library",
        "torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline",
        "numpy.load", "numpy.lib.npyio.load", "numpy.lib._npyio_impl.load",
        "numpy.fromfile", "numpy.loadtxt", "numpy.genfromtxt", "numpy.memmap",
        "numpy.testing._private.utils.runstring", "numpy.ctypeslib.load_library",
        "pandas.read_pickle", "pandas.io.pickle.read_pickle",
        # torch helpers outside the dangerous modules that import or load by name
        "torch._utils._import_dotted_name", "torch._ops.import_module",
        "torch._ops._OpNamespace.load_library", "torch._ops._Ops.load_library",
        "torch._ops._Ops.import_module", "torch._ops.ops.load_library",
        "torch._ops.ops.import_module", "torch.ops.import_module",
        "torch._C.import_ir_module", "torch._C.import_ir_module_from_buffer",
        "torch._C._load_for_lite_interpreter", "torch._C._jit_script_compile",
        "torch.distributed.checkpoint.load", "torch.distributed.checkpoint.load_state_dict",
        "torch.distributed.checkpoint.state_dict_loader.load",
        "torch.distributed.checkpoint.format_utils.dcp_to_torch_save",
        "torch.distributed.checkpoint.format_utils.torch_save_to_dcp",
        "torch.storage.TypedStorage._load_from_bytes", "torch.Tensor.__reduce_ex__",
    }
)  # fmt: skip

# Dunder attributes lead from any object to code or to builtins (``__getattr__``,
# ``__globals__``, ``__builtins__``, ``__import__``); these few name no such thing.
_DUNDERS_OK = frozenset({"__main__", "__newobj__", "__newobj_ex__"})


def _in_dangerous_module(dotted: str) -> bool:
    """Whether ``dotted`` (``a.b.c``) is a dangerous module or lies inside one (and not
    inside one of its harmless submodules)."""
    head = dotted
    while True:
        if head in _HARMLESS_SUBMODULES:
            return False
        if head in DANGEROUS_MODULES:
            return True
        cut = head.rfind(".")
        if cut < 0:
            return False
        head = head[:cut]


def _dunder(part: str) -> bool:
    return part.startswith("__") and part.endswith("__") and part not in _DUNDERS_OK


def verdict(module: str, name: str, table: Mapping[str, object] = GLOBALS) -> str:
    """``"data"``, ``"dangerous"`` or ``"unknown"`` for global ``module.name``.

    ``table`` is the allow-list the reader interpreted the pickle with (the strict
    interpreter's own table by default): what it holds is ``"data"``.
    """
    full = f"{module}.{name}"
    if full in table:
        return "data"
    if full in DANGEROUS_NAMES or _in_dangerous_module(full):
        return "dangerous"
    # Every builtin but the constructors strict mode reads as data (in ``table``) is a
    # callable that reaches code, attributes, files or the interpreter, or a type
    # whose construction strict mode does not vouch for.
    if module == "builtins":
        return "dangerous"
    # A dunder (``torch.__getattr__`` imports any submodule), or an attribute chain
    # (protocol 4: "os.system" looked up on some module that imports os) that passes
    # through a dangerous module or a dunder, or ends at a dangerous builtin.
    chain = name.split(".")
    for index, part in enumerate(chain):
        if _dunder(part):
            return "dangerous"
        if len(chain) > 1 and _in_dangerous_module(".".join(chain[index:])):
            return "dangerous"
        if len(chain) > 1 and f"builtins.{part}" in DANGEROUS_NAMES:
            return "dangerous"
    return "unknown"


def judge(
    imports: Iterable[tuple[str, str]], table: Mapping[str, Global] = GLOBALS, member: str = ""
) -> tuple[PickleImport, ...]:
    """Each ``(module, name)`` with its verdict, in the order given, from ``member``."""
    return tuple(
        PickleImport(module, name, verdict(module, name, table), member) for module, name in imports
    )


def judge_log(log: ImportLog) -> tuple[PickleImport, ...]:
    """Every global an open's pickles named, judged by the allow-list each pickle was
    read with, member by member in the order they were read (each once per member)."""
    return tuple(
        PickleImport(module, name, verdict(module, name, table), member)
        for module, name, member, table in log.entries()
    )
