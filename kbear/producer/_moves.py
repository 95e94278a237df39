"""Routing a RoutedProducer's topics and applying configuration reloads to them (private).

:class:`Routing` routes a topic at first use and applies a pending reload, under
the producer's lock, in the caller's thread: it looks every topic in use up again,
and for a topic that moves, drains its old cluster's in-flight messages
(``flush``, up to ``kbear.switch.drain.timeout.ms``) before it goes to the new
one, so nothing is lost and per-partition order holds; a drain that times out,
or of a client whose brokers are all down (no wait then), ends with what the old
client still holds taken back and sent along the new routes
(:mod:`kbear.producer._takeback`); then it lets go of clients no longer needed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kbear import _events
from kbear._base import no_route
from kbear._clients import ClientRegistry, cluster_target
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig
from kbear.producer._cluster import ClusterProducer, home_cluster
from kbear.producer._routes import ProduceBinding, RouteTable, Send
from kbear.producer._state import ProducerState
from kbear.producer._takeback import TakeBack

log = logging.getLogger("kbear.producer")


@dataclass(eq=False)
class Routing:
    """Routes a RoutedProducer's topics at first use and applies pending reloads, under
    the producer's lock, in the caller's thread (see the module docstring).

    Args:
        state: the producer's flags (``pending`` set by the reloading thread;
            ``failed``: its failed-over clusters).
        lock: the producer's lock.
        table: the route table.
        clients: the client registry.
        binding: the binding of produce()'s fast path (rebound after a reload).
        lookup: ``lookup(topic)``: the topic's producer route now (raises NoRouteError).
        config: the configuration in force.
        client: the client the routes are looked up for.
        drain_timeout_s: how long a move waits for the old cluster's messages
            (seconds; ``kbear.switch.drain.timeout.ms`` / 1000).
        notify: ``notify(old, new)``: a topic moved (``new`` None: no route any more).
        release: called first at each reload applied: ends the producer's own
            failovers the operator decided about since (they leave ``failed``).
    """

    _state: ProducerState
    _lock: threading.RLock
    _table: RouteTable
    _clients: ClientRegistry[ClusterProducer]
    _binding: ProduceBinding
    _lookup: Callable[[str], Route]
    _config: Callable[[], KBearConfig]
    _client: Client
    _drain_timeout_s: float
    _notify: Callable[[Route, Route | None], None]
    _release: Callable[[], None]

    def __post_init__(self) -> None:
        self._take_back = TakeBack(self._send_for)

    def _apply(self, pinned: str | None) -> None:
        """Move every topic whose route changed; ``pinned``: the cluster produce() was
        pinned to until now (its topics are not in the table: the whole cluster is
        drained before any topic goes elsewhere)."""
        self._clients.next_generation()
        self._release()  # failovers of this producer the operator decided about
        failed = self._state.failed
        stuck: list[ClusterProducer] = []
        if (
            pinned is not None
            and pinned in self._clients
            and home_cluster(self._config(), self._client, failed) != pinned
        ):
            stuck += self._drain(pinned, "")
        table = self._table
        for topic, old in table.items():
            try:
                new: Route | None = self._lookup(topic)
            except NoRouteError as exc:
                log.error("kbear: topic %r lost its route after reload: %s", topic, exc)
                new = None
            if new is not None and (
                new.cluster_id == old.cluster_id
                and new.topic == old.topic
                and dict(new.properties) == dict(old.properties)
            ):
                table.routes[topic] = new
                continue
            # Unbind the topic before draining: other threads producing to it now
            # miss it in the table, take the slow path and wait on the lock for the
            # new route, instead of adding to the old cluster after its flush.
            table.unbind(topic)
            stuck += self._drain(old.cluster_id, topic)
            table.forget(topic)
            if new is not None:
                table.install(topic, new)
            extra = _events.fields("route_change", topic, old, new, reason="reload")
            log.info("kbear: topic %r moved from %r to %r", topic, old, new, extra=extra)
            self._notify(old, new)
        self._take_back_from(stuck)

    def _take_back_from(self, stuck: list[ClusterProducer]) -> None:
        """Take back what the clients whose drain timed out still hold, once every
        topic is on its new route (:mod:`kbear.producer._takeback`): their queued
        messages always, their in-flight ones when no route uses the client any more."""
        done: set[int] = set()
        for entry in stuck:
            if id(entry) in done:
                continue
            done.add(id(entry))
            in_use = {id(self._clients.get(c)) for c in self._table.cluster_ids()}
            self._take_back.take_back(entry, in_flight=id(entry) not in in_use)

    def _send_for(self, topic: str) -> Send | None:
        """The send function of ``topic``'s route now, routing it if it has none in
        the table (a pinned producer's topics); None when no rule routes it."""
        send = self._table.send.get(topic)
        if send is not None:
            return send
        try:
            return self._table.install(topic, self._lookup(topic))
        except NoRouteError as exc:
            log.error("kbear: a message of topic %r taken back has no route: %s", topic, exc)
            return None

    def _drain(self, cluster_id: str, topic: str) -> list[ClusterProducer]:
        """Flush ``cluster_id``'s client (and retired ones) before ``topic`` (``""``:
        every topic of a pinned producer) leaves it; returns the clients that still
        hold messages after ``kbear.switch.drain.timeout.ms`` (to take back)."""
        entry = self._clients.get(cluster_id)
        candidates = [e for e in (entry, *self._clients.retired()) if e is not None]
        started, timed_out = time.monotonic(), False
        stuck: list[ClusterProducer] = []
        what = f"topic {topic!r}" if topic else "every topic (a producer pinned to one cluster)"
        log.info(
            "kbear: draining cluster %r before %s moves",
            cluster_id,
            what,
            extra=_events.fields("drain_started", topic, cluster=cluster_id),
        )
        _events.emit(_events.DrainStarted("producer", topic, cluster_id, started))
        for e in candidates:
            # a client whose brokers are all down (suspect) cannot drain: no wait
            left = e.producer.flush(0 if e.rescue.suspected else self._drain_timeout_s)
            timed_out = timed_out or left > 0
            if left:
                stuck.append(e)
                log.warning(
                    "kbear: %d message(s) still in flight on cluster %r after "
                    "kbear.switch.drain.timeout.ms; they are taken back and sent along "
                    "their routes now",
                    left,
                    e.cluster_id,
                )
        took = time.monotonic() - started
        log.info(
            "kbear: drain of cluster %r for %s ended after %.3f s%s",
            cluster_id,
            what,
            took,
            " (timed out)" if timed_out else "",
            extra=_events.fields(
                "drain_finished", topic, cluster=cluster_id, reason="timeout" if timed_out else "complete"
            ),
        )
        _events.emit(_events.DrainFinished("producer", topic, cluster_id, took, timed_out))
        return stuck

    def _retire_unused(self) -> None:
        """Drop clients no longer needed, never at the reload that stopped using them.

        A thread that read a send function (or the pinned ``produce``) just before a
        switch may still produce through it after the drain: that client must stay
        polled and flushed, or the message would never get its delivery report. So
        the client of a cluster that is merely unused stays (and is reused when a
        topic comes back); a client replaced, or of a cluster gone from
        ``clusters.yaml``, is dropped once empty at a later reload.
        """
        self._clients.retire_unknown(self._config().clusters)
        self._clients.release_retired(lambda e: len(e.producer) > 0)

    def apply_changes(self) -> None:
        """Apply a pending reload (a no-op when another thread did meanwhile)."""
        with self._lock:
            state = self._state
            if not state.pending:
                return
            state.pending = False
            self._apply(self._binding.take_pinned())
            self._binding.bind()
            self._retire_unused()

    def route(self, topic: str) -> Route:
        """The route used for ``topic``, routing it now if new (raises NoRouteError)."""
        if self._state.pending:
            self.apply_changes()
        route = self._table.routes.get(topic)
        if route is None:
            with self._lock:
                self.add_route(topic)
                route = self._table.routes[topic]
        return route

    def add_route(self, topic: str) -> Send:
        """Route ``topic`` (first use, or after a reload unbound it) and return its send
        function. Under the lock, after applying any pending reload: a thread that
        waited here while another applied a change must neither install a route
        that skips a drain nor find the topic unbound again.

        Raises:
            RuntimeError: the producer is closed (as confluent-kafka; and no new
                client after close()).
            NoRouteError: no rule routes the topic.
        """
        with self._lock:
            if self._state.closed:
                raise RuntimeError("Producer has been closed")
            if self._state.pending:
                self.apply_changes()
            send = self._table.send.get(topic)
            if send is None:
                send = self._table.install(topic, self._lookup(topic))
            return send

    def route_all(self, topics: list[str]) -> None:
        """Route every topic of ``topics``; raises one NoRouteError naming all that have none."""
        failures = []
        for topic in topics:
            try:
                self.add_route(topic)
            except NoRouteError as exc:
                failures.append(exc)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            raise no_route(self._client, [f.topic for f in failures], None)

    def home(self) -> ClusterProducer | None:
        """The client of the one cluster every route goes to, when the configuration
        proves there is one (a pending reload applied first), else None."""
        if self._state.pending:
            self.apply_changes()
        config = self._config()
        cluster_id = home_cluster(config, self._client, self._state.failed)
        if cluster_id is None:
            return None
        return self._clients.client(cluster_target(cluster_id, config.clusters[cluster_id]))
