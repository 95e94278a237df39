"""RoutedProducer: the facade that builds a producer's parts and hands each what it needs.

The parts: the client registry (``_cluster``, :class:`~kbear._clients.ClientRegistry`),
the route table and the binding of the fast path (``_routes``), the reload
applier (``_moves``), the transactions (``_transactions``) and the metadata
calls (``_metadata``); what several of them change is one explicit
:class:`~kbear.producer._state.ProducerState`. No part sees the facade.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from types import MethodType
from typing import Any

from kbear import _events
from kbear._base import (
    NO_CONFIG,
    ReloadSubscription,
    RouteChangeCallback,
    RoutedClient,
    open_client,
    open_core,
    refuse_calls,
    weak_method,
)
from kbear._clients import ClientRegistry, Deadline, poll_clients
from kbear._cluster_id import check_cluster_id
from kbear._compiled import EXTENSION
from kbear._delegate import delegate
from kbear._identity import Client
from kbear._route import Route
from kbear._serdes import kafka_cluster_id
from kbear.config import KBearConfig
from kbear.producer._chunking import max_message_bytes, prepare
from kbear.producer._cluster import (
    ClusterProducer,
    close_producers,
    produce_batch,
    producer_registry,
)
from kbear.producer._failover import ClientFailover, failover_lookup
from kbear.producer._metadata import Metadata
from kbear.producer._moves import Routing
from kbear.producer._routes import ProduceBinding, RouteTable, Send
from kbear.producer._state import ProducerState
from kbear.producer._transactions import Transactions
from kbear.router import Router

__all__ = ["RoutedProducer"]

log = logging.getLogger("kbear.producer")

#: The RuntimeError message of a call on a closed (or never initialized) producer
#: (confluent-kafka's).
_CLOSED = "Producer has been closed"
#: the parts a call goes to: in an instance whose __init__ never ran, each refuses
_PARTS = ("_core", "_state", "_routing", "_lock", "_clients", "_txn", "_meta", "_failover")


class RoutedProducer(RoutedClient):
    """A ``confluent_kafka.Producer`` that sends each topic to the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) producer configuration, without
            ``bootstrap.servers`` (the route supplies it), plus optional kbear keys,
            removed before the configuration reaches confluent-kafka:

            - ``kbear.config``: configuration directory (used when ``router`` is None);
            - ``kbear.client.id``, ``kbear.client.meta.<key>``: the :class:`~kbear.Client`;
            - ``kbear.reload.interval.ms``: watch interval in ms (default 10000, 0 disables);
            - ``kbear.switch.drain.timeout.ms``: how long a topic move waits, in ms,
              for the old cluster's in-flight messages (default 30000);
            - ``kbear.delay.enable``: ``produce`` takes ``deliver_after`` / ``deliver_at``;
            - ``kbear.chunking.enable``: values larger than ``message.max.bytes``
              are sent in chunks, joined by kbear consumers
              (docs/concepts/acknowledgement.md).
        router: a :class:`~kbear.Router` to share; the producer does not close it.
        client: who produces (``client.*`` factors); or use ``kbear.client.*`` keys.
        topics: topics to route now: unroutable ones fail here, and the clients
            of their clusters are created here.
        **kwargs: more configuration, as confluent-kafka accepts (e.g. ``logger=``).

    Raises:
        TypeError: ``config`` is not a dict, or no configuration is given at all
            (as confluent-kafka: "expected configuration dict").
        ValueError: ``bootstrap.servers`` is set, a kbear key is unknown or bad,
            or neither ``router`` nor ``kbear.config`` is given.
        ConfigError: the configuration directory is invalid.
        NoRouteError: a topic of ``topics`` has no route (all such topics are named).
        KafkaException: confluent-kafka refused the configuration.

    Every cluster's properties (``clusters.yaml`` meta: security.protocol, sasl.*,
    ssl.*) are merged over ``config`` for that cluster's client. Delivery callbacks
    run in ``poll()``/``flush()`` in the caller's thread, as with confluent-kafka;
    for a remapped topic (``use cluster c, topic t2``) the delivery report's
    ``msg.topic()`` is the name the application produced to.

    A route change (configuration reload) is applied in the caller's thread at the
    next call: a topic that moves waits for its old cluster's in-flight messages
    (``flush`` of that cluster's client, up to ``kbear.switch.drain.timeout.ms``),
    then goes to the new cluster, so nothing is lost and per-partition order holds.
    """

    # ``_fast_produce``: produce()'s fast path of this instance (None: kbear's checks),
    # read by the compiled ``produce`` (kbear._cdispatch.FastMethod) at every call.
    __slots__ = ("__dict__", "__weakref__", "_fast_produce")

    def __new__(cls, *args: Any, **kwargs: Any) -> RoutedProducer:
        self = super().__new__(cls)
        # What an instance whose __init__ never ran (a subclass not calling it) has:
        # every call refuses as a closed confluent-kafka Producer.
        self._fast_produce = None
        refuse_calls(self, _PARTS, _CLOSED)
        return self

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        topics: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        native, self._settings = open_client(self, config, kwargs, client, router, "RoutedProducer")
        on_delivery = native.pop("on_delivery", None)
        core, owns_router = open_core("producer", native, self._settings, router, "RoutedProducer", log)
        self._core, self._owns_router, used = core, owns_router, core.router
        self._lock = threading.RLock()
        # deliver_after / deliver_at, chunking: produce() prepares every call
        self._state = state = ProducerState(
            features=self._settings.delay_enable or self._settings.chunking_enable
        )
        config_now = _config_of(used)
        self._clients = clients = producer_registry(
            native,
            on_delivery,
            weak_method(self._on_new_client),
            on_reachable=weak_method(self._on_reachable),
            watch_brokers=self._settings.failover_enable,
        )
        self._table = table = RouteTable(clients)
        self._binding = ProduceBinding(
            state,
            table,
            clients,
            config_now,
            core.client,
            partial(bool, core.listeners),
            weak_method(MethodType(type(self).produce, self)),
            weak_method(self._store_fast_path),
        )
        self._failover = ClientFailover(
            self._settings.failover_enable,
            self._settings.failover_after_ms,
            state,
            clients,
            config_now,
            self._binding.unbind,
        )
        lookup = failover_lookup(partial(used.route_producer, client=core.client), config_now, state)
        self._routing = routing = Routing(
            state,
            self._lock,
            table,
            clients,
            self._binding,
            lookup,
            config_now,
            core.client,
            self._settings.drain_timeout_ms / 1000.0,
            core.notify,
            self._failover.release,
        )
        self._txn = Transactions(
            state, clients, table.routes, self._lock, native, routing.home, routing.route, self._binding.bind
        )
        self._meta = Metadata(clients, table.routes, routing.route, config_now, core.client)
        self._subscription = ReloadSubscription(
            self, used, self._on_config_change, owns_router, partial(_release, clients)
        )
        try:
            if topics is not None:
                routing.route_all(list(topics))
            self._binding.bind()
        except BaseException:
            for entry in clients.all():
                entry.producer.close()
            self._subscription.stop()
            if owns_router:
                used.close()
            raise

    # ------------------------------------------------------------------ parts' hooks

    def _store_fast_path(self, produce: Send | None) -> None:
        """Where produce() finds its fast path (None: kbear's checks)."""
        if _COMPILED:
            self._fast_produce = produce
        elif produce is None:  # the pure-Python produce: an instance attribute over the method
            self.__dict__.pop("produce", None)
        else:
            self.__dict__["produce"] = produce

    def _on_new_client(self, cluster_id: str, client: Any) -> None:
        check_cluster_id("producer", cluster_id, client, self._core.router.config)
        if isinstance(self._txn, Transactions):  # (built after the registry)
            self._txn.forget(cluster_id)

    def _kafka_id(self, cluster_id: str) -> str:
        """The Kafka cluster id (KIP-78) of ``cluster_id`` (:func:`~kbear._serdes.kafka_cluster_id`),
        which a serializing producer's serdes may ask for.

        Raises:
            SerializationError: no client of that cluster yet.
        """
        entry = self._clients.get(cluster_id)
        return kafka_cluster_id(None if entry is None else entry.producer, cluster_id)

    def _on_reachable(self, cluster_id: str, reachable: bool) -> None:
        # A cluster client's error_cb (in poll()/flush(), or at construction: then the
        # failover part may not exist yet).
        failover = self.__dict__.get("_failover")
        if failover is not None:
            failover.observe_down(cluster_id, reachable)

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag (and unbind the fast path, so the
        # next call takes the slow path); the caller's thread applies.
        self._state.pending = True
        self._binding.unbind()

    # ------------------------------------------------------------------ routing

    def route(self, topic: str) -> Route:
        """The route this producer uses for ``topic`` (routing it now if new).

        Raises:
            NoRouteError: no rule routes the topic.
        """
        return self._routing.route(topic)

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        topic's route changes after a reload (``new_route`` is None when the
        topic no longer has a route). While a hook is registered, produce() always takes
        kbear's routing path (never the pinned fast path). A hook that raises is logged
        on ``kbear.producer`` and the switch stands."""
        with self._lock:
            self._core.listeners.append(callback)
            self._binding.bind()

    # ------------------------------------------------------------------ Producer API

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        """Produce a message to ``topic`` on the cluster of its route.

        Same arguments as ``confluent_kafka.Producer.produce``:
        ``produce(topic, [value], [key], [partition], [on_delivery], [timestamp], [headers])``
        (``callback`` is an alias of ``on_delivery``).

        With ``kbear.delay.enable``: ``deliver_after=s`` (seconds from now) or
        ``deliver_at=t`` (epoch seconds): kbear consumers with
        ``kbear.ack.mode=individual`` do not deliver the message before then
        (header ``kbear-deliver-at``, epoch ms). With ``kbear.chunking.enable``: a
        value larger than ``message.max.bytes`` is sent as chunks to one partition
        (one delivery report, after the last chunk: the first error, if any).

        Raises:
            NoRouteError: the topic has no route (a ``LookupError``).
            BufferError: the cluster's client queue is full (``queue.buffering.max.messages``).
            KafkaException: other errors of confluent-kafka.
            ValueError: both ``deliver_after`` and ``deliver_at``, or a negative ``deliver_after``.
        """
        if not self._state.features:
            self._sender(topic)[1](*args, **kwargs)
            return
        for call in self._prepare(args, kwargs):  # kbear.delay.enable / kbear.chunking.enable
            self._sender(topic)[1](**call)

    def _sender(self, topic: str) -> tuple[str, Send]:
        """(cluster id, send function) of ``topic`` read together (one read of the route
        table's ``bound``: a message prepared for that cluster, e.g. serialized with its
        Schema Registry, goes there), after any pending reload or transaction step.

        Raises:
            RuntimeError: the producer is closed.
            NoRouteError: the topic has no route.
        """
        state = self._state
        if state.pending or state.txn_open:
            self._before_produce(topic)
        pair = self._table.bound.get(topic)
        while pair is None:  # first use, or unbound by a move another thread applies
            self._routing.add_route(topic)
            pair = self._table.bound.get(topic)
        return pair

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """The keyword arguments of each send of one produce() call (its arguments
        after the topic) with ``kbear.delay.enable`` / ``kbear.chunking.enable``
        (:func:`kbear.producer._chunking.prepare`)."""
        chunking, max_bytes = self._settings.chunking_enable, max_message_bytes(self._core.native)
        return prepare(args, kwargs, chunking=chunking, max_bytes=max_bytes, now_s=time.time())

    def _before_produce(self, topic: str) -> None:
        if self._state.pending:
            self._routing.apply_changes()
        if self._state.txn_open:
            self._txn.join(self._routing.route(topic))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> int:
        """Produce a batch of messages to ``topic`` on the cluster of its route.

        Same arguments as ``confluent_kafka.Producer.produce_batch``:
        ``produce_batch(topic, messages, [partition], [on_delivery])``; failed
        messages get an ``_error`` key in their dict, as with confluent-kafka.

        Returns:
            The number of messages queued.

        Raises:
            NoRouteError: the topic has no route.
            BufferError, KafkaException, TypeError: as confluent-kafka.
        """
        return self._produce_batch_for(topic, lambda _cluster_id: messages, *args, **kwargs)

    def _produce_batch_for(
        self, topic: str, prepare: Callable[[str], list[dict[str, Any]]], *args: Any, **kwargs: Any
    ) -> int:
        """``produce_batch`` (``args``, ``kwargs``: its arguments after the messages) of
        the messages ``prepare(cluster_id)`` returns for the cluster of ``topic``'s
        route, which is read once (after any pending reload or transaction step) and is
        where the batch goes: what ``prepare`` made for that cluster (messages
        serialized with its Schema Registry, kbear.aio's serializing producer) is sent
        there, also while another thread applies a move.

        Raises:
            NoRouteError, RuntimeError: as :meth:`produce_batch`; what ``prepare`` raises.
        """
        state = self._state
        if state.pending or state.txn_open:
            self._before_produce(topic)
        route = self.route(topic)
        messages = prepare(route.cluster_id)
        return produce_batch(self._clients.client(route).producer, route, messages, args, kwargs)

    def snapshot(self) -> _events.ClientSnapshot | None:
        """What this producer shows kbear's metrics now (:class:`kbear._events.ClientSnapshot`):
        its ``client.id``, the routes in use and the configuration in force; None once
        closed, or while (or when) its constructor did not complete.

        Raises:
            RuntimeError: the route table changed while it was copied (taken from
                another thread); try again.
        """
        state = self._state
        if not isinstance(state, ProducerState) or state.closed:
            return None
        try:
            routes = dict(self._table.routes)
        except AttributeError:  # the constructor has not built the table (yet)
            return None
        return self._core.snapshot(routes, 0)

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery callbacks of every cluster's client.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            The number of events served.
        """
        deadline = Deadline(timeout)  # a change applied here (a failover's take-back) counts
        self._failover.tick()
        if self._state.pending:
            self._routing.apply_changes()
        return poll_clients([e.producer for e in self._clients.all()], deadline.remaining())

    def flush(self, timeout: float | None = None) -> int:
        """Wait for all messages of every cluster's client to be delivered.

        Args:
            timeout: maximum time in seconds for all clusters together (None or -1: infinite).

        Returns:
            The number of messages still in queue or in flight.
        """
        return self._failover.flush(timeout, self._routing.apply_changes)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """``confluent_kafka.Producer.purge`` on every cluster's client."""
        for entry in self._clients.all():
            entry.producer.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def __len__(self) -> int:
        """Messages in queue or in flight, over every cluster's client (0 for an
        instance whose ``__init__`` never ran, as confluent-kafka)."""
        if not isinstance(self._state, ProducerState):
            return 0
        return sum(len(entry.producer) for entry in self._clients.all())

    def __bool__(self) -> bool:
        return True

    def close(self, timeout: float | None = None) -> bool:
        """Flush every cluster's client, then stop watching the configuration.

        Args:
            timeout: maximum time in seconds to wait for delivery (None: infinite).

        Returns:
            True, as ``confluent_kafka.Producer.close`` (also when already closed).

        Messages still undelivered after ``timeout`` are purged and their
        delivery callbacks report them failed; nothing is silently dropped.

        Called from another thread while a route change is being applied (the old
        cluster being flushed), it first waits for that flush (at most
        ``kbear.switch.drain.timeout.ms``): a client is never closed under a
        thread still using it.
        """
        with self._lock:
            state = self._state
            if state.closed:
                return True
            state.closed = True
            self._binding.bind()
            self._subscription.stop()
            # A reload not yet applied is dropped, not applied: closing needs no new
            # client, and the drain it would do is this flush, within ``timeout``.
            state.pending = False
            unfinished = self._txn.init_unfinished()
            close_producers(
                [e.producer for e in self._clients.all()],
                timeout,
                init_unfinished=[e.producer for e in self._clients.all() if e.cluster_id in unfinished],
            )
            if self._owns_router:
                self._core.router.close()
            return True

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on
        clients built later (as confluent-kafka's ``set_sasl_credentials``).

        Raises:
            TypeError: ``username`` or ``password`` is not a str (as confluent-kafka).
        """
        self._core.set_credentials([e.producer for e in self._clients.all()], username, password)

    # ------------------------------------------------------------------ transactions, metadata

    init_transactions = delegate("_txn", Transactions.init_transactions)
    begin_transaction = delegate("_txn", Transactions.begin_transaction)
    send_offsets_to_transaction = delegate("_txn", Transactions.send_offsets_to_transaction)
    commit_transaction = delegate("_txn", Transactions.commit_transaction)
    abort_transaction = delegate("_txn", Transactions.abort_transaction)
    list_topics = delegate("_meta", Metadata.list_topics)
    cluster_id = delegate("_meta", Metadata.cluster_id)

    @property
    def _pending(self) -> bool:
        """Whether a reload waits to be applied (tests watch it)."""
        state = self._state
        return isinstance(state, ProducerState) and state.pending


def _release(clients: ClientRegistry[ClusterProducer]) -> None:
    """A producer dropped unclosed: its clients closed without waiting for delivery
    (what is queued or in flight is purged), as confluent-kafka's Producer at its
    last reference."""
    close_producers([entry.producer for entry in clients.all()], 0)


def _config_of(router: Router) -> Callable[[], KBearConfig]:
    """The configuration ``router`` has in force, read at each call."""
    return lambda: router.config


#: produce() is the compiled method descriptor (kbear._cdispatch.FastMethod) over the
#: instance's ``_fast_produce``; without the extension, an instance attribute.
_COMPILED = EXTENSION is not None
if EXTENSION is not None:
    RoutedProducer.produce = EXTENSION.FastMethod(  # type: ignore[method-assign]
        RoutedProducer.__dict__["_fast_produce"], RoutedProducer.__dict__["produce"]
    )
