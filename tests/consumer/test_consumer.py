"""RoutedConsumer against two in-process Kafka clusters (librdkafka mock clusters)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from conftest import (
    FAST_GROUP,
    committed_offsets,
    consume_until,
    drain_more,
    end_offsets,
    keyed,
    plain_producer,
    rule,
)
from kbear import NoRouteError, RoutedConsumer, Router
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

#: (logical topic, cluster index, physical topic, partitions)
Layout = list[tuple[str, int, str, int]]


@pytest.fixture
def layout(two_clusters: Clusters, unique: Callable[[str], str]) -> Layout:
    """Three topics: one on A (global rule), one on B (topic rule), one remapped
    to another name on B; each filled with keyed messages by a plain Producer."""
    on_a, on_b, remapped, physical = (unique(n) for n in ("on-a", "on-b", "logical", "physical"))
    out = [(on_a, 0, on_a, 3), (on_b, 1, on_b, 2), (remapped, 1, physical, 2)]
    for _topic, index, phys, partitions in out:
        two_clusters[index].create_topic(phys, partitions)
    return out


@pytest.fixture
def router(make_router: Callable[..., Router], layout: Layout) -> Router:
    (_on_a, *_), (on_b, *_), (remapped, _, physical, _) = layout
    return make_router(
        [
            rule("global", "use cluster A", isGlobal=True),
            rule("to-b", "use cluster B", topic=on_b),
            rule("remap", f"use cluster B, topic {physical}", topic=remapped),
        ]
    )


def fill(two_clusters: Clusters, layout: Layout, per_topic: int = 12) -> Counter[tuple[str, bytes, bytes]]:
    """Produce ``per_topic`` keyed messages to every physical topic with plain
    Producers; return what a reader of the logical topics should receive."""
    expected: Counter[tuple[str, bytes, bytes]] = Counter()
    producers = [plain_producer(c) for c in two_clusters]
    for topic, index, physical, _ in layout:
        for key, value in keyed(per_topic, prefix=topic[:6]):
            producers[index].produce(physical, value, key)
            expected[(topic, key, value)] += 1
    for p in producers:
        assert p.flush(10) == 0
    return expected


def received(messages: list[Any]) -> Counter[tuple[str, bytes, bytes]]:
    return Counter((m.topic(), m.key(), m.value()) for m in messages)


@pytest.fixture
def make_consumer(
    router: Router, closing: Callable[[Any], Any], unique: Callable[[str], str]
) -> Callable[..., RoutedConsumer]:
    def make(**extra: Any) -> RoutedConsumer:
        conf = {"group.id": unique("group"), **FAST_GROUP, **NO_WATCH, **extra}
        return closing(RoutedConsumer(conf, router=router))

    return make


def all_partitions(layout: Layout) -> set[tuple[str, int]]:
    return {(topic, p) for topic, _, _, n in layout for p in range(n)}


def wait_assigned(consumer: RoutedConsumer, layout: Layout, timeout: float = 10.0) -> None:
    """Poll (nothing is produced yet) until every partition of ``layout`` is assigned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {(tp.topic, tp.partition) for tp in consumer.assignment()} == all_partitions(layout):
            return
        assert consumer.poll(0.05) is None
    raise AssertionError(f"not assigned within {timeout} s: {consumer.assignment()}")


# --------------------------------------------------------------------------- configuration


def test_group_id_is_required(router: Router) -> None:
    with pytest.raises(ValueError, match=r"group\.id"):
        RoutedConsumer({**FAST_GROUP, **NO_WATCH}, router=router)


def test_bootstrap_servers_and_unknown_kbear_keys_are_refused(router: Router) -> None:
    base = {"group.id": "g", **NO_WATCH}
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        RoutedConsumer({**base, "bootstrap.servers": "127.0.0.1:9092"}, router=router)
    with pytest.raises(ValueError, match=r"kbear\.bogus"):
        RoutedConsumer({**base, "kbear.bogus": 1}, router=router)
    with pytest.raises(ValueError, match=r"kbear\.config"):
        RoutedConsumer({"group.id": "g"})


