"""Taking back what a dead cluster's client still holds once a drain gave up (private).

When a topic moves (a configuration reload) the old cluster's client is flushed
first (the drain, up to ``kbear.switch.drain.timeout.ms``). A drain that times out
means the old cluster does not take the messages (a dead cluster: they would fail
when ``message.timeout.ms`` runs out). :class:`TakeBack` then purges that client
(``purge(in_queue=True, in_flight=False)`` first; then ``in_flight=True`` when no
route uses the client any more: those messages' fate is unknown, they are sent
again, at-least-once, and counted) and sends each purged message along its
topic's route now, with the same key, value, headers and timestamp (a message
produced without one gets its CreateTime when re-sent), through the
partitioner of the new route unless produce() was given a partition (the key
decides, as for the messages produced after the move), and the message's own
callback if it had one (:mod:`kbear.producer._pending` keeps what a delivery report
does not carry). The purge's ``_PURGE_QUEUE``/``_PURGE_INFLIGHT`` report is not
shown to the application: the message's one report is that of its final delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from kbear import _events
from kbear.producer._cluster import ClusterProducer
from kbear.producer._pending import Pending

log = logging.getLogger("kbear.producer")

#: ``send_for(topic)``: the send function of the logical ``topic``'s route now
#: (routing it if needed), or None when it has no route
SendFor = Callable[[str], Callable[..., None] | None]

#: at most this many poll(0) rounds serve the purge's reports (each serves all queued)
_MAX_ROUNDS = 1000


@dataclass(slots=True)
class Counts:
    """Messages of one take-back: re-sent from the queue, re-sent although they
    were in flight (possibly delivered already: duplicates), and not re-sent (no
    route, or the new client refused; reported to the application as failed)."""

    queued: int = 0
    in_flight: int = 0
    failed: int = 0


class TakeBack:
    """Purges a dead cluster's client and sends what it held along the routes now.

    Args:
        send_for: the send function of a logical topic's route now (None: no route).
    """

    def __init__(self, send_for: SendFor) -> None:
        self._send_for = send_for

    def take_back(self, entry: ClusterProducer, in_flight: bool) -> Counts:
        """Purge ``entry``'s client and re-send its messages (see the module).

        Args:
            entry: the client whose drain timed out.
            in_flight: also purge the messages in flight (the client is used by no
                route any more); their re-sending is at-least-once.

        Returns:
            What was re-sent, and what could not be (reported failed).
        """
        counts = Counts()
        entry.rescue.resend = self._resender(entry, counts)
        try:
            entry.producer.purge(in_queue=True, in_flight=False, blocking=True)
            _serve(entry.producer)
            if in_flight:
                entry.producer.purge(in_queue=False, in_flight=True, blocking=True)
                _serve(entry.producer)
        finally:
            entry.rescue.resend = None
        if counts.queued or counts.in_flight or counts.failed:
            log.warning(
                "kbear: took back %d queued and %d in-flight message(s) from cluster %r after its "
                "drain timed out and sent them along their routes now (%d could not be: reported failed)",
                counts.queued,
                counts.in_flight,
                entry.cluster_id,
                counts.failed,
                extra=_events.fields("messages_resent", None, cluster=entry.cluster_id),
            )
            _events.emit(
                _events.MessagesResent(
                    "producer", entry.cluster_id, counts.queued, counts.in_flight, counts.failed
                )
            )
        return counts

    def _resender(self, entry: ClusterProducer, counts: Counts) -> Callable[[Any, Any, Pending | None], bool]:
        logical = entry.logical

        def resend(err: Any, msg: Any, pending: Pending | None) -> bool:
            physical = msg.topic()
            topic = logical.get(physical, physical)
            send = self._send_for(topic)
            if send is None:
                counts.failed += 1
                return False
            kwargs: dict[str, Any] = {"key": msg.key()}
            if pending is not None:
                if pending.timestamp:
                    kwargs["timestamp"] = pending.timestamp
                headers = pending.headers
                if headers is not None:  # (the compiled Pending keeps a list as a tuple)
                    kwargs["headers"] = list(headers) if isinstance(headers, tuple) else headers
                if pending.partition != -1:
                    kwargs["partition"] = pending.partition
                if pending.own is not None:
                    kwargs["on_delivery"] = pending.own
            try:
                send(msg.value(), **kwargs)
            except (BufferError, KafkaException) as exc:
                log.error("kbear: could not re-send a message of topic %r taken back: %s", topic, exc)
                counts.failed += 1
                return False
            if err.code() == KafkaError._PURGE_INFLIGHT:
                counts.in_flight += 1
            else:
                counts.queued += 1
            return True

        return resend


def _serve(producer: Any) -> None:
    """Serve the purge's delivery reports (poll(0) until none is left, bounded)."""
    for _ in range(_MAX_ROUNDS):
        if not producer.poll(0):
            return
