"""Accelerated readers for large YAML documents, exact to PyYAML or declining: JSON
(:func:`load_json`) and, below, block-style YAML through rapidyaml.

PyYAML (even with libyaml) reads a 4 MB configuration in about 13 s on the
reference machine; rapidyaml (PyPI ``rapidyaml``, the optional ``fast-yaml``
extra) parses it in about 0.2 s and writes it out as JSON, which the standard
library reads in C. The two parsers do not follow the same YAML version: PyYAML
implements YAML 1.1 (``yes`` is a boolean, ``010`` octal, ``1e5`` a string) and
rapidyaml YAML 1.2, and rapidyaml accepts a few documents PyYAML refuses. So
this reader takes a document only when it can show that the result is the one
:mod:`kbear.config`'s PyYAML loader would build, and otherwise raises
:class:`Declined`, upon which the caller reads the document with PyYAML (which
also writes every error message):

- the text holds nothing where the two differ or that PyYAML refuses: tags,
  anchors and aliases, block scalars, directives, several documents (one
  leading ``---`` is allowed), flow collections other than the empty ``[]`` and
  ``{}`` (and those followed by more than a comment on their line), a quoted
  scalar followed on its line by more than a key's ``:`` or a comment, a
  quoted scalar running over several lines, tabs, carriage returns,
  backslashes, a byte order mark, non-printable characters, YAML 1.1 line
  breaks, a node starting with one of ``!&*@`|>%?`` after whitespace, lines of
  1024 characters or more (PyYAML's simple key limit);
- every plain scalar written out as a JSON number is an int or a float by
  PyYAML's own implicit resolvers, and its written text is known (rapidyaml
  writes ``.5`` as ``0.5``: a float starting ``0.`` or holding ``.0`` is
  declined), so that the number keeps it (as :class:`kbear.config._documents._YamlInt` /
  ``_YamlFloat`` do);
- no JSON string, key or value, is text that PyYAML's resolvers would read as
  something else than a string (``yes``, ``~``, ``0x1F``, ``1_000``, ``<<``):
  rapidyaml quotes such plain scalars, and a quoted one cannot be told apart;
- no mapping repeats a key (PyYAML's loader reports it).

These rules were checked against PyYAML on random and randomly damaged
documents (``tests/config/test_fastyaml.py``): no document was read differently, and
none that PyYAML refuses was taken.

A document rapidyaml cannot parse is declined too; rapidyaml then prints its
own two-line diagnostic on the process's standard error (it cannot be turned
off from Python), which is why the caller uses this reader only for large
documents.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from typing import Any

import yaml

# Whether the optional fast-yaml extra is installed; rapidyaml itself (20 ms) is
# imported with the first large file.
AVAILABLE = importlib.util.find_spec("ryml") is not None


class Declined(ValueError):
    """The document is left to PyYAML."""


# What the text may not hold (see the module docstring); a false alarm only
# costs speed. Each check is guarded by a plain substring test, which is about
# ten times faster than the regular expression on a document without the
# characters concerned.
_FORBIDDEN_CHARS = re.compile(r"[\t\\\r\x85\u2028\u2029\ufeff]")
# An indicator where a node may start: after whitespace, as PyYAML scans them
# (``a != b`` is declined too, which costs speed only).
_INDICATORS = "!&*@`|>%?"
_INDICATOR_AFTER_SPACE = {c: re.compile(rf"(?:^|\s){re.escape(c)}", re.MULTILINE) for c in _INDICATORS}
_DOCUMENT_MARKER = re.compile(r"^(?:---|\.\.\.)(?:\s|$)", re.MULTILINE)
# An empty flow collection with more than a comment after it on its line
# (``- [] - x``: PyYAML refuses what follows, rapidyaml reads it).
_FLOW_THEN_MORE = re.compile(r"(?:\[\]|\{\})(?![ ]*$|[ ]+#)", re.MULTILINE)
# A quoted scalar followed on its line by more than a key's ``:``, a comment or
# spaces (``- '0:'  - x``: PyYAML refuses it, rapidyaml reads it).
_QUOTED_THEN_MORE = re.compile(
    r"(?:^|[-:?] )[ ]*(?:'(?:[^'\n]|'')*+'|\"[^\"\n]*+\")(?![ ]*(?::(?: |$)|$)|[ ]+#)", re.MULTILINE
)
# A quoted scalar opened and not closed on its line (PyYAML refuses some such
# keys that rapidyaml accepts).
_OPEN_QUOTE = re.compile(r"(?:^|[-:?] )[ ]*(?:'(?:[^'\n]|'')*|\"[^\"\n]*)$", re.MULTILINE)
# PyYAML reads a simple key only when it is shorter than 1024 characters.
_LONGEST_LINE = 1023
# rapidyaml writes ``.5`` as ``0.5`` and ``1.`` as ``1.0``: such a float's
# written text cannot be told from the JSON.
_REWRITTEN_FLOAT = re.compile(r"^[-+]?0\.|\.0(?:[eE]|$)")

_Resolvers = dict[Any, list[tuple[str, re.Pattern[str]]]]


def _declines(text: str) -> bool:
    """Whether the text holds something the two parsers may read differently."""
    if _FORBIDDEN_CHARS.search(text) or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return True
    # Flow style is taken only as the empty ``[]`` and ``{}``.
    for opening, closing in ("[]", "{}"):
        empty = text.count(opening + closing)
        if text.count(opening) != empty or text.count(closing) != empty:
            return True
    if ("[]" in text or "{}" in text) and _FLOW_THEN_MORE.search(text):
        return True
    if any(c in text and _INDICATOR_AFTER_SPACE[c].search(text) for c in _INDICATORS):
        return True
    if ("---" in text or "..." in text) and _DOCUMENT_MARKER.search(text):
        return True
    if ("'" in text or '"' in text) and (_OPEN_QUOTE.search(text) or _QUOTED_THEN_MORE.search(text)):
        return True
    return max(map(len, text.split("\n"))) > _LONGEST_LINE


def _candidate_strings(resolvers: _Resolvers) -> re.Pattern[str]:
    """JSON strings (their text as group 1) whose first character is one that
    PyYAML's implicit resolvers look at; ``""`` is checked apart."""
    firsts = "".join(sorted(k for k in resolvers if isinstance(k, str) and len(k) == 1))
    return re.compile(rf'"([{re.escape(firsts)}][^"\\]*)"')