def test_subscribe_to_unroutable_topics_names_them_all(
    make_router: Callable[..., Router], closing: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    routed, lost1, lost2 = unique("routed"), unique("lost1"), unique("lost2")
    router = make_router([rule("only", "use cluster A", topic=routed)])
    consumer = closing(RoutedConsumer({"group.id": "billing", **FAST_GROUP, **NO_WATCH}, router=router))
    with pytest.raises(NoRouteError) as info:
        consumer.subscribe([routed, lost1, lost2])
    message = str(info.value)
    assert lost1 in message
    assert lost2 in message
    assert routed not in message
    assert "billing" in message
    with pytest.raises(NoRouteError, match=lost1):
        consumer.subscribe([lost1])
    # the failed subscriptions changed nothing: a routable subscription still works
    consumer.subscribe([routed])
    assert set(consumer.routes()) == {routed}


# --------------------------------------------------------------------------- reading


def test_subscribe_reads_every_message_of_both_clusters_once(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    expected = fill(two_clusters, layout)
    consumer = make_consumer()
    consumer.subscribe([topic for topic, *_ in layout])
    messages = consume_until(consumer, sum(expected.values()))
    assert all(type(m) is Message for m in messages)
    assert received(messages) == expected  # logical names, remapped one included
    assert drain_more(consumer, 0.3) == []
    routes = consumer.routes()
    assert {t: (r.cluster_id, r.topic) for t, r in routes.items()} == {
        topic: ("AB"[index], physical) for topic, index, physical, _ in layout
    }


def test_consume_batches_across_two_clusters(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    expected = fill(two_clusters, layout, per_topic=20)
    consumer = make_consumer()
    consumer.subscribe([topic for topic, *_ in layout])
    batches: list[list[Any]] = []
    deadline = time.monotonic() + 15
    while sum(len(b) for b in batches) < sum(expected.values()) and time.monotonic() < deadline:
        batch = consumer.consume(num_messages=7, timeout=0.2)
        assert len(batch) <= 7
        batches.append([m for m in batch if m.error() is None])
    messages = [m for b in batches for m in b]
    assert received(messages) == expected
    assert consumer.consume(num_messages=5, timeout=0.2) == []
    assert consumer.consume(num_messages=0, timeout=0) == []  # as confluent-kafka 2.16
    with pytest.raises(ValueError):
        consumer.consume(num_messages=-1, timeout=0)


def test_per_partition_order_is_kept(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    fill(two_clusters, layout, per_topic=30)
    consumer = make_consumer()
    consumer.subscribe([topic for topic, *_ in layout])
    messages = consume_until(consumer, 90)
    offsets: dict[tuple[str, int], list[int]] = {}
    for m in messages:
        offsets.setdefault((m.topic(), m.partition()), []).append(m.offset())
    assert all(o == sorted(o) and o[0] == 0 for o in offsets.values())


def test_on_assign_gets_routed_consumer_and_logical_topics(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    consumer = make_consumer()
    calls: list[tuple[Any, list[tuple[str, int]]]] = []

    def on_assign(c: Any, partitions: list[TopicPartition]) -> None:
        calls.append((c, [(tp.topic, tp.partition) for tp in partitions]))

    consumer.subscribe([topic for topic, *_ in layout], on_assign=on_assign)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        consumer.poll(0.1)
        if {tp for _, parts in calls for tp in parts} == all_partitions(layout):
            break
    assert all(c is consumer for c, _ in calls)
    assert {tp for _, parts in calls for tp in parts} == all_partitions(layout)
    assert {(tp.topic, tp.partition) for tp in consumer.assignment()} == all_partitions(layout)


def test_classic_protocol_group_reads_both_clusters(
    two_clusters: Clusters, layout: Layout, router: Router, closing: Callable[[Any], Any]
) -> None:
    expected = fill(two_clusters, layout, per_topic=5)
    assigned: list[str] = []
    consumer = closing(
        RoutedConsumer(
            {
                "group.id": "classic-" + layout[0][0],
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                **NO_WATCH,
            },
            router=router,
        )
    )
    consumer.subscribe(
        [topic for topic, *_ in layout],
        on_assign=lambda c, parts: assigned.extend(tp.topic for tp in parts),
    )
    assert received(consume_until(consumer, 15)) == expected
    assert set(assigned) == {topic for topic, *_ in layout}


def test_consumer_group_rule_routes_only_that_group(
    two_clusters: Clusters,
    make_router: Callable[..., Router],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """A consumer-group rule sends group G to cluster B for the topic; other groups
    follow the global rule to A (CRRL: group rules come first in the chain)."""
    topic, special, ordinary = unique("orders"), unique("special"), unique("ordinary")
    for index, cluster in enumerate(two_clusters):
        cluster.create_topic(topic, 2)
        p = plain_producer(cluster)
        for key, value in keyed(4, prefix="AB"[index]):
            p.produce(topic, value, key)
        assert p.flush(10) == 0
    router = make_router(
        [
            rule("global", "use cluster A", isGlobal=True),
            rule("special", "use cluster B", group=special, group_topic=topic),
        ]
    )
    keys = {}
    for group in (special, ordinary):
        consumer = closing(RoutedConsumer({"group.id": group, **FAST_GROUP, **NO_WATCH}, router=router))
        consumer.subscribe([topic])
        keys[group] = sorted(m.key() for m in consume_until(consumer, 4))
        assert consumer.routes()[topic].rule_id == ("special" if group == special else "global")
    assert keys[special] == sorted(k for k, _ in keyed(4, prefix="B"))
    assert keys[ordinary] == sorted(k for k, _ in keyed(4, prefix="A"))


# --------------------------------------------------------------------------- offsets


def test_commit_sync_then_committed_and_plain_consumer_agree(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    fill(two_clusters, layout)
    group = layout[0][0] + ".group"
    consumer = make_consumer(**{"group.id": group, "enable.auto.commit": False})
    consumer.subscribe([topic for topic, *_ in layout])
    assert len(consume_until(consumer, 36)) == 36

    committed = consumer.commit(asynchronous=False)
    assert committed is not None
    assert {(tp.topic, tp.partition) for tp in committed} <= all_partitions(layout)

    partitions = [TopicPartition(t, p) for t, p in sorted(all_partitions(layout))]
    answer = consumer.committed(partitions, timeout=5)
    assert [(tp.topic, tp.partition) for tp in answer] == [(tp.topic, tp.partition) for tp in partitions]
    for topic, index, physical, _ in layout:
        ends = end_offsets(two_clusters[index], physical)
        mine = {tp.partition: tp.offset for tp in answer if tp.topic == topic}
        # every partition that holds messages is committed at its end
        assert {p: o for p, o in mine.items() if ends[p]} == {p: e for p, e in ends.items() if e}
        # a plain confluent-kafka Consumer on that cluster sees it under the physical name
        plain = committed_offsets(two_clusters[index], group, physical)
        assert {p: o for p, o in plain.items() if ends[p]} == {p: e for p, e in ends.items() if e}


def test_commit_message_and_position(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    fill(two_clusters, layout, per_topic=6)
    consumer = make_consumer(**{"enable.auto.commit": False})
    remapped, _, physical, _ = layout[2]
    consumer.subscribe([remapped])
    messages = consume_until(consumer, 6)
    assert len(messages) == 6
    last = messages[-1]
    assert last.topic() == remapped

    answer = consumer.commit(message=last, asynchronous=False)
    assert answer is not None
    assert [(tp.topic, tp.partition, tp.offset) for tp in answer] == [
        (remapped, last.partition(), last.offset() + 1)
    ]
    (mine,) = consumer.committed([TopicPartition(remapped, last.partition())], timeout=5)
    assert (mine.topic, mine.offset) == (remapped, last.offset() + 1)

    # asynchronous (the default) returns None, as confluent-kafka; the commit lands
    first = messages[0]
    if first.partition() == last.partition():
        first = next(m for m in messages if m.partition() != last.partition())
    assert consumer.commit(message=first) is None
    deadline = time.monotonic() + 5
    seen = -1
    while time.monotonic() < deadline and seen != first.offset() + 1:
        consumer.poll(0.05)  # serves the commit
        seen = consumer.committed([TopicPartition(remapped, first.partition())], timeout=5)[0].offset
    assert seen == first.offset() + 1

    # positions: next offset to read, per logical partition, equal to the ends
    ends = end_offsets(two_clusters[1], physical)
    positions = consumer.position([TopicPartition(remapped, p) for p in ends])
    assert {tp.topic for tp in positions} == {remapped}
    assert {tp.partition: tp.offset for tp in positions if ends[tp.partition]} == {
        p: e for p, e in ends.items() if e
    }


def test_commit_with_offsets_goes_to_each_topic_cluster(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    group = layout[0][0] + ".group"
    consumer = make_consumer(**{"group.id": group, "enable.auto.commit": False})
    topics = [topic for topic, *_ in layout]
    consumer.subscribe(topics)
    wait_assigned(consumer, layout)
    offsets = [TopicPartition(topic, 0, 3) for topic in topics]
    answer = consumer.commit(offsets=offsets, asynchronous=False)
    assert answer is not None
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in answer) == sorted((t, 0, 3) for t in topics)
    for _topic, index, physical, _ in layout:
        assert committed_offsets(two_clusters[index], group, physical)[0] == 3


def test_commit_with_nothing_consumed_raises_like_confluent(
    layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    from confluent_kafka import KafkaError, KafkaException

    consumer = make_consumer(**{"enable.auto.commit": False})
    consumer.subscribe([topic for topic, *_ in layout])
    consumer.poll(0.2)
    with pytest.raises(KafkaException) as info:
        consumer.commit(asynchronous=False)
    assert info.value.args[0].code() == KafkaError._NO_OFFSET


# --------------------------------------------------------------------------- lifecycle


def test_unsubscribe_stops_delivery(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    fill(two_clusters, layout, per_topic=4)
    consumer = make_consumer()
    revoked: list[tuple[Any, str, int]] = []
    consumer.subscribe(
        [topic for topic, *_ in layout],
        on_revoke=lambda c, parts: revoked.extend((c, tp.topic, tp.partition) for tp in parts),
    )
    assert len(consume_until(consumer, 12)) == 12
    consumer.unsubscribe()
    assert consumer.routes() == {}
    fill(two_clusters, layout, per_topic=4)
    # as with confluent-kafka, the next polls serve the revocation: on_revoke runs
    # (with the RoutedConsumer and logical names) and the assignment empties
    assert drain_more(consumer, 0.5) == []
    assert consumer.assignment() == []
    assert {(t, p) for _, t, p in revoked} == all_partitions(layout)
    assert all(c is consumer for c, _, _ in revoked)
    # subscribing again resumes from the committed offsets (auto commit on)
    consumer.subscribe([topic for topic, *_ in layout])
    assert len(consume_until(consumer, 12)) == 12


def test_closed_consumer_raises_runtime_error_like_confluent(
    two_clusters: Clusters, layout: Layout, make_consumer: Callable[..., RoutedConsumer]
) -> None:
    consumer = make_consumer()
    consumer.subscribe([topic for topic, *_ in layout])
    consumer.poll(0.1)
    consumer.close()
    consumer.close()  # idempotent

    plain = Consumer({"bootstrap.servers": two_clusters[0].bootstrap_servers, "group.id": "plain"})
    plain.close()
    for client in (plain, consumer):
        with pytest.raises(RuntimeError):
            client.poll(0.1)
        with pytest.raises(RuntimeError):
            client.consume(num_messages=1, timeout=0.1)
        with pytest.raises(RuntimeError):
            client.assignment()
    with pytest.raises(RuntimeError):
        consumer.commit(asynchronous=False)
    with pytest.raises(RuntimeError):
        consumer.subscribe([layout[0][0]])


def test_context_manager_closes(
    two_clusters: Clusters, layout: Layout, router: Router, unique: Callable[[str], str]
) -> None:
    fill(two_clusters, layout, per_topic=3)
    conf = {"group.id": unique("group"), **FAST_GROUP, **NO_WATCH}
    with RoutedConsumer(conf, router=router) as consumer:
        consumer.subscribe([topic for topic, *_ in layout])
        assert len(consume_until(consumer, 9)) == 9
    with pytest.raises(RuntimeError):
        consumer.poll(0)
    # close() committed what was read (auto commit): a new member of the group starts after it
    with RoutedConsumer(conf, router=router) as again:
        again.subscribe([topic for topic, *_ in layout])
        fill(two_clusters, layout, per_topic=1)
        assert len(consume_until(again, 3)) == 3
        assert drain_more(again, 0.3) == []
