"""Reading the documents of a configuration directory (private).

YAML through libyaml's parser with PyYAML's safe semantics, refusing duplicate
keys and keeping the written text of numbers; files written as JSON through the
json module; large block-style files through rapidyaml when it provably reads
them as PyYAML does (:mod:`kbear.config._fastyaml`); why a file cannot be read
(:func:`parse_document`: encoding, YAML syntax with line and column); the list of
entries a document holds (:func:`entries_of`); and the digests: of a directory's
files (the watcher compares them) and of documents given already parsed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kbear._secrets import REDACTED, looks_secret
from kbear.config import _fastyaml

CLUSTERS_FILE = "clusters.yaml"
TOPICS_FILE = "topics.yaml"
CONSUMER_GROUPS_FILE = "consumer-groups.yaml"
ROUTE_RULES_FILE = "route-rules.yaml"
#: The files of a configuration directory, in load order.
CONFIG_FILES = (CLUSTERS_FILE, TOPICS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE)
#: The files a configuration cannot do without.
REQUIRED_FILES = frozenset({CLUSTERS_FILE, ROUTE_RULES_FILE})
#: Each file's one top-level key, holding its list of entries.
_TOP_KEYS = {
    CLUSTERS_FILE: "clusters",
    TOPICS_FILE: "topics",
    CONSUMER_GROUPS_FILE: "consumer-groups",
    ROUTE_RULES_FILE: "route-rules",
}


class _YamlInt(int):
    """A YAML integer that remembers how it was written (``010``, ``1_000``)."""

    source: str


class _YamlFloat(float):
    """A YAML float that remembers how it was written (``1.10`` is not ``1.1``)."""

    source: str


_Number = TypeVar("_Number", _YamlInt, _YamlFloat)


def _written(kind: type[_Number], value: float, source: str) -> _Number:
    """``value`` as a ``kind`` remembering the text ``source`` it was read from."""
    number = kind(value)
    number.source = source
    return number


class _Constructor(yaml.constructor.SafeConstructor):
    """PyYAML's SafeConstructor, refusing duplicate mapping keys (PyYAML keeps the last
    silently), keeping the written text of numbers."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key; SafeLoader reports it below
                duplicate = False
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A value PyYAML cannot build (an integer of more than 4300 digits, an
        # explicit ``!!timestamp`` that is no date) raises a bare ValueError:
        # give it the node's line and column like any other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {_brief_error(exc)}", node.start_mark
            ) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        return _written(_YamlInt, super().construct_yaml_int(node), str(node.value))

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        return _written(_YamlFloat, super().construct_yaml_float(node), str(node.value))


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor("tag:yaml.org,2002:float", _Constructor.construct_yaml_float)  # type: ignore[type-var]


class _Resolver(yaml.resolver.Resolver):
    """Meta values are strings: a date such as ``since: 2024-01-01`` stays the text
    written, rather than becoming a datetime that no CRRL condition can equal."""

    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML's class-level table)
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


class _UniqueKeyLoader(yaml.SafeLoader, _Constructor, _Resolver):
    """The pure-Python loader: PyYAML's SafeLoader with :class:`_Constructor` and
    :class:`_Resolver` (which come before PyYAML's constructor and resolver in its MRO)."""


_fast_loader: type[Any] | None
try:
    from yaml._yaml import CParser as _CParser  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # PyYAML built without libyaml
    _fast_loader = None
