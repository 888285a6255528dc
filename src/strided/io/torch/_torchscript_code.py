"""The class declarations of a TorchScript archive's ``code/``, read as text.

``torch.jit.save`` writes each class of a scripted model as Python-like source under
``code/`` (a class ``__torch__.a.b.C`` in ``code/__torch__/a/b.py``). Two lines of each
module class say which of its attributes are parameters and buffers::

    class Linear(Module):
      __parameters__ = ["weight", "bias", ]
      __buffers__ = []

That is all strided needs from the code, and all it looks at: the text is never
compiled, parsed as Python or run. A tiny line matcher finds, in each member, the class
headers (``class NAME(BASE):`` at column 0) and, inside a class, the two declaration
lines (indented by exactly two spaces, as torch writes class-level lines; method bodies
are indented further and torch writes string literals on one line, so nothing else can
look like them). Any other line at column 0 (a ``def``) ends the class.

The names in a list are double-quoted texts without escapes: torch writes them
verbatim, so a name holding a quote, a backslash or a newline is not one a loadable
archive can hold, and such a list is a FormatError.

Members are read only when a record of one of their classes is reached, each at most
once; a deflated member is inflated whole with the bounded inflater (CRC checked) into
memory that is dropped once its declarations are taken, and all the code members one
archive inflates may declare at most ``MAX_TORCHSCRIPT_CODE_BYTES`` together (a
LimitError before anything is inflated). The declaration lines are granted to the open's
parse budget as header bytes; the names kept are charged to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._core.errors import FormatError, LimitError
from ..._core.limits import MAX_TORCHSCRIPT_CODE_BYTES as MAX_CODE_BYTES
from .._budget import ITEM_BYTES, OBJECT_BYTES, TEXT_BYTES, ParseBudget, text_bytes
from .._zip import DEFLATED, ZipMember, inflate, stored_bytes

__all__ = ["MAX_CODE_BYTES", "ClassDecl", "CodeIndex", "declarations"]

# A class header, a declaration line inside a class, or any other line at column 0.
_LINE = re.compile(
    rb"^(?:class (\w+)(?:\((\w*)\))?:[ \t]*\r?$"
    rb"|  __(parameters|buffers)__ = \[([^\n]*)\][ \t]*\r?$"
    rb"|(\S))",
    re.MULTILINE,
)
_SPACE = b" \t"


@dataclass(slots=True)
class ClassDecl:
    """One class of the code: whether it is a ``Module`` and what its lines declare.

    ``parameters`` and ``buffers`` are None when the class has no such line.
    """

    name: str
    module: bool
    parameters: tuple[str, ...] | None = None
    buffers: tuple[str, ...] | None = None


def declarations(text: Any, where: str, budget: ParseBudget) -> dict[str, ClassDecl]:
    """The classes one code member declares, by name, from its bytes ``text``.

    ``text`` is any bytes-like object (read in place, never copied whole). A class
    declared twice, a declaration line given twice in a class, a list that is not
    plain double-quoted names, a name twice in one list or a name that is not UTF-8 is
    a FormatError naming ``where`` and the line.
    """
    classes: dict[str, ClassDecl] = {}
    current: ClassDecl | None = None
    for found in _LINE.finditer(text):
        header, kind = found.group(1), found.group(3)
        if header is not None:
            name = _text(header, where, found.start())
            if name in classes:
                raise FormatError(f"{where}: class {name!r} is declared twice")
            budget.charge(OBJECT_BYTES + text_bytes(len(name), name), "code declarations")
            current = classes[name] = ClassDecl(name, found.group(2) == b"Module")
        elif kind is not None:
            if current is None:
                continue  # the body of a top-level function, not a class
            budget.grant(found.end() - found.start())
            names = _names(found.group(4), where, found.start(), budget)
            if kind == b"parameters":
                if current.parameters is not None:
                    raise FormatError(f"{where}: class {current.name!r} declares parameters twice")
                current.parameters = names
            else:
                if current.buffers is not None:
                    raise FormatError(f"{where}: class {current.name!r} declares buffers twice")
                current.buffers = names
        else:
            current = None
    return classes


def _names(inner: bytes, where: str, at: int, budget: ParseBudget) -> tuple[str, ...]:
    """The names of a declaration list's inside: ``"a", "b", `` (a trailing comma or not)."""
    names: list[str] = []
    seen: set[str] = set()  # a name twice is found in constant time, not by a list scan
    pos, end = 0, len(inner)
    while True:
        while pos < end and inner[pos] in _SPACE:
            pos += 1
        if pos == end:
            break
        if inner[pos] != ord('"'):
            raise FormatError(f"{where}: byte {at}: the declaration is not a list of names")
        close = inner.find(b'"', pos + 1)
        if close < 0 or b"\\" in inner[pos + 1 : close]:
            raise FormatError(
                f"{where}: byte {at}: a declared name is not a plain double-quoted text"
            )
        name = _text(inner[pos + 1 : close], where, at)
        budget.charge(2 * ITEM_BYTES + text_bytes(len(name), name), "code declarations")
        if name in seen:
            raise FormatError(f"{where}: byte {at}: the name {name[:80]!r} is declared twice")
        seen.add(name)
        names.append(name)
        pos = close + 1
        while pos < end and inner[pos] in _SPACE:
            pos += 1
        if pos < end:
            if inner[pos] != ord(","):
                raise FormatError(f"{where}: byte {at}: the declaration is not a list of names")
            pos += 1
    return tuple(names)


