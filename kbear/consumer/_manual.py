"""The routed consumer under a ClientBalancedConsumer: a manual assignment that
follows route changes through the switch engine (:mod:`kbear.consumer._assigned`).

:class:`AssignedConsumer` is a :class:`~kbear.RoutedConsumer` whose balanced
topics are routed and listed in its subscription state (kind ``ASSIGNED``, set
by :meth:`AssignedConsumer.follow`, even for topics with no partition here) and
which never subscribes: partitions are added with ``incremental_assign`` and
removed with :meth:`AssignedConsumer.release`. ``switched_hook`` tells the owner
which partitions moved. Its non-underscore methods are what the owner
(:class:`~kbear.ClientBalancedConsumer`) uses: public names of :mod:`kbear.consumer`,
not of :mod:`kbear`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from confluent_kafka import TopicPartition

from kbear._route import Route
from kbear.consumer._assigned import SwitchedHook
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._facade import RoutedConsumer
from kbear.consumer._rebalance import commit_async
from kbear.consumer._subscription import SubscriptionKind, route_topics

T = TypeVar("T")


class AssignedConsumer(RoutedConsumer):
    """A RoutedConsumer reading assigned partitions of routed topics (see the module docstring)."""

    @property
    def switched_hook(self) -> SwitchedHook | None:
        """``hook(topic, old, new, partitions)`` called after an assigned topic's
        partitions moved to another cluster, or None."""
        return self._parts.assigned.switched_hook

    @switched_hook.setter
    def switched_hook(self, hook: SwitchedHook | None) -> None:
        self._parts.assigned.switched_hook = hook

    @property
    def lock(self) -> threading.RLock:
        """The consumer's lock (reentrant): the owner's changes and the consumer's calls
        do not interleave."""
        return self._lock

    @property
    def group(self) -> str:
        """The ``group.id``."""
        return self._group

    @property
    def registry(self) -> ClusterRegistry:
        """The per-cluster clients (the owner reads partition layouts through their
        background clients)."""
        return self._registry

    def native_config(self) -> dict[str, Any]:
        """A copy of the confluent-kafka configuration (kbear keys removed)."""
        return dict(self._core.native)

    def route(self, topic: str) -> Route:
        """The route in use of logical ``topic`` (looked up when it is not followed).

        Raises:
            NoRouteError: ``topic`` has no route.
        """
        return self._parts.placement.route(topic)

    def route_topics(self, topics: Sequence[str]) -> dict[str, Route]:
        """The routes of ``topics`` (logical topic -> route, looked up now).

        Raises:
            NoRouteError: some topics have no route (all of them are named).
        """
        return route_topics(self._core.router, topics, self._group, self._core.client, strict=True)

    def follow(self, topics: Sequence[str], routes: Mapping[str, Route], keep: Sequence[str]) -> None:
        """Follow ``routes`` (logical topic -> route, of ``topics``; kind
        ``ASSIGNED``): the topics of ``keep`` followed already keep their route in
        use (and a move in progress); the moves of topics no longer followed are dropped."""
        sub = self._sub
        self._driver.engine.forget([t for t in keep if t not in routes])
        kept = {t: sub.routes.get(t, r) if t in keep else r for t, r in routes.items()}
        sub.reset(SubscriptionKind.ASSIGNED, list(topics))
        sub.routes = kept

    def unfollow(self) -> None:
        """Follow no topic any more (drops every move in progress)."""
        self._sub.reset()
        self._driver.forget()

    def release(self, tp: TopicPartition, cluster_id: str) -> None:
        """Stop reading ``tp`` (logical name) registered on ``cluster_id``; with
        ``enable.auto.commit`` on, its position is committed first (with
        ``kbear.ack.mode=individual`` the acknowledged prefix; sent without waiting,
        before the partition is unassigned), so the next node starts there."""
        entry = self._registry.get(cluster_id)
        if entry is not None and self._rebalancer.commit_on_revoke:
            ((_, _, parts),) = self._parts.placement.split([tp])
            reached = [p for p in entry.consumer.position(parts) if p.offset >= 0]
            positions = self._rebalancer.lowered(entry, reached)
            if positions:
                commit_async(entry, positions, "as the partition is unregistered")
        self.incremental_unassign([tp])
        if entry is not None and not entry.topics and not entry.consumer.assignment():
            self._registry.deactivate(entry)
            self._loop.refresh()

    def submit(self, call: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``call(*args)`` in the consumer's background thread (it may use the
        background clients of several clusters)."""
        return self._driver.submit(None, call, *args)
