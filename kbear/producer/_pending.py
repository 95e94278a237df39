"""What a RoutedProducer keeps of a message while it is pending on a cluster (private).

A message taken back from a dead cluster (:mod:`kbear.producer._takeback`) is
produced again from what its purge's delivery report gives back: topic, key, value
and the partition librdkafka had chosen (confluent-kafka 2.16: a purged message's
report has no timestamp and no headers, and a message produced with a callback of
its own reports to that callback only). And librdkafka hands the purge's report to
Python only for a message that has a delivery callback (its own, or the
configuration's ``on_delivery``): a message produced without any is dropped
silently by the purge.

So kbear keeps, per message, only what is needed, and only when needed (a record
for every message costs a Python callback per delivery: 0.60 x plain
confluent-kafka on ``bench/run.py --quick --only produce1``):

- a plain call (at most topic, value and key, by position or by name) goes to the
  client's ``produce`` untouched (:func:`plain_call`; compiled:
  ``kbear._cdispatch.PlainCall``); its purge report reaches kbear through the
  configuration's ``on_delivery`` when there is one (:func:`delivery_callback`);
- a call with a callback of its own, and (when the configuration has an
  ``on_delivery``) a call with a partition, a timestamp or headers, gets a
  :class:`Pending` record as its callback, living exactly as long as the message
  is pending (compiled: ``kbear._cdispatch.RecordingSend`` and ``Pending``, no
  Python frame per call or report); with no ``on_delivery`` configured, a call with
  a partition, a timestamp or headers but no callback goes untouched (a record
  would cost a delivery report per message; its purge report reaches nobody);
- once the cluster is **suspect** (librdkafka reported all its brokers down,
  :meth:`Rescue.suspect`), every call gets a :class:`Pending` (with its CreateTime
  kept), plain ones included, until a message is delivered there again.

The one gap: a message produced with no delivery callback at all while its cluster
was not suspect cannot be taken back (documented in docs/concepts/failover.md).

Each cluster client's delivery callback and every :class:`Pending` offer a purged
message (``_PURGE_QUEUE``/``_PURGE_INFLIGHT``) to the client's :class:`Rescue` first
while a take-back is under way; a message it re-sends is not reported here: its one
report is that of its final delivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError

from kbear._compiled import EXTENSION

__all__ = ["PURGED", "Pending", "Rescue", "delivery_callback", "plain_call", "recording_send"]

DeliveryCallback = Callable[[Any, Any], None]
Send = Callable[..., None]

#: the delivery errors of a message taken back by ``purge()``
PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})

#: the keywords of a plain produce() call
_PLAIN_KEYWORDS = frozenset({"topic", "value", "key"})

#: produce()'s keywords a purge's report does not give back
_EXTRA_KEYWORDS = frozenset({"partition", "timestamp", "headers"})

#: produce()'s delivery callbacks (confluent-kafka: callback, alias on_delivery)
_CALLBACK_KEYWORDS = frozenset({"callback", "on_delivery"})

#: at most this many callbacks get a shared record (see :func:`recording_send`)
_SHARED_MAX = 64

#: produce()'s positional arguments: topic, value, key, partition, callback,
#: on_delivery, timestamp, headers
_MAX_ARGS = 8

#: the compiled PlainCall, or None (not built, or KBEAR_PURE_PYTHON set)
_PlainCall: Any = None if EXTENSION is None else getattr(EXTENSION, "PlainCall", None)

#: the compiled recording send (its records: the compiled Pending), or None
_RecordingSend: Any = None if EXTENSION is None else getattr(EXTENSION, "RecordingSend", None)

#: the compiled Pending, or None
_Pending: Any = None if EXTENSION is None else getattr(EXTENSION, "Pending", None)


def _no_report(err: Any, msg: Any) -> None:
    """No ``on_delivery`` configured: nothing to report to."""


class _PurePlainCall:
    """The pure-Python PlainCall (see :func:`plain_call`)."""

    __slots__ = ("fallback", "record", "reported", "target")

    def __init__(self, target: Send, fallback: Send, reported: bool = False) -> None:
        self.target = target
        self.fallback = fallback
        self.record = False
        self.reported = reported

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) <= 3 and _PLAIN_KEYWORDS.issuperset(kwargs) and not self.record:
            self.target(*args, **kwargs)
        elif self._recorded(args, kwargs):
            self.fallback(*args, **kwargs)
        else:
            self.target(*args, **kwargs)

    def _recorded(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a call that is not plain goes to the fallback (see :func:`plain_call`)."""
        if self.record or len(args) > _MAX_ARGS or any(a is not None for a in args[4:6]):
            return True
        extra = len(args) > 3
        for name, arg in kwargs.items():
            if name in _CALLBACK_KEYWORDS:
                if arg is not None:
                    return True
            elif name in _EXTRA_KEYWORDS:
                extra = True
            elif name not in _PLAIN_KEYWORDS:
                return True  # (the fallback's TypeError)
        return extra and self.reported


class Rescue:
    """One cluster client's take-back hook, default delivery report and suspicion.

    Attributes:
        resend: ``resend(err, msg, pending)`` -> True when it re-sent the purged
            ``msg`` (``pending``: its :class:`Pending`, or None); None: no
            take-back under way.
        report: the configuration's ``on_delivery`` with remapped names renamed
            (a no-op when none is configured).
        user: the configuration's ``on_delivery`` itself (None: none), and
        logical: physical -> logical name of the client's remapped topics: while
            it is empty, ``report`` is ``user`` with nothing to rename (the compiled
            Pending calls ``user`` directly then).
        call: the client's send function (its ``record`` flag: suspect).
    """

    __slots__ = ("call", "logical", "report", "resend", "user")

    def __init__(self) -> None:
        self.resend: Callable[[Any, Any, Pending | None], bool] | None = None
        self.report: DeliveryCallback = _no_report
        self.user: DeliveryCallback | None = None
        self.logical: Mapping[str, str] = {}
        self.call: Any = None

    @property
    def reports(self) -> bool:
        """Whether the configuration has an ``on_delivery`` (``report`` is it)."""
        return self.report is not _no_report

    def suspect(self, on: bool) -> None:
        """From now on, keep a record of every message (``on``) or only of those
        whose call needs one (see the module)."""
        if self.call is not None and self.call.record != on:
            self.call.record = on

    @property
    def suspected(self) -> bool:
        """Whether every message is recorded (the cluster is suspect)."""
        return bool(self.call is not None and self.call.record)


