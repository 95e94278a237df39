"""The key and value serdes of a routed asyncio serializing client, per cluster (no I/O of its own).

The asyncio counterpart of :class:`kbear._serdes.ClusterSerdes`, for
:class:`~kbear.aio.RoutedAsyncSerializingProducer` and
:class:`~kbear.aio.RoutedAsyncDeserializingConsumer`:

- a serde given as is serves every cluster; confluent-kafka's asyncio serdes
  that resolve subject names through the Kafka cluster id
  (``set_async_cluster_id_resolver``) are told the id of the cluster of the
  message being handled (:attr:`AsyncClusterSerdes.current`, a context variable:
  each task its own);
- a :class:`~kbear.schema_registry.PerCluster` factory is called once per cluster
  with that cluster's ``AsyncSchemaRegistryClient``
  (:func:`~kbear.schema_registry.async_registry_client`), and what it returns is
  awaited when awaitable (``AsyncAvroSerializer(...)`` is); the serde built is
  told its own cluster's Kafka id;
- the builders (``*.serializer.builder``) are run by confluent-kafka's own code
  (``confluent_kafka._serde_builder.async_build_serdes``), as its asyncio clients do.

Everything here runs on the event loop; the Kafka cluster id comes from
``kafka_id(cluster_id)``, a coroutine the client runs in its executor.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from confluent_kafka._serde_builder import (
    async_build_serdes,
    async_close_serdes,
    maybe_await,
    pop_serde_props,
)
from confluent_kafka.serialization import SerializationError

from kbear._serdes import NoRegistry, cluster_meta
from kbear.config import KBearConfig
from kbear.schema_registry import PerCluster, async_registry_client, registry_config, stale_registries

__all__ = ["AsyncClusterSerdes", "open_serdes"]


async def open_serdes(
    conf: Any,
    key_prop: str,
    value_prop: str,
    *,
    config: Callable[[], KBearConfig],
    kafka_id: Callable[[str], Awaitable[str]],
) -> tuple[AsyncClusterSerdes, Any]:
    """The serdes of an asyncio serializing client, and its configuration without them.

    Args:
        conf: the application's configuration (anything but a mapping is handed back
            as is: the routed client's own checks answer it).
        key_prop, value_prop: ``key.serializer`` / ``value.serializer`` (or the
            deserializers); their ``.builder`` twins are run here (awaited).
        config: the configuration in force (the router's, read at each use).
        kafka_id: as :class:`AsyncClusterSerdes`.

    Raises:
        ValueError: a setting and its ``.builder`` are both given, or a builder
            returned something else than ``(serde, dict)`` (confluent-kafka's words).
    """
    key = value = None
    owned: list[Any] = []
    rest = conf
    if isinstance(conf, Mapping):
        specs, rest = pop_serde_props(dict(conf), key_prop, value_prop)
        (key, value), owned, rest = await async_build_serdes(specs, rest)
    serdes = AsyncClusterSerdes(
        key, value, key_prop, value_prop, meta=cluster_meta(config), kafka_id=kafka_id, owned=owned
    )
    return serdes, rest


class AsyncClusterSerdes:
    """Which key and value serde a message of each cluster goes through (asyncio).

    Args:
        key, value: the configured serdes (a callable, an asyncio serde, a
            :class:`~kbear.schema_registry.PerCluster`, or None).
        key_prop, value_prop: their settings' names (for error messages).
        meta: ``meta(cluster_id)``: the cluster's ``clusters.yaml`` meta in force,
            None when the cluster is not (or no longer) configured.
        kafka_id: ``await kafka_id(cluster_id)``: that cluster's Kafka cluster id.
        owned: serdes the client's builders made (closed by :meth:`close`).

    Attributes:
        current: the cluster of the message being (de)serialized in this task, set
            by the caller when :attr:`tracks_cluster`.
        tracks_cluster: a serde given as is asks for the Kafka cluster id.
        varies: the bytes of a message depend on its cluster.
        pairs: cluster id -> (key serde, value serde) built so far (:meth:`get`
            builds a missing one).
    """

    def __init__(
        self,
        key: Any,
        value: Any,
        key_prop: str,
        value_prop: str,
        *,
        meta: Callable[[str], Mapping[str, str] | None],
        kafka_id: Callable[[str], Awaitable[str]],
        owned: list[Any] | None = None,
    ) -> None:
        self._owned = [] if owned is None else owned
        self._specs = ((key, key_prop), (value, value_prop))
        self._meta = meta
        self._kafka_id = kafka_id
        self.pairs: dict[str, tuple[Any, Any]] = {}
        self._confs: dict[str, dict[str, Any] | None] = {}
        self._built: list[Any] = []
        self._lock = asyncio.Lock()
        self._generation = 0  # reloads seen (refresh)
        self.current: contextvars.ContextVar[str | None] = contextvars.ContextVar("kbear_serde_cluster")
        self.tracks_cluster = False
        for serde, _ in self._specs:
            if serde is not None and not isinstance(serde, PerCluster) and _offer(serde, self._current_id):
                self.tracks_cluster = True
        #: a message's bytes may differ by cluster (a ``per_cluster`` serde, or one
        #: told the Kafka cluster id): a message moved to another cluster is
        #: serialized again; otherwise the bytes serve every cluster
        self.varies = self.tracks_cluster or any(isinstance(s, PerCluster) for s, _ in self._specs)

    async def get(self, cluster_id: str) -> tuple[Any, Any]:
        """(key serde, value serde) of ``cluster_id``, built at its first use.

        Raises:
            Exception: what a ``per_cluster`` factory or confluent-kafka's registry
                client raised (the routed client wraps it as a (de)serialization error).
        """
        pair = self.pairs.get(cluster_id)
        if pair is not None:
            return pair
        async with self._lock:
            pair = self.pairs.get(cluster_id)
            if pair is not None:
                return pair
            generation = self._generation
            conf = registry_config(self._meta(cluster_id))
            key = await self._one(*self._specs[0], cluster_id, conf)
            value = await self._one(*self._specs[1], cluster_id, conf)
            pair = (key, value)
            if generation != self._generation and registry_config(self._meta(cluster_id)) != conf:
                return pair  # a reload changed the registry meanwhile: not kept
            self._confs[cluster_id] = conf
            self.pairs[cluster_id] = pair
            return pair

    async def _one(self, serde: Any, prop: str, cluster_id: str, conf: dict[str, Any] | None) -> Any:
        if not isinstance(serde, PerCluster):
            return serde
        if conf is None:
            return serde.default if serde.default is not None else NoRegistry(cluster_id, prop)
        built = await maybe_await(serde.factory(async_registry_client(conf)))
        self._built.append(built)
        _offer(built, self._resolver(cluster_id))
        return built

    def refresh(self) -> None:
        """After a reload (in the reloading thread): forget the serdes of clusters whose
        registry settings changed (rebuilt at their next message); a cluster gone from
        ``clusters.yaml`` keeps its serdes (its messages may still be in flight).
        Only dictionary entries are dropped (atomic); a :meth:`get` building meanwhile
        does not keep what it built with the old settings."""
        self._generation += 1
        for cluster_id in stale_registries(self._confs, self._meta):
            self._confs.pop(cluster_id, None)
            self.pairs.pop(cluster_id, None)

    async def close(self) -> None:
        """Close the serdes the factories and the builders made, each once (registry
        clients are shared, see :func:`~kbear.schema_registry.async_registry_client`;
        serdes given ready-made stay the application's)."""
        built, self._built = self._built, []
        owned, self._owned = self._owned, []
        self.pairs.clear()
        self._confs.clear()
        try:
            await async_close_serdes(built)
        finally:
            await async_close_serdes(owned)

    def _resolver(self, cluster_id: str) -> Callable[[], Awaitable[str]]:
        async def kafka_cluster_id() -> str:
            return await self._kafka_id(cluster_id)

        return kafka_cluster_id

    async def _current_id(self) -> str:
        cluster_id = self.current.get(None)
        if cluster_id is None:
            raise SerializationError("kbear: no message being handled in this task")
        return await self._kafka_id(cluster_id)


def _offer(serde: Any, resolver: Callable[[], Awaitable[str]]) -> bool:
    """Hand ``resolver`` to an asyncio serde that takes one (``set_async_cluster_id_resolver``;
    blocking serdes get none, as with confluent-kafka's asyncio clients)."""
    setter = getattr(serde, "set_async_cluster_id_resolver", None)
    if callable(setter):
        setter(resolver)
        return True
    return False
