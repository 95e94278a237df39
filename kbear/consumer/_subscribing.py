"""Subscribing a RoutedConsumer and following route changes.

Responsible for: the subscription (topic names and ``^regex`` patterns, whose
matches are refreshed in the background), the subscription of each cluster's
client to its share of the topics, the work due between two calls of the
application (a pending reload, the switch engine's decisions, a pattern
refresh: none of them waits on a broker), applying a reload (a cluster's client
rebuilt when its properties changed; a moved topic handed to the switch
engine), and carrying out the engine's switches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import KW_ONLY, dataclass
from typing import Any

from confluent_kafka import KafkaException

from kbear import _events
from kbear._clients import cluster_target
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear._switch import same_route
from kbear._switch_types import StartPlan
from kbear.consumer._assigned import AssignedMoves
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._guard import MoveGuard
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._placing import Placement
from kbear.consumer._rebalance import Rebalancer, commit_async
from kbear.consumer._subscription import (
    PATTERN_METADATA_TIMEOUT_S,
    ReadState,
    RebalanceCallback,
    SubscriptionKind,
    match_patterns,
    parse_topics,
    pattern_clusters,
    route_topics,
)
from kbear.router import Router

log = logging.getLogger("kbear.consumer")


@dataclass(eq=False)
class SubscriptionCalls:
    """The subscription of :class:`~kbear.RoutedConsumer` and its route changes
    (its ``subscribe`` / ``unsubscribe`` delegate here).

    Args:
        state: the consumer's shared state (subscription, pending reload).
        registry, rebalancer, driver, guard: its per-cluster clients, rebalance
            state, switch driver and move guard.
        placement: where its topics are read.
        assigned: the route following of a manual assignment (its switches).
        router, group, client: what routes are looked up with.
        refresh_s: seconds between two lookups of a pattern subscription's matches.
        lock: the consumer's lock.
        check_open: raises ``RuntimeError`` when the consumer is closed.
        repin: called when what the poll loop must look at changed.
        notify: ``notify(old, new)`` tells the route-change listeners.
    """

    state: ReadState
    registry: ClusterRegistry
    rebalancer: Rebalancer
    driver: SwitchDriver
    guard: MoveGuard
    placement: Placement
    assigned: AssignedMoves
    _: KW_ONLY
    router: Router
    group: str
    client: Client
    refresh_s: float
    lock: threading.RLock
    check_open: Callable[[], None]
    repin: Callable[[], None]
    notify: Callable[[Route, Route | None], None]

    #: lets time pass for the consumer's lost-cluster policy (between calls, while
    #: a cluster is seen down: ``ReadState.watching``); None: no client failover
    failover_tick: Callable[[], None] | None = None
    #: ends the consumer's own failovers the operator decided about, before a reload
    failover_release: Callable[[], None] | None = None
    #: ``kbear.ack.mode=individual``: the topics given to subscribe() with the retry
    #: topic of each name (``kbear.retry.enable``, :meth:`AckLayer.with_retry_topics`)
    retry_topics: Callable[[Sequence[str]], list[str]] | None = None

    def __post_init__(self) -> None:
        self._sub = self.state.sub
        self._pattern_topics: dict[str, set[str]] = {}  # cluster id -> topics it listed last
        self._pattern_job: Future[dict[str, set[str] | None]] | None = None

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Subscribe to ``topics``, each on the cluster of its consumer route.

        Args:
            topics: topic names (logical), or regular expressions starting with
                ``^`` (as librdkafka), matched against the topics of every cluster
                of the configuration and the topic ids of topics.yaml and the
                rules; each match is routed (unroutable matches and matches whose
                routed topic does not exist are left out). Matches are refreshed
                every ``topic.metadata.refresh.interval.ms`` (default 300000 ms)
                and after each reload. With ``kbear.retry.enable``, the retry topic
                of each named topic is subscribed too.
            on_assign, on_revoke, on_lost: ``callback(consumer, partitions)``, as
                confluent-kafka; ``consumer`` is this RoutedConsumer and the
                partitions carry logical topic names.

        Raises:
            NoRouteError: some topics have no route (all of them are named).
            KafkaException: an invalid regular expression (``_INVALID_ARG``), or
                confluent-kafka refused the subscription.
        """
        with self.lock:
            self.check_open()
            names, patterns = parse_topics(topics if self.retry_topics is None else self.retry_topics(topics))
            self.rebalancer.callbacks = {
                name: cb
                for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost))
                if cb is not None
            }
            self.state.pending = False
            self.driver.forget()
            self._pattern_job = None
            self.rebalancer.start_at.clear()
            self._sub.reset(
                SubscriptionKind.PATTERN if patterns else SubscriptionKind.TOPICS, names, patterns
            )
            self._set_subscription(names + self._match_patterns(), strict=True)

    def _set_subscription(
        self, topics: list[str], *, strict: bool, keep: Mapping[str, Route] | None = None
    ) -> None:
        """Route ``topics`` (see route_topics) and subscribe each cluster's client to
        its share; topics of ``keep`` stay on the route given there (a drain in progress)."""
        routes = route_topics(
            self.router, topics, self.group, self.client, strict=strict, standby=self.placement.standby
        )
        for topic, route in (keep or {}).items():
            if topic in routes:
                routes[topic] = route
        self._sub.routes = routes
        for entry in self.registry:
            entry.forget_topics()
        for topic, route in routes.items():
            self.placement.client_for(route).attach(topic, route)
        self.placement.resubscribe(self.registry)

    def _match_patterns(self) -> list[str]:
        """Topics matching the regular-expression subscriptions (see subscribe()),
        listing the clusters now (blocking: subscribe() and the first call)."""
        if not self._sub.patterns:
            return []
        self._sub.next_refresh = time.monotonic() + self.refresh_s
        return self._matches(self._list_clusters(self._pattern_clients()))

    def _pattern_clients(self) -> dict[str, Any]:
        """Cluster id -> the background client of each cluster a pattern may match on."""
        config = self.router.config
        return {
            cluster_id: self.registry.watcher(cluster_target(cluster_id, config.clusters[cluster_id]))
            for cluster_id in pattern_clusters(self.router)
        }

    @staticmethod
    def _list_clusters(clients: Mapping[str, Any]) -> dict[str, set[str] | None]:
        """Cluster id -> its topics (None: it did not answer within
        ``PATTERN_METADATA_TIMEOUT_S``); blocking, run in the background on refresh."""
        out: dict[str, set[str] | None] = {}
        for cluster_id, client in clients.items():
            try:
                md = client.list_topics(None, PATTERN_METADATA_TIMEOUT_S)
            except (KafkaException, RuntimeError) as exc:
                log.warning(
                    "kbear: cluster %r did not list its topics for the pattern subscription (%s); "
                    "using what it listed last",
                    cluster_id,
                    exc,
                )
                out[cluster_id] = None
            else:
                out[cluster_id] = {t for t in md.topics if not t.startswith("__")}
        return out

    def _matches(self, listed: Mapping[str, set[str] | None]) -> list[str]:
        """A cluster that did not answer counts with the topics it listed last time
        (none before its first answer): one cluster down does not stop the others'
        topics from being read."""
        listings: dict[str, set[str]] = {}
        for cluster_id, topics in listed.items():
            if topics is None:
                listings[cluster_id] = self._pattern_topics.get(cluster_id, set())
            else:
                listings[cluster_id] = self._pattern_topics[cluster_id] = topics
        return match_patterns(
            self._sub, self.router, self.group, self.client, listings, self.placement.standby
        )

    def _refresh_patterns(self) -> None:
        """Look the pattern matches up again, without blocking: the clusters are
        listed in the background; the answer is applied at a later call."""
        job = self._pattern_job
        if job is None:
            self._pattern_job = self.driver.submit(None, self._list_clusters, self._pattern_clients())
            return
        if not job.done():
            return
        self._pattern_job = None
        self._sub.next_refresh = time.monotonic() + self.refresh_s
        topics = self._sub.names + self._matches(job.result())
        if set(topics) != set(self._sub.routes):
            log.info("kbear: pattern subscription now matches %s", topics)
            engine = self.driver.engine
            engine.forget([t for t in self._sub.routes if t not in topics])
            draining = {t: r for t, r in self._sub.routes.items() if engine.drain_of(t) is not None}
            self._set_subscription(topics, strict=False, keep=draining)

    def unsubscribe(self) -> None:
        """Drop the subscription on every cluster (as ``Consumer.unsubscribe``)."""
        with self.lock:
            self.check_open()
            for entry in list(self.registry.active):
                entry.consumer.unsubscribe()
                entry.forget_topics()
                self.registry.leave(entry)
            self._sub.reset()
            self.driver.forget()
            self.repin()

    # ------------------------------------------------------------------ route changes

    def between_calls(self, wait_s: float | None = None) -> None:
        """The work due before a ``poll()``/``consume()`` goes on (under the lock):
        a pending reload applied, the move guard's and the switch engine's steps,
        a pattern subscription's refresh. Never waits on a broker; waits for the
        lock (held by a call from another thread) at most ``wait_s`` seconds (None:
        no limit), else leaves the work to the next call.

        Raises:
            RuntimeError: the consumer is closed.
        """
        if not self.lock.acquire(timeout=-1 if wait_s is None else max(0.0, wait_s)):
            return
        try:
            self.check_open()
            if self.state.watching and self.failover_tick is not None:
                self.failover_tick()
                if not self.state.watching:  # back, or failed over: the fast paths may return
                    self.repin()
            if self.state.pending:
                self._apply_changes()
            if self.guard.active and not self.guard.tick():
                self.repin()
            if self.driver.busy:
                self.driver.tick()
                self.repin()
            elif self._sub.kind is SubscriptionKind.PATTERN and (
                self._pattern_job is not None or time.monotonic() >= self._sub.next_refresh
            ):
                self._refresh_patterns()
        finally:
            self.lock.release()

    def _apply_changes(self) -> None:
        self.state.pending = False
        if self.failover_release is not None:
            self.failover_release()
        # A cluster whose client properties changed (a rotated credential, a tuned
        # setting): its client is rebuilt once, keeping its topics or its manual
        # assignment (see _hand_over); the same log needs no drain.
        clusters = self.router.config.clusters
        for entry in self.registry:
            cluster = clusters.get(entry.cluster_id)
            if cluster is not None and cluster.client_properties != entry.properties:
                self.placement.client_for(cluster_target(entry.cluster_id, cluster))
        for topic, old in list(self._sub.routes.items()):
            try:
                new: Route | None = self.placement.lookup(topic)
            except NoRouteError as exc:
                log.error("kbear: topic %r lost its route after reload: %s", topic, exc)
                new = None
            draining = self.driver.engine.drain_of(topic) is not None
            if not draining and same_route(old, new):
                continue
            if (
                not draining
                and new is not None
                and (new.cluster_id, new.topic) == (old.cluster_id, old.topic)
            ):
                # Same topic on the same cluster, other client properties: its
                # client was rebuilt above, nothing to drain.
                self._sub.routes[topic] = new
                self.notify(old, new)
                continue
            self.guard.route_changed()
            self.driver.route_changed(topic, old, new)
        if self._sub.kind is SubscriptionKind.PATTERN:
            self._sub.next_refresh = 0.0
        self.repin()

    def switch_topic(self, topic: str, old: Route, new: Route | None, start: StartPlan, clean: bool) -> None:
        """Carry out a switch of the engine: ``topic`` leaves ``old``'s cluster (after a
        ``clean`` drain its end offsets are committed: the revocation commits nothing
        more) and is read on ``new``'s cluster from ``start``. A manually assigned
        topic moves its partitions instead (:meth:`AssignedMoves.switch`)."""
        if self._sub.kind is SubscriptionKind.ASSIGNED:
            self.assigned.switch(topic, old, new, start, clean)
        else:
            old_entry = self.registry.get(old.cluster_id)
            if old_entry is not None:
                old_entry.detach(topic, old)
                if clean:
                    self.rebalancer.committed_to_end.add((old.cluster_id, old.topic))
                elif not self.rebalancer.commit_on_revoke:
                    # the drain timed out and the application commits: what it stored is
                    # committed as the topic leaves
                    commit_async(old_entry, None, "at route switch")
                self.placement.resubscribe([old_entry])
            if new is None:
                self._sub.routes.pop(topic, None)
            else:
                self._sub.routes[topic] = new
                self.rebalancer.start_at[(new.cluster_id, new.topic)] = start
                entry = self.placement.client_for(new)
                entry.attach(topic, new)
                self.placement.resubscribe([entry])
            extra = _events.fields("route_change", topic, old, new, reason="reload")
            log.info("kbear: topic %r switched from %r to %r", topic, old, new, extra=extra)
        self.guard.switched(self.driver.engine.draining)
        self.repin()
        self.notify(old, new)
