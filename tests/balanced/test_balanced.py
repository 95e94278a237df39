"""ClientBalancedConsumer on embedded clusters: nodes share the partitions of topics
spread over two clusters without joining the group, resume from the group's
commits, honour bootstrap offsets, rescale, and follow a route change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaException

from conftest import committed_offsets, keyed, plain_producer, rewrite_rules, rule
from kbear import ClientBalancedConsumer, Router
from kbear.testing import EmbeddedCluster

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


def node(
    spread: dict[str, Any], closing: Callable[[Any], Any], group: str, count: int, i: int, **conf: Any
) -> ClientBalancedConsumer:
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
        assert {
            f"{'A' if m.topic() == spread['t1'] else 'B'}:{m.topic()}:{m.partition()}" for m in msgs
        } <= share


def test_a_restarted_node_resumes_from_its_commits(spread, closing, unique) -> None:
    group = unique("g")
    first = produce(spread["a"], spread["t1"], 120, "a") | produce(spread["b"], spread["t2"], 90, "b")
    nodes = [node(spread, closing, group, 2, i) for i in range(2)]
    got = read(nodes, len(first))
    assert sorted(m.value() for msgs in got for m in msgs) == sorted(first)
    nodes[1].close()  # commits what it read (enable.auto.commit, as confluent-kafka)
    second = produce(spread["a"], spread["t1"], 80, "c") | produce(spread["b"], spread["t2"], 60, "d")
    again = node(spread, closing, group, 2, 1)
    assert again.registered() == nodes[1].registered()
    got = read([nodes[0], again], len(second))
    assert sorted(m.value() for msgs in got for m in msgs) == sorted(second)  # nothing of `first` again


def test_bootstrap_offsets_are_honoured_when_the_application_assigns(spread, closing, unique) -> None:
    group = unique("g")
    a, t1 = spread["a"], spread["t1"]
    p = plain_producer(a)
    for i in range(10):
        p.produce(t1, value=b"%d" % i, partition=0)
    p.flush(10)
    consumer = node(spread, closing, group, -1, 7)
    assert consumer.registered() == []  # source_count -1: nothing registered for it
    key = f"A:{t1}:0"
    consumer.register(key, bootstrap_offset=6)
    got = read([consumer], 4)[0]
    assert [m.offset() for m in got] == [6, 7, 8, 9]
    consumer.commit(offsets=None, asynchronous=False)
    assert committed_offsets(a, group, t1)[0] == 10
    assert consumer.unregister(key) is True
    assert consumer.unregister(key) is False
    consumer.register(key, bootstrap_offset=2)
    assert [m.offset() for m in read([consumer], 8)[0]] == list(range(2, 10))
    consumer.unregister(key)
    p.produce(t1, value=b"10", partition=0)
    p.flush(10)
    consumer.register(key)  # -1: the group's committed offset (10, committed as it left)
    assert [m.offset() for m in read([consumer], 1)[0]] == [10]
    with pytest.raises(KafkaException) as info:
        consumer.register(f"B:{t1}:0")
    assert "read on cluster 'A'" in str(info.value)
    with pytest.raises(KafkaException):
        consumer.register(f"A:{t1}:4")  # t1 has 4 partitions
    with pytest.raises(KafkaException):
        consumer.register("A:not-balanced:0")
    with pytest.raises(ValueError):
        consumer.register("A-t1-0")


def test_scaling_from_three_to_four_nodes_loses_nothing(spread, closing, unique) -> None:
    group = unique("g")
    sent = produce(spread["a"], spread["t1"], 300, "a") | produce(spread["b"], spread["t2"], 200, "b")
    three = [node(spread, closing, group, 3, i) for i in range(3)]
    got = read(three, 200)  # part of it
    seen = [m.value() for msgs in got for m in msgs]
    for n in three:
        n.close()
    more = produce(spread["a"], spread["t1"], 100, "c") | produce(spread["b"], spread["t2"], 100, "d")
    four = [node(spread, closing, group, 4, i) for i in range(4)]
    shares = [set(n.registered()) for n in four]
    assert sum(map(len, shares)) == 7 and set().union(*shares) == all_keys(spread)
    rest = len(sent | more) - len(seen)
    got = read(four, rest)
    seen += [m.value() for msgs in got for m in msgs]
    assert set(seen) == sent | more  # nothing lost
    assert len(seen) == len(sent | more)  # and nothing read twice: each node committed as it closed


def test_duplicate_node_id_is_flagged_by_kbear_assignments(spread, closing, unique, capsys) -> None:
    from kbear.cli import main

    group, registry = unique("g"), unique("registry")
    # reports live 3 intervals: longer than a run of the command on a loaded machine
    conf = {"kbear.balanced.registry.topic": registry, "kbear.balanced.reconcile.interval.ms": 2000}
    nodes = [node(spread, closing, group, 3, i, **conf) for i in range(3)]
    args = ["assignments", "--config", str(spread["dir"]), "--group", group, "--registry-topic", registry]

    def assignments(readers: list[Any], done: Callable[[int, str], bool]) -> tuple[int, str]:
        deadline = time.monotonic() + 10
        while True:  # the reports are on their way
            capsys.readouterr()
            code = main(args)
            out = capsys.readouterr().out
            if done(code, out) or time.monotonic() > deadline:
                return code, out
            read(readers, 10**9, timeout=0.3)

    code, out = assignments(nodes, lambda code, out: code == 0)
    assert code == 0, out
    assert "3 live node(s)" in out and "problem" not in out
    twin = node(spread, closing, group, 3, 1, **conf)
    assert twin.registered() == nodes[1].registered()
    code, out = assignments([*nodes, twin], lambda code, out: twin.instance in out)
    assert code == 1, out
    assert "duplicate node_id 1: instances " in out and twin.instance in out
    assert all(f"overlap: {key}" in out for key in twin.registered())
    assert "OVERLAP" in out


def test_a_route_change_moves_a_balanced_topic_without_loss(spread, closing, unique) -> None:
    group = unique("g")
    a, b, t1 = spread["a"], spread["b"], spread["t1"]
    b.create_topic(t1, 4)
    conf = {"kbear.switch.drain.idle.ms": 300, "kbear.reload.interval.ms": 0}
    sent = produce(a, t1, 200, "a")
    nodes = [node(spread, closing, group, 2, i, **conf) for i in range(2)]
    per_node = [list(msgs) for msgs in read(nodes, 100)]
    before = [[k.split(":")[2] for k in n.registered() if t1 in k] for n in nodes]
    sent |= produce(a, t1, 100, "late")  # still on A when the route changes
    rewrite_rules(spread["dir"], [*spread["rules"], rule("move", "use cluster B", topic=t1)])
    spread["router"].reload()
    sent |= produce(b, t1, 150, "b")  # producers moved at once
    deadline = time.monotonic() + 30
    while sum(map(len, per_node)) < len(sent) and time.monotonic() < deadline:
        for mine, msgs in zip(per_node, read(nodes, 10**9, timeout=0.3), strict=True):
            mine.extend(msgs)
    seen = [m.value() for mine in per_node for m in mine]
    assert set(seen) == sent and len(seen) == len(sent)  # nothing lost, nothing twice
    keys = set(nodes[0].registered()) | set(nodes[1].registered())
    assert {k for k in keys if t1 in k} == {f"B:{t1}:{p}" for p in range(4)}
    assert all(n.routes()[t1].cluster_id == "B" for n in nodes)
    assert [[k.split(":")[2] for k in n.registered() if t1 in k] for n in nodes] == before  # same owners
    for mine in per_node:  # per partition, every message of A before any of B (the drain)
        for p in range(4):
            origin = [m.value().startswith(b"b") for m in mine if m.topic() == t1 and m.partition() == p]
            assert origin == sorted(origin)


def test_partitions_reports_state_and_lag(spread, closing, unique) -> None:
    group = unique("g")
    produce(spread["a"], spread["t1"], 40, "a")
    consumer = node(spread, closing, group, 1, 0, **{"enable.auto.commit": False})
    states = {s.key: s for s in consumer.partitions()}
    assert set(states) == all_keys(spread)
    t1 = [s for k, s in states.items() if spread["t1"] in k]
    assert all(s.leader_available and s.registered and s.committed == -1 and s.lag == -1 for s in t1)
    assert sum(s.high for s in t1) == 40
    got = read([consumer], 40)[0]
    consumer.commit(message=got[-1], asynchronous=False)
    done = {s.key: s for s in consumer.partitions([spread["t1"]])}
    last = f"A:{spread['t1']}:{got[-1].partition()}"
    assert done[last].lag == 0 and done[last].committed == done[last].high


def test_periodic_reconciliation_registers_partitions_of_a_topic_created_later(
    spread, closing, unique
) -> None:
    group, late = unique("g"), unique("late")
    consumer = ClientBalancedConsumer(
        {**BASE, "group.id": group}, source_count=2, node_id=1, router=spread["router"]
    )
    closing(consumer)
    consumer.subscribe([spread["t1"], late])  # `late` does not exist yet: no partition of it
    assert [k for k in consumer.registered() if late in k] == []
    spread["a"].create_topic(late, 6)
    sent = produce(spread["a"], late, 60, "x")
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < 30 and time.monotonic() < deadline:  # reconciled in the background while polling
        got.extend(m for m in consumer.consume(100, 0.1) if m.error() is None and m.topic() == late)
    assert [k for k in consumer.registered() if late in k] == [
        f"A:{late}:{p}" for p in (1, 3, 5)
    ]  # sorted first: "late" < "t1"
    assert {m.partition() for m in got} == {1, 3, 5} and {m.value() for m in got} < sent


def test_keys_and_messages_of_a_remapped_topic_carry_the_logical_name(
    two_clusters, make_config, closing, unique
) -> None:
    _, b = two_clusters
    logical, physical, group = unique("logical"), unique("physical"), unique("g")
    b.create_topic(physical, 2)
    rules = [
        rule("all", "use cluster A", isGlobal=True),
        rule("remap", f"use cluster B, topic {physical}", topic=logical),
    ]
    router = Router.from_path(make_config(rules))
    closing(router)
    consumer = ClientBalancedConsumer({**BASE, "group.id": group}, source_count=1, node_id=0, router=router)
    closing(consumer)
    consumer.subscribe([logical])
    assert consumer.registered() == [f"B:{logical}:0", f"B:{logical}:1"]
    assert [s.key for s in consumer.partitions()] == [f"B:{logical}:0", f"B:{logical}:1"]
    sent = produce(b, physical, 20, "r")
    got = read([consumer], 20)[0]
    assert {m.topic() for m in got} == {logical} and {m.value() for m in got} == sent
    assert consumer.unregister(f"B:{logical}:1") is True
    consumer.commit(asynchronous=False)
    # committed on B under the physical name: partition 1 as it left, partition 0 by commit()
    assert sum(committed_offsets(b, group, physical).values()) == 20


def test_unregister_commits_the_acknowledged_prefix_with_individual_acks(spread, closing, unique) -> None:
    """kbear.ack.mode=individual: a partition unregistered after five messages read and
    none acknowledged is committed before them, so that its next node reads them again."""
    group = unique("g")
    a, t1 = spread["a"], spread["t1"]
    p = plain_producer(a)
    for i in range(5):
        p.produce(t1, value=b"%d" % i, partition=0)
    assert p.flush(10) == 0
    consumer = node(spread, closing, group, -1, 0, **{"kbear.ack.mode": "individual"})
    key = f"A:{t1}:0"
    consumer.register(key, bootstrap_offset=0)
    assert [m.offset() for m in read([consumer], 5)[0]] == [0, 1, 2, 3, 4]
    assert consumer.unregister(key) is True
    consumer.close()
    assert committed_offsets(a, group, t1)[0] in (0, OFFSET_INVALID)
