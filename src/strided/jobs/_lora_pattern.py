"""PEFT's pattern keys, matched in time linear in the module name.

PEFT picks a module's ``rank_pattern`` / ``alpha_pattern`` entry with
``re.match(rf"(.*\\.)?({key})$", module)``. Python's backtracking engine can take
minutes on a short key (``a{0,999}`` written 28 times), so strided never hands a key
from an adapter to it for matching. ``KeyPattern`` parses that same expression,
builds a Thompson automaton from it (bounded repetitions unrolled, the whole under
``MAX_PATTERN_STATES``) and runs it over the name with sets of states, the step from
each set cached (a DFA built lazily, as RE2 does): at most ``len(name)`` steps of
``MAX_PATTERN_STATES`` work each, one dictionary lookup each once warm.

The language is the one ``re`` gives the expression: literals and escapes, ``.``,
character classes and ``\\d \\w \\s`` (each tested on one character by ``re`` itself, so
their Unicode meaning is ``re``'s), groups ``(...)``, ``(?:...)``, ``(?P<name>...)``,
``|``, the quantifiers ``* + ? {m} {m,} {,n} {m,n}`` greedy or lazy (laziness does not
change whether a match exists), and the anchors ``^ $ \\A \\Z``. What an automaton
cannot do in linear time, or what changes the meaning of the rest (back-references,
look-arounds, conditionals, atomic groups, possessive quantifiers, ``\\b``, inline
flags, comments), is refused, as is a key that does not compile: a FormatError naming
the key, before anything is matched.
"""

from __future__ import annotations

import re
import warnings
from typing import NamedTuple

from .._core.errors import FormatError, LimitError
from .._core.limits import MAX_PATTERN_CHARS, MAX_PATTERN_DEPTH, MAX_PATTERN_STATES

__all__ = ["KeyPattern"]

_DFA_STATES = 256  # cached sets of automaton states per key (the cache restarts past it)
_QUANTIFIER = re.compile(r"\{([0-9]*)(,([0-9]*))?\}")
_GROUP_NAME = re.compile(r"\?P<[^>]*>")


class _Atom(NamedTuple):
    """One character's test: a literal, or an expression of one character for ``re``."""

    literal: str | None
    pattern: re.Pattern[str] | None

    def accepts(self, char: str) -> bool:
        if self.literal is not None:
            return char == self.literal
        assert self.pattern is not None
        return self.pattern.fullmatch(char) is not None


# The parsed expression: ("char", atom index) | ("assert", kind) | ("cat", [nodes]) |
# ("alt", [nodes]) | ("rep", node, low, high or None).
_Node = tuple[object, ...]
_Flags = tuple[bool, bool, bool]  # at the start, at the end, before a final newline


