"""A Schema Registry per cluster for the serializing clients.

Schema ids are local to one registry: a message sent to a cluster must carry an
id that cluster's registry knows, and a message read from a cluster is decoded
with that cluster's registry. A cluster names its registry in the ``meta`` of
``clusters.yaml``:

- ``schema.registry.url``: the registry's URL (``mock://<name>`` is
  confluent-kafka's in-memory registry);
- ``schema.registry.<key>``: any other setting of confluent-kafka's
  ``SchemaRegistryClient`` under that prefix (``schema.registry.basic.auth.user.info``,
  ``schema.registry.ssl.ca.location``, ``schema.registry.timeout``...).

These keys are not librdkafka properties: they never reach a Kafka client.
``${NAME}`` in their values is read from the environment as in any cluster meta,
and the values of secret keys (``...user.info``, ``...password``, ``...secret``,
``...token``) are hidden wherever kbear shows a configuration.

:func:`per_cluster` wraps a factory of serializers or deserializers:
``RoutedSerializingProducer`` / ``RoutedDeserializingConsumer`` call it once per
cluster with that cluster's registry client and keep what it returns.
:func:`registry_client` keeps one ``SchemaRegistryClient`` per registry
configuration in a process, shared by every routed client (one URL is one
registry, as with a real server; its caches and connections are shared too).
The asyncio clients (``kbear.aio.RoutedAsyncSerializingProducer`` /
``RoutedAsyncDeserializingConsumer``) call the factory with an
``AsyncSchemaRegistryClient`` instead (:func:`async_registry_client`: one per
registry configuration and event loop), so it may return confluent-kafka's
asyncio serdes (``AsyncAvroSerializer``...; a factory may be a coroutine
function, or return an awaitable as ``AsyncAvroSerializer(...)`` does).

confluent-kafka's registry client comes with the ``schema-registry`` extra
(``pip install kbear[schema-registry]``); it is imported at the first
:func:`registry_client` call, never when kbear is imported.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "PREFIX",
    "URL",
    "PerCluster",
    "async_registry_client",
    "clear_registry_clients",
    "per_cluster",
    "registry_client",
    "registry_config",
]

#: The prefix of a cluster's Schema Registry settings in its ``clusters.yaml`` meta.
PREFIX = "schema.registry."
#: The meta key naming a cluster's Schema Registry; a cluster without it has none.
URL = PREFIX + "url"

#: ``SchemaRegistryClient`` settings that take a number (confluent-kafka 2.16's
#: ``schema_registry_client.py`` refuses a string there); meta values are strings.
_NUMERIC = (
    "timeout",
    "cache.capacity",
    "cache.latest.ttl.sec",
    "max.retries",
    "retries.wait.ms",
    "retries.max.wait.ms",
)

Serde = Callable[[Any, Any], Any]


class PerCluster:
    """A serializer or deserializer built once per cluster, with that cluster's registry.

    Made by :func:`per_cluster`; give it as ``key.serializer``, ``value.serializer``,
    ``key.deserializer`` or ``value.deserializer`` of a routed serializing client.

    Attributes:
        factory: ``factory(registry_client)`` returns the serde of one cluster
            (e.g. ``lambda sr: AvroSerializer(sr, schema_str)``).
        default: the serde used for a cluster without ``schema.registry.url``;
            None: such a cluster's messages fail with a ``SerializationError``
            naming the cluster.
    """

    __slots__ = ("default", "factory")

    def __init__(self, factory: Callable[[Any], Serde], default: Serde | None = None) -> None:
        if not callable(factory):
            raise TypeError(f"per_cluster: factory must be callable, got {type(factory).__name__}")
        self.factory = factory
        self.default = default

    def __repr__(self) -> str:
        return f"per_cluster({self.factory!r}, default={self.default!r})"


def per_cluster(factory: Callable[[Any], Serde], *, default: Serde | None = None) -> PerCluster:
    """A serializer or deserializer that kbear builds once per cluster.

    Args:
        factory: called as ``factory(registry_client)`` with the
            ``SchemaRegistryClient`` of a cluster's registry (:func:`registry_client`
            of its ``schema.registry.*`` meta), at the first message sent to or read
            from that cluster; returns a confluent-kafka serde
            (``AvroSerializer(registry_client, schema_str)``...) or any callable
            ``(obj, SerializationContext) -> bytes`` (deserializers: the reverse).
            The asyncio clients of :mod:`kbear.aio` call it with the cluster's
            ``AsyncSchemaRegistryClient`` (:func:`async_registry_client`) and await
            what it returns when it is awaitable
            (``lambda sr: AsyncAvroSerializer(sr, schema_str=...)``).
        default: what a cluster without ``schema.registry.url`` uses; None: a
            message to (from) such a cluster raises ``KeySerializationError`` /
            ``ValueSerializationError`` (``...DeserializationError``) naming it.

    Returns:
        A :class:`PerCluster` to give as a ``*.serializer`` / ``*.deserializer`` setting.

    Raises:
        TypeError: ``factory`` is not callable.

    So a message is registered (or looked up) in the registry of the cluster it
    is sent to, and decoded with the registry of the cluster it was read from;
    each cluster's serde has its own caches (the subject names of
    ``AssociatedNameStrategy``, which depend on the Kafka cluster).
    """
    return PerCluster(factory, default)


def _value(key: str, value: str) -> Any:
    for number in (int, float) if key in _NUMERIC else ():
        with contextlib.suppress(ValueError):
            return number(value)
    return value  # (not a number where one is due: confluent-kafka's TypeError names the key)


def registry_config(meta: Mapping[str, str] | None) -> dict[str, Any] | None:
    """A cluster's ``SchemaRegistryClient`` configuration from its ``clusters.yaml`` meta.

    Args:
        meta: the cluster's meta (``${NAME}`` already read), or None.

    Returns:
        ``{"url": ..., <key>: ...}`` from ``schema.registry.url`` and every other
        ``schema.registry.<key>`` (numbers converted for the numeric settings:
        ``timeout``, ``cache.capacity``, ``max.retries``, ``retries.wait.ms``...);
        None when the meta has no ``schema.registry.url`` (no registry).
    """
    if not meta or not meta.get(URL):
        return None
    return {k[len(PREFIX) :]: _value(k[len(PREFIX) :], v) for k, v in meta.items() if k.startswith(PREFIX)}


def _config_key(conf: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in conf.items()))


def _client_class(name: str) -> Any:
    """confluent-kafka's ``SchemaRegistryClient`` / ``AsyncSchemaRegistryClient`` class.

    Raises:
        ImportError: the registry client is not installed (install ``kbear[schema-registry]``).
    """
    try:
        from confluent_kafka import schema_registry
    except ImportError as exc:
        raise ImportError(
            "kbear.schema_registry: confluent-kafka's Schema Registry client is not installed "
            f"({exc}); pip install 'kbear[schema-registry]'"
        ) from exc
    return getattr(schema_registry, name)


def stale_registries(
    confs: Mapping[str, dict[str, Any] | None], meta: Callable[[str], Mapping[str, str] | None]
) -> list[str]:
    """The clusters of ``confs`` (cluster id -> the registry configuration its serdes were
    built with) whose ``schema.registry.*`` meta (``meta(cluster_id)``) now says otherwise;
    a cluster no longer configured (meta None) is not stale: its messages may still be
    in flight."""
    return [
        cluster_id
        for cluster_id, conf in list(confs.items())
        if (now := meta(cluster_id)) is not None and registry_config(now) != conf
    ]


_clients: dict[tuple[tuple[str, str], ...], Any] = {}
_clients_lock = threading.Lock()


def registry_client(conf: Mapping[str, Any]) -> Any:
    """The process's ``SchemaRegistryClient`` for ``conf``: built at the first call
    (``SchemaRegistryClient.new_client``: ``mock://`` URLs give confluent-kafka's
    in-memory registry, whose schemas belong to that instance), the same object
    for every later call with an equal configuration, from any routed client.

    Args:
        conf: a ``SchemaRegistryClient`` configuration (``url`` required).

    Raises:
        ImportError: confluent-kafka's registry client is not installed (install
            ``kbear[schema-registry]``).
        ValueError, TypeError: confluent-kafka refused ``conf`` (its message).
    """
    key = _config_key(conf)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _client_class("SchemaRegistryClient").new_client(dict(conf))
        return client


#: (configuration key, event loop) -> AsyncSchemaRegistryClient (see async_registry_client)
_async_clients: dict[tuple[tuple[tuple[str, str], ...], asyncio.AbstractEventLoop], Any] = {}


def async_registry_client(conf: Mapping[str, Any]) -> Any:
    """The ``AsyncSchemaRegistryClient`` for ``conf`` in the running event loop: built at
    the first call in that loop (``AsyncSchemaRegistryClient.new_client``: ``mock://``
    gives confluent-kafka's asyncio in-memory registry), the same object for every
    later call with an equal configuration in that loop, from any routed asyncio client.

    One per event loop, not per process as :func:`registry_client`: the asyncio client's
    HTTP connections (httpx) belong to the loop that opened them. An in-memory
    ``mock://`` registry of the asyncio client is therefore another store than the
    blocking client's and than another loop's (a real registry is one server for all).
    Clients of closed loops are forgotten at the next call.

    Args:
        conf: a ``SchemaRegistryClient`` configuration (``url`` required).

    Raises:
        RuntimeError: no running event loop.
        ImportError: confluent-kafka's registry client is not installed (install
            ``kbear[schema-registry]``).
        ValueError, TypeError: confluent-kafka refused ``conf`` (its message).
    """
    loop = asyncio.get_running_loop()
    key = (_config_key(conf), loop)
    with _clients_lock:
        client = _async_clients.get(key)
        if client is None:
            cls = _client_class("AsyncSchemaRegistryClient")
            for stale in [k for k in _async_clients if k[1].is_closed()]:
                del _async_clients[stale]
            client = _async_clients[key] = cls.new_client(dict(conf))
        return client


def clear_registry_clients() -> None:
    """Forget (and close) every registry client :func:`registry_client` built, and forget
    those :func:`async_registry_client` built (their HTTP sessions are closed with their
    loop): the next call builds new ones (tests; an in-memory ``mock://`` registry
    starts empty)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
        _async_clients.clear()
    for client in clients:
        close = getattr(client, "close", None)
        if callable(close):
            close()
