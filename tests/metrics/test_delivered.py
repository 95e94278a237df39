"""``kbear_consumer_messages_total``'s count (kbear.metrics._delivered): what
``poll()`` and ``consume()`` return, per topic, error events not counted; compiled
(kbear/_counted.c) and pure-Python alike."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from kbear import _compiled
from kbear.metrics import _delivered
from kbear.metrics._delivered import CountingConsumer, Delivered
from kbear.testing import EmbeddedCluster


@pytest.fixture(params=["compiled", "pure-python"])
def counting(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "compiled":
        if _compiled.EXTENSION is None:
            pytest.skip("kbear's C extension is not built here (or KBEAR_PURE_PYTHON is set)")
    else:
        monkeypatch.setattr(_delivered, "EXTENSION", None)
    yield request.param


def test_what_poll_and_consume_return_is_counted_per_topic_errors_not(
    counting: str,
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
) -> None:
    cluster = two_clusters[0]
    topics = [unique("a"), unique("b")]
    for topic in topics:
        cluster.create_topic(topic, 2)
    producer = closing(Producer({"bootstrap.servers": cluster.bootstrap_servers}))
    sent = Counter()
    for i in range(60):
        topic = topics[i % 3 == 0]
        producer.produce(topic, f"v{i}".encode())
        sent[topic] += 1
    assert producer.flush(10) == 0

    delivered = Delivered()
    consumer = CountingConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique("g"),
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,  # error events (end of partition): not messages
        },
        delivered,
    )
    try:
        consumer.subscribe(topics)
        got: Counter[str] = Counter()
        errors = 0
        deadline = time.monotonic() + 20
        turn = 0
        while (sum(got.values()) < sum(sent.values()) or not errors) and time.monotonic() < deadline:
            turn += 1
            batch = consumer.consume(7, 0.2) if turn % 2 else [consumer.poll(0.2)]
            for msg in batch:
                if msg is None:
                    continue
                if msg.error() is None:
                    got[msg.topic()] += 1
                else:
                    errors += 1
        assert got == sent
        assert errors > 0  # the end-of-partition events were returned too
        assert delivered.totals() == dict(sent)
        if counting == "compiled":
            assert type(consumer.poll).__name__ == "Counted"  # no Python frame per call
    finally:
        consumer.close()
