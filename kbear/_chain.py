"""The rule chain of one configuration (CRRL spec, "Priority and the chain" and
"Lookup"): the rules indexed by kind, the route factors of a lookup, and a
:class:`Snapshot` that evaluates and caches lookups and explains them. No I/O:
:class:`~kbear.router.Router` holds the snapshot in force and replaces it whole
on reload."""

from __future__ import annotations

from collections.abc import Iterable
from heapq import merge
from operator import attrgetter
from types import MappingProxyType

from kbear._identity import Client
from kbear._route import Explanation, Route, RuleVerdict
from kbear._standby import standby_route
from kbear.config import KBearConfig, RouteRule, RuleKind

#: lookups cached per snapshot before the cache is emptied
_CACHE_LIMIT = 100_000


_sort_key = attrgetter("sort_key")


def index_rules(
    rules: Iterable[RouteRule],
) -> tuple[list[RouteRule], dict[str, list[RouteRule]], dict[tuple[str, str], list[RouteRule]]]:
    """The rules by kind, each list in chain order (see :attr:`RouteRule.sort_key`):
    global rules, topic rules by topic, consumer-group rules by (group, topic)."""
    globals_: list[RouteRule] = []
    by_topic: dict[str, list[RouteRule]] = {}
    by_group: dict[tuple[str, str], list[RouteRule]] = {}
    for rule in rules:
        if rule.kind is RuleKind.GLOBAL:
            globals_.append(rule)
        elif rule.kind is RuleKind.TOPIC:
            by_topic.setdefault(rule.meta["topic.id"], []).append(rule)
        else:
            key = (rule.meta["consumerGroup.groupName"], rule.meta["consumerGroup.topicId"])
            by_group.setdefault(key, []).append(rule)
    for part in (globals_, *by_topic.values(), *by_group.values()):
        part.sort(key=_sort_key)
    return globals_, by_topic, by_group


def lookup_factors(config: KBearConfig, topic: str, group: str | None) -> dict[str, str]:
    """The ``topic.*`` and (for a consumer lookup, ``group`` not None)
    ``consumerGroup.*`` route factors of a lookup (CRRL spec, "Route factors").
    ``topic.id``, ``consumerGroup.groupName`` and ``consumerGroup.topicId`` win over
    meta keys of the same name."""
    out = {f"topic.{k}": v for k, v in config.topic_meta(topic).items()}
    out["topic.id"] = topic
    if group is not None:
        group_conf = config.consumer_groups.get((group, topic))
        if group_conf is not None:
            out.update((f"consumerGroup.{k}", v) for k, v in group_conf.meta.items())
        out["consumerGroup.groupName"] = group
        out["consumerGroup.topicId"] = topic
    return out


class Snapshot:
    """One configuration with its rule index and lookup cache (replaced whole on reload).

    ``failed``: the clusters failed over (``kbear.failover.active`` in
    ``clusters.yaml``, and ``also_failed``: those a ``kbear serve`` declared lost):
    their routes go to their standby (:func:`kbear._standby.standby_route`).
    """

    def __init__(self, config: KBearConfig, also_failed: frozenset[str] = frozenset()) -> None:
        self.config = config
        self.failed = also_failed | {c.id for c in config.clusters.values() if c.failover.active}
        self.globals, self.by_topic, self.by_group = index_rules(config.rules)
        self.cache: dict[tuple[str, str | None, Client], Route | None] = {}
        # per cluster: its properties, shared read-only by every Route to it
        self.properties = {c.id: MappingProxyType(c.client_properties) for c in config.clusters.values()}

    def chain(self, topic: str, group: str | None) -> Iterable[RouteRule]:
        specific = self.by_topic.get(topic)
        if group is not None:
            by_group = self.by_group.get((group, topic))
            if by_group:
                specific = sorted([*by_group, *(specific or ())], key=_sort_key)
        if not specific:
            return self.globals  # the common case: no rule names this topic
        return merge(specific, self.globals, key=_sort_key)

    def factors(self, topic: str, group: str | None, client: Client) -> dict[str, str]:
        out = client.factors()
        out.update(lookup_factors(self.config, topic, group))
        return out

    def route_for(self, rule: RouteRule, topic: str) -> Route:
        cluster = self.config.clusters[rule.statement.cluster]
        route = Route(
            cluster_id=cluster.id,
            topic=rule.statement.topic if rule.statement.topic is not None else topic,
            requested_topic=topic,
            bootstrap_servers=cluster.bootstrap_servers,
            rule_id=rule.reported_id,
            properties=self.properties[cluster.id],
        )
        return standby_route(route, self.config, self.failed) if self.failed else route

    def lookup(self, topic: str, group: str | None, client: Client) -> Route | None:
        key = (topic, group, client)
        try:
            return self.cache[key]
        except KeyError:
            pass
        factors = self.factors(topic, group, client)
        route = None
        for rule in self.chain(topic, group):
            if rule.statement.matches(factors):
                route = self.route_for(rule, topic)
                break
        if len(self.cache) >= _CACHE_LIMIT:
            self.cache.clear()
        self.cache[key] = route
        return route

    def explain(self, topic: str, group: str | None, client: Client) -> Explanation:
        factors = self.factors(topic, group, client)
        verdicts = []
        route = None
        evaluated = 0
        for rule in self.chain(topic, group):
            if route is not None:
                verdicts.append(RuleVerdict(rule, False, ()))
                continue
            evaluated += 1
            failed = tuple(
                f"{c.key}={c.value} (actual: {factors.get(c.key, '<absent>')})"
                for c in rule.statement.conditions
                if factors.get(c.key) != c.value
            )
            matched = not failed
            verdicts.append(RuleVerdict(rule, matched, failed))
            if matched:
                route = self.route_for(rule, topic)
        return Explanation(MappingProxyType(factors), tuple(verdicts), evaluated, route)
