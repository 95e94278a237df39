"""Client-side partition assignment: partition keys, the modulo assignment and the
reconciliation plan. No I/O: the consumer (:mod:`kbear.balanced._consumer`) and the
``kbear assignments`` command (:mod:`kbear.balanced._report`) feed it what they read.

A partition key is ``cluster:topic:partition`` with the *logical* topic name (the
name the application subscribed to; for a remapped route not the cluster's own
name). Cluster ids and partitions contain no ``:``; a topic name may not either
(Kafka topic names are ``[a-zA-Z0-9._-]``), so a key splits unambiguously.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: ``source_count`` meaning "the application assigns" (TubeMQ's ``sourceCount = -1``).
APPLICATION_ASSIGNS = -1


@dataclass(frozen=True, order=True)
class PartitionKey:
    """One partition of a logical topic on one cluster.

    Ordered by (topic, partition, cluster): the cluster comes last so that a topic
    moved to another cluster with the same partition count keeps its place in the
    sorted set, and the modulo assignment gives each of its partitions to the same
    node on the new cluster (see :func:`assign_modulo`).
    """

    topic: str
    partition: int
    cluster: str

    def __str__(self) -> str:
        return f"{self.cluster}:{self.topic}:{self.partition}"

    @classmethod
    def parse(cls, key: str) -> PartitionKey:
        """The key ``cluster:topic:partition`` as a PartitionKey.

        Raises:
            ValueError: ``key`` is not a string of three non-empty ``:``-separated
                parts whose last one is an integer ≥ 0 (the message names the key).
        """
        if isinstance(key, PartitionKey):
            return key
        if not isinstance(key, str):
            raise ValueError(f"partition key must be a str 'cluster:topic:partition', got {key!r}")
        parts = key.split(":")
        if len(parts) != 3 or not parts[0] or not parts[1]:
            raise ValueError(f"partition key {key!r} is not 'cluster:topic:partition'")
        cluster, topic, number = parts
        if not number.isdigit():
            raise ValueError(f"partition key {key!r}: partition {number!r} is not an integer >= 0")
        return cls(topic, int(number), cluster)


def check_node(source_count: object, node_id: object) -> tuple[int, int]:
    """Validate the built-in assignment's parameters; returns them as ints.

    Args:
        source_count: how many nodes share the partitions (≥ 1), or ``-1``
            (:data:`APPLICATION_ASSIGNS`): the application registers partitions itself.
        node_id: this node's number, ``0 <= node_id < source_count`` (any int ≥ 0
            with ``source_count = -1``: it only names the node in the ownership reports).

    Raises:
        TypeError: either is not an int (``bool`` is refused too).
        ValueError: ``source_count`` is 0 or below -1, ``node_id`` is negative, or
            ``node_id >= source_count`` (the message names both values).
    """
    for name, value in (("source_count", source_count), ("node_id", node_id)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"ClientBalancedConsumer: {name} must be an int, got {value!r}")
    assert isinstance(source_count, int) and isinstance(node_id, int)
    if source_count == 0 or source_count < APPLICATION_ASSIGNS:
        raise ValueError(
            f"ClientBalancedConsumer: source_count must be >= 1 (nodes sharing the partitions) "
            f"or -1 (the application assigns), got {source_count}"
        )
    if node_id < 0:
        raise ValueError(f"ClientBalancedConsumer: node_id must be >= 0, got {node_id}")
    if source_count != APPLICATION_ASSIGNS and node_id >= source_count:
        raise ValueError(
            f"ClientBalancedConsumer: node_id {node_id} is not below source_count {source_count} "
            f"(nodes are numbered 0..{source_count - 1})"
        )
    return source_count, node_id


def full_set(layout: Mapping[str, tuple[str, int]]) -> list[PartitionKey]:
    """Every partition of the topics, sorted (see :class:`PartitionKey`).

    Args:
        layout: logical topic -> (cluster id of its route, partition count there).
    """
    return sorted(
        PartitionKey(topic, partition, cluster)
        for topic, (cluster, count) in layout.items()
        for partition in range(count)
    )


def assign_modulo(keys: Iterable[PartitionKey], source_count: int, node_id: int) -> list[PartitionKey]:
    """The keys of node ``node_id`` of ``source_count``: the ``i``-th key of the sorted
    set goes to node ``i % source_count``. Every node computing this over the same
    set gets a disjoint share, and the shares cover the set, without talking.

    Returns ``[]`` when ``source_count`` is :data:`APPLICATION_ASSIGNS`.
    """
    if source_count == APPLICATION_ASSIGNS:
        return []
    return [key for index, key in enumerate(sorted(keys)) if index % source_count == node_id]


@dataclass(frozen=True)
class Plan:
    """What a reconciliation changes: keys to release and keys to register (sorted)."""

    release: list[PartitionKey]
    register: list[PartitionKey]

    @property
    def empty(self) -> bool:
        """Whether nothing changes."""
        return not self.release and not self.register


def plan(target: Iterable[PartitionKey], registered: Iterable[PartitionKey]) -> Plan:
    """Release what is registered and not in ``target``; register what is in
    ``target`` and not registered."""
    want, have = set(target), set(registered)
    return Plan(sorted(have - want), sorted(want - have))
