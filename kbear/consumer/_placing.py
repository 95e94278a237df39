"""Where a RoutedConsumer reads its topics and partitions.

Responsible for: each topic's route in use (the subscription's, else a consumer
lookup), the cluster client of a route (built on first use; when the cluster's
client properties changed, rebuilt and handed the old client's topics or
assignment), partitions split by cluster under their physical names, and the
subscription or assignment of a cluster's client noted in the registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass

from confluent_kafka import TopicPartition

from kbear._clients import Target, renamed
from kbear._identity import Client
from kbear._route import Route
from kbear.consumer._closing import close_consumer
from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._rebalance import Rebalancer, commit_async
from kbear.consumer._subscription import Subscription
from kbear.router import Router

log = logging.getLogger("kbear.consumer")


#: partitions of one cluster: (its client, their indexes in the caller's list, physical TopicPartitions)
Split = list[tuple[ClusterClient, list[int], list[TopicPartition]]]


@dataclass(eq=False)
class Placement:
    """The clusters of one RoutedConsumer's topics (see the module docstring).

    Args:
        sub: the consumer's subscription (its routes in use).
        registry: its per-cluster clients.
        rebalancer: its rebalance state (the cluster of a running callback, the
            callbacks a client subscribes with).
        driver: its switch driver (a client closes once its probes ended).
        router, group, client: what routes are looked up with.
        repin: called when the clients read changed (the consumer re-binds its fast paths).
        standby: turns a looked-up route into the one in force (the consumer's own
            failovers, :meth:`~kbear.consumer._failover.ConsumerFailover.route`).
            Every lookup of the consumer goes through it.
    """

    sub: Subscription
    registry: ClusterRegistry
    rebalancer: Rebalancer
    driver: SwitchDriver
    _: KW_ONLY
    router: Router
    group: str
    client: Client
    repin: Callable[[], None]
    standby: Callable[[Route], Route]

    def route(self, topic: str) -> Route:
        """The route in use of logical ``topic`` (looked up when it is not read).

        Raises:
            NoRouteError: ``topic`` has no route.
        """
        route = self.sub.routes.get(topic)
        if route is None:
            route = self.lookup(topic)
        return route

    def lookup(self, topic: str) -> Route:
        """The route of logical ``topic`` now (a consumer lookup, then :attr:`standby`).

        Raises:
            NoRouteError: ``topic`` has no route.
        """
        return self.standby(self.router.route_consumer(topic, self.group, self.client))

    def client_for(self, target: Target) -> ClusterClient:
        """The client of ``target``'s cluster, built (or rebuilt and handed over) if needed."""
        entry, replaced = self.registry.client(target)
        if replaced is not None:
            self._hand_over(replaced, entry)
        return entry

    def split(self, partitions: Iterable[TopicPartition]) -> Split:
        """Group partitions (logical names) by cluster, as physical TopicPartitions,
        with their indexes in the input; inside a rebalance callback, all of them
        are the rebalanced cluster's.

        Raises:
            NoRouteError: a topic has no route.
        """
        current = self.rebalancer.current
        if current is not None:
            parts = list(partitions)
            return [(current, list(range(len(parts))), current.to_physical(parts))]
        groups: dict[str, tuple[ClusterClient, list[int], list[TopicPartition]]] = {}
        for index, tp in enumerate(partitions):
            route = self.route(tp.topic)
            entry = self.client_for(route)
            if route.remapped:
                entry.logical.setdefault(route.topic, tp.topic)
                tp = renamed(tp, route.topic)
            group = groups.setdefault(route.cluster_id, (entry, [], []))
            group[1].append(index)
            group[2].append(tp)
        return list(groups.values())

    def resubscribe(self, entries: Iterable[ClusterClient]) -> None:
        """Subscribe each client of ``entries`` to its topics (or unsubscribe it, to
        be polled until its revocation was served, when it has none left)."""
        for entry in list(entries):
            if entry.topics:
                entry.consumer.subscribe(list(entry.topics), **self.rebalancer.callbacks_for(entry))
                self.registry.activate(entry)
            elif entry in self.registry.active:
                entry.consumer.unsubscribe()
                self.registry.leave(entry)
        self.repin()

    def assign(self, partitions: list[TopicPartition], *, incremental: bool) -> set[str]:
        """Assign ``partitions`` (logical names) on their clusters' clients
        (``incremental``: added to their assignments); returns those clusters' ids.

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: confluent-kafka refused the assignment.
        """
        split = self.split(partitions)
        for entry, _, parts in split:
            (entry.consumer.incremental_assign if incremental else entry.consumer.assign)(parts)
        self.assigned(entry for entry, _, _ in split)
        return {entry.cluster_id for entry, _, _ in split}

    def assigned(self, entries: Iterable[ClusterClient]) -> None:
        """The clients of ``entries`` were just assigned partitions: they are read."""
        for entry in entries:
            if entry is self.rebalancer.current:
                self.rebalancer.assigned_in_callback = True
            self.registry.activate(entry)
        self.repin()

    def close_client(self, entry: ClusterClient) -> None:
        """Close ``entry``'s client (its probes ended, what it consumed committed)."""
        self.driver.quiesce(entry.cluster_id)
        commit_async(entry, None, "as its client closes")  # sent before the close, which waits for it
        close_consumer(entry.consumer)
        self.registry.deactivate(entry)

    def _hand_over(self, old: ClusterClient, new: ClusterClient) -> None:
        """The cluster's client properties changed (a rotated credential, a tuned
        setting): the same topics of the same cluster, read on by a new client from
        where the old one left off (what it consumed is committed, then it closes).
        A subscription is made again; a manual assignment is carried over at the
        old client's positions (pauses are not)."""
        new.take_names(old)
        manual: list[TopicPartition] = []
        if not old.topics and old in self.registry.active:
            assigned = old.consumer.assignment()
            manual = old.consumer.position(assigned) if assigned else []
        self.close_client(old)
        log.info("kbear: client of cluster %r rebuilt: its properties changed", new.cluster_id)
        if new.topics:
            self.resubscribe([new])
        elif manual:
            new.consumer.assign(manual)
            self.assigned([new])
