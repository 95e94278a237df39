"""ClientBalancedConsumer: the application (or a modulo over a fixed fleet) decides
which node reads which partition; no group join, no rebalance.

Responsible for: the balanced topics and the partitions registered (keys
``cluster:topic:partition``), the built-in ``source_count`` / ``node_id``
assignment, the periodic reconciliation (partition layout read in the
background, applied at the next call), partition states, and the ownership
reports. Reading, committing and route changes are the routed consumer's
(:class:`~kbear.consumer.AssignedConsumer`).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_STORED, KafkaError, KafkaException, TopicPartition

from kbear._base import NO_CONFIG, weak_method
from kbear._identity import Client
from kbear._route import Route
from kbear.balanced._assignment import (
    APPLICATION_ASSIGNS,
    PartitionKey,
    assign_modulo,
    check_node,
    full_set,
    plan,
)
from kbear.balanced._calls import ConsumerCalls
from kbear.balanced._layout import Layout, PartitionState, partition_states, read_layout
from kbear.balanced._ownership import Report
from kbear.balanced._registry import DEFAULT_REGISTRY_TOPIC, Reporter
from kbear.consumer import AssignedConsumer
from kbear.router import Router

log = logging.getLogger("kbear.balanced")

#: ``kbear.balanced.*`` keys: name -> default.
RECONCILE_KEY = "kbear.balanced.reconcile.interval.ms"
REGISTRY_KEY = "kbear.balanced.registry.topic"
DEFAULT_RECONCILE_MS = 10_000
#: Timeout of each broker call of a periodic reconciliation (seconds; in the background).
LAYOUT_CALL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Reconciliation:
    """What a reconciliation changed: keys released and keys registered."""

    released: list[str]
    registered: list[str]


class ClientBalancedConsumer(ConsumerCalls):
    """A routed consumer whose partitions are assigned by the application, not by
    the group coordinator (TubeMQ's client-balanced consumer over kbear routes).

    Args:
        config: as :class:`~kbear.RoutedConsumer` (``group.id`` required: the group
            whose committed offsets are read and written on each partition's
            cluster; the group is never joined), plus
            ``kbear.balanced.reconcile.interval.ms`` (default 10000: how often the
            partition layout is read again and the assignment reconciled, and the
            ownership report sent) and ``kbear.balanced.registry.topic`` (default
            ``kbear.balanced.registry``; empty: no reports).
        source_count: how many nodes share the topics' partitions (≥ 1), or -1:
            the application registers partitions itself.
        node_id: this node, ``0 <= node_id < source_count`` (any int ≥ 0 with -1).
        router, client: as :class:`~kbear.RoutedConsumer`.
        **kwargs: more configuration, as confluent-kafka accepts.

    Raises:
        TypeError: ``source_count``/``node_id`` are not ints; ``config`` as RoutedConsumer.
        ValueError: ``node_id >= source_count``, a negative ``node_id``, a
            ``source_count`` of 0 or below -1, a bad ``kbear.balanced.*`` value;
            and everything :class:`~kbear.RoutedConsumer` raises.

    With ``source_count = N ≥ 1``, node ``i`` owns the ``k``-th partition of the
    sorted set of every partition of the subscribed topics (sorted by topic,
    partition, cluster) when ``k % N == i``: nodes agree without talking, as long
    as they see the same routes and partition counts. The set is the partition
    counts of the topics on the clusters of their routes (a partition without a
    leader still counts; a cluster that does not answer keeps its last count).
    A route change of a topic moves its registered partitions with the routed
    consumer's switch (``kbear.switch.mode``; see docs/concepts/route-changes.md).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        source_count: int,
        node_id: int,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        self._source_count, self._node_id = check_node(source_count, node_id)
        conf = dict(config) if isinstance(config, Mapping) else config
        interval_ms, registry_topic = DEFAULT_RECONCILE_MS, DEFAULT_REGISTRY_TOPIC
        if isinstance(conf, dict):
            interval_ms = _interval(conf.pop(RECONCILE_KEY, DEFAULT_RECONCILE_MS))
            registry_topic = str(conf.pop(REGISTRY_KEY, DEFAULT_REGISTRY_TOPIC))
        self._interval_s = interval_ms / 1000.0
        self._consumer = AssignedConsumer(conf, router=router, client=client, **kwargs)
        self._consumer.switched_hook = weak_method(self._switched)
        self._lock = self._consumer.lock
        self._topics: list[str] = []
        self._registered: dict[PartitionKey, int] = {}
        self._layout: Layout = {}
        self._job: Future[Layout] | None = None
        self._next = time.monotonic() + self._interval_s
        self._instance = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._reporter = Reporter(registry_topic, self._consumer.native_config()) if registry_topic else None
        self._closed = False

    # ------------------------------------------------------------------ identity

    @property
    def source_count(self) -> int:
        """How many nodes share the partitions (-1: the application assigns)."""
        return self._source_count

    @property
    def node_id(self) -> int:
        """This node's number."""
        return self._node_id

    @property
    def instance(self) -> str:
        """This consumer's instance id in the ownership reports (``host:pid:random``)."""
        return self._instance

    @property
    def router(self) -> Router:
        """The router in use."""
        return self._consumer.router

    # ------------------------------------------------------------------ topics and partitions

    def subscribe(self, topics: Sequence[str]) -> None:
        """Balance ``topics`` (logical names): no group join. With ``source_count ≥ 1``
        this node's share is registered now (a blocking :meth:`reconcile`);
        partitions of topics no longer listed are released.

        Raises:
            NoRouteError: some topics have no route (all of them are named).
            KafkaException: ``_INVALID_ARG`` for a ``^pattern`` (not supported) or
                an empty list; a cluster refused the assignment.
        """
        names = list(topics)
        if not names or any(not isinstance(t, str) or not t or t.startswith("^") for t in names):
            raise KafkaException(
                KafkaError(
                    KafkaError._INVALID_ARG,
                    f"ClientBalancedConsumer.subscribe: topic names expected (no ^patterns), got {names!r}",
                )
            )
        with self._lock:
            self._check_open()
            inner = self._consumer
            routes = inner.route_topics(names)
            for key in [k for k in self._registered if k.topic not in routes]:
                self._release(key)
            # a topic balanced before keeps its route in use and its move in progress
            inner.follow(names, routes, keep=self._topics)
            self._topics = names
            self._layout = {t: v for t, v in self._layout.items() if t in routes}
            self._job = None
        self.reconcile()

    def unsubscribe(self) -> None:
        """Release every registered partition and forget the topics."""
        with self._lock:
            self._check_open()
            for key in list(self._registered):
                self._release(key)
            self._topics = []
            self._layout = {}
            self._consumer.unfollow()
            self._report()

    def topics(self) -> list[str]:
        """The balanced topics (logical names)."""
        return list(self._topics)

    def registered(self) -> list[str]:
        """The keys this node reads, sorted (by topic, partition, cluster)."""
        with self._lock:
            return [str(k) for k in sorted(self._registered)]

    def routes(self) -> dict[str, Route]:
        """Logical topic -> route in use (the old route while a move drains)."""
        return self._consumer.routes()

    def partitions(self, topics: Sequence[str] | None = None, timeout: float = 10.0) -> list[PartitionState]:
        """Every partition of ``topics`` (default: the balanced ones) on the cluster of
        its route, with its state and the group's lag there. Blocking: each broker
        call is bounded by ``timeout`` seconds.

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: a cluster did not answer within ``timeout``.
        """
        with self._lock:
            self._check_open()
            inner = self._consumer
            names = self._topics if topics is None else list(topics)
            routes = {topic: inner.route(topic) for topic in names}
            registered = list(self._registered)
        return partition_states(inner.registry, routes, registered, timeout)

    def register(self, key: str, bootstrap_offset: int = -1) -> None:
        """Read partition ``key`` (``cluster:topic:partition``) from now on.

        Args:
            key: a partition of a balanced topic on the cluster its route names.
            bootstrap_offset: -1 (default): from the group's committed offset there
                (else ``auto.offset.reset``); ≥ 0: from that offset. A key
                registered already is read from ``bootstrap_offset`` when it is ≥ 0.

        Raises:
            ValueError: ``key`` is malformed or ``bootstrap_offset`` is below -1.
            KafkaException: ``_UNKNOWN_TOPIC`` the topic is not balanced
                (:meth:`subscribe`), ``_UNKNOWN_PARTITION`` the topic's route names
                another cluster or the partition is beyond the known count.
        """
        parsed = PartitionKey.parse(key)
        if (
            isinstance(bootstrap_offset, bool)
            or not isinstance(bootstrap_offset, int)
            or bootstrap_offset < -1
        ):
            raise ValueError(
                f"register({key!r}): bootstrap_offset must be -1 or an offset >= 0, got {bootstrap_offset!r}"
            )
        with self._lock:
            self._check_open()
            self._check_key(parsed)
            if parsed in self._registered:
                if bootstrap_offset < 0:
                    return
                self._consumer.incremental_unassign([TopicPartition(parsed.topic, parsed.partition)])
            self._take(parsed, bootstrap_offset)
            self._report()

    def unregister(self, key: str) -> bool:
        """Stop reading ``key``; with ``enable.auto.commit`` on, its position is
        committed first (synchronously), so the next node starts there.

        Returns:
            Whether ``key`` was registered.

        Raises:
            ValueError: ``key`` is malformed.
        """
        parsed = PartitionKey.parse(key)
        with self._lock:
            self._check_open()
            if parsed not in self._registered:
                return False
            self._release(parsed)
            self._report()
            return True

    def reconcile(self, timeout: float = LAYOUT_CALL_TIMEOUT_S) -> Reconciliation:
        """Read the partition layout of the balanced topics now (blocking, each broker
        call bounded by ``timeout`` seconds) and, with ``source_count ≥ 1``, release
        what left this node's share and register what arrived (from the group's
        committed offsets). Also run every ``kbear.balanced.reconcile.interval.ms``
        from ``poll``/``consume``, in the background."""
        with self._lock:
            self._check_open()
            routes = self._consumer.routes()
            previous = dict(self._layout)
        layout = read_layout(self._consumer.registry, routes, previous, timeout)
        with self._lock:
            self._check_open()
            self._job = None
            self._next = time.monotonic() + self._interval_s
            return self._apply(layout)

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _check_key(self, key: PartitionKey) -> None:
        route = self._consumer.routes().get(key.topic)
        known = self._layout.get(key.topic)
        if route is None:
            code = KafkaError._UNKNOWN_TOPIC
            why = f"topic {key.topic!r} is not balanced by this consumer (subscribe() it first)"
        elif route.cluster_id != key.cluster:
            code = KafkaError._UNKNOWN_PARTITION
            why = f"topic {key.topic!r} is read on cluster {route.cluster_id!r}, not {key.cluster!r}"
        elif known is not None and known[0] == key.cluster and key.partition >= known[1]:
            code = KafkaError._UNKNOWN_PARTITION
            why = f"topic {key.topic!r} has {known[1]} partitions on cluster {key.cluster!r}"
        else:
            return
        raise KafkaException(KafkaError(code, f"register({str(key)!r}): {why}"))

    def _take(self, key: PartitionKey, bootstrap_offset: int) -> None:
        offset = OFFSET_STORED if bootstrap_offset < 0 else bootstrap_offset
        self._consumer.incremental_assign([TopicPartition(key.topic, key.partition, offset)])
        self._registered[key] = bootstrap_offset

    def _release(self, key: PartitionKey) -> None:
        self._consumer.release(TopicPartition(key.topic, key.partition), key.cluster)
        del self._registered[key]

    def _apply(self, layout: Layout) -> Reconciliation:
        """Apply a layout read earlier: entries whose route changed meanwhile are dropped."""
        routes = self._consumer.routes()
        layout = {t: v for t, v in layout.items() if t in routes and routes[t].cluster_id == v[0]}
        self._layout = layout
        released: list[str] = []
        taken: list[str] = []
        if self._source_count != APPLICATION_ASSIGNS:
            target = assign_modulo(full_set(layout), self._source_count, self._node_id)
            # keys of topics whose layout is unknown stay as they are
            known = [k for k in self._registered if k.topic in layout]
            todo = plan(target, known)
            for key in todo.release:
                self._release(key)
                released.append(str(key))
            for key in todo.register:
                self._take(key, -1)
                taken.append(str(key))
            if not todo.empty:
                log.info(
                    "kbear: node %d/%d released %s, registered %s",
                    self._node_id,
                    self._source_count,
                    released,
                    taken,
                )
        self._report()
        return Reconciliation(released, taken)

    def _report(self) -> None:
        if self._reporter is None:
            return
        inner = self._consumer
        clusters = inner.router.config.clusters
        where = {
            r.cluster_id: clusters[r.cluster_id] for r in inner.routes().values() if r.cluster_id in clusters
        }
        self._reporter.send(self._record("up"), where)

    def _record(self, state: str) -> Report:
        return Report(
            group=self._consumer.group,
            instance=self._instance,
            node_id=self._node_id,
            source_count=self._source_count,
            ts_ms=int(time.time() * 1000),
            interval_ms=int(self._interval_s * 1000),
            layout=dict(self._layout),
            owned=tuple(sorted(self._registered)),
            state=state,
        )

    def _switched(self, topic: str, old: Route, new: Route | None, partitions: list[int]) -> None:
        """The routed consumer moved ``topic``'s partitions: the keys follow."""
        for key in [k for k in self._registered if k.topic == topic and k.cluster == old.cluster_id]:
            del self._registered[key]
        if new is not None:
            for p in partitions:
                self._registered[PartitionKey(topic, p, new.cluster_id)] = -1
        self._layout.pop(topic, None)
        self._next = 0.0  # reconcile soon: the new cluster's count may differ
        self._job = None

    def _tick(self) -> None:
        """Between calls: start a background layout read when due; apply it once read."""
        with self._lock:
            if self._closed:
                return
            job = self._job
            if job is None or not job.done():
                if job is None:
                    routes, registry = self._consumer.routes(), self._consumer.registry
                    self._job = self._consumer.submit(
                        read_layout, registry, routes, dict(self._layout), LAYOUT_CALL_TIMEOUT_S
                    )
                self._next = time.monotonic() + 0.01
                return
            self._job = None
            self._next = time.monotonic() + self._interval_s
            try:
                layout = job.result()
            except Exception as exc:  # the background read failed: try again next interval
                log.warning("kbear: reconciliation skipped: %s", exc)
                return
            self._apply(layout)

    def close(self) -> None:
        """Send a last report (``left``), then close the routed consumer (committing
        what was read when ``enable.auto.commit`` is on, as confluent-kafka)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._job = None
            if self._reporter is not None:
                self._reporter.send(self._record("left"), {})
        try:
            self._consumer.close()
        finally:
            if self._reporter is not None:
                self._reporter.close()


def _interval(value: Any) -> int:
    try:
        ms = int(value)
    except (TypeError, ValueError):
        ms = -1
    if ms < 100:
        raise ValueError(
            f"ClientBalancedConsumer: {RECONCILE_KEY} must be an integer >= 100 (ms), got {value!r}"
        )
    return ms