def _text(raw: bytes, where: str, at: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{where}: byte {at}: a name is not UTF-8") from None


class CodeIndex:
    """The class declarations of one archive's ``code/`` members, read on demand.

    ``raw`` is the mapped archive, ``members`` its validated members and ``prefix`` the
    archive's top-level folder (with its ``/``). Each member is read at most once; the
    declarations found are kept, the member's bytes are not.
    """

    __slots__ = ("_budget", "_files", "_left", "_members", "_prefix", "_raw", "_where")

    def __init__(
        self,
        raw: np.ndarray[Any, Any],
        members: dict[str, ZipMember],
        prefix: str,
        where: str,
        budget: ParseBudget,
    ) -> None:
        self._raw = raw
        self._members = members
        self._prefix = prefix
        self._where = where
        self._budget = budget
        self._files: dict[str, dict[str, ClassDecl]] = {}
        self._left = MAX_CODE_BYTES

    def member_name(self, module: str) -> str:
        """The member holding ``module``'s classes (``__torch__.a``: ``code/__torch__/a.py``)."""
        return f"{self._prefix}code/{module.replace('.', '/')}.py"

    def lookup(self, module: str, name: str) -> ClassDecl | None:
        """Class ``name`` of ``module`` as the code declares it; None when it does not.

        Raises FormatError for a member that cannot be read (see ``declarations``, and
        ``inflate`` for a deflated one) and LimitError once the code members read
        would exceed ``MAX_CODE_BYTES`` together.
        """
        classes = self._files.get(module)
        if classes is None:
            classes = self._files[module] = self._read(module)
        return classes.get(name)

    def _read(self, module: str) -> dict[str, ClassDecl]:
        self._budget.charge(OBJECT_BYTES + TEXT_BYTES + len(module), "code declarations")
        member = self._members.get(self.member_name(module))
        if member is None:
            return {}
        where = f"{self._where}: {member.name[:200]}"
        if member.size > self._left:
            raise LimitError(
                f"{where}: {member.size} bytes of code would take the code members read past "
                f"the cap of {MAX_CODE_BYTES} bytes"
            )
        self._left -= member.size
        if member.method == DEFLATED:
            text = inflate(self._raw, member, member.size, where)
        else:
            text = stored_bytes(self._raw, member)
        return declarations(memoryview(text), where, self._budget)  # type: ignore[arg-type]
