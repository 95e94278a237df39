"""What RoutedProducer and RoutedConsumer do alike (private).

- route-change listeners (``on_route_change``) and their notification;
- configuration changes: the reloading thread only flags them and unbinds the
  fast-path methods; the caller's thread applies them at its next call;
- SASL credentials set on every cluster's client and on clients built later;
- topic-name rewriting of metadata (``list_topics`` of a remapped topic);
- one NoRouteError naming several topics;
- what confluent-kafka's clients check before anything else: the type of the
  configuration argument, and an instance whose ``__init__`` never ran (a
  subclass not calling it) refusing every call with ``RuntimeError``;
- the subscription to the router's reloads, held weakly: a client dropped
  without ``close()`` is freed (and its clients with it), as confluent-kafka's.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

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


def client_snapshot(
    kind: str, native: Mapping[str, Any], config: KBearConfig, routes: dict[str, Route], drains: int
) -> _events.ClientSnapshot:
    """The :class:`~kbear._events.ClientSnapshot` of a routed client of ``kind`` with the
    confluent-kafka configuration ``native``, the configuration ``config`` in force,
    ``routes`` (logical topic -> route in use) and ``drains`` in progress."""
    return _events.ClientSnapshot(
        kind=kind,
        client_id=_events.client_id(dict(native)),
        group=str(native.get("group.id", "")) if kind == "consumer" else "",
        routes=routes,
        drains=drains,
        config_location=_events.location(config.directory or config.location),
        config_digest=config.digest,
    )


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


def notify_route_change(
    kind: str,
    native: dict[str, Any],
    callbacks: Iterable[RouteChangeCallback],
    log: logging.Logger,
    old: Route,
    new: Route | None,
) -> None:
    """Emit :class:`~kbear._events.RouteChanged` for a routed client of ``kind``
    (``native``: its confluent-kafka configuration) and call each ``callback(old,
    new)`` in the calling thread; a callback that raises is logged on ``log`` and
    the switch stands."""
    _events.emit(_events.RouteChanged(kind, _events.client_id(native), old.requested_topic, old, new))
    for callback in list(callbacks):
        try:
            callback(old, new)
        except Exception:
            log.exception("kbear: on_route_change hook %r failed", callback)


def set_credentials(native: dict[str, Any], clients: Iterable[Any], username: str, password: str) -> None:
    """Set SASL/PLAIN or SCRAM credentials on each of ``clients`` (confluent-kafka
    clients) and in ``native``, the configuration later clients are built from.

    Raises:
        TypeError: ``username`` or ``password`` is not a str (as confluent-kafka).
    """
    for position, value in enumerate((username, password), 1):
        if not isinstance(value, str):
            raise TypeError(
                f"set_sasl_credentials() argument {position} must be str, not {type(value).__name__}"
            )
    native["sasl.username"] = username
    native["sasl.password"] = password
    for client in clients:
        client.set_sasl_credentials(username, password)


class RoutedClientBase:
    """Base of the routed clients: listeners, configuration changes, credentials.

    Subclasses set ``_native`` (the confluent-kafka configuration without kbear
    keys), ``_log``, ``_fast_paths`` (names of instance attributes bound over
    class methods on a fast path) and implement :meth:`_native_clients`.
    """

    _native: dict[str, Any]
    _log: logging.Logger
    _router: Router
    _client: Client
    _closed: bool
    _fast_paths: tuple[str, ...] = ()
    #: ``"producer"`` or ``"consumer"``: the kind of client in events and metrics
    _kind = "client"
    #: The RuntimeError message of a call on a client that is closed or was never
    #: initialized (confluent-kafka's: "Producer has been closed", "Consumer closed").
    _closed_message = "client has been closed"

    def __init__(self) -> None:
        self._route_listeners: list[RouteChangeCallback] = []
        self._pending = False
        self._listener: Callable[[KBearConfig, KBearConfig], None] | None = None
        _events.emit(_events.ClientOpened(self))

    if not TYPE_CHECKING:  # (for mypy, attributes stay checked)

        def __getattr__(self, name: str) -> Any:
            # Only reached for an attribute not found: in an instance whose __init__
            # never ran (a subclass that does not call it), every state attribute. Such
            # a client refuses every call as confluent-kafka's does, instead of an
            # AttributeError from kbear's internals.
            if not name.startswith("__") and not self._initialized:
                raise RuntimeError(self._closed_message)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _initialized(self) -> bool:
        """False in an instance whose ``__init__`` never ran."""
        return "_route_listeners" in self.__dict__

    def snapshot(self) -> _events.ClientSnapshot | None:
        """What this client shows kbear's metrics now (:class:`kbear._events.ClientSnapshot`):
        its kind, ``client.id``, group, routes in use, drains in progress and the
        configuration in force; None once closed, or when its constructor failed.

        Raises:
            RuntimeError: the route table changed while it was copied (taken from
                another thread); try again.
        """
        if not self._initialized:
            return None
        try:
            if self._closed:
                return None
            native = self._native
            config = self._router.config
            routes = self._routes_in_use()
            drains = self._drains_in_progress()
        except AttributeError:  # the constructor failed before the client was complete
            return None
        return client_snapshot(self._kind, native, config, routes, drains)

    def _routes_in_use(self) -> dict[str, Route]:
        """Logical topic -> route in use, copied (for :meth:`snapshot`); none by default."""
        return {}

    def _drains_in_progress(self) -> int:
        """Drains in progress (for :meth:`snapshot`); none by default."""
        return 0

    def _listen(self, owns_router: bool) -> None:
        """Follow the router's reloads through a weak reference to this client; when
        the client is collected unclosed, the listener is removed (and an owned
        router closed, which stops its watcher thread)."""
        self._subscription = ReloadSubscription(self, self._router, self._on_config_change, owns_router)
        self._listener = self._subscription.listener

    def _stop_listening(self) -> None:
        """Stop following reloads (``close()``); the router is left to the caller."""
        if self._listener is not None:
            self._subscription.stop()
            self._listener = None

    @property
    def router(self) -> Router:
        """The router in use."""
        return self._router

    @property
    def client(self) -> Client:
        """The client the routes are looked up for (``client.*`` factors)."""
        return self._client

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Call ``callback(old_route, new_route)`` in the caller's thread when a
        topic in use has switched clusters (``new_route`` None: no route any more).
        A hook that raises is logged and the switch stands."""
        self._route_listeners.append(callback)

    def _notify_route_change(self, old: Route, new: Route | None) -> None:
        notify_route_change(self._kind, self._native, self._route_listeners, self._log, old, new)

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        # Runs in the reloading thread: only flag (and unbind the fast paths, so the
        # next call takes the slow path); the caller's thread applies.
        self._pending = True
        self._unpin()

    def _unpin(self) -> None:
        for name in self._fast_paths:
            self.__dict__.pop(name, None)

    def _native_clients(self) -> Iterable[Any]:
        raise NotImplementedError

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on
        clients built later (as confluent-kafka's ``set_sasl_credentials``).

        Raises:
            TypeError: ``username`` or ``password`` is not a str (as confluent-kafka).
        """
        set_credentials(self._native, self._native_clients(), username, password)
