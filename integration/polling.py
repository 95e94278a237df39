"""Threads that time the calls of a consumer while something else happens, for the
tests of ``poll()``'s bound (``tests/consumer/test_poll_bound.py``,
``integration/test_poll_bound.py``): one polls in a loop, one asks from another thread."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import TopicPartition


class Poller(threading.Thread):
    """``poll(0.1)`` in a loop until stopped; what it read and its longest call."""

    def __init__(self, consumer: Any, sink: list[tuple[bytes, int]]) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer
        self.sink = sink
        self.stop = threading.Event()
        self.longest = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                start = time.monotonic()
                msg = self.consumer.poll(0.1)
                self.longest = max(self.longest, time.monotonic() - start)
                if msg is not None and msg.error() is None:
                    self.sink.append((msg.key(), int(msg.value())))
        except BaseException as exc:  # surfaced by the test
            self.error = exc


class Asker(threading.Thread):
    """``assignment()`` and ``position()`` of each consumer every 50 ms; the longest."""

    def __init__(self, consumers: list[Any], topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.consumers = consumers
        self.parts = [TopicPartition(topic, p) for p in range(partitions)]
        self.stop = threading.Event()
        self.longest = 0.0
        self.calls = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.05):
                for consumer in self.consumers:
                    start = time.monotonic()
                    consumer.assignment()
                    consumer.position(self.parts)
                    self.longest = max(self.longest, time.monotonic() - start)
                    self.calls += 1
        except BaseException as exc:  # surfaced by the test
            self.error = exc
