"""RoutedAsyncSerializingProducer: ``confluent_kafka.aio.AsyncSerializingProducer``, routed (issue #28).

Responsible for: serializing on the event loop (confluent-kafka's asyncio serdes
are coroutines, its blocking ones run there too) for the cluster a message is
sent to, although batches are sent later from an executor thread where a move
may have changed the topic's cluster meanwhile.

How: ``produce()`` serializes at once with the serdes of the cluster the topic's
route names now (so serialization errors are raised by ``produce()``, as
confluent-kafka's), and the buffered message remembers that cluster and the
objects it came from. When its batch is sent, the route is read once in the
executor thread (:class:`_Engine`); the messages serialized for another cluster
are serialized again, on the loop, for the cluster the batch now goes to, and
only then handed to that cluster's client. No message carries a schema id of
another cluster's registry. A re-serialization that fails fails that message's
future (``KeySerializationError`` / ``ValueSerializationError``). Serdes that do
not depend on the cluster (no ``per_cluster``, no Kafka cluster id asked) are
never run twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka.error import ValueSerializationError
from confluent_kafka.serialization import SerializationError

from kbear._base import NO_CONFIG
from kbear._identity import Client
from kbear.aio._batch import Batch
from kbear.aio._calls import blocking_callback
from kbear.aio._producer import NO_HEADERS, RoutedAIOProducer
from kbear.aio._serdes import Refreshing, SerdesClient, asyncinit
from kbear.producer import RoutedProducer
from kbear.router import Router

__all__ = ["RoutedAsyncSerializingProducer"]

log = logging.getLogger("kbear.aio")

#: Key of a buffered message's dict: (cluster serialized for, key object, value object).
_ORIGIN = "kbear.origin"
#: Key of a buffered message's dict: the error its re-serialization raised.
_FAILED = "kbear.failed"


class _Engine(Refreshing, RoutedProducer):
    """The blocking routed producer a RoutedAsyncSerializingProducer drives."""

    def cluster_of(self, topic: str) -> str | None:
        """The cluster ``topic`` is sent to now (no I/O, no move applied), None when
        the topic has no route in use (first use, or a move unbound it)."""
        pair = self._table.bound.get(topic)
        return None if pair is None else pair[0]

    def send_batch_for(
        self, topic: str, prepare: Callable[[str], list[dict[str, Any]]], partition: int
    ) -> int:
        """``produce_batch`` of what ``prepare(cluster_id)`` returns, to that cluster
        (:meth:`RoutedProducer._produce_batch_for`)."""
        return self._produce_batch_for(topic, prepare, partition)

    def kafka_cluster_id(self, cluster_id: str) -> str:
        """The Kafka cluster id (KIP-78) of cluster ``cluster_id`` (blocks up to 60 s).

        Raises:
            SerializationError: no client of that cluster yet.
        """
        return self._kafka_id(cluster_id)


@asyncinit
class RoutedAsyncSerializingProducer(SerdesClient, RoutedAIOProducer):
    """A routed ``confluent_kafka.aio.AsyncSerializingProducer``: each message
    serialized for the cluster it is sent to. Built with ``await``, as
    confluent-kafka's: ``producer = await RoutedAsyncSerializingProducer(conf)``.

    Args:
        conf: a :class:`RoutedAIOProducer` configuration plus
            confluent-kafka's ``key.serializer`` / ``value.serializer`` (a callable
            ``(obj, SerializationContext) -> bytes``, an asyncio serializer such as
            ``AsyncAvroSerializer``, or :func:`kbear.schema_registry.per_cluster`,
            whose factory gets the cluster's ``AsyncSchemaRegistryClient``) or their
            builders ``key.serializer.builder`` / ``value.serializer.builder``
            (closed by :meth:`close`). Not modified.
        max_workers, executor, batch_size, buffer_timeout, router, client: as
            :class:`RoutedAIOProducer`.

    Raises:
        ValueError: a serializer and its builder are both given (confluent-kafka's
            words); what :class:`RoutedAIOProducer` raises.

    The ``SerializationContext`` carries the topic the application produced to
    (its logical name). A message is serialized by ``produce()`` for the cluster of
    the topic's route; if a move sends its batch to another cluster, it is
    serialized again for that one before it is sent (module docstring).
    """

    ENGINE = _Engine

    async def _init(
        self,
        conf: Mapping[str, Any] = NO_CONFIG,
        *,
        max_workers: int = 4,
        executor: concurrent.futures.Executor | None = None,
        batch_size: int = 1000,
        buffer_timeout: float = 1.0,
        router: Router | None = None,
        client: Client | None = None,
    ) -> None:
        await self._open_serdes(
            conf,
            "serializer",
            lambda rest: RoutedAIOProducer.__init__(
                self, rest, max_workers, executor, batch_size, buffer_timeout, router=router, client=client
            ),
        )
        #: the serdes depend on the cluster: a message moved to another is serialized again
        self._per_cluster = self._serdes.varies

    # asyncinit awaits __init__: a coroutine function, as confluent-kafka's
    __init__ = _init

    async def close(self) -> None:
        """Close the producer (:meth:`RoutedAIOProducer.close`), then the serializers it
        built: the ``per_cluster`` ones and those of ``*.serializer.builder``
        (ready-made ones stay the application's). Later calls do nothing more."""
        if not self._is_closed:
            await super().close()
        await self._serdes.close()

    async def produce(  # type: ignore[override]
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        timestamp: int = 0,
        headers: Any = None,
    ) -> asyncio.Future[Any]:
        """Serialize the key and value for the cluster of ``topic``'s route, then buffer
        the message, as ``AsyncSerializingProducer.produce``.

        Args:
            topic: the logical topic (the name the serializers see).
            key, value: the objects the serializers take (sent as is without one).
            partition: -1: the partitioner's choice.
            timestamp: ms since the epoch (0: now).
            headers: given to the serializers, then refused (as confluent-kafka's
                asyncio producer, whose batches cannot carry them).

        Returns:
            An ``asyncio.Future`` resolving to the delivered ``Message`` (topic: the
            logical name) or raising ``KafkaException`` (delivery failed),
            ``NoRouteError`` (the topic has no route), or ``KeySerializationError`` /
            ``ValueSerializationError`` (serializing again for the cluster a move
            sent the message to failed).

        Raises:
            RuntimeError: the producer is closed (before the serializers run).
            TypeError: ``topic`` is not a str (before the serializers run).
            KeySerializationError, ValueSerializationError: a serializer failed (its
                exception inside, as confluent-kafka).
            NotImplementedError: ``headers`` given.
        """
        if self._is_closed:
            raise RuntimeError("Producer has been closed")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        cluster_id = self._engine.cluster_of(topic)
        if cluster_id is None:  # first use (or unbound by a move): routed in the executor
            try:
                cluster_id = (await self._calls.call(self._engine.route, topic)).cluster_id
            except Exception as exc:  # NoRouteError: reported by the future, as RoutedAIOProducer
                failed: asyncio.Future[Any] = self._calls.loop.create_future()
                failed.set_exception(exc)
                return failed
        key_bytes, value_bytes = await self._serdes.apply(cluster_id, topic, headers, key, value)
        if headers is not None:
            raise NotImplementedError(NO_HEADERS)
        message: dict[str, Any] = {"value": value_bytes, "key": key_bytes}
        if timestamp:
            message["timestamp"] = timestamp
        if self._per_cluster:
            message[_ORIGIN] = (cluster_id, key, value)
        return await self._accept(topic, partition, message)

    # ------------------------------------------------------------------ send time (executor)

    def _send_batch(self, batch: Batch) -> None:
        topic, partition, _messages, _futures = batch
        if not self._per_cluster:
            super()._send_batch(batch)
            return
        failures: list[tuple[asyncio.Future[Any], BaseException]] = []
        self._engine.send_batch_for(topic, partial(self._prepare, batch, failures), partition)
        reports = self._buffer.reports
        for future, exc in failures:
            reports.append((future, exc, None))

    def _prepare(
        self,
        batch: Batch,
        failures: list[tuple[asyncio.Future[Any], BaseException]],
        cluster_id: str,
    ) -> list[dict[str, Any]]:
        """In the executor thread, the batch's cluster read: the messages to send there,
        those serialized for another cluster serialized again for this one (on the
        loop, this thread waiting); those that fail go to ``failures``."""
        topic, _partition, messages, futures = batch
        stale = [m for m in messages if m[_ORIGIN][0] != cluster_id]
        if stale:
            try:
                blocking_callback(self._calls.loop, self._reserialize)(topic, cluster_id, stale)
            except BaseException:  # cancelled with the loop: those messages fail below
                log.warning(
                    "kbear: serializing %d messages again for cluster %r failed", len(stale), cluster_id
                )
        ready = []
        for message, future in zip(messages, futures, strict=True):
            origin = message.pop(_ORIGIN)
            error = message.pop(_FAILED, None)
            if error is None and origin[0] != cluster_id:  # the loop stopped meanwhile
                error = ValueSerializationError(
                    SerializationError(
                        f"kbear: not serialized for cluster {cluster_id!r}: the event loop stopped"
                    )
                )
            if error is not None:
                failures.append((future, error))
            else:
                ready.append(message)
        return ready

    async def _reserialize(self, topic: str, cluster_id: str, messages: list[dict[str, Any]]) -> None:
        """On the loop: serialize ``messages`` again for ``cluster_id`` (a move)."""
        for message in messages:
            _old, key, value = message[_ORIGIN]
            try:
                message["key"], message["value"] = await self._serdes.apply(
                    cluster_id, topic, None, key, value
                )
            except Exception as exc:
                message[_FAILED] = exc
                continue
            message[_ORIGIN] = (cluster_id, key, value)
