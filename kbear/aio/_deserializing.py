"""RoutedAsyncDeserializingConsumer: ``confluent_kafka.aio.AsyncDeserializingConsumer``,
routed (issue #28).

Responsible for: deserializing on the event loop each message a routed consumer
read in an executor thread, with the serdes of the cluster it was read from.
The blocking :class:`~kbear.RoutedDeserializingConsumer` knows that cluster for
every message (its fast path's one cluster, or the poll loop's ``tap``);
:class:`_Engine` hands it out with the message, so the tail of the old cluster
read during a move is decoded with the old cluster's registry.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from typing import Any

from confluent_kafka.error import ConsumeError

from kbear._base import NO_CONFIG
from kbear._clients import Deadline
from kbear._identity import Client
from kbear.aio._consumer import RoutedAIOConsumer
from kbear.aio._serdes import Refreshing, SerdesClient, asyncinit
from kbear.consumer import RoutedDeserializingConsumer
from kbear.router import Router

__all__ = ["RoutedAsyncDeserializingConsumer"]

Read = tuple[Any, str]  # (message or None, id of the cluster it was read from)


class _Engine(Refreshing, RoutedDeserializingConsumer):
    """The blocking routed consumer a RoutedAsyncDeserializingConsumer drives (given
    no deserializers: it hands out raw messages with their cluster)."""

    def poll_from(self, timeout: float | None) -> Read:
        """(the next message or None, the cluster it was read from)."""
        return self._poll_from(timeout)

    def kafka_cluster_id(self, cluster_id: str) -> str:
        """The Kafka cluster id (KIP-78) of cluster ``cluster_id`` (blocks up to 60 s)."""
        return self._kafka_id(cluster_id)

    def consume_from(self, num_messages: int = 1, timeout: float | None = -1) -> list[Read]:
        """Up to ``num_messages`` (message, cluster) pairs: reading one cluster, its
        client's own ``consume``; else waits up to ``timeout`` seconds (None or -1:
        infinite) for the first message, then takes what is ready. An infinite wait
        returns a message, as confluent-kafka's ``Consumer.consume`` (it polls again
        until one comes): a routed poll that came back empty (nothing subscribed yet:
        after about a second) is repeated.

        Raises:
            ValueError: ``num_messages`` out of range (confluent-kafka's words).
        """
        if not isinstance(num_messages, int) or not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        fast = self._fast_batch
        if fast is not None:  # one cluster: its client's own consume
            cluster_id = fast[1]
            return [(m, cluster_id) for m in fast[0](num_messages, -1 if timeout is None else timeout)]
        deadline = Deadline(timeout)
        out: list[Read] = []
        while len(out) < num_messages:
            msg, cluster_id = self._poll_from(0.0 if out else deadline.as_arg())
            if msg is not None:
                out.append((msg, cluster_id))
            elif out or deadline.expired():  # an infinite poll that returned None: again
                break
        return out


@asyncinit
class RoutedAsyncDeserializingConsumer(SerdesClient, RoutedAIOConsumer):
    """A routed ``confluent_kafka.aio.AsyncDeserializingConsumer``: each message
    deserialized for the cluster it was read from. Built with ``await``, as
    confluent-kafka's: ``consumer = await RoutedAsyncDeserializingConsumer(conf)``.

    Args:
        conf: a :class:`RoutedAIOConsumer` configuration plus
            confluent-kafka's ``key.deserializer`` / ``value.deserializer`` (a
            callable ``(bytes, SerializationContext) -> obj``, an asyncio
            deserializer such as ``AsyncAvroDeserializer``, or
            :func:`kbear.schema_registry.per_cluster`, whose factory gets the
            cluster's ``AsyncSchemaRegistryClient``) or their builders
            ``key.deserializer.builder`` / ``value.deserializer.builder`` (closed by
            :meth:`close`). Not modified.
        max_workers, executor, router, client: as :class:`RoutedAIOConsumer`.

    Raises:
        ValueError: a deserializer and its builder are both given (confluent-kafka's
            words); ``kbear.ack.mode=individual`` (as
            :class:`~kbear.RoutedDeserializingConsumer`); what
            :class:`RoutedAIOConsumer` raises.

    The ``SerializationContext`` carries the logical topic name, the field and the
    headers. ``poll()`` and ``consume()`` deserialize as confluent-kafka's
    (``consume()`` returns messages carrying an error as they are).
    """

    ENGINE = _Engine

    async def _init(
        self,
        conf: Mapping[str, Any] = NO_CONFIG,
        *,
        max_workers: int = 100,
        executor: concurrent.futures.Executor | None = None,
        router: Router | None = None,
        client: Client | None = None,
    ) -> None:
        await self._open_serdes(
            conf,
            "deserializer",
            lambda rest: RoutedAIOConsumer.__init__(
                self, rest, max_workers, executor, router=router, client=client
            ),
        )

    # asyncinit awaits __init__: a coroutine function, as confluent-kafka's
    __init__ = _init

    async def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the consumer (:meth:`RoutedAIOConsumer.close`), then the deserializers
        it built: the ``per_cluster`` ones and those of ``*.deserializer.builder``
        (ready-made ones stay the application's). Later calls do nothing more."""
        if not self._closed:
            await super().close(*args, **kwargs)
        await self._serdes.close()

    def _keep(self, result: Read | list[Read]) -> None:
        """Keep the (message, cluster) pairs a cancelled poll() or consume() read."""
        if isinstance(result, list):
            self._kept.extend(result)
        elif result[0] is not None:
            self._kept.append(result)

    async def poll(self, timeout: float = -1) -> Any:
        """Consume one message and deserialize its key and value with the serdes of
        the cluster it was read from, as ``AsyncDeserializingConsumer.poll``.

        Args:
            timeout: maximum time to block in seconds (-1: infinite).

        Returns:
            A ``Message`` whose ``key()`` / ``value()`` (and ``deserialized_key()`` /
            ``deserialized_value()``) are the deserialized objects, or None on timeout.

        Raises:
            ConsumeError: the message is an error (``kafka_message`` holds it).
            KeyDeserializationError, ValueDeserializationError: a deserializer failed
                (its exception and the message inside).
            RuntimeError: the consumer is closed.
        """
        msg, cluster_id = await self._read(self._engine.poll_from, None, timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        return await self._deserialize(msg, cluster_id)

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Consume up to ``num_messages`` messages and deserialize them, as
        ``AsyncDeserializingConsumer.consume``: messages carrying an error are
        returned as they are. Reading one cluster, its client's own ``consume`` (waits
        up to ``timeout`` seconds, -1: infinite); over several, waits up to ``timeout``
        for the first message, then takes those ready (as ``RoutedConsumer.consume``).
        With ``timeout=-1`` it returns once it has a message, as confluent-kafka's,
        also while nothing is subscribed yet.

        Raises:
            KeyDeserializationError, ValueDeserializationError: a deserializer failed.
            ValueError: ``num_messages`` out of range.
            RuntimeError: the consumer is closed.
        """
        reads = await self._read(self._engine.consume_from, num_messages, num_messages, timeout)
        out = []
        for msg, cluster_id in reads:
            out.append(msg if msg.error() is not None else await self._deserialize(msg, cluster_id))
        return out

    async def _deserialize(self, msg: Any, cluster_id: str) -> Any:
        """``msg`` with its key and value deserialized for ``cluster_id`` (key first, as
        confluent-kafka's)."""
        key, value = await self._serdes.apply(
            cluster_id, msg.topic(), msg.headers(), msg.key(), msg.value(), msg
        )
        msg.set_key(key)
        msg.set_value(value)
        return msg
