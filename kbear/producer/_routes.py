"""The route table of a RoutedProducer and the binding of its fast path (private).

:class:`RouteTable` is responsible for the route of each topic in use and the
send function bound per topic (the physical topic and, for a remapped topic,
delivery reports renamed to the logical name), with the compiled dispatcher's
table beside it. :class:`ProduceBinding` binds ``produce`` to the cheapest
correct path: one cluster's own method when the configuration proves every
route goes there, else a dispatcher over the table (``_dispatch``'s compiled
one in front of a closure, or the closure alone), or nothing (kbear's checks)
while a reload is pending or a transaction is open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kbear._clients import ClientRegistry, cluster_target
from kbear._identity import Client
from kbear._route import Route
from kbear.config import KBearConfig
from kbear.producer._cluster import ClusterProducer, home_cluster, logical_callbacks
from kbear.producer._dispatch import make_dispatcher
from kbear.producer._state import ProducerState

# Index of on_delivery among produce()'s positional arguments after the topic:
# produce(topic, value, key, partition, on_delivery, timestamp, headers).
_ON_DELIVERY_POS = 3

Send = Callable[..., None]


class RouteTable:
    """The topics a RoutedProducer sends to, each with its route and send function.

    Read without a lock by producing threads; changed by the producer under its lock.

    Attributes:
        routes: logical topic -> its route.
        send: logical topic -> the produce function with the physical topic bound
            (the hot path of the pure-Python dispatcher).
        direct: logical topic -> its cluster client's ``produce``, for the topics
            sent under their own name (the compiled dispatcher's table).
        bound: logical topic -> (cluster id, send function): the two read at once
            (one dict read), for callers that must know where a message goes
            (the serializing producer serializes for that cluster).

    Args:
        clients: the producer's client registry (a route's client is built there).
    """

    def __init__(self, clients: ClientRegistry[ClusterProducer]) -> None:
        self._clients = clients
        self.routes: dict[str, Route] = {}
        self.send: dict[str, Send] = {}
        self.direct: dict[str, Send] = {}
        self.bound: dict[str, tuple[str, Send]] = {}

    def install(self, topic: str, route: Route) -> Send:
        """Send ``topic`` along ``route`` from now on; returns its send function."""
        entry = self._clients.client(route)
        produce = entry.send
        if route.remapped:
            entry.logical[route.topic] = topic
            send: Send = _remapped_send(produce, topic)
        else:
            send = produce
        self.routes[topic] = route
        bound = self.send[topic] = partial(send, route.topic)
        self.bound[topic] = (route.cluster_id, bound)
        if not route.remapped:  # the compiled dispatcher's table: the call forwarded as is
            self.direct[topic] = produce
        return bound

    def unbind(self, topic: str) -> None:
        """Take ``topic`` out of the send tables (its route stays until :meth:`forget`):
        threads producing to it miss it, take the slow path and wait for the new route."""
        self.direct.pop(topic, None)
        self.bound.pop(topic, None)
        self.send.pop(topic, None)

    def forget(self, topic: str) -> None:
        """Drop ``topic``'s route (after :meth:`unbind`)."""
        del self.routes[topic]

    def items(self) -> list[tuple[str, Route]]:
        """(logical topic, route) of every topic in use (a copy)."""
        return list(self.routes.items())

    def cluster_ids(self) -> Iterable[str]:
        """The cluster of each topic in use (with repeats)."""
        return (r.cluster_id for r in list(self.routes.values()))


def _remapped_send(produce: Send, logical: str) -> Send:
    def send(physical: str, *args: Any, **kwargs: Any) -> None:
        args, kwargs = logical_callbacks(args, kwargs, _ON_DELIVERY_POS, logical)
        produce(physical, *args, **kwargs)

    return send


@dataclass(eq=False)
class ProduceBinding:
    """Binds a RoutedProducer's ``produce`` fast path (or unbinds it).

    Args:
        state: the producer's flags (no fast path while a reload is pending, a
            transaction is open, after close, with per-call features).
        table: the route table (the dispatcher reads it at every call).
        clients: the client registry (the one cluster's client, when pinned).
        config: the configuration in force (``Router.config``).
        client: the client the routes are looked up for.
        hooked: whether route-change hooks are registered (they must see every
            topic produced: never the pinned path).
        route_and_produce: ``produce(topic, *args, **kwargs)`` through kbear's
            checks: the fallback of the dispatcher for a topic not in the table.
        store: writes the fast path (None: the slow path) where the producer's
            ``produce`` finds it.
    """

    _state: ProducerState
    _table: RouteTable
    _clients: ClientRegistry[ClusterProducer]
    _config: Callable[[], KBearConfig]
    _client: Client
    _hooked: Callable[[], bool]
    _route_and_produce: Send
    _store: Callable[[Send | None], None]
    #: the cluster produce() is pinned to (every route goes there), else None
    pinned: str | None = field(default=None, init=False)

    def bind(self) -> None:
        """Bind produce() to the one cluster's client when the configuration proves
        every route of this client goes there unremapped, else to a dispatcher over
        the route table; unbind it while the state allows no fast path."""
        state = self._state
        self.pinned = None
        if not state.fast_path_allowed():
            self._store(None)
            return
        # Hooks need to know every topic produced: the pinned path does not record them.
        config = self._config()
        cluster_id = None if self._hooked() else home_cluster(config, self._client, state.failed)
        if cluster_id is None:
            self._store(self._dispatcher())
        else:
            self.pinned = cluster_id
            probe = cluster_target(cluster_id, config.clusters[cluster_id])
            self._store(self._clients.client(probe).send)
        if state.pending:  # a reload landed meanwhile (watcher thread): back to the slow path
            self._store(None)

    def unbind(self) -> None:
        """The slow path from the next call on (the reloading thread may call this)."""
        self._store(None)

    def take_pinned(self) -> str | None:
        """The cluster produce() was pinned to (None if none), forgotten."""
        pinned, self.pinned = self.pinned, None
        return pinned

    def _dispatcher(self) -> Send:
        """produce() over the route table: the compiled dispatcher over ``direct`` in
        front of a closure over ``send`` when it is built, else the closure."""
        send_table = self._table.send
        route_and_produce = self._route_and_produce

        def produce(topic: str, *args: Any, **kwargs: Any) -> None:
            try:
                send = send_table[topic]
            except KeyError:  # first use of the topic: route it (or raise NoRouteError)
                route_and_produce(topic, *args, **kwargs)
                return
            send(*args, **kwargs)

        produce.__doc__ = route_and_produce.__doc__
        return make_dispatcher(self._table.direct, produce)