def _tag_pattern(resolvers: _Resolvers, tag: str) -> re.Pattern[str]:
    for first_resolvers in resolvers.values():
        for t, regexp in first_resolvers:
            if t == tag:
                return regexp
    raise RuntimeError(f"PyYAML has no implicit resolver for {tag}")


class Reader:
    """Reads documents as the loader whose implicit resolvers and number types are
    given would, or declines.

    Args:
        resolvers: a PyYAML ``Resolver.yaml_implicit_resolvers`` table (first
            character -> list of (tag, compiled pattern)).
        make_int: builds the int for an integer's written text.
        make_float: builds the float for a float's written text.
    """

    def __init__(
        self,
        resolvers: _Resolvers,
        make_int: Callable[[str], int],
        make_float: Callable[[str], float],
    ) -> None:
        self._resolvers = resolvers
        self._candidates = _candidate_strings(resolvers)
        self._int = _tag_pattern(resolvers, "tag:yaml.org,2002:int")
        self._float = _tag_pattern(resolvers, "tag:yaml.org,2002:float")
        self._make_int = make_int
        self._make_float = make_float

    def load(self, text: str) -> Any:
        """The document's data, as PyYAML's loader would build it.

        Raises:
            Declined: the document is not provably read alike, or rapidyaml is
                not installed, or cannot parse it.
        """
        if not AVAILABLE:
            raise Declined("rapidyaml is not installed")
        if text.startswith("---\n"):
            text = text[4:]
        if not text.strip() or _declines(text):
            raise Declined("holds text the two parsers may read differently")
        import ryml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        try:
            tree = ryml.parse_in_arena(text.encode())
        except Exception as exc:  # ryml raises its own exception types
            raise Declined(f"rapidyaml: {exc}") from None
        root = tree.root_id()
        if tree.is_stream(root) or tree.is_doc(root) or not tree.is_container(root):
            raise Declined("not a single mapping or sequence")
        out = ryml.emit_json(tree)
        if self._non_string(out):
            raise Declined("a string PyYAML reads as another type")
        try:
            return json.loads(
                out,
                object_pairs_hook=_unique,
                parse_int=self._int_value,
                parse_float=self._float_value,
                parse_constant=_refuse,
            )
        except (ValueError, RecursionError) as exc:
            raise Declined(str(exc)) from None

    def _non_string(self, out: str) -> bool:
        """Whether a string of the JSON, key or value, is text PyYAML's resolvers
        would read as something else (``yes``, ``~``, ``0x1F``, ``<<``): rapidyaml
        quotes such plain scalars, so quoted and plain cannot be told apart."""
        if '""' in out:  # an empty plain scalar is null
            return True
        resolvers = self._resolvers
        for match in self._candidates.finditer(out):
            value = match.group(1)
            for tag, regexp in resolvers.get(value[0], ()):
                if tag != "tag:yaml.org,2002:str" and regexp.match(value):
                    return True
        return False

    def _int_value(self, text: str) -> int:
        if not self._int.match(text):
            raise Declined(f"{text!r} is no YAML 1.1 integer")
        return self._make_int(text)

    def _float_value(self, text: str) -> float:
        if not self._float.match(text) or _REWRITTEN_FLOAT.search(text):
            raise Declined(f"{text!r}: no YAML 1.1 float, or maybe not as written")
        return self._make_float(text)


def load_json(text: str) -> Any:
    """A document written as JSON (a YAML subset: ``{"topics": [...]}``), parsed by
    the standard library's json module, about 40 times faster than PyYAML on large
    generated files. Anything it cannot take exactly as YAML would (duplicate keys,
    floats, non-JSON syntax) is declined.

    Raises:
        Declined: the document is not such JSON.
    """
    try:
        # a float is declined: YAML keeps a number's text as written ("1.10" stays "1.10")
        return json.loads(text, object_pairs_hook=_unique, parse_float=_refuse, parse_constant=_refuse)
    except (ValueError, RecursionError) as exc:
        raise Declined(str(exc)) from None


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise Declined("duplicate key")  # the YAML parser reports it with its line
    return out


def _refuse(text: str) -> Any:
    raise Declined(text)
