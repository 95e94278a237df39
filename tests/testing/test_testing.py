"""kbear.testing.EmbeddedCluster against real clients over TCP (librdkafka mock cluster)."""

from __future__ import annotations

import asyncio
import ctypes.util
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from kbear import _mock
from kbear.testing import EmbeddedCluster, LoopWatch, Traffic

native_only = pytest.mark.skipif(
    _mock.NATIVE_API is None, reason=f"mock C API unavailable: {_mock.NATIVE_UNAVAILABLE_REASON}"
)


@pytest.fixture
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(num_brokers=3) as c:
        yield c


def _producer(c: EmbeddedCluster, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": c.bootstrap_servers, **extra})


def _partition_count(c: EmbeddedCluster, topic: str) -> int:
    md = _producer(c, **{"allow.auto.create.topics": False}).list_topics(timeout=5)
    return len(md.topics[topic].partitions)


def _topics(c: EmbeddedCluster) -> set[str]:
    return set(_producer(c).list_topics(timeout=5).topics)


def _port_accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ports(c: EmbeddedCluster) -> list[int]:
    return [int(hp.rsplit(":", 1)[1]) for hp in c.bootstrap_servers.split(",")]


def test_bundled_library_gives_the_native_api() -> None:
    if not _mock._library_candidates():
        pytest.skip("confluent-kafka without a bundled librdkafka")
    assert _mock.NATIVE_API is not None, _mock.NATIVE_UNAVAILABLE_REASON


def test_bootstrap_servers_are_loopback_one_per_broker(cluster: EmbeddedCluster) -> None:
    entries = cluster.bootstrap_servers.split(",")
    assert len(entries) == cluster.num_brokers == 3
    assert all(e.startswith("127.0.0.1:") for e in entries)
    assert len(_producer(cluster).list_topics(timeout=5).brokers) == 3


@native_only
@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_partition_count_is_honoured(cluster: EmbeddedCluster, partitions: int) -> None:
    cluster.create_topic("orders", num_partitions=partitions, replication_factor=2)
    assert _partition_count(cluster, "orders") == partitions


@native_only
def test_messages_round_trip_through_a_consumer_group() -> None:
    n = 1000
    with EmbeddedCluster() as c:
        c.create_topic("events", num_partitions=3)
        p = _producer(c)
        for i in range(n):
            p.produce("events", key=f"k{i}".encode(), value=f"v{i}".encode())
        assert p.flush(10) == 0

        consumer = Consumer(
            {
                "bootstrap.servers": c.bootstrap_servers,
                "group.id": "g",
                "auto.offset.reset": "earliest",
            }
        )
        try:
            start = time.monotonic()
            consumer.subscribe(["events"])
            got: dict[bytes, bytes] = {}
            partitions: set[int] = set()
            first_after: float | None = None
            while len(got) < n and time.monotonic() - start < 10:
                for m in consumer.consume(500, timeout=0.2):
                    assert m.error() is None, m.error()
                    first_after = first_after or time.monotonic() - start
                    key, value = m.key(), m.value()
                    assert isinstance(key, bytes) and isinstance(value, bytes)
                    got[key] = value
                    partition = m.partition()
                    assert partition is not None
                    partitions.add(partition)
        finally:
            consumer.close()  # before the cluster: see EmbeddedCluster's docstring
    assert got == {f"k{i}".encode(): f"v{i}".encode() for i in range(n)}
    assert partitions == {0, 1, 2}
    # group_initial_rebalance_delay_ms=0: no 3 s wait for the first rebalance.
    assert first_after is not None and first_after < 2.5


def test_two_clusters_are_independent() -> None:
    with EmbeddedCluster() as a, EmbeddedCluster() as b:
        assert a.bootstrap_servers != b.bootstrap_servers
        a.create_topic("only-on-a")
        assert "only-on-a" in _topics(a)
        assert "only-on-a" not in _topics(b)
        b.create_topic("only-on-b")
        assert "only-on-b" not in _topics(a)
        a.close()
        assert _topics(b) == {"only-on-b"}


def test_existing_topic_raises_topic_already_exists(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("t")
    with pytest.raises(KafkaException) as info:
        cluster.create_topic("t")
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize(
    ("name", "partitions", "replicas"),
    [("", 4, 1), ("bad name", 4, 1), ("..", 4, 1), ("t", 0, 1), ("t", 4, 0), ("t", 4, 4)],
)
def test_invalid_topic_arguments_raise_value_error(
    cluster: EmbeddedCluster, name: str, partitions: int, replicas: int
) -> None:
    with pytest.raises(ValueError):
        cluster.create_topic(name, partitions, replicas)


def test_invalid_constructor_arguments_raise_value_error() -> None:
    with pytest.raises(ValueError):
        EmbeddedCluster(0)
    with pytest.raises(ValueError):
        EmbeddedCluster(group_initial_rebalance_delay_ms=-1)


def test_close_is_idempotent_and_stops_the_brokers() -> None:
    c = EmbeddedCluster(2)
    ports = _ports(c)
    assert all(_port_accepts(p) for p in ports)
    c.close()
    c.close()
    with c:  # __exit__ closes again
        pass
    assert c.closed
    assert not any(_port_accepts(p) for p in ports)
    with pytest.raises(RuntimeError, match="closed"):
        c.create_topic("t")


@native_only
def test_broker_down_and_up(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("t", num_partitions=1)
    cluster.set_broker_down(-1)
    assert not any(_port_accepts(p) for p in _ports(cluster))
    with pytest.raises(KafkaException):
        _producer(cluster).list_topics(timeout=0.5)
    cluster.set_broker_up(-1)
    assert "t" in _topics(cluster)
    with pytest.raises(ValueError):
        cluster.set_broker_down(4)


@native_only
def test_broker_rtt_slows_round_trips(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("t", num_partitions=1)
    producer = _producer(cluster)
    producer.list_topics(timeout=5)  # connected
    cluster.set_broker_rtt(-1, 600)
    t0 = time.monotonic()
    producer.list_topics("t", timeout=10)
    assert time.monotonic() - t0 >= 0.5
    cluster.set_broker_rtt(-1, 0)
    producer.list_topics("t", timeout=10)  # a request sent while the delay was on may still pass
    t0 = time.monotonic()
    producer.list_topics("t", timeout=10)
    assert time.monotonic() - t0 < 0.5
    with pytest.raises(ValueError):
        cluster.set_broker_rtt(1, -1)


def test_library_without_mock_symbols_means_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to stand in for a librdkafka without the mock API")
    monkeypatch.setattr(_mock, "_library_candidates", lambda: [Path(libc)])
    api, reason = _mock._load_native()
    assert api is None
    assert reason is not None and "rd_kafka_mock_cluster_new" in reason


def test_without_the_mock_api_the_cluster_is_refused_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_mock, "NATIVE_API", None)
    monkeypatch.setattr(_mock, "NATIVE_UNAVAILABLE_REASON", "no rd_kafka_mock_cluster_new in libX")
    with pytest.raises(RuntimeError, match="mock C API unavailable: no rd_kafka_mock_cluster_new in libX"):
        EmbeddedCluster()


@pytest.mark.asyncio
async def test_loop_watch_measures_how_long_the_loop_was_held() -> None:
    """A coroutine that blocks the loop for 0.2 s shows as a lateness of about that;
    a loop that only awaits shows far less."""
    watch = LoopWatch()
    await asyncio.sleep(0.05)
    time.sleep(0.2)  # holds the loop
    await asyncio.sleep(0.05)
    worst = await watch.stop()
    assert worst >= 0.15
    quiet = LoopWatch()
    await asyncio.sleep(0.1)
    assert await quiet.stop() < worst


def test_loop_watch_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        LoopWatch()


def test_traffic_counts_what_went_through_and_what_was_lost() -> None:
    """Real traffic through an embedded cluster: every delivered value consumed once,
    per key in order; a value read twice and one never read are counted."""
    with EmbeddedCluster() as cluster:
        cluster.create_topic("t", 2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap_servers, "group.id": "g", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["t"])
        with Traffic(producer, consumer, "t", keys=3, limit=200) as traffic:
            deadline = time.monotonic() + 30  # 200 at 500/s: 0.4 s on a quiet machine
            while len(traffic.delivered) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
        consumer.close()
    assert len(traffic.delivered) == 200
    assert not traffic.lost and traffic.duplicates == 0 and traffic.order_breaks == 0
    traffic.consumed.append(traffic.consumed[0])  # read twice
    traffic.delivered.append(b"m999")  # never read
    assert traffic.duplicates == 1 and traffic.lost == {b"m999"}


def test_traffic_counts_per_key_order_breaks() -> None:
    class Msg:
        def __init__(self, key: bytes, value: bytes) -> None:
            self._key, self._value = key, value

        def key(self) -> bytes:
            return self._key

        def value(self) -> bytes:
            return self._value

    traffic = Traffic(None, None, "t")
    traffic.consumed += [Msg(b"k0", b"m0"), Msg(b"k1", b"m1"), Msg(b"k0", b"m3"), Msg(b"k0", b"m2")]
    assert traffic.order_breaks == 1  # m2 after m3 on k0
    traffic.consumed.append(Msg(b"k0", b"m3"))  # a re-read is not a break
    assert traffic.order_breaks == 1
