"""The meta-service protocol: its messages (one set, for :mod:`kbear.meta`'s client
and for ``kbear serve``), and answers turned into documents (private, no I/O).

Message shapes: ``docs/reference/meta-service-protocol.md``. The messages are
pydantic models; field names on the wire are camelCase (``topicIds``,
``clusterId``), the Python attributes snake_case. Both sides read a message the
way the reference server's JSON parser does (protobuf ``JsonFormat`` ignoring
unknown fields): unknown fields are ignored, an absent or ``null`` field means
empty, and a value of the wrong JSON type (a number where a string is expected)
is refused. ``kbear serve`` writes every field (empty lists and maps included)
but ``status.error`` on success, as the reference prints it.

The client side: :class:`kbear.meta.MetaServiceSource` sends :func:`producer_request`
to ``/route/producer`` and :func:`consumer_request` to ``/route/consumer``; the
answers are validated by :func:`parse_answer` (types, statuses) and turned by
:func:`answer_documents` into the four documents of a configuration, which then
go through the same validation as files (:func:`kbear.config.load_documents`):
each answered route becomes one rule without ``when`` (the service evaluated the
chain for this client):

- ``/route/producer``, topic ``T`` routed to cluster ``c``, physical topic ``P``:
  a topic rule ``producer:T`` (meta ``topic.id: T``), ``use cluster c[, topic P]``;
- ``/route/consumer``, group ``G`` on topic ``T``: a consumer-group rule
  ``consumer:G:T`` (meta ``consumerGroup.groupName: G``, ``consumerGroup.topicId: T``).

These ids are kbear's, not the service's: each such rule's meta
``kbear.served.rule.id`` holds the id of the rule the service says won
(``Route.ruleId``, which ``kbear serve`` sends and the reference does not; ""
then), and that is what the routes report as ``Route.rule_id``.

A route naming a cluster the answer does not describe is then refused by that
validation ("uses cluster 'x', which is not in clusters.yaml"), like a file.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from kbear import crrl
from kbear.config import CLUSTERS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE, SERVED_RULE_ID, TOPICS_FILE

#: the protocol's messages, also :mod:`kbear.server.protocol`'s names
__all__ = [
    "KBEAR_CLIENT_KEY",
    "Ack",
    "ClientMessage",
    "ClusterMessage",
    "ClustersRequest",
    "ClustersResponse",
    "ConsumerGroupIdMessage",
    "ConsumerGroupIdRoute",
    "ConsumerGroupMessage",
    "ConsumerGroupsRequest",
    "ConsumerGroupsResponse",
    "ConsumerRouteRequest",
    "ConsumerRouteResponse",
    "ErrorCode",
    "ProducerRouteRequest",
    "ProducerRouteResponse",
    "ResponseError",
    "ResponseStatus",
    "RouteMessage",
    "RouteRuleInfo",
    "RouteRulesRequest",
    "RouteRulesResponse",
    "StatusResponse",
    "TopicMessage",
    "TopicsRequest",
    "TopicsResponse",
]

PRODUCER_PATH = "/route/producer"
CONSUMER_PATH = "/route/consumer"
#: every rule a service holds (``GET``; the reference server and ``kbear serve``)
RULES_ALL_PATH = "/route/rules/all"

#: The ``Client.meta`` key kbear's own clients send (value: ``python/<kbear version>``):
#: ``kbear serve`` answers a client that sends it with cluster meta as written
#: (``${NAME}`` resolved by the client) and with remaps (``Route.topicId``, which it
#: applies); a client without it (KBear's Java client) gets placeholders resolved by
#: the server and no remap it could not apply (``docs/reference/meta-service-protocol.md``).
KBEAR_CLIENT_KEY = "kbear.client"

#: A lookup a meta-service answers: (topic, None) for a producer, (topic, group) for a consumer.
Interest = tuple[str, str | None]


class AnswerRefused(ValueError):
    """A meta-service answer that cannot be used; the message says why."""


class Ack(StrEnum):
    """``ResponseStatus.ack``: every item answered, some, or none (bad request, server error)."""

    SUCCESS = "success"
    PARTIAL_FAIL = "partial_fail"
    FAIL = "fail"


class ErrorCode(StrEnum):
    """``ResponseError.code``. The first two are the reference server's; the others are kbear's."""

    BAD_REQUEST = "bad_request"
    SERVICE_EXCEPTION = "service_exception"
    #: partial_fail of a route request: the items without a route are named in the message.
    NO_ROUTE = "no_route"
    #: partial_fail of a meta or rules request: the ids not found are named in the message.
    NOT_FOUND = "not_found"
    UNAUTHORIZED = "unauthorized"
    #: partial_fail of a route request to a client that is not kbear's: a route's
    #: cluster meta names a ``${NAME}`` the server's environment does not hold.
    UNRESOLVED_PLACEHOLDER = "unresolved_placeholder"
    #: partial_fail of a route request to a client that is not kbear's: the route
    #: is a remap (another physical topic), which such a client would not apply.
    REMAP_NOT_APPLICABLE = "remap_not_applicable"


#: a string of a list (``topicIds``), JSON ``null`` read as ""
_Str = Annotated[str, BeforeValidator(lambda value: "" if value is None else value)]


class _Message(BaseModel):
    # Unknown fields are ignored (a newer peer may add some); absent ones are empty.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True, strict=True
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A field sent as JSON ``null`` reads as absent: empty ("", [] or {})."""
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


