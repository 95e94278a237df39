"""Load while something changes: keyed traffic through a producer and a consumer
(:class:`Traffic`), and how long an asyncio event loop was held
(:class:`LoopWatch`). Public through :mod:`kbear.testing`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from typing import Any

__all__ = ["LoopWatch", "Traffic"]


class LoopWatch:
    """How long the running asyncio event loop was held, while it runs.

    A task sleeps ``interval`` seconds again and again; :attr:`worst` is the
    longest it woke up late, in seconds: the longest time something held the
    loop (a blocking call in a coroutine, a slow callback). Create it inside a
    coroutine (it needs the running loop); :meth:`stop` ends the task.

    Args:
        interval: the task's sleep, in seconds (default 0.01).

    Raises:
        RuntimeError: created outside a running event loop.
    """

    def __init__(self, interval: float = 0.01) -> None:
        self.worst = 0.0
        self._interval = interval
        self._due = time.perf_counter() + interval
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            self._due = time.perf_counter() + self._interval
            await asyncio.sleep(self._interval)
            self.worst = max(self.worst, time.perf_counter() - self._due)

    async def stop(self) -> float:
        """End the watch; returns :attr:`worst` (seconds), counting a wake-up
        that is late now and has not run yet."""
        self.worst = max(self.worst, time.perf_counter() - self._due)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.worst


class Traffic:
    """Keyed messages produced at a steady rate and consumed, each side in a thread
    of its own, while a test changes something (a move, a failover).

    Message ``i`` has value ``m<i>`` and key ``k<i % keys>`` (bytes). Values
    delivered (delivery report without error) and messages consumed (``poll()``
    results without error) are recorded. Use it as a context manager, or call
    :meth:`start` and :meth:`stop`.

    Args:
        producer: a ``confluent_kafka.Producer`` or a routed producer.
        consumer: a consumer already subscribed (or assigned) to ``topic``.
        topic: the topic to produce to.
        keys: how many distinct keys (default 31).
        interval: seconds between two ``produce()`` calls (default 0.002: at most
            about 500 messages/s).
        limit: at most this many messages (default 200,000).
        produce_for: at most this long producing, seconds (default 90).

    The threads never run past ``produce_for`` plus :meth:`stop`'s timeouts.
    """

    def __init__(
        self,
        producer: Any,
        consumer: Any,
        topic: str,
        *,
        keys: int = 31,
        interval: float = 0.002,
        limit: int = 200_000,
        produce_for: float = 90.0,
    ) -> None:
        self.producer, self.consumer, self.topic = producer, consumer, topic
        self.delivered: list[bytes] = []
        self.consumed: list[Any] = []
        self._keys, self._interval, self._limit, self._produce_for = keys, interval, limit, produce_for
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, name="traffic-produce", daemon=True),
            threading.Thread(target=self._consume, name="traffic-consume", daemon=True),
        ]

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append(msg.value())

    def _produce(self) -> None:
        deadline = time.monotonic() + self._produce_for
        i = 0
        while not self._stop_producing.is_set() and time.monotonic() < deadline and i < self._limit:
            key = f"k{i % self._keys}".encode()
            self.producer.produce(self.topic, f"m{i}".encode(), key, on_delivery=self._report)
            self.producer.poll(0)
            i += 1
            time.sleep(self._interval)
        self.producer.flush(30)

    def _consume(self) -> None:
        while not self._stop_consuming.is_set():
            msg = self.consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                self.consumed.append(msg)

    def start(self) -> Traffic:
        """Start both threads; returns self."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Stop producing (the producer is flushed, up to 30 s), then consume until
        every delivered value was read or ``timeout`` seconds passed, then stop."""
        self._stop_producing.set()
        self._threads[0].join(timeout)
        deadline = time.monotonic() + timeout
        while self.lost and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop_consuming.set()
        self._threads[1].join(timeout)

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def values(self) -> list[bytes]:
        """The values consumed, in the order read."""
        return [m.value() for m in list(self.consumed)]

    @property
    def lost(self) -> set[bytes]:
        """Values delivered and never consumed."""
        return set(self.delivered) - set(self.values)

    @property
    def duplicates(self) -> int:
        """How many messages were consumed more than once (each extra read counts)."""
        return sum(n - 1 for n in Counter(self.values).values())

    @property
    def order_breaks(self) -> int:
        """Per key, how many first reads came after a later message of that key."""
        last: dict[bytes, int] = {}
        seen: set[bytes] = set()
        breaks = 0
        for msg in list(self.consumed):
            value = msg.value()
            if value in seen:
                continue
            seen.add(value)
            index = int(value[1:])
            if index < last.get(msg.key(), -1):
                breaks += 1
            last[msg.key()] = max(index, last.get(msg.key(), -1))
        return breaks
