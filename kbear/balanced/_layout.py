"""What the clusters say about the balanced topics: the partition layout a
reconciliation works from, and each partition's state and lag.

Blocking broker calls, made with the routed consumer's background clients of each
cluster (:meth:`~kbear.consumer._cluster.ClusterRegistry.watcher`: the group's
``group.id``, never subscribed, never committing), never with the clients that
read: a slow cluster does not hold up ``poll()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition

from kbear._route import Route
from kbear.balanced._assignment import PartitionKey
from kbear.consumer import ClusterRegistry

log = logging.getLogger("kbear.balanced")

#: logical topic -> (cluster id of its route, partition count there)
Layout = dict[str, tuple[str, int]]


@dataclass(frozen=True)
class PartitionState:
    """One partition as :meth:`ClientBalancedConsumer.partitions` sees it.

    Attributes:
        key: ``cluster:topic:partition`` (logical topic name).
        leader_available: the partition has a leader in the cluster's metadata now.
        registered: this node reads it.
        committed: the group's committed offset there (-1: none).
        high: the high watermark (-1: unknown, e.g. no leader).
        lag: ``high - committed`` for the group (-1 when either is unknown).
    """

    key: str
    leader_available: bool
    registered: bool
    committed: int
    high: int
    lag: int


def read_layout(
    registry: ClusterRegistry, routes: Mapping[str, Route], previous: Layout, timeout: float
) -> Layout:
    """Each topic's partition count on the cluster of its route. A topic the cluster
    does not list (or a cluster that does not answer within ``timeout`` seconds)
    keeps its ``previous`` count when that was on the same cluster, and is left
    out otherwise: partitions are never released because of a broker's transient
    state (leaderless partitions count too)."""
    layout: Layout = {}
    for topic, route in routes.items():
        why = ""
        try:
            md = registry.watcher(route).list_topics(route.topic, timeout).topics.get(route.topic)
        except (KafkaException, RuntimeError) as exc:
            why = str(exc)
        else:
            if md is not None and md.error is None:
                layout[topic] = (route.cluster_id, len(md.partitions))
                continue
            why = "not listed" if md is None else str(md.error)
        before = previous.get(topic)
        if before is not None and before[0] == route.cluster_id:
            layout[topic] = before
        log.warning(
            "kbear: partitions of %r on cluster %r unknown (%s); keeping %s",
            topic,
            route.cluster_id,
            why,
            before,
        )
    return layout


def partition_states(
    registry: ClusterRegistry, routes: Mapping[str, Route], registered: Iterable[PartitionKey], timeout: float
) -> list[PartitionState]:
    """The state of every partition of ``routes`` (logical topic -> route in use),
    each broker call bounded by ``timeout`` seconds; topics their cluster does not
    list are left out.

    Raises:
        KafkaException: a cluster did not answer.
    """
    mine = set(registered)
    out: list[PartitionState] = []
    for topic, route in routes.items():
        watcher = registry.watcher(route)
        md = watcher.list_topics(route.topic, timeout).topics.get(route.topic)
        if md is None or md.error is not None:
            continue
        parts = [TopicPartition(route.topic, p) for p in sorted(md.partitions)]
        committed = {tp.partition: tp.offset for tp in watcher.committed(parts, timeout=timeout)}
        for tp in parts:
            leader = md.partitions[tp.partition].leader >= 0
            high = -1
            if leader:
                marks = watcher.get_watermark_offsets(tp, timeout=timeout)
                high = -1 if marks is None else int(marks[1])
            done = max(committed.get(tp.partition, -1), -1)  # OFFSET_INVALID: none
            key = PartitionKey(topic, tp.partition, route.cluster_id)
            lag = high - done if high >= 0 and done >= 0 else -1
            out.append(PartitionState(str(key), leader, key in mine, done, high, lag))
    return out
