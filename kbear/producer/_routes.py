"""The route table of RoutedProducer (a base class): which client each topic goes to.

Responsible for: routing a topic at first use, the send function bound per
topic (the physical topic and, for a remapped topic, delivery reports renamed
to the logical name), binding ``produce`` to the cheapest correct path (one
cluster's own method when the configuration proves every route goes there, else
a dispatcher over the table: ``_dispatch``'s compiled one in front of a closure,
or the closure alone), and applying a reload: a topic that moves waits for its
old cluster's in-flight messages before it is sent to the new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kbear import _events
from kbear._base import RoutedClientBase
from kbear._clients import ClusterTarget, cluster_target
from kbear._route import NoRouteError, Route
from kbear.producer._cluster import ClusterProducer, logical_callback, single_cluster
from kbear.producer._dispatch import make_dispatcher
from kbear.settings import KBearSettings

log = logging.getLogger("kbear.producer")

# Index of on_delivery among produce()'s positional arguments after the topic:
# produce(topic, value, key, partition, on_delivery, timestamp, headers).
_ON_DELIVERY_POS = 3


class RouteTable(RoutedClientBase):
    """Routing and moves of :class:`~kbear.RoutedProducer`."""

    _settings: KBearSettings
    _lock: threading.RLock
    _clusters: dict[str, ClusterProducer]
    _retired: list[ClusterProducer]
    _generation: int
    _send: dict[str, Callable[..., None]]
    _direct: dict[str, Callable[..., None]]
    _routes: dict[str, Route]
    _txn_open: bool
    _closed: bool
    _pinned: str | None
    _features: bool

    if TYPE_CHECKING:

        def _cluster(self, route: Route | ClusterTarget) -> ClusterProducer: ...

        def produce(self, topic: str, *args: Any, **kwargs: Any) -> None: ...

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
        if not route.remapped:  # the compiled dispatcher's table: the call forwarded as is
            self._direct[topic] = produce

    @staticmethod
    def _remapped_send(produce: Callable[..., None], logical: str) -> Callable[..., None]:
        def send(physical: str, *args: Any, **kwargs: Any) -> None:
            for name in ("on_delivery", "callback"):
                cb = kwargs.get(name)
                if cb is not None:
                    kwargs[name] = logical_callback(cb, logical)
            if len(args) > _ON_DELIVERY_POS and args[_ON_DELIVERY_POS] is not None:
                args = (
                    *args[:_ON_DELIVERY_POS],
                    logical_callback(args[_ON_DELIVERY_POS], logical),
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
        if self._pending or self._txn_open or self._closed or self._features:
            self.__dict__.pop("produce", None)
            return
        # Hooks need to know every topic produced: the pinned path does not record them.
        cluster_id = None if self._route_listeners else single_cluster(self._router.config, self._client)
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
        """produce() over the route table with nothing else to check, used while no reload
        is pending and no transaction is open: the compiled dispatcher over ``_direct``
        in front of this closure when it is built, else this closure."""
        send_table = self._send
        route_and_produce = type(self).produce

        def produce(topic: str, *args: Any, **kwargs: Any) -> None:
            try:
                send = send_table[topic]
            except KeyError:  # first use of the topic: route it (or raise NoRouteError)
                route_and_produce(self, topic, *args, **kwargs)
                return
            send(*args, **kwargs)

        produce.__doc__ = type(self).produce.__doc__
        return make_dispatcher(self._direct, produce)

    def _apply_changes(self) -> None:
        with self._lock:
            if not self._pending:
                return
            self._pending = False
            self._generation += 1
            pinned, self._pinned = self._pinned, None
            if pinned is not None and single_cluster(self._router.config, self._client) != pinned:
                # Topics produced through the pinned path are not in self._routes:
                # drain the whole cluster before any topic goes elsewhere.
                entry = self._clusters.get(pinned)
                if entry is not None:
                    self._drain(pinned, "")
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
                self._direct.pop(topic, None)
                self._send.pop(topic, None)
                self._drain(old.cluster_id, topic)
                del self._routes[topic]
                if new is not None:
                    self._install(topic, new)
                extra = _events.fields("route_change", topic, old, new, reason="reload")
                log.info("kbear: topic %r moved from %r to %r", topic, old, new, extra=extra)
                self._notify_route_change(old, new)
            self._pin()
            self._retire_unused()

    def _drain(self, cluster_id: str, topic: str) -> None:
        """Flush ``cluster_id``'s client (and retired ones) before ``topic`` (``""``:
        every topic of a pinned producer) leaves it."""
        entry = self._clusters.get(cluster_id)
        candidates = [e for e in (entry, *self._retired) if e is not None]
        started, timed_out = time.monotonic(), False
        log.info(
            "kbear: draining cluster %r before topic %r moves",
            cluster_id,
            topic,
            extra=_events.fields("drain_started", topic, cluster=cluster_id),
        )
        _events.emit(_events.DrainStarted("producer", topic, cluster_id))
        for e in candidates:
            left = e.producer.flush(self._settings.drain_timeout_ms / 1000.0)
            timed_out = timed_out or left > 0
            if left:
                log.warning(
                    "kbear: %d message(s) still in flight on cluster %r after "
                    "kbear.switch.drain.timeout.ms; they stay queued there and are "
                    "reported by poll()/flush()",
                    left,
                    e.cluster_id,
                )
        took = time.monotonic() - started
        log.info(
            "kbear: drain of cluster %r for topic %r ended after %.3f s%s",
            cluster_id,
            topic,
            took,
            " (timed out)" if timed_out else "",
            extra=_events.fields(
                "drain_finished", topic, cluster=cluster_id, reason="timeout" if timed_out else "complete"
            ),
        )
        _events.emit(_events.DrainFinished("producer", topic, cluster_id, took, timed_out))

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
