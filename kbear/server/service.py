"""The meta-service's answers: a request and a configuration in, a response out (no I/O).

Behaviour (``docs/reference/meta-service-protocol.md``, and the reference server where
the spec is silent):

- ``/route/producer``, ``/route/consumer``: an empty ``topicIds`` /
  ``consumerGroupIds`` is ``fail`` / ``bad_request``. Each distinct item is
  looked up with the CRRL chain (:class:`~kbear.router.Router`); an item without
  a route (or with an empty id) is left out of the answer and the status is
  ``partial_fail``, with ``error.code = no_route`` naming the first items left
  out (the reference sends no error there; the field is in the protocol).
  ``partial_fail`` also when no item at all has a route, as the reference does.
- ``topicIdRoutes`` is keyed by the **requested** topic; ``Route.topicId``
  is the physical topic (the reference keys by the physical topic: its defect);
  ``Route.ruleId`` names the rule that won (a kbear field: the reference's
  answer does not say, and clients that do not know it ignore it).
- ``clusters`` holds every cluster named by a route, meta as written
  (``${NAME}`` unresolved: kbear's clients resolve them from their environment);
  ``topics`` every physical topic named by a route, with
  its topics.yaml meta (empty when not listed); ``consumerGroups`` one entry per
  answered group, with its consumer-groups.yaml meta (empty when not listed).
- ``/route/rules`` and ``/meta/*``: an empty id list asks for everything
  (``success``), else the entries found in request order, ``partial_fail`` /
  ``not_found`` when some are not.
- Repeated items in one request are answered once; the status compares the
  answers with the distinct items asked.
- A client whose ``Client.meta`` lacks ``kbear.client`` (:data:`KBEAR_CLIENT_KEY`:
  KBear's Java client, ``curl``) cannot resolve placeholders nor apply a remap:
  its clusters' meta comes with ``${NAME}`` resolved from the server's
  environment, and only the route's cluster (no standbys: failing over is
  kbear's); an item whose cluster names a variable the server does not hold is
  left out (``partial_fail``, ``unresolved_placeholder`` naming the variable:
  never a partial address), and so is an item whose route is a remap
  (``remap_not_applicable`` naming the rule and the physical topic: such a
  client would use the requested topic's name on the route's cluster).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.responses import JSONResponse, Response

from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig, RouteRule, UnsetVariableError, resolve_placeholders

# Messages built here from a validated configuration skip pydantic's validation
# (model_construct): a 1,000-topic answer would otherwise spend most of its time
# re-checking strings the loader already checked.
from kbear.server import protocol as proto
from kbear.server.holder import Served

__all__ = [
    "bad_request",
    "clusters",
    "consumer_groups",
    "consumer_route",
    "fail",
    "is_kbear_client",
    "producer_route",
    "route_rules",
    "topics",
]

#: How many unanswered items a partial_fail message names at most.
_NAMED_AT_MOST = 10

_SUCCESS = proto.ResponseStatus(ack=proto.Ack.SUCCESS)
_K = TypeVar("_K")


def _status(ack: proto.Ack, code: proto.ErrorCode, message: str) -> proto.ResponseStatus:
    return proto.ResponseStatus(ack=ack, error=proto.ResponseError(code=code, message=message))


def bad_request(message: str) -> proto.ResponseStatus:
    """A ``fail`` status with ``error.code = bad_request``."""
    return _status(proto.Ack.FAIL, proto.ErrorCode.BAD_REQUEST, message)


def fail(
    http_status: int, code: proto.ErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """An HTTP answer ``http_status`` whose body is a ``fail`` status: ``{"status": {ack, error}}``."""
    status = _status(proto.Ack.FAIL, code, message)
    return JSONResponse({"status": status.model_dump(mode="json", exclude_none=True)}, http_status, headers)


def _partial(code: proto.ErrorCode, what: str, missing: Sequence[str]) -> proto.ResponseStatus:
    named = ", ".join(missing[:_NAMED_AT_MOST])
    more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
    message = f"{len(missing)} {what}: {named}{more}"
    return _status(proto.Ack.PARTIAL_FAIL, code, message)


def _client(message: proto.ClientMessage) -> Client:
    # The reference adds client.id only when the id is not blank.
    return Client(message.id or None, message.meta)


def is_kbear_client(message: proto.ClientMessage) -> bool:
    """Whether the client says it is kbear's (its meta holds :data:`~kbear.server.protocol.KBEAR_CLIENT_KEY`):
    it resolves ``${NAME}`` itself and applies remaps."""
    return proto.KBEAR_CLIENT_KEY in message.meta


@dataclass
class _Answering:
    """What one route answer collects: the clusters and topics it names, the items
    left out (no route) and those refused to this client (code, reason)."""

    config: KBearConfig
    kbear_client: bool
    environ: Mapping[str, str]
    clusters: dict[str, proto.ClusterMessage] = field(default_factory=dict)
    topics: dict[str, proto.TopicMessage] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    refused: list[tuple[proto.ErrorCode, str]] = field(default_factory=list)

    def take(self, item: str, route: Route) -> bool:
        """Add what ``route`` names; False (the item noted as refused) when this
        client cannot use it."""
        config, cluster_id = self.config, route.cluster_id
        if self.kbear_client:
            _add_cluster(config, self.clusters, cluster_id)
        elif route.remapped:
            reason = (
                f"{item}: rule '{route.rule_id}' routes it to topic '{route.topic}' on cluster "
                f"'{cluster_id}', a remap this client does not apply "
                f"(kbear's clients send Client.meta '{proto.KBEAR_CLIENT_KEY}')"
            )
            self.refused.append((proto.ErrorCode.REMAP_NOT_APPLICABLE, reason))
            return False
        elif cluster_id not in self.clusters:
            try:
                self.clusters[cluster_id] = _cluster(config, cluster_id, self.environ)
            except UnsetVariableError as exc:
                reason = f"{item}: cluster '{cluster_id}': {exc} on the server"
                self.refused.append((proto.ErrorCode.UNRESOLVED_PLACEHOLDER, reason))
                return False
        if route.topic not in self.topics:
            self.topics[route.topic] = _topic(config, route.topic)
        return True

    def routes(
        self, items: Iterable[_K], label: Callable[[_K], str], what: str, lookup: Callable[[_K], Route | None]
    ) -> Iterator[tuple[_K, proto.RouteMessage]]:
        """Each distinct item of ``items`` this client can use the route of, with it:
        ``lookup(item)`` (None or :class:`NoRouteError`: the item, by ``label``, noted
        missing), then :meth:`take` (``what``: the item's kind in a refusal's reason)."""
        for item in dict.fromkeys(items):
            try:
                route = lookup(item)
            except NoRouteError:
                route = None
            if route is None:
                self.missing.append(label(item))
            elif self.take(f"{what} '{label(item)}'", route):
                yield (
                    item,
                    proto.RouteMessage.model_construct(
                        cluster_id=route.cluster_id, topic_id=route.topic, rule_id=route.rule_id
                    ),
                )

    def status(self, what: str) -> proto.ResponseStatus:
        """``success``, or ``partial_fail`` naming what was left out and why."""
        if self.refused:
            code = self.refused[0][0]
            reasons = [reason for _, reason in self.refused[:_NAMED_AT_MOST]]
            if self.missing:
                reasons.append(_partial(proto.ErrorCode.NO_ROUTE, what, self.missing).error.message)  # type: ignore[union-attr]
            message = f"{len(self.refused)} item(s) not answered to this client: " + "; ".join(reasons)
            return _status(proto.Ack.PARTIAL_FAIL, code, message)
        return _partial(proto.ErrorCode.NO_ROUTE, what, self.missing) if self.missing else _SUCCESS


def _answering(
    config: KBearConfig, client: proto.ClientMessage, environ: Mapping[str, str] | None
) -> _Answering:
    return _Answering(config, is_kbear_client(client), os.environ if environ is None else environ)


def _cluster(
    config: KBearConfig, cluster_id: str, environ: Mapping[str, str] | None = None
) -> proto.ClusterMessage:
    """The cluster's message, meta as written; with ``environ``, every ``${NAME}`` of its
    meta resolved from it.

    Raises:
        UnsetVariableError: a placeholder names a variable ``environ`` lacks.
    """
    meta = config.clusters[cluster_id].meta
    if environ is not None:
        meta = {k: resolve_placeholders(v, environ) for k, v in meta.items()}
    return proto.ClusterMessage.model_construct(id=cluster_id, meta=dict(meta))


def _add_cluster(config: KBearConfig, clusters: dict[str, proto.ClusterMessage], cluster_id: str) -> None:
    """``cluster_id`` into ``clusters``, with its chain of standbys (``kbear.failover.to``):
    a client's configuration made of the answer names them (the standby must be a
    cluster of it), and a client failing over itself needs their connection data."""
    while cluster_id not in clusters and cluster_id in config.clusters:
        clusters[cluster_id] = _cluster(config, cluster_id)
        standby = config.clusters[cluster_id].failover.standby
        if standby is None:
            return
        cluster_id = standby


def _topic(config: KBearConfig, topic_id: str) -> proto.TopicMessage:
    return proto.TopicMessage.model_construct(id=topic_id, meta=dict(config.topic_meta(topic_id)))


def _group(config: KBearConfig, group_id: proto.ConsumerGroupIdMessage) -> proto.ConsumerGroupMessage:
    known = config.consumer_groups.get((group_id.group_name, group_id.topic_id))
    meta = {} if known is None else dict(known.meta)
    return proto.ConsumerGroupMessage.model_construct(id=group_id, meta=meta)


def _group_label(group_id: proto.ConsumerGroupIdMessage) -> str:
    return f"{group_id.group_name}@{group_id.topic_id}"


def producer_route(
    served: Served, request: proto.ProducerRouteRequest, environ: Mapping[str, str] | None = None
) -> proto.ProducerRouteResponse:
    """The answer to ``/route/producer``: the route of each requested topic.

    Args:
        environ: where a client that is not kbear's gets ``${NAME}`` resolved from
            (``os.environ`` when None).
    """
    if not request.topic_ids:
        return proto.ProducerRouteResponse(status=bad_request("topicIds is empty"))
    router, client = served.router, _client(request.client)
    answering = _answering(served.config, request.client, environ)
    lookup = lambda topic: router.route_producer(topic, client) if topic else None  # noqa: E731
    routes = dict(answering.routes(request.topic_ids, lambda topic: topic or "''", "topic", lookup))
    return proto.ProducerRouteResponse(
        status=answering.status("topic(s) without a route"),
        topic_id_routes=routes,
        clusters=answering.clusters,
        topics=answering.topics,
    )


def consumer_route(
    served: Served, request: proto.ConsumerRouteRequest, environ: Mapping[str, str] | None = None
) -> proto.ConsumerRouteResponse:
    """The answer to ``/route/consumer``: the route of each requested (group, topic).

    Args:
        environ: as for :func:`producer_route`.
    """
    if not request.consumer_group_ids:
        return proto.ConsumerRouteResponse(status=bad_request("consumerGroupIds is empty"))
    config, router, client = served.config, served.router, _client(request.client)
    answering = _answering(config, request.client, environ)

    def lookup(group_id: proto.ConsumerGroupIdMessage) -> Route | None:
        if not group_id.group_name or not group_id.topic_id:
            return None
        return router.route_consumer(group_id.topic_id, group_id.group_name, client)

    answered = list(answering.routes(request.consumer_group_ids, _group_label, "group", lookup))
    return proto.ConsumerRouteResponse(
        status=answering.status("consumer group(s) without a route (group@topic)"),
        consumer_group_id_routes=[
            proto.ConsumerGroupIdRoute.model_construct(consumer_group_id=group_id, route=route)
            for group_id, route in answered
        ],
        clusters=answering.clusters,
        topics=answering.topics,
        consumer_groups=[_group(config, group_id) for group_id, _ in answered],
    )


def _selected(
    wanted: Sequence[_K], known: Iterable[_K], not_found: str, label: Callable[[_K], str] = str
) -> tuple[list[_K], proto.ResponseStatus]:
    """The ids ``wanted`` (every known id, in order, when none is) that are ``known``,
    and the answer's status (``partial_fail`` naming the missing ones, by ``label``, as ``not_found``)."""
    if not wanted:
        return list(known), _SUCCESS
    known_set = set(known)
    asked = list(dict.fromkeys(wanted))
    missing = [label(item) for item in asked if item not in known_set]
    found = [item for item in asked if item in known_set]
    return found, _partial(proto.ErrorCode.NOT_FOUND, not_found, missing) if missing else _SUCCESS


