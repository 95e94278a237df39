"""RoutedDeserializingShareConsumer: confluent-kafka's DeserializingShareConsumer, routed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Messages
from confluent_kafka.serialization import MessageField, SerializationContext

from kbear._base import NO_CONFIG
from kbear._identity import Client
from kbear.router import Router
from kbear.share._facade import RoutedShareConsumer

#: the configuration keys of the deserializers (confluent-kafka's)
KEY_DESERIALIZER, VALUE_DESERIALIZER = "key.deserializer", "value.deserializer"


class RoutedDeserializingShareConsumer(RoutedShareConsumer):
    """A ``confluent_kafka.DeserializingShareConsumer`` over the clusters of its routes:
    a :class:`~kbear.RoutedShareConsumer` whose :meth:`poll` deserializes each
    record's key and value in place.

    Args:
        config: as :class:`~kbear.RoutedShareConsumer`, plus ``key.deserializer`` and
            ``value.deserializer``: callables ``(bytes, SerializationContext) -> obj``
            (confluent-kafka's ``StringDeserializer``, ``AvroDeserializer``...),
            removed before the configuration reaches librdkafka.
        router, client, **kwargs: as :class:`~kbear.RoutedShareConsumer`.

    Raises:
        as :class:`~kbear.RoutedShareConsumer`.

    As confluent-kafka's: the key is deserialized first, then the value; both
    are written back only if both succeed; a record that fails keeps its raw
    bytes and gets ``msg.error()`` set to a ``KafkaError._KEY_DESERIALIZATION`` or
    ``_VALUE_DESERIALIZATION`` error instead of raising (the rest of the batch is
    kept, and the record can still be acknowledged, e.g. ``REJECT``ed). The
    ``SerializationContext`` names the logical topic (the one subscribed to).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        conf = dict(config) if isinstance(config, Mapping) else config
        if isinstance(conf, dict):
            self._key_deserializer = conf.pop(KEY_DESERIALIZER, kwargs.pop(KEY_DESERIALIZER, None))
            self._value_deserializer = conf.pop(VALUE_DESERIALIZER, kwargs.pop(VALUE_DESERIALIZER, None))
        else:
            self._key_deserializer = kwargs.pop(KEY_DESERIALIZER, None)
            self._value_deserializer = kwargs.pop(VALUE_DESERIALIZER, None)
        super().__init__(conf, router=router, client=client, **kwargs)

    def poll(self, timeout: float = -1) -> Messages:
        """A batch of records as :meth:`RoutedShareConsumer.poll`, each record's key
        and value deserialized in place (see the class docstring).

        Raises:
            as :meth:`RoutedShareConsumer.poll`; TypeError: a record has no topic.
        """
        messages = super().poll(timeout)
        for msg in messages:
            if msg.error() is None:  # broker errors carry no payload
                self._deserialize(msg)
        return messages

    def _deserialize(self, msg: Message) -> None:
        """Deserialize ``msg``'s key, then value, in place; mark it on failure."""
        topic = msg.topic()
        if topic is None:
            raise TypeError("Message topic is None")
        ctx = SerializationContext(topic, MessageField.KEY, msg.headers())
        try:
            key = msg.key()
            if self._key_deserializer is not None:
                key = self._key_deserializer(key, ctx)
        except Exception as exc:
            msg.set_error(KafkaError(KafkaError._KEY_DESERIALIZATION, str(exc)))
            return
        try:
            value = msg.value()
            if self._value_deserializer is not None:
                ctx.field = MessageField.VALUE
                value = self._value_deserializer(value, ctx)
        except Exception as exc:
            msg.set_error(KafkaError(KafkaError._VALUE_DESERIALIZATION, str(exc)))
            return
        msg.set_key(key)
        msg.set_value(value)
