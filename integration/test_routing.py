"""Routed produce and consume across two real clusters, remapped topics, and a
consumer group of two routed consumers sharing partitions."""

from __future__ import annotations

from collections import Counter
from typing import Any

from confluent_kafka import TopicPartition

from integration.conftest import Harness
from integration.helpers import (
    duplicates,
    global_rule,
    poll_until,
    read_topic,
    topic_rule,
    values,
    wait_for_assignment,
)

N = 500  # messages per topic


def produce_keyed(producer: Any, topic: str, label: str, n: int) -> list[bytes]:
    sent = []
    for i in range(n):
        value = f"{label}-{i}".encode()
        producer.produce(topic, value, f"k{i % 17}".encode())
        sent.append(value)
        if i % 1000 == 999:
            producer.poll(0)
    return sent


def test_each_topic_goes_to_its_cluster_and_back(it: Harness) -> None:
    east = it.create_topic(it.name("east"), 3, "A")
    west = it.create_topic(it.name("west"), 3, "B")
    conf = it.config([topic_rule(west, "B"), global_rule("A")])
    reports: list[tuple[Any, str, bytes]] = []
    producer = it.producer(conf, on_delivery=lambda err, msg: reports.append((err, msg.topic(), msg.value())))

    sent_east = produce_keyed(producer, east, "east", N)
    sent_west = produce_keyed(producer, west, "west", N)
    assert producer.flush(30) == 0
    assert [e for e, _, _ in reports if e is not None] == []
    assert Counter(v for _, _, v in reports) == Counter(sent_east + sent_west)
    assert producer.route(east).cluster_id == "A"
    assert producer.route(west).cluster_id == "B"

    # what each cluster holds, read with plain clients: only its own topic
    assert sorted(values(read_topic(it.bootstrap("A"), east, N))) == sorted(sent_east)
    assert sorted(values(read_topic(it.bootstrap("B"), west, N))) == sorted(sent_west)
    assert read_topic(it.bootstrap("B"), east, 0, grace_s=0.2) == []
    assert read_topic(it.bootstrap("A"), west, 0, grace_s=0.2) == []

    consumer = it.consumer(conf, it.name("group"))
    consumer.subscribe([east, west])
    got = poll_until(consumer, 2 * N, timeout_s=60)
    assert Counter(values(got)) == Counter(sent_east + sent_west)  # each once
    assert {m.topic() for m in got} == {east, west}
    assert {tp.topic for tp in consumer.assignment()} == {east, west}
    assert {t: r.cluster_id for t, r in consumer.routes().items()} == {east: "A", west: "B"}

    # commits go to each topic's cluster
    committed = consumer.commit(asynchronous=False)
    assert committed is not None
    offsets = {(tp.topic, tp.partition): tp.offset for tp in committed}
    by_partition = Counter((m.topic(), m.partition()) for m in got)
    assert {k: offsets[k] for k in by_partition} == {
        k: max(m.offset() for m in got if (m.topic(), m.partition()) == k) + 1 for k in by_partition
    }


def test_remapped_topic_keeps_the_logical_name(it: Harness) -> None:
    logical = it.name("audit")
    physical = it.create_topic(logical + ".v2", 2, "B")
    conf = it.config([topic_rule(logical, "B", physical=physical), global_rule("A")])
    reports: list[tuple[Any, str]] = []
    producer = it.producer(conf)
    sent = []
    for i in range(N):
        value = f"audit-{i}".encode()
        producer.produce(
            logical, value, str(i).encode(), on_delivery=lambda e, m: reports.append((e, m.topic()))
        )
        sent.append(value)
    assert producer.flush(30) == 0
    assert reports == [(None, logical)] * N
    assert producer.route(logical).topic == physical
    md = producer.list_topics(logical, timeout=10)
    assert list(md.topics) == [logical] and len(md.topics[logical].partitions) == 2

    assert sorted(values(read_topic(it.bootstrap("B"), physical, N))) == sorted(sent)
    # nothing under the logical name on either cluster (no auto-created topic)
    assert read_topic(it.bootstrap("B"), logical, 0, grace_s=0.2) == []
    assert read_topic(it.bootstrap("A"), logical, 0, grace_s=0.2) == []

    group = it.name("audit-readers")
    consumer = it.consumer(conf, group)
    assigned: list[str] = []
    consumer.subscribe([logical], on_assign=lambda c, parts: assigned.extend(tp.topic for tp in parts))
    got = poll_until(consumer, N, timeout_s=60)
    assert sorted(values(got)) == sorted(sent)
    assert {m.topic() for m in got} == {logical}
    assert set(assigned) == {logical}
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(logical, p) for p in (0, 1)], timeout=10)
    assert [tp.topic for tp in committed] == [logical, logical]
    assert sum(tp.offset for tp in committed) == N


def test_two_routed_consumers_share_the_partitions(it: Harness) -> None:
    topic = it.create_topic(it.name("shared"), 4, "B")
    conf = it.config([topic_rule(topic, "B"), global_rule("A")])
    group = it.name("pair")
    first = it.consumer(conf, group)
    second = it.consumer(conf, group)
    first.subscribe([topic])
    second.subscribe([topic])
    early = wait_for_assignment([first, second], 4, timeout_s=60)
    assert early == [[], []]  # nothing produced yet
    mine = {tp.partition for tp in first.assignment()}
    theirs = {tp.partition for tp in second.assignment()}
    assert mine and theirs and not mine & theirs and mine | theirs == {0, 1, 2, 3}

    producer = it.producer(conf)
    sent = produce_keyed(producer, topic, "shared", 2 * N)
    assert producer.flush(30) == 0
    got: list[list[Any]] = [[], []]
    deadline_polls = 2000  # at most 2000 rounds of 2 x 50 ms
    for _ in range(deadline_polls):
        for i, consumer in enumerate((first, second)):
            got[i].extend(m for m in consumer.consume(500, 0.05) if m.error() is None)
        if len(got[0]) + len(got[1]) >= len(sent):
            break
    # each partition read by its owner only, every message once (a stable group)
    assert {m.partition() for m in got[0]} <= mine
    assert {m.partition() for m in got[1]} <= theirs
    assert got[0] and got[1]
    assert duplicates(values(got[0] + got[1])) == {}
    assert Counter(values(got[0] + got[1])) == Counter(sent)