class _Parser:
    """Recursive descent over the expression; ``re`` has already accepted it, so only
    what is refused needs an error. Nesting is capped, so recursion is bounded."""

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.pos = 0
        self.atoms: list[_Atom] = []

    def refuse(self, what: str) -> FormatError:
        return FormatError(
            f"{self.where}: {what} cannot be matched in time linear in the name (refused)"
        )

    def alternation(self, depth: int) -> _Node:
        if depth > MAX_PATTERN_DEPTH:
            raise self.refuse(f"groups nested more than {MAX_PATTERN_DEPTH} deep")
        branches = [self.sequence(depth)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            branches.append(self.sequence(depth))
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self, depth: int) -> _Node:
        items: list[_Node] = []
        while self.pos < len(self.text) and self.text[self.pos] not in "|)":
            items.append(self.quantified(self.atom(depth)))
        return ("cat", items)

    def atom(self, depth: int) -> _Node:
        text, pos = self.text, self.pos
        char = text[pos]
        if char == "(":
            self.pos += 1
            if text.startswith("?:", self.pos):
                self.pos += 2
            elif text.startswith("?P<", self.pos):
                found = _GROUP_NAME.match(text, self.pos)
                assert found is not None  # re compiled it
                self.pos = found.end()
            elif text.startswith("?", self.pos):
                raise self.refuse(f"the construct {text[pos : pos + 4]!r}...")
            inner = self.alternation(depth + 1)
            self.pos += 1  # the closing parenthesis
            return inner
        if char == "[":
            end = pos + 1
            if text.startswith("^", end):
                end += 1
            if text.startswith("]", end):
                end += 1
            while text[end] != "]":
                end += 2 if text[end] == "\\" else 1
            self.pos = end + 1
            return self.expression(text[pos : end + 1])
        if char == ".":
            self.pos += 1
            return self.expression(".")
        if char in "^$":
            self.pos += 1
            return ("assert", "start" if char == "^" else "end")
        if char == "\\":
            return self.escape()
        self.pos += 1
        return self.literal(char)

    def escape(self) -> _Node:
        text, pos = self.text, self.pos
        kind = text[pos + 1]
        if kind in "AZ":
            self.pos += 2
            return ("assert", "start" if kind == "A" else "end_z")
        if kind in "bB" or kind in "123456789":
            raise self.refuse(f"the escape {text[pos : pos + 2]!r}")
        if not kind.isascii() or not kind.isalnum():
            self.pos += 2
            return self.literal(kind)
        length = {"x": 4, "u": 6, "U": 10}.get(kind, 2)
        if kind == "N":
            length = text.index("}", pos) + 1 - pos
        elif kind == "0":
            length = 2
            while length < 4 and text[pos + length : pos + length + 1] in tuple("01234567"):
                length += 1
        self.pos += length
        return self.expression(text[pos : pos + length])

    def literal(self, char: str) -> _Node:
        self.atoms.append(_Atom(char, None))
        return ("char", len(self.atoms) - 1)

    def expression(self, text: str) -> _Node:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set": re's own reading holds
            self.atoms.append(_Atom(None, re.compile(text)))
        return ("char", len(self.atoms) - 1)

    def quantified(self, node: _Node) -> _Node:
        text, pos = self.text, self.pos
        if pos >= len(text):
            return node
        char = text[pos]
        low: int
        high: int | None
        if char in "*+?":
            low, high = (0 if char != "+" else 1), (1 if char == "?" else None)
            self.pos += 1
        elif char == "{" and not text.startswith("{}", pos):
            found = _QUANTIFIER.match(text, pos)
            if found is None:  # not a quantifier: a literal brace, read next
                return node
            low = int(found.group(1) or 0)
            if found.group(2) is None:
                high = low
            else:
                high = int(found.group(3)) if found.group(3) else None
            self.pos = found.end()
        else:
            return node
        if text.startswith("+", self.pos):
            raise self.refuse("a possessive quantifier")
        if text.startswith("?", self.pos):
            self.pos += 1  # lazy: the same strings match
        return ("rep", node, low, high)


def _size(node: _Node, budget: int) -> int:
    """Automaton states ``node`` needs (more than ``budget`` means too many: stops early)."""
    kind = node[0]
    if kind in ("char", "assert"):
        return 1
    if kind in ("cat", "alt"):
        children = node[1]
        assert isinstance(children, list)
        total = len(children)  # alternatives' splits (an upper bound for "cat")
        for child in children:
            total += _size(child, budget)
            if total > budget:
                return total
        return total
    child, low, high = node[1], node[2], node[3]
    assert isinstance(child, tuple) and isinstance(low, int)
    assert high is None or isinstance(high, int)
    copies = low + 1 if high is None else max(low, 1) + (high - low)
    inner = _size(child, budget)
    return inner * copies + copies + 1


class _Automaton:
    """A Thompson automaton: each state is a character test, a split, an assertion or
    the match; built backwards from the continuation, so no patching is needed."""

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.arg: list[object] = []
        self.out: list[list[int]] = []

    def add(self, kind: str, arg: object, out: list[int]) -> int:
        self.kind.append(kind)
        self.arg.append(arg)
        self.out.append(out)
        return len(self.kind) - 1

    def build(self, node: _Node, then: int) -> int:
        kind = node[0]
        if kind == "char" or kind == "assert":
            return self.add(str(kind), node[1], [then])
        if kind == "cat":
            children = node[1]
            assert isinstance(children, list)
            for child in reversed(children):
                then = self.build(child, then)
            return then
        if kind == "alt":
            children = node[1]
            assert isinstance(children, list)
            return self.add("split", None, [self.build(child, then) for child in children])
        child, low, high = node[1], node[2], node[3]
        assert isinstance(child, tuple) and isinstance(low, int)
        if high is None:  # child{low,}: low copies, then a loop
            loop = self.add("split", None, [])
            self.out[loop] = [self.build(child, loop), then]
            then = loop
        else:  # child{low,high}: high - low nested optional copies
            assert isinstance(high, int)
            rest = then
            for _ in range(high - low):
                rest = self.add("split", None, [self.build(child, rest), then])
            then = rest
        for _ in range(low):
            then = self.build(child, then)
        return then


