"""The key and value serdes of a routed serializing client, per cluster (private).

One core (:class:`SerdesCore`, no I/O) for the blocking clients
(:class:`ClusterSerdes`: :class:`~kbear.producer.RoutedSerializingProducer`,
:class:`~kbear.consumer.RoutedDeserializingConsumer`, the share consumer's) and
the asyncio ones (:class:`kbear.aio._serdes.AsyncClusterSerdes`): which
serializer (deserializer) a message to (from) a cluster goes through, and the
Kafka cluster id the serdes that ask for it are told. A
:class:`~kbear.schema_registry.PerCluster` factory runs at a cluster's first
message, and confluent-kafka's registry client connects at its first request.

- A serde given as is serves every cluster. When it resolves subject names
  through the Kafka cluster id (``set_cluster_id_resolver``, or
  ``set_async_cluster_id_resolver`` for the asyncio ones: confluent-kafka's
  ``AssociatedNameStrategy``), it is told the id of the cluster of the message
  being handled (the caller sets the serdes' ``current``).
- A :class:`~kbear.schema_registry.PerCluster` is built once per cluster with
  that cluster's registry client (``schema.registry.*`` meta), told that
  cluster's Kafka id; its subject-name cache is therefore the cluster's own.
- Builders (``key.serializer.builder``...) follow confluent-kafka's public
  protocol (``confluent_kafka.serialization.SerializerBuilder.build(conf,
  is_key) -> (serde, leftover conf)``) with its clients' rules: every builder
  gets the whole configuration, the client gets what every builder left, the
  client closes what builders made. Only public confluent-kafka names are used.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from confluent_kafka.error import (
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from kbear.schema_registry import URL, PerCluster, registry_client, registry_config, stale_registries

__all__ = [
    "CLUSTER_ID_TIMEOUT_S",
    "Built",
    "CloseErrors",
    "ClusterSerdes",
    "NoRegistry",
    "SerdeSpec",
    "SerdesCore",
    "client_meta",
    "close_serdes",
    "failed",
    "kafka_cluster_id",
    "open_serdes",
]

log = logging.getLogger("kbear")

#: Seconds a serde waits for a cluster's Kafka id (confluent-kafka's own
#: ``CLUSTER_ID_TIMEOUT``: the Java client's default ``max.block.ms``).
CLUSTER_ID_TIMEOUT_S = 60.0


class SerdeSpec(NamedTuple):
    """What a client's configuration says of one of its serdes."""

    prop: str  # key.serializer, value.deserializer...
    serde: Any  # given ready-made (or None)
    builder: Any  # ``<prop>.builder`` (or None)
    is_key: bool


class Built:
    """The key and value serdes of a client's configuration, given or built (the loop
    that hands :meth:`add` what each builder returned, blocking or awaited, is
    :func:`open_serdes`'s or its asyncio twin's).

    Args:
        config: the application's configuration (anything but a mapping has no serdes:
            it is handed on as is, the routed client's own checks answer it).
        kind: ``"serializer"`` or ``"deserializer"``: the settings are ``key.<kind>``
            and ``value.<kind>``, with their ``.builder`` twins.

    Attributes:
        serdes: the serdes in spec order (None where none is configured).
        owned: those made by builders (the client closes them).

    Raises:
        ValueError: a setting and its ``.builder`` are both given (confluent-kafka's words).
    """

    def __init__(self, config: Any, kind: str) -> None:
        self.serdes: list[Any] = []
        self.owned: list[Any] = []
        key_prop, value_prop = self.props = (f"key.{kind}", f"value.{kind}")
        self._specs: list[SerdeSpec] = []
        self._conf = dict(config) if isinstance(config, Mapping) else config
        for prop, is_key in ((key_prop, True), (value_prop, False)) if isinstance(config, Mapping) else ():
            serde = self._conf.pop(prop, None)
            builder = self._conf.pop(prop + ".builder", None)
            if serde is not None and builder is not None:
                raise ValueError(f"Cannot configure both {prop} and {prop}.builder; use one or the other")
            self._specs.append(SerdeSpec(prop, serde, builder, is_key))
        self._leftovers: list[dict[str, Any]] = []

    def calls(self) -> Iterator[tuple[SerdeSpec, Any]]:
        """(spec, what its builder's ``build`` returned: a pair, or an awaitable of one)
        for each builder in turn, the serdes given as is kept on the way; the caller
        hands each result (awaited) to :meth:`add` before asking for the next."""
        for spec in self._specs:
            if spec.builder is None:
                self.serdes.append(spec.serde)
            else:
                yield spec, spec.builder.build(dict(self._conf), spec.is_key)

    def pair(self) -> tuple[Any, Any]:
        """(key serde, value serde)."""
        return (self.serdes[0], self.serdes[1]) if self.serdes else (None, None)

    def add(self, spec: SerdeSpec, result: Any) -> None:
        """Keep ``result``, what ``spec``'s builder returned.

        Raises:
            ValueError: ``result`` is not ``(serde, dict)`` (confluent-kafka's words).
        """
        try:
            serde, leftover = result
        except (TypeError, ValueError):
            raise ValueError(
                f"{spec.prop}.builder must return a (serde, configuration) tuple from build(), "
                f"got {type(result).__name__}"
            ) from None
        if not isinstance(leftover, dict):
            raise ValueError(
                f"{spec.prop}.builder returned {type(leftover).__name__} as the leftover configuration "
                "from build(), expected a dict"
            )
        self.serdes.append(serde)
        self.owned.append(serde)
        self._leftovers.append(leftover)

    def rest(self) -> Any:
        """The client's configuration: the keys every builder left in place."""
        if not self._leftovers:
            return self._conf
        *others, last = self._leftovers
        return {k: v for k, v in last.items() if all(k in other for other in others)}


