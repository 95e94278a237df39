"""RoutedDeserializingShareConsumer: confluent-kafka's DeserializingShareConsumer, routed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Messages
from confluent_kafka.error import KeyDeserializationError, ValueDeserializationError

from kbear._base import NO_CONFIG, weak_method
from kbear._identity import Client
from kbear._serdes import CLUSTER_ID_TIMEOUT_S, open_serdes
from kbear.config import KBearConfig
from kbear.router import Router
from kbear.share._facade import RoutedShareConsumer


class RoutedDeserializingShareConsumer(RoutedShareConsumer):
    """A ``confluent_kafka.DeserializingShareConsumer`` over the clusters of its routes:
    a :class:`~kbear.RoutedShareConsumer` whose :meth:`poll` deserializes each
    record's key and value in place.

    Args:
        config: as :class:`~kbear.RoutedShareConsumer`, plus ``key.deserializer`` and
            ``value.deserializer``: callables ``(bytes, SerializationContext) -> obj``
            (confluent-kafka's ``StringDeserializer``, ``AvroDeserializer``...) or
            :func:`kbear.schema_registry.per_cluster` (one deserializer per cluster,
            built with that cluster's Schema Registry), or their builders
            ``key.deserializer.builder`` / ``value.deserializer.builder``; removed
            before the configuration reaches librdkafka.
        router, client, **kwargs: as :class:`~kbear.RoutedShareConsumer`.

    Raises:
        ValueError: a deserializer and its builder are both given (confluent-kafka's
            words); and what :class:`~kbear.RoutedShareConsumer` raises.

    As confluent-kafka's: the key is deserialized first, then the value; both
    are written back only if both succeed; a record that fails keeps its raw
    bytes and gets ``msg.error()`` set to a ``KafkaError._KEY_DESERIALIZATION`` or
    ``_VALUE_DESERIALIZATION`` error instead of raising (the rest of the batch is
    kept, and the record can still be acknowledged, e.g. ``REJECT``ed). The
    ``SerializationContext`` names the logical topic (the one subscribed to). A
    record is decoded with the deserializer of the cluster it was acquired from
    (during a move: the old cluster's registry for its records, the new one's
    for the new cluster's).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        merged: Any = config
        if isinstance(config, Mapping) or (config is NO_CONFIG and kwargs):
            merged = {**(config if isinstance(config, Mapping) else {}), **kwargs}
            kwargs = {}
        self._serdes, rest = open_serdes(merged, "deserializer", self, weak_method(self._kafka_id))
        #: the deserializers as configured (confluent-kafka's attribute names)
        self._key_deserializer, self._value_deserializer = self._serdes.configured
        try:
            super().__init__(rest, router=router, client=client, **kwargs)
        except BaseException:
            self._serdes.close()
            raise

    def _kafka_id(self, cluster_id: str) -> str:
        """The Kafka cluster id the deserializers ask for (:meth:`ShareClusters.kafka_cluster_id
        <kbear.share._clusters.ShareClusters.kafka_cluster_id>`)."""
        return self._clusters.kafka_cluster_id(cluster_id, CLUSTER_ID_TIMEOUT_S)

    def poll(self, timeout: float = -1) -> Messages:
        """A batch of records as :meth:`RoutedShareConsumer.poll`, each record's key
        and value deserialized in place (see the class docstring).

        Raises:
            TypeError: a record has no topic (and what :meth:`RoutedShareConsumer.poll` raises).
        """
        messages = super().poll(timeout)
        for msg in messages:
            if msg.error() is None:  # broker errors carry no payload
                self._deserialize(msg, self._acks.cluster_of(msg) or "")
        return messages

    def _on_config_change(self, old: KBearConfig, new: KBearConfig) -> None:
        super()._on_config_change(old, new)
        self._serdes.refresh()

    def _deserialize(self, msg: Message, cluster_id: str) -> None:
        """Deserialize ``msg``'s key, then value, in place with the deserializers of
        ``cluster_id`` (:meth:`~kbear._serdes.ClusterSerdes.apply`; ``""``, a record
        not acquired by the last poll: those of no cluster, the ``per_cluster``
        defaults); mark it on failure."""
        topic = msg.topic()
        if topic is None:
            raise TypeError("Message topic is None")
        try:
            key, value = self._serdes.apply(cluster_id, topic, msg.headers(), msg.key(), msg.value(), msg)
        except (KeyDeserializationError, ValueDeserializationError) as exc:
            msg.set_error(exc.args[0])  # confluent-kafka's KafkaError of the failed field
            return
        except Exception as exc:  # the cluster's registry client could not be built
            msg.set_error(KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exc)))
            return
        msg.set_key(key)
        msg.set_value(value)

    def close(self) -> None:
        """Close the share consumer (:meth:`RoutedShareConsumer.close`), then the
        deserializers it built (the ``per_cluster`` ones and those of
        ``*.deserializer.builder``; ready-made ones stay the application's).

        Raises:
            KafkaException: a cluster's share consumer failed to close (the others
                and the deserializers are closed).
        """
        try:
            super().close()
        finally:
            self._serdes.close()
