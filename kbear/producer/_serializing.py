"""RoutedSerializingProducer: confluent-kafka's ``SerializingProducer``, routed (issue #28).

A :class:`~kbear.RoutedProducer` whose ``produce`` serializes the key and value
first, with the serializers of the cluster the topic's route names
(:class:`~kbear._serdes.ClusterSerdes`): the route's cluster and its send
function are read together (the route table's ``bound``), so a message
serialized for a cluster's Schema Registry is sent to that cluster, also while
a move is applied from another thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kbear._base import NO_CONFIG, weak_method
from kbear._identity import Client
from kbear._serdes import open_serdes
from kbear.config import KBearConfig
from kbear.producer._facade import RoutedProducer
from kbear.router import Router

__all__ = ["RoutedSerializingProducer"]


class RoutedSerializingProducer(RoutedProducer):
    """A ``confluent_kafka.SerializingProducer`` that sends each topic to the cluster
    its route names, serialized for that cluster.

    Args:
        config: a :class:`~kbear.RoutedProducer` configuration plus
            confluent-kafka's serializer settings: ``key.serializer`` /
            ``value.serializer`` (``Callable(obj, SerializationContext) -> bytes``,
            or :func:`kbear.schema_registry.per_cluster`), or their builders
            ``key.serializer.builder`` / ``value.serializer.builder``
            (confluent-kafka's ``SerializerBuilder``; the serializers built are
            closed by :meth:`close`).
        router, client, topics, **kwargs: as :class:`~kbear.RoutedProducer`.

    Raises:
        ValueError: a serializer and its builder are both given (confluent-kafka's
            words), and what :class:`~kbear.RoutedProducer` raises.

    The ``SerializationContext`` a serializer receives carries the topic name the
    application produced to (a remapped topic's logical name), the field and the
    headers, as confluent-kafka's. A ``per_cluster`` serializer is built once per
    cluster with that cluster's Schema Registry (``schema.registry.*`` in its
    ``clusters.yaml`` meta), so schema ids are those of the registry of the
    cluster the message is sent to; a serializer given as is serves every
    cluster. Serializers that resolve subjects through the Kafka cluster id
    (``AssociatedNameStrategy``) are told the id of the message's cluster.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        topics: Iterable[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._serdes, rest = open_serdes(config, "serializer", self, weak_method(self._kafka_id))
        try:
            super().__init__(rest, router=router, client=client, topics=topics, **kwargs)
        except BaseException:
            self._serdes.close()
            raise

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        super()._on_config_change(old, new)
        self._serdes.refresh()

    def produce(
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
        **kwargs: Any,
    ) -> None:
        """Serialize the key and value, then produce the message to ``topic`` on the
        cluster of its route (confluent-kafka's ``SerializingProducer.produce``).

        Args:
            topic: the topic (the name the serializers see).
            key, value: the objects the serializers take (sent as is without one).
            partition, on_delivery, timestamp, headers: as confluent-kafka.
            **kwargs: ``deliver_after`` / ``deliver_at`` with ``kbear.delay.enable``.

        Raises:
            RuntimeError: the producer is closed (before the serializers run).
            TypeError: ``topic`` is not a str (before the serializers run).
            KeySerializationError, ValueSerializationError: a serializer failed
                (its exception inside, as confluent-kafka).
            NoRouteError, BufferError, KafkaException: as :meth:`RoutedProducer.produce`.
        """
        state = self._state
        if state.closed:
            raise RuntimeError("Producer has been closed")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        pair = None if state.pending or state.txn_open else self._table.bound.get(topic)
        cluster_id, send = pair if pair is not None else self._sender(topic)
        key, value = self._serdes.apply(cluster_id, topic, headers, key, value)
        if kwargs or state.features:  # kbear.delay.enable / kbear.chunking.enable
            call = dict(partition=partition, on_delivery=on_delivery, timestamp=timestamp, headers=headers)
            for one in self._prepare((value, key), {**call, **kwargs}):
                send(**one)
            return
        if partition == -1 and on_delivery is None and not timestamp and headers is None:
            send(value, key)  # a plain call: the cluster client's produce as is
        else:
            send(value, key, partition, on_delivery=on_delivery, timestamp=timestamp, headers=headers)

    def close(self, timeout: float | None = None) -> bool:
        """Close the producer (:meth:`RoutedProducer.close`), then the serializers it
        built: the ``per_cluster`` ones and those of ``*.serializer.builder``
        (serializers given ready-made stay the application's). Later calls do nothing.

        Returns:
            True.
        """
        result = super().close(timeout)
        self._serdes.close()
        return result