class CloseErrors:
    """Close serdes one after another, raising the first error once all were tried
    (later ones logged), as confluent-kafka's clients close theirs."""

    def __init__(self) -> None:
        self.first: BaseException | None = None

    @contextlib.contextmanager
    def closing(self, serde: Any) -> Iterator[None]:
        try:
            yield
        except BaseException as e:
            if self.first is None:
                self.first = e
            else:
                log.warning("kbear: failed to close serde %r", serde, exc_info=True)

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first


def close_serdes(serdes: list[Any]) -> None:
    """Call each serde's ``close()`` (those without one skipped).

    Raises:
        BaseException: the first a ``close()`` raised, after all were tried.
    """
    errors = CloseErrors()
    for serde in serdes:
        close = getattr(serde, "close", None)
        if callable(close):
            with errors.closing(serde):
                close()
    errors.raise_first()


def open_serdes(
    config: Any, kind: str, client: Any, kafka_id: Callable[[str], str]
) -> tuple[ClusterSerdes, Any]:
    """The serdes of a blocking serializing client, and its configuration without them.

    Args:
        config: the application's configuration (anything but a mapping is handed
            back as is: the routed client's own checks answer it).
        kind: ``"serializer"`` or ``"deserializer"`` (as :class:`Built`); the
            ``.builder`` settings are run here.
        client: the routed client being built (:func:`client_meta`).
        kafka_id: as :class:`ClusterSerdes`.

    Raises:
        ValueError: a setting and its ``.builder`` are both given, or a builder
            returned something else than ``(serde, dict)`` (confluent-kafka's words);
            the serdes built before are closed.
    """
    built = Built(config, kind)
    try:
        for spec, result in built.calls():
            built.add(spec, result)
    except BaseException:
        close_serdes(built.owned)
        raise
    return ClusterSerdes(built, meta=client_meta(client), kafka_id=kafka_id), built.rest()


def client_meta(client: Any) -> Callable[[str], Mapping[str, str] | None]:
    """``meta(cluster_id)`` for the serdes of ``client`` (a routed client, held weakly):
    the cluster's ``clusters.yaml`` meta in the configuration in force
    (``client.router.config``, read at each call), None when the cluster is not configured.

    Raises:
        RuntimeError: (at a call) the routed client is gone.
    """
    ref = weakref.ref(client)

    def meta(cluster_id: str) -> Mapping[str, str] | None:
        owner = ref()
        if owner is None:
            raise RuntimeError("the routed client is gone")
        cluster = owner.router.config.clusters.get(cluster_id)
        return None if cluster is None else cluster.meta

    return meta


def failed(is_key: bool, exc: Exception, message: Any) -> Exception:
    """The error confluent-kafka's clients raise when a key (``is_key``) or value
    serde raised ``exc``: ``Key``/``ValueSerializationError`` when serializing
    (``message`` None), ``Key``/``ValueDeserializationError`` holding ``message``
    (the message read) when deserializing."""
    if message is None:
        return KeySerializationError(exc) if is_key else ValueSerializationError(exc)
    error = KeyDeserializationError if is_key else ValueDeserializationError
    return error(exception=exc, kafka_message=message)