def _rule_info(rule: RouteRule) -> proto.RouteRuleInfo:
    return proto.RouteRuleInfo(
        id=rule.id, priority=rule.priority, meta={**rule.meta, "rule": str(rule.statement)}
    )


def route_rules(served: Served, request: proto.RouteRulesRequest) -> proto.RouteRulesResponse:
    """The answer to ``/route/rules``: the rules asked for (every rule, in file order, when none is)."""
    rules = {rule.id: rule for rule in served.config.rules}
    ids, status = _selected(request.route_rule_ids, rules, "route rule(s) not found")
    return proto.RouteRulesResponse(status=status, route_rules=[_rule_info(rules[i]) for i in ids])


def clusters(served: Served, request: proto.ClustersRequest) -> proto.ClustersResponse:
    """The answer to ``/meta/clusters`` (every cluster, in file order, when none is asked for)."""
    config = served.config
    ids, status = _selected(request.cluster_ids, config.clusters, "cluster(s) not found")
    return proto.ClustersResponse(status=status, clusters=[_cluster(config, c) for c in ids])


def topics(served: Served, request: proto.TopicsRequest) -> proto.TopicsResponse:
    """The answer to ``/meta/topics``: topics of topics.yaml (all, in file order, when none is asked for)."""
    config = served.config
    ids, status = _selected(request.topic_ids, config.topics, "topic(s) not found")
    return proto.TopicsResponse(status=status, topics=[_topic(config, t) for t in ids])


def consumer_groups(served: Served, request: proto.ConsumerGroupsRequest) -> proto.ConsumerGroupsResponse:
    """The answer to ``/meta/consumer-groups`` (all, in file order, when none is asked for)."""
    config = served.config
    wanted = [(g.group_name, g.topic_id) for g in request.consumer_group_ids]
    keys, status = _selected(
        wanted, config.consumer_groups, "consumer group(s) not found (group@topic)", "@".join
    )
    groups = [_group(config, proto.ConsumerGroupIdMessage(group_name=g, topic_id=t)) for g, t in keys]
    return proto.ConsumerGroupsResponse(status=status, consumer_groups=groups)
