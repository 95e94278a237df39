"""The configuration model: the four YAML files of a kbear configuration directory.

A configuration directory holds (``../shared/spec/crrl.md``, "Where the data lives"):

``clusters.yaml`` (required)::

    clusters:
      - id: prod
        meta:
          bootstrap.servers: kafka-prod-1:9092,kafka-prod-2:9092
          security.protocol: SASL_SSL
          sasl.mechanism: PLAIN
          sasl.username: app
          sasl.password: ${PROD_KAFKA_PASSWORD}

``topics.yaml`` (optional)::

    topics:
      - id: orders
        meta:
          bu: hotel

``consumer-groups.yaml`` (optional)::

    consumer-groups:
      - id:
          groupName: billing
          topicId: orders
        meta:
          jobType: batch

``route-rules.yaml`` (required)::

    route-rules:
      - id: r1
        priority: 0
        meta:
          rule.isGlobal: true
        rule: use cluster prod

Each file has one top-level key holding a list. Meta keys are flat dotted
strings; scalar meta values become strings (YAML ``true`` becomes ``"true"``,
``3`` becomes ``"3"``; a number or a date keeps the text written, so ``1.10``
becomes ``"1.10"``, not ``"1.1"``). In ``clusters.yaml``, ``bootstrap.servers`` is required
and every other meta key is a librdkafka client property applied to every
client of that cluster; ``${NAME}`` in a cluster meta value is replaced by the
environment variable ``NAME`` (``$${`` writes a literal ``${``).

:func:`load_config` validates everything and raises one :class:`ConfigError`
listing every problem, each naming the file, the entry and the reason.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from kbear import _fastyaml, crrl
from kbear._secrets import REDACTED, looks_secret, redact

__all__ = [
    "CLUSTERS_FILE",
    "CONFIG_FILES",
    "CONSUMER_GROUPS_FILE",
    "ROUTE_RULES_FILE",
    "TOPICS_FILE",
    "ClusterConfig",
    "ConfigError",
    "ConfigProblem",
    "ConsumerGroupConfig",
    "KBearConfig",
    "RouteRule",
    "RuleKind",
    "TopicConfig",
    "config_digest",
    "load_config",
]

CLUSTERS_FILE = "clusters.yaml"
TOPICS_FILE = "topics.yaml"
CONSUMER_GROUPS_FILE = "consumer-groups.yaml"
ROUTE_RULES_FILE = "route-rules.yaml"
#: The files of a configuration directory, in load order.
CONFIG_FILES = (CLUSTERS_FILE, TOPICS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE)
_REQUIRED = frozenset({CLUSTERS_FILE, ROUTE_RULES_FILE})
_TOP_KEYS = {
    CLUSTERS_FILE: "clusters",
    TOPICS_FILE: "topics",
    CONSUMER_GROUPS_FILE: "consumer-groups",
    ROUTE_RULES_FILE: "route-rules",
}
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


# --------------------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem found in a configuration directory.

    Attributes:
        file: the file name (``route-rules.yaml``) or the directory.
        entry: the entry at fault (``rule 'r7'``, ``cluster 'prod'``, ``entry 3``) or None.
        message: what is wrong, e.g. ``key 'rule': expected 'and' ... at column 31``.
    """

    file: str
    entry: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.entry}" if self.entry else self.file
        return f"{where}: {self.message}"


class ConfigError(ValueError):
    """A configuration directory that cannot be used.

    Raised by :func:`load_config` (and so by ``Router.from_path`` and
    ``Router.reload``) with every problem found, not just the first.

    Attributes:
        problems: list of :class:`ConfigProblem`, in file order.
    """

    def __init__(self, problems: Iterable[ConfigProblem], directory: str | None = None) -> None:
        self.problems = list(problems)
        self.directory = directory
        head = f"invalid kbear configuration{f' in {directory}' if directory else ''}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head} ({len(self.problems)} problem(s)):\n{lines}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[ConfigProblem], str | None]]:
        # Rebuilt from its problems (pickle, copy), not from the formatted message.
        return type(self), (self.problems, self.directory)


