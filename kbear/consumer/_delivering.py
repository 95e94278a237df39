"""The delivering half of the individual-acknowledgement layer (a base class).

Responsible for: what ``poll()``/``consume()`` return with
``kbear.ack.mode=individual``: each message read is tracked by its cluster (the
poll loop's tap), then handed out at once, held until its delivery time (the
partition paused meanwhile, so order is kept), or joined with its other chunks;
nacked and timed-out messages come back from the redelivery schedule. The
verdicts (ack, nack, letters) and the stores are :class:`~kbear.consumer._individual.AckLayer`'s.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, TopicPartition

from kbear._clients import Deadline
from kbear.consumer._acks import AckTracker, PartitionKey
from kbear.consumer._chunks import ChunkAssembler, chunk_of
from kbear.consumer._letters import DELIVER_AT, REAL_TOPIC, LetterSender, header, int_header
from kbear.consumer._polling import PollLoop
from kbear.consumer._redelivery import AckTimer, Schedule

if TYPE_CHECKING:
    from kbear.consumer._cluster import ClusterClient
    from kbear.consumer._facade import RoutedConsumer

log = logging.getLogger("kbear.consumer")

#: Longest single wait on the clusters while nothing is due (seconds): a nack made
#: from another thread is served within it.
_WAIT_SLICE_S = 0.2
#: Wait while letters are in flight (seconds): their delivery reports acknowledge.
_LETTER_SLICE_S = 0.02
#: Shortest time between two stores of acknowledged prefixes from poll()/consume()
#: (seconds); commit() and close() store at once, the auto-commit runs every
#: auto.commit.interval.ms (5000 by default).
STORE_EVERY_S = 0.01


@dataclass(eq=False)
class Delivery:
    """One message as the application sees it, and the offsets it stands for
    (several for a chunked value) on one partition of one cluster."""

    key: PartitionKey
    offsets: list[int]
    message: Any
    redeliveries: int = 0
    due_ms: int | None = None
    lettering: bool = field(default=False)
    #: acknowledged or forgotten: not handed out again (it may still sit in a queue)
    done: bool = field(default=False)

    @property
    def origin(self) -> str:
        """``cluster/topic/partition/offset`` (physical topic, first offset)."""
        cluster, topic, partition = self.key
        return f"{cluster}/{topic}/{partition}/{self.offsets[0]}"


class DeliveryLoop:
    """``poll``/``consume`` of the acknowledgement layer (see the module docstring)."""

    _owner: RoutedConsumer
    _lock: threading.RLock
    _clock: Callable[[], float]
    _wall: Callable[[], float]
    _tracker: AckTracker
    _open: dict[PartitionKey, dict[int, Delivery]]
    _by_id: dict[int, Delivery]
    _origin: dict[int, tuple[str, str]]
    _dirty: dict[PartitionKey, int]
    _next_flush: float = 0.0
    _redeliver: Schedule[Delivery]
    _timer: AckTimer[Delivery] | None
    _chunks: ChunkAssembler[Delivery] | None
    _held: dict[PartitionKey, deque[Delivery]]
    _paused: set[PartitionKey]
    _ready: deque[Delivery]
    _retry_topics: set[str]
    _letters: LetterSender

    if TYPE_CHECKING:

        def _fail(self, d: Delivery, base: float, why: str) -> None: ...

        def _settle(self, d: Delivery) -> None: ...

        def _drop_chunks(self, parts: list[Delivery], why: str) -> None: ...

        def flush_stores(self) -> None: ...

    def tap(self, entry: ClusterClient, msg: Any) -> None:
        """The poll loop read ``msg`` from ``entry``'s cluster (physical name still set)."""
        if msg.error() is None:
            self._origin[id(msg)] = (entry.cluster_id, msg.topic())

    def _take(self, msg: Any) -> None:
        """A message read from a cluster: tracked, then ready, held or joined."""
        origin = self._origin.pop(id(msg), None)
        if origin is None:  # not read through the poll loop's tap: handed out as it is
            self._ready.append(Delivery(("", "", -1), [], msg))
            return
        key = (origin[0], origin[1], int(msg.partition()))
        offset = int(msg.offset())
        if not self._tracker.read(key, offset):
            return  # read again while its earlier reading is unacknowledged: that one is delivered
        d = Delivery(key, [offset], msg)
        self._open.setdefault(key, {})[offset] = d
        headers = msg.headers()
        if headers:
            if self._chunks is not None:
                chunk = chunk_of(headers)
                if chunk is not None:
                    joined, items, dropped = self._chunks.add(msg, d, chunk)
                    for parts in dropped:
                        self._drop_chunks(parts, "over kbear.chunking.max.pending")
                    if joined is None:
                        if items:  # the same chunk twice: the copy is acknowledged
                            self._settle(d)
                        return
                    d = Delivery(key, [o for it in items for o in it.offsets], joined)
                    for o in d.offsets:
                        self._open[key][o] = d
                    headers = joined.headers()
            real = header(headers, REAL_TOPIC)
            if real is not None and msg.topic() in self._retry_topics:
                d.message.set_topic(real.decode(errors="replace"))
            d.due_ms = int_header(headers, DELIVER_AT)
        held = self._held.get(key)
        if held is not None or (d.due_ms is not None and d.due_ms > self._wall() * 1000.0):
            if held is None:
                held = self._held[key] = deque()
                self._pause(key)
            held.append(d)
            return
        self._ready.append(d)

    def _next_ready(self) -> Delivery | None:
        """The next delivery to hand out (skipping those acknowledged meanwhile), or None."""
        ready = self._ready
        while ready:
            d = ready.popleft()
            if not d.done:
                return d
        return None

    def _hand_out(self, d: Delivery, now: float) -> Any:
        if d.offsets:
            self._by_id[id(d.message)] = d
            if self._timer is not None:
                self._timer.start(d, now)
        return d.message

    def _service(self, now: float) -> None:
        """Stores, letters' reports, redeliveries due, ack timeouts, held messages due,
        chunks expired."""
        if self._dirty and now >= self._next_flush:
            # at most every STORE_EVERY_S: a poll() per message does not store each time
            self._next_flush = now + STORE_EVERY_S
            self.flush_stores()
        if self._letters.in_flight:
            self._letters.poll()
        if self._redeliver:
            for d in self._redeliver.pop_due(now):
                self._ready.append(d)
        if self._timer is not None:
            for d, deadline in self._timer.expired(now):
                self._fail(d, deadline, "its ack timeout ran out")
        if self._held:
            wall_ms = self._wall() * 1000.0
            for key, held in list(self._held.items()):
                while held and (held[0].due_ms is None or held[0].due_ms <= wall_ms):
                    self._ready.append(held.popleft())
                if not held:
                    del self._held[key]
                    self._resume(key)
        if self._chunks is not None:
            for parts in self._chunks.expired():
                self._drop_chunks(parts, "kbear.chunking.expire.ms ran out")

    def _wake(self, now: float) -> float | None:
        """Seconds until something is due (None: nothing)."""
        times = [self._redeliver.next_due()] if self._redeliver else []
        if self._timer is not None:
            times.append(self._timer.next_check())
        if self._held:
            wall_s = self._wall()
            times += [now + h[0].due_ms / 1000.0 - wall_s for h in self._held.values() if h and h[0].due_ms]
        if self._chunks is not None:
            times.append(self._chunks.next_expiry())
        if self._letters.in_flight:
            times.append(now + _LETTER_SLICE_S)
        due = [t for t in times if t is not None]
        return max(0.0, min(due) - now) if due else None

    def _wait(self, deadline: Deadline, now: float) -> float:
        left = deadline.remaining()
        wake = self._wake(now)
        wait = _WAIT_SLICE_S if left is None else min(left, _WAIT_SLICE_S)
        return wait if wake is None else min(wait, wake)

    def poll(self, timeout: float | None = None) -> Any:
        """``RoutedConsumer.poll`` in individual mode (same arguments, returns, errors)."""
        deadline = Deadline(timeout)
        owner = self._owner
        while True:
            now = self._clock()
            with self._lock:
                self._service(now)
                d = self._next_ready()
                if d is not None:
                    return self._hand_out(d, now)
                wait = self._wait(deadline, now)
            msg = PollLoop.poll(owner, wait)
            if msg is not None:
                if msg.error() is not None:
                    return msg
                with self._lock:
                    self._take(msg)
                    d = self._next_ready()
                    if d is not None:
                        return self._hand_out(d, self._clock())
            if deadline.expired():
                return None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        """``RoutedConsumer.consume`` in individual mode (same arguments, returns, errors)."""
        if not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")  # confluent-kafka's words
        deadline = Deadline(timeout)
        owner = self._owner
        out: list[Any] = []
        while True:
            now = self._clock()
            with self._lock:
                self._service(now)
                while len(out) < num_messages and (d := self._next_ready()) is not None:
                    out.append(self._hand_out(d, now))
                if len(out) >= num_messages:
                    return out
                wait = 0.0 if out else self._wait(deadline, now)
            got = PollLoop.consume(owner, num_messages - len(out), wait)
            with self._lock:
                for msg in got:
                    if msg.error() is not None:
                        out.append(msg)
                    else:
                        self._take(msg)
                now = self._clock()
                while len(out) < num_messages and (d := self._next_ready()) is not None:
                    out.append(self._hand_out(d, now))
            if out or deadline.expired():
                return out

    def _pause(self, key: PartitionKey) -> None:
        entry = self._owner._registry.get(key[0])
        if entry is not None:
            try:
                entry.consumer.pause([TopicPartition(key[1], key[2])])
                self._paused.add(key)
            except KafkaException as exc:
                log.debug("kbear: pause of %s for a delayed message failed: %s", key, exc)

    def _resume(self, key: PartitionKey) -> None:
        if key not in self._paused:
            return
        self._paused.discard(key)
        entry = self._owner._registry.get(key[0])
        if entry is not None:
            try:
                entry.consumer.resume([TopicPartition(key[1], key[2])])
            except KafkaException as exc:
                log.debug("kbear: resume of %s failed: %s", key, exc)