# --------------------------------------------------------------------------- shared messages


class ClientMessage(_Message):
    """``Client {id, meta}``: who asks. An empty ``id`` means no ``client.id`` factor."""

    id: str = ""
    meta: dict[str, str] = Field(default_factory=dict)


class ClusterMessage(_Message):
    """``Cluster {id, meta}``; meta as written in clusters.yaml (``${NAME}`` resolved
    by ``kbear serve`` only for a client without :data:`KBEAR_CLIENT_KEY`)."""

    id: str
    meta: dict[str, str] = Field(default_factory=dict)


class TopicMessage(_Message):
    """``Topic {id, meta}``; meta from topics.yaml, empty for a topic it does not list."""

    id: str
    meta: dict[str, str] = Field(default_factory=dict)


class ConsumerGroupIdMessage(_Message):
    """``ConsumerGroupId {groupName, topicId}``."""

    group_name: str = ""
    topic_id: str = ""


class ConsumerGroupMessage(_Message):
    """``ConsumerGroup {id, meta}``; meta from consumer-groups.yaml, empty when not listed there."""

    id: ConsumerGroupIdMessage
    meta: dict[str, str] = Field(default_factory=dict)


class RouteMessage(_Message):
    """``Route {clusterId, topicId, ruleId}``; ``topicId`` is the physical topic (a remap's
    target); ``ruleId`` (a kbear field the reference does not send) the rule that won."""

    cluster_id: str
    topic_id: str
    rule_id: str = ""


class RouteRuleInfo(_Message):
    """``RouteRuleInfo {id, priority, meta}``; like the reference, ``meta['rule']`` holds
    the CRRL statement (kbear writes it in canonical form, see ``crrl.Statement.__str__``)."""

    id: str
    priority: int = 0
    meta: dict[str, str] = Field(default_factory=dict)


class ResponseError(_Message):
    """``ResponseError {code, message}``; ``code`` one of :class:`ErrorCode` from kbear,
    any string from another server."""

    code: str = ""
    message: str = ""


class ResponseStatus(_Message):
    """``ResponseStatus {ack, error}``; ``error`` is None (left out) on success."""

    ack: Ack
    error: ResponseError | None = None


# --------------------------------------------------------------------------- requests


class ProducerRouteRequest(_Message):
    """``/route/producer``: ``{client, topicIds}``."""

    client: ClientMessage = Field(default_factory=ClientMessage)
    topic_ids: list[_Str] = Field(default_factory=list)


class ConsumerRouteRequest(_Message):
    """``/route/consumer``: ``{client, consumerGroupIds}``."""

    client: ClientMessage = Field(default_factory=ClientMessage)
    consumer_group_ids: list[ConsumerGroupIdMessage] = Field(default_factory=list)


class RouteRulesRequest(_Message):
    """``/route/rules``: ``{routeRuleIds}``; empty asks for every rule."""

    route_rule_ids: list[_Str] = Field(default_factory=list)


class ClustersRequest(_Message):
    """``/meta/clusters``: ``{clusterIds}``; empty asks for every cluster."""

    cluster_ids: list[_Str] = Field(default_factory=list)


class TopicsRequest(_Message):
    """``/meta/topics``: ``{topicIds}``; empty asks for every topic."""

    topic_ids: list[_Str] = Field(default_factory=list)


class ConsumerGroupsRequest(_Message):
    """``/meta/consumer-groups``: ``{consumerGroupIds}``; empty asks for every group."""

    consumer_group_ids: list[ConsumerGroupIdMessage] = Field(default_factory=list)


# --------------------------------------------------------------------------- responses


class StatusResponse(_Message):
    """What every response has: ``status``."""

    status: ResponseStatus


_M = TypeVar("_M", bound=StatusResponse)


class ProducerRouteResponse(StatusResponse):
    """``{status, topicIdRoutes, clusters, topics}``; ``topicIdRoutes`` is keyed by the
    **requested** topic id (the reference's remap defect fixed), ``topics`` by the
    physical topic of each route."""

    topic_id_routes: dict[str, RouteMessage] = Field(default_factory=dict)
    clusters: dict[str, ClusterMessage] = Field(default_factory=dict)
    topics: dict[str, TopicMessage] = Field(default_factory=dict)