def kafka_cluster_id(client: Any, cluster_id: str) -> str:
    """The Kafka cluster id (KIP-78) of ``client``, cluster ``cluster_id``'s
    confluent-kafka client (blocks up to :data:`CLUSTER_ID_TIMEOUT_S`).

    Raises:
        SerializationError: ``client`` is None (no client of that cluster yet).
    """
    if client is None:
        raise SerializationError(f"kbear: cluster {cluster_id!r} has no client yet")
    return str(client.cluster_id(timeout=CLUSTER_ID_TIMEOUT_S))


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


class SerdesCore:
    """Which key and value serde a message of each cluster goes through: what the
    blocking and asyncio serdes share (no I/O, no lock; the subclasses build the
    ``per_cluster`` serdes, blocking or awaiting, and say how a serde is told the
    cluster id).

    Args:
        built: the configured serdes (a callable, a serde object, a
            :class:`~kbear.schema_registry.PerCluster`, or None), their settings'
            names (for error messages) and those its builders made (closed with the
            factories').
        meta: ``meta(cluster_id)``: the cluster's ``clusters.yaml`` meta in force,
            None when the cluster is not (or no longer) configured.

    Attributes:
        tracks_cluster: a serde given as is asks for the Kafka cluster id.
        varies: a message's bytes may differ by cluster (a ``per_cluster`` serde, or
            one told the Kafka cluster id).
        pairs: cluster id -> (key serde, value serde) built so far (read per
            message; ``get`` builds a missing one).
    """

    #: the method through which a serde takes a cluster id resolver (confluent-kafka's)
    RESOLVER_SETTER = "set_cluster_id_resolver"
    #: ``_kafka_id(cluster_id)``: that cluster's Kafka id (a coroutine for the asyncio serdes)
    _kafka_id: Callable[[str], Any]

    def __init__(self, built: Built, meta: Callable[[str], Mapping[str, str] | None]) -> None:
        #: (key serde, value serde) as configured or built by builders
        self.configured = built.pair()
        self._specs = tuple(zip(self.configured, built.props, strict=True))
        self._meta = meta
        self._owned = built.owned
        self.pairs: dict[str, tuple[Any, Any]] = {}
        self._confs: dict[str, dict[str, Any] | None] = {}
        self._built: list[Any] = []
        self._generation = 0  # reloads seen (refresh)
        self.tracks_cluster = False
        for serde, _ in self._specs:
            if serde is not None and not isinstance(serde, PerCluster) and self._offer(serde, None):
                self.tracks_cluster = True
        self.varies = self.tracks_cluster or any(isinstance(s, PerCluster) for s, _ in self._specs)

    def _plan(
        self, cluster_id: str
    ) -> tuple[int, dict[str, Any] | None, list[tuple[Any, dict[str, Any] | None]]]:
        """(reloads seen, the cluster's registry settings, [(serde, None), or
        (a ``per_cluster``, the registry settings its factory's client is made of)] for
        key and value)."""
        conf = registry_config(self._meta(cluster_id))
        plan: list[tuple[Any, dict[str, Any] | None]] = []
        for serde, prop in self._specs:
            if not isinstance(serde, PerCluster):
                plan.append((serde, None))
            elif conf is None:
                fallback = serde.default if serde.default is not None else NoRegistry(cluster_id, prop)
                plan.append((fallback, None))
            else:
                plan.append((serde, conf))
        return self._generation, conf, plan

    def _made(self, built: Any, cluster_id: str) -> Any:
        """``built``, what a ``per_cluster`` factory made for ``cluster_id``: closed by
        :meth:`_release`'s caller, told the cluster's Kafka id."""
        self._built.append(built)
        self._offer(built, cluster_id)
        return built

    def _keep(
        self, cluster_id: str, generation: int, conf: dict[str, Any] | None, pair: tuple[Any, Any]
    ) -> tuple[Any, Any]:
        """``pair``, kept as ``cluster_id``'s unless a reload changed its registry meanwhile."""
        if generation != self._generation and registry_config(self._meta(cluster_id)) != conf:
            return pair
        self._confs[cluster_id] = conf
        self.pairs[cluster_id] = pair
        return pair

    def refresh(self) -> None:
        """After a reload (in the reloading thread): forget the serdes of clusters whose
        registry settings changed (rebuilt at their next message); a cluster gone from
        ``clusters.yaml`` keeps its serdes (its messages may still be in flight).
        Only dictionary entries are dropped (atomic); a ``get`` building meanwhile
        does not keep what it built with the old settings."""
        self._generation += 1
        for cluster_id in stale_registries(self._confs, self._meta):
            self._confs.pop(cluster_id, None)
            self.pairs.pop(cluster_id, None)

    def _release(self) -> tuple[list[Any], list[Any]]:
        """(serdes the factories made, serdes the builders made), each handed out once."""
        built, self._built = self._built, []
        owned, self._owned = self._owned, []
        self.pairs.clear()
        self._confs.clear()
        return built, owned

    def _offer(self, serde: Any, cluster_id: str | None) -> bool:
        """Hand ``serde`` the resolver of ``cluster_id``'s Kafka id (None: of the cluster
        of the message being handled) when it takes one (:attr:`RESOLVER_SETTER`)."""
        setter = getattr(serde, self.RESOLVER_SETTER, None)
        if callable(setter):
            setter(self._current_id if cluster_id is None else functools.partial(self._kafka_id, cluster_id))
            return True
        return False

    def _current_id(self) -> Any:
        raise NotImplementedError


