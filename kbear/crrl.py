"""CRRL, the Cluster Route Rule Language: tokenizer, parser, statements, evaluation.

Grammar (``docs/reference/crrl-spec.md``: the reference's, extended with the topic remap and quoting)::

    statement := "use" "cluster" NAME [ "," "topic" NAME ] [ "when" condition { "and" condition } ]
    condition := NAME "=" NAME
    NAME      := WORD | QUOTED
    WORD      := one or more characters other than whitespace, ',', '=' and '"'
    QUOTED    := '"' { any character but '"' and '\\' | '\\"' | '\\\\' } '"'

Keywords (``use cluster topic when and``) are whole, lowercase, unquoted words:
``AND``, ``sandbox`` or ``brand`` are ordinary words. A keyword cannot be used
unquoted where a name is expected; write it as ``"and"``. Whitespace (spaces,
tabs) between tokens is free and never significant.

Example::

    >>> from kbear import crrl
    >>> s = crrl.parse('use  cluster prod when client.env=prod\\tand topic.bu="hotel and spa"')
    >>> str(s)
    'use cluster prod when client.env=prod and topic.bu="hotel and spa"'
    >>> s.matches({"client.env": "prod", "topic.bu": "hotel and spa"})
    True
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["KEYWORDS", "Condition", "CrrlSyntaxError", "Statement", "parse"]

#: Reserved words of CRRL. Matching is exact and case-sensitive.
KEYWORDS = frozenset({"use", "cluster", "topic", "when", "and"})

_SPECIAL = frozenset(',="')
#: one token after white space (str.isspace's): punctuation, a quoted name (its
#: escapes checked apart: only ``\"`` and ``\\``) or a bare word
_TOKEN = re.compile(r'\s*(?P<token>[,=]|"(?P<body>(?:[^"\\]|\\.)*)(?P<close>"?)|[^\s,="]+)', re.DOTALL)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


class CrrlSyntaxError(ValueError):
    """A CRRL statement that does not parse.

    Attributes:
        text: the statement as given.
        column: 1-based column (in characters) where parsing stopped.
        expected: what the parser expected there, e.g. ``"'and' or end of rule"``.
        found: what it found there, e.g. ``"'AND'"`` or ``"end of rule"``.

    ``str(err)`` reads ``expected 'and' or end of rule at column 31, found 'AND'``.
    """

    def __init__(self, text: str, column: int, expected: str, found: str) -> None:
        self.text = text
        self.column = column
        self.expected = expected
        self.found = found
        super().__init__(f"expected {expected} at column {column}, found {found}")

    def __reduce__(self) -> tuple[type[CrrlSyntaxError], tuple[str, int, str, str]]:
        # Rebuilt from its fields (pickle, copy), not from the formatted message.
        return type(self), (self.text, self.column, self.expected, self.found)


class _Kind(Enum):
    WORD = "word"
    QUOTED = "quoted"
    COMMA = "','"
    EQUALS = "'='"
    END = "end of rule"


_PUNCTUATION = {",": _Kind.COMMA, "=": _Kind.EQUALS}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: _Kind
    value: str
    column: int  # 1-based

    def describe(self) -> str:
        if self.kind is _Kind.END:
            return "end of rule"
        if self.kind is _Kind.QUOTED:
            return _quote(self.value, force=True)
        return f"'{self.value}'"

    def is_keyword(self, word: str) -> bool:
        return self.kind is _Kind.WORD and self.value == word


def _tokens(text: str) -> Iterator[_Token]:
    pos = 0
    while match := _TOKEN.match(text, pos):
        token, body, column = match["token"], match["body"], match.start("token") + 1
        pos = match.end()
        if body is None:
            yield _Token(_PUNCTUATION.get(token, _Kind.WORD), token, column)
            continue
        for escape in _ESCAPE.finditer(body):  # the text's index of the backslash is column + start
            if escape[1] not in '"\\':
                raise CrrlSyntaxError(
                    text, column + escape.start() + 1, "'\\\"' or '\\\\'", f"'\\{escape[1]}'"
                )
        if not match["close"]:
            if pos < len(text):  # a backslash ends the text
                raise CrrlSyntaxError(text, pos + 1, "'\\\"' or '\\\\'", "end of rule")
            raise CrrlSyntaxError(text, len(text) + 1, "closing '\"'", "end of rule")
        yield _Token(_Kind.QUOTED, _ESCAPE.sub(r"\1", body), column)
    yield _Token(_Kind.END, "", len(text) + 1)


def _quote(value: str, *, force: bool = False) -> str:
    """Print a name as CRRL: bare when it reads back as the same word, quoted otherwise."""
    needs = (
        force
        or not value
        or value in KEYWORDS
        or any(c.isspace() or c in _SPECIAL or c == "\\" for c in value)
    )
    if not needs:
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class Condition:
    """One ``key=value`` test of a ``when`` clause.

    Attributes:
        key: the route factor, e.g. ``client.env`` (see the CRRL spec, "Route factors").
        value: the value the factor must equal exactly (case-sensitive).
    """

    key: str
    value: str

    def __str__(self) -> str:
        return f"{_quote(self.key)}={_quote(self.value)}"


@dataclass(frozen=True, slots=True)
class Statement:
    """A parsed CRRL statement.

    Attributes:
        cluster: the cluster id the statement routes to.
        topic: the physical topic name of ``, topic <name>`` (a remap), or None
            to keep the topic the client asked for.
        conditions: the ``when`` conditions, all of which must hold; empty for
            an unconditional statement.
    """

    cluster: str
    topic: str | None = None
    conditions: tuple[Condition, ...] = ()

    def matches(self, factors: Mapping[str, str]) -> bool:
        """Whether every condition holds for ``factors``.

        Args:
            factors: route factors (``client.id``, ``topic.bu``, ...) to values.

        Returns:
            True when each condition's factor is present and equal (exact,
            case-sensitive) to its value; an absent factor never matches. A
            statement without conditions always matches.
        """
        return all(factors.get(cond.key) == cond.value for cond in self.conditions)

    def __str__(self) -> str:
        out = f"use cluster {_quote(self.cluster)}"
        if self.topic is not None:
            out += f", topic {_quote(self.topic)}"
        if self.conditions:
            out += " when " + " and ".join(str(c) for c in self.conditions)
        return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.tok = next(self.tokens)

    def fail(self, expected: str) -> CrrlSyntaxError:
        return CrrlSyntaxError(self.text, self.tok.column, expected, self.tok.describe())

    def advance(self) -> None:
        self.tok = next(self.tokens)

    def keyword(self, word: str) -> None:
        if not self.tok.is_keyword(word):
            raise self.fail(f"'{word}'")
        self.advance()

    def name(self, what: str) -> str:
        tok = self.tok
        if tok.kind is _Kind.QUOTED or (tok.kind is _Kind.WORD and tok.value not in KEYWORDS):
            self.advance()
            return tok.value
        if tok.kind is _Kind.WORD:
            raise self.fail(f"{what} (quote a keyword used as a name)")
        raise self.fail(what)

    def statement(self) -> Statement:
        self.keyword("use")
        self.keyword("cluster")
        cluster = self.name("a cluster id")
        topic: str | None = None
        if self.tok.kind is _Kind.COMMA:
            self.advance()
            self.keyword("topic")
            topic = self.name("a topic name")
        conditions: list[Condition] = []
        if self.tok.is_keyword("when"):
            self.advance()
            conditions.append(self.condition())
            while self.tok.is_keyword("and"):
                self.advance()
                conditions.append(self.condition())
            expected_end = "'and' or end of rule"
        elif topic is None:
            expected_end = "',', 'when' or end of rule"
        else:
            expected_end = "'when' or end of rule"
        if self.tok.kind is not _Kind.END:
            raise self.fail(expected_end)
        return Statement(cluster, topic, tuple(conditions))

    def condition(self) -> Condition:
        key = self.name("a factor key")
        if self.tok.kind is not _Kind.EQUALS:
            raise self.fail("'='")
        self.advance()
        return Condition(key, self.name("a factor value"))


def parse(text: str) -> Statement:
    """Parse one CRRL statement.

    Args:
        text: the statement, e.g. ``use cluster prod when client.env=prod``.

    Returns:
        The :class:`Statement`; ``parse(str(s)) == s`` for every statement ``s``.

    Raises:
        CrrlSyntaxError: the text is not a statement; the error carries the
            1-based column and what was expected there.
    """
    return _Parser(text).statement()
