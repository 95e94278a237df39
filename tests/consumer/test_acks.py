"""Message-level acknowledgement (kbear.ack.mode=individual) on embedded clusters:
ack in any order and the contiguous-prefix commit, nack redelivery, ack timeout,
retry and dead-letter topics (routed by CRRL), delayed delivery, chunking."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from conftest import FAST_GROUP, committed_offsets, read_all, rule
from kbear import RoutedConsumer, RoutedProducer, Router
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

INDIVIDUAL = {
    **FAST_GROUP,
    "kbear.reload.interval.ms": 0,
    "kbear.ack.mode": "individual",
    "kbear.nack.backoff.min.ms": 100,
    "kbear.nack.backoff.max.ms": 400,
}


def fill(cluster: EmbeddedCluster, topic: str, n: int, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=partition)
    assert p.flush(10) == 0


def read(consumer: Any, count: int, timeout: float = 10.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            out.append(msg)
    return out


@pytest.fixture
def on_a(make_router: Callable[..., Router]) -> Router:
    return make_router([rule("all", "use cluster A", isGlobal=True)])


@pytest.fixture
def consumer_of(closing: Callable[[Any], Any], unique: Callable[[str], str]) -> Callable[..., RoutedConsumer]:
    def make(router: Router, group: str | None = None, **extra: Any) -> RoutedConsumer:
        conf = {"group.id": group or unique("group"), **INDIVIDUAL, **extra}
        return closing(RoutedConsumer(conf, router=router))  # type: ignore[no-any-return]

    return make


@dataclass
class Filled:
    """A one-partition topic on cluster A holding messages ``v0, v1, ...`` (keys
    ``k0, k1, ...``), and a subscribed individual-ack consumer of a new group."""

    cluster: EmbeddedCluster
    topic: str
    group: str
    consumer: RoutedConsumer


@pytest.fixture
def filled(
    two_clusters: Clusters,
    on_a: Router,
    consumer_of: Callable[..., RoutedConsumer],
    unique: Callable[[str], str],
) -> Callable[..., Filled]:
    """``filled(count, **settings)``: a Filled with ``count`` messages; ``settings``
    (by name) add to the consumer's configuration."""

    def make(count: int, **extra: Any) -> Filled:
        a = two_clusters[0]
        topic, group = unique("t"), unique("g")
        a.create_topic(topic, 1)
        fill(a, topic, count)
        consumer = consumer_of(on_a, group, **extra)
        consumer.subscribe([topic])
        return Filled(a, topic, group, consumer)

    return make


def test_acks_in_any_order_commit_only_the_contiguous_prefix(
    filled: Callable[..., Filled], on_a: Router, consumer_of: Callable[..., RoutedConsumer]
) -> None:
    f = filled(10)
    a, topic, group, c = f.cluster, f.topic, f.group, f.consumer
    msgs = read(c, 10)
    assert [m.offset() for m in msgs] == list(range(10))
    for m in reversed(msgs):  # out of order, all but offset 4
        if m.offset() != 4:
            c.ack(m)
    c.commit(asynchronous=False)
    assert committed_offsets(a, group, topic) == {0: 4}
    with pytest.raises(KafkaException, match="individual"):
        c.commit(message=msgs[9])  # would pass offset 4
    c.close()
    # a restart reads again from the first unacknowledged message: nothing lost
    c2 = consumer_of(on_a, group)
    c2.subscribe([topic])
    again = read(c2, 6)
    assert [m.offset() for m in again] == [4, 5, 6, 7, 8, 9]
    c2.ack_cumulative(again[-1])
    c2.commit(asynchronous=False)
    assert committed_offsets(a, group, topic) == {0: 10}


def test_auto_commit_never_passes_an_unacked_message(filled: Callable[..., Filled]) -> None:
    f = filled(5, **{"auto.commit.interval.ms": 100})
    a, topic, group, c = f.cluster, f.topic, f.group, f.consumer
    msgs = read(c, 5)
    c.ack(msgs[0])
    c.ack(msgs[2])
    c.ack(msgs[3])
    deadline = time.monotonic() + 5
    while committed_offsets(a, group, topic).get(0) != 1 and time.monotonic() < deadline:
        c.poll(0.1)
    assert committed_offsets(a, group, topic) == {0: 1}
    c.ack(msgs[1])
    deadline = time.monotonic() + 5
    while committed_offsets(a, group, topic).get(0) != 4 and time.monotonic() < deadline:
        c.poll(0.1)
    assert committed_offsets(a, group, topic) == {0: 4}  # offset 4 is still unacknowledged


