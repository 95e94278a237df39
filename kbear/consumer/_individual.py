"""Message-level acknowledgement of a RoutedConsumer (``kbear.ack.mode=individual``).

Responsible for (with its delivering part :class:`~kbear.consumer._delivering.DeliveryLoop`,
what the application's ``poll()``/``consume()`` return in individual mode:
messages read, nacked ones again after their backoff, delayed ones not before
their time, chunked values joined, retry-topic messages under their real topic;
both work on one :class:`~kbear.consumer._delivering.AckState`, built by
:func:`open_acks`): ``ack`` / ``ack_cumulative`` / ``nack`` / ``reconsume_later``,
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

With ``kbear.ack.mode=offset`` (the default, :func:`check_ack_settings`) nothing of
the layer exists: ``poll``/``consume`` keep their fast paths, and the consumer's
acknowledgement calls go to :class:`OffsetAcks`, which refuses them.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kbear._identity import Client
from kbear._modes import AckMode
from kbear._route import Route
from kbear.consumer._acks import PartitionKey
from kbear.consumer._chunks import ChunkAssembler
from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._delivering import AckState, Delivery, DeliveryLoop
from kbear.consumer._letters import (
    RECONSUMETIMES,
    LetterSender,
    int_header,
    letter_headers,
    letter_topic,
    producer_config,
)
from kbear.consumer._redelivery import AckTimer, Backoff, next_delivery
from kbear.router import Router
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


@dataclass(eq=False)
class AckLayer:
    """The individual-acknowledgement verdicts and stores of one RoutedConsumer
    (module docstring).

    Args:
        state: the acknowledgement state, shared with the delivering part.
        registry: the consumer's per-cluster clients (stores and commits).
        routes: the consumer's routes in use (logical topic -> route; read when
            partitions are revoked).
        settings: its kbear settings (``kbear.nack.*``, ``kbear.ack.timeout.*``,
            ``kbear.retry.*``, ``kbear.dlq.topic``, ``kbear.max.redeliver.count``,
            ``kbear.chunking.*``).
        group: its ``group.id`` (letter topic names).
    """

    state: AckState
    registry: ClusterRegistry
    routes: Callable[[], Mapping[str, Route]]
    settings: KBearSettings
    group: str

    def __post_init__(self) -> None:
        self._stored: dict[PartitionKey, int] = {}
        self._backoff = Backoff(
            self.settings.nack_backoff_min_ms / 1000.0,
            self.settings.nack_backoff_max_ms / 1000.0,
            self.settings.nack_backoff_multiplier,
        )

    # ------------------------------------------------------------------ the application's verdicts

    def _find(self, msg: Any) -> Delivery | None:
        d = self.state.by_id.get(id(msg))
        if d is not None:
            return d
        # another Message object for the same record: by partition and offset
        partition, offset, topic = msg.partition(), msg.offset(), msg.topic()
        for key, offsets in self.state.open.items():
            if key[2] == partition and offset in offsets:
                found = offsets[offset]
                if found.message.topic() == topic and id(found.message) in self.state.by_id:
                    return found
        return None

    def ack(self, message: Message) -> None:
        """Acknowledge ``message`` (``kbear.ack.mode=individual``), in any order: its
        partition's committed offset advances over the contiguous prefix of
        acknowledged messages, never past an unacknowledged one. A message already
        acknowledged, or of a partition this member lost, is ignored.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        with self.state.lock:
            d = self._find(message)
            if d is not None and not d.lettering:
                self.settle(d)

    def ack_cumulative(self, message: Message) -> None:
        """Acknowledge ``message`` and every message read before it on its partition
        (of its cluster; including ones waiting for a redelivery or their delivery time).

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        with self.state.lock:
            d = self._find(message)
            if d is None:
                return
            point, done = self.state.tracker.ack_upto(d.key, max(d.offsets))
            offsets = self.state.open.get(d.key, {})
            gone = {id(x): x for x in (offsets.pop(o, None) for o in done) if x is not None}
            for x in gone.values():
                self._discard(x)
            # (those ready to hand out are skipped as done; held ones no longer hold their partition)
            if gone and d.key in self.state.held:
                self.state.held[d.key] = deque(x for x in self.state.held[d.key] if id(x) not in gone)
            self._store(d.key, point)

    def nack(self, message: Message) -> None:
        """Negative acknowledgement: ``message`` is delivered again by ``poll``/``consume``
        after ``min(kbear.nack.backoff.min.ms * multiplier**n, max.ms)`` (n: its
        redeliveries so far), or, after ``kbear.max.redeliver.count`` redeliveries,
        sent to its dead-letter topic and acknowledged once stored there.

        Raises:
            KafkaException: ``_STATE`` when ``kbear.ack.mode`` is ``offset``.
        """
        with self.state.lock:
            d = self._find(message)
            if d is None or d.lettering:
                return
            self._unschedule(d)
            self.fail(d, self.state.clock(), "nack")

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
            BufferError: the letter producer's queue is full.
        """
        if not self.settings.retry_enable:
            raise KafkaException(
                KafkaError(KafkaError._STATE, "reconsume_later: set kbear.retry.enable=true")
            )
        if delay_s < 0:
            raise ValueError(f"reconsume_later: delay_s must be >= 0, got {delay_s!r}")
        with self.state.lock:
            d = self._find(message)
            if d is None or d.lettering:
                raise ValueError("reconsume_later: not an unacknowledged message of this consumer")
            times = (int_header(d.message.headers(), RECONSUMETIMES) or 0) + 1
            limit = self.settings.max_redeliver_count
            if limit > 0 and times > limit:
                self._letter(d, self.settings.dlq_topic, times - 1, 0, None, properties)
                return
            delay_ms = math.ceil(delay_s * 1000)
            at = math.ceil(self.state.wall() * 1000) + delay_ms
            self._letter(d, self.settings.retry_topic, times, delay_ms, at, properties)

    # ------------------------------------------------------------------ outcomes

    def fail(self, d: Delivery, base: float, why: str) -> None:
        """``d`` failed at ``base`` (nack, ack timeout): redelivered later or dead-lettered."""
        total = d.redeliveries + (int_header(d.message.headers(), RECONSUMETIMES) or 0)
        due = next_delivery(total, base, self._backoff, self.settings.max_redeliver_count)
        if due is None:
            try:
                self._letter(d, self.settings.dlq_topic, total, 0, None, None)
                return
            except (KafkaException, BufferError, LookupError) as exc:
                log.error("kbear: dead-letter topic refused %s (%s): redelivered instead", d.origin, exc)
                due = base + self._backoff.max_s
        else:
            d.redeliveries += 1
        log.debug("kbear: %s redelivered in %.3f s (%s)", d.origin, due - base, why)
        self.state.redeliver.add(due, d)

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
        topic = letter_topic(template, real, self.group)

        def done(err: Any) -> None:
            with self.state.lock:
                d.lettering = False
                if err is None:
                    self.settle(d)
                else:
                    log.error("kbear: letter of %s to %r failed (%s): redelivered", d.origin, topic, err)
                    self.state.redeliver.add(self.state.clock() + self._backoff.max_s, d)

        self.state.letters.send(topic, msg.key(), msg.value(), headers, done)
        d.lettering = True
        self._unschedule(d)

    def _unschedule(self, d: Delivery) -> None:
        """``d`` is neither redelivered nor timed out (unless scheduled again)."""
        self.state.redeliver.discard(d)
        if self.state.timer is not None:
            self.state.timer.stop(d)

    def _discard(self, d: Delivery) -> None:
        d.done = True
        self._unschedule(d)
        if self.state.by_id.get(id(d.message)) is d:
            del self.state.by_id[id(d.message)]

    def settle(self, d: Delivery) -> None:
        """``d`` is acknowledged: its offsets leave the tracker; the prefix is stored."""
        self._discard(d)
        offsets = self.state.open.get(d.key)
        if offsets is not None:
            for o in d.offsets:
                offsets.pop(o, None)
        self._store(d.key, self.state.tracker.ack(d.key, d.offsets))

    def drop_chunks(self, parts: list[Delivery], why: str) -> None:
        """An incomplete chunked message is given up (its chunks acknowledged)."""
        log.warning("kbear: incomplete chunked message dropped (%d chunks read; %s)", len(parts), why)
        for d in parts:
            self.settle(d)

    def _store(self, key: PartitionKey, point: int | None) -> None:
        """Note ``point`` (the acknowledged prefix) of ``key``: stored for the next
        commit of its cluster at the next :meth:`flush_stores`."""
        if point is None or point <= self._stored.get(key, -1):
            return
        self._stored[key] = point
        self.state.dirty[key] = point

    def flush_stores(self) -> None:
        """Store the acknowledged prefixes noted since the last call (``store_offsets``,
        one call per cluster); a partition this member no longer has (its topic moved
        away) is committed instead. Run at every ``poll()``/``consume()``, before
        ``commit()`` and at ``close()``."""
        with self.state.lock:
            if not self.state.dirty:
                return
            by_cluster: dict[str, list[TopicPartition]] = {}
            for (cluster, topic, partition), point in self.state.dirty.items():
                by_cluster.setdefault(cluster, []).append(TopicPartition(topic, partition, point))
            self.state.dirty.clear()
        for cluster, parts in by_cluster.items():
            entry = self.registry.get(cluster)
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
                    self.registry.watcher(entry).commit(offsets=[tp], asynchronous=True)
                except (KafkaException, RuntimeError) as exc:
                    log.warning("kbear: commit of %s after its partition left failed: %s", tp, exc)

    # ------------------------------------------------------------------ partitions
    def commit_points(self, entry: ClusterClient, positions: list[TopicPartition]) -> list[TopicPartition]:
        """``positions`` (of ``entry``'s cluster, physical names) lowered to the
        acknowledged prefix where a message at or after it is unacknowledged."""
        with self.state.lock:
            out = []
            for tp in positions:
                point = self.state.tracker.point((entry.cluster_id, tp.topic, tp.partition))
                if point is not None and point < tp.offset:
                    tp = TopicPartition(tp.topic, tp.partition, point)
                out.append(tp)
            return out

    def revoked(self, entry: ClusterClient, partitions: Sequence[TopicPartition]) -> None:
        """``partitions`` (physical names) left ``entry``'s client: forgotten (the next
        owner reads their unacknowledged messages again from the committed prefix),
        unless their topic moved to another cluster: then they stay in memory,
        redelivered until acknowledged."""
        routes = self.routes()
        with self.state.lock:
            for tp in partitions:
                route = routes.get(entry.logical_name(tp.topic))
                if route is not None and route.cluster_id != entry.cluster_id:
                    continue
                self._forget((entry.cluster_id, tp.topic, tp.partition))

    def _forget(self, key: PartitionKey) -> None:
        self.state.tracker.forget(key)
        self._stored.pop(key, None)
        self.state.dirty.pop(key, None)
        for d in self.state.open.pop(key, {}).values():
            self._discard(d)  # (skipped as done if ready to hand out)
        self.state.held.pop(key, None)
        self.state.paused.discard(key)
        if self.state.chunks is not None:
            self.state.chunks.forget(lambda d: d.key != key)

    def with_retry_topics(self, topics: Iterable[str]) -> list[str]:
        """``topics`` and, with ``kbear.retry.enable``, the retry topic of each name
        (not of ``^patterns``)."""
        names = list(topics)
        if not self.settings.retry_enable:
            return names
        out = list(names)
        for topic in names:
            if topic.startswith("^") or topic in self.state.retry_topics:
                continue
            retry = letter_topic(self.settings.retry_topic, topic, self.group)
            self.state.retry_topics.add(retry)
            if retry not in out:
                out.append(retry)
        return out

    def unacked(self) -> int:
        """How many offsets read are not acknowledged (held and in flight included)."""
        with self.state.lock:
            return len(self.state.tracker)

    def close(self) -> None:
        """Wait for letters in flight (up to ``kbear.switch.drain.timeout.ms``), so the
        messages they stand for are acknowledged before the final commit."""
        with self.state.lock:
            self.state.letters.close(self.settings.drain_timeout_ms / 1000.0)
        self.flush_stores()