class ConsumerGroupIdRoute(_Message):
    """``{consumerGroupId, route}``: one answered item of a consumer route request."""

    consumer_group_id: ConsumerGroupIdMessage
    route: RouteMessage


class ConsumerRouteResponse(StatusResponse):
    """``{status, consumerGroupIdRoutes, clusters, topics, consumerGroups}``."""

    consumer_group_id_routes: list[ConsumerGroupIdRoute] = Field(default_factory=list)
    clusters: dict[str, ClusterMessage] = Field(default_factory=dict)
    topics: dict[str, TopicMessage] = Field(default_factory=dict)
    consumer_groups: list[ConsumerGroupMessage] = Field(default_factory=list)


class RouteRulesResponse(StatusResponse):
    """``{status, routeRules}``."""

    route_rules: list[RouteRuleInfo] = Field(default_factory=list)


class ClustersResponse(StatusResponse):
    """``{status, clusters}``."""

    clusters: list[ClusterMessage] = Field(default_factory=list)


class TopicsResponse(StatusResponse):
    """``{status, topics}``."""

    topics: list[TopicMessage] = Field(default_factory=list)


class ConsumerGroupsResponse(StatusResponse):
    """``{status, consumerGroups}``."""

    consumer_groups: list[ConsumerGroupMessage] = Field(default_factory=list)


def client_message(client_id: str | None, meta: Mapping[str, str]) -> dict[str, Any]:
    """The protocol's ``Client`` message of a kbear client (``id`` "" when it has none):
    its meta with :data:`KBEAR_CLIENT_KEY` added (``python/<kbear version>``)."""
    try:
        version = importlib.metadata.version("kbear")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        version = "unknown"
    return {"id": client_id or "", "meta": {**meta, KBEAR_CLIENT_KEY: f"python/{version}"}}


def producer_request(client: Mapping[str, Any], topics: Iterable[str]) -> dict[str, Any]:
    """The body of ``/route/producer``: ``{client, topicIds}``."""
    return {"client": client, "topicIds": list(topics)}