else:

    class _FastUniqueKeyLoader(  # type: ignore[misc,unused-ignore]
        yaml.composer.Composer, _CParser, _Constructor, _Resolver
    ):
        """libyaml's scanner and parser (about 10 times faster on a large file) under
        PyYAML's Python composer: libyaml's own composer recurses in C without a
        depth check, so that a document nested 100,000 levels deep would crash the
        process; the Python one raises RecursionError."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            _Resolver.__init__(self)

    _fast_loader = _FastUniqueKeyLoader


_fast_reader = _fastyaml.Reader(
    _Resolver.yaml_implicit_resolvers,
    lambda text: _written(_YamlInt, int(text), text),
    lambda text: _written(_YamlFloat, float(text), text),
)
# Documents from this size (in characters) are first offered to rapidyaml, when
# installed: below it PyYAML takes well under a second, and a hand-written file
# with a syntax error gets no second diagnostic from rapidyaml on stderr.
_FAST_YAML_MIN_CHARS = 256 * 1024


def _load_yaml(text: str) -> Any:
    """Parse one YAML document.

    A document that is plain JSON is read with the json module. A large one
    (from 256 KiB) is offered to :mod:`kbear.config._fastyaml` (rapidyaml, the optional
    ``fast-yaml`` extra), which reads it exactly as below or declines. Otherwise
    libyaml parses when it is available; any error is re-read with the
    pure-Python parser, so that messages (line, column, reason) do not depend
    on whether libyaml or rapidyaml is installed.
    """
    if text.lstrip()[:1] == "{":
        try:
            return _fastyaml.load_json(text)
        except _fastyaml.Declined:
            pass
    if _fastyaml.AVAILABLE and len(text) >= _FAST_YAML_MIN_CHARS:
        try:
            return _fast_reader.load(text)
        except _fastyaml.Declined:
            pass
    if _fast_loader is not None:
        try:
            return _load_with(_fast_loader, text)
        except (yaml.YAMLError, RecursionError):
            pass
    return _load_with(_UniqueKeyLoader, text)


def _load_with(loader_class: type[Any], text: str) -> Any:
    loader = loader_class(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _brief_error(exc: ValueError) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return "an integer of more than 4300 digits"
    return text if len(text) <= 80 else f"{text[:77]}..."


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _yaml_problem(text: str, exc: yaml.MarkedYAMLError) -> str:
    """The message of a YAML syntax error: line, column and PyYAML's reason, with a
    hint for tabs, and without any quoted fragment of a line that holds a secret
    (PyYAML quotes tags and aliases: ``sasl.password: !abc`` would print ``'!abc'``)."""
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    what = " ".join(p for p in (exc.context, exc.problem) if p)
    lines = text.splitlines()
    marked = {m.line for m in (exc.problem_mark, exc.context_mark) if m is not None}
    if any(0 <= n < len(lines) and looks_secret(lines[n]) for n in marked):
        what = _QUOTED.sub(f"'{REDACTED}'", what) + " (value of a secret key hidden)"
    elif "'\\t'" in what:
        what += " (YAML does not allow tabs for indentation: indent with spaces)"
    return f"YAML syntax error at {where}{what}"


def parse_document(data: bytes) -> tuple[Any, str | None]:
    """(the document a file's bytes hold, None), or (None, why they cannot be read:
    not UTF-8, a YAML error with its line and column, nested too deeply)."""
    try:
        text = data.decode("utf-8-sig")
        return _load_yaml(text), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})"
    except yaml.MarkedYAMLError as exc:
        return None, _yaml_problem(text, exc)
    except yaml.reader.ReaderError as exc:  # a control character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return None, f"YAML error at line {line}, column {column}: character #x{code:04x} is not allowed"
    except yaml.YAMLError as exc:
        return None, f"YAML error: {exc}"
    except RecursionError:
        return None, "YAML nested too deeply to read"


def entries_of(name: str, doc: Any, problem: Callable[[str, str | None, str], None]) -> list[tuple[str, Any]]:
    """The entries of the list under the document's one top-level key, each with its
    label (``entry 3``); ``problem(file, entry, message)`` is told what is not a
    mapping, or a document of another shape."""
    top = _TOP_KEYS[name]
    if doc is None:
        if name in REQUIRED_FILES:
            problem(name, None, f"empty; expected a top-level key '{top}' holding a list")
        return []
    if not isinstance(doc, dict) or top not in doc:
        problem(name, None, f"expected a top-level key '{top}' holding a list")
        return []
    extra = sorted(str(k) for k in doc if k != top)
    if extra:
        problem(name, None, f"unexpected top-level key(s) {extra}; only '{top}' is read")
    items = doc[top]
    if items is None:
        return []
    if not isinstance(items, list):
        problem(name, None, f"'{top}' must be a list, got {type(items).__name__}")
        return []
    out = []
    for index, item in enumerate(items, 1):
        if isinstance(item, dict):
            out.append((f"entry {index}", item))
        else:
            problem(name, f"entry {index}", f"must be a mapping, got {type(item).__name__}")
    return out


def config_digest(directory: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) over the names and bytes of the configuration files present.

    Used by the watcher to tell a real change from a touched file.
    """
    h = hashlib.sha256()
    base = Path(directory)
    for name in CONFIG_FILES:
        try:
            data = (base / name).read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            # Unreadable (permissions, a directory): still a state of its own, so
            # the watcher tries to load it once and reports why, instead of failing.
            h.update(f"{name}\0unreadable\0{type(exc).__name__}".encode())
            continue
        _digest_update(h, name, data)
    return h.hexdigest()


def _digest_update(h: Any, name: str, data: bytes) -> None:
    h.update(name.encode())
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


def documents_digest(documents: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of parsed documents: their canonical JSON (sorted keys), by file name.

    Any document can be digested: a mapping whose keys are not all strings
    (``{1: "x", "bootstrap.servers": ...}``, which a YAML file can hold too) is
    written as its sorted (type, key) pairs, and a value JSON cannot write as its
    ``str()``; validation then reports what is wrong with such a document.
    """
    h = hashlib.sha256()
    for name in sorted(documents, key=str):
        data = json.dumps(_canonical(documents[name]), sort_keys=True, separators=(",", ":"), default=str)
        _digest_update(h, str(name), data.encode())
    return h.hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` with every mapping that has a key other than a string written as a
    tagged list of its (key type, key, value) triples in a fixed order, so that
    ``json.dumps(sort_keys=True)`` can write it (it cannot sort mixed key types)."""
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _canonical(v) for k, v in value.items()}
        pairs = [[type(k).__name__, str(k), _canonical(v)] for k, v in value.items()]
        return {"\u0000mapping": sorted(pairs, key=lambda p: (p[0], p[1]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def replace_file(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, as configuration files should be
    written: a temporary file in the same directory, then ``os.replace`` over
    ``path``. A reader (the watcher, another process) sees the old file or the new
    one, never a part of it. The new file is readable and writable by its owner only
    (mode 0600, :func:`tempfile.mkstemp`'s).

    Raises:
        OSError: the directory is not writable, the disk is full, ...; ``path`` is
            then unchanged and the temporary file removed.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