def open_acks(
    settings: KBearSettings,
    group: str,
    native: Mapping[str, Any],
    *,
    router: Router,
    client: Client,
    registry: ClusterRegistry,
    routes: Callable[[], Mapping[str, Route]],
    consume: Callable[[int, float | None], list[Any]],
) -> tuple[AckLayer, DeliveryLoop]:
    """The acknowledgement layer of a consumer (``kbear.ack.mode=individual``): its
    verdicts and its delivering part, on one state.

    Args:
        settings, group: the consumer's kbear settings and ``group.id``.
        native: its confluent-kafka configuration (the letter producer's security).
        router, client: where letters are routed (the retry and dead-letter topics).
        registry: its per-cluster clients.
        routes: its routes in use (logical topic -> route).
        consume: its poll loop's ``consume`` (the delivering part reads through it).
    """
    state = AckState(
        LetterSender(router, client, producer_config(native)),
        timer=AckTimer(settings.ack_timeout_ms / 1000.0, settings.ack_timeout_tick_ms / 1000.0)
        if settings.ack_timeout_ms > 0
        else None,
        chunks=ChunkAssembler(
            settings.chunking_expire_ms / 1000.0, settings.chunking_max_pending, time.monotonic
        )
        if settings.chunking_enable
        else None,
    )
    layer = AckLayer(state, registry, routes, settings, group)
    return layer, DeliveryLoop(state, layer, registry, consume)
