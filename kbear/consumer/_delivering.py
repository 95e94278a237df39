"""The delivering part of the individual-acknowledgement layer.

Responsible for: what ``poll()``/``consume()`` return with
``kbear.ack.mode=individual``: each message read is tracked by its cluster (the
poll loop's tap), then handed out at once, held until its delivery time (the
partition paused meanwhile, so order is kept), or joined with its other chunks;
nacked and timed-out messages come back from the redelivery schedule. The
verdicts (ack, nack, letters) and the stores are
:class:`~kbear.consumer._individual.AckLayer`'s; both parts work on one
:class:`AckState`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import TopicPartition

from kbear._clients import Deadline
from kbear.consumer._acks import AckTracker, PartitionKey
from kbear.consumer._chunks import ChunkAssembler, chunk_of
from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._holding import pause_quietly, resume_quietly
from kbear.consumer._letters import DELIVER_AT, REAL_TOPIC, LetterSender, header, int_header
from kbear.consumer._redelivery import AckTimer, Schedule

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


@dataclass(eq=False)
class AckState:
    """The individual-acknowledgement state of one RoutedConsumer, shared by its
    delivering part (:class:`DeliveryLoop`) and its verdicts
    (:class:`~kbear.consumer._individual.AckLayer`); every change under ``lock``.

    Attributes:
        letters: the retry / dead-letter producer.
        clock: monotonic seconds (backoff, ack timeout); wall: epoch seconds
            (delivery times, ``kbear-deliver-at``).
        tracker: the offsets read and not acknowledged, per partition.
        open: partition -> offset read -> its delivery.
        by_id: ``id(message handed out)`` -> its delivery.
        origin: ``id(message read)`` -> (cluster id, physical topic), from the tap.
        dirty: acknowledged prefixes noted, not yet stored.
        redeliver: nacked and timed-out deliveries, by due time.
        timer: the ack timeout (``kbear.ack.timeout.ms`` > 0) or None.
        chunks: the chunk assembler (``kbear.chunking.enable``) or None.
        held: partition -> deliveries held until their delivery time (partition paused).
        paused: partitions paused for held deliveries.
        ready: deliveries to hand out, in order.
        retry_topics: the retry topics subscribed (their messages get their real topic back).
    """

    letters: LetterSender
    timer: AckTimer[Delivery] | None = None
    chunks: ChunkAssembler[Delivery] | None = None
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    lock: threading.RLock = field(default_factory=threading.RLock)
    tracker: AckTracker = field(default_factory=AckTracker)
    open: dict[PartitionKey, dict[int, Delivery]] = field(default_factory=dict)
    by_id: dict[int, Delivery] = field(default_factory=dict)
    origin: dict[int, tuple[str, str]] = field(default_factory=dict)
    dirty: dict[PartitionKey, int] = field(default_factory=dict)
    redeliver: Schedule[Delivery] = field(default_factory=Schedule)
    held: dict[PartitionKey, deque[Delivery]] = field(default_factory=dict)
    paused: set[PartitionKey] = field(default_factory=set)
    ready: deque[Delivery] = field(default_factory=deque)
    retry_topics: set[str] = field(default_factory=set)


class Verdicts(Protocol):
    """What the delivering part asks of the verdicts (:class:`~kbear.consumer._individual.AckLayer`)."""

    def fail(self, d: Delivery, base: float, why: str) -> None:
        """``d`` failed at ``base`` (monotonic seconds): redelivered later or dead-lettered."""

    def settle(self, d: Delivery) -> None:
        """``d`` is acknowledged."""

    def drop_chunks(self, parts: list[Delivery], why: str) -> None:
        """An incomplete chunked message is given up (its chunks acknowledged)."""

    def flush_stores(self) -> None:
        """Store the acknowledged prefixes noted."""


@dataclass(eq=False)
class DeliveryLoop:
    """``poll``/``consume`` of the acknowledgement layer (see the module docstring).

    Args:
        state: the acknowledgement state shared with ``verdicts``.
        verdicts: the acknowledgement layer's outcomes.
        registry: the consumer's per-cluster clients (pauses for held messages).
        read: the consumer's poll loop's ``consume`` (:meth:`PollLoop.consume`),
            whose tap is :meth:`tap`.
    """

    state: AckState
    verdicts: Verdicts
    registry: ClusterRegistry
    read: Callable[[int, float | None], list[Any]]

    _next_flush: float = field(default=0.0, init=False)

    def tap(self, entry: ClusterClient, msg: Any) -> None:
        """The poll loop read ``msg`` from ``entry``'s cluster (physical name still set)."""
        if msg.error() is None:
            self.state.origin[id(msg)] = (entry.cluster_id, msg.topic())

    def _take(self, msg: Any) -> None:
        """A message read from a cluster: tracked, then ready, held or joined."""
        st = self.state
        origin = st.origin.pop(id(msg), None)
        if origin is None:  # not read through the poll loop's tap: handed out as it is
            st.ready.append(Delivery(("", "", -1), [], msg))
            return
        key = (origin[0], origin[1], int(msg.partition()))
        offset = int(msg.offset())
        if not st.tracker.read(key, offset):
            return  # read again while its earlier reading is unacknowledged: that one is delivered
        d = Delivery(key, [offset], msg)
        st.open.setdefault(key, {})[offset] = d
        headers = msg.headers()
        if headers:
            if st.chunks is not None:
                chunk = chunk_of(headers)
                if chunk is not None:
                    joined, items, dropped = st.chunks.add(msg, d, chunk)
                    for parts in dropped:
                        self.verdicts.drop_chunks(parts, "over kbear.chunking.max.pending")
                    if joined is None:
                        if items:  # the same chunk twice: the copy is acknowledged
                            self.verdicts.settle(d)
                        return
                    d = Delivery(key, [o for it in items for o in it.offsets], joined)
                    for o in d.offsets:
                        st.open[key][o] = d
                    headers = joined.headers()
            real = header(headers, REAL_TOPIC)
            if real is not None and msg.topic() in st.retry_topics:
                d.message.set_topic(real.decode(errors="replace"))
            d.due_ms = int_header(headers, DELIVER_AT)
        held = st.held.get(key)
        if held is not None or (d.due_ms is not None and d.due_ms > st.wall() * 1000.0):
            if held is None:
                held = st.held[key] = deque()
                self._pause(key)
            held.append(d)
            return
        st.ready.append(d)

    def _next_ready(self) -> Delivery | None:
        """The next delivery to hand out (skipping those acknowledged meanwhile), or None."""
        ready = self.state.ready
        while ready:
            d = ready.popleft()
            if not d.done:
                return d
        return None

    def _hand_out(self, d: Delivery, now: float) -> Any:
        if d.offsets:
            self.state.by_id[id(d.message)] = d
            if self.state.timer is not None:
                self.state.timer.start(d, now)
        return d.message

    def _service(self, now: float) -> None:
        """Stores, letters' reports, redeliveries due, ack timeouts, held messages due,
        chunks expired."""
        st = self.state
        if st.dirty and now >= self._next_flush:
            # at most every STORE_EVERY_S: a poll() per message does not store each time
            self._next_flush = now + STORE_EVERY_S
            self.verdicts.flush_stores()
        if st.letters.in_flight:
            st.letters.poll()
        if st.redeliver:
            for d, _ in st.redeliver.pop_due(now):
                st.ready.append(d)
        if st.timer is not None:
            for d, deadline in st.timer.expired(now):
                self.verdicts.fail(d, deadline, "its ack timeout ran out")
        if st.held:
            wall_ms = st.wall() * 1000.0
            for key, held in list(st.held.items()):
                while held and (held[0].due_ms is None or held[0].due_ms <= wall_ms):
                    st.ready.append(held.popleft())
                if not held:
                    del st.held[key]
                    self._resume(key)
        if st.chunks is not None:
            for parts in st.chunks.expired():
                self.verdicts.drop_chunks(parts, "kbear.chunking.expire.ms ran out")

    def _wake(self, now: float) -> float | None:
        """Seconds until something is due (None: nothing)."""
        st = self.state
        times = [st.redeliver.next_due()] if st.redeliver else []
        if st.timer is not None:
            times.append(st.timer.next_check())
        if st.held:
            wall_s = st.wall()
            times += [now + h[0].due_ms / 1000.0 - wall_s for h in st.held.values() if h and h[0].due_ms]
        if st.chunks is not None:
            times.append(st.chunks.next_expiry())
        if st.letters.in_flight:
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
        got = self.consume(1, timeout)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        """``RoutedConsumer.consume`` in individual mode (same arguments, returns, errors)."""
        if not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")  # confluent-kafka's words
        deadline = Deadline(timeout)
        out: list[Any] = []
        while True:
            now = self.state.clock()
            with self.state.lock:
                self._service(now)
                while len(out) < num_messages and (d := self._next_ready()) is not None:
                    out.append(self._hand_out(d, now))
                if len(out) >= num_messages:
                    return out
                wait = 0.0 if out else self._wait(deadline, now)
            got = self.read(num_messages - len(out), wait)
            with self.state.lock:
                for msg in got:
                    if msg.error() is not None:
                        out.append(msg)
                    else:
                        self._take(msg)
                now = self.state.clock()
                while len(out) < num_messages and (d := self._next_ready()) is not None:
                    out.append(self._hand_out(d, now))
            if out or deadline.expired():
                return out

    def _pause(self, key: PartitionKey) -> None:
        entry = self.registry.get(key[0])
        if entry is not None and pause_quietly(entry, [TopicPartition(key[1], key[2])]):
            self.state.paused.add(key)

    def _resume(self, key: PartitionKey) -> None:
        if key not in self.state.paused:
            return
        self.state.paused.discard(key)
        entry = self.registry.get(key[0])
        if entry is not None:
            resume_quietly(entry, [TopicPartition(key[1], key[2])])
