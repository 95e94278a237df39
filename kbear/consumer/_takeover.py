"""Partitions a member takes over from another member while a move reshuffles its
group start at the group's latest committed offsets (issue #25 item 4).

On brokers that refuse the commit a member makes as its partitions leave it while
the group rebalances (librdkafka's mock cluster with the classic protocol),
that member commits its positions of the partitions that went to other members in
the new generation's ``on_assign`` (:mod:`kbear.consumer._rebalance`). Their new
owner fetches the group's committed offsets at the same moment, as its own
assignment starts: it wins that race about half the time and reads again what the
other member had read (a new group's whole backlog, when the first member on a
move's new cluster read it alone before the others joined).

:class:`TakeOvers`, while a move is in progress (the :class:`~kbear.consumer._guard.MoveGuard`
is on), with an eager protocol and ``enable.auto.commit`` on:

- in ``on_assign``, the partitions this member did not hold in the generation
  before and that start at the group's committed offset are paused;
- ``RECHECK_AFTER_S`` later the group's committed offsets of those partitions are
  read again, in the background (the cluster's background client);
- in the polling thread then, each partition is sought to that offset (retried at
  the next calls while librdkafka has not started it yet: ``_STATE``) and resumed.
  Where no offset is committed, or the look-up failed, it is resumed where
  librdkafka started it. At most ``give_up_s`` after the assignment every
  partition is resumed.

Nothing is lost: a committed offset is the position of a member that handed every
message before it to its application. Outside moves nothing is paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear.consumer._cluster import ClusterClient

log = logging.getLogger("kbear.consumer")

#: Seconds between a take-over and the second look at the group's committed
#: offsets: the time the partitions' former owner has to serve its own
#: ``on_assign`` of the same generation and commit there (one call of its poll loop).
RECHECK_AFTER_S = 0.5

#: Timeout of the background look-up of the committed offsets, seconds.
LOOKUP_TIMEOUT_S = 5.0

Key = tuple[str, int]
#: ``submit(cluster_id, call, *args)`` runs ``call`` in the background thread
Submit = Callable[..., "Future[Any]"]


def committed_offsets(
    watcher: Callable[[ClusterClient], Any], entry: ClusterClient, parts: list[TopicPartition]
) -> dict[Key, int]:
    """The group's committed offsets of ``parts`` (physical names) on ``entry``'s
    cluster, asked with its background client ``watcher(entry)`` (built here, in the
    background thread, if it is not yet; blocking, at most ``LOOKUP_TIMEOUT_S``).

    Raises:
        KafkaException: the look-up failed.
    """
    answer = watcher(entry).committed(parts, timeout=LOOKUP_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answer if tp.error is None}


@dataclass
class _Pending:
    """The partitions of one cluster's client paused at a take-over."""

    parts: list[TopicPartition]
    recheck_at: float
    give_up_at: float
    lookup: Future[dict[Key, int]] | None = None
    offsets: dict[Key, int] | None = None
    #: partitions still to seek (librdkafka had not started them)
    left: list[TopicPartition] = field(default_factory=list)


