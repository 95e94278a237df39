"""The key and value serdes of a routed serializing client, per cluster (private).

Shared by :class:`~kbear.producer.RoutedSerializingProducer` and
:class:`~kbear.consumer.RoutedDeserializingConsumer` (and any asyncio twin):
which serializer (deserializer) a message to (from) a cluster goes through, and
the Kafka cluster id the serdes that ask for it are told. No I/O here: a
:class:`~kbear.schema_registry.PerCluster` factory runs at a cluster's first
message, and confluent-kafka's registry client connects at its first request.

- A serde given as is serves every cluster. When it resolves subject names
  through the Kafka cluster id (``set_cluster_id_resolver``: confluent-kafka's
  ``AssociatedNameStrategy``), it is told the id of the cluster of the message
  being handled (the caller sets :attr:`ClusterSerdes.current`).
- A :class:`~kbear.schema_registry.PerCluster` is built once per cluster with
  that cluster's registry client (``schema.registry.*`` meta), told that
  cluster's Kafka id; its subject-name cache is therefore the cluster's own.
- Builders (``key.serializer.builder``...) are run by confluent-kafka's own code
  (``confluent_kafka._serde_builder``), as its clients do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka._serde_builder import build_serdes, close_serdes, pop_serde_props
from confluent_kafka.serialization import SerializationError

from kbear.schema_registry import URL, PerCluster, registry_client, registry_config, stale_registries

__all__ = ["ClusterSerdes", "NoRegistry", "cluster_meta", "split_serdes"]

#: Seconds a serde waits for a cluster's Kafka id (confluent-kafka's own CLUSTER_ID_TIMEOUT).
CLUSTER_ID_TIMEOUT_S = 60.0


def split_serdes(
    config: Mapping[str, Any] | None, key_prop: str, value_prop: str
) -> tuple[Any, Any, list[Any], Mapping[str, Any] | None]:
    """Take the serde settings out of a routed client's configuration.

    Args:
        config: the application's configuration (anything but a mapping is handed
            back as is: the routed client's own checks answer it).
        key_prop, value_prop: ``key.serializer`` / ``value.serializer`` (or the
            deserializers); their ``.builder`` twins are run here.

    Returns:
        (key serde, value serde, the serdes built here (the client closes them),
        the configuration without the serde settings).

    Raises:
        ValueError: a setting and its ``.builder`` are both given, or a builder
            returned something else than ``(serde, dict)`` (confluent-kafka's words).
    """
    if not isinstance(config, Mapping):
        return None, None, [], config
    specs, rest = pop_serde_props(dict(config), key_prop, value_prop)
    serdes, owned, rest = build_serdes(specs, rest)
    return serdes[0], serdes[1], owned, rest


def cluster_meta(config: Callable[[], Any]) -> Callable[[str], Mapping[str, str] | None]:
    """``meta(cluster_id)`` for :class:`ClusterSerdes`: the cluster's ``clusters.yaml``
    meta in the configuration ``config()`` returns (a router's, read at each call),
    None when the cluster is not configured."""

    def meta(cluster_id: str) -> Mapping[str, str] | None:
        cluster = config().clusters.get(cluster_id)
        return None if cluster is None else cluster.meta

    return meta


class NoRegistry:
    """The serde of a cluster without ``schema.registry.url`` for a ``per_cluster``
    setting without ``default``: every call fails naming the cluster and the setting."""

    __slots__ = ("cluster_id", "setting")

    def __init__(self, cluster_id: str, setting: str) -> None:
        self.cluster_id = cluster_id
        self.setting = setting

    def __call__(self, data: Any, ctx: Any = None) -> Any:
        raise SerializationError(
            f"kbear: cluster {self.cluster_id!r} has no {URL} in clusters.yaml, and {self.setting} "
            "is per_cluster(...) without default="
        )


class ClusterSerdes:
    """Which key and value serde a message of each cluster goes through.

    Args:
        key, value: the configured serdes (a callable, a
            :class:`~kbear.schema_registry.PerCluster`, or None).
        key_prop, value_prop: their settings' names (for error messages).
        meta: ``meta(cluster_id)``: the cluster's ``clusters.yaml`` meta in force,
            None when the cluster is not (or no longer) configured.
        cluster_client: ``cluster_client(cluster_id)``: that cluster's
            confluent-kafka client (its ``cluster_id(timeout)`` answers the Kafka
            cluster id), None when not built.

    Attributes:
        current: a thread-local; ``current.cluster`` is the cluster of the message
            being (de)serialized, set by the caller when :attr:`tracks_cluster`.
        tracks_cluster: a serde given as is asks for the Kafka cluster id.
        pairs: cluster id -> (key serde, value serde) built so far (read per
            message without a lock; :meth:`get` builds a missing one).
    """

    def __init__(
        self,
        key: Any,
        value: Any,
        key_prop: str,
        value_prop: str,
        *,
        meta: Callable[[str], Mapping[str, str] | None],
        cluster_client: Callable[[str], Any],
    ) -> None:
        self._specs = ((key, key_prop), (value, value_prop))
        self._meta = meta
        self._cluster_client = cluster_client
        self.pairs: dict[str, tuple[Any, Any]] = {}
        self._confs: dict[str, dict[str, Any] | None] = {}
        self._built: list[Any] = []
        self._lock = threading.Lock()
        self.current = threading.local()
        self.tracks_cluster = False
        for serde, _ in self._specs:
            if serde is not None and not isinstance(serde, PerCluster) and _offer(serde, self._current_id):
                self.tracks_cluster = True

    def get(self, cluster_id: str) -> tuple[Any, Any]:
        """(key serde, value serde) of ``cluster_id``, built at its first use.

        Raises:
            Exception: what a ``per_cluster`` factory or confluent-kafka's registry
                client raised (the routed client wraps it as a (de)serialization error).
        """
        pair = self.pairs.get(cluster_id)
        if pair is None:
            pair = self._build(cluster_id)
        return pair

    def _build(self, cluster_id: str) -> tuple[Any, Any]:
        with self._lock:
            pair = self.pairs.get(cluster_id)
            if pair is not None:
                return pair
            conf = registry_config(self._meta(cluster_id))
            key, value = (self._one(serde, prop, cluster_id, conf) for serde, prop in self._specs)
            self._confs[cluster_id] = conf
            pair = self.pairs[cluster_id] = (key, value)
            return pair

    def _one(self, serde: Any, prop: str, cluster_id: str, conf: dict[str, Any] | None) -> Any:
        if not isinstance(serde, PerCluster):
            return serde
        if conf is None:
            return serde.default if serde.default is not None else NoRegistry(cluster_id, prop)
        built = serde.factory(registry_client(conf))
        self._built.append(built)
        _offer(built, self._resolver(cluster_id))
        return built

    def refresh(self) -> None:
        """After a reload: forget the serdes of clusters whose registry settings
        changed (rebuilt at their next message). A cluster gone from
        ``clusters.yaml`` keeps its serdes: messages read from it may still arrive."""
        with self._lock:
            for cluster_id in stale_registries(self._confs, self._meta):
                del self._confs[cluster_id]
                self.pairs.pop(cluster_id, None)

    def close(self) -> None:
        """Close the serdes the factories built (each once; registry clients are the
        process's, see :func:`~kbear.schema_registry.registry_client`)."""
        with self._lock:
            built, self._built = self._built, []
            self.pairs.clear()
            self._confs.clear()
        close_serdes(built)

    def _resolver(self, cluster_id: str) -> Callable[[], str]:
        def kafka_cluster_id() -> str:
            client = self._cluster_client(cluster_id)
            if client is None:
                raise SerializationError(f"kbear: cluster {cluster_id!r} has no client yet")
            return str(client.cluster_id(timeout=CLUSTER_ID_TIMEOUT_S))

        return kafka_cluster_id

    def _current_id(self) -> str:
        cluster_id = getattr(self.current, "cluster", None)
        if cluster_id is None:
            raise SerializationError("kbear: no message being handled in this thread")
        return self._resolver(cluster_id)()


def _offer(serde: Any, resolver: Callable[[], str]) -> bool:
    """Hand ``resolver`` to a serde that takes one (``set_cluster_id_resolver``)."""
    setter = getattr(serde, "set_cluster_id_resolver", None)
    if callable(setter):
        setter(resolver)
        return True
    return False


def close_owned(serdes: list[Any]) -> None:
    """Close the serdes a client's builders made (confluent-kafka's ``close_serdes``)."""
    close_serdes(serdes)