class KeyPattern:
    """A ``rank_pattern`` / ``alpha_pattern`` key, matched as PEFT matches it.

    ``KeyPattern(key, where)`` checks and compiles (FormatError naming ``where`` and the
    key when it does not compile or cannot be matched in linear time; LimitError when
    longer than ``MAX_PATTERN_CHARS``); ``matches(module)`` is
    ``re.match(rf"(.*\\.)?({key})$", module) is not None``, in linear time.
    """

    def __init__(self, key: str, where: str) -> None:
        where = f"{where} key {_short(key)}"
        if len(key) > MAX_PATTERN_CHARS:
            raise LimitError(f"{where}: longer than {MAX_PATTERN_CHARS} characters")
        text = rf"(.*\.)?({key})$"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                re.compile(text)
        except (re.error, RecursionError, OverflowError, ValueError) as error:
            raise FormatError(f"{where}: not a regular expression ({error})") from None
        parser = _Parser(text, where)
        tree = parser.alternation(0)
        if _size(tree, MAX_PATTERN_STATES) > MAX_PATTERN_STATES:
            raise parser.refuse(f"an expression of more than {MAX_PATTERN_STATES} states")
        self.key = key
        self._atoms = parser.atoms
        self._automaton = _Automaton()
        self._match = self._automaton.add("match", None, [])
        self._start = self._automaton.build(tree, self._match)
        self._tests: dict[tuple[int, str], bool] = {}
        self._known: dict[frozenset[int], frozenset[int]] = {}
        self._steps: dict[tuple[frozenset[int], str, _Flags], frozenset[int]] = {}

    def matches(self, name: str) -> bool:
        """Whether PEFT's ``re.match(rf"(.*\\.)?({key})$", name)`` finds a match."""
        size = len(name)
        current = self._closure([self._start], _flags(name, 0, size))
        for index, char in enumerate(name):
            # re.match needs a match of a prefix only: the expression's own anchors
            # (the ``$`` PEFT appends) decide where one may end.
            if self._match in current:
                return True
            if not current:
                return False
            flags = _flags(name, index + 1, size)
            found = self._steps.get((current, char, flags))
            if found is None:
                moved = [
                    self._automaton.out[state][0]
                    for state in current
                    if self._automaton.kind[state] == "char" and self._accepts(state, char)
                ]
                found = self._closure(moved, flags)
                self._steps[(current, char, flags)] = found
            current = found
        return self._match in current

    def _accepts(self, state: int, char: str) -> bool:
        atom = self._automaton.arg[state]
        assert isinstance(atom, int)
        known = self._tests.get((atom, char))
        if known is None:
            known = self._tests[(atom, char)] = self._atoms[atom].accepts(char)
        return known

    def _closure(self, states: list[int], flags: _Flags) -> frozenset[int]:
        """The character-test and match states reachable without reading a character."""
        at_start, at_end, before_newline = flags
        seen: set[int] = set()
        found: set[int] = set()
        stack = list(states)
        automaton = self._automaton
        while stack:
            state = stack.pop()
            if state in seen:
                continue
            seen.add(state)
            kind = automaton.kind[state]
            if kind in ("char", "match"):
                found.add(state)
            elif kind == "split":
                stack.extend(automaton.out[state])
            else:
                test = automaton.arg[state]
                if (
                    (test == "start" and at_start)
                    or (test == "end" and (at_end or before_newline))
                    or (test == "end_z" and at_end)
                ):
                    stack.append(automaton.out[state][0])
        return self._intern(frozenset(found))

    def _intern(self, states: frozenset[int]) -> frozenset[int]:
        """One object per set (its hash is cached); the cache of sets and steps starts
        over when it holds too many, so memory stays bounded."""
        known = self._known.get(states)
        if known is not None:
            return known
        if len(self._known) >= _DFA_STATES:
            self._known.clear()
            self._steps.clear()
        self._known[states] = states
        return states


def _flags(name: str, index: int, size: int) -> _Flags:
    return (index == 0, index == size, index == size - 1 and name[-1] == "\n")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
