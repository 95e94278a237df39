"""What every routed client (RoutedProducer, RoutedConsumer, RoutedAdminClient) has
alike (private), as parts a facade builds, never a base class:

- :class:`ClientCore`: who the client is (router, Client, kind, the confluent-kafka
  configuration later clients are built from) and who hears of its route changes
  (``on_route_change`` hooks); SASL credentials; its metrics snapshot;
- :class:`ReloadSubscription`: the subscription to the router's reloads, held
  weakly: a client dropped without ``close()`` is freed (and its clients with
  it), as confluent-kafka's;
- :class:`Uninitialized`: what an instance whose ``__init__`` never ran (a subclass
  not calling it) has in place of its parts: every call refuses with
  ``RuntimeError``, as confluent-kafka's clients;
- topic-name rewriting of metadata (``list_topics`` of a remapped topic);
- one NoRouteError naming several topics;
- what confluent-kafka's clients check before anything else: the type of the
  configuration argument.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kbear import _events
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig
from kbear.router import Router

RouteChangeCallback = Callable[[Route, Route | None], None]


def no_route(client: Client, topics: list[str], group: str | None) -> NoRouteError:
    """A NoRouteError for ``topics`` (one or more; logical names) for ``client``
    (and consumer group ``group``), naming every topic."""
    err = NoRouteError(client, topics[0], group)
    if len(topics) > 1:
        names = ", ".join(f"'{t}'" for t in topics)
        where = f", consumer group '{group}', client {client!r}" if group else f" for client {client!r}"
        err.args = (f"no route for topics {names}{where}",)
    return err


def rename_metadata(md: Any, route: Route, topic: str) -> Any:
    """``md`` (ClusterMetadata of ``route``'s cluster) with the physical topic
    ``route.topic`` listed under the logical name ``topic``."""
    if route.remapped and route.topic in md.topics:
        tmd = md.topics.pop(route.topic)
        tmd.topic = topic
        md.topics[topic] = tmd
    return md


def not_one_cluster(call: str, client: str, cluster_ids: Iterable[str], hint: str) -> KafkaException:
    """The ``KafkaException`` (``_STATE``) of a call that exists for one cluster only
    (``cluster_id``, ``consumer_group_metadata``) made on a routed ``client``
    ("RoutedConsumer reads from") that uses the clusters ``cluster_ids`` (not one)."""
    names = ", ".join(cluster_ids) or "none"
    return KafkaException(KafkaError(KafkaError._STATE, f"{call}: this {client} clusters {names}; {hint}"))


#: The configuration argument when none is given (``RoutedProducer()``), told apart
#: from an explicit ``None``.
NO_CONFIG: Any = object()


def check_config_argument(config: Any, kwargs: Mapping[str, Any], router: Any) -> Mapping[str, Any] | None:
    """``config`` as a mapping (None when not given), checked as confluent-kafka does.

    Raises:
        TypeError: ``config`` is not a mapping (``None``, a string, a list...), or
            no configuration is given at all (no ``config``, no keyword
            properties, no ``router``); confluent-kafka's message
            ("expected configuration dict") comes first.
    """
    if config is NO_CONFIG:
        if not kwargs and router is None:
            raise TypeError(
                "expected configuration dict: give a configuration with 'kbear.config', or router="
            )
        return None
    if not isinstance(config, Mapping):
        raise TypeError(f"expected configuration dict, got {type(config).__name__}")
    return config


class Uninitialized:
    """Stands for the parts of a routed client whose ``__init__`` never ran (a subclass
    not calling it): any use raises ``RuntimeError(message)``, as a confluent-kafka
    client refuses every call then ("Producer has been closed")."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(self.message)

    def __enter__(self) -> None:
        raise RuntimeError(self.message)

    def __exit__(self, *exc: object) -> None:
        raise RuntimeError(self.message)


def _release(router: Router, listener: Callable[..., None], owned: bool) -> None:
    """At a routed client's collection: stop its reload listener (and its router if owned)."""
    router.unsubscribe(listener)
    if owned:
        router.close()


class ReloadSubscription:
    """A routed client's subscription to its router's reloads, held weakly.

    ``on_change(old, new)`` (a bound method of the routed client or of one of its
    parts) is called in the reloading thread through a weak reference: a routed
    client dropped without ``close()`` is freed, and at its collection the
    listener is removed (and the router closed when ``owns_router``), which stops
    the router's watcher thread.

    Args:
        owner: the routed client (its collection ends the subscription).
        router: the router whose reloads are followed.
        on_change: called as ``on_change(old_config, new_config)``.
        owns_router: close ``router`` when ``owner`` is collected unclosed.
    """

    def __init__(
        self,
        owner: object,
        router: Router,
        on_change: Callable[[KBearConfig, KBearConfig], None],
        owns_router: bool,
    ) -> None:
        ref = weakref.WeakMethod(on_change)

        def listener(old: KBearConfig, new: KBearConfig) -> None:
            method = ref()
            if method is not None:
                method(old, new)

        self._router = router
        self.listener: Callable[[KBearConfig, KBearConfig], None] | None = listener
        router.subscribe(listener)
        self._finalizer = weakref.finalize(owner, _release, router, listener, owns_router)

    def stop(self) -> None:
        """Stop following reloads (``close()``); the router is left to the caller. Idempotent."""
        if self.listener is not None:
            self._finalizer.detach()
            self._router.unsubscribe(self.listener)
            self.listener = None


class ClientCore:
    """Who a routed client is, and who hears of its route changes: one part its
    facade builds and hands on (the parts that switch routes get :meth:`notify`,
    never the facade).

    Args:
        kind: ``"producer"``, ``"consumer"`` or ``"client"`` (the admin client):
            the kind of client in events and metrics.
        native: the confluent-kafka configuration without kbear keys, from which
            every cluster's client is built (``set_credentials`` updates it).
        router: the router the routes come from.
        client: the client the routes are looked up for (``client.*`` factors).
        log: where a failing ``on_route_change`` hook is logged.

    Attributes:
        listeners: the ``on_route_change`` hooks, in registration order (a
            producer's fast path is bound only while it is empty).
    """

    __slots__ = ("client", "kind", "listeners", "log", "native", "router")

    def __init__(
        self, kind: str, native: dict[str, Any], router: Router, client: Client, log: logging.Logger
    ) -> None:
        self.kind = kind
        self.native = native
        self.router = router
        self.client = client
        self.log = log
        self.listeners: list[RouteChangeCallback] = []

    def notify(self, old: Route, new: Route | None) -> None:
        """Emit :class:`~kbear._events.RouteChanged` and call each hook ``(old, new)``
        in the calling thread; a hook that raises is logged and the switch stands."""
        _events.emit(
            _events.RouteChanged(self.kind, _events.client_id(self.native), old.requested_topic, old, new)
        )
        for callback in list(self.listeners):
            try:
                callback(old, new)
            except Exception:
                self.log.exception("kbear: on_route_change hook %r failed", callback)

    def set_credentials(self, clients: Iterable[Any], username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on each of ``clients`` (confluent-kafka
        clients) and in the configuration later clients are built from.

        Raises:
            TypeError: ``username`` or ``password`` is not a str (as confluent-kafka).
        """
        for position, value in enumerate((username, password), 1):
            if not isinstance(value, str):
                raise TypeError(
                    f"set_sasl_credentials() argument {position} must be str, not {type(value).__name__}"
                )
        self.native["sasl.username"] = username
        self.native["sasl.password"] = password
        for client in clients:
            client.set_sasl_credentials(username, password)

    def snapshot(self, routes: dict[str, Route], drains: int) -> _events.ClientSnapshot:
        """The :class:`~kbear._events.ClientSnapshot` of the client with ``routes``
        (logical topic -> route in use) and ``drains`` in progress, under the
        configuration in force."""
        config = self.router.config
        return _events.ClientSnapshot(
            kind=self.kind,
            client_id=_events.client_id(dict(self.native)),
            group=str(self.native.get("group.id", "")) if self.kind in ("consumer", "share_consumer") else "",
            routes=routes,
            drains=drains,
            config_location=_events.location(config.directory or config.location),
            config_digest=config.digest,
        )