def test_nack_redelivers_after_the_backoff(filled: Callable[..., Filled]) -> None:
    c = filled(3).consumer
    first = read(c, 3)
    c.ack(first[0])
    c.ack(first[2])
    times = []
    t0 = time.monotonic()
    c.nack(first[1])
    for _ in range(3):
        (m,) = read(c, 1, timeout=5)
        times.append(time.monotonic() - t0)
        assert (m.offset(), m.value()) == (1, b"v1")
        t0 = time.monotonic()
        c.nack(m)
    # 100, 200, 400 ms (kbear.nack.backoff.min.ms=100, multiplier 2, max 400)
    assert times[0] >= 0.09 and times[1] >= 0.19 and times[2] >= 0.39
    assert times[2] < 2.0
    # acknowledged while waiting for its redelivery: not delivered again
    (m,) = read(c, 1, timeout=5)
    c.nack(m)
    time.sleep(0.5)  # its redelivery is due
    c.ack(m)
    assert read(c, 1, timeout=0.8) == []


def test_ack_timeout_redelivers_what_was_not_acked(filled: Callable[..., Filled]) -> None:
    c = filled(2, **{"kbear.ack.timeout.ms": 300, "kbear.ack.timeout.tick.ms": 50}).consumer
    first = read(c, 2)
    c.ack(first[0])
    t0 = time.monotonic()
    (again,) = read(c, 1, timeout=5)
    elapsed = time.monotonic() - t0
    assert again.offset() == 1
    assert 0.35 <= elapsed < 3.0  # 300 ms timeout + 100 ms backoff (tick 50 ms)
    c.ack(again)
    assert read(c, 1, timeout=1.0) == []


