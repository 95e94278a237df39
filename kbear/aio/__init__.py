"""asyncio clients over routed topics: :class:`RoutedAIOProducer` and
:class:`RoutedAIOConsumer`, twins of ``confluent_kafka.aio.AIOProducer`` /
``AIOConsumer``.

They drive the blocking :class:`kbear.RoutedProducer` / :class:`kbear.RoutedConsumer`
from an executor, so a topic move is the blocking clients' own switch (drain,
commits, starts), never a second copy of it, and never runs on the event loop.

- ``_calls``: executor calls in a copy of the caller's context, callbacks on the
  loop, re-entrant calls from callbacks;
- ``_consumer``: :class:`RoutedAIOConsumer`;
- ``_producer``: :class:`RoutedAIOProducer`; ``_batch``: its message buffer;
- ``_notify``: what both share (executor, router, ``async with``), ``on_route_change``
  callbacks on the loop;
- ``_serializing`` / ``_deserializing``: :class:`RoutedAsyncSerializingProducer` /
  :class:`RoutedAsyncDeserializingConsumer`, twins of confluent-kafka's
  ``AsyncSerializingProducer`` / ``AsyncDeserializingConsumer``, with
  ``_serdes``: their serdes per cluster.
"""

from kbear.aio._consumer import RoutedAIOConsumer
from kbear.aio._deserializing import RoutedAsyncDeserializingConsumer
from kbear.aio._producer import RoutedAIOProducer
from kbear.aio._serializing import RoutedAsyncSerializingProducer

__all__ = [
    "RoutedAIOConsumer",
    "RoutedAIOProducer",
    "RoutedAsyncDeserializingConsumer",
    "RoutedAsyncSerializingProducer",
]