class ClusterSerdes(SerdesCore):
    """:class:`SerdesCore` for the blocking clients (any thread).

    Args:
        built, meta: as :class:`SerdesCore`.
        kafka_id: ``kafka_id(cluster_id)``: that cluster's Kafka cluster id (KIP-78;
            :func:`kafka_cluster_id` of its client).

    Attributes:
        current: a thread-local; ``current.cluster`` is the cluster of the message
            being (de)serialized, set by the caller when ``tracks_cluster``.
    """

    def __init__(
        self,
        built: Built,
        *,
        meta: Callable[[str], Mapping[str, str] | None],
        kafka_id: Callable[[str], str],
    ) -> None:
        self._kafka_id = kafka_id
        self._lock = threading.Lock()
        self.current = threading.local()
        super().__init__(built, meta)

    def get(self, cluster_id: str) -> tuple[Any, Any]:
        """(key serde, value serde) of ``cluster_id``, built at its first use.

        Raises:
            Exception: what a ``per_cluster`` factory or confluent-kafka's registry
                client raised (the routed client wraps it as a (de)serialization error).
        """
        pair = self.pairs.get(cluster_id)
        if pair is not None:
            return pair
        with self._lock:
            pair = self.pairs.get(cluster_id)
            if pair is not None:
                return pair
            generation, conf, plan = self._plan(cluster_id)
            key, value = (
                serde
                if registry is None
                else self._made(serde.factory(registry_client(registry)), cluster_id)
                for serde, registry in plan
            )
            return self._keep(cluster_id, generation, conf, (key, value))

    def apply(
        self, cluster_id: str, topic: str, headers: Any, key: Any, value: Any, message: Any = None
    ) -> tuple[Any, Any]:
        """(key, value) through the serdes of ``cluster_id`` (those without a serde as
        they are), key first, as confluent-kafka's ``SerializingProducer``
        (``message`` None) and ``DeserializingConsumer`` (``message``: the message
        read) do; the ``SerializationContext`` carries ``topic`` and ``headers``.

        Raises:
            KeySerializationError, ValueSerializationError, KeyDeserializationError,
                ValueDeserializationError: a serde failed (:func:`failed`).
            Exception: as :meth:`get`.
        """
        key_serde, value_serde = self.pairs.get(cluster_id) or self.get(cluster_id)
        if self.tracks_cluster:
            self.current.cluster = cluster_id
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        try:
            if key_serde is not None:
                key = key_serde(key, ctx)
        except Exception as exc:
            raise failed(True, exc, message) from exc
        ctx.field = MessageField.VALUE
        try:
            if value_serde is not None:
                value = value_serde(value, ctx)
        except Exception as exc:
            raise failed(False, exc, message) from exc
        return key, value

    def close(self) -> None:
        """Close the serdes the factories and the builders made, each once (registry
        clients are the process's, see :func:`~kbear.schema_registry.registry_client`;
        serdes given ready-made stay the application's)."""
        with self._lock:
            built, owned = self._release()
        try:
            close_serdes(built)
        finally:
            close_serdes(owned)

    def _current_id(self) -> str:
        cluster_id = getattr(self.current, "cluster", None)
        if cluster_id is None:
            raise SerializationError("kbear: no message being handled in this thread")
        return str(self._kafka_id(cluster_id))
