"""The configuration's models: clusters, topics, consumer groups, route rules, :class:`KBearConfig`.

What the four documents hold is described in :mod:`kbear.config`; loading
(:mod:`kbear.config._loading`) validates them into these models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from kbear import crrl
from kbear._secrets import redact
from kbear.config._documents import _YamlFloat, _YamlInt  # the numbers as written
from kbear.config._failover import Failover, failover_of

__all__ = [
    "ClusterConfig",
    "ConsumerGroupConfig",
    "ConsumerGroupId",
    "KBearConfig",
    "RouteRule",
    "RuleKind",
    "TopicConfig",
]

# --------------------------------------------------------------------------- models


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
    if isinstance(value, _YamlInt | _YamlFloat):
        text = value.source
    elif isinstance(value, bool | int | float | str):
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
        """librdkafka properties for every client of this cluster, ``bootstrap.servers``
        included: the meta keys librdkafka knows as client properties (it is asked,
        see :mod:`kbear.config._librdkafka`); other keys (``zookeeper.connect``) stay meta only."""
        from kbear.config._librdkafka import client_properties

        return client_properties(self.meta)

    @property
    def meta_only_keys(self) -> list[str]:
        """The meta keys that are not librdkafka client properties, never passed to clients."""
        from kbear.config._librdkafka import meta_only_keys

        return meta_only_keys(self.meta)

    @property
    def failover(self) -> Failover:
        """Its standby and mirror (``kbear.failover.to``, ``kbear.mirror*``,
        ``kbear.cluster.id``; see :mod:`kbear.config._failover`), defaults filled in."""
        return failover_of(self.id, self.meta)

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
    """A consumer group of ``consumer-groups.yaml``; ``meta`` feeds ``consumerGroup.<key>`` factors.

    The id is written ``id: {groupName: g, topicId: t}`` or, as in KBear's own
    files, flat: ``groupName: g`` and ``topicId: t`` beside ``meta``.
    """

    id: ConsumerGroupId
    meta: _Meta = {}

    @model_validator(mode="before")
    @classmethod
    def _flat_id(cls, value: Any) -> Any:
        """KBear's own files write a consumer group's id flat (``groupName: g`` and
        ``topicId: t`` in the entry, CRRL spec "Where the data lives"): the same as
        ``id: {groupName: g, topicId: t}``. Both forms in one entry, or only one of
        the two parts written flat, is an error."""
        if not isinstance(value, Mapping):
            return value
        flat = [k for k in ("groupName", "topicId") if k in value]
        if not flat:
            return value
        if "id" in value:
            both = ", ".join(repr(k) for k in flat)
            raise ValueError(f"the id is written twice: 'id' and {both}; use one form")
        if len(flat) == 1:
            missing = "topicId" if flat[0] == "groupName" else "groupName"
            raise ValueError(f"'{flat[0]}' without '{missing}': a consumer group id needs both")
        out = {k: v for k, v in value.items() if k not in ("groupName", "topicId")}
        out["id"] = {"groupName": value["groupName"], "topicId": value["topicId"]}
        return out

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


#: Meta key of the rules a meta-service client builds from the service's answers (one
#: per answered route, see kbear._meta_protocol): the id of the rule the service says
#: won ("" when it does not say), which routes report as ``Route.rule_id``.
SERVED_RULE_ID = "kbear.served.rule.id"


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
    def reported_id(self) -> str:
        """The rule id a route of this rule reports (``Route.rule_id``): :attr:`id`, or
        for a rule standing for a meta-service's answer, the rule the service named
        (meta :data:`SERVED_RULE_ID`; "" when the service did not say)."""
        return self.meta.get(SERVED_RULE_ID, self.id)

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
        digest: SHA-256 (hex) of the files' bytes, see :func:`~kbear.config.config_digest` (of
            the documents' canonical JSON for a configuration not read from files).
        origin: where it came from, for messages: the directory, a meta-service
            URL, or ``"memory"``; None when not given (then the directory).
        ignored_rules: (entry, reason) of the rules that take part in no lookup
            (their meta makes them of no kind: no ``rule.isGlobal: true``, no
            ``topic.id``, not both consumer-group keys; CRRL spec, "Kinds of
            rule"): loaded and left out, as the reference system does (its own
            test files hold such rules); ``kbear lint`` reports them.
    """

    directory: Path | None
    clusters: Mapping[str, ClusterConfig]
    topics: Mapping[str, TopicConfig]
    consumer_groups: Mapping[tuple[str, str], ConsumerGroupConfig]
    rules: tuple[RouteRule, ...]
    digest: str
    origin: str | None = None
    ignored_rules: tuple[tuple[str, str], ...] = ()

    @property
    def location(self) -> str:
        """Where this configuration came from (directory, URL or ``memory``), for messages."""
        if self.origin is not None:
            return self.origin
        return str(self.directory) if self.directory is not None else "memory"

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
