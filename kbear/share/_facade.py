"""RoutedShareConsumer: confluent-kafka's ShareConsumer (KIP-932 share groups), routed."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from confluent_kafka import IllegalStateException, Messages

from kbear import _events
from kbear._base import (
    NO_CONFIG,
    ReloadSubscription,
    RouteChangeCallback,
    RoutedClient,
    open_client,
    open_core,
    weak_method,
)
from kbear._clients import Deadline, cluster_target, single_cluster
from kbear._delegate import delegate
from kbear._identity import Client
from kbear._route import Route
from kbear.config import KBearConfig
from kbear.router import Router
from kbear.share._acks import NeverOpened, ShareAcks
from kbear.share._clusters import ShareCluster, ShareClusters
from kbear.share._guard import (
    CLOSED,
    NOT_SUBSCRIBED,
    CallGuard,
    acknowledgement_mode,
    check_share_keys,
    check_timeout,
    check_topics,
)
from kbear.share._moves import ShareMoves, share_engine

log = logging.getLogger("kbear.share")

#: the longest a poll() waits on one cluster's share consumer before it looks at
#: the others, the drains and a reload again (seconds)
SLICE_S = 0.1


class RoutedShareConsumer(RoutedClient):
    """A ``confluent_kafka.ShareConsumer`` reading each topic from the cluster its route names.

    Args:
        config: a confluent-kafka share consumer configuration with ``group.id``
            (the share group) and without ``bootstrap.servers`` (the route supplies
            it), plus kbear keys: ``kbear.config``, ``kbear.client.id``,
            ``kbear.client.meta.<key>``, ``kbear.reload.interval.ms``,
            ``kbear.switch.mode``, ``kbear.switch.drain.idle.ms``,
            ``kbear.switch.drain.timeout.ms``, ``kbear.metrics.enable``
            (docs/reference/settings.md).
        router: a :class:`~kbear.Router` to share; the consumer does not close it.
        client: who consumes (``client.*`` factors); or use ``kbear.client.*`` keys.
        **kwargs: more configuration, as confluent-kafka accepts (e.g. ``logger=``).

    Raises:
        TypeError: no configuration dict ("expected configuration dict", as confluent-kafka).
        ValueError: ``bootstrap.servers`` is set, ``group.id`` is missing
            ("Failed to create consumer: group.id must be set", as confluent-kafka),
            a kbear key is unknown, bad or not for a share consumer
            (``kbear.ack.mode``, ``kbear.switch.start``...), neither ``router`` nor
            ``kbear.config`` is given, or confluent-kafka refused the configuration
            of the cluster's share consumer built at construction (``on_commit``...).
        ConfigError: the configuration directory is invalid.

    Routes are consumer lookups with the share group's name as the group (CRRL
    ``consumerGroup.groupName``), made at :meth:`subscribe`. There is one
    confluent-kafka ShareConsumer per cluster, each a member of the share group
    ``group.id`` on its cluster. Messages, acknowledgements, commit results and
    the acknowledgement commit callback carry the logical topic names (the
    names the application subscribed to); acknowledgements go to the cluster the
    record was acquired from.

    A route change (configuration reload) is applied at the next :meth:`poll`
    by the switch engine (:mod:`kbear._switch`): in ``drain`` mode the topic is
    read on the old cluster until that cluster gave this consumer nothing for
    ``kbear.switch.drain.idle.ms`` (records released or redelivered there are
    read first) and its acknowledgements there are committed, then it leaves the
    old cluster's subscription and joins the new cluster's, where the share group
    starts per its ``share.auto.offset.reset`` there (a share consumer does not
    seek). ``immediate`` moves at once, after committing the acknowledgements on
    the old cluster. Either way nothing acquired on the old cluster is left
    unacknowledged by the move. See docs/guides/share-groups.md.

    Thread safety: as confluent-kafka's, one thread at a time; a call from
    another thread while one is in progress raises
    ``ConcurrentModificationException``.
    """

    _kind = "share_consumer"
    _guard: CallGuard
    _acks: ShareAcks
    _initialized: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> RoutedShareConsumer:
        self = super().__new__(cls)
        self._guard = CallGuard()  # closed until __init__ completes
        refusing: Any = NeverOpened(CLOSED)  # a subclass not calling __init__: refused as closed
        self._acks = refusing
        self._initialized = False
        return self

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        if self._initialized:
            raise RuntimeError("ShareConsumer already initialized")
        kind = type(self).__name__
        if isinstance(config, Mapping) or config is NO_CONFIG:  # (else: open_client's TypeError)
            check_share_keys({**(config if isinstance(config, Mapping) else {}), **kwargs}, kind)
        native, self._settings = open_client(self, config, kwargs, client, router, kind)
        group = native.get("group.id")
        if not group:
            raise ValueError(
                "Failed to create consumer: group.id must be set (kbear: share consumer routes are "
                "looked up per share group, CRRL consumerGroup.groupName)"
            )
        if "on_commit" in native:
            raise ValueError("on_commit is not supported by the share consumer")
        self._group = str(group)
        self._clusters = ShareClusters(native)
        self._acks = ShareAcks(self._guard, self._clusters, acknowledgement_mode(native))
        self._subscription: list[str] = []
        self._routes: dict[str, Route] = {}  # logical topic -> route it is read on now
        self._readers: dict[str, ShareCluster] = {}  # logical topic -> share consumer reading it
        self._turn = 0
        self._core, self._owns_router = open_core(self._kind, native, self._settings, router, kind, log)
        self._moves = ShareMoves(
            share_engine(self._settings),
            weak_method(self._lookup),
            self._readers.get,
            weak_method(self._switch_topic),
        )
        self._initialized = True
        self._guard.closed = False
        self._reloads = ReloadSubscription(
            self,
            self._core.router,
            self._on_config_change,
            self._owns_router,
            partial(_release, self._clusters),
        )
        try:
            self._open_home_cluster()
        except BaseException:
            with contextlib.suppress(Exception):  # the construction's error is the one to see
                self.close()
            raise

    def _open_home_cluster(self) -> None:
        """As confluent-kafka's share consumer exists from construction on (its
        callbacks fire, a bad configuration raises now): when every route of this
        share group goes to one cluster, that cluster's share consumer is built now."""
        config = self._core.router.config
        home = single_cluster(config, self._core.client, self._group)
        if home is not None and home in config.clusters:
            self._clusters.client(cluster_target(home, config.clusters[home]))

    # ------------------------------------------------------------------ subscription

    def subscribe(self, topics: list[str]) -> None:
        """Set the subscription to ``topics`` (logical names), replacing the current
        one; an empty list unsubscribes. Each topic is read on the cluster of its
        route (a consumer lookup with the share group as the group).

        Raises:
            TypeError: ``topics`` is not a list (as confluent-kafka).
            ValueError: an empty or a repeated topic name (as confluent-kafka).
            NoRouteError: a topic has no route (nothing changed).
            IllegalStateException: the consumer is closed ("Share consumer closed").
            KafkaException: a cluster's share consumer refused the subscription.
        """
        with self._guard.call():
            names = check_topics(topics)
            routes = {topic: self._lookup(topic) for topic in names}
            self._moves.engine.forget()  # every drain: the subscription changed
            for entry in self._clusters.all():
                entry.topics.clear()
            self._routes = {}
            self._readers.clear()
            for topic, route in routes.items():
                self._read(topic, route)
            self._subscription = names
            for entry in self._clusters.all():
                entry.resubscribe()

    def unsubscribe(self) -> None:
        """Drop the subscription on every cluster.

        Raises:
            IllegalStateException: the consumer is closed.
        """
        self.subscribe([])

    def subscription(self) -> list[str]:
        """The subscribed topics (logical names), sorted as confluent-kafka returns them.

        Raises:
            IllegalStateException: the consumer is closed.
        """
        with self._guard.call():
            return sorted(self._subscription)

    def routes(self) -> dict[str, Route]:
        """Logical topic -> the route it is read on now (during a drain: the old one)."""
        return dict(self._routes)

    def _lookup(self, topic: str) -> Route:
        return self._core.router.route_consumer(topic, self._group, self._core.client)

    def _read(self, topic: str, route: Route) -> ShareCluster:
        entry = self._clusters.client(route)
        entry.read(route.topic, topic)
        self._routes[topic] = route
        self._readers[topic] = entry
        return entry

    # ------------------------------------------------------------------ records

    def poll(self, timeout: float = -1) -> Messages:
        """A batch of records acquired for this consumer, from the clusters of its
        topics in turn (confluent-kafka's ``ShareConsumer.poll``).

        Args:
            timeout: how long to wait for records, in seconds (-1: until some arrive).

        Returns:
            A ``Messages`` batch (empty when none arrived in time); each message's
            ``topic()`` is the logical name. In ``implicit`` mode the previous
            batch is accepted; in ``explicit`` mode every record of the previous
            batch must have been acknowledged.

        Raises:
            TypeError: ``timeout`` is not a number.
            IllegalStateException: not subscribed ("Consumer is not subscribed to
                any topics"), explicit mode with records of the previous poll not
                acknowledged ("N records from previous poll have not been
                acknowledged"), or closed.
            KafkaException: a cluster's share consumer failed.
        """
        with self._guard.call():
            deadline = Deadline(check_timeout(timeout))
            self._acks.check_acknowledged()
            if not self._subscription:
                raise IllegalStateException(NOT_SUBSCRIBED)
            self._acks.new_batch()
            while True:
                self._moves.apply(self._routes)
                reading = self._clusters.reading()
                if not reading:  # every topic lost its route: wait for a reload
                    time.sleep(self._slice(deadline, 2))
                    if deadline.expired():
                        return Messages()
                    continue
                self._turn = (self._turn + 1) % len(reading)
                order = reading[self._turn :] + reading[: self._turn]
                for entry in order:
                    batch = entry.client.poll(0)
                    if len(batch):
                        return self._adopt(entry, batch)
                if deadline.expired():
                    return Messages()
                entry = order[0]
                batch = entry.client.poll(self._slice(deadline, len(reading)))
                if len(batch):
                    return self._adopt(entry, batch)
                if deadline.expired():
                    return Messages()

    def _slice(self, deadline: Deadline, clusters: int) -> float:
        """How long the next wait on one cluster may take (seconds)."""
        left = deadline.remaining()
        cap = left if left is not None else SLICE_S
        if clusters > 1 or self._moves.engine.draining or self._moves.pending or left is None:
            cap = min(cap, SLICE_S)
        wake = self._moves.wake_in()
        return max(0.0, cap if wake is None else min(cap, wake))

    def _adopt(self, entry: ShareCluster, batch: Messages) -> Messages:
        """Give the records of ``entry``'s batch their logical names and note them."""
        draining = self._moves.engine.draining
        entry.acquired = True
        for msg in batch:
            physical = msg.topic()
            if physical is None:
                continue
            logical = entry.logical(physical)
            if logical != physical:
                msg.set_topic(logical)  # type: ignore[attr-defined]
            offset, partition = msg.offset(), msg.partition()
            if offset is not None and offset >= 0 and partition is not None:
                self._acks.add(entry, logical, physical, msg)
                if draining:
                    self._moves.acquired(logical, entry.cluster_id, partition)
        return batch

    # ------------------------------------------------------------------ acknowledgements

    acknowledge = delegate("_acks", ShareAcks.acknowledge)
    acknowledge_offset = delegate("_acks", ShareAcks.acknowledge_offset)
    commit_sync = delegate("_acks", ShareAcks.commit_sync)
    commit_async = delegate("_acks", ShareAcks.commit_async)
    set_acknowledgement_commit_callback = delegate("_acks", ShareAcks.set_acknowledgement_commit_callback)

    # ------------------------------------------------------------------ moves

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        self._moves.pending = True  # the reloading thread only flags; poll() applies

    def _switch_topic(self, topic: str, new: Route | None) -> None:
        """Read ``topic`` on ``new``'s cluster (None: nowhere) instead of where it is
        read now, the old cluster's acknowledgements committed first."""
        old_route = self._routes.get(topic)
        old = self._readers.pop(topic, None)
        if old is not None:
            old.topics.pop(old_route.topic if old_route is not None else topic, None)
            old.resubscribe()
        self._routes.pop(topic, None)
        if new is not None:
            entry = self._read(topic, new)
            entry.resubscribe()
        if old_route is not None:
            log.info(
                "kbear: share group %r reads topic %r on cluster %r now (was %r)",
                self._group,
                topic,
                None if new is None else new.cluster_id,
                old_route.cluster_id,
            )
            self._core.notify(old_route, new)

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the polling thread when a topic
        moved to another cluster (``new_route`` None: no route any more)."""
        self._core.listeners.append(callback)

    def snapshot(self) -> _events.ClientSnapshot | None:
        """What this client shows kbear's metrics now; None once closed."""
        if self._guard.closed:
            return None
        drains = len(self._moves.engine.drains())
        return self._core.snapshot(self.routes(), drains)

    # ------------------------------------------------------------------ the rest

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's share consumer and
        on those built later.

        Raises:
            TypeError: ``username`` or ``password`` is not a str.
            IllegalStateException: closed.
        """
        with self._guard.call():
            self._core.set_credentials([e.client for e in self._clusters.all()], username, password)

    def close(self) -> None:
        """Close every cluster's share consumer (each commits its pending
        acknowledgements and leaves the share group), then stop following
        reloads. A second close is a no-op.

        Raises:
            KafkaException: a cluster's share consumer failed to close (the others are closed).
        """
        if self._guard.closed:
            return
        with self._guard.call():
            self._guard.closed = True
            self._reloads.stop()
            errors = _close_clients(self._clusters)
            if self._owns_router:
                self._core.router.close()
            if errors:
                raise errors[0]


def _close_clients(clusters: ShareClusters) -> list[BaseException]:
    """Close every cluster's share consumer (each commits its pending
    acknowledgements and leaves the share group); the errors raised, each closed anyway."""
    errors: list[BaseException] = []
    for entry in clusters.clear():
        try:
            entry.client.close()
        except Exception as exc:
            errors.append(exc)
    return errors


def _release(clusters: ShareClusters) -> None:
    """A share consumer dropped unclosed (:class:`~kbear._base.ReloadSubscription`):
    its share consumers closed, as confluent-kafka's at its last reference."""
    for error in _close_clients(clusters):
        log.warning("kbear: closing a cluster client of a share consumer dropped unclosed: %s", error)
