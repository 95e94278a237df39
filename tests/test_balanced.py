"""ClientBalancedConsumer on embedded clusters: nodes share the partitions of topics
spread over two clusters without joining the group, resume from the group's
commits, honour bootstrap offsets, rescale, and follow a route change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from kbear import ClientBalancedConsumer, Router
from kbear.testing import EmbeddedCluster
from tests.conftest import committed_offsets, keyed, plain_producer, rewrite_rules, rule

#: Fast reconciliation and reports; earliest start for a group with no commits.
BASE = {"auto.offset.reset": "earliest", "kbear.balanced.reconcile.interval.ms": 300}


@pytest.fixture
def spread(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[[Sequence[Any]], Path],
    unique: Callable[[str], str],
) -> Iterator[dict[str, Any]]:
    """Topic ``t1`` (4 partitions) on cluster A and ``t2`` (3 partitions) on B."""
    a, b = two_clusters
    t1, t2 = unique("t1"), unique("t2")
    a.create_topic(t1, 4)
    b.create_topic(t2, 3)
    rules = [rule("all", "use cluster A", isGlobal=True), rule("t2", "use cluster B", topic=t2)]
    directory = make_config(rules)
    router = Router.from_path(directory)
    yield {"a": a, "b": b, "t1": t1, "t2": t2, "router": router, "dir": directory, "rules": rules}
    router.close()


def produce(cluster: EmbeddedCluster, topic: str, n: int, prefix: str) -> set[bytes]:
    p = plain_producer(cluster)
    for key, value in keyed(n, prefix):
        p.produce(topic, key=key, value=prefix.encode() + value)
    assert p.flush(10) == 0
    return {prefix.encode() + v for _, v in keyed(n, prefix)}


def read(nodes: Sequence[ClientBalancedConsumer], want: int, timeout: float = 20.0) -> list[list[Any]]:
    """Poll every node in turn until ``want`` messages in all (or ``timeout``)."""
    got: list[list[Any]] = [[] for _ in nodes]
    deadline = time.monotonic() + timeout
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, node in enumerate(nodes):
            got[i].extend(m for m in node.consume(500, 0.05) if m.error() is None)
    return got


def node(spread: dict[str, Any], closing: Callable[[Any], Any], group: str, count: int, i: int, **conf: Any) -> ClientBalancedConsumer:
    consumer = ClientBalancedConsumer(
        {**BASE, "group.id": group, **conf}, source_count=count, node_id=i, router=spread["router"]
    )
    closing(consumer)
    consumer.subscribe([spread["t1"], spread["t2"]])
    return consumer


def all_keys(spread: dict[str, Any]) -> set[str]:
    return {f"A:{spread['t1']}:{p}" for p in range(4)} | {f"B:{spread['t2']}:{p}" for p in range(3)}


def test_three_nodes_own_disjoint_shares_covering_every_partition(spread, closing, unique) -> None:
    group = unique("g")
    sent = produce(spread["a"], spread["t1"], 200, "a") | produce(spread["b"], spread["t2"], 150, "b")
    nodes = [node(spread, closing, group, 3, i) for i in range(3)]
    shares = [set(n.registered()) for n in nodes]
    assert all(shares)
    assert not (shares[0] & shares[1] or shares[0] & shares[2] or shares[1] & shares[2])
    assert set().union(*shares) == all_keys(spread)
    got = read(nodes, len(sent))
    values = [m.value() for msgs in got for m in msgs]
    assert sorted(values) == sorted(sent)  # each message once, by exactly one node
    for share, msgs in zip(shares, got, strict=True):
        assert {f"{'A' if m.topic() == spread['t1'] else 'B'}:{m.topic()}:{m.partition()}" for m in msgs} <= share
