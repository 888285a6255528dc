"""The one boundary where running out of memory becomes a ``LimitError``.

A request within MAX_ELEMENTS can still need more memory than the process may have (an
address-space limit, a container quota): NumPy and Python then raise ``MemoryError``.
Every public entry point translates it into ``LimitError`` naming the operation
(``"zeros: the result does not fit in memory"``), so "only DataError subclasses escape"
holds under memory pressure too, and no function body needs its own ``try``.

``guard_methods`` installs the translation on a class: its public methods, classmethods
and staticmethods, and its dunders other than attribute access and the like (``_SKIP``).
Tensor and its method mixins get it from ``TensorInternals.__init_subclass__``; other
public classes use it as a class decorator, public functions use ``guard_function``.
Methods marked ``@view_only`` are left as they are: they only make views (a header of
fixed size, never a payload) and are the hot path, where a wrapper's call would cost a
measurable fraction of the work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import LimitError

__all__ = ["guard_function", "guard_methods", "out_of_memory", "view_only"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

# Dunders that only read or set attributes, or report cheap facts: never wrapped.
_SKIP = frozenset(
    {
        "__class_getitem__",
        "__contains__",
        "__copy__",
        "__deepcopy__",
        "__del__",
        "__delattr__",
        "__delitem__",
        "__enter__",
        "__exit__",
        "__getattr__",
        "__getattribute__",
        "__hash__",
        "__init_subclass__",
        "__len__",
        "__set_name__",
        "__setattr__",
        "__setitem__",
        "__subclasshook__",
    }
)

_VIEW_ONLY: set[Callable[..., Any]] = set()
_GUARDED: set[Callable[..., Any]] = set()


def out_of_memory(what: str) -> LimitError:
    """The LimitError for a result of legal size that still does not fit in memory."""
    error = LimitError(f"{what}: the result does not fit in memory")
    error._out_of_memory = True  # type: ignore[attr-defined]
    return error


def view_only(function: F) -> F:
    """Mark a method that only makes views, so ``guard_methods`` leaves it unwrapped."""
    _VIEW_ONLY.add(function)
    return function


def guard_function(function: F, name: str | None = None) -> F:
    """``function``, turning a MemoryError it raises into LimitError naming ``name``."""
    if function in _GUARDED:
        return function
    what = name or function.__name__

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except MemoryError:
            raise out_of_memory(what) from None
        except LimitError as error:
            # Raised by a guarded inner call: name the operation the caller asked for.
            if getattr(error, "_out_of_memory", False):
                raise out_of_memory(what) from None
            raise

    _GUARDED.add(guarded)
    return guarded  # type: ignore[return-value]


def _public_name(cls: type, name: str) -> str:
    """How an error names the method: ``zeros``, ``add`` for ``__add__`` and ``__radd__``."""
    if name in ("__new__", "__init__"):
        return cls.__name__
    if name.startswith("__r") and f"__{name[3:]}" in vars(cls):  # a reflected operator
        return name[3:-2]
    return name.strip("_")


def guard_methods(cls: C) -> C:
    """Guard the methods ``cls`` defines itself (see the module docstring); returns ``cls``."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") and not (name.endswith("__") and name not in _SKIP):
            continue
        what = _public_name(cls, name)
        if isinstance(member, (classmethod, staticmethod)):
            function = member.__func__
            if function not in _VIEW_ONLY:
                setattr(cls, name, type(member)(guard_function(function, what)))
        elif callable(member) and not isinstance(member, type) and member not in _VIEW_ONLY:
            setattr(cls, name, guard_function(member, what))
    return cls
