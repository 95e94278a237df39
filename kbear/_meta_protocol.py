"""The meta-service protocol's messages, and answers turned into documents (private, no I/O).

Message shapes: ``docs/reference/meta-service-protocol.md`` (JSON, camelCase fields, absent
fields empty). :class:`kbear.meta.MetaServiceSource` sends :func:`producer_request`
to ``/route/producer`` and :func:`consumer_request` to ``/route/consumer``; the
answers are validated here (types, statuses, ids) and turned by
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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, StrictStr, ValidationError

from kbear import crrl
from kbear.config import CLUSTERS_FILE, CONSUMER_GROUPS_FILE, ROUTE_RULES_FILE, SERVED_RULE_ID, TOPICS_FILE

PRODUCER_PATH = "/route/producer"
CONSUMER_PATH = "/route/consumer"
#: every rule a service holds (``GET``; the reference server and ``kbear serve``)
RULES_ALL_PATH = "/route/rules/all"

#: A lookup a meta-service answers: (topic, None) for a producer, (topic, group) for a consumer.
Interest = tuple[str, str | None]


class AnswerRefused(ValueError):
    """A meta-service answer that cannot be used; the message says why."""


def _empty_if_none(value: Any) -> Any:
    return {} if value is None else value


def _empty_list_if_none(value: Any) -> Any:
    return [] if value is None else value


_Meta = Annotated[dict[StrictStr, StrictStr], BeforeValidator(_empty_if_none)]


class _Message(BaseModel):
    # Unknown fields are ignored (a newer server may add some); absent ones are empty.
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Entity(_Message):
    id: StrictStr
    meta: _Meta = {}


class _GroupId(_Message):
    groupName: StrictStr
    topicId: StrictStr


class _Group(_Message):
    id: _GroupId
    meta: _Meta = {}


class _Route(_Message):
    clusterId: StrictStr
    topicId: StrictStr
    # kbear serve names the rule that won; the reference does not (empty: unknown)
    ruleId: StrictStr = ""


class _Error(_Message):
    code: StrictStr = ""
    message: StrictStr = ""


class _Status(_Message):
    ack: Literal["success", "partial_fail", "fail"]
    error: _Error | None = None


class _RouteAnswer(_Message):
    status: _Status
    clusters: Annotated[dict[StrictStr, _Entity], BeforeValidator(_empty_if_none)] = {}
    topics: Annotated[dict[StrictStr, _Entity], BeforeValidator(_empty_if_none)] = {}


class ProducerAnswer(_RouteAnswer):
    """The answer of ``/route/producer``."""

    topicIdRoutes: Annotated[dict[StrictStr, _Route], BeforeValidator(_empty_if_none)] = {}


class _GroupRoute(_Message):
    consumerGroupId: _GroupId
    route: _Route


class ConsumerAnswer(_RouteAnswer):
    """The answer of ``/route/consumer``."""

    consumerGroupIdRoutes: Annotated[list[_GroupRoute], BeforeValidator(_empty_list_if_none)] = []
    consumerGroups: Annotated[list[_Group], BeforeValidator(_empty_list_if_none)] = []


class _RuleInfo(_Message):
    id: StrictStr
    priority: int = 0
    meta: _Meta = {}


class _RulesAnswer(_Message):
    status: _Status
    routeRules: Annotated[list[_RuleInfo], BeforeValidator(_empty_list_if_none)] = []


class _ListAnswer(_Message):
    status: _Status
    clusters: Annotated[list[_Entity], BeforeValidator(_empty_list_if_none)] = []
    topics: Annotated[list[_Entity], BeforeValidator(_empty_list_if_none)] = []
    consumerGroups: Annotated[list[_Group], BeforeValidator(_empty_list_if_none)] = []


def client_message(client_id: str | None, meta: Mapping[str, str]) -> dict[str, Any]:
    """The protocol's ``Client`` message (``id`` "" when the client has none)."""
    return {"id": client_id or "", "meta": dict(meta)}


def producer_request(client: Mapping[str, Any], topics: Iterable[str]) -> dict[str, Any]:
    """The body of ``/route/producer``: ``{client, topicIds}``."""
    return {"client": client, "topicIds": list(topics)}


