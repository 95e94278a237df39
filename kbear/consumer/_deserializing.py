"""RoutedDeserializingConsumer: confluent-kafka's ``DeserializingConsumer``, routed (issue #28).

A :class:`~kbear.RoutedConsumer` whose ``poll`` deserializes each message's key
and value with the deserializers of the cluster it was read from
(:class:`~kbear._serdes.ClusterSerdes`). Which cluster that is: with one cluster
read and nothing for kbear to do per message, the cluster whose client's own
``poll`` the poll loop bound (the fast path, :attr:`PollLoop.pinned
<kbear.consumer._polling.PollLoop>`); otherwise the poll loop's ``tap`` names
the cluster client each message came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.error import ConsumeError

from kbear._base import NO_CONFIG, weak_method
from kbear._identity import Client
from kbear._serdes import kafka_cluster_id, open_serdes
from kbear.config import KBearConfig
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._facade import RoutedConsumer
from kbear.router import Router

__all__ = ["RoutedDeserializingConsumer"]


class _Source:
    """The cluster of the last message the poll loop returned (its ``tap``)."""

    __slots__ = ("cluster",)

    def __init__(self) -> None:
        self.cluster = ""

    def tap(self, entry: ClusterClient, msg: Any) -> None:
        self.cluster = entry.cluster_id


class RoutedDeserializingConsumer(RoutedConsumer):
    """A ``confluent_kafka.DeserializingConsumer`` reading each topic from the cluster
    its route names, each message decoded for the cluster it was read from.

    Args:
        config: a :class:`~kbear.RoutedConsumer` configuration plus
            confluent-kafka's deserializer settings: ``key.deserializer`` /
            ``value.deserializer`` (``Callable(bytes, SerializationContext) -> obj``,
            or :func:`kbear.schema_registry.per_cluster`), or their builders
            ``key.deserializer.builder`` / ``value.deserializer.builder``
            (confluent-kafka's ``DeserializerBuilder``; closed by :meth:`close`).
        router, client, **kwargs: as :class:`~kbear.RoutedConsumer`.

    Raises:
        ValueError: a deserializer and its builder are both given (confluent-kafka's
            words); ``kbear.ack.mode=individual`` (not supported with
            deserializers yet); and what :class:`~kbear.RoutedConsumer` raises.

    The ``SerializationContext`` a deserializer receives carries the logical topic
    name (what the application subscribed to), the field and the headers. A
    ``per_cluster`` deserializer is built once per cluster with that cluster's
    Schema Registry (``schema.registry.*`` in its ``clusters.yaml`` meta): a
    message read from the old cluster during a move is decoded with the old
    cluster's registry, one from the new cluster with the new one's.
    ``consume()`` raises ``NotImplementedError``, as confluent-kafka's.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        self._fast: tuple[Callable[..., Any], str] | None = None
        #: the one cluster's own ``consume`` with its cluster id (kbear.aio's consume)
        self._fast_batch: tuple[Callable[..., Any], str] | None = None
        self._source = _Source()
        self._serdes, rest = open_serdes(config, "deserializer", self, weak_method(self._kafka_id))
        try:
            if isinstance(rest, Mapping) and str(rest.get("kbear.ack.mode", "")).lower() == "individual":
                raise ValueError(
                    "RoutedDeserializingConsumer: kbear.ack.mode=individual is not supported with "
                    "deserializers yet; use a RoutedConsumer and deserialize in the application"
                )
            super().__init__(rest, router=router, client=client, **kwargs)
            self._loop.tap = self._source.tap
        except BaseException:
            self._serdes.close()
            raise

    def _kafka_id(self, cluster_id: str) -> str:
        """The Kafka cluster id of ``cluster_id`` (:func:`~kbear._serdes.kafka_cluster_id`)."""
        entry = self._registry.get(cluster_id)
        return kafka_cluster_id(None if entry is None else entry.consumer, cluster_id)

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        super()._on_config_change(old, new)
        self._serdes.refresh()

    def _store_fast_paths(self, poll: Callable[..., Any] | None, consume: Callable[..., Any] | None) -> None:
        """Keep the one cluster's own ``poll`` (and ``consume``) with its cluster id (the fast path);
        several clusters' turn taking is not kept: the poll loop names each
        message's cluster."""
        pinned = self._loop.pinned
        self._fast = None if poll is None or pinned is None else (poll, pinned.cluster_id)
        self._fast_batch = None if consume is None or pinned is None else (consume, pinned.cluster_id)

    def _poll_from(self, timeout: float | None) -> tuple[Any, str]:
        """(the next message or None, the id of the cluster it was read from)."""
        fast = self._fast
        if fast is not None:
            return fast[0](timeout), fast[1]
        msg = self._loop.poll(timeout)
        return msg, self._source.cluster

    def poll(self, timeout: float | None = -1) -> Any:
        """Consume one message and deserialize its key and value
        (confluent-kafka's ``DeserializingConsumer.poll``).

        Args:
            timeout: maximum time to block in seconds (-1: infinite).

        Returns:
            A ``Message`` whose ``key()`` / ``value()`` (and ``deserialized_key()``
            / ``deserialized_value()``) are the deserialized objects, or None on timeout.

        Raises:
            ConsumeError: the message is an error (``kafka_message`` holds it).
            KeyDeserializationError, ValueDeserializationError: a deserializer
                failed (its exception and the message inside, as confluent-kafka).
            RuntimeError: the consumer is closed.
        """
        msg, cluster_id = self._poll_from(timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        key, value = self._serdes.apply(cluster_id, msg.topic(), msg.headers(), msg.key(), msg.value(), msg)
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        """Not implemented, as confluent-kafka's ``DeserializingConsumer.consume``: use :meth:`poll`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Close the consumer (:meth:`RoutedConsumer.close`), then the deserializers it
        built: the ``per_cluster`` ones and those of ``*.deserializer.builder``
        (deserializers given ready-made stay the application's). Later calls do nothing."""
        super().close()
        self._serdes.close()
