"""What a RoutedConsumer reads: the subscription state and its routes.

The kind is explicit (:class:`SubscriptionKind`): nothing, a list of topics,
topics and regular expressions (``^...``, matched against the clusters' topics
and refreshed), or a manual assignment. Routing a subscription is a consumer
lookup per topic (group, topic, client); several unroutable topics are named in
one :class:`~kbear.NoRouteError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear._base import no_route
from kbear._identity import Client
from kbear._route import MetaServiceUnavailable, NoRouteError, Route
from kbear.config import RuleKind
from kbear.router import Router

log = logging.getLogger("kbear.consumer")

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]

#: How long a pattern subscription waits for one cluster's topic list (seconds).
PATTERN_METADATA_TIMEOUT_S = 5.0


class SubscriptionKind(Enum):
    """What a RoutedConsumer reads."""

    NONE = "none"
    TOPICS = "topics"  # subscribe() with topic names only
    PATTERN = "pattern"  # subscribe() with at least one ^regex
    ASSIGNED = "assigned"  # assign() outside a subscription


@dataclass
class Subscription:
    """The state of a RoutedConsumer's subscription.

    Attributes:
        kind: see :class:`SubscriptionKind`.
        names: the topic names given (logical).
        patterns: the compiled ``^regex`` subscriptions.
        routes: logical topic -> route in use, for every topic read (names and matches).
        next_refresh: when pattern matches are looked up again (monotonic seconds).
    """

    kind: SubscriptionKind = SubscriptionKind.NONE
    names: list[str] = field(default_factory=list)
    patterns: list[re.Pattern[str]] = field(default_factory=list)
    routes: dict[str, Route] = field(default_factory=dict)
    next_refresh: float = 0.0

    def reset(
        self,
        kind: SubscriptionKind = SubscriptionKind.NONE,
        names: list[str] | None = None,
        patterns: list[re.Pattern[str]] | None = None,
    ) -> None:
        """Start over as a subscription of ``kind`` (no routes yet). In place: the
        consumer's parts share this object; every container is replaced, never
        emptied, so a poll loop in another thread keeps reading a consistent one."""
        self.kind = kind
        self.names = list(names or [])
        self.patterns = list(patterns or [])
        self.routes = {}
        self.next_refresh = 0.0


@dataclass(eq=False)
class ReadState:
    """What the parts of one RoutedConsumer share, handed to each of them (as
    aiokafka's ``SubscriptionState`` is to its fetcher and coordinator).

    Attributes:
        sub: the subscription (one object for the consumer's life, :meth:`Subscription.reset`).
        pending: a reload waits to be applied: set by the reloading thread, cleared
            by the caller's thread when it applies it (or subscribes anew).
        watching: a cluster was seen down with ``kbear.failover.enable`` on: every
            call lets time pass for the lost-cluster policy (no fast path).
    """

    sub: Subscription = field(default_factory=Subscription)
    pending: bool = False
    watching: bool = False


def parse_topics(topics: Iterable[str]) -> tuple[list[str], list[re.Pattern[str]]]:
    """Split subscribe()'s ``topics`` into names and compiled ``^regex`` patterns.

    Raises:
        KafkaException: ``_INVALID_ARG`` for an invalid regular expression (as librdkafka).
    """
    names: list[str] = []
    patterns: list[re.Pattern[str]] = []
    for t in topics:
        if not t.startswith("^"):
            names.append(t)
            continue
        try:
            patterns.append(re.compile(t))
        except re.error as exc:
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, f"invalid topic pattern {t!r}: {exc}")
            ) from None
    return names, patterns


def route_topics(
    router: Router,
    topics: Iterable[str],
    group: str,
    client: Client,
    *,
    strict: bool,
    standby: Callable[[Route], Route] | None = None,
) -> dict[str, Route]:
    """Consumer routes of ``topics`` (logical -> route, in order).

    With ``strict``, every unroutable topic is named in one NoRouteError;
    otherwise unroutable topics are left out (pattern matches). ``standby`` turns a
    route into the one in force (a consumer's own failovers).

    Raises:
        NoRouteError: ``strict`` and some topics have no route; the first
            :class:`~kbear.MetaServiceUnavailable` when a meta-service that cannot
            be reached is why.
    """
    routes: dict[str, Route] = {}
    failures: list[str] = []
    unavailable: MetaServiceUnavailable | None = None
    for topic in topics:
        try:
            route = router.route_consumer(topic, group, client)
            routes[topic] = route if standby is None else standby(route)
        except NoRouteError as exc:
            failures.append(topic)
            if unavailable is None and isinstance(exc, MetaServiceUnavailable):
                unavailable = exc
    if failures and strict:
        raise unavailable or no_route(client, failures, group)
    return routes


def pattern_clusters(router: Router) -> list[str]:
    """The clusters whose topics a pattern is matched against: those named by rules."""
    return sorted({rule.statement.cluster for rule in router.config.rules})


def match_patterns(
    sub: Subscription,
    router: Router,
    group: str,
    client: Client,
    listings: Mapping[str, set[str]],
    standby: Callable[[Route], Route] | None = None,
) -> list[str]:
    """Logical topics matching ``sub.patterns`` (names given as names excluded),
    whose route leads to a topic that exists on its cluster.

    Args:
        listings: cluster id -> the (physical) topics it lists.
        standby: turns a route into the one in force (a consumer's own failovers).
    """
    # besides the clusters' own topics: topics.yaml ids and the topic ids of the rules
    # that apply to ``group``
    config = router.config
    candidates = set(config.topics).union(*listings.values())
    for rule in config.rules:
        if rule.topic_id is not None and (rule.kind is RuleKind.TOPIC or rule.group_name == group):
            candidates.add(rule.topic_id)
    names = [n for n in sorted(candidates) if n not in sub.names and any(p.search(n) for p in sub.patterns)]
    routes = route_topics(router, names, group, client, strict=False, standby=standby)
    return [name for name, route in routes.items() if route.topic in listings.get(route.cluster_id, ())]