def consumer_request(client: Mapping[str, Any], groups: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The body of ``/route/consumer``: ``{client, consumerGroupIds: [{groupName, topicId}]}``."""
    return {
        "client": client,
        "consumerGroupIds": [{"groupName": g, "topicId": t} for g, t in groups],
    }


def parse_answer(model: type[_Message], data: Any, path: str) -> Any:
    """``data`` (decoded JSON) as ``model``, its status checked.

    Raises:
        AnswerRefused: wrong shape or types (every field named), or ``ack: fail``.
    """
    try:
        answer = model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise AnswerRefused(f"{path}: malformed answer: {problems}{more}") from None
    status: _Status = answer.status  # type: ignore[attr-defined]
    if status.ack == "fail":
        error = status.error or _Error()
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


def _merge_entities(into: dict[str, dict[str, Any]], entities: Mapping[str, _Entity], what: str) -> None:
    for key, entity in entities.items():
        if key != entity.id:
            raise AnswerRefused(f"{what} '{key}' is described with id '{entity.id}'")
        known = into.get(key)
        if known is not None and known["meta"] != entity.meta:
            raise AnswerRefused(f"{what} '{key}' is described twice, differently")
        into[key] = {"id": entity.id, "meta": dict(entity.meta)}


def _rule(rule_id: str, meta: dict[str, str], route: _Route, requested: str) -> dict[str, Any]:
    physical = route.topicId
    statement = crrl.Statement(route.clusterId, physical if physical != requested else None, ())
    # the routes of this stand-in report the rule the service named, or "" (unknown)
    return {"id": rule_id, "meta": {**meta, SERVED_RULE_ID: route.ruleId}, "rule": str(statement)}


def answer_documents(
    producer: ProducerAnswer | None,
    consumer: ConsumerAnswer | None,
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
            route = producer.topicIdRoutes.get(topic)
            if route is None:
                out.notes.append(f"no producer route for topic '{topic}'")
                continue
            meta = {"topic.id": topic}
            rules.append(_rule(f"producer:{topic}", meta, route, topic))
            out.answered.add((topic, None))
        extra = sorted(set(producer.topicIdRoutes) - set(asked))
        if extra:
            out.notes.append(f"ignored producer routes for topics not asked for: {extra}")
    asked_groups = list(groups_asked)
    if consumer is not None:
        _merge_entities(clusters, consumer.clusters, "cluster")
        _merge_entities(topics, consumer.topics, "topic")
        for group in consumer.consumerGroups:
            groups[(group.id.groupName, group.id.topicId)] = {
                "id": {"groupName": group.id.groupName, "topicId": group.id.topicId},
                "meta": dict(group.meta),
            }
        routes = {
            (r.consumerGroupId.groupName, r.consumerGroupId.topicId): r.route
            for r in consumer.consumerGroupIdRoutes
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
    c = parse_answer(_ListAnswer, clusters, "/meta/clusters/all")
    t = parse_answer(_ListAnswer, topics, "/meta/topics/all")
    g = parse_answer(_ListAnswer, groups, "/meta/consumer-groups/all")
    return {
        CLUSTERS_FILE: {"clusters": [{"id": e.id, "meta": dict(e.meta)} for e in c.clusters]},
        TOPICS_FILE: {"topics": [{"id": e.id, "meta": dict(e.meta)} for e in t.topics]},
        CONSUMER_GROUPS_FILE: {
            "consumer-groups": [
                {"id": {"groupName": e.id.groupName, "topicId": e.id.topicId}, "meta": dict(e.meta)}
                for e in g.consumerGroups
            ]
        },
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
    answer = parse_answer(_RulesAnswer, data, RULES_ALL_PATH)
    rules = []
    for info in answer.routeRules:
        meta = dict(info.meta)
        statement = meta.pop("rule", None)
        if statement is None:
            raise AnswerRefused(f"{RULES_ALL_PATH}: rule '{info.id}' has no statement (meta 'rule')")
        rules.append({"id": info.id, "priority": info.priority, "meta": meta, "rule": statement})
    return rules
