"""The confluent-kafka reading and committing calls of a ClientBalancedConsumer.

:class:`ConsumerCalls` is a base class: each call goes to the routed consumer
underneath (:class:`~kbear.consumer.AssignedConsumer`), whose partition
calls reach each partition's cluster under logical topic names; ``poll`` and
``consume`` first run the owner's periodic work when due (``_tick``, which never
waits on a broker).
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message, TopicPartition

from kbear.consumer import AssignedConsumer


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

    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """As ``Consumer.commit``: to the group on each partition's cluster, without joining it."""
        return self._consumer.commit(message, offsets, asynchronous)

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """As ``Consumer.committed`` (logical topic names, each asked of its cluster)."""
        return self._consumer.committed(partitions, timeout)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """As ``Consumer.position``."""
        return self._consumer.position(partitions)

    def assignment(self) -> list[TopicPartition]:
        """The registered partitions as TopicPartitions (logical names)."""
        return self._consumer.assignment()

    def store_offsets(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None
    ) -> None:
        """As ``Consumer.store_offsets``."""
        self._consumer.store_offsets(message, offsets)

    def seek(self, partition: TopicPartition) -> None:
        """As ``Consumer.seek`` (a registered partition, logical name)."""
        self._consumer.seek(partition)

    def pause(self, partitions: list[TopicPartition]) -> None:
        """As ``Consumer.pause``."""
        self._consumer.pause(partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        """As ``Consumer.resume``."""
        self._consumer.resume(partitions)

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """As ``Consumer.get_watermark_offsets``."""
        return self._consumer.get_watermark_offsets(partition, timeout, cached)

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        """As ``Consumer.offsets_for_times``."""
        return self._consumer.offsets_for_times(partitions, timeout)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """As ``RoutedConsumer.list_topics``."""
        return self._consumer.list_topics(topic, timeout)

    def consumer_group_metadata(self) -> Any:
        """As ``RoutedConsumer.consumer_group_metadata`` (one cluster only)."""
        return self._consumer.consumer_group_metadata()

    def on_route_change(self, callback: Any) -> None:
        """As ``RoutedConsumer.on_route_change``."""
        self._consumer.on_route_change(callback)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """As ``Consumer.set_sasl_credentials`` (every cluster's client)."""
        self._consumer.set_sasl_credentials(username, password)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