def consumer_request(client: Mapping[str, Any], groups: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The body of ``/route/consumer``: ``{client, consumerGroupIds: [{groupName, topicId}]}``."""
    return {
        "client": client,
        "consumerGroupIds": [{"groupName": g, "topicId": t} for g, t in groups],
    }


def problems(exc: ValidationError, limit: int) -> str:
    """The first ``limit`` errors of ``exc`` as ``loc: reason; ...`` (``body``: the whole
    message); pydantic's input values are not echoed."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:limit])


def parse_answer(model: type[_M], data: Any, path: str) -> _M:
    """``data`` (decoded JSON) as ``model``, its status checked.

    Raises:
        AnswerRefused: wrong shape or types (every field named), or ``ack: fail``.
    """
    try:
        # lax only where JSON has no type of its own (an enum from its string)
        answer = model.model_validate(data, strict=False)
    except ValidationError as exc:
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise AnswerRefused(f"{path}: malformed answer: {problems(exc, 5)}{more}") from None
    if answer.status.ack == Ack.FAIL:
        error = answer.status.error or ResponseError()
        raise AnswerRefused(f"{path}: the service answered fail: {error.code} {error.message}".rstrip())
    return answer


@dataclass
class Answer:
    """Answers turned into documents.

    Attributes:
        documents: the four documents, by file name (validated later, as files are).
        answered: the lookups that got a route.
        notes: what was ignored or missing, for the log.
    """

    documents: dict[str, Any]
    answered: set[Interest] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def _merge_entities(
    into: dict[str, dict[str, Any]], entities: Mapping[str, ClusterMessage | TopicMessage], what: str
) -> None:
    for key, entity in entities.items():
        if key != entity.id:
            raise AnswerRefused(f"{what} '{key}' is described with id '{entity.id}'")
        known = into.get(key)
        if known is not None and known["meta"] != entity.meta:
            raise AnswerRefused(f"{what} '{key}' is described twice, differently")
        into[key] = entity.model_dump()


def _rule(rule_id: str, meta: dict[str, str], route: RouteMessage, requested: str) -> dict[str, Any]:
    physical = route.topic_id
    statement = crrl.Statement(route.cluster_id, physical if physical != requested else None, ())
    # the routes of this stand-in report the rule the service named, or "" (unknown)
    return {"id": rule_id, "meta": {**meta, SERVED_RULE_ID: route.rule_id}, "rule": str(statement)}


def answer_documents(
    producer: ProducerRouteResponse | None,
    consumer: ConsumerRouteResponse | None,
    topics_asked: Iterable[str],
    groups_asked: Iterable[tuple[str, str]],
) -> Answer:
    """The documents of a configuration holding exactly the answered routes.

    Args:
        producer, consumer: the parsed answers (None when not asked).
        topics_asked, groups_asked: what was asked; anything else in an answer
            is ignored and noted (KBear's reference server keys a remapped
            producer route by the physical topic, see meta-service.md).

    Raises:
        AnswerRefused: a cluster or topic described under another key, or twice
            with different meta.
    """
    clusters: dict[str, dict[str, Any]] = {}
    topics: dict[str, dict[str, Any]] = {}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    rules: list[dict[str, Any]] = []
    out = Answer({})
    asked = list(topics_asked)
    if producer is not None:
        _merge_entities(clusters, producer.clusters, "cluster")
        _merge_entities(topics, producer.topics, "topic")
        for topic in asked:
            route = producer.topic_id_routes.get(topic)
            if route is None:
                out.notes.append(f"no producer route for topic '{topic}'")
                continue
            rules.append(_rule(f"producer:{topic}", {"topic.id": topic}, route, topic))
            out.answered.add((topic, None))
        extra = sorted(set(producer.topic_id_routes) - set(asked))
        if extra:
            out.notes.append(f"ignored producer routes for topics not asked for: {extra}")
    asked_groups = list(groups_asked)
    if consumer is not None:
        _merge_entities(clusters, consumer.clusters, "cluster")
        _merge_entities(topics, consumer.topics, "topic")
        for group in consumer.consumer_groups:
            groups[(group.id.group_name, group.id.topic_id)] = group.model_dump(by_alias=True)
        routes = {
            (r.consumer_group_id.group_name, r.consumer_group_id.topic_id): r.route
            for r in consumer.consumer_group_id_routes
        }
        for group_name, topic in asked_groups:
            route = routes.get((group_name, topic))
            if route is None:
                out.notes.append(f"no consumer route for group '{group_name}' on topic '{topic}'")
                continue
            meta = {"consumerGroup.groupName": group_name, "consumerGroup.topicId": topic}
            rules.append(_rule(f"consumer:{group_name}:{topic}", meta, route, topic))
            out.answered.add((topic, group_name))
        extra_groups = sorted(set(routes) - set(asked_groups))
        if extra_groups:
            out.notes.append(f"ignored consumer routes not asked for: {extra_groups}")
    out.documents = {
        CLUSTERS_FILE: {"clusters": list(clusters.values())},
        TOPICS_FILE: {"topics": list(topics.values())},
        CONSUMER_GROUPS_FILE: {"consumer-groups": list(groups.values())},
        ROUTE_RULES_FILE: {"route-rules": rules},
    }
    return out


def everything_documents(clusters: Any, topics: Any, groups: Any) -> dict[str, Any]:
    """The documents of the ``GET /meta/*/all`` answers (decoded JSON): clusters,
    topics and consumer groups; no rules (the protocol does not carry their statements).

    Raises:
        AnswerRefused: an answer of the wrong shape or ``ack: fail``.
    """
    c = parse_answer(ClustersResponse, clusters, "/meta/clusters/all")
    t = parse_answer(TopicsResponse, topics, "/meta/topics/all")
    g = parse_answer(ConsumerGroupsResponse, groups, "/meta/consumer-groups/all")
    return {
        CLUSTERS_FILE: {"clusters": [e.model_dump() for e in c.clusters]},
        TOPICS_FILE: {"topics": [e.model_dump() for e in t.topics]},
        CONSUMER_GROUPS_FILE: {"consumer-groups": [e.model_dump(by_alias=True) for e in g.consumer_groups]},
        ROUTE_RULES_FILE: {"route-rules": []},
    }


def rules_document(data: Any) -> list[dict[str, Any]]:
    """The ``route-rules`` list of a ``/route/rules/all`` answer (decoded JSON): each
    ``RouteRuleInfo`` as a rule entry, its statement taken from its meta ``rule``
    (where ``kbear serve`` and KBear's files keep it), in the order served.

    Raises:
        AnswerRefused: an answer of the wrong shape, ``ack: fail``, or a rule
            without a statement.
    """
    answer = parse_answer(RouteRulesResponse, data, RULES_ALL_PATH)
    rules = []
    for info in answer.route_rules:
        meta = dict(info.meta)
        statement = meta.pop("rule", None)
        if statement is None:
            raise AnswerRefused(f"{RULES_ALL_PATH}: rule '{info.id}' has no statement (meta 'rule')")
        rules.append({"id": info.id, "priority": info.priority, "meta": meta, "rule": statement})
    return rules
