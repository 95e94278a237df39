"""RoutedConsumer: the facade over the parts of a routed consumer.

:func:`~kbear.consumer._assembly.assemble` builds the parts and hands each its
collaborators explicitly (never the facade): ``_polling.PollLoop`` (poll,
consume, the fast paths), ``_subscribing.SubscriptionCalls`` (subscribe,
unsubscribe, route changes, the work between calls),
``_partitions.PartitionCalls`` (commit, seek, assign...),
``_assigned.AssignedMoves`` (a manual assignment following route changes),
``_placing.Placement`` (routes, cluster clients, splitting partitions by
cluster) and the acknowledgement layer; they share the consumer's
:class:`~kbear.consumer._subscription.ReadState`, registry, rebalance state,
switch driver and move guard. The facade's methods of the same names delegate
to them (the acknowledgement calls without the layer to
``_individual.OffsetAcks``, which refuses them) (:func:`kbear._delegate.delegate`:
same signatures and docstrings); this module holds the construction, what every
routed client has (router, client, route-change listeners, credentials, the
metrics snapshot), the calls about the clusters as a whole (``list_topics``,
member ids, group metadata, cluster id) and ``close``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ClassVar

from kbear import _events
from kbear._base import (
    NO_CONFIG,
    ReloadSubscription,
    RouteChangeCallback,
    RoutedClient,
    not_one_cluster,
    open_client,
    open_core,
    refuse_calls,
    rename_metadata,
    weak_method,
)
from kbear._clients import cluster_target, single_cluster
from kbear._compiled import EXTENSION
from kbear._delegate import delegate
from kbear._identity import Client
from kbear._route import Route
from kbear.config import KBearConfig
from kbear.consumer._assembly import Parts, assemble
from kbear.consumer._closing import close_consumer, close_consumer_later
from kbear.consumer._individual import AckLayer, OffsetAcks, check_ack_settings
from kbear.consumer._partitions import PartitionCalls
from kbear.consumer._polling import PollLoop
from kbear.consumer._subscribing import SubscriptionCalls
from kbear.router import Router

log = logging.getLogger("kbear.consumer")

#: confluent-kafka's RuntimeError message of a call on a closed consumer
_CLOSED = "Consumer closed"
#: the parts a call goes to: in an instance whose __init__ never ran, each refuses
_PARTS = (
    "_loop",
    "_subscriber",
    "_partitions",
    "_ack_calls",
    "_sub",
    "_rebalancer",
    "_core",
)


class RoutedConsumer(RoutedClient):
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
    ``enable.auto.commit`` on, positions are committed (without waiting for the
    answer) before partitions leave this member (rebalance), so the next owner
    starts there;
    and during a move (until ``kbear.switch.drain.timeout.ms`` +
    ``session.timeout.ms`` after this member's switch) what was read is committed
    at the next call (asynchronously; ``on_commit`` sees these commits), and a
    commit the group refuses while it rebalances pauses that cluster's partitions
    until the next assignment (see :mod:`kbear.consumer._guard`).

    Thread safety: calls from several threads are serialized by a lock, except
    that ``poll``/``consume`` release it while they wait on librdkafka; ``close()``
    from another thread ends a waiting ``poll`` within its current slice. A call
    from another thread while one polls (``assignment()``, ``position()``...) waits
    at most for the ``poll``/``consume`` in progress (as long as its timeout), then
    the polling thread lets it through: confluent-kafka lets such a call reach a
    client only between two polls of it, and a thread polling in a loop would
    otherwise always come first.
    """

    # ``_fast_poll``, ``_fast_consume``: this instance's fast paths (None: the poll
    # loop), read by the compiled ``poll``/``consume`` (kbear._cdispatch.FastMethod)
    # at every call, as RoutedProducer's ``_fast_produce``.
    __slots__ = ("__dict__", "__weakref__", "_fast_consume", "_fast_poll")

    #: where the fast paths go: the slots the compiled methods read (True when the
    #: extension is built), or the instance's dictionary, over the methods
    _fast_slots: ClassVar[bool] = EXTENSION is not None

    def __new__(cls, *args: Any, **kwargs: Any) -> RoutedConsumer:
        self = super().__new__(cls)
        self._fast_poll = None
        self._fast_consume = None
        # What an instance whose __init__ never ran (a subclass not calling it) has:
        # every call refuses as a closed confluent-kafka Consumer.
        self._initialized = False
        self._closed = True
        refuse_calls(self, _PARTS, _CLOSED)
        return self

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        native, self._settings = open_client(self, config, kwargs, client, router, "RoutedConsumer")
        group = native.get("group.id")
        if not group:
            # confluent-kafka's wording first; kbear checks it before librdkafka does
            raise ValueError(
                "Failed to create consumer: group.id must be set (kbear: consumer routes are "
                "looked up per consumer group, CRRL consumerGroup.groupName)"
            )
        self._group = str(group)
        individual = check_ack_settings(self._settings, native)
        # Checked before the router (and its watcher thread) exists: nothing to clean up.
        try:
            refresh_ms = int(native.get("topic.metadata.refresh.interval.ms", 300_000))
        except (TypeError, ValueError):
            raise ValueError(
                "RoutedConsumer: topic.metadata.refresh.interval.ms must be an integer number of ms, "
                f"got {native['topic.metadata.refresh.interval.ms']!r}"
            ) from None
        self._core, self._owns_router = open_core(
            "consumer", native, self._settings, router, "RoutedConsumer", log
        )
        self._closed = False
        self._initialized = True
        parts = self._build(native, refresh_ms / 1000.0, individual)
        self._reloads = ReloadSubscription(
            self, self._core.router, self._on_config_change, self._owns_router, partial(_release, parts)
        )
        try:
            self._open_home_cluster()
        except BaseException:
            with contextlib.suppress(Exception):  # the construction's error is the one to see
                self.close()
            raise

    def _build(self, native: dict[str, Any], refresh_s: float, individual: bool) -> Parts:
        """Build the parts (:func:`~kbear.consumer._assembly.assemble`) and keep each
        one the facade's methods delegate to. No part refers to the consumer but
        through a weak reference (:func:`kbear._base.weak_method`): a consumer
        dropped unclosed is freed at its last reference."""
        check_open = weak_method(self._check_open, _refuse)
        parts = assemble(
            self,
            self._settings,
            native,
            router=self._core.router,
            client=self._core.client,
            group=self._group,
            refresh_s=refresh_s,
            notify=self._core.notify,
            check_open=check_open,
            store=weak_method(self._store_fast_paths),
            individual=individual,
        )
        self._parts = parts
        self._lock = parts.lock
        self._sub = parts.state.sub
        self._registry = parts.registry
        self._rebalancer = parts.rebalancer
        self._driver = parts.driver
        self._partitions = parts.partitions
        self._subscriber = parts.subscriber
        self._loop = parts.loop
        self._ack_calls = OffsetAcks() if parts.acks is None else parts.acks
        self._acks = parts.acks
        return parts

    def _open_home_cluster(self) -> None:
        """As confluent-kafka's client exists from construction on (``oauth_cb`` and
        the ``logger``'s first lines fire now, a failing callback raises now,
        ``consumer_group_metadata()`` answers now): when the configuration proves that
        every route of this consumer goes to one cluster, that cluster's client is
        built now; otherwise at the first subscribe or assign."""
        config = self._core.router.config
        home = single_cluster(config, self._core.client, self._group)
        if home is not None and home in config.clusters:
            self._parts.placement.client_for(cluster_target(home, config.clusters[home]))

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
    ack = delegate("_ack_calls", AckLayer.ack)
    ack_cumulative = delegate("_ack_calls", AckLayer.ack_cumulative)
    nack = delegate("_ack_calls", AckLayer.nack)
    reconsume_later = delegate("_ack_calls", AckLayer.reconsume_later)

    # ------------------------------------------------------------------ routing

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use for the current subscription."""
        return dict(self._sub.routes)

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        topic in use has switched clusters (``new_route`` None: no route any more).
        A hook that raises is logged and the switch stands."""
        self._core.listeners.append(callback)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on
        clients built later (as confluent-kafka's ``set_sasl_credentials``).

        Raises:
            TypeError: ``username`` or ``password`` is not a str (as confluent-kafka).
        """
        if not self._initialized:
            raise RuntimeError(_CLOSED)
        self._core.set_credentials([entry.consumer for entry in self._registry], username, password)

    def snapshot(self) -> _events.ClientSnapshot | None:
        """What this client shows kbear's metrics now (:class:`kbear._events.ClientSnapshot`):
        its kind, ``client.id``, group, routes in use, drains in progress and the
        configuration in force; None once closed, or when its constructor failed.

        Raises:
            RuntimeError: the route table changed while it was copied (taken from
                another thread); try again.
        """
        if self._closed or "_parts" not in self.__dict__:  # closed, or not built
            return None
        routes, drains = self.routes(), len(self._driver.engine.drains())
        return self._core.snapshot(routes, drains)

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag (and unbind the fast paths, so the
        # next call takes the slow path); the caller's thread applies.
        self._parts.state.pending = True
        self._loop.unbind()

    def _store_fast_paths(self, poll: Callable[..., Any] | None, consume: Callable[..., Any] | None) -> None:
        """Keep the fast paths :meth:`~kbear.consumer._polling.PollLoop.refresh` chose for
        ``poll`` and ``consume`` (None, None: the poll loop): in the slots the compiled
        methods read; without the extension, as instance attributes over the methods."""
        if poll is None or consume is None:
            poll = consume = None
        if self._fast_slots:
            self._fast_poll, self._fast_consume = poll, consume
        elif poll is None:
            self.__dict__.pop("poll", None)
            self.__dict__.pop("consume", None)
        else:
            self.__dict__.update(poll=poll, consume=consume)

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
        if self._closed:  # (also when __init__ never ran)
            raise RuntimeError("Handle has been closed")
        if topic is None:
            # a subscribed (or assigned) cluster first, not a client kept only to
            # list topics for a pattern subscription
            entries = [*self._registry.active, *self._registry]
            if not entries:
                raise ValueError("list_topics: no cluster in use yet; subscribe or name a topic")
            return entries[0].consumer.list_topics(None, timeout)
        route = self._parts.placement.route(topic)
        md = self._parts.placement.client_for(route).consumer.list_topics(route.topic, timeout)
        return rename_metadata(md, route, topic)

    def memberid(self) -> str | None:
        """The group member id on the (first) cluster this consumer is subscribed to,
        or None before it joined. See :meth:`memberids` for every cluster."""
        self._check_open()
        active = self._registry.active
        return active[0].consumer.memberid() if active else None

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
        return self._one(
            "consumer_group_metadata", "group metadata exists for one cluster only"
        ).consumer_group_metadata()

    def cluster_id(self, timeout: float = -1) -> str:
        """The Kafka cluster id (KIP-78) of the one cluster this consumer reads
        from, as ``confluent_kafka.Consumer.cluster_id`` (``timeout`` in seconds,
        -1: infinite).

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster or from none yet; the cluster's errors (e.g. ``_TIMED_OUT``).
        """
        one = self._one("cluster_id", "ask a route's cluster (routes()) or a one-cluster client")
        return str(one.cluster_id(timeout))

    def _one(self, call: str, hint: str) -> Any:
        """The client of the one cluster read (else of the one built).

        Raises:
            KafkaException: ``_STATE`` (:func:`kbear._base.not_one_cluster`, with ``hint``)
                when there are several or none.
        """
        self._check_open()
        clusters = self._registry.active or list(self._registry)
        if len(clusters) != 1:
            raise not_one_cluster(call, "RoutedConsumer reads from", (e.cluster_id for e in clusters), hint)
        return clusters[0].consumer

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
            self._reloads.stop()
            clients = _stop(self._parts)
        errors = _close_clients(clients, self._parts)
        if self._owns_router:
            self._core.router.close()
        if errors:
            raise errors[0]

    def _check_open(self) -> None:
        # A rebalance callback that close() runs (on_revoke) may still use the
        # cluster it is called for, as with confluent-kafka.
        if self._closed and self._rebalancer.current is None:
            raise RuntimeError(_CLOSED)


def _refuse() -> None:
    """``check_open`` of a consumer that is gone."""
    raise RuntimeError(_CLOSED)


def _stop(parts: Parts) -> list[Any]:
    """Stop the parts that work between calls (the fast paths unbound, the move
    guard, the switch driver's background work) and take the cluster clients out of
    the registry: the confluent-kafka consumers to close (under the consumer's lock)."""
    parts.loop.close()
    parts.guard.close()
    parts.driver.close()
    return parts.registry.clear()


def _close_clients(clients: list[tuple[str | None, Any]], parts: Parts) -> list[BaseException]:
    """Close each consumer (leaving its group first: librdkafka's close hang); the
    errors raised (a callback's too), each client closed anyway. The client of a
    cluster the consumer holds for lost (failed over, declared lost by the policy,
    or every broker down and none seen since: :meth:`kbear.consumer._failover.ConsumerFailover.held_lost`,
    the switch engine's ``down``; its revocation commits asynchronously, as every
    revocation does) is closed in the background (:func:`close_consumer_later`): close() does not wait
    for a cluster that does not answer."""
    lost = parts.failover.held_lost() | parts.driver.engine.down
    errors: list[BaseException] = []
    for cluster_id, consumer in clients:
        try:
            if cluster_id is not None and cluster_id in lost:
                close_consumer_later(consumer, cluster_id)
            else:
                close_consumer(consumer)
        except Exception as exc:
            errors.append(exc)
    return errors


def _release(parts: Parts) -> None:
    """A consumer dropped unclosed (:class:`~kbear._base.ReloadSubscription`): its
    clients leave their groups and close, as a confluent-kafka Consumer's at its last
    reference (committing with ``enable.auto.commit``; the application's rebalance
    callbacks are not called: the consumer they would receive is gone)."""
    if parts.acks is not None:
        parts.acks.close()
    with parts.lock:
        clients = _stop(parts)
    for error in _close_clients(clients, parts):
        log.warning("kbear: closing a cluster client of a consumer dropped unclosed: %s", error)


#: poll() and consume() are compiled method descriptors (kbear._cdispatch.FastMethod)
#: over the instance's ``_fast_poll`` / ``_fast_consume``: ``consumer.poll(0)`` as
#: people write it is looked up as a class method is (no instance dictionary
#: lookup, no bound method) and calls the fast path when one is bound; without the
#: extension, the fast paths are instance attributes over the methods.
if EXTENSION is not None:
    RoutedConsumer.poll = EXTENSION.FastMethod(
        RoutedConsumer.__dict__["_fast_poll"], RoutedConsumer.__dict__["poll"]
    )
    RoutedConsumer.consume = EXTENSION.FastMethod(
        RoutedConsumer.__dict__["_fast_consume"], RoutedConsumer.__dict__["consume"]
    )
