"""Shared plumbing of the routed clients (private).

- the per-cluster client registry (:class:`ClientRegistry`) and the factory that
  builds confluent-kafka's clients (:data:`ClientFactory`; tests and
  :mod:`kbear.testing` put theirs in with :func:`mount`);
- merging a cluster's properties into the configuration of its client;
- proving from the configuration alone that a client uses one cluster only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kbear import _events
from kbear._identity import Client
from kbear._standby import standby_cluster
from kbear.config import ClusterConfig, KBearConfig, RuleKind


@dataclass(frozen=True)
class ClusterTarget:
    """A whole cluster rather than a topic on it: what a client needs to be built
    for that cluster.

    Attributes:
        cluster_id: the cluster id (clusters.yaml).
        properties: the cluster's librdkafka client properties (clusters.yaml
            ``meta``, including ``bootstrap.servers``).
    """

    cluster_id: str
    properties: Mapping[str, str] = field(repr=False)


def cluster_target(cluster_id: str, cluster: ClusterConfig) -> ClusterTarget:
    """The :class:`ClusterTarget` of ``cluster`` (clusters.yaml entry ``cluster_id``)."""
    return ClusterTarget(cluster_id, cluster.client_properties)


def cluster_config(native: Mapping[str, Any], properties: Mapping[str, str]) -> dict[str, Any]:
    """The configuration of one cluster's client: the application's keys, then the
    cluster's properties from ``clusters.yaml`` (which win: they are the cluster's own
    connection and security settings)."""
    return {**native, **properties}


def renamed(tp: TopicPartition, topic: str) -> TopicPartition:
    """A copy of ``tp`` under another topic name (TopicPartition is immutable and
    takes neither ``metadata=None`` nor ``leader_epoch=None``)."""
    extra: dict[str, Any] = {}
    if tp.metadata is not None:
        extra["metadata"] = tp.metadata
    if tp.leader_epoch is not None:
        extra["leader_epoch"] = tp.leader_epoch
    return TopicPartition(topic, tp.partition, tp.offset, **extra)


class Deadline:
    """A timeout in seconds as confluent-kafka takes it (None or negative: infinite)."""

    __slots__ = ("end",)

    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None or timeout < 0 else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (>= 0), or None for infinite."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def as_arg(self) -> float:
        """Remaining time as a confluent-kafka timeout argument (-1 = infinite)."""
        left = self.remaining()
        return -1 if left is None else left


def poll_clients(clients: list[Any], timeout: float | None) -> int:
    """Serve the callbacks of several confluent-kafka clients: with one, its own
    ``poll(timeout)``; with more, each in turn without waiting, then in slices of
    10 ms until one serves something or ``timeout`` (seconds; None or negative:
    infinite) ends. Returns the number of events served."""
    if len(clients) == 1:
        return int(clients[0].poll(-1 if timeout is None else timeout))
    served = sum(int(c.poll(0)) for c in clients)
    deadline = Deadline(timeout)
    while not served and clients and not deadline.expired():
        left = deadline.remaining()
        slice_s = 0.01 if left is None else min(0.01, left)
        served = sum(int(c.poll(slice_s)) for c in clients)
    return served


def single_cluster(config: KBearConfig, client: Client, group: str | None = None) -> str | None:
    """The cluster every lookup of ``client`` yields, for any topic, without a remap;
    None when the configuration does not prove there is one.

    Args:
        config: the configuration in force.
        client: who asks (its ``client.*`` factors).
        group: the consumer group of a consumer lookup; None for producer lookups.

    Proof: every rule that can match (its ``client.*`` conditions hold; other
    conditions are unknown; consumer-group rules only of ``group``) names the same
    cluster without ``, topic``, and some global rule surely matches (all its
    conditions are ``client.*`` conditions that hold), so no lookup ends in
    NoRouteError (CRRL spec, "Kinds of rule"). A cluster failed over
    (``kbear.failover.active``) gives way to its standby, as lookups do.
    """
    factors = client.factors()
    cluster: str | None = None
    sure = False
    for rule in config.rules:
        if rule.kind is RuleKind.CONSUMER_GROUP and (
            group is None or rule.meta.get("consumerGroup.groupName") != group
        ):
            continue  # another group's rule, or a producer lookup
        conds = rule.statement.conditions
        if any(c.key.startswith("client.") and factors.get(c.key) != c.value for c in conds):
            continue  # never matches this client
        if rule.statement.topic is not None:
            return None
        if cluster is None:
            cluster = rule.statement.cluster
        elif cluster != rule.statement.cluster:
            return None
        if rule.kind is RuleKind.GLOBAL and all(c.key.startswith("client.") for c in conds):
            sure = True
    if not sure or cluster is None:
        return None
    # a cluster failed over in clusters.yaml (kbear failover): every lookup yields its standby
    failed = {c.id for c in config.clusters.values() if c.failover.active}
    return (standby_cluster(config, cluster, failed) or cluster) if failed else cluster


# ---------------------------------------------------------------------- the client registry

#: The kinds of confluent-kafka client a routed client builds per cluster.
ClientKind = Literal["producer", "consumer", "admin", "share_consumer"]


class ClientFactory(Protocol):
    """Builds the confluent-kafka client of one cluster (the shape of httpx's transports).

    Called as ``factory(kind, cluster_id, config)``: ``kind`` is ``"producer"``,
    ``"consumer"``, ``"admin"`` or ``"share_consumer"``, ``cluster_id`` the cluster's id in
    clusters.yaml, ``config`` the client's full librdkafka configuration (the
    application's keys with the cluster's properties merged over them, including
    ``bootstrap.servers``). Returns an object with the methods of
    ``confluent_kafka.Producer``, ``Consumer``, ``admin.AdminClient`` or
    ``ShareConsumer`` respectively. Exceptions propagate to the routed client's call.
    """

    def __call__(self, kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any: ...


def confluent_client(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
    """The default :class:`ClientFactory`: confluent-kafka's own client of ``kind``.

    Raises:
        KafkaException: confluent-kafka refused ``config``.
        ValueError: an unknown ``kind``.
    """
    classes = dict(producer=Producer, consumer=Consumer, admin=AdminClient, share_consumer=ShareConsumer)
    if kind not in classes:
        raise ValueError(f"unknown client kind {kind!r}")
    return classes[kind](config)


class DebugLog:
    """A confluent-kafka ``logger`` (its ``logger`` configuration key) that passes
    librdkafka's own log lines to the Python logger ``kbear.librdkafka`` at DEBUG
    level, whatever their syslog level, instead of librdkafka's default of printing
    each on stderr (a cluster that does not answer: a ``FAIL`` line every few tens
    of milliseconds). confluent-kafka hands them over when the client is polled.
    """

    def __init__(self) -> None:
        self._logger = logging.getLogger("kbear.librdkafka")

    def log(self, level: int, msg: str, *args: Any) -> None:
        """Called by confluent-kafka with a ``logging`` level and ``%``-style arguments."""
        self._logger.debug(msg, *args)


def quieted(factory: ClientFactory) -> ClientFactory:
    """``factory`` (a :class:`ClientFactory`) giving its clients librdkafka's log lines
    at DEBUG level (:class:`DebugLog`) unless their ``config`` has a ``logger`` of its
    own: what the ``kbear`` commands that talk to clusters mount over the mounted
    factory, so that a cluster that does not answer is said once, by name, not in
    librdkafka's lines."""

    def build(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
        return factory(kind, cluster_id, {"logger": DebugLog(), **config})

    return build


_mounted: list[ClientFactory] = []
_mounted_lock = threading.Lock()


@contextmanager
def mount(factory: ClientFactory) -> Iterator[ClientFactory]:
    """Build the clients of routed clients created inside the ``with`` block with
    ``factory`` (process-wide; the innermost mount wins), as httpx mounts a
    transport. A routed client keeps the factory it was created with."""
    with _mounted_lock:
        _mounted.append(factory)
    try:
        yield factory
    finally:
        with _mounted_lock:
            _mounted.remove(factory)


def current_factory() -> ClientFactory:
    """The innermost mounted factory, else :func:`confluent_client`."""
    with _mounted_lock:
        return _mounted[-1] if _mounted else confluent_client


class Target(Protocol):
    """What a cluster's client is built for: a :class:`~kbear.Route` or a :class:`ClusterTarget`."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, str]: ...


class ClusterEntry:
    """One cluster's client in a :class:`ClientRegistry`.

    Attributes:
        cluster_id: the cluster's id (clusters.yaml).
        properties: the cluster properties the client was built with.
        client: the confluent-kafka client (or what the factory built).
        retired_at: the registry generation that retired it (0 while in use).
    """

    __slots__ = ("client", "cluster_id", "properties", "retired_at")

    def __init__(self, cluster_id: str, properties: Mapping[str, str], client: Any) -> None:
        self.cluster_id = cluster_id
        self.properties = dict(properties)
        self.client = client
        self.retired_at = 0


E = TypeVar("E", bound=ClusterEntry)


class ClientRegistry(Generic[E]):
    """One client per cluster for one routed client, built on first use by a factory.

    Responsible for: merging the cluster's properties over the application's
    configuration (:func:`cluster_config`), letting the process's configurers
    (:func:`kbear._events.configure`) and the routed client's ``prepare`` hook
    (callbacks bound to that client) see the configuration, building the client
    through the :class:`ClientFactory`, rebuilding it when the cluster's
    properties change, and keeping replaced clients (``retired``) until the
    routed client lets them go: a message, a future or a revocation may still be
    pending on them.

    Args:
        kind: ``"producer"``, ``"consumer"``, ``"admin"`` or ``"share_consumer"``.
        native: the application's confluent-kafka configuration, without kbear
            keys (read at each build: credentials set later reach later clients).
        entry: wraps a new client: ``entry(cluster_id, properties, client, prepared)``
            where ``prepared`` is what ``prepare`` returned.
        prepare: called as ``prepare(cluster_id, config)`` before the build; may
            change ``config`` in place and returns a value handed to ``entry``.
        factory: builds the client; default: the mounted one (:func:`mount`),
            else confluent-kafka's.
        observed: hand each configuration to the process's configurers
            (``kbear.metrics`` adds its statistics callback there); False for
            admin clients, which send and read no messages.
        stats_interval_ms: ``statistics.interval.ms`` kbear itself needs from each
            client (ms; the failover watch), combined with the configurers' by
            :func:`kbear._events.configure`; None: none.
    """

    def __init__(
        self,
        kind: ClientKind,
        native: dict[str, Any],
        entry: Callable[[str, Mapping[str, str], Any, Any], E],
        prepare: Callable[[str, dict[str, Any]], Any] | None = None,
        factory: ClientFactory | None = None,
        observed: bool = True,
        stats_interval_ms: int | None = None,
    ) -> None:
        self.kind: ClientKind = kind
        self._observed = observed
        self._stats_interval_ms = stats_interval_ms
        self.native = native
        self._entry = entry
        self._prepare = prepare
        self.factory: ClientFactory = factory if factory is not None else current_factory()
        self._clients: dict[str, E] = {}
        self._retired: list[E] = []
        #: bumped by :meth:`next_generation` (a routed client's reload)
        self.generation = 0

    def get(self, cluster_id: str) -> E | None:
        """The client of ``cluster_id`` in use, if one was built."""
        return self._clients.get(cluster_id)

    def __contains__(self, cluster_id: object) -> bool:
        return cluster_id in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    def items(self) -> list[tuple[str, E]]:
        """(cluster id, entry) of the clients in use."""
        return list(self._clients.items())

    def retired(self) -> list[E]:
        """Clients replaced or of clusters gone, not yet released."""
        return list(self._retired)

    def all(self) -> list[E]:
        """The clients in use, then the retired ones."""
        return [*self._clients.values(), *self._retired]

    def client(self, target: Target) -> E:
        """The client of ``target``'s cluster: the one in use when its properties are
        ``target.properties``, else a new one (the old one retired)."""
        current = self._clients.get(target.cluster_id)
        if current is not None and current.properties == dict(target.properties):
            return current
        if current is not None:
            self._retire(current)
        conf = cluster_config(self.native, target.properties)
        if self._observed:
            _events.configure(self.kind, target.cluster_id, conf, self._stats_interval_ms)
        prepared = self._prepare(target.cluster_id, conf) if self._prepare is not None else None
        built = self.factory(self.kind, target.cluster_id, conf)
        entry = self._entry(target.cluster_id, target.properties, built, prepared)
        self._clients[target.cluster_id] = entry
        return entry

    def _retire(self, entry: E) -> None:
        entry.retired_at = self.generation
        self._retired.append(entry)

    def next_generation(self) -> int:
        """Count a reload applied: clients retired from now on are of this generation."""
        self.generation += 1
        return self.generation

    def retire_unknown(self, known: Mapping[str, Any]) -> None:
        """Retire the clients of clusters not in ``known`` (clusters.yaml in force)."""
        for cluster_id in [c for c in self._clients if c not in known]:
            self._retire(self._clients.pop(cluster_id))

    def release_retired(self, busy: Callable[[E], bool]) -> None:
        """Let go of the retired clients that are not ``busy`` and were retired
        before the current generation (never at the reload that retired them)."""
        self._retired = [e for e in self._retired if busy(e) or e.retired_at >= self.generation]

    def clear(self) -> list[E]:
        """Forget every client (closing): the ones in use, then the retired ones."""
        out = self.all()
        self._clients = {}
        self._retired = []
        return out