# --------------------------------------------------------------------------- models


class _YamlInt(int):
    """A YAML integer that remembers how it was written (``010``, ``1_000``)."""

    source: str


class _YamlFloat(float):
    """A YAML float that remembers how it was written (``1.10`` is not ``1.1``)."""

    source: str


def _scalar_to_str(value: Any) -> Any:
    # A number becomes the text written in the file, so that a meta value
    # ``version: 1.10`` matches the CRRL condition ``topic.version=1.10``.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        source = getattr(value, "source", None)
        return source if isinstance(source, str) else str(value)
    return value


def _meta(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {(_scalar_to_str(k)): _scalar_to_str(v) for k, v in value.items()}
    return value


def _brief(value: Any) -> str:
    """A short, safe rendering of a bad value for an error message: never the
    repr of a whole (possibly huge, alias-multiplied) structure."""
    if isinstance(value, bool | int | float) and not isinstance(value, _YamlInt | _YamlFloat):
        text = repr(value)
    elif isinstance(value, _YamlInt | _YamlFloat):
        text = value.source
    elif isinstance(value, str):
        text = repr(value)
    else:
        return f"a {type(value).__name__}"
    return text if len(text) <= 40 else f"{text[:37]}..."


def _priority(value: Any) -> Any:
    # pydantic's lax int accepts True and "3"; a priority must be a YAML integer.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a non-negative integer, got {_brief(value)}")
    return int(value)


_Id = Annotated[str, BeforeValidator(_scalar_to_str), Field(min_length=1)]
_Meta = Annotated[dict[str, str], BeforeValidator(_meta)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ClusterConfig(_Model):
    """A cluster of ``clusters.yaml``.

    Attributes:
        id: the cluster id that rules name in ``use cluster <id>``.
        meta: every meta key, ``${NAME}`` already read from the environment;
            ``bootstrap.servers`` is always present. Secret values are hidden
            from ``repr``.
    """

    id: _Id
    meta: _Meta

    @property
    def bootstrap_servers(self) -> str:
        """The cluster's ``bootstrap.servers`` (librdkafka property), comma-separated host:port."""
        return self.meta["bootstrap.servers"]

    @property
    def client_properties(self) -> dict[str, str]:
        """librdkafka properties for every client of this cluster, ``bootstrap.servers`` included."""
        return dict(self.meta)

    def __repr_args__(self) -> Any:
        yield "id", self.id
        yield "meta", redact(self.meta)


class TopicConfig(_Model):
    """A topic of ``topics.yaml``: ``id`` is the topic name, ``meta`` feeds ``topic.<key>`` factors."""

    id: _Id
    meta: _Meta = {}


class ConsumerGroupId(_Model):
    """The identity of a CRRL consumer group: a Kafka group narrowed to one topic."""

    group_name: _Id = Field(alias="groupName")
    topic_id: _Id = Field(alias="topicId")


class ConsumerGroupConfig(_Model):
    """A consumer group of ``consumer-groups.yaml``; ``meta`` feeds ``consumerGroup.<key>`` factors."""

    id: ConsumerGroupId
    meta: _Meta = {}

    @property
    def group_name(self) -> str:
        """The Kafka consumer group (``group.id``)."""
        return self.id.group_name

    @property
    def topic_id(self) -> str:
        """The topic this entry narrows the group to."""
        return self.id.topic_id


class RuleKind(Enum):
    """The kind of a route rule, decided by its meta (CRRL spec, "Kinds of rule").

    The value is the rank among rules of equal priority: lower comes first.
    """

    CONSUMER_GROUP = 0
    TOPIC = 1
    GLOBAL = 2


class _RawRule(_Model):
    id: _Id
    priority: Annotated[int, BeforeValidator(_priority), Field(ge=0)] = 0
    meta: _Meta = {}
    rule: Annotated[str, BeforeValidator(_scalar_to_str)]


@dataclass(frozen=True, slots=True)
class RouteRule:
    """A validated rule of ``route-rules.yaml``.

    Attributes:
        id: the rule id.
        priority: non-negative integer; larger comes earlier in the chain.
        meta: the rule's meta, which decides its kind.
        statement: the parsed CRRL statement.
        kind: global, topic or consumer group.
        position: 0-based order of appearance in ``route-rules.yaml``; the last
            tie-breaker of the chain.
    """

    id: str
    priority: int
    meta: Mapping[str, str]
    statement: crrl.Statement
    kind: RuleKind
    position: int

    @property
    def topic_id(self) -> str | None:
        """The topic a topic or consumer-group rule applies to, else None."""
        if self.kind is RuleKind.TOPIC:
            return self.meta["topic.id"]
        if self.kind is RuleKind.CONSUMER_GROUP:
            return self.meta["consumerGroup.topicId"]
        return None

    @property
    def group_name(self) -> str | None:
        """The consumer group of a consumer-group rule, else None."""
        if self.kind is RuleKind.CONSUMER_GROUP:
            return self.meta["consumerGroup.groupName"]
        return None

    @property
    def sort_key(self) -> tuple[int, int, int]:
        """Chain order: priority descending, then consumer group > topic > global,
        then order of appearance in ``route-rules.yaml``."""
        return (-self.priority, self.kind.value, self.position)


@dataclass(frozen=True)
class KBearConfig:
    """A loaded, validated configuration directory.

    Attributes:
        directory: the directory it was read from (None when built in memory).
        clusters: cluster id -> :class:`ClusterConfig`, in file order.
        topics: topic id -> :class:`TopicConfig`.
        consumer_groups: (groupName, topicId) -> :class:`ConsumerGroupConfig`.
        rules: every :class:`RouteRule`, in file order.
        digest: SHA-256 (hex) of the files' bytes, see :func:`config_digest`.
    """

    directory: Path | None
    clusters: Mapping[str, ClusterConfig]
    topics: Mapping[str, TopicConfig]
    consumer_groups: Mapping[tuple[str, str], ConsumerGroupConfig]
    rules: tuple[RouteRule, ...]
    digest: str

    def topic_meta(self, topic_id: str) -> Mapping[str, str]:
        """The meta of ``topic_id`` in topics.yaml (empty when it is not there), without
        building its TopicConfig: what the router reads on every uncached lookup."""
        topics = self.topics
        if isinstance(topics, _TopicTable):
            return topics.meta(topic_id)
        conf = topics.get(topic_id)
        return {} if conf is None else conf.meta


# --------------------------------------------------------------------------- loading


def _plain_topic_meta(item: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(id, meta) of a topic entry already in canonical form (``id`` a non-empty
    string, ``meta`` absent or string -> string), which validation cannot refuse;
    None for anything else, which goes through full validation and its messages."""
    topic_id = item.get("id")
    meta = item.get("meta", {})
    if (
        type(topic_id) is not str
        or not topic_id
        or type(meta) is not dict
        or len(item) > 2
        or (len(item) == 2 and "meta" not in item)
    ):
        return None
    for key, value in meta.items():
        if type(key) is not str or type(value) is not str:
            return None
    return topic_id, meta


class _TopicTable(Mapping[str, "TopicConfig"]):
    """topics.yaml as a mapping topic id -> TopicConfig. Entries already in canonical
    form are kept as their meta and become TopicConfig on first access: building
    100,000 pydantic models up front costs more than loading the file."""

    def __init__(self, entries: dict[str, TopicConfig | tuple[tuple[str, str], ...]]) -> None:
        # Canonical entries are kept as tuples of (key, value) strings, which the
        # garbage collector stops tracking: 100,000 topics then cost it one dict, not
        # 100,000 (a full collection over them made every uncached lookup 2x slower).
        self._entries = entries

    def __getitem__(self, topic_id: str) -> TopicConfig:
        value = self._entries[topic_id]
        if isinstance(value, TopicConfig):
            return value
        return TopicConfig.model_construct(id=topic_id, meta=dict(value))

    def meta(self, topic_id: str) -> Mapping[str, str]:
        """The meta of ``topic_id`` ({} when absent), without building a TopicConfig."""
        value = self._entries.get(topic_id, ())
        return value.meta if isinstance(value, TopicConfig) else dict(value)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, topic_id: object) -> bool:
        return topic_id in self._entries

    def __repr__(self) -> str:
        return f"<{len(self)} topics>"


def _entry_id(item: Mapping[str, Any]) -> str | None:
    """The entry's ``id`` as the loader will read it, when it is a non-empty scalar."""
    value = _scalar_to_str(item.get("id"))
    return value if isinstance(value, str) and value else None


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
        value = _YamlInt(super().construct_yaml_int(node))
        value.source = str(node.value)
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        value = _YamlFloat(super().construct_yaml_float(node))
        value.source = str(node.value)
        return value


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor("tag:yaml.org,2002:float", _Constructor.construct_yaml_float)  # type: ignore[type-var]


class _Resolver(yaml.resolver.Resolver):
    """Meta values are strings: a date such as ``since: 2024-01-01`` stays the text
    written, rather than becoming a datetime that no CRRL condition can equal."""

    yaml_implicit_resolvers = {  # noqa: RUF012 (PyYAML's class-level table)
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }


class _UniqueKeyLoader(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _Constructor,
    _Resolver,
):
    """The pure-Python loader: PyYAML's SafeLoader with :class:`_Constructor` and :class:`_Resolver`."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)


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


class _NotPlainJson(ValueError):
    """A document the JSON fast path leaves to the YAML parser."""


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _NotPlainJson("duplicate key")  # the YAML parser reports it with its line
    return out


def _json_float(text: str) -> str:
    # YAML keeps a number's text as written ("1.10" stays "1.10"); so does this path.
    raise _NotPlainJson(text)


def _load_json(text: str) -> Any:
    """A document written as JSON (a YAML subset: ``{"topics": [...]}``), parsed by
    the standard library's json module, about 40 times faster than PyYAML on large
    generated files. Anything it cannot take exactly as YAML would (duplicate keys,
    floats, non-JSON syntax) goes to the YAML parser instead."""
    try:
        return json.loads(
            text, object_pairs_hook=_json_object, parse_float=_json_float, parse_constant=_json_float
        )
    except (ValueError, RecursionError) as exc:
        raise _NotPlainJson(str(exc)) from None


def _written_int(text: str) -> int:
    value = _YamlInt(int(text))
    value.source = text
    return value


def _written_float(text: str) -> float:
    value = _YamlFloat(float(text))
    value.source = text
    return value


_fast_reader = _fastyaml.Reader(_Resolver.yaml_implicit_resolvers, _written_int, _written_float)
# Documents from this size (in characters) are first offered to rapidyaml, when
# installed: below it PyYAML takes well under a second, and a hand-written file
# with a syntax error gets no second diagnostic from rapidyaml on stderr.
_FAST_YAML_MIN_CHARS = 256 * 1024


def _load_yaml(text: str) -> Any:
    """Parse one YAML document.

    A document that is plain JSON is read with the json module. A large one
    (from 256 KiB) is offered to :mod:`kbear._fastyaml` (rapidyaml, the optional
    ``fast-yaml`` extra), which reads it exactly as below or declines. Otherwise
    libyaml parses when it is available; any error is re-read with the
    pure-Python parser, so that messages (line, column, reason) do not depend
    on whether libyaml or rapidyaml is installed.
    """
    if text.lstrip()[:1] == "{":
        try:
            return _load_json(text)
        except _NotPlainJson:
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


class _Loader:
    def __init__(self, directory: Path, environ: Mapping[str, str]) -> None:
        self.directory = directory
        self.environ = environ
        self.problems: list[ConfigProblem] = []
        self.hash = hashlib.sha256()
        # Every cluster id written in clusters.yaml (valid entries or not), and
        # whether that file could be read as a list at all: rules are checked
        # against these ids, so an empty cluster list refuses every rule.
        self.cluster_ids: set[str] = set()
        self.clusters_listed = False

    def problem(self, file: str, entry: str | None, message: str) -> None:
        self.problems.append(ConfigProblem(file, entry, message))

    def read_entries(self, name: str) -> list[tuple[str, Any]]:
        """The list under the file's top-level key, each with a label, or []."""
        path = self.directory / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if name in _REQUIRED:
                self.problem(name, None, f"missing (required in {self.directory})")
            return []
        except OSError as exc:
            self.problem(name, None, f"cannot read: {exc.strerror or exc}")
            return []
        _digest_update(self.hash, name, data)
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            self.problem(name, None, f"not UTF-8 text (byte {exc.start})")
            return []
        try:
            doc = _load_yaml(text)
        except yaml.MarkedYAMLError as exc:
            self.problem(name, None, _yaml_problem(text, exc))
            return []
        except yaml.reader.ReaderError as exc:  # a control character YAML does not allow
            line = text.count("\n", 0, exc.position) + 1
            column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
            code = exc.character if isinstance(exc.character, int) else ord(exc.character)
            where = f"line {line}, column {column}"
            self.problem(name, None, f"YAML error at {where}: character #x{code:04x} is not allowed")
            return []
        except yaml.YAMLError as exc:
            self.problem(name, None, f"YAML error: {exc}")
            return []
        except RecursionError:
            self.problem(name, None, "YAML nested too deeply to read")
            return []
        top = _TOP_KEYS[name]
        if doc is None:
            if name in _REQUIRED:
                self.problem(name, None, f"empty; expected a top-level key '{top}' holding a list")
            return []
        if not isinstance(doc, dict) or top not in doc:
            self.problem(name, None, f"expected a top-level key '{top}' holding a list")
            return []
        extra = sorted(str(k) for k in doc if k != top)
        if extra:
            self.problem(name, None, f"unexpected top-level key(s) {extra}; only '{top}' is read")
        items = doc[top]
        if items is None:
            return []
        if not isinstance(items, list):
            self.problem(name, None, f"'{top}' must be a list, got {type(items).__name__}")
            return []
        out = []
        for index, item in enumerate(items):
            label = f"entry {index + 1}"
            if not isinstance(item, dict):
                self.problem(name, label, f"must be a mapping, got {type(item).__name__}")
                continue
            out.append((label, item))
        return out

    def validate(self, file: str, label: str, model: type[_Model], item: Any) -> tuple[Any, set[str]]:
        """The model, or None after reporting every field error; and the names of
        the top-level fields that failed (so the caller can still check the others)."""
        try:
            return model.model_validate(item), set()
        except ValidationError as exc:
            failed: set[str] = set()
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                if err["loc"]:
                    failed.add(str(err["loc"][0]))
                msg = err["msg"].removeprefix("Value error, ")
                self.problem(file, label, f"key '{loc}': {msg}" if loc else msg)
            return None, failed

    def interpolate(self, label: str, key: str, value: str) -> str:
        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "${"
            if name not in self.environ:
                self.problem(CLUSTERS_FILE, label, f"key '{key}': environment variable {name} is not set")
                return ""
            return self.environ[name]

        return _ENV_REF.sub(sub, value)

    def clusters(self) -> dict[str, ClusterConfig]:
        out: dict[str, ClusterConfig] = {}
        seen: set[str] = set()
        before = len(self.problems)
        entries = self.read_entries(CLUSTERS_FILE)
        self.clusters_listed = len(self.problems) == before
        for _, item in entries:
            raw_id = _entry_id(item)
            if raw_id is not None:
                self.cluster_ids.add(raw_id)
        for label, item in entries:
            cluster_id = _entry_id(item)
            entry = f"cluster '{cluster_id}'" if cluster_id is not None else label
            before = len(self.problems)
            cluster, failed = self.validate(CLUSTERS_FILE, entry, ClusterConfig, item)
            if cluster_id is not None:
                if cluster_id in seen:
                    self.problem(CLUSTERS_FILE, entry, "duplicate cluster id")
                    continue
                seen.add(cluster_id)
            if "meta" in failed:
                continue
            meta: dict[str, str] = _meta(item.get("meta"))
            if not meta.get("bootstrap.servers", "").strip():
                self.problem(CLUSTERS_FILE, entry, "meta 'bootstrap.servers' is required")
                continue
            meta = {k: self.interpolate(entry, k, v) for k, v in meta.items()}
            if len(self.problems) > before or cluster is None:
                continue
            if not meta["bootstrap.servers"].strip():
                self.problem(
                    CLUSTERS_FILE, entry, "meta 'bootstrap.servers' is empty once read from the environment"
                )
                continue
            out[cluster.id] = ClusterConfig(id=cluster.id, meta=meta)
        return out

    def topics(self) -> Mapping[str, TopicConfig]:
        out: dict[str, TopicConfig | tuple[tuple[str, str], ...]] = {}
        for label, item in self.read_entries(TOPICS_FILE):
            plain = _plain_topic_meta(item)
            if plain is not None and plain[0] not in out:
                out[plain[0]] = tuple(plain[1].items())
                continue
            topic_id = _entry_id(item)
            entry = f"topic '{topic_id}'" if topic_id is not None else label
            topic, _ = self.validate(TOPICS_FILE, entry, TopicConfig, item)
            if topic is None:
                continue
            if topic.id in out:
                self.problem(TOPICS_FILE, entry, "duplicate topic id")
                continue
            out[topic.id] = topic
        return _TopicTable(out)

    def consumer_groups(self) -> dict[tuple[str, str], ConsumerGroupConfig]:
        out: dict[tuple[str, str], ConsumerGroupConfig] = {}
        for index, (_, item) in enumerate(self.read_entries(CONSUMER_GROUPS_FILE)):
            group, _ = self.validate(CONSUMER_GROUPS_FILE, f"entry {index + 1}", ConsumerGroupConfig, item)
            if group is None:
                continue
            key = (group.group_name, group.topic_id)
            if key in out:
                self.problem(
                    CONSUMER_GROUPS_FILE,
                    f"consumer group '{key[0]}' on topic '{key[1]}'",
                    "duplicate (groupName, topicId)",
                )
                continue
            out[key] = group
        return out

    def rules(self) -> tuple[RouteRule, ...]:
        # Every problem of a rule is reported at once: a field that fails its
        # type check (``priority: -1``) does not hide the CRRL syntax, the
        # unknown cluster or the kind of the same rule.
        out: list[RouteRule] = []
        seen: set[str] = set()
        # Generated rule files repeat a few statements many times: each distinct
        # text is parsed once, and its (immutable) Statement shared.
        statements: dict[str, crrl.Statement] = {}
        for position, (label, item) in enumerate(self.read_entries(ROUTE_RULES_FILE)):
            rule_id = _entry_id(item)
            entry = f"rule '{rule_id}'" if rule_id is not None else label
            raw, failed = self.validate(ROUTE_RULES_FILE, entry, _RawRule, item)
            ok = raw is not None
            if rule_id is not None:
                if rule_id in seen:
                    self.problem(ROUTE_RULES_FILE, entry, "duplicate rule id")
                    ok = False
                seen.add(rule_id)
            kind = None if "meta" in failed else self.rule_kind(entry, _meta(item.get("meta")))
            if "rule" in failed:
                continue
            text = _scalar_to_str(item["rule"])
            try:
                statement = statements.get(text) if isinstance(text, str) else None
                if statement is None:
                    statement = statements[text] = crrl.parse(text)
            except crrl.CrrlSyntaxError as exc:
                self.problem(ROUTE_RULES_FILE, entry, f"key 'rule': {exc} in {text!r}")
                continue
            if self.clusters_listed and statement.cluster not in self.cluster_ids:
                known = ", ".join(sorted(self.cluster_ids)) or "none"
                self.problem(
                    ROUTE_RULES_FILE,
                    entry,
                    f"uses cluster '{statement.cluster}', which is not in {CLUSTERS_FILE} (known: {known})",
                )
                ok = False
            if raw is not None and kind is not None and ok:
                out.append(RouteRule(raw.id, raw.priority, raw.meta, statement, kind, position))
        return tuple(out)

    def rule_kind(self, entry: str, meta: Mapping[str, str]) -> RuleKind | None:
        kinds = []
        is_global = meta.get("rule.isGlobal")
        if is_global is not None and is_global not in ("true", "false"):
            self.problem(
                ROUTE_RULES_FILE,
                entry,
                f"meta 'rule.isGlobal' must be true or false, got {is_global!r}",
            )
            return None
        if is_global == "true":
            kinds.append(RuleKind.GLOBAL)
        if "topic.id" in meta:
            kinds.append(RuleKind.TOPIC)
        group_keys = [k for k in ("consumerGroup.groupName", "consumerGroup.topicId") if k in meta]
        if len(group_keys) == 2:
            kinds.append(RuleKind.CONSUMER_GROUP)
        elif group_keys:
            missing = {"consumerGroup.groupName", "consumerGroup.topicId"} - set(group_keys)
            self.problem(
                ROUTE_RULES_FILE,
                entry,
                f"a consumer-group rule needs both consumerGroup.groupName and "
                f"consumerGroup.topicId in meta; missing {missing.pop()}",
            )
            return None
        if not kinds:
            self.problem(
                ROUTE_RULES_FILE,
                entry,
                "rule of no kind: meta needs 'rule.isGlobal: true', 'topic.id', or both "
                "'consumerGroup.groupName' and 'consumerGroup.topicId'",
            )
            return None
        if len(kinds) > 1:
            names = " and ".join(k.name.lower().replace("_", "-") for k in kinds)
            self.problem(ROUTE_RULES_FILE, entry, f"rule of more than one kind ({names})")
            return None
        return kinds[0]


def load_config(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> KBearConfig:
    """Read and validate a kbear configuration directory.

    Args:
        path: the directory holding ``clusters.yaml``, ``route-rules.yaml`` and
            optionally ``topics.yaml`` and ``consumer-groups.yaml``.
        environ: where ``${NAME}`` references are read; ``os.environ`` by default.

    Returns:
        The validated :class:`KBearConfig`.

    Raises:
        ConfigError: with every problem found: a missing directory or required
            file, YAML syntax (with line and column), duplicate YAML keys, a
            wrong shape or type, duplicate ids, a rule of no kind or of several
            kinds, CRRL syntax (with column), a rule naming a cluster absent
            from ``clusters.yaml`` (an empty cluster list included), a negative
            or non-integer priority, an unset ``${NAME}``, a ``bootstrap.servers``
            missing or empty once ``${NAME}`` is read.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(
            [ConfigProblem(str(directory), None, "not a directory (kbear configuration expected)")]
        )
    with _collector_paused():
        return _load(directory, os.environ if environ is None else environ)


_pause_lock = threading.Lock()
_pauses = 0
_collector_was_enabled = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a configuration is read.

    Reading allocates about ten objects per topic and none of them is garbage
    until the load ends; every full collection on the way walks all of them
    again, about a quarter of the load time of 100,000 topics. Reference
    counting still frees everything as usual; the collector is turned back on
    (if it was on) when the last concurrent load ends, even on an error.
    """
    global _pauses, _collector_was_enabled
    with _pause_lock:
        if _pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collector_was_enabled:
                gc.enable()


def _load(directory: Path, environ: Mapping[str, str]) -> KBearConfig:
    loader = _Loader(directory, environ)
    clusters = loader.clusters()
    topics = loader.topics()
    groups = loader.consumer_groups()
    rules = loader.rules()
    if loader.problems:
        raise ConfigError(loader.problems, str(directory))
    return KBearConfig(
        directory=directory,
        clusters=clusters,
        topics=topics,
        consumer_groups=groups,
        rules=rules,
        digest=loader.hash.hexdigest(),
    )