def test_offset_mode_is_untouched(
    two_clusters: Clusters, on_a: Router, closing: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    a, _ = two_clusters
    topic = unique("t")
    a.create_topic(topic, 1)
    fill(a, topic, 2)
    c = closing(
        RoutedConsumer({"group.id": unique("g"), **FAST_GROUP, "kbear.reload.interval.ms": 0}, router=on_a)
    )
    c.subscribe([topic])
    msgs = read(c, 2)
    # the one-cluster fast path: poll is the cluster client's own method
    assert c.poll == c._registry.active[0].consumer.poll
    with pytest.raises(KafkaException, match=r"kbear\.ack\.mode=individual"):
        c.ack(msgs[0])
    with pytest.raises(ValueError, match=r"kbear\.retry\.enable"):
        RoutedConsumer({"group.id": "g", "kbear.retry.enable": True}, router=on_a)


def test_retry_topic_then_dead_letter_topic_on_another_cluster(
    two_clusters: Clusters,
    make_router: Callable[..., Router],
    consumer_of: Callable[..., RoutedConsumer],
    unique: Callable[[str], str],
) -> None:
    a, b = two_clusters
    topic, group = unique("t"), unique("g")
    retry, dlq = f"{topic}-{group}-RETRY", f"{topic}-{group}-DLQ"
    a.create_topic(topic, 1)
    a.create_topic(retry, 1)
    b.create_topic(dlq, 1)
    # the DLQ topic is routed to cluster B by a topic rule; everything else to A
    router = make_router(
        [rule("all", "use cluster A", isGlobal=True), rule("dlq", "use cluster B", topic=dlq)]
    )
    fill(a, topic, 2)
    c = consumer_of(router, group, **{"kbear.retry.enable": True, "kbear.max.redeliver.count": 2})
    c.subscribe([topic])
    assert set(c.routes()) == {topic, retry}
    msgs = read(c, 2)
    good = next(m for m in msgs if m.value() == b"v0")
    c.ack(good)
    poison = next(m for m in msgs if m.value() == b"v1")
    t0 = time.monotonic()
    c.reconsume_later(poison, 0.3, {"why": "busy"})
    seen = []
    deadline = time.monotonic() + 15
    while len(seen) < 2 and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is None or m.error() is not None:
            continue
        headers = dict(m.headers() or [])
        seen.append((m.topic(), m.value(), headers["RECONSUMETIMES"], time.monotonic() - t0))
        t0 = time.monotonic()
        c.reconsume_later(m, 0.3)
    assert [(s[0], s[1], s[2]) for s in seen] == [(topic, b"v1", b"1"), (topic, b"v1", b"2")]
    assert all(s[3] >= 0.29 for s in seen)  # not before DELAY_TIME
    deadline = time.monotonic() + 10
    while not read_all(b, dlq, timeout=1) and time.monotonic() < deadline:
        c.poll(0.1)
    (dead,) = read_all(b, dlq)
    headers = dict(dead.headers() or [])
    assert dead.value() == b"v1" and dead.key() == b"k1"
    assert headers["REAL_TOPIC"] == topic.encode()
    assert headers["ORIGIN_MESSAGE_ID"] == f"A/{topic}/0/1".encode()
    assert headers["RECONSUMETIMES"] == b"2"
    assert headers["why"] == b"busy"
    assert read_all(a, dlq, timeout=1) == []  # not on the topic's cluster
    # everything acknowledged: the group committed both topics to their ends
    for _ in range(20):
        c.poll(0.05)
    c.commit(asynchronous=False)
    assert committed_offsets(a, group, topic) == {0: 2}
    assert committed_offsets(a, group, retry) == {0: 2}


def test_nack_goes_to_the_dead_letter_topic_after_max_redeliver_count(filled: Callable[..., Filled]) -> None:
    f = filled(1, **{"kbear.max.redeliver.count": 3})
    a, topic, group, c = f.cluster, f.topic, f.group, f.consumer
    deliveries = 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not read_all(a, f"{topic}-{group}-DLQ", timeout=0.5):
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            deliveries += 1
            c.nack(m)
    assert deliveries == 4  # the first delivery and 3 redeliveries
    (dead,) = read_all(a, f"{topic}-{group}-DLQ")
    assert dict(dead.headers() or [])["RECONSUMETIMES"] == b"3"
    for _ in range(10):
        c.poll(0.05)
    c.commit(asynchronous=False)
    assert committed_offsets(a, group, topic) == {0: 1}


def test_delayed_delivery_is_not_delivered_before_its_time(
    two_clusters: Clusters,
    on_a: Router,
    consumer_of: Callable[..., RoutedConsumer],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    topic = unique("t")
    two_clusters[0].create_topic(topic, 3)
    p = closing(RoutedProducer({"kbear.delay.enable": True, "kbear.reload.interval.ms": 0}, router=on_a))
    c = consumer_of(on_a)
    c.subscribe([topic])
    sent = time.time()
    p.produce(topic, b"later", b"k", partition=0, deliver_after=1.0)
    p.produce(topic, value=b"at", key=b"k", partition=1, deliver_at=sent + 0.5)
    p.produce(topic, value=b"now", key=b"k", partition=2)
    assert p.flush(10) == 0
    got = {}
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            got[m.value()] = time.time() - sent
            c.ack(m)
    assert set(got) == {b"later", b"at", b"now"}
    assert got[b"at"] >= 0.5 and got[b"later"] >= 1.0
    assert got[b"now"] < got[b"at"]
    with pytest.raises(ValueError, match="not both"):
        p.produce(topic, b"x", deliver_after=1, deliver_at=time.time())


def test_a_5_mb_value_through_chunking_with_a_1_mb_limit(
    two_clusters: Clusters,
    on_a: Router,
    consumer_of: Callable[..., RoutedConsumer],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """The limit is the producer's message.max.bytes (1 MB; the mock cluster has no
    broker-side limit). 5 MB = 5,000,000 bytes: the mock keeps the last 5 MiB of a
    partition, so a 5 MiB value's first chunk would be gone before it is read."""
    topic = unique("t")
    two_clusters[0].create_topic(topic, 1)
    limit = {"message.max.bytes": 1_000_000, "kbear.reload.interval.ms": 0}
    plain = closing(RoutedProducer(limit, router=on_a))
    value = (bytes(range(256)) * 20_000)[:5_000_000]
    with pytest.raises(KafkaException, match="MSG_SIZE_TOO_LARGE"):
        plain.produce(topic, value, b"big")
    c = consumer_of(on_a, **{"kbear.chunking.enable": True})
    c.subscribe([topic])
    deadline = time.monotonic() + 10
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.1)
    p = closing(RoutedProducer({**limit, "kbear.chunking.enable": True}, router=on_a))
    reports: list[Any] = []
    p.produce(topic, value, b"big", on_delivery=lambda err, msg: reports.append(err))
    p.produce(topic, b"small", b"big")
    assert p.flush(30) == 0
    assert reports == [None]  # one report for every chunk
    got = read(c, 2, timeout=20)
    assert [(m.key(), len(m.value()), m.offset()) for m in got] == [(b"big", len(value), 5), (b"big", 5, 6)]
    assert got[0].value() == value
    assert not any(k.startswith("kbear-chunk") for k, _ in got[0].headers() or [])
    c.ack(got[0])
    c.ack(got[1])
    c.commit(asynchronous=False)
    assert committed_offsets(two_clusters[0], c._group, topic) == {0: 7}  # 6 chunks, 1 small message


def test_incomplete_chunks_expire(
    two_clusters: Clusters,
    on_a: Router,
    consumer_of: Callable[..., RoutedConsumer],
    unique: Callable[[str], str],
) -> None:
    topic = unique("t")
    two_clusters[0].create_topic(topic, 1)
    c = consumer_of(on_a, **{"kbear.chunking.enable": True, "kbear.chunking.expire.ms": 300})
    c.subscribe([topic])
    p = RoutedProducer({"kbear.reload.interval.ms": 0}, router=on_a)
    headers = [("kbear-chunk-uuid", b"u1"), ("kbear-chunk-index", b"0"), ("kbear-chunk-count", b"2")]
    p.produce(topic, b"half", b"k", partition=0, headers=headers)
    p.produce(topic, b"next", b"k", partition=0)
    assert p.flush(10) == 0
    p.close()
    (m,) = read(c, 1, timeout=10)
    assert m.value() == b"next"
    c.ack(m)
    deadline = time.monotonic() + 5
    while c._acks is not None and c._acks.unacked() and time.monotonic() < deadline:
        c.poll(0.1)
    assert c._acks is not None and c._acks.unacked() == 0  # the lone chunk was dropped (acknowledged)
