"""The acknowledgement calls of RoutedConsumer (a base class) and their wiring.

``ack``, ``ack_cumulative``, ``nack``, ``reconsume_later`` (Pulsar's consumer
verbs) delegate to the :class:`~kbear.consumer._individual.AckLayer` built with
``kbear.ack.mode=individual``; with ``offset`` (the default) they raise and
nothing of the layer exists: ``poll``/``consume`` keep their fast paths.
:meth:`AckCalls._open_acks` wires the layer into the consumer's poll loop,
rebalance callbacks and move probes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from kbear._identity import Client
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._individual import AckLayer, open_acks
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._polling import PollLoop
from kbear.consumer._rebalance import Rebalancer
from kbear.consumer._subscription import RebalanceCallback, Subscription
from kbear.router import Router
from kbear.settings import AckMode, KBearSettings

log = logging.getLogger("kbear.consumer")

#: settings that act only with kbear.ack.mode=individual (key -> the field)
_INDIVIDUAL_ONLY = {
    "kbear.retry.enable": "retry_enable",
    "kbear.chunking.enable": "chunking_enable",
    "kbear.ack.timeout.ms": "ack_timeout_ms",
    "kbear.max.redeliver.count": "max_redeliver_count",
}


def _not_individual(call: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._STATE, f"{call}: needs kbear.ack.mode=individual"))


class AckCalls:
    """Message-level acknowledgement of :class:`~kbear.RoutedConsumer` (a base class)."""

    _acks: AckLayer | None = None
    _settings: KBearSettings
    _rebalancer: Rebalancer
    _driver: SwitchDriver
    _group: str
    _router: Router
    _client: Client
    _registry: ClusterRegistry
    _sub: Subscription

    @staticmethod
    def _check_ack_settings(settings: KBearSettings, native: dict[str, Any]) -> bool:
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

    def _open_acks(self, native: Mapping[str, Any]) -> None:
        """Build the acknowledgement layer and wire it in (individual mode only)."""
        layer, delivery = open_acks(
            self._settings,
            self._group,
            native,
            router=self._router,
            client=self._client,
            registry=self._registry,
            routes=lambda: self._sub.routes,
            poll=lambda timeout: PollLoop.poll(self, timeout),  # type: ignore[arg-type]
            consume=lambda n, timeout: PollLoop.consume(self, n, timeout),  # type: ignore[arg-type]
        )
        self._acks = layer
        self.__dict__["_tap"] = delivery.tap
        self._rebalancer.commit_points = layer.commit_points
        self._rebalancer.revoked_hook = layer.revoked
        self._driver.commit_points = layer.commit_points
        # poll/consume are the layer's for good: never unbound by a reload
        self.__dict__["_fast_paths"] = ()
        self.__dict__["poll"] = delivery.poll
        self.__dict__["consume"] = delivery.consume
        subscribe = type(self).subscribe  # type: ignore[attr-defined]

        def subscribe_with_retry(
            topics: Sequence[str],
            on_assign: RebalanceCallback | None = None,
            on_revoke: RebalanceCallback | None = None,
            on_lost: RebalanceCallback | None = None,
        ) -> None:
            subscribe(self, layer.with_retry_topics(topics), on_assign, on_revoke, on_lost)

        subscribe_with_retry.__doc__ = (subscribe.__doc__ or "") + (
            "\n        With kbear.retry.enable, the retry topic of each named topic is subscribed too.\n"
        )
        if self._settings.retry_enable:
            self.__dict__["subscribe"] = subscribe_with_retry

    def _layer(self, call: str) -> AckLayer:
        layer = self._acks
        if layer is None:
            raise _not_individual(call)
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
