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
  (``${NAME}`` unresolved); ``topics`` every physical topic named by a route, with
  its topics.yaml meta (empty when not listed); ``consumerGroups`` one entry per
  answered group, with its consumer-groups.yaml meta (empty when not listed).
- ``/route/rules`` and ``/meta/*``: an empty id list asks for everything
  (``success``), else the entries found in request order, ``partial_fail`` /
  ``not_found`` when some are not.
- Repeated items in one request are answered once; the status compares the
  answers with the distinct items asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kbear._identity import Client
from kbear._route import NoRouteError
from kbear.config import KBearConfig, RouteRule
from kbear.server.holder import Served

# Messages built here from a validated configuration skip pydantic's validation
# (model_construct): a 1,000-topic answer would otherwise spend most of its time
# re-checking strings the loader already checked.
from kbear.server.protocol import (
    Ack,
    ClientMessage,
    ClusterMessage,
    ClustersRequest,
    ClustersResponse,
    ConsumerGroupIdMessage,
    ConsumerGroupIdRoute,
    ConsumerGroupMessage,
    ConsumerGroupsRequest,
    ConsumerGroupsResponse,
    ConsumerRouteRequest,
    ConsumerRouteResponse,
    ErrorCode,
    ProducerRouteRequest,
    ProducerRouteResponse,
    ResponseError,
    ResponseStatus,
    RouteMessage,
    RouteRuleInfo,
    RouteRulesRequest,
    RouteRulesResponse,
    TopicMessage,
    TopicsRequest,
    TopicsResponse,
)

__all__ = [
    "bad_request",
    "clusters",
    "consumer_groups",
    "consumer_route",
    "producer_route",
    "route_rules",
    "topics",
]

#: How many unanswered items a partial_fail message names at most.
_NAMED_AT_MOST = 10

_SUCCESS = ResponseStatus(ack=Ack.SUCCESS)


def bad_request(message: str) -> ResponseStatus:
    """A ``fail`` status with ``error.code = bad_request``."""
    return ResponseStatus(ack=Ack.FAIL, error=ResponseError(code=ErrorCode.BAD_REQUEST, message=message))


def _partial(code: ErrorCode, what: str, missing: Sequence[str]) -> ResponseStatus:
    named = ", ".join(missing[:_NAMED_AT_MOST])
    more = f" and {len(missing) - _NAMED_AT_MOST} more" if len(missing) > _NAMED_AT_MOST else ""
    message = f"{len(missing)} {what}: {named}{more}"
    return ResponseStatus(ack=Ack.PARTIAL_FAIL, error=ResponseError(code=code, message=message))


def _client(message: ClientMessage) -> Client:
    # The reference adds client.id only when the id is not blank.
    return Client(message.id or None, message.meta)


def _cluster(config: KBearConfig, cluster_id: str) -> ClusterMessage:
    return ClusterMessage.model_construct(id=cluster_id, meta=dict(config.clusters[cluster_id].meta))


def _add_cluster(config: KBearConfig, clusters: dict[str, ClusterMessage], cluster_id: str) -> None:
    """``cluster_id`` into ``clusters``, with its chain of standbys (``kbear.failover.to``):
    a client's configuration made of the answer names them (the standby must be a
    cluster of it), and a client failing over itself needs their connection data."""
    while cluster_id not in clusters and cluster_id in config.clusters:
        clusters[cluster_id] = _cluster(config, cluster_id)
        standby = config.clusters[cluster_id].failover.standby
        if standby is None:
            return
        cluster_id = standby


def _topic(config: KBearConfig, topic_id: str) -> TopicMessage:
    return TopicMessage.model_construct(id=topic_id, meta=dict(config.topic_meta(topic_id)))


def _group(config: KBearConfig, group_id: ConsumerGroupIdMessage) -> ConsumerGroupMessage:
    known = config.consumer_groups.get((group_id.group_name, group_id.topic_id))
    meta = {} if known is None else dict(known.meta)
    return ConsumerGroupMessage.model_construct(id=group_id, meta=meta)


def _group_label(group_id: ConsumerGroupIdMessage) -> str:
    return f"{group_id.group_name}@{group_id.topic_id}"


def producer_route(served: Served, request: ProducerRouteRequest) -> ProducerRouteResponse:
    """The answer to ``/route/producer``: the route of each requested topic."""
    if not request.topic_ids:
        return ProducerRouteResponse(status=bad_request("topicIds is empty"))
    config, router = served.config, served.router
    client = _client(request.client)
    routes: dict[str, RouteMessage] = {}
    clusters: dict[str, ClusterMessage] = {}
    topics: dict[str, TopicMessage] = {}
    missing: list[str] = []
    for topic_id in dict.fromkeys(request.topic_ids):
        if not topic_id:
            missing.append("''")
            continue
        try:
            route = router.route_producer(topic_id, client)
        except NoRouteError:
            missing.append(topic_id)
            continue
        routes[topic_id] = RouteMessage.model_construct(
            cluster_id=route.cluster_id, topic_id=route.topic, rule_id=route.rule_id
        )
        _add_cluster(config, clusters, route.cluster_id)
        if route.topic not in topics:
            topics[route.topic] = _topic(config, route.topic)
    status = _partial(ErrorCode.NO_ROUTE, "topic(s) without a route", missing) if missing else _SUCCESS
    return ProducerRouteResponse(status=status, topic_id_routes=routes, clusters=clusters, topics=topics)


def consumer_route(served: Served, request: ConsumerRouteRequest) -> ConsumerRouteResponse:
    """The answer to ``/route/consumer``: the route of each requested (group, topic)."""
    if not request.consumer_group_ids:
        return ConsumerRouteResponse(status=bad_request("consumerGroupIds is empty"))
    config, router = served.config, served.router
    client = _client(request.client)
    answered: list[ConsumerGroupIdRoute] = []
    clusters: dict[str, ClusterMessage] = {}
    topics: dict[str, TopicMessage] = {}
    groups: list[ConsumerGroupMessage] = []
    missing: list[str] = []
    for group_id in dict.fromkeys(request.consumer_group_ids):
        if not group_id.group_name or not group_id.topic_id:
            missing.append(_group_label(group_id))
            continue
        try:
            route = router.route_consumer(group_id.topic_id, group_id.group_name, client)
        except NoRouteError:
            missing.append(_group_label(group_id))
            continue
        message = RouteMessage.model_construct(
            cluster_id=route.cluster_id, topic_id=route.topic, rule_id=route.rule_id
        )
        answered.append(ConsumerGroupIdRoute.model_construct(consumer_group_id=group_id, route=message))
        _add_cluster(config, clusters, route.cluster_id)
        if route.topic not in topics:
            topics[route.topic] = _topic(config, route.topic)
        groups.append(_group(config, group_id))
    status = (
        _partial(ErrorCode.NO_ROUTE, "consumer group(s) without a route (group@topic)", missing)
        if missing
        else _SUCCESS
    )
    return ConsumerRouteResponse(
        status=status,
        consumer_group_id_routes=answered,
        clusters=clusters,
        topics=topics,
        consumer_groups=groups,
    )


def _found(wanted: Iterable[str], known: Iterable[str]) -> tuple[list[str], list[str]]:
    known_set = set(known)
    found: list[str] = []
    missing: list[str] = []
    for item in dict.fromkeys(wanted):
        (found if item in known_set else missing).append(item)
    return found, missing


def _selected(wanted: Sequence[str], known: Iterable[str], what: str) -> tuple[list[str], ResponseStatus]:
    """The ids ``wanted`` (every known id, in order, when none is) that are ``known``,
    and the answer's status (``partial_fail`` naming the missing ones as ``what``)."""
    if not wanted:
        return list(known), _SUCCESS
    found, missing = _found(wanted, known)
    return found, _partial(ErrorCode.NOT_FOUND, f"{what} not found", missing) if missing else _SUCCESS


def _rule_info(rule: RouteRule) -> RouteRuleInfo:
    return RouteRuleInfo(id=rule.id, priority=rule.priority, meta={**rule.meta, "rule": str(rule.statement)})


def route_rules(served: Served, request: RouteRulesRequest) -> RouteRulesResponse:
    """The answer to ``/route/rules``: the rules asked for (every rule, in file order, when none is)."""
    rules = {rule.id: rule for rule in served.config.rules}
    ids, status = _selected(request.route_rule_ids, rules, "route rule(s)")
    return RouteRulesResponse(status=status, route_rules=[_rule_info(rules[i]) for i in ids])


def clusters(served: Served, request: ClustersRequest) -> ClustersResponse:
    """The answer to ``/meta/clusters`` (every cluster, in file order, when none is asked for)."""
    config = served.config
    ids, status = _selected(request.cluster_ids, config.clusters, "cluster(s)")
    return ClustersResponse(status=status, clusters=[_cluster(config, c) for c in ids])


def topics(served: Served, request: TopicsRequest) -> TopicsResponse:
    """The answer to ``/meta/topics``: topics of topics.yaml (all, in file order, when none is asked for)."""
    config = served.config
    ids, status = _selected(request.topic_ids, config.topics, "topic(s)")
    return TopicsResponse(status=status, topics=[_topic(config, t) for t in ids])


def consumer_groups(served: Served, request: ConsumerGroupsRequest) -> ConsumerGroupsResponse:
    """The answer to ``/meta/consumer-groups`` (all, in file order, when none is asked for)."""
    config = served.config
    if not request.consumer_group_ids:
        every = [
            _group(config, ConsumerGroupIdMessage(group_name=g.group_name, topic_id=g.topic_id))
            for g in config.consumer_groups.values()
        ]
        return ConsumerGroupsResponse(status=_SUCCESS, consumer_groups=every)
    found: list[ConsumerGroupMessage] = []
    missing: list[str] = []
    for group_id in dict.fromkeys(request.consumer_group_ids):
        if (group_id.group_name, group_id.topic_id) in config.consumer_groups:
            found.append(_group(config, group_id))
        else:
            missing.append(_group_label(group_id))
    status = (
        _partial(ErrorCode.NOT_FOUND, "consumer group(s) not found (group@topic)", missing)
        if missing
        else _SUCCESS
    )
    return ConsumerGroupsResponse(status=status, consumer_groups=found)
