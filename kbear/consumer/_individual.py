"""Message-level acknowledgement of a RoutedConsumer (``kbear.ack.mode=individual``).

Responsible for: what the application's ``poll()``/``consume()`` return in
individual mode (messages read, nacked ones again after their backoff, delayed
ones not before their time, chunked values joined, retry-topic messages under
their real topic), ``ack`` / ``ack_cumulative`` / ``nack`` / ``reconsume_later``,
and the offsets kbear lets librdkafka commit: per partition only the contiguous
prefix of acknowledged offsets (:mod:`kbear.consumer._acks`), stored with
``store_offsets`` (``enable.auto.offset.store`` is forced off), so the
automatic commits, kbear's commits during a move and on revoke, and
``commit()`` never pass an unacknowledged message.

Every message read is tracked by the cluster it came from (the tap in the poll
loop records it before the logical name is set): a message read on a topic's old
cluster during a move stays tracked there, is redelivered from memory until it is
acknowledged, and its acknowledgement is committed on that cluster.

Messages are kept in memory from their reading to their acknowledgement (for
redelivery without a fetch); the backoff and the ack timeout use the monotonic
clock, delivery times (``kbear-deliver-at``) the wall clock; both are injectable.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear._clients import Deadline
from kbear.consumer._acks import AckTracker, PartitionKey
from kbear.consumer._chunks import ChunkAssembler, chunk_of
from kbear.consumer._letters import (
    DELIVER_AT,
    REAL_TOPIC,
    RECONSUMETIMES,
    LetterSender,
    header,
    int_header,
    letter_headers,
    letter_topic,
    producer_config,
)
from kbear.consumer._polling import PollLoop
from kbear.consumer._redelivery import AckTimer, Backoff, Schedule, next_delivery
from kbear.settings import KBearSettings

if TYPE_CHECKING:
    from kbear.consumer._cluster import ClusterClient
    from kbear.consumer._facade import RoutedConsumer

log = logging.getLogger("kbear.consumer")

#: Longest single wait on the clusters while nothing is due (seconds): a nack made
#: from another thread is served within it.
_WAIT_SLICE_S = 0.2
#: Wait while letters are in flight (seconds): their delivery reports acknowledge.
_LETTER_SLICE_S = 0.02


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


class AckLayer:
    """The individual-acknowledgement state of one RoutedConsumer (module docstring).

    Args:
        owner: the RoutedConsumer (its registry, subscription and poll loop).
        settings: its kbear settings (``kbear.nack.*``, ``kbear.ack.timeout.*``,
            ``kbear.retry.*``, ``kbear.dlq.topic``, ``kbear.max.redeliver.count``,
            ``kbear.chunking.*``).
        group: its ``group.id`` (letter topic names).
        native: its confluent-kafka configuration (the letter producer's security).
        clock: monotonic seconds; wall: epoch seconds.
    """

    def __init__(
        self,
        owner: RoutedConsumer,
        settings: KBearSettings,
        group: str,
        native: Mapping[str, Any],
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._owner = owner
        self._s = settings
        self._group = group
        self._clock = clock
        self._wall = wall
        self._lock = threading.RLock()
        self._tracker = AckTracker()
        self._open: dict[PartitionKey, dict[int, Delivery]] = {}  # offsets read -> their delivery
        self._by_id: dict[int, Delivery] = {}  # id(message handed out) -> its delivery
        self._origin: dict[int, tuple[str, str]] = {}  # id(message) -> (cluster, physical topic)
        self._stored: dict[PartitionKey, int] = {}
        self._dirty: dict[PartitionKey, int] = {}  # prefixes noted, not yet stored
        self._backoff = Backoff(
            settings.nack_backoff_min_ms / 1000.0,
            settings.nack_backoff_max_ms / 1000.0,
            settings.nack_backoff_multiplier,
        )
        self._redeliver: Schedule[Delivery] = Schedule()
        self._timer: AckTimer[Delivery] | None = (
            AckTimer(settings.ack_timeout_ms / 1000.0, settings.ack_timeout_tick_ms / 1000.0)
            if settings.ack_timeout_ms > 0
            else None
        )
        self._chunks: ChunkAssembler[Delivery] | None = (
            ChunkAssembler(settings.chunking_expire_ms / 1000.0, settings.chunking_max_pending, clock)
            if settings.chunking_enable
            else None
        )
        self._held: dict[PartitionKey, deque[Delivery]] = {}
        self._paused: set[PartitionKey] = set()
        self._ready: deque[Delivery] = deque()
        self._retry_topics: set[str] = set()
        self._letters = LetterSender(owner._router, owner._client, producer_config(native))

    # ------------------------------------------------------------------ reading

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
        if self._dirty:
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

    # ------------------------------------------------------------------ the application's verdicts

    def _find(self, msg: Any) -> Delivery | None:
        d = self._by_id.get(id(msg))
        if d is not None:
            return d
        # another Message object for the same record: by partition and offset
        partition, offset, topic = msg.partition(), msg.offset(), msg.topic()
        for key, offsets in self._open.items():
            if key[2] == partition and offset in offsets:
                found = offsets[offset]
                if found.message.topic() == topic and id(found.message) in self._by_id:
                    return found
        return None

    def ack(self, msg: Any) -> None:
        """Acknowledge ``msg`` (unknown or already acknowledged: nothing happens)."""
        with self._lock:
            d = self._find(msg)
            if d is not None and not d.lettering:
                self._settle(d)

    def ack_cumulative(self, msg: Any) -> None:
        """Acknowledge ``msg`` and every message read before it on its partition (of
        its cluster), delivered or not yet (redeliveries and held ones included)."""
        with self._lock:
            d = self._find(msg)
            if d is None:
                return
            point, done = self._tracker.ack_upto(d.key, max(d.offsets))
            offsets = self._open.get(d.key, {})
            gone = {id(x): x for x in (offsets.pop(o, None) for o in done) if x is not None}
            for x in gone.values():
                self._discard(x)
            if gone and d.key in self._held:
                self._held[d.key] = deque(x for x in self._held[d.key] if id(x) not in gone)
            if gone:
                self._ready = deque(x for x in self._ready if id(x) not in gone)
            self._store(d.key, point)

    def nack(self, msg: Any) -> None:
        """Deliver ``msg`` again after the backoff delay, or send it to the dead-letter
        topic after ``kbear.max.redeliver.count`` redeliveries."""
        with self._lock:
            d = self._find(msg)
            if d is None or d.lettering:
                return
            if self._timer is not None:
                self._timer.stop(d)
            self._fail(d, self._clock(), "nack")

    def reconsume_later(
        self, msg: Any, delay_s: float, properties: Mapping[str, str | bytes] | None = None
    ) -> None:
        """Send ``msg`` to its retry topic, delivered again no earlier than ``delay_s``
        seconds from now, and acknowledge it once the retry topic's cluster stored it;
        after ``kbear.max.redeliver.count`` retries to the dead-letter topic instead.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.retry.enable`` is off.
            ValueError: ``msg`` is not an unacknowledged message of this consumer,
                or ``delay_s`` < 0.
            NoRouteError: the retry (or dead-letter) topic has no route.
            BufferError, KafkaException: the letter producer refused the message.
        """
        if not self._s.retry_enable:
            raise KafkaException(
                KafkaError(KafkaError._STATE, "reconsume_later: set kbear.retry.enable=true")
            )
        if delay_s < 0:
            raise ValueError(f"reconsume_later: delay_s must be >= 0, got {delay_s!r}")
        with self._lock:
            d = self._find(msg)
            if d is None or d.lettering:
                raise ValueError("reconsume_later: not an unacknowledged message of this consumer")
            times = (int_header(msg.headers(), RECONSUMETIMES) or 0) + 1
            limit = self._s.max_redeliver_count
            if limit > 0 and times > limit:
                self._letter(d, self._s.dlq_topic, times - 1, 0, None, properties)
                return
            delay_ms = math.ceil(delay_s * 1000)
            at = math.ceil(self._wall() * 1000) + delay_ms
            self._letter(d, self._s.retry_topic, times, delay_ms, at, properties)

    # ------------------------------------------------------------------ outcomes

    def _fail(self, d: Delivery, base: float, why: str) -> None:
        """``d`` failed at ``base`` (nack, ack timeout): redelivered later or dead-lettered."""
        total = d.redeliveries + (int_header(d.message.headers(), RECONSUMETIMES) or 0)
        due = next_delivery(total, base, self._backoff, self._s.max_redeliver_count)
        if due is None:
            try:
                self._letter(d, self._s.dlq_topic, total, 0, None, None)
                return
            except (KafkaException, BufferError, LookupError) as exc:
                log.error("kbear: dead-letter topic refused %s (%s): redelivered instead", d.origin, exc)
                due = base + self._backoff.max_s
        else:
            d.redeliveries += 1
        log.debug("kbear: %s redelivered in %.3f s (%s)", d.origin, due - base, why)
        self._redeliver.add(due, d)

    def _letter(
        self,
        d: Delivery,
        template: str,
        times: int,
        delay_ms: int,
        at_ms: int | None,
        properties: Mapping[str, str | bytes] | None,
    ) -> None:
        msg = d.message
        real = str(msg.topic())
        headers = letter_headers(
            msg.headers(),
            real_topic=real,
            origin=d.origin,
            reconsume_times=times,
            delay_ms=delay_ms,
            deliver_at_ms=at_ms,
            properties=properties,
        )
        topic = letter_topic(template, real, self._group)

        def done(err: Any) -> None:
            with self._lock:
                d.lettering = False
                if err is None:
                    self._settle(d)
                else:
                    log.error("kbear: letter of %s to %r failed (%s): redelivered", d.origin, topic, err)
                    self._redeliver.add(self._clock() + self._backoff.max_s, d)

        self._letters.send(topic, msg.key(), msg.value(), headers, done)
        d.lettering = True
        self._redeliver.discard(d)
        if self._timer is not None:
            self._timer.stop(d)

    def _discard(self, d: Delivery) -> None:
        d.done = True
        self._redeliver.discard(d)
        if self._timer is not None:
            self._timer.stop(d)
        if self._by_id.get(id(d.message)) is d:
            del self._by_id[id(d.message)]

    def _settle(self, d: Delivery) -> None:
        """``d`` is acknowledged: its offsets leave the tracker; the prefix is stored."""
        self._discard(d)
        offsets = self._open.get(d.key)
        if offsets is not None:
            for o in d.offsets:
                offsets.pop(o, None)
        self._store(d.key, self._tracker.ack(d.key, d.offsets))

    def _drop_chunks(self, parts: list[Delivery], why: str) -> None:
        log.warning("kbear: incomplete chunked message dropped (%d chunks read; %s)", len(parts), why)
        for d in parts:
            self._settle(d)

    def _store(self, key: PartitionKey, point: int | None) -> None:
        """Note ``point`` (the acknowledged prefix) of ``key``: stored for the next
        commit of its cluster at the next :meth:`flush_stores`."""
        if point is None or point <= self._stored.get(key, -1):
            return
        self._stored[key] = point
        self._dirty[key] = point

    def flush_stores(self) -> None:
        """Store the acknowledged prefixes noted since the last call (``store_offsets``,
        one call per cluster); a partition this member no longer has (its topic moved
        away) is committed instead. Run at every ``poll()``/``consume()``, before
        ``commit()`` and at ``close()``."""
        with self._lock:
            if not self._dirty:
                return
            by_cluster: dict[str, list[TopicPartition]] = {}
            for (cluster, topic, partition), point in self._dirty.items():
                by_cluster.setdefault(cluster, []).append(TopicPartition(topic, partition, point))
            self._dirty.clear()
        for cluster, parts in by_cluster.items():
            entry = self._owner._registry.get(cluster)
            if entry is None:
                continue
            try:
                entry.consumer.store_offsets(offsets=parts)
            except KafkaException:
                self._store_one_by_one(entry, parts)

    def _store_one_by_one(self, entry: ClusterClient, parts: list[TopicPartition]) -> None:
        for tp in parts:
            try:
                entry.consumer.store_offsets(offsets=[tp])
            except KafkaException:
                # The partition left this member (its topic moved away): the member
                # client may have left the group there, so the commit is sent by the
                # cluster's background client, which never joins it. Best effort: a
                # cluster whose group still has members refuses it (UNKNOWN_MEMBER_ID);
                # the committed offset then stays behind (read again, never skipped).
                try:
                    self._owner._registry.watcher(entry).commit(offsets=[tp], asynchronous=True)
                except (KafkaException, RuntimeError) as exc:
                    log.warning("kbear: commit of %s after its partition left failed: %s", tp, exc)

    # ------------------------------------------------------------------ partitions

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

    def commit_points(self, entry: ClusterClient, positions: list[TopicPartition]) -> list[TopicPartition]:
        """``positions`` (of ``entry``'s cluster, physical names) lowered to the
        acknowledged prefix where a message at or after it is unacknowledged."""
        with self._lock:
            out = []
            for tp in positions:
                point = self._tracker.point((entry.cluster_id, tp.topic, tp.partition))
                if point is not None and point < tp.offset:
                    tp = TopicPartition(tp.topic, tp.partition, point)
                out.append(tp)
            return out

    def revoked(self, entry: ClusterClient, partitions: Sequence[TopicPartition]) -> None:
        """``partitions`` (physical names) left ``entry``'s client: forgotten (the next
        owner reads their unacknowledged messages again from the committed prefix),
        unless their topic moved to another cluster: then they stay in memory,
        redelivered until acknowledged."""
        routes = self._owner._sub.routes
        with self._lock:
            for tp in partitions:
                route = routes.get(entry.logical_name(tp.topic))
                if route is not None and route.cluster_id != entry.cluster_id:
                    continue
                self._forget((entry.cluster_id, tp.topic, tp.partition))

    def _forget(self, key: PartitionKey) -> None:
        self._tracker.forget(key)
        self._stored.pop(key, None)
        self._dirty.pop(key, None)
        gone = self._open.pop(key, {})
        for d in gone.values():
            self._discard(d)
        self._held.pop(key, None)
        self._paused.discard(key)
        if gone:
            self._ready = deque(d for d in self._ready if d.key != key)
        if self._chunks is not None:
            self._chunks.forget(lambda d: d.key != key)

    def with_retry_topics(self, topics: Iterable[str]) -> list[str]:
        """``topics`` and, with ``kbear.retry.enable``, the retry topic of each name
        (not of ``^patterns``)."""
        names = list(topics)
        if not self._s.retry_enable:
            return names
        out = list(names)
        for topic in names:
            if topic.startswith("^") or topic in self._retry_topics:
                continue
            retry = letter_topic(self._s.retry_topic, topic, self._group)
            self._retry_topics.add(retry)
            if retry not in out:
                out.append(retry)
        return out

    def unacked(self) -> int:
        """How many offsets read are not acknowledged (held and in flight included)."""
        with self._lock:
            return len(self._tracker)

    def close(self) -> None:
        """Wait for letters in flight (up to ``kbear.switch.drain.timeout.ms``), so the
        messages they stand for are acknowledged before the final commit."""
        with self._lock:
            self._letters.close(self._s.drain_timeout_ms / 1000.0)
        self.flush_stores()
