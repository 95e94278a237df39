"""RoutedConsumer: the facade, its state and its per-cluster client lifecycle.

The confluent-kafka API is spread over base classes along its seams:
``_polling.PollLoop`` (poll, consume), ``_subscribing.SubscriptionCalls``
(subscribe, unsubscribe, route changes) and ``_partitions.PartitionCalls``
(commit, seek, assign...); this module holds construction, the client
registry's lifecycle (build, hand over, close), the fast-path binding and the
cluster-wide calls.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from kbear._base import NO_CONFIG, RoutedClientBase, check_config_argument, not_one_cluster, rename_metadata
from kbear._clients import cluster_target, open_router, single_cluster, split_config
from kbear._identity import Client
from kbear._route import Route
from kbear._switch import SwitchEngine
from kbear.consumer._ackcalls import AckCalls
from kbear.consumer._closing import close_consumer
from kbear.consumer._cluster import ClusterClient, ClusterRegistry, Target
from kbear.consumer._guard import MoveGuard
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._partitions import PartitionCalls
from kbear.consumer._polling import PollLoop
from kbear.consumer._rebalance import Rebalancer, commit_sync
from kbear.consumer._subscribing import SubscriptionCalls
from kbear.consumer._subscription import Subscription, SubscriptionKind
from kbear.consumer._turns import turn_taking
from kbear.router import Router

log = logging.getLogger("kbear.consumer")


class RoutedConsumer(AckCalls, PollLoop, SubscriptionCalls, PartitionCalls):
    """A ``confluent_kafka.Consumer`` reading each topic from the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) consumer configuration with
            ``group.id`` and without ``bootstrap.servers`` (the route supplies
            it), plus optional kbear keys (see :mod:`kbear.settings` and the
            README's table), removed before the configuration reaches confluent-kafka:
            ``kbear.config``, ``kbear.client.id``, ``kbear.client.meta.<key>``,
            ``kbear.reload.interval.ms``, ``kbear.switch.mode`` (``drain`` or
            ``immediate``), ``kbear.switch.drain.idle.ms``,
            ``kbear.switch.drain.timeout.ms``, ``kbear.switch.start``
            (``committed``, ``earliest``, ``latest``, ``timestamp``),
            ``kbear.switch.timestamp.margin.ms``; message-level acknowledgement
            (:meth:`ack`, :meth:`nack`...): ``kbear.ack.mode`` and the
            ``kbear.nack.*``, ``kbear.ack.timeout.*``, ``kbear.retry.*``,
            ``kbear.dlq.topic``, ``kbear.max.redeliver.count``,
            ``kbear.chunking.*`` keys (README, "Message-level acknowledgement").
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

    _fast_paths = ("poll", "consume")
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
        individual = self._check_ack_settings(self._settings, native)
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
        self._refresh_s = refresh_ms / 1000.0
        s = self._settings
        # Where a partition without a committed offset starts (librdkafka default: the end).
        reset = str(native.get("auto.offset.reset", "latest")).lower()
        engine = SwitchEngine(
            s.switch_mode,
            s.switch_start,
            idle_s=s.drain_idle_ms / 1000.0,
            timeout_s=s.drain_timeout_ms / 1000.0,
            timestamp_margin_ms=s.timestamp_margin_ms,
            reset_to_end=reset in ("latest", "largest", "end"),
        )
        self._router, self._owns_router = open_router(router, s, "RoutedConsumer")
        self._client = s.client
        self._registry = ClusterRegistry(native)
        self._sub = Subscription()
        self._rebalancer = Rebalancer(self, native)
        session_s = _ms_setting(native, "session.timeout.ms", 45_000) / 1000.0
        self._guard = MoveGuard(
            self._registry,
            enabled=self._rebalancer.commit_on_revoke,
            linger_s=s.drain_timeout_ms / 1000.0 + session_s,
            pause_s=session_s,
            clock=time.monotonic,
        )
        if self._rebalancer.commit_on_revoke:
            self._registry.commit_hook = self._guard.commit_answered
            self._rebalancer.assigned_hook = self._guard.assigned
        self._driver = SwitchDriver(
            engine,
            self._registry,
            self,
            commit_positions=self._rebalancer.commit_on_revoke,
            clock=time.monotonic,
        )
        self._pattern_topics: dict[str, set[str]] = {}  # cluster id -> topics it listed last
        self._pattern_job: Future[dict[str, set[str] | None]] | None = None
        self._lock = threading.RLock()
        self._rr = 0
        self._closed = False
        if individual:
            self._open_acks(native)
        self._listen(self._owns_router)
        try:
            self._open_home_cluster()
        except BaseException:
            with contextlib.suppress(Exception):  # the construction's error is the one to see
                self.close()
            raise

    def _open_home_cluster(self) -> None:
        """As confluent-kafka's client exists from construction on (``oauth_cb`` and
        the ``logger``'s first lines fire now, a failing callback raises now,
        ``consumer_group_metadata()`` answers now): when the configuration proves that
        every route of this consumer goes to one cluster, that cluster's client is
        built now; otherwise at the first subscribe or assign."""
        config = self._router.config
        home = single_cluster(config, self._client, self._group)
        if home is not None and home in config.clusters:
            self._client_for(cluster_target(home, config.clusters[home]))

    # ------------------------------------------------------------------ routing

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use for the current subscription."""
        return dict(self._sub.routes)

    def _route(self, topic: str) -> Route:
        route = self._sub.routes.get(topic)
        if route is None:
            route = self._router.route_consumer(topic, self._group, self._client)
        return route

    def _client_for(self, target: Target) -> ClusterClient:
        entry, replaced = self._registry.client(target)
        if replaced is not None:
            self._hand_over(replaced, entry)
        return entry

    def _native_clients(self) -> Iterable[Any]:
        return [entry.consumer for entry in self._registry]

    def _hand_over(self, old: ClusterClient, new: ClusterClient) -> None:
        """The cluster's client properties changed (a rotated credential, a tuned
        setting): the same topics of the same cluster, read on by a new client from
        where the old one left off (what it consumed is committed, then it closes).
        A subscription is made again; a manual assignment is carried over at the
        old client's positions (pauses are not)."""
        new.take_names(old)
        manual: list[Any] = []
        if not old.topics and old in self._registry.active:
            assigned = old.consumer.assignment()
            manual = old.consumer.position(assigned) if assigned else []
        self._close_client(old)
        log.info("kbear: client of cluster %r rebuilt: its properties changed", new.cluster_id)
        if new.topics:
            self._resubscribe([new])
        elif manual:
            new.consumer.assign(manual)
            self._note_assign([new])

    def _close_client(self, entry: ClusterClient) -> None:
        self._driver.quiesce(entry.cluster_id)
        commit_sync(entry, None, "as its client closes")
        close_consumer(entry.consumer)
        self._registry.deactivate(entry)

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
            or self._pending
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
        if self._pending:  # a reload landed meanwhile (watcher thread)
            self._unpin()

    def _turn_taking(self, consumers: list[Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """poll() and consume() over several clusters' clients with nothing to translate
        (kbear.consumer._turns: compiled when built, else pure-Python closures)."""
        return turn_taking(consumers, RoutedConsumer.poll.__get__(self), RoutedConsumer.consume.__get__(self))

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
        route = self._route(topic)
        md = self._client_for(route).consumer.list_topics(route.topic, timeout)
        return rename_metadata(md, route, topic)

    def memberid(self) -> str | None:
        """The group member id on the (first) cluster this consumer is subscribed to,
        or None before it joined. See :meth:`memberids` for every cluster."""
        self._check_open()
        for entry in self._registry.active:
            member: str | None = entry.consumer.memberid()
            return member
        return None

    def memberids(self) -> dict[str, str | None]:
        """Cluster id -> group member id on that cluster (kbear addition)."""
        self._check_open()
        return {e.cluster_id: e.consumer.memberid() for e in self._registry.active}

    def consumer_group_metadata(self) -> Any:
        """The group metadata for ``RoutedProducer.send_offsets_to_transaction``.

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster (group metadata exists per cluster) or from none yet.
        """
        self._check_open()
        clusters = self._registry.active or list(self._registry)
        if len(clusters) != 1:
            raise not_one_cluster(
                "consumer_group_metadata",
                "RoutedConsumer reads from",
                (e.cluster_id for e in clusters),
                "group metadata exists for one cluster only",
            )
        return clusters[0].consumer.consumer_group_metadata()

    def cluster_id(self, timeout: float = -1) -> str:
        """The Kafka cluster id (KIP-78) of the one cluster this consumer reads
        from, as ``confluent_kafka.Consumer.cluster_id`` (``timeout`` in seconds,
        -1: infinite).

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster or from none yet; the cluster's errors (e.g. ``_TIMED_OUT``).
        """
        self._check_open()
        clusters = self._registry.active or list(self._registry)
        if len(clusters) != 1:
            raise not_one_cluster(
                "cluster_id",
                "RoutedConsumer reads from",
                (e.cluster_id for e in clusters),
                "ask a route's cluster (routes()) or a one-cluster client",
            )
        return str(clusters[0].consumer.cluster_id(timeout))

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
