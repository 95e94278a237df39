"""RoutedProducer: a drop-in ``confluent_kafka.Producer`` whose topics are routed by CRRL."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kbear._base import RouteChangeCallback, RoutedClientBase, no_route, rename_metadata
from kbear._clients import (
    ClusterTarget,
    Deadline,
    cluster_config,
    cluster_target,
    open_router,
    renamed,
    split_config,
)
from kbear.config import KBearConfig, RuleKind
from kbear.router import Client, NoRouteError, Route, Router

__all__ = ["RoutedProducer"]

log = logging.getLogger("kbear.producer")


# Index of on_delivery among produce()'s positional arguments after the topic:
# produce(topic, value, key, partition, on_delivery, timestamp, headers).
_ON_DELIVERY_POS = 3


def _logical_callback(cb: Callable[[Any, Any], None], logical: str) -> Callable[[Any, Any], None]:
    def deliver(err: Any, msg: Any) -> None:
        msg.set_topic(logical)
        cb(err, msg)

    return deliver


def _single_cluster(config: KBearConfig, client: Client) -> str | None:
    """The cluster every producer lookup of ``client`` yields, for any topic, without
    a remap; None when the configuration does not prove there is one.

    Proof: every topic or global rule that can match this client (its ``client.*``
    conditions hold; other conditions are unknown) names the same cluster without
    ``, topic``, and some global rule surely matches (all its conditions are
    ``client.*`` conditions that hold), so no lookup ends in NoRouteError.
    """
    factors = client.factors()
    cluster: str | None = None
    sure = False
    for rule in config.rules:
        if rule.kind is RuleKind.CONSUMER_GROUP:
            continue
        conds = rule.statement.conditions
        if any(c.key.startswith("client.") and factors.get(c.key) != c.value for c in conds):
            continue  # never matches this client
        if rule.statement.topic is not None:
            return None
        if cluster is None:
            cluster = rule.statement.cluster
        elif cluster != rule.statement.cluster:
            return None
        if rule.kind is RuleKind.GLOBAL and all(c.key.startswith("client.") for c in conds):
            sure = True
    return cluster if sure else None


class _ClusterProducer:
    """The confluent-kafka Producer of one cluster, with the properties it was built from."""

    __slots__ = ("cluster_id", "logical", "producer", "properties", "retired_at")

    def __init__(
        self,
        cluster_id: str,
        properties: Mapping[str, str],
        producer: Producer,
        logical: dict[str, str],
    ) -> None:
        self.cluster_id = cluster_id
        self.properties = dict(properties)
        self.producer = producer
        # physical topic -> logical topic, for remapped topics (delivery reports)
        self.logical = logical
        # the reload generation that retired this client (RoutedProducer._retired)
        self.retired_at = 0


class RoutedProducer(RoutedClientBase):
    """A ``confluent_kafka.Producer`` that sends each topic to the cluster its route names.

    Args:
        config: a confluent-kafka (librdkafka) producer configuration, without
            ``bootstrap.servers`` (the route supplies it), plus optional kbear keys,
            removed before the configuration reaches confluent-kafka:

            - ``kbear.config``: configuration directory (used when ``router`` is None);
            - ``kbear.client.id``, ``kbear.client.meta.<key>``: the :class:`~kbear.Client`;
            - ``kbear.reload.interval.ms``: watch interval in ms (default 10000, 0 disables);
            - ``kbear.switch.drain.timeout.ms``: how long a topic move waits, in ms,
              for the old cluster's in-flight messages (default 30000).
        router: a :class:`~kbear.Router` to share; the producer does not close it.
        client: who produces (``client.*`` factors); or use ``kbear.client.*`` keys.
        topics: topics to route now: unroutable ones fail here, and the clients
            of their clusters are created here.
        **kwargs: more configuration, as confluent-kafka accepts (e.g. ``logger=``).

    Raises:
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

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        router: Router | None = None,
        client: Client | None = None,
        topics: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        RoutedClientBase.__init__(self)
        self._log = log
        native, self._settings = split_config(config, kwargs, client, "RoutedProducer")
        self._on_delivery = native.pop("on_delivery", None)
        self._native = native
        self._router, self._owns_router = open_router(router, self._settings, "RoutedProducer")
        self._client = self._settings.client
        self._lock = threading.RLock()
        self._clusters: dict[str, _ClusterProducer] = {}
        # Clients replaced (their cluster's properties changed, or the cluster left
        # clusters.yaml): still polled and flushed until empty and one reload old.
        self._retired: list[_ClusterProducer] = []
        self._generation = 0  # reloads applied
        # logical topic -> produce function with the physical topic bound; the hot path
        self._send: dict[str, Callable[..., None]] = {}
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
        self._router.subscribe(self._on_config_change)
        try:
            if topics is not None:
                self._route_all(list(topics))
            self._pin()
        except BaseException:
            for entry in self._all():
                entry.producer.close()
            self._router.unsubscribe(self._on_config_change)
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

    def _cluster(self, route: Route | ClusterTarget) -> _ClusterProducer:
        current = self._clusters.get(route.cluster_id)
        if current is not None and current.properties == dict(route.properties):
            return current
        if current is not None:  # the cluster's properties changed: retire the old client
            current.retired_at = self._generation
            self._retired.append(current)
        logical: dict[str, str] = {}
        conf = cluster_config(self._native, route.properties)
        if self._on_delivery is not None:
            conf["on_delivery"] = self._config_callback(self._on_delivery, logical)
        entry = _ClusterProducer(route.cluster_id, route.properties, Producer(conf), logical)
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

    def _add_route(self, topic: str) -> Callable[..., None]:
        """Route ``topic`` (first use, or after a reload unbound it) and return its send
        function. Under the lock, after applying any pending reload: a thread that
        waited here while another applied a change must neither install a route
        that skips a drain nor find the topic unbound again."""
        with self._lock:
            if self._closed:  # as confluent-kafka; and no new client after close()
                raise RuntimeError("Producer has been closed")
            if self._pending:
                self._apply_changes()
            send = self._send.get(topic)
            if send is None:
                self._install(topic, self._router.route_producer(topic, self._client))
                send = self._send[topic]
            return send

    def _install(self, topic: str, route: Route) -> None:
        entry = self._cluster(route)
        produce = entry.producer.produce
        if route.remapped:
            entry.logical[route.topic] = topic
            send: Callable[..., None] = self._remapped_send(produce, topic)
        else:
            send = produce
        self._routes[topic] = route
        self._send[topic] = partial(send, route.topic)

    @staticmethod
    def _remapped_send(produce: Callable[..., None], logical: str) -> Callable[..., None]:
        def send(physical: str, *args: Any, **kwargs: Any) -> None:
            for name in ("on_delivery", "callback"):
                cb = kwargs.get(name)
                if cb is not None:
                    kwargs[name] = _logical_callback(cb, logical)
            if len(args) > _ON_DELIVERY_POS and args[_ON_DELIVERY_POS] is not None:
                args = (
                    *args[:_ON_DELIVERY_POS],
                    _logical_callback(args[_ON_DELIVERY_POS], logical),
                    *args[_ON_DELIVERY_POS + 1 :],
                )
            produce(physical, *args, **kwargs)

        return send

    def _pin(self) -> None:
        """Bind produce() (an instance attribute over the class method) to the one
        cluster's client when the configuration proves every route of this client goes
        there unremapped, else to a closure over the route table; unbind it while a
        reload is pending or a transaction is open (the class method's slow path)."""
        self._pinned = None
        if self._pending or self._txn_open or self._closed:
            self.__dict__.pop("produce", None)
            return
        # Hooks need to know every topic produced: the pinned path does not record them.
        cluster_id = None if self._route_listeners else _single_cluster(self._router.config, self._client)
        if cluster_id is None:
            self.__dict__["produce"] = self._routing_produce()
            if self._pending:  # a reload landed meanwhile (watcher thread): back to the slow path
                self.__dict__.pop("produce", None)
            return
        cluster = self._router.config.clusters[cluster_id]
        probe = cluster_target(cluster_id, cluster)
        self._pinned = cluster_id
        self.__dict__["produce"] = self._cluster(probe).producer.produce
        if self._pending:  # a reload landed meanwhile (watcher thread): back to the slow path
            self.__dict__.pop("produce", None)

    def _routing_produce(self) -> Callable[..., None]:
        """produce() over the route table with nothing else to check: the closure the
        instance uses while no reload is pending and no transaction is open."""
        send_table = self._send
        route_and_produce = RoutedProducer.produce

        def produce(topic: str, *args: Any, **kwargs: Any) -> None:
            try:
                send = send_table[topic]
            except KeyError:  # first use of the topic: route it (or raise NoRouteError)
                route_and_produce(self, topic, *args, **kwargs)
                return
            send(*args, **kwargs)

        produce.__doc__ = RoutedProducer.produce.__doc__
        return produce

    def _apply_changes(self) -> None:
        with self._lock:
            if not self._pending:
                return
            self._pending = False
            self._generation += 1
            pinned, self._pinned = self._pinned, None
            if pinned is not None and _single_cluster(self._router.config, self._client) != pinned:
                # Topics produced through the pinned path are not in self._routes:
                # drain the whole cluster before any topic goes elsewhere.
                entry = self._clusters.get(pinned)
                if entry is not None:
                    self._drain(Route(pinned, "", "", "", "", entry.properties))
            for topic, old in list(self._routes.items()):
                try:
                    new: Route | None = self._router.route_producer(topic, self._client)
                except NoRouteError as exc:
                    log.error("kbear: topic %r lost its route after reload: %s", topic, exc)
                    new = None
                if new is not None and (
                    new.cluster_id == old.cluster_id
                    and new.topic == old.topic
                    and dict(new.properties) == dict(old.properties)
                ):
                    self._routes[topic] = new
                    continue
                # Unbind the topic before draining: other threads producing to it now
                # miss it in the table, take the slow path and wait on the lock for the
                # new route, instead of adding to the old cluster after its flush.
                self._send.pop(topic, None)
                self._drain(old)
                del self._routes[topic]
                if new is not None:
                    self._install(topic, new)
                log.info("kbear: topic %r moved from %r to %r", topic, old, new)
                self._notify_route_change(old, new)
            self._pin()
            self._retire_unused()

    def _drain(self, old: Route) -> None:
        entry = self._clusters.get(old.cluster_id)
        candidates = [e for e in (entry, *self._retired) if e is not None]
        for e in candidates:
            left = e.producer.flush(self._settings.drain_timeout_ms / 1000.0)
            if left:
                log.warning(
                    "kbear: %d message(s) still in flight on cluster %r after "
                    "kbear.switch.drain.timeout.ms; they stay queued there and are "
                    "reported by poll()/flush()",
                    left,
                    e.cluster_id,
                )

    def _retire_unused(self) -> None:
        """Drop clients no longer needed, never at the reload that stopped using them.

        A thread that read a send function (or the pinned ``produce``) just before a
        switch may still produce through it after the drain: that client must stay
        polled and flushed, or the message would never get its delivery report. So
        the client of a cluster that is merely unused stays (and is reused when a
        topic comes back); a client replaced, or of a cluster gone from
        ``clusters.yaml``, is dropped once empty at a later reload.
        """
        known = self._router.config.clusters
        for cluster_id in [c for c in self._clusters if c not in known]:
            entry = self._clusters.pop(cluster_id)
            entry.retired_at = self._generation
            self._retired.append(entry)
        self._retired = [e for e in self._retired if len(e.producer) > 0 or e.retired_at >= self._generation]

    def _all(self) -> list[_ClusterProducer]:
        return [*self._clusters.values(), *self._retired]

    # ------------------------------------------------------------------ Producer API

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        """Produce a message to ``topic`` on the cluster of its route.

        Same arguments as ``confluent_kafka.Producer.produce``:
        ``produce(topic, [value], [key], [partition], [on_delivery], [timestamp], [headers])``
        (``callback`` is an alias of ``on_delivery``).

        Raises:
            NoRouteError: the topic has no route (a ``LookupError``).
            BufferError: the cluster's client queue is full (``queue.buffering.max.messages``).
            KafkaException: other errors of confluent-kafka.
        """
        if self._pending or self._txn_open:
            self._before_produce(topic)
        try:
            send = self._send[topic]
        except KeyError:
            send = self._add_route(topic)
        send(*args, **kwargs)

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
            {**m, "callback": _logical_callback(m["callback"], topic)} if m.get("callback") else dict(m)
            for m in messages
        ]
        for name in ("on_delivery", "callback"):
            if kwargs.get(name) is not None:
                kwargs[name] = _logical_callback(kwargs[name], topic)
        if len(args) > 1 and args[1] is not None:
            args = (args[0], _logical_callback(args[1], topic), *args[2:])
        queued = int(producer.produce_batch(route.topic, copies, *args, **kwargs))
        for original, copy in zip(messages, copies, strict=True):
            if "_error" in copy:
                original["_error"] = copy["_error"]
        return queued

    # ------------------------------------------------------------------ transactions

    def _join_transaction(self, route: Route) -> None:
        """Begin the open transaction on ``route``'s cluster, or check it runs there."""
        if self._txn_cluster is None:
            entry = self._cluster(route)
            if route.cluster_id not in self._txn_initialized:
                entry.producer.init_transactions(*self._timeout_args(self._txn_init_timeout))
                self._txn_initialized.add(route.cluster_id)
            entry.producer.begin_transaction()
            self._txn_cluster = route.cluster_id
        elif self._txn_cluster != route.cluster_id:
            raise KafkaException(
                KafkaError(
                    KafkaError._CONFLICT,
                    f"topic '{route.requested_topic}' routes to cluster '{route.cluster_id}' but the "
                    f"open transaction runs on cluster '{self._txn_cluster}': a transaction spans "
                    "one cluster",
                )
            )

    def _require_transactional_id(self) -> None:
        """As confluent-kafka: every transactional call without ``transactional.id``
        raises ``_NOT_CONFIGURED``."""
        if "transactional.id" not in self._native:
            raise KafkaException(
                KafkaError(
                    KafkaError._NOT_CONFIGURED,
                    "The Transactional API requires transactional.id to be configured",
                )
            )

    @staticmethod
    def _timeout_args(timeout: float | None) -> tuple[float, ...]:
        return () if timeout is None else (timeout,)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Initialize transactions (``transactional.id`` required), as confluent-kafka.

        Runs on the clients of the clusters already in use (``topics=`` at
        construction); a cluster first used inside a transaction is initialized
        then, with the same ``timeout`` (seconds).

        Raises:
            KafkaException: ``_NOT_CONFIGURED`` without ``transactional.id``, or
                the errors of confluent-kafka's ``init_transactions``.
        """
        self._require_transactional_id()
        with self._lock:
            for cluster_id, entry in list(self._clusters.items()):
                if cluster_id not in self._txn_initialized:
                    entry.producer.init_transactions(*self._timeout_args(timeout))
                    self._txn_initialized.add(cluster_id)
            self._txn_init_called = True
            self._txn_init_timeout = timeout

    def begin_transaction(self) -> None:
        """Begin a transaction. It runs on the cluster of the first topic produced in it;
        producing to a topic of another cluster in it raises ``KafkaException``
        (``_CONFLICT``) naming both clusters.

        Raises:
            KafkaException: ``_STATE`` before ``init_transactions`` or while a
                transaction is open.
        """
        self._require_transactional_id()
        if not self._txn_init_called:
            raise KafkaException(KafkaError(KafkaError._STATE, "init_transactions() must be called first"))
        if self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "a transaction is already open"))
        if self._pending:
            self._apply_changes()
        self._txn_open = True
        self._txn_cluster = None
        self._pin()

    def send_offsets_to_transaction(
        self, positions: list[Any], group_metadata: Any, timeout: float | None = None
    ) -> None:
        """Add consumer offsets to the open transaction, as confluent-kafka.

        Args:
            positions: TopicPartitions (logical names) with the next offsets to consume.
            group_metadata: ``RoutedConsumer.consumer_group_metadata()`` of a consumer
                reading from the transaction's cluster.
            timeout: seconds (None: infinite).

        Raises:
            KafkaException: ``_STATE`` without an open transaction, or when nothing
                was produced in it yet and this producer uses several clusters;
                ``_CONFLICT`` when a topic of ``positions`` routes to another cluster.
        """
        self._require_transactional_id()
        if not self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        if self._txn_cluster is None:
            if len(self._clusters) != 1:
                raise KafkaException(
                    KafkaError(
                        KafkaError._STATE,
                        "produce to the transaction first: its cluster is the cluster of the first "
                        "topic produced in it",
                    )
                )
            self._join_transaction(next(iter(self._routes.values())))
        physical = []
        for tp in positions:
            route = self.route(tp.topic)
            if route.cluster_id != self._txn_cluster:
                self._join_transaction(route)  # raises _CONFLICT naming both clusters
            physical.append(tp if route.topic == tp.topic else renamed(tp, route.topic))
        producer = self._clusters[str(self._txn_cluster)].producer
        producer.send_offsets_to_transaction(physical, group_metadata, *self._timeout_args(timeout))

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Commit the open transaction on its cluster (flushing first, as confluent-kafka).

        Raises:
            KafkaException: ``_STATE`` without an open transaction; the errors of
                confluent-kafka's ``commit_transaction`` (the transaction stays open
                so it can be retried or aborted, as there).
        """
        self._end_transaction("commit_transaction", timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction on its cluster (purging its messages, as confluent-kafka)."""
        self._end_transaction("abort_transaction", timeout)

    def _end_transaction(self, method: str, timeout: float | None) -> None:
        self._require_transactional_id()
        if not self._txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction is open"))
        if self._txn_cluster is not None:
            producer = self._clusters[self._txn_cluster].producer
            getattr(producer, method)(*self._timeout_args(timeout))
        self._txn_open = False
        self._txn_cluster = None
        self._pin()

    def _native_clients(self) -> list[Any]:
        return [entry.producer for entry in self._all()]

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

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata, as ``confluent_kafka.Producer.list_topics``.

        With ``topic``: the metadata from that topic's cluster, the topic listed
        under the name asked for. Without: the topics of every configured
        cluster merged into one ``ClusterMetadata`` (``brokers`` and
        ``cluster_id`` of the first cluster; a topic on several clusters is
        listed once, from the cluster this producer routes it to when it has
        produced to it).

        Raises:
            NoRouteError: ``topic`` has no route.
            KafkaException: a cluster did not answer within ``timeout`` seconds.
        """
        if topic is not None:
            route = self.route(topic)
            md = self._clusters[route.cluster_id].producer.list_topics(route.topic, timeout)
            return rename_metadata(md, route, topic)
        for cluster_id, cluster in self._router.config.clusters.items():
            if cluster_id not in self._clusters:
                self._cluster(cluster_target(cluster_id, cluster))
        merged = None
        routed = {r.topic: r.cluster_id for r in self._routes.values()}
        deadline = Deadline(timeout)
        for cluster_id, entry in self._clusters.items():
            md = entry.producer.list_topics(None, deadline.as_arg())
            if merged is None:
                merged = md
                continue
            for name, tmd in md.topics.items():
                if name not in merged.topics or routed.get(name) == cluster_id:
                    merged.topics[name] = tmd
        return merged

    def __len__(self) -> int:
        """Messages in queue or in flight, over every cluster's client."""
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
            self._router.unsubscribe(self._on_config_change)
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