class Pending:
    """The callback of a recorded message: what a re-send needs that a delivery
    report does not carry.

    Attributes:
        own: the message's own callback (None: the configuration's ``on_delivery``).
        headers: its headers as given to produce() (None: none; the compiled
            Pending keeps a list as a tuple).
        partition: its partition as given (-1: the partitioner's choice).
        timestamp: its timestamp (epoch ms) as given, or its CreateTime when it was
            recorded because the cluster was suspect (0: librdkafka's CreateTime).
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
        if err is None:
            if rescue.suspected:  # delivered: the cluster is reachable again
                rescue.suspect(False)
        elif rescue.resend is not None and err.code() in PURGED and rescue.resend(err, msg, self):
            return
        (rescue.report if self.own is None else self.own)(err, msg)


def delivery_callback(
    user_cb: DeliveryCallback, logical: Mapping[str, str], rescue: Rescue
) -> DeliveryCallback:
    """The ``on_delivery`` kbear gives each cluster's client when the configuration
    has one (never otherwise: it would cost a Python call per message): a
    :class:`Pending` of no message in particular (no callback of its own, nothing
    kept), compiled when the extension is built (no Python frame per report between
    librdkafka and ``user_cb`` while no topic is remapped). A delivery ends the
    cluster's suspicion; a purge is offered to the take-back first.

    Args:
        user_cb: the configuration's ``on_delivery``.
        logical: physical -> logical name of remapped topics (renamed before ``user_cb``).
        rescue: offered a purged message first while a take-back is under way; its
            ``report``, ``user`` and ``logical`` are set here (``report``: ``user_cb``
            with the renaming).
    """

    def report(err: Any, msg: Any) -> None:
        if logical:
            name = logical.get(msg.topic())
            if name is not None:
                msg.set_topic(name)
        user_cb(err, msg)

    rescue.report = report
    rescue.user = user_cb
    rescue.logical = logical
    record: DeliveryCallback = (Pending if _Pending is None else _Pending)(None, None, -1, 0, rescue)
    return record


def recording_send(produce: Send, rescue: Rescue) -> Send:
    """``produce`` (a cluster client's) for the calls that are recorded: the message's
    callback becomes a :class:`Pending` keeping its partition, callback, headers and
    timestamp. Same arguments as ``confluent_kafka.Producer.produce``; the client's
    ``produce`` is called by position only, the record as its ``callback``
    (confluent-kafka reads a keyword argument by making and hashing a str per name
    it tries: about 400 ns per call with ``callback=``).

    A call with a callback and no partition, timestamp or headers while the cluster
    is not suspect shares its callback's record (timestamp 0: its CreateTime is not
    kept, a re-send gets a new one; at most ``_SHARED_MAX`` callbacks, then one
    record per message): no allocation per message.

    Compiled when the extension is built (``kbear._cdispatch.RecordingSend`` and
    its ``Pending``, kbear/_pending.c: same behaviour, no Python frame per call or
    per delivery report); a call it cannot read goes to the pure-Python send."""
    send = _python_send(produce, rescue)
    if _RecordingSend is not None:
        compiled: Send = _RecordingSend(produce, rescue, send)
        return compiled
    return send


def _python_send(produce: Send, rescue: Rescue) -> Send:
    """The pure-Python recording send (see :func:`recording_send`)."""

    shared: dict[DeliveryCallback, Pending] = {}

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
        own = callback if callback is not None else on_delivery  # (confluent-kafka's order)
        if own is not None and partition == -1 and not timestamp and headers is None and not rescue.suspected:
            record = shared.get(own)
            if record is None and len(shared) < _SHARED_MAX:
                record = shared[own] = Pending(own, None, -1, 0, rescue)
            if record is not None:
                produce(topic, value, key, -1, record)
                return
        pending = Pending(own, headers, partition, timestamp or int(time.time() * 1000), rescue)
        # by position, the record as the callback (confluent-kafka reads keywords slowly)
        if headers is None:
            produce(topic, value, key, partition, pending, None, timestamp)
        else:
            produce(topic, value, key, partition, pending, None, timestamp, headers)

    return send


def plain_call(target: Send, fallback: Send, reported: bool = False) -> Any:
    """A send function over a cluster client: ``fallback`` (the recording send) for
    the calls kbear keeps a record of, ``target`` (the client's ``produce``) for the
    others, the arguments forwarded untouched (compiled when the extension is built).

    Recorded: every call while its ``record`` flag is set (the cluster is suspect); a
    call with a delivery callback of its own; a call with a partition, a timestamp
    or headers when ``reported`` (the client has a configured ``on_delivery``;
    without one such a call has no delivery callback at all, so its purge report
    would not reach kbear: recording it would cost a report per delivery for
    nothing); a call neither can read (the fallback raises Python's TypeError).
    A plain call (at most topic, value, key, by position or by name) is not."""
    if _PlainCall is not None:
        return _PlainCall(target, fallback, reported)
    return _PurePlainCall(target, fallback, reported)
