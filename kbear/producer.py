"""RoutedProducer: a drop-in ``confluent_kafka.Producer`` whose topics are routed by CRRL."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Producer

from kbear._clients import Deadline, cluster_config, open_router, split_config
from kbear.config import KBearConfig
from kbear.router import Client, NoRouteError, Route, Router

__all__ = ["RoutedProducer"]

log = logging.getLogger("kbear.producer")

RouteChangeCallback = Callable[[Route, Route | None], None]

# Index of on_delivery among produce()'s positional arguments after the topic:
# produce(topic, value, key, partition, on_delivery, timestamp, headers).
_ON_DELIVERY_POS = 3


def _logical_callback(cb: Callable[[Any, Any], None], logical: str) -> Callable[[Any, Any], None]:
    def deliver(err: Any, msg: Any) -> None:
        msg.set_topic(logical)
        cb(err, msg)

    return deliver


class _ClusterProducer:
    """The confluent-kafka Producer of one cluster, with the properties it was built from."""

    __slots__ = ("cluster_id", "logical", "producer", "properties")

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


class RoutedProducer:
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

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        router: Router | None = None,
        client: Client | None = None,
        topics: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        native, self._settings = split_config(config, kwargs, client, "RoutedProducer")
        self._on_delivery = native.pop("on_delivery", None)
        if self._on_delivery is None:
            self._on_delivery = native.pop("delivery.report.cb", None)
        self._native = native
        self._router, self._owns_router = open_router(router, self._settings, "RoutedProducer")
        self._client = self._settings.client
        self._lock = threading.RLock()
        self._clusters: dict[str, _ClusterProducer] = {}
        self._retired: list[_ClusterProducer] = []
        # logical topic -> (produce function, physical topic); the hot path
        self._send: dict[str, tuple[Callable[..., None], str]] = {}
        self._routes: dict[str, Route] = {}
        self._pending = False
        self._closed = False
        self._route_listeners: list[RouteChangeCallback] = []
        self._router.subscribe(self._on_config_change)
        try:
            if topics is not None:
                self._route_all(list(topics))
        except BaseException:
            self._router.unsubscribe(self._on_config_change)
            if self._owns_router:
                self._router.close()
            raise

    # ------------------------------------------------------------------ routing

    @property
    def router(self) -> Router:
        """The router in use."""
        return self._router

    @property
    def client(self) -> Client:
        """The client the routes are looked up for."""
        return self._client

    def route(self, topic: str) -> Route:
        """The route this producer uses for ``topic`` (routing it now if new).

        Raises:
            NoRouteError: no rule routes the topic.
        """
        if self._pending:
            self._apply_changes()
        if topic not in self._routes:
            self._add_route(topic)
        return self._routes[topic]

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        topic's route changes after a reload (``new_route`` is None when the
        topic no longer has a route)."""
        self._route_listeners.append(callback)

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
            names = ", ".join(f"'{f.topic}'" for f in failures)
            err = NoRouteError(self._client, failures[0].topic, None)
            err.args = (f"no route for topics {names} for client {self._client!r}",)
            raise err

    def _cluster(self, route: Route) -> _ClusterProducer:
        current = self._clusters.get(route.cluster_id)
        if current is not None and current.properties == dict(route.properties):
            return current
        if current is not None:  # the cluster's properties changed: retire the old client
            self._retired.append(current)
        logical: dict[str, str] = {}
        conf = cluster_config(self._native, route.properties)
        if self._on_delivery is not None:
            conf["on_delivery"] = self._config_callback(self._on_delivery, logical)
        entry = _ClusterProducer(route.cluster_id, route.properties, Producer(conf), logical)
        self._clusters[route.cluster_id] = entry
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

    def _add_route(self, topic: str) -> None:
        with self._lock:
            route = self._router.route_producer(topic, self._client)
            self._install(topic, route)

    def _install(self, topic: str, route: Route) -> None:
        entry = self._cluster(route)
        produce = entry.producer.produce
        if route.remapped:
            entry.logical[route.topic] = topic
            send: Callable[..., None] = self._remapped_send(produce, topic)
        else:
            send = produce
        self._routes[topic] = route
        self._send[topic] = (send, route.topic)

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

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag; the caller's thread applies.
        self._pending = True

    def _apply_changes(self) -> None:
        with self._lock:
            if not self._pending:
                return
            self._pending = False
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
                self._drain(old)
                del self._routes[topic]
                del self._send[topic]
                if new is not None:
                    self._install(topic, new)
                log.info("kbear: topic %r moved from %r to %r", topic, old, new)
                for callback in self._route_listeners:
                    callback(old, new)
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
        used = {r.cluster_id for r in self._routes.values()}
        for cluster_id in [c for c in self._clusters if c not in used]:
            self._retired.append(self._clusters.pop(cluster_id))
        self._retired = [e for e in self._retired if len(e.producer) > 0]

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
        if self._pending:
            self._apply_changes()
        try:
            send, physical = self._send[topic]
        except KeyError:
            self._add_route(topic)
            send, physical = self._send[topic]
        send(physical, *args, **kwargs)

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
            if route.remapped and route.topic in md.topics:
                tmd = md.topics.pop(route.topic)
                tmd.topic = topic
                md.topics[topic] = tmd
            return md
        for cluster_id, cluster in self._router.config.clusters.items():
            if cluster_id not in self._clusters:
                probe = Route(cluster_id, "", "", cluster.bootstrap_servers, "", cluster.meta)
                self._cluster(probe)
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

    def close(self, timeout: float | None = None) -> None:
        """Flush every cluster's client, then stop watching the configuration.

        Args:
            timeout: maximum time in seconds to wait for delivery (None: infinite).

        Messages still undelivered after ``timeout`` are purged and their
        delivery callbacks report them failed; nothing is silently dropped.
        """
        if self._closed:
            return
        self._closed = True
        self._router.unsubscribe(self._on_config_change)
        self.flush(timeout)
        for entry in self._all():
            if len(entry.producer):
                entry.producer.purge()
                entry.producer.flush(0)
            entry.producer.close()
        if self._owns_router:
            self._router.close()

    def __enter__(self) -> RoutedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
