"""A move while the producer's last messages for the old cluster are still in flight.

The producer drains the old cluster before its first message to the new one
(``flush``), so per key the new cluster's messages follow the old cluster's. A
consumer must not end its drain of the old cluster while such messages have not
reached it yet: seen on Apache Kafka under load (a group of 2 read messages out
of per-key order after two live moves: the old cluster's last messages reached
its log after the members had left it, and were read only when the topic came
back). Forced here: the old cluster refuses the producer's next requests with a
retriable error, so its last messages land after ``retry.backoff.ms`` x 5
(2 s), longer than the consumer's ``kbear.switch.drain.idle.ms`` (0.8 s), shorter than 5 x that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from conftest import FAST_GROUP, Rule, rewrite_rules, rule
from kbear import RoutedConsumer, RoutedProducer
from kbear.testing import EmbeddedCluster

PRODUCE_API = 0
KEYS = 8


class Writer(threading.Thread):
    """Keyed, sequence-numbered messages every ~5 ms until stopped (at most 2,000)."""

    def __init__(self, producer: RoutedProducer, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.topic = topic
        self.stop = threading.Event()
        self.delivered: list[int] = []
        self.failed: list[Any] = []
        self.error: BaseException | None = None

    def report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append(int(msg.value()))
        else:
            self.failed.append(err)

    def run(self) -> None:
        try:
            seq = 0
            while not self.stop.is_set() and seq < 2000:
                self.producer.produce(
                    self.topic, str(seq).encode(), f"k{seq % KEYS}".encode(), on_delivery=self.report
                )
                seq += 1
                self.producer.poll(0.005)
            self.producer.flush(30)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def test_old_cluster_messages_landing_late_are_read_before_the_new_clusters(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[[Sequence[Rule]], Path],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    a, b = two_clusters
    topic = unique("inflight")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    everything_on_a = [rule("all", "use cluster A", isGlobal=True)]
    conf = make_config([rule("move", "use cluster A", topic=topic), *everything_on_a])
    producer = closing(
        RoutedProducer(
            {
                "kbear.config": str(conf),
                "enable.idempotence": True,  # retries keep the order per partition
                "retry.backoff.ms": 400,
                "retry.backoff.max.ms": 400,
                "linger.ms": 5,
            }
        )
    )
    consumer = closing(
        RoutedConsumer(
            {
                "kbear.config": str(conf),
                "group.id": unique("g"),
                **FAST_GROUP,
                "kbear.switch.drain.idle.ms": 800,
            }
        )
    )
    consumer.subscribe([topic])
    read: list[int] = []

    def consume_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            read.extend(int(m.value()) for m in consumer.consume(100, 0.05) if m.error() is None)

    writer = Writer(producer, topic)
    writer.start()
    consume_for(1.5)
    assert read, "nothing read on A before the move"
    rewrite_rules(conf, [rule("move", "use cluster B", topic=topic), *everything_on_a])
    assert consumer.router.reload()
    consume_for(0.3)  # the consumer drains A while the producer still writes there
    # the producer's next requests to A fail (retriable): its last messages for A
    # reach A's log about 2 s after it moved, while it flushes A
    a.push_request_errors(PRODUCE_API, [KafkaError.NOT_ENOUGH_REPLICAS] * 5)
    assert producer.router.reload()
    consume_for(4.0)
    writer.stop.set()
    writer.join(30)
    assert writer.error is None and not writer.failed
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not set(writer.delivered) <= set(read):
        consume_for(0.2)
    missing = sorted(set(writer.delivered) - set(read))
    assert consumer.routes()[topic].cluster_id == "B"
    assert producer.route(topic).cluster_id == "B"
    assert missing == [], f"{len(missing)} delivered messages never read, first {missing[:10]}"
    last: dict[int, int] = {}
    breaks = []
    for seq in read:
        key = seq % KEYS
        if seq < last.get(key, -1):
            breaks.append(seq)
        last[key] = max(seq, last.get(key, -1))
    assert breaks == [], f"per-key order broken at {breaks[:10]}"
