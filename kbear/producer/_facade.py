"""RoutedProducer: routing, produce, poll/flush and topic moves over one client per cluster."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Producer

from kbear import _events
from kbear._base import (
    NO_CONFIG,
    RouteChangeCallback,
    RoutedClientBase,
    check_config_argument,
    no_route,
)
from kbear._clients import (
    ClusterTarget,
    Deadline,
    cluster_config,
    open_router,
    split_config,
)
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.producer._chunking import max_message_bytes, prepare
from kbear.producer._cluster import ClusterProducer, logical_callback
from kbear.producer._metadata import MetadataCalls
from kbear.producer._routes import RouteTable
from kbear.producer._transactions import TransactionCalls
from kbear.router import Router

__all__ = ["RoutedProducer"]

log = logging.getLogger("kbear.producer")


class RoutedProducer(MetadataCalls, TransactionCalls, RouteTable):
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

    _fast_paths = ("produce",)
    _closed_message = "Producer has been closed"
    _kind = "producer"

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        topics: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        config = check_config_argument(config, kwargs, router)
        RoutedClientBase.__init__(self)
        self._log = log
        native, self._settings = split_config(config, kwargs, client, "RoutedProducer")
        self._on_delivery = native.pop("on_delivery", None)
        self._native = native
        self._router, self._owns_router = open_router(router, self._settings, "RoutedProducer")
        self._client = self._settings.client
        self._lock = threading.RLock()
        self._clusters: dict[str, ClusterProducer] = {}
        # Clients replaced (their cluster's properties changed, or the cluster left
        # clusters.yaml): still polled and flushed until empty and one reload old.
        self._retired: list[ClusterProducer] = []
        self._generation = 0  # reloads applied
        # logical topic -> produce function with the physical topic bound; the hot path
        self._send: dict[str, Callable[..., None]] = {}
        # logical topic -> its cluster client's produce, for topics not remapped: the
        # compiled dispatcher's table (kbear.producer._dispatch)
        self._direct: dict[str, Callable[..., None]] = {}
        self._routes: dict[str, Route] = {}
        self._txn_initialized: set[str] = set()  # clusters whose client ran init_transactions
        self._txn_init_called = False
        self._txn_init_timeout: float | None = None
        self._txn_open = False
        self._txn_cluster: str | None = None  # the cluster the open transaction runs on
        self._closed = False
        # When every route of this client is one cluster without remap, produce() is
        # that cluster's own bound method (an instance attribute), rebound on reload.
        self._pinned: str | None = None
        # deliver_after / deliver_at, chunking: produce() is the class method's
        self._features = self._settings.delay_enable or self._settings.chunking_enable
        self._listen(self._owns_router)
        try:
            if topics is not None:
                self._route_all(list(topics))
            self._pin()
        except BaseException:
            for entry in self._all():
                entry.producer.close()
            self._stop_listening()
            if self._owns_router:
                self._router.close()
            raise

    # ------------------------------------------------------------------ routing

    def route(self, topic: str) -> Route:
        """The route this producer uses for ``topic`` (routing it now if new).

        Raises:
            NoRouteError: no rule routes the topic.
        """
        if self._pending:
            self._apply_changes()
        route = self._routes.get(topic)
        if route is None:
            with self._lock:
                self._add_route(topic)
                route = self._routes[topic]
        return route

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        topic's route changes after a reload (``new_route`` is None when the
        topic no longer has a route). While a hook is registered, produce() always takes
        kbear's routing path (never the pinned fast path). A hook that raises is logged
        on ``kbear.producer`` and the switch stands."""
        with self._lock:
            super().on_route_change(callback)
            self._pin()

    def _route_all(self, topics: list[str]) -> None:
        failures = []
        for topic in topics:
            try:
                self._add_route(topic)
            except NoRouteError as exc:
                failures.append(exc)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise no_route(self._client, [f.topic for f in failures], None)

    def _cluster(self, route: Route | ClusterTarget) -> ClusterProducer:
        current = self._clusters.get(route.cluster_id)
        if current is not None and current.properties == dict(route.properties):
            return current
        if current is not None:  # the cluster's properties changed: retire the old client
            current.retired_at = self._generation
            self._retired.append(current)
        logical: dict[str, str] = {}
        conf = cluster_config(self._native, route.properties)
        _events.configure("producer", route.cluster_id, conf)
        if self._on_delivery is not None:
            conf["on_delivery"] = self._config_callback(self._on_delivery, logical)
        entry = ClusterProducer(route.cluster_id, route.properties, Producer(conf), logical)
        self._clusters[route.cluster_id] = entry
        # a new client of the cluster has not run init_transactions() yet
        self._txn_initialized.discard(route.cluster_id)
        return entry

    @staticmethod
    def _config_callback(
        user_cb: Callable[[Any, Any], None], logical: dict[str, str]
    ) -> Callable[[Any, Any], None]:
        def deliver(err: Any, msg: Any) -> None:
            if logical:
                name = logical.get(msg.topic())
                if name is not None:
                    msg.set_topic(name)
            user_cb(err, msg)

        return deliver

    def _all(self) -> list[ClusterProducer]:
        return [*self._clusters.values(), *self._retired]

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
        if self._features:
            self._produce_prepared(topic, args, kwargs)
            return
        self._sender(topic)(*args, **kwargs)

    def _sender(self, topic: str) -> Callable[..., None]:
        """The send function of ``topic``, after any pending reload or transaction step."""
        if self._pending or self._txn_open:
            self._before_produce(topic)
        try:
            return self._send[topic]
        except KeyError:
            return self._add_route(topic)

    def _produce_prepared(self, topic: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """produce() with ``kbear.delay.enable`` / ``kbear.chunking.enable``."""
        calls = prepare(
            args,
            kwargs,
            chunking=self._settings.chunking_enable,
            max_bytes=max_message_bytes(self._native),
            now_s=time.time(),
        )
        for call in calls:
            self._sender(topic)(**call)

    def _before_produce(self, topic: str) -> None:
        if self._pending:
            self._apply_changes()
        if self._txn_open:
            self._join_transaction(self.route(topic))

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
        if self._pending or self._txn_open:
            self._before_produce(topic)
        route = self.route(topic)
        producer = self._clusters[route.cluster_id].producer
        if not route.remapped:
            return int(producer.produce_batch(route.topic, messages, *args, **kwargs))
        # Remapped: delivery reports must carry the logical name; wrap the callbacks
        # on copies, then copy each copy's _error back to the application's dict.
        copies = [
            {**m, "callback": logical_callback(m["callback"], topic)} if m.get("callback") else dict(m)
            for m in messages
        ]
        for name in ("on_delivery", "callback"):
            if kwargs.get(name) is not None:
                kwargs[name] = logical_callback(kwargs[name], topic)
        if len(args) > 1 and args[1] is not None:
            args = (args[0], logical_callback(args[1], topic), *args[2:])
        queued = int(producer.produce_batch(route.topic, copies, *args, **kwargs))
        for original, copy in zip(messages, copies, strict=True):
            if "_error" in copy:
                original["_error"] = copy["_error"]
        return queued

    def _native_clients(self) -> list[Any]:
        return [entry.producer for entry in self._all()]

    def _routes_in_use(self) -> dict[str, Route]:
        # the snapshot of kbear's metrics (RoutedClientBase.snapshot)
        return dict(self._routes)

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery callbacks of every cluster's client.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            The number of events served.
        """
        if self._pending:
            self._apply_changes()
        clients = self._all()
        if len(clients) == 1:
            return int(clients[0].producer.poll(-1 if timeout is None else timeout))
        served = sum(int(c.producer.poll(0)) for c in clients)
        deadline = Deadline(timeout)
        while not served and clients and not deadline.expired():
            left = deadline.remaining()
            slice_s = 0.01 if left is None else min(0.01, left)
            served = sum(int(c.producer.poll(slice_s)) for c in clients)
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Wait for all messages of every cluster's client to be delivered.

        Args:
            timeout: maximum time in seconds for all clusters together (None or -1: infinite).

        Returns:
            The number of messages still in queue or in flight.
        """
        if self._pending:
            self._apply_changes()
        deadline = Deadline(timeout)
        left = 0
        for entry in self._all():
            left += int(entry.producer.flush(deadline.as_arg()))
        return left

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """``confluent_kafka.Producer.purge`` on every cluster's client."""
        for entry in self._all():
            entry.producer.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def __len__(self) -> int:
        """Messages in queue or in flight, over every cluster's client (0 for an
        instance whose ``__init__`` never ran, as confluent-kafka)."""
        if not self._initialized:
            return 0
        return sum(len(entry.producer) for entry in self._all())

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
            if self._closed:
                return True
            self._closed = True
            self._pin()
            self._stop_listening()
            # A reload not yet applied is dropped, not applied: closing needs no new
            # client, and the drain it would do is this flush, within ``timeout``.
            self._pending = False
            deadline = Deadline(timeout)
            for entry in self._all():
                entry.producer.flush(deadline.as_arg())
            for entry in self._all():
                if len(entry.producer):
                    entry.producer.purge()
                    entry.producer.flush(0)
                entry.producer.close()
            if self._owns_router:
                self._router.close()
            return True

    def __enter__(self) -> RoutedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
