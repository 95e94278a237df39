"""Where a moved topic starts on its new cluster: ``kbear.switch.start=timestamp``
against a broker that answers ListOffsets by timestamp (Apache Kafka; librdkafka's
mock cluster does not: the test skips there)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from integration.conftest import Harness
from integration.helpers import poll_until, topic_rule, values


def produce_at(bootstrap: str, topic: str, label: str, timestamps_ms: list[int]) -> list[bytes]:
    """Plain producer: one message per timestamp (CreateTime), values ``label-i``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    sent = []
    for i, ts in enumerate(timestamps_ms):
        value = f"{label}-{i}".encode()
        producer.produce(topic, value, b"k", timestamp=ts)
        sent.append(value)
    assert producer.flush(30) == 0
    return sent


def test_timestamp_start_skips_what_is_older_than_the_last_consumed(it: Harness) -> None:
    if it.backend.name == "mock":
        pytest.skip("librdkafka's mock cluster answers ListOffsets by timestamp with -1")
    topic = it.create_topic(it.name("ts"), 1)
    base = int(time.time() * 1000) - 120_000  # two minutes ago, in seconds steps
    early_on_b = produce_at(it.bootstrap("B"), topic, "b-early", [base + i * 1000 for i in range(6)])
    late_on_b = produce_at(it.bootstrap("B"), topic, "b-late", [base + (20 + i) * 1000 for i in range(6)])

    conf = it.config([topic_rule(topic, "A")])
    consumer = it.consumer(
        conf,
        it.name("group"),
        **{
            "kbear.switch.start": "timestamp",
            "kbear.switch.timestamp.margin.ms": 2000,
            "kbear.switch.drain.idle.ms": 300,
        },
    )
    consumer.subscribe([topic])
    on_a = produce_at(it.bootstrap("A"), topic, "a", [base + (10 + i) * 1000 for i in range(5)])
    assert sorted(values(poll_until(consumer, len(on_a), timeout_s=60))) == sorted(on_a)

    # Move the topic to B. The last message consumed on A has timestamp base+14 s; with
    # a 2 s margin the consumer starts on B at the first message at or after base+12 s:
    # the late messages only, although the group never committed on B (committed mode
    # would start at auto.offset.reset=earliest and read the early ones too).
    conf.write_rules([topic_rule(topic, "B")])
    assert consumer.router.reload() is True
    got = poll_until(consumer, len(late_on_b), timeout_s=60)
    got += poll_until(consumer, 1, timeout_s=2)  # nothing more may come
    assert consumer.routes()[topic].cluster_id == "B"
    assert sorted(values(got)) == sorted(late_on_b)
    assert not set(values(got)) & set(early_on_b)