class TakeOvers:
    """The take-overs of one RoutedConsumer (see the module docstring).

    Args:
        submit: runs a call in the consumer's background thread
            (:meth:`kbear.consumer._mover.SwitchDriver.submit`).
        watcher: the background client of a cluster (:meth:`ClusterRegistry.watcher`).
        get: the member's client of a cluster id, if any (``ClusterRegistry.get``).
        give_up_s: longest pause of a taken-over partition, seconds
            (``session.timeout.ms``).
        clock: monotonic seconds.

    :meth:`taken` and :meth:`revoked` are called from the client's rebalance
    callbacks, :meth:`tick` from the polling thread between calls.
    """

    def __init__(
        self,
        submit: Submit,
        watcher: Callable[[ClusterClient], Any],
        get: Callable[[str], ClusterClient | None],
        *,
        give_up_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._submit = submit
        self._watcher = watcher
        self._get = get
        self._give_up_s = give_up_s
        self._clock = clock
        self._pending: dict[str, _Pending] = {}

    @property
    def pending(self) -> bool:
        """Whether some taken-over partitions are still paused."""
        return bool(self._pending)

    def taken(self, entry: ClusterClient, parts: list[TopicPartition]) -> None:
        """``entry``'s client was just assigned ``parts`` (physical names), held by
        other members before and started at the group's committed offsets: paused
        until their offsets were looked at again."""
        if not parts:
            return
        try:
            entry.consumer.pause(parts)
        except (KafkaException, RuntimeError) as exc:
            log.debug("kbear: pause of taken-over partitions on cluster %r failed: %s", entry.cluster_id, exc)
            return
        now = self._clock()
        self._pending[entry.cluster_id] = _Pending(list(parts), now + RECHECK_AFTER_S, now + self._give_up_s)
        log.info(
            "kbear: %d partitions taken over on cluster %r start at the group's committed offsets "
            "as read again in %.1f s",
            len(parts),
            entry.cluster_id,
            RECHECK_AFTER_S,
        )

    def revoked(self, entry: ClusterClient) -> None:
        """``entry``'s client loses its assignment: its pauses end with it (a
        partition assigned again later must not stay paused)."""
        pending = self._pending.pop(entry.cluster_id, None)
        if pending is not None:
            if pending.lookup is not None:
                pending.lookup.cancel()
            resume_quietly(entry, pending.parts)

    def tick(self) -> None:
        """Start the look-ups due, seek and resume what they answered; never blocks."""
        now = self._clock()
        for cluster_id, pending in list(self._pending.items()):
            entry = self._get(cluster_id)
            if entry is None:
                del self._pending[cluster_id]
                continue
            if now >= pending.give_up_at:
                self._done(entry, pending, "not sought in time")
            elif pending.offsets is None and pending.lookup is None:
                if now >= pending.recheck_at:
                    pending.lookup = self._submit(
                        cluster_id, committed_offsets, self._watcher, entry, list(pending.parts)
                    )
            elif pending.offsets is None and pending.lookup is not None and pending.lookup.done():
                try:
                    pending.offsets = pending.lookup.result()
                except (KafkaException, RuntimeError) as exc:
                    self._done(entry, pending, f"the group's committed offsets not read: {exc}")
                    continue
                pending.left = list(pending.parts)
                self._seek(entry, pending)
            elif pending.offsets is not None:
                self._seek(entry, pending)

    def _seek(self, entry: ClusterClient, pending: _Pending) -> None:
        offsets = pending.offsets or {}
        left: list[TopicPartition] = []
        for tp in pending.left:
            offset = offsets.get((tp.topic, tp.partition), -1)
            if offset < 0:
                continue  # nothing committed: librdkafka's start stands
            try:
                entry.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._STATE:  # not started yet: next call
                    left.append(tp)
                else:
                    log.debug("kbear: seek of %s [%d] failed: %s", tp.topic, tp.partition, exc)
        pending.left = left
        if not left:
            self._done(entry, pending, f"sought to {offsets}")

    def _done(self, entry: ClusterClient, pending: _Pending, how: str) -> None:
        self._pending.pop(entry.cluster_id, None)
        resume_quietly(entry, pending.parts)
        log.info("kbear: taken-over partitions on cluster %r resumed (%s)", entry.cluster_id, how)

    def close(self) -> None:
        """The consumer closes: nothing more is sought nor resumed."""
        for pending in self._pending.values():
            if pending.lookup is not None:
                pending.lookup.cancel()
        self._pending.clear()


def resume_quietly(entry: ClusterClient, parts: list[TopicPartition]) -> None:
    """Resume ``parts`` on ``entry``'s client; a failure (not assigned any more, the
    client closed) is logged on ``kbear.consumer`` at debug level, never raised."""
    try:
        entry.consumer.resume(parts)
    except (KafkaException, RuntimeError) as exc:
        log.debug("kbear: resume on cluster %r failed: %s", entry.cluster_id, exc)


def pause_quietly(entry: ClusterClient, parts: list[TopicPartition]) -> None:
    """Pause ``parts`` on ``entry``'s client; a failure is logged at debug level, never raised."""
    try:
        entry.consumer.pause(parts)
    except (KafkaException, RuntimeError) as exc:
        log.debug("kbear: pause on cluster %r failed: %s", entry.cluster_id, exc)
