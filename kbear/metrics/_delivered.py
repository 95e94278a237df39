"""Counting the messages a consumer cluster client hands out (private).

``kbear_consumer_messages_total`` counts the messages ``poll()`` and ``consume()``
return, per topic: what the application receives. librdkafka's ``rxmsgs`` (now
``kbear_consumer_fetched_messages_total``) counts records fetched from the
brokers, and a record fetched again after a pause, a seek or a rebalance counts
again there (up to 9 % more than the application received in the demo, issue
#25). Only cluster clients built while kbear's metrics are on are counted
(:class:`CountingConsumer` stands in for confluent-kafka's ``Consumer``); without
metrics, nothing is counted and nothing is slower. With kbear's C extension
(:mod:`kbear._compiled`) the count is compiled (``kbear._cdispatch.Counted``,
kbear/_counted.c): a Python frame per ``poll()`` cost the calling thread about
0.6 us per message, as much again as ``poll()`` itself on one cluster.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer

from kbear._compiled import EXTENSION


class Delivered:
    """Messages handed out by one cluster client, by (physical) topic; thread-safe."""

    __slots__ = ("_lock", "counts")

    def __init__(self) -> None:
        #: physical topic -> messages handed out; changed by :meth:`add` under the
        #: lock, or by the compiled count with the GIL held (never mid-update)
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, messages: Any) -> None:
        """Count the messages of ``messages`` (a list, or one message) that carry no
        error (an error event is no message)."""
        batch = messages if isinstance(messages, list) else [messages]
        with self._lock:
            counts = self.counts
            for msg in batch:
                if msg.error() is None:
                    topic = msg.topic()
                    counts[topic] = counts.get(topic, 0) + 1

    def totals(self) -> dict[str, int]:
        """Physical topic -> messages handed out since the client was built."""
        with self._lock:
            return dict(self.counts)


class CountingConsumer(Consumer):
    """confluent-kafka's ``Consumer``, counting what :meth:`poll` and :meth:`consume`
    return in ``delivered``; every argument and answer passes through unchanged."""

    def __init__(self, conf: dict[str, Any], delivered: Delivered) -> None:
        super().__init__(conf)
        self.kbear_delivered = delivered
        if EXTENSION is not None:
            # compiled counts, as instance attributes over the methods below
            vars(self).update(
                poll=EXTENSION.Counted(super().poll, delivered.counts),
                consume=EXTENSION.Counted(super().consume, delivered.counts),
            )

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        msg = super().poll(*args, **kwargs)
        if msg is not None:
            self.kbear_delivered.add(msg)
        return msg

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        msgs = super().consume(*args, **kwargs)
        if msgs:
            self.kbear_delivered.add(msgs)
        return msgs
