"""Retry-letter and dead-letter topics: their names, their headers, their production.

Responsible for: the name of a topic's retry and dead-letter topics (templates
``kbear.retry.topic`` / ``kbear.dlq.topic``), the Kafka headers a letter
carries (Pulsar's property names: ``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``,
``RECONSUMETIMES``, ``DELAY_TIME``; and kbear's ``kbear-deliver-at``, the
delivery time honoured by kbear consumers), and :class:`LetterSender`, the
RoutedProducer that sends letters: the letter topics are routed by CRRL like any
topic, so they may live on another cluster than the topic they come from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kbear._identity import Client
from kbear.router import Router

log = logging.getLogger("kbear.consumer")

#: the topic the message was first consumed from (logical name)
REAL_TOPIC = "REAL_TOPIC"
#: ``cluster/topic/partition/offset`` of the message first consumed (physical topic)
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: how many times the message went through the retry topic (decimal)
RECONSUMETIMES = "RECONSUMETIMES"
#: the delay asked of ``reconsume_later``, ms (decimal)
DELAY_TIME = "DELAY_TIME"
#: epoch ms before which kbear consumers do not deliver the message (decimal)
DELIVER_AT = "kbear-deliver-at"

#: the headers kbear sets on a letter (replaced, never repeated)
LETTER_HEADERS = frozenset({REAL_TOPIC, ORIGIN_MESSAGE_ID, RECONSUMETIMES, DELAY_TIME, DELIVER_AT})

#: producer properties of the consumer's configuration that a letter producer keeps
#: (connection and security; clusters.yaml's properties are merged over them)
_PRODUCER_PREFIXES = ("security.", "sasl.", "ssl.", "client.id", "socket.", "message.max.bytes")


def letter_topic(template: str, topic: str, group: str) -> str:
    """The retry or dead-letter topic of ``topic`` for ``group`` (``{topic}`` and
    ``{group}`` of ``template`` replaced)."""
    return template.format(topic=topic, group=group)


def header(headers: list[tuple[str, Any]] | None, name: str) -> bytes | None:
    """The last value of header ``name`` (bytes), or None."""
    found: bytes | None = None
    for key, value in headers or ():
        if key == name:
            found = value if isinstance(value, bytes) or value is None else str(value).encode()
    return found


def int_header(headers: list[tuple[str, Any]] | None, name: str) -> int | None:
    """Header ``name`` as an int, or None when absent or not a decimal number."""
    raw = header(headers, name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def letter_headers(
    original: list[tuple[str, Any]] | None,
    *,
    real_topic: str,
    origin: str,
    reconsume_times: int,
    delay_ms: int,
    deliver_at_ms: int | None,
    properties: Mapping[str, str | bytes] | None = None,
) -> list[tuple[str, bytes]]:
    """The headers of a letter: the original message's (without kbear's and
    Pulsar's letter headers), ``properties`` (the application's), then the letter
    headers. A header of the original ``ORIGIN_MESSAGE_ID`` wins over ``origin``
    (a message retried again keeps the first origin)."""
    first_origin = header(original, ORIGIN_MESSAGE_ID)
    out: list[tuple[str, bytes]] = [
        (k, v if isinstance(v, bytes) else str(v).encode())
        for k, v in (original or [])
        if k not in LETTER_HEADERS and (properties is None or k not in properties) and v is not None
    ]
    for key, value in (properties or {}).items():
        out.append((key, value if isinstance(value, bytes) else str(value).encode()))
    out.append((REAL_TOPIC, real_topic.encode()))
    out.append((ORIGIN_MESSAGE_ID, first_origin if first_origin is not None else origin.encode()))
    out.append((RECONSUMETIMES, str(reconsume_times).encode()))
    out.append((DELAY_TIME, str(delay_ms).encode()))
    if deliver_at_ms is not None:
        out.append((DELIVER_AT, str(deliver_at_ms).encode()))
    return out


def producer_config(native: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration of the letter producer, from the consumer's: its connection
    and security properties, plus delivery that loses nothing (``acks=all``,
    idempotence)."""
    conf = {k: v for k, v in native.items() if k.startswith(_PRODUCER_PREFIXES) and not callable(v)}
    conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 5})
    return conf


class LetterSender:
    """Sends letters with a RoutedProducer sharing the consumer's router and client.

    Args:
        router: the consumer's router (the letter topics are routed by it).
        client: the consumer's client (``client.*`` factors of producer lookups).
        config: the producer configuration (:func:`producer_config`).

    The producer is built at the first letter. Delivery reports are served by
    :meth:`poll` (the consumer calls it from ``poll()``/``consume()``), in the
    consumer's polling thread.
    """

    def __init__(self, router: Router, client: Client, config: Mapping[str, Any]) -> None:
        self._router = router
        self._client = client
        self._config = dict(config)
        self._producer: Any = None
        self.in_flight = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        done: Callable[[Any], None],
    ) -> None:
        """Produce a letter to ``topic``; ``done(err)`` is called from :meth:`poll`
        with None once the letter is stored by its cluster, else with the KafkaError.

        Raises:
            NoRouteError: ``topic`` has no route.
            BufferError, KafkaException: as ``Producer.produce``.
        """
        if self._producer is None:
            from kbear.producer import RoutedProducer  # the consumer package does not need it otherwise

            self._producer = RoutedProducer(
                {**self._config, "kbear.reload.interval.ms": 0}, router=self._router, client=self._client
            )

        def report(err: Any, _msg: Any) -> None:
            self.in_flight -= 1
            done(err)

        self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=report)
        self.in_flight += 1

    def poll(self) -> None:
        """Serve delivery reports (without waiting)."""
        if self._producer is not None and self.in_flight:
            self._producer.poll(0)

    def close(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for letters in flight (their reports are served),
        then close the producer."""
        if self._producer is None:
            return
        left = self._producer.flush(timeout_s)
        if left:
            log.warning("kbear: %d letter(s) undelivered at close: their messages stay unacknowledged", left)
        self._producer.close(0)
        self._producer = None
