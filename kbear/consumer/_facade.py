"""RoutedConsumer: the facade, which builds its parts and hands each what it needs.

The parts, each given its collaborators explicitly (never the facade):
``_polling.PollLoop`` (poll, consume), ``_subscribing.SubscriptionCalls``
(subscribe, unsubscribe, route changes, the work between calls),
``_partitions.PartitionCalls`` (commit, seek, assign...),
``_assigned.AssignedMoves`` (a manual assignment following route changes),
``_placing.Placement`` (routes, cluster clients, splitting partitions by
cluster), ``_clusterwide.ClusterCalls`` (member ids, group metadata, cluster
id), ``_ackcalls.AckCalls`` and the acknowledgement layer; they share the
consumer's :class:`~kbear.consumer._subscription.ReadState`, registry, rebalance
state, switch driver and move guard. The facade's methods of the same names
delegate to them (:func:`kbear._delegate.delegate`: same signatures and
docstrings); this module holds the construction, the fast-path binding, the
cluster-wide calls and ``close``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kbear._base import NO_CONFIG, RoutedClientBase, check_config_argument, rename_metadata
from kbear._clients import cluster_target, open_router, single_cluster, split_config
from kbear._delegate import delegate
from kbear._identity import Client
from kbear._route import Route
from kbear._switch import StartPlan, SwitchEngine
from kbear.config import KBearConfig
from kbear.consumer._ackcalls import AckCalls, check_ack_settings, with_retry_topics
from kbear.consumer._assigned import AssignedMoves
from kbear.consumer._closing import close_consumer
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._clusterwide import ClusterCalls
from kbear.consumer._guard import MoveGuard
from kbear.consumer._individual import AckLayer, open_acks
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._partitions import PartitionCalls
from kbear.consumer._placing import Placement
from kbear.consumer._polling import PollLoop
from kbear.consumer._rebalance import Rebalancer
from kbear.consumer._subscribing import SubscriptionCalls
from kbear.consumer._subscription import ReadState, SubscriptionKind
from kbear.consumer._turns import turn_taking
from kbear.router import Router
from kbear.settings import KBearSettings

log = logging.getLogger("kbear.consumer")


class RoutedConsumer(RoutedClientBase):
    """A ``confluent_kafka.Consumer`` reading each topic from the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) consumer configuration with
            ``group.id`` and without ``bootstrap.servers`` (the route supplies
            it), plus optional kbear keys (see :mod:`kbear.settings` and the
            docs/reference/settings.md), removed before the configuration reaches confluent-kafka:
            ``kbear.config``, ``kbear.client.id``, ``kbear.client.meta.<key>``,
            ``kbear.reload.interval.ms``, ``kbear.switch.mode`` (``drain`` or
            ``immediate``), ``kbear.switch.drain.idle.ms``,
            ``kbear.switch.drain.timeout.ms``, ``kbear.switch.start``
            (``committed``, ``earliest``, ``latest``, ``timestamp``),
            ``kbear.switch.timestamp.margin.ms``; message-level acknowledgement
            (:meth:`ack`, :meth:`nack`...): ``kbear.ack.mode`` and the
            ``kbear.nack.*``, ``kbear.ack.timeout.*``, ``kbear.retry.*``,
            ``kbear.dlq.topic``, ``kbear.max.redeliver.count``,
            ``kbear.chunking.*`` keys (docs/concepts/acknowledgement.md).
        router: a :class:`~kbear.Router` to share; the consumer does not close it.
        client: who consumes (``client.*`` factors); or use ``kbear.client.*`` keys.
        **kwargs: more configuration, as confluent-kafka accepts (e.g. ``logger=``).

    Raises:
        TypeError: ``config`` is not a dict, or no configuration is given at
            all ("expected configuration dict", as confluent-kafka).
        ValueError: ``bootstrap.servers`` is set, ``group.id`` is missing
            ("Failed to create consumer: group.id must be set", as
            confluent-kafka), a kbear key is unknown or bad, or neither
            ``router`` nor ``kbear.config`` is given.
        KafkaException: confluent-kafka refused the configuration of the
            cluster's client built at construction (one-cluster configurations).
        ConfigError: the configuration directory is invalid.

    Routes are consumer lookups (group, topic, client) made at :meth:`subscribe`.
    There is one confluent-kafka Consumer per cluster, all in the same
    ``group.id``, with the cluster's properties merged over ``config``. Messages
    are confluent-kafka ``Message`` objects; for a remapped topic
    (``use cluster c, topic t2``) ``msg.topic()`` is the name the application
    subscribed to, and so are the topics of every ``TopicPartition`` taken or
    returned. Rebalance callbacks receive this RoutedConsumer.

    A route change (configuration reload) is applied in the caller's thread at
    the next call, by the switch engine (:mod:`kbear._switch`). In ``drain``
    mode the topic keeps being read on the old cluster until the old cluster
    stayed idle ``kbear.switch.drain.idle.ms`` and the group has committed every
    partition there at its end offset (checked in a background thread, so
    ``poll(timeout)`` keeps its timeout); then the topic is dropped there and
    subscribed on the new cluster. ``immediate`` switches at once: messages
    produced to the old cluster and not yet read are left behind. With
    ``enable.auto.commit`` on, positions are committed synchronously before
    partitions leave this member (rebalance), so the next owner starts there;
    and during a move (until ``kbear.switch.drain.timeout.ms`` +
    ``session.timeout.ms`` after this member's switch) what was read is committed
    at the next call (asynchronously; ``on_commit`` sees these commits), and a
    commit the group refuses while it rebalances pauses that cluster's partitions
    until the next assignment (see :mod:`kbear.consumer._guard`).

    Thread safety: calls from several threads are serialized by a lock, except
    that ``poll``/``consume`` release it while they wait on librdkafka; ``close()``
    from another thread ends a waiting ``poll`` within its current slice.
    """

    _fast_paths: tuple[str, ...] = ("poll", "consume")
    _closed_message = "Consumer closed"
    _kind = "consumer"

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        config = check_config_argument(config, kwargs, router)
        RoutedClientBase.__init__(self)
        native, self._settings = split_config(config, kwargs, client, "RoutedConsumer")
        group = native.get("group.id")
        if not group:
            # confluent-kafka's wording first; kbear checks it before librdkafka does
            raise ValueError(
                "Failed to create consumer: group.id must be set (kbear: consumer routes are "
                "looked up per consumer group, CRRL consumerGroup.groupName)"
            )
        self._group = str(group)
        individual = check_ack_settings(self._settings, native)
        self._native = native
        self._log = log
        # Checked before the router (and its watcher thread) exists: nothing to clean up.
        try:
            refresh_ms = int(native.get("topic.metadata.refresh.interval.ms", 300_000))
        except (TypeError, ValueError):
            raise ValueError(
                "RoutedConsumer: topic.metadata.refresh.interval.ms must be an integer number of ms, "
                f"got {native['topic.metadata.refresh.interval.ms']!r}"
            ) from None
        s = self._settings
        self._router, self._owns_router = open_router(router, s, "RoutedConsumer")
        self._client = s.client
        self._closed = False
        self._acks: AckLayer | None = None
        self._build(native, refresh_ms / 1000.0)
        if individual:
            self._open_acks(native)
        self._listen(self._owns_router)
        try:
            self._open_home_cluster()
        except BaseException:
            with contextlib.suppress(Exception):  # the construction's error is the one to see
                self.close()
            raise

    def _build(self, native: dict[str, Any], refresh_s: float) -> None:
        """Build the parts and hand each its collaborators."""
        s = self._settings
        self._lock = threading.RLock()
        self._state = state = ReadState()
        self._sub = state.sub
        self._registry = registry = ClusterRegistry(native)
        self._rebalancer = rebalancer = Rebalancer(self, native)  # hands this consumer to the callbacks
        session_s = _ms_setting(native, "session.timeout.ms", 45_000) / 1000.0
        self._guard = guard = MoveGuard(
            registry,
            enabled=rebalancer.commit_on_revoke,
            linger_s=s.drain_timeout_ms / 1000.0 + session_s,
            pause_s=session_s,
            clock=time.monotonic,
        )
        if rebalancer.commit_on_revoke:
            registry.commit_hook = guard.commit_answered
            rebalancer.assigned_hook = guard.assigned

        def switch(topic: str, old: Route, new: Route | None, start: StartPlan, clean: bool) -> None:
            subscriber.switch_topic(topic, old, new, start, clean)  # built below, before any switch

        self._driver = driver = SwitchDriver(
            _engine(s, native),
            registry,
            switch,
            commit_positions=rebalancer.commit_on_revoke,
            clock=time.monotonic,
        )
        repin, notify, check_open = self._refresh_pin, self._notify_route_change, self._check_open
        self._placement = placement = Placement(
            state.sub,
            registry,
            rebalancer,
            driver,
            router=self._router,
            group=self._group,
            client=self._client,
            repin=repin,
        )
        self._assigned = assigned = AssignedMoves(
            state.sub, registry, rebalancer, driver, guard, placement, repin=repin, notify=notify
        )
        self._partitions = PartitionCalls(
            state.sub,
            registry,
            rebalancer,
            driver,
            placement,
            assigned,
            lock=self._lock,
            check_open=check_open,
            repin=repin,
        )
        self._subscriber = subscriber = SubscriptionCalls(
            state,
            registry,
            rebalancer,
            driver,
            guard,
            placement,
            assigned,
            router=self._router,
            group=self._group,
            client=self._client,
            refresh_s=refresh_s,
            lock=self._lock,
            check_open=check_open,
            repin=repin,
            notify=notify,
        )
        self._loop = PollLoop(
            state,
            registry,
            driver,
            guard,
            between_calls=subscriber.between_calls,
            check_open=check_open,
            repin=repin,
        )
        self._ack_calls = AckCalls(None)
        self._cluster_calls = ClusterCalls(registry, check_open)

    def _open_acks(self, native: Mapping[str, Any]) -> None:
        """Build the acknowledgement layer and wire it in (``kbear.ack.mode=individual``):
        poll/consume are its delivering part's for good (never unbound by a reload)."""
        sub = self._sub
        layer, delivery = open_acks(
            self._settings,
            self._group,
            native,
            router=self._router,
            client=self._client,
            registry=self._registry,
            routes=lambda: sub.routes,
            poll=self._loop.poll,
            consume=self._loop.consume,
        )
        self._acks = self._partitions.acks = layer
        self._ack_calls = AckCalls(layer)
        self._loop.tap = delivery.tap
        self._rebalancer.commit_points = layer.commit_points
        self._rebalancer.revoked_hook = layer.revoked
        self._driver.commit_points = layer.commit_points
        self._fast_paths = ()
        self.__dict__["poll"] = delivery.poll
        self.__dict__["consume"] = delivery.consume
        if self._settings.retry_enable:
            self.__dict__["subscribe"] = with_retry_topics(self._subscriber.subscribe, layer)

    def _open_home_cluster(self) -> None:
        """As confluent-kafka's client exists from construction on (``oauth_cb`` and
        the ``logger``'s first lines fire now, a failing callback raises now,
        ``consumer_group_metadata()`` answers now): when the configuration proves that
        every route of this consumer goes to one cluster, that cluster's client is
        built now; otherwise at the first subscribe or assign."""
        config = self._router.config
        home = single_cluster(config, self._client, self._group)
        if home is not None and home in config.clusters:
            self._placement.client_for(cluster_target(home, config.clusters[home]))

    # ------------------------------------------------------------------ the parts' calls

    poll = delegate("_loop", PollLoop.poll)
    consume = delegate("_loop", PollLoop.consume)
    subscribe = delegate("_subscriber", SubscriptionCalls.subscribe)
    unsubscribe = delegate("_subscriber", SubscriptionCalls.unsubscribe)
    commit = delegate("_partitions", PartitionCalls.commit)
    committed = delegate("_partitions", PartitionCalls.committed)
    position = delegate("_partitions", PartitionCalls.position)
    assignment = delegate("_partitions", PartitionCalls.assignment)
    get_watermark_offsets = delegate("_partitions", PartitionCalls.get_watermark_offsets)
    offsets_for_times = delegate("_partitions", PartitionCalls.offsets_for_times)
    store_offsets = delegate("_partitions", PartitionCalls.store_offsets)
    seek = delegate("_partitions", PartitionCalls.seek)
    pause = delegate("_partitions", PartitionCalls.pause)
    resume = delegate("_partitions", PartitionCalls.resume)
    assign = delegate("_partitions", PartitionCalls.assign)
    unassign = delegate("_partitions", PartitionCalls.unassign)
    incremental_assign = delegate("_partitions", PartitionCalls.incremental_assign)
    incremental_unassign = delegate("_partitions", PartitionCalls.incremental_unassign)
    ack = delegate("_ack_calls", AckCalls.ack)
    ack_cumulative = delegate("_ack_calls", AckCalls.ack_cumulative)
    nack = delegate("_ack_calls", AckCalls.nack)
    reconsume_later = delegate("_ack_calls", AckCalls.reconsume_later)
    memberid = delegate("_cluster_calls", ClusterCalls.memberid)
    memberids = delegate("_cluster_calls", ClusterCalls.memberids)
    consumer_group_metadata = delegate("_cluster_calls", ClusterCalls.consumer_group_metadata)
    cluster_id = delegate("_cluster_calls", ClusterCalls.cluster_id)

    # ------------------------------------------------------------------ routing

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use for the current subscription."""
        return dict(self._sub.routes)

    def _native_clients(self) -> Iterable[Any]:
        return [entry.consumer for entry in self._registry]

    # the snapshot of kbear's metrics (RoutedClientBase.snapshot)
    def _routes_in_use(self) -> dict[str, Route]:
        return self.routes()

    def _drains_in_progress(self) -> int:
        return len(self._driver.engine.drains())

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag (and unbind the fast paths, so the
        # next call takes the slow path); the caller's thread applies.
        self._state.pending = True
        self._unpin()

    def _refresh_pin(self) -> None:
        """Bind poll() and consume() (instance attributes over the class methods) to the
        cheapest correct code for the current state: with one cluster and nothing for
        kbear to do per message (no remap, drain, pattern, pending reload...), that
        cluster's client's own bound methods; with several such clusters, closures that
        take turns over them; otherwise the class methods."""
        if self._acks is not None:  # poll/consume are the acknowledgement layer's for good
            return
        active = self._registry.active
        if (
            not active
            or self._closed
            or self._state.pending
            or self._driver.busy
            or self._guard.active
            or self._registry.leaving
            or self._sub.kind is SubscriptionKind.PATTERN
            or self._driver.engine.tracks_timestamps
            or any(entry.renames for entry in active)
        ):
            self._unpin()
            return
        d = self.__dict__
        if len(active) == 1:
            d["poll"] = active[0].consumer.poll
            d["consume"] = active[0].consumer.consume
        else:
            d["poll"], d["consume"] = self._turn_taking([entry.consumer for entry in active])
        if self._state.pending:  # a reload landed meanwhile (watcher thread)
            self._unpin()

    def _turn_taking(self, consumers: list[Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """poll() and consume() over several clusters' clients with nothing to translate
        (kbear.consumer._turns: compiled when built, else pure-Python closures)."""
        return turn_taking(consumers, self._loop.poll, self._loop.consume)

    # ------------------------------------------------------------------ cluster-wide calls

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Metadata of ``topic``'s cluster, or of the first subscribed (or assigned)
        cluster when None (of any cluster in use when none is).

        Raises:
            ValueError: ``topic`` is None and no cluster is in use yet.
            NoRouteError: ``topic`` has no route.
            KafkaException: the cluster did not answer within ``timeout`` seconds.
            RuntimeError: "Handle has been closed" (as confluent-kafka) after ``close()``.
        """
        if not self._initialized or self._closed:
            raise RuntimeError("Handle has been closed")
        if topic is None:
            # a subscribed (or assigned) cluster first, not a client kept only to
            # list topics for a pattern subscription
            entries = [*self._registry.active, *self._registry]
            if not entries:
                raise ValueError("list_topics: no cluster in use yet; subscribe or name a topic")
            return entries[0].consumer.list_topics(None, timeout)
        route = self._placement.route(topic)
        md = self._placement.client_for(route).consumer.list_topics(route.topic, timeout)
        return rename_metadata(md, route, topic)

    def close(self) -> None:
        """Close every cluster's client (committing, as confluent-kafka, when
        ``enable.auto.commit`` is on), then stop watching the configuration.

        Each client leaves its group first (its partitions paused, unsubscribed,
        the queued rebalance events served), then closes: librdkafka's own close
        can otherwise hang for good when an assignment arrives meanwhile
        (``kbear.consumer._closing``). ``on_revoke`` runs in the calling thread.

        Raises:
            KafkaException: a cluster's client failed to close (the others are closed).
            Exception: what an ``on_revoke`` callback run by the close raised (as
                confluent-kafka), once every client is closed.

        From another thread: calls made after it raise ``RuntimeError`` (as
        confluent-kafka); a ``poll`` waiting meanwhile returns within its current
        slice (confluent-kafka's ``close`` waits for a call in progress on the same
        client). The clients are closed outside kbear's lock, so a rebalance
        callback running in the polling thread is never blocked by it.
        """
        if not self._initialized:  # a subclass that never called __init__: nothing to close
            return
        if self._acks is not None and not self._closed:
            self._acks.close()  # letters in flight acknowledge their messages before the last commit
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._refresh_pin()
            self._stop_listening()
            self._guard.close()
            self._driver.close()
            clients = self._registry.clear()
        errors: list[BaseException] = []
        for consumer in clients:
            try:
                close_consumer(consumer)  # leaves the group first: librdkafka's close hang
            except Exception as exc:  # a callback's error too: close the rest first
                errors.append(exc)
        if self._owns_router:
            self._router.close()
        if errors:
            raise errors[0]

    def _check_open(self) -> None:
        # A rebalance callback that close() runs (on_revoke) may still use the
        # cluster it is called for, as with confluent-kafka.
        if self._closed and self._rebalancer.current is None:
            raise RuntimeError(self._closed_message)

    def __enter__(self) -> RoutedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ms_setting(native: Mapping[str, Any], key: str, default: int) -> int:
    """A librdkafka property in ms from the application's configuration (``default``
    when absent or not an integer: librdkafka itself reports a bad value)."""
    try:
        return int(native.get(key, default))
    except (TypeError, ValueError):
        return default


def _engine(s: KBearSettings, native: Mapping[str, Any]) -> SwitchEngine:
    """The switch engine of a consumer with settings ``s`` (``kbear.switch.*``)."""
    # Where a partition without a committed offset starts (librdkafka default: the end).
    reset = str(native.get("auto.offset.reset", "latest")).lower()
    return SwitchEngine(
        s.switch_mode,
        s.switch_start,
        idle_s=s.drain_idle_ms / 1000.0,
        timeout_s=s.drain_timeout_ms / 1000.0,
        timestamp_margin_ms=s.timestamp_margin_ms,
        reset_to_end=reset in ("latest", "largest", "end"),
    )
