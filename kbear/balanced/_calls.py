"""The confluent-kafka reading and committing calls of a ClientBalancedConsumer.

:class:`ConsumerCalls` is a base class: each call goes to the routed consumer
underneath (:class:`~kbear.consumer.AssignedConsumer`), whose partition
calls reach each partition's cluster under logical topic names (commits go to
the group there, which is never joined; :func:`kbear._delegate.delegate`: the
same signatures and docstrings); ``poll`` and
``consume`` first run the owner's periodic work when due (``_tick``, which never
waits on a broker).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message

from kbear._delegate import delegate
from kbear.consumer import AssignedConsumer, RoutedConsumer


class ConsumerCalls:
    """The confluent-kafka half of :class:`~kbear.ClientBalancedConsumer` (a base class)."""

    _consumer: AssignedConsumer
    #: monotonic time at which ``_tick`` is due
    _next: float

    def _tick(self) -> None:
        """The owner's periodic work (never waits on a broker)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the consumer (the owner's)."""
        raise NotImplementedError

    def poll(self, timeout: float | None = None) -> Message | None:
        """As ``Consumer.poll``; runs the periodic reconciliation when due (never blocks on it)."""
        if time.monotonic() >= self._next:
            self._tick()
        return self._consumer.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """As ``Consumer.consume``; runs the periodic reconciliation when due."""
        if time.monotonic() >= self._next:
            self._tick()
        return self._consumer.consume(num_messages, timeout)

    commit = delegate("_consumer", RoutedConsumer.commit)
    committed = delegate("_consumer", RoutedConsumer.committed)
    position = delegate("_consumer", RoutedConsumer.position)
    assignment = delegate("_consumer", RoutedConsumer.assignment)
    store_offsets = delegate("_consumer", RoutedConsumer.store_offsets)
    seek = delegate("_consumer", RoutedConsumer.seek)
    pause = delegate("_consumer", RoutedConsumer.pause)
    resume = delegate("_consumer", RoutedConsumer.resume)
    get_watermark_offsets = delegate("_consumer", RoutedConsumer.get_watermark_offsets)
    offsets_for_times = delegate("_consumer", RoutedConsumer.offsets_for_times)
    list_topics = delegate("_consumer", RoutedConsumer.list_topics)
    consumer_group_metadata = delegate("_consumer", RoutedConsumer.consumer_group_metadata)
    on_route_change = delegate("_consumer", RoutedConsumer.on_route_change)
    set_sasl_credentials = delegate("_consumer", RoutedConsumer.set_sasl_credentials)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
