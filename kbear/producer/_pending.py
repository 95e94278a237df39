"""What a RoutedProducer keeps of a message while it is pending on a cluster (private).

A message taken back from a dead cluster (:mod:`kbear.producer._takeback`) is
produced again from what its purge's delivery report gives back: topic, key,
value (a purged message's report has no timestamp, no headers and no partition,
and a message produced with a callback of its own reports to that callback only),
so kbear keeps, for each call that carries a partition, a callback, a timestamp or
headers, a :class:`Pending` record (as that message's callback, so it lives
exactly as long as the message is pending). A plain call (at most topic, value
and key, by position or by name) goes to the client's ``produce`` untouched:
:func:`plain_call` (compiled: ``kbear._cdispatch.PlainCall``) makes that choice.
A plain message re-sent gets its CreateTime when it is re-sent (librdkafka gave
it one at the first produce(), which the purge's report does not carry).

Each cluster client's delivery callback (:func:`delivery_callback`, installed on
every client) and every :class:`Pending` first offer a purged message
(``_PURGE_QUEUE``/``_PURGE_INFLIGHT``) to the client's :class:`Rescue` while a
take-back is under way; a message it re-sends is not reported here: its one
report is that of its final delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError

from kbear._compiled import EXTENSION

DeliveryCallback = Callable[[Any, Any], None]
Send = Callable[..., None]

#: the delivery errors of a message taken back by ``purge()``
PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})

#: the keywords of a plain produce() call
_PLAIN_KEYWORDS = frozenset({"topic", "value", "key"})

#: the compiled PlainCall, or None (not built, or KBEAR_PURE_PYTHON set)
_PlainCall: Any = None if EXTENSION is None else getattr(EXTENSION, "PlainCall", None)


def _no_report(err: Any, msg: Any) -> None:
    """No ``on_delivery`` configured: nothing to report to."""


class Rescue:
    """One cluster client's take-back hook and default delivery report.

    Attributes:
        resend: ``resend(err, msg, pending)`` -> True when it re-sent the purged
            ``msg`` (``pending``: its :class:`Pending`, or None); None: no
            take-back under way.
        report: the configuration's ``on_delivery`` with remapped names renamed
            (a no-op when none is configured).
    """

    __slots__ = ("report", "resend")

    def __init__(self) -> None:
        self.resend: Callable[[Any, Any, Pending | None], bool] | None = None
        self.report: DeliveryCallback = _no_report


class Pending:
    """The callback of a message produced with a partition, a callback of its own, a
    timestamp or headers: what a re-send needs that a delivery report does not carry.

    Attributes:
        own: the message's own callback (None: the configuration's ``on_delivery``).
        headers: its headers as given to produce() (None: none).
        partition: its partition as given (-1: the partitioner's choice).
        timestamp: its timestamp as given (epoch ms; 0: librdkafka's CreateTime).
        rescue: the rescue of the client it was produced to.
    """

    __slots__ = ("headers", "own", "partition", "rescue", "timestamp")

    def __init__(
        self, own: DeliveryCallback | None, headers: Any, partition: int, timestamp: int, rescue: Rescue
    ) -> None:
        self.own = own
        self.headers = headers
        self.partition = partition
        self.timestamp = timestamp
        self.rescue = rescue

    def __call__(self, err: Any, msg: Any) -> None:
        rescue = self.rescue
        if err is not None and rescue.resend is not None and err.code() in PURGED and rescue.resend(err, msg, self):
            return
        (rescue.report if self.own is None else self.own)(err, msg)


def delivery_callback(
    user_cb: DeliveryCallback | None, logical: Mapping[str, str], rescue: Rescue
) -> DeliveryCallback:
    """The ``on_delivery`` kbear gives each cluster's client (always: a message
    produced without a callback must still be seen if it is taken back).

    Args:
        user_cb: the configuration's ``on_delivery`` (None: none).
        logical: physical -> logical name of remapped topics (renamed before ``user_cb``).
        rescue: offered a purged message first while a take-back is under way; its
            ``report`` is set here (``user_cb`` with the renaming).
    """

    def report(err: Any, msg: Any) -> None:
        if logical:
            name = logical.get(msg.topic())
            if name is not None:
                msg.set_topic(name)
        user_cb(err, msg)  # type: ignore[misc]

    if user_cb is not None:
        rescue.report = report

    def deliver(err: Any, msg: Any) -> None:
        if err is not None and rescue.resend is not None and err.code() in PURGED and rescue.resend(err, msg, None):
            return
        rescue.report(err, msg)

    return deliver


def recording_send(produce: Send, rescue: Rescue) -> Send:
    """``produce`` (a cluster client's) for the calls that are not plain: the message's
    callback becomes a :class:`Pending` keeping its partition, callback and headers.
    Same arguments as ``confluent_kafka.Producer.produce``."""

    def send(
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        own = on_delivery if on_delivery is not None else callback
        pending = Pending(own, headers, partition, timestamp, rescue)
        if headers is None:
            produce(topic, value, key, partition, on_delivery=pending, timestamp=timestamp)
        else:
            produce(topic, value, key, partition, on_delivery=pending, timestamp=timestamp, headers=headers)

    return send


def plain_call(target: Send, fallback: Send) -> Send:
    """``target`` for a plain produce() call (at most topic, value, key, by position
    or by name), ``fallback`` for any other, the
    arguments forwarded untouched (compiled when the extension is built)."""
    if _PlainCall is not None:
        compiled: Send = _PlainCall(target, fallback)
        return compiled

    def produce(*args: Any, **kwargs: Any) -> None:
        if len(args) <= 3 and _PLAIN_KEYWORDS.issuperset(kwargs):
            target(*args, **kwargs)
        else:
            fallback(*args, **kwargs)

    return produce
