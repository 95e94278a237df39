"""The acknowledgement calls of RoutedConsumer and the ack settings' check.

``ack``, ``ack_cumulative``, ``nack``, ``reconsume_later`` (Pulsar's consumer
verbs; RoutedConsumer's methods of the same names delegate to :class:`AckCalls`)
go to the :class:`~kbear.consumer._individual.AckLayer` built with
``kbear.ack.mode=individual``; with ``offset`` (the default) they raise and
nothing of the layer exists: ``poll``/``consume`` keep their fast paths.
:func:`with_retry_topics` makes the ``subscribe`` of ``kbear.retry.enable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from kbear._modes import AckMode
from kbear.consumer._individual import AckLayer
from kbear.consumer._subscription import RebalanceCallback
from kbear.settings import KBearSettings

log = logging.getLogger("kbear.consumer")

#: settings that act only with kbear.ack.mode=individual (key -> the field)
_INDIVIDUAL_ONLY = {
    "kbear.retry.enable": "retry_enable",
    "kbear.chunking.enable": "chunking_enable",
    "kbear.ack.timeout.ms": "ack_timeout_ms",
    "kbear.max.redeliver.count": "max_redeliver_count",
}

#: ``subscribe(topics, on_assign, on_revoke, on_lost)``
Subscribe = Callable[
    [Sequence[str], RebalanceCallback | None, RebalanceCallback | None, RebalanceCallback | None], None
]


def check_ack_settings(settings: KBearSettings, native: dict[str, Any]) -> bool:
    """Whether the consumer acknowledges message by message; with
    ``individual``, ``enable.auto.offset.store`` is forced off in ``native``
    (kbear stores the acknowledged prefix).

    Raises:
        ValueError: a setting of :data:`_INDIVIDUAL_ONLY` is set with ``offset``.
    """
    if settings.ack_mode is AckMode.INDIVIDUAL:
        if str(native.get("enable.auto.offset.store", "false")).lower() in ("true", "1"):
            log.info("kbear: enable.auto.offset.store is off with kbear.ack.mode=individual")
        native["enable.auto.offset.store"] = False
        return True
    wrong = [key for key, name in _INDIVIDUAL_ONLY.items() if getattr(settings, name)]
    if wrong:
        raise ValueError(f"RoutedConsumer: {', '.join(wrong)} need(s) kbear.ack.mode=individual")
    return False


def with_retry_topics(subscribe: Subscribe, layer: AckLayer) -> Subscribe:
    """``subscribe`` subscribing the retry topic of each named topic too
    (``kbear.retry.enable``), with ``subscribe``'s docstring saying so."""

    def subscribe_with_retry(
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        subscribe(layer.with_retry_topics(topics), on_assign, on_revoke, on_lost)

    subscribe_with_retry.__doc__ = (subscribe.__doc__ or "") + (
        "\n        With kbear.retry.enable, the retry topic of each named topic is subscribed too.\n"
    )
    return subscribe_with_retry


class AckCalls:
    """Message-level acknowledgement of :class:`~kbear.RoutedConsumer` (its methods of
    the same names delegate here).

    Args:
        layer: the acknowledgement layer (``kbear.ack.mode=individual``), or None
            (``offset``: every call raises).
    """

    def __init__(self, layer: AckLayer | None) -> None:
        self._acks = layer

    def _layer(self, call: str) -> AckLayer:
        layer = self._acks
        if layer is None:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{call}: needs kbear.ack.mode=individual"))
        return layer

    def ack(self, message: Message) -> None:
        """Acknowledge ``message`` (``kbear.ack.mode=individual``), in any order: its
        partition's committed offset advances over the contiguous prefix of
        acknowledged messages, never past an unacknowledged one. A message already
        acknowledged, or of a partition this member lost, is ignored.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        self._layer("ack").ack(message)

    def ack_cumulative(self, message: Message) -> None:
        """Acknowledge ``message`` and every message read before it on its partition
        (including ones waiting for a redelivery or their delivery time).

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        self._layer("ack_cumulative").ack_cumulative(message)

    def nack(self, message: Message) -> None:
        """Negative acknowledgement: ``message`` is delivered again by ``poll``/``consume``
        after ``min(kbear.nack.backoff.min.ms * multiplier**n, max.ms)`` (n: its
        redeliveries so far), or, after ``kbear.max.redeliver.count`` redeliveries,
        sent to its dead-letter topic and acknowledged once stored there.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        self._layer("nack").nack(message)

    def reconsume_later(
        self, message: Message, delay_s: float, properties: Mapping[str, str | bytes] | None = None
    ) -> None:
        """Send ``message`` to its retry topic (``kbear.retry.topic``) with
        ``properties`` and the headers ``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``,
        ``RECONSUMETIMES``, ``DELAY_TIME`` (ms); it is acknowledged once stored there
        and delivered again, under its real topic, no earlier than ``delay_s``
        seconds from now. After ``kbear.max.redeliver.count`` retries it goes to the
        dead-letter topic instead.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset`` or
                ``kbear.retry.enable`` is off; errors of the letter producer.
            ValueError: ``message`` is not an unacknowledged message of this
                consumer, or ``delay_s`` < 0.
            NoRouteError: the retry or dead-letter topic has no route.
        """
        self._layer("reconsume_later").reconsume_later(message, delay_s, properties)
