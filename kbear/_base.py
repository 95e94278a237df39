"""What every routed client (RoutedProducer, RoutedConsumer, RoutedAdminClient,
RoutedShareConsumer) has alike (private), as parts a facade builds, and one base
class of the facades (:class:`RoutedClient`: ``router``, ``client``, ``with``):

- :class:`ClientCore`: who the client is (router, Client, kind, the confluent-kafka
  configuration later clients are built from) and who hears of its route changes
  (``on_route_change`` hooks); SASL credentials; its metrics snapshot;
- :class:`ReloadSubscription`: the subscription to the router's reloads, held
  weakly, and what is released when a client dropped without ``close()`` is
  freed (its cluster clients closed), as confluent-kafka's clients are at their
  last reference;
- :func:`weak_method`: a facade's bound method as its parts hold it (no
  reference cycle between a facade and its parts);
- the construction every facade begins with (:func:`refuse_calls`,
  :func:`open_client`, :func:`open_core`): the configuration argument checked,
  kbear keys split from the confluent-kafka configuration (:func:`open_client`),
  the router opened (:func:`open_core`);
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
from typing import Any, Self

from confluent_kafka import KafkaError, KafkaException

from kbear import _events
from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig
from kbear.router import Router
from kbear.settings import KBEAR_PREFIX, KBearSettings, parse_settings

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


def refuse_calls(instance: object, parts: Iterable[str], message: str) -> None:
    """Set each attribute of ``parts`` on ``instance`` (a routed client whose
    ``__init__`` has not run yet) to an :class:`Uninitialized` refusing with
    ``message``: what a facade's ``__new__`` does, so that an instance of a subclass
    that never calls ``__init__`` refuses every call as a closed confluent-kafka client."""
    refusing = Uninitialized(message)
    for part in parts:
        setattr(instance, part, refusing)


_FORBIDDEN = ("bootstrap.servers", "metadata.broker.list")


def open_client(
    instance: object,
    config: Any,
    kwargs: Mapping[str, Any],
    client: Client | None,
    router: Router | None,
    kind: str,
) -> tuple[dict[str, Any], KBearSettings]:
    """The first steps of every routed client's constructor: the configuration
    argument checked as confluent-kafka does, the client announced to kbear's
    observers (:class:`~kbear._events.ClientOpened`), kbear keys split off from the
    confluent-kafka configuration.

    Args:
        instance: the routed client being constructed.
        config, kwargs, client, router: the constructor's arguments (``config``
            :data:`NO_CONFIG` when not given).
        kind: the class name used in error messages (``"RoutedProducer"``).

    Returns:
        (confluent-kafka configuration, kbear settings).

    Raises:
        TypeError: ``config`` is not a mapping (``None``, a string, a list...), or
            no configuration is given at all (no ``config``, no keyword
            properties, no ``router``); confluent-kafka's message
            ("expected configuration dict") comes first.
        ValueError: ``bootstrap.servers`` (or ``metadata.broker.list``) is
            present, a kbear key is unknown or has a bad value, or a client is
            given both as ``client=`` and as ``kbear.client.*`` keys.
    """
    if config is NO_CONFIG:
        if not kwargs and router is None:
            raise TypeError(
                "expected configuration dict: give a configuration with 'kbear.config', or router="
            )
        config = None
    elif not isinstance(config, Mapping):
        raise TypeError(f"expected configuration dict, got {type(config).__name__}")
    _events.emit(_events.ClientOpened(instance))  # type: ignore[arg-type]
    merged: dict[str, Any] = {**(config or {}), **kwargs}
    for key in _FORBIDDEN:
        if key in merged:
            raise ValueError(
                f"{kind}: '{key}' must not be set: kbear takes the bootstrap servers from the "
                "route of each topic (clusters.yaml); remove it and set 'kbear.config' or pass "
                "router="
            )
    kbear_conf = {k: v for k, v in merged.items() if k.startswith(KBEAR_PREFIX)}
    native = {k: v for k, v in merged.items() if not k.startswith(KBEAR_PREFIX)}
    settings = parse_settings(kbear_conf, client, kind)
    if settings.metrics_enable:
        from kbear.metrics import instrument  # the optional extra, imported only when asked for

        instrument()
    return native, settings


def open_core(
    kind: str,
    native: dict[str, Any],
    settings: KBearSettings,
    router: Router | None,
    name: str,
    log: logging.Logger,
) -> tuple[ClientCore, bool]:
    """The router (``router``, or one opened from ``kbear.config``) and the
    :class:`ClientCore` of a routed client of ``kind`` (as :class:`ClientCore`)
    named ``name`` in errors.

    Starts the router's watcher when ``kbear.reload.interval.ms`` > 0.
    ``kbear.config`` is a configuration directory or a meta-service ``http(s)://``
    URL (asked on behalf of the settings' client, see :mod:`kbear.meta`).

    Returns:
        (the core, whether the client owns the router and must close it).

    Raises:
        ValueError: neither ``router=`` nor ``kbear.config`` is given.
        ConfigError: the configuration is invalid (or a meta-service unreachable
            with no cached answer to start from).
    """
    owned = router is None
    if router is None:
        if settings.config_dir is None:
            raise ValueError(f"{name}: set 'kbear.config' (a configuration directory) or pass router=")
        # A meta-service is told who asks: the kbear.client.* keys, else the
        # environment (Client.from_environment); a directory ignores it.
        given = settings.client.id is not None or bool(settings.client.meta)
        router = Router.from_source(settings.config_dir, client=settings.client if given else None)
    if settings.reload_interval_ms > 0 and router.source is not None:
        router.watch(settings.reload_interval_ms / 1000.0)
    return ClientCore(kind, native, router, settings.client, log), owned


def weak_method(method: Callable[..., Any], gone: Callable[[], Any] | None = None) -> Callable[..., Any]:
    """``method``, a bound method of a routed client, as one of its parts holds it:
    called through a weak reference to the client, so that no part keeps the
    client alive (a client dropped without ``close()`` is freed at its last
    reference, as confluent-kafka's).

    Args:
        method: a bound method (``client._store_fast_path``).
        gone: called (and its result returned) instead once the client is gone;
            None: the call does nothing and returns None.
    """
    ref = weakref.ref(method.__self__)  # type: ignore[attr-defined]
    func = method.__func__  # type: ignore[attr-defined]

    def call(*args: Any, **kwargs: Any) -> Any:
        owner = ref()
        if owner is None:
            return None if gone is None else gone()
        return func(owner, *args, **kwargs)

    call.__doc__ = func.__doc__
    call.__name__ = getattr(func, "__name__", "call")
    return call


def _release(router: Router, listener: Callable[..., None], owned: bool) -> None:
    """At a routed client's collection: stop its reload listener (and its router if owned)."""
    router.unsubscribe(listener)
    if owned:
        router.close()


def _run_release(release: Callable[[], None]) -> None:
    """A collected client's ``release`` (:class:`ReloadSubscription`); its error logged."""
    try:
        release()
    except Exception:
        logging.getLogger("kbear").exception(
            "kbear: releasing the clients of a routed client dropped unclosed failed"
        )


class ReloadSubscription:
    """A routed client's subscription to its router's reloads, held weakly.

    ``on_change(old, new)`` (a bound method of the routed client or of one of its
    parts) is called in the reloading thread through a weak reference: a routed
    client dropped without ``close()`` is freed, and at its collection ``release``
    runs (its cluster clients closed: their threads and connections end, as a
    confluent-kafka client's at its last reference), the listener is removed (and
    the router closed when ``owns_router``), which stops the router's watcher thread.

    Args:
        owner: the routed client (its collection ends the subscription).
        router: the router whose reloads are followed.
        on_change: called as ``on_change(old_config, new_config)``.
        owns_router: close ``router`` when ``owner`` is collected unclosed.
        release: called once when ``owner`` is collected unclosed (in the thread
            that dropped its last reference; not at interpreter exit), before the
            router is closed; refers to the client's parts, never to ``owner``.
            What it raises is logged.
    """

    def __init__(
        self,
        owner: object,
        router: Router,
        on_change: Callable[[KBearConfig, KBearConfig], None],
        owns_router: bool,
        release: Callable[[], None] | None = None,
    ) -> None:
        listener = weak_method(on_change)
        self._router = router
        self.listener: Callable[[KBearConfig, KBearConfig], None] | None = listener
        router.subscribe(listener)
        self._finalizer = weakref.finalize(owner, _release, router, listener, owns_router)
        # Registered after the subscription's: finalizers run last registered first.
        self._releaser = None if release is None else weakref.finalize(owner, _run_release, release)
        if self._releaser is not None:
            self._releaser.atexit = False  # at exit, clients are left as confluent-kafka's are

    def stop(self) -> None:
        """Stop following reloads (``close()``); the router is left to the caller. Idempotent."""
        if self._releaser is not None:
            self._releaser.detach()
        if self.listener is not None:
            self._finalizer.detach()
            self._router.unsubscribe(self.listener)
            self.listener = None


class RoutedClient:
    """The base of every routed client's facade: what it shows of its
    :class:`ClientCore` (``_core``), and ``with`` (closed at the block's end,
    exceptions of the block propagate). No state of its own."""

    __slots__ = ()
    _core: ClientCore

    @property
    def router(self) -> Router:
        """The router in use."""
        return self._core.router

    @property
    def client(self) -> Client:
        """The client the routes are looked up for (``client.*`` factors)."""
        return self._core.client

    def close(self) -> Any:
        """Close the client (each facade says what that does)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        _events.call_each(self.log, "kbear: on_route_change hook %r failed", self.listeners, old, new)

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
