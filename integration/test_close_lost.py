"""close() after a failover does not wait for the lost cluster, on Apache Kafka.

A group of two routed consumers (``kbear.failover.enable``) reads a topic on east
(a cluster of this test's own, ``C``); east's broker process is killed, the
consumers fail east over to its standby west (``B``) and read there; then each
``close()`` returns within 2 s: kbear holds east for lost and closes its client in
the background, instead of waiting for east's group coordinator (5 s per consumer
on Apache Kafka before, ``session.timeout.ms`` with confluent-kafka's own consumer).
Runs on the ``kafka`` backend only (a broker process to kill).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from integration.backends import Cluster
from integration.conftest import Harness
from integration.helpers import global_rule, write_yaml_atomically
from integration.lost_east import spare_east
from kbear import RoutedConsumer

PARTITIONS = 2
MESSAGES = 40
#: what close() may take after the failover (issue #39 item 2)
CLOSE_S = 2.0


@pytest.fixture
def east(it: Harness) -> Cluster:
    return spare_east(it)


def fill(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(MESSAGES):
        producer.produce(topic, f"m{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def read(consumers: list[RoutedConsumer], count: int, timeout: float) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    while got < count and time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.1)
            got += msg is not None and msg.error() is None
    return got


@pytest.mark.timeout(300)
def test_close_after_a_failover_returns_within_two_seconds(it: Harness, east: Cluster) -> None:
    topic = it.name("orders")
    group = it.name("close-lost")
    east.create_topic(topic, PARTITIONS)
    it.create_topic(topic, PARTITIONS, "B")
    fill(east.bootstrap_servers, topic)
    fill(it.bootstrap("B"), topic)
    config = it.config([global_rule("east")], {"east": east.bootstrap_servers})
    east_meta = {"bootstrap.servers": east.bootstrap_servers, "kbear.failover.to": "west"}
    west_meta = {"bootstrap.servers": it.bootstrap("B")}
    clusters = [{"id": "east", "meta": east_meta}, {"id": "west", "meta": west_meta}]
    write_yaml_atomically(config.path / "clusters.yaml", {"clusters": clusters})
    conf = {"group.protocol": "consumer", "kbear.failover.enable": True, "kbear.failover.after.ms": 2000}
    consumers = [it.consumer(config, group, **conf) for _ in range(2)]
    for c in consumers:
        c.subscribe([topic])
    assert read(consumers, MESSAGES, 60) == MESSAGES
    for c in consumers:
        c.commit(asynchronous=False)

    east.kill()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(c.routes()[topic].cluster_id != "west" for c in consumers):
        for c in consumers:
            c.poll(0.1)
    assert {c.routes()[topic].cluster_id for c in consumers} == {"west"}, "the group did not fail over"
    assert read(consumers, MESSAGES, 60) == MESSAGES  # west's copy (no commits there: from the start)

    took = []
    for c in consumers:
        started = time.monotonic()
        c.close()
        took.append(time.monotonic() - started)
    assert max(took) <= CLOSE_S, f"close() took {', '.join(f'{t:.1f}' for t in took)} s after the failover"
    it.note(f"close() after a failover: {', '.join(f'{t * 1000:.0f}' for t in took)} ms (two consumers)")
