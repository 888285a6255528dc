"""The pickle family: a pickle interpreter that builds data and never runs code.

``_machine`` is the interpreter and ``_ops`` its opcode table (what each opcode may do);
``_globals`` is the allow-list of globals a checkpoint may name, built from ``_builtins``
and ``_numpy``; ``_data`` holds the values a run builds and ``_records`` the records of
classes that are named but not run; ``_walk`` flattens a loaded tree into tensor leaves;
``_verdicts`` judges what a file's pickles import; ``_object_pickles`` reads the pickles
NumPy writes for object arrays. The rest of the package uses only the names below.
"""

from ._data import Global, PickledSet, Record, StorageRef, TensorRef, TorchSize, describe
from ._globals import GLOBALS
from ._machine import Machine, interpret
from ._numpy import ArrayRef, array_values
from ._object_pickles import object_pickle_start, record_pickle, record_unrecognized
from ._verdicts import PickleImport, judge_log
from ._walk import Leaf, flatten

__all__ = [
    "GLOBALS",
    "ArrayRef",
    "Global",
    "Leaf",
    "Machine",
    "PickleImport",
    "PickledSet",
    "Record",
    "StorageRef",
    "TensorRef",
    "TorchSize",
    "array_values",
    "describe",
    "flatten",
    "interpret",
    "judge_log",
    "object_pickle_start",
    "record_pickle",
    "record_unrecognized",
]
