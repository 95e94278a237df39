"""confluent-kafka's rules for the calls of a share consumer (private): one
thread at a time, refusals once closed, and the checks of its arguments it
makes before any broker is involved (the same exceptions and words)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import ConcurrentModificationException, IllegalStateException, Message

from kbear.settings import DEFAULTS

#: confluent-kafka's message of a call on a closed (or never built) share consumer
CLOSED = "Share consumer closed"
#: ... of a call made while another thread is inside one (librdkafka's words)
CONFLICT = (
    "Share consumer is not safe for multi-threaded access. currentThread(id: {me}) otherThread(id: {other})"
)
#: ... of poll() with no subscription
NOT_SUBSCRIBED = "Consumer is not subscribed to any topics"
#: ... of subscribe() with an empty or a repeated topic name
BAD_TOPICS = "Failed to subscribe: Local: Invalid argument or configuration"
#: ... of acknowledge() of a record not in flight (or in implicit mode)
NOT_IN_FLIGHT = "Failed to acknowledge message: Local: Erroneous state"
#: ... of acknowledge_offset() likewise
OFFSET_NOT_IN_FLIGHT = "Failed to acknowledge offset: Local: Erroneous state"

#: the values of confluent-kafka's AcknowledgeType (ACCEPT, RELEASE, REJECT)
ACK_TYPES = frozenset({1, 2, 3})

#: kbear keys a share consumer takes (kbear.client.meta.<k> too); the others are
#: about offsets and kbear's own acknowledgement, which share groups do not use
SHARE_KEYS = frozenset(
    {
        "kbear.config",
        "kbear.client.id",
        "kbear.reload.interval.ms",
        "kbear.switch.mode",
        "kbear.switch.drain.idle.ms",
        "kbear.switch.drain.timeout.ms",
        "kbear.metrics.enable",
    }
)


def check_share_keys(config: Mapping[str, Any], kind: str) -> None:
    """Refuse kbear keys a share consumer cannot honour.

    Raises:
        ValueError: ``"<kind>: ..."`` naming each such key (``kbear.ack.mode``,
            ``kbear.switch.start``...: a share group acknowledges records itself
            and starts per its ``share.auto.offset.reset``).
    """
    refused = sorted(k for k in config if k in DEFAULTS and k not in SHARE_KEYS)
    if refused:
        raise ValueError(
            f"{kind}: kbear key(s) {refused} do not apply to a share consumer (records are acknowledged "
            "with acknowledge(); a moved topic starts per the share group's share.auto.offset.reset); "
            f"it takes {sorted(SHARE_KEYS)} and kbear.client.meta.<key>"
        )


def acknowledgement_mode(native: Mapping[str, Any]) -> bool:
    """Whether ``share.acknowledgement.mode`` is ``explicit`` (librdkafka checks the value)."""
    return str(native.get("share.acknowledgement.mode", "implicit")).strip().lower() == "explicit"


class CallGuard:
    """One thread in a call at a time, as confluent-kafka's ShareConsumer: a call
    from another thread meanwhile raises ConcurrentModificationException; the
    thread in the call may call again (a callback it runs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self.closed = True

    @contextmanager
    def call(self, check_closed: bool = True) -> Iterator[None]:
        """Hold the consumer for the calling thread during the ``with`` block.

        Raises:
            IllegalStateException: closed ("Share consumer closed"), when ``check_closed``.
            ConcurrentModificationException: another thread is in a call.
        """
        if check_closed and self.closed:
            raise IllegalStateException(CLOSED)
        me = threading.get_ident()
        if self._owner == me:  # a callback of the call calling again
            yield
            return
        if not self._lock.acquire(blocking=False):
            raise ConcurrentModificationException(CONFLICT.format(me=me, other=self._owner))
        self._owner = me
        try:
            yield
        finally:
            self._owner = None
            self._lock.release()

    def check(self) -> None:
        """What :meth:`call` checks, without holding the consumer: for a call that
        only hands work to the clusters' share consumers (each refuses a second
        thread itself), so that a thread calling it in a loop does not keep another
        out of :meth:`call`.

        Raises:
            IllegalStateException: closed.
            ConcurrentModificationException: another thread is in a call.
        """
        if self.closed:
            raise IllegalStateException(CLOSED)
        owner, me = self._owner, threading.get_ident()
        if owner is not None and owner != me:
            raise ConcurrentModificationException(CONFLICT.format(me=me, other=owner))


def check_timeout(timeout: Any) -> float:
    """A timeout argument in seconds as confluent-kafka takes it.

    Raises:
        TypeError: not a number (as confluent-kafka: ``None`` and strings are refused).
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"a float is required for timeout, not {type(timeout).__name__}")
    return float(timeout)


def check_topics(topics: Any) -> list[str]:
    """The topic list of ``subscribe(topics)``, checked as confluent-kafka does.

    Raises:
        TypeError: not a list ("expected list of topic unicode strings").
        ValueError: an empty or a repeated name.
    """
    if not isinstance(topics, list):
        raise TypeError("expected list of topic unicode strings")
    names = [str(t) for t in topics]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ValueError(BAD_TOPICS)
    return names


def check_message(message: Any) -> Any:
    """The message of ``acknowledge(message)``, checked as confluent-kafka does.

    Raises:
        TypeError: not a Message.
        ValueError: its topic is None, or its partition or offset negative.
    """
    if not isinstance(message, Message):
        raise TypeError(f"expected Message object, not {type(message).__name__}")
    if message.topic() is None:
        raise ValueError("Message topic is None")
    check_coordinates(message.partition(), message.offset())
    return message


def check_ack_type(ack_type: Any) -> None:
    """Raises TypeError (not an int) or ValueError (not ACCEPT, RELEASE or REJECT)
    for an ``ack_type``, as confluent-kafka in explicit mode."""
    if isinstance(ack_type, bool) or not isinstance(ack_type, int):
        raise TypeError(f"ack_type must be an int (AcknowledgeType), not {type(ack_type).__name__}")
    if int(ack_type) not in ACK_TYPES:
        raise ValueError(f"Invalid ack_type {int(ack_type)}: expected ACCEPT(1), RELEASE(2) or REJECT(3)")


def check_coordinates(partition: Any, offset: Any) -> None:
    """Raises TypeError / ValueError for a partition or offset that is not a
    non-negative int (as confluent-kafka's ``acknowledge_offset``)."""
    for name, value in (("partition", partition), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
