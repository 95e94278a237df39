"""``kbear_consumer_messages_total`` counts what poll()/consume() hand to the
application, not records fetched again after a seek (issue #25 item 1: the
demo's scrape read up to 9 % more than its table); the fetched records have
their own metric, ``kbear_consumer_fetched_messages_total``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from conftest import FAST_GROUP, consume_until, plain_producer, rule
from kbear import RoutedConsumer
from kbear.metrics import instrument, uninstrument
from kbear.testing import EmbeddedCluster

pytest.importorskip("prometheus_client", reason="the metrics extra")


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    reg = CollectorRegistry()
    instrument(reg, stats_interval_ms=100)
    yield reg
    uninstrument(reg)


def total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    want = labels.items()
    return sum(
        s.value for f in registry.collect() for s in f.samples if s.name == name and want <= s.labels.items()
    )


@pytest.mark.parametrize("batch", [None, 7], ids=["poll", "consume"])
def test_consumer_messages_are_what_the_application_got_after_a_seek_back(
    batch: int | None,
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    registry: CollectorRegistry,
) -> None:
    a, _b = two_clusters
    topic = unique("seek")
    a.create_topic(topic, 1)
    producer = plain_producer(a)
    for i in range(300):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(10) == 0
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    consumer = closing(
        RoutedConsumer(
            {"kbear.config": str(conf), **FAST_GROUP, "group.id": unique("g"), "client.id": "app-c"}
        )
    )
    consumer.subscribe([topic])
    got = consume_until(consumer, 40, batch=batch)
    # librdkafka fetched ahead of what was handed out; seeking back drops those
    # records, which are fetched again.
    consumer.seek(TopicPartition(topic, 0, 0))
    got += consume_until(consumer, 40, batch=batch)
    handed = len(got)
    assert handed >= 80
    where = {"client": "app-c", "cluster": "A", "topic": topic}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        fetched = total(registry, "kbear_consumer_fetched_messages_total", **where)
        if fetched > handed and total(registry, "kbear_consumer_messages_total", **where) > 0:
            break
        msg = consumer.poll(0.1)  # statistics are served by poll(); nothing is left to hand out?
        if msg is not None and msg.error() is None:
            handed += 1
    assert total(registry, "kbear_consumer_messages_total", **where) == handed
    assert total(registry, "kbear_consumer_fetched_messages_total", **where) > handed
