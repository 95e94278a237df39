"""The acknowledgement calls of RoutedConsumer and the ack settings' check.

``ack``, ``ack_cumulative``, ``nack``, ``reconsume_later`` (Pulsar's consumer
verbs; RoutedConsumer's methods of the same names delegate to them) go to the
:class:`~kbear.consumer._individual.AckLayer` built with
``kbear.ack.mode=individual``; with ``offset`` (the default) to :class:`OffsetAcks`,
which raises, and nothing of the layer exists: ``poll``/``consume`` keep their
fast paths.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kbear._modes import AckMode
from kbear.settings import KBearSettings

log = logging.getLogger("kbear.consumer")

#: settings that act only with kbear.ack.mode=individual (key -> the field)
_INDIVIDUAL_ONLY = {
    "kbear.retry.enable": "retry_enable",
    "kbear.chunking.enable": "chunking_enable",
    "kbear.ack.timeout.ms": "ack_timeout_ms",
    "kbear.max.redeliver.count": "max_redeliver_count",
}


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


class OffsetAcks:
    """The acknowledgement calls of a consumer with ``kbear.ack.mode=offset``
    (RoutedConsumer's ``ack``, ``nack``... go here when no
    :class:`~kbear.consumer._individual.AckLayer` was built): each raises
    ``KafkaException`` ``_STATE`` naming the call."""

    def __getattr__(self, call: str) -> Callable[..., None]:
        def refuse(*_args: Any, **_kwargs: Any) -> None:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{call}: needs kbear.ack.mode=individual"))

        return refuse
