"""Partitions held paused until where they start is known (private): the one way a
consumer holds partitions, used by the move guard (:mod:`kbear.consumer._guard`: the
take-overs and the pause after a refused commit) and the translated starts read in
the background (:mod:`kbear.consumer._startlater`).

A :class:`Hold` is made in a rebalance callback or between calls of the polling
thread:

- its partitions are paused at once (nothing is fetched from where librdkafka
  started them);
- a look-up of their start offsets (a ``Future``, answered in the consumer's
  background thread) is submitted at once or ``after_s`` later, never in the
  polling thread;
- between calls (:meth:`Holds.tick`, never blocking), once the look-up answered,
  each partition with a start (an offset >= 0) is resumed and sought there at once
  (no call of the application's in between: what librdkafka fetched meanwhile is
  discarded by the seek; a partition sought while paused is fetched only a second
  after its resume, measured on librdkafka 2.x); one librdkafka has not started
  yet (``_STATE``) is paused again and tried at the next call;
- then every partition is resumed: those without a start where librdkafka started
  them. A failed look-up, or a hold still waiting ``give_up_s`` after it was made,
  ends the same way (a hold without a look-up simply ends then);
- a revocation (:meth:`Holds.release`) resumes the revoked partitions (still
  assigned while ``on_revoke`` runs: one assigned again later must not stay
  paused) and forgets them; the consumer's close forgets everything (its owner
  may still use the holds' look-ups: :meth:`Holds.close`).

Nothing is lost: a held partition is read from its start, or from librdkafka's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from kbear.consumer._cluster import ClusterClient

log = logging.getLogger("kbear.consumer")

Key = tuple[str, int]
#: ``look_up()``: submits the look-up of the start offsets ((physical topic,
#: partition) -> offset) to the background thread
LookUp = Callable[[], "Future[dict[Key, int]]"]
#: ``submit(cluster_id, call, *args)`` runs ``call`` in the consumer's background thread
Submit = Callable[..., "Future[Any]"]


def pause_quietly(entry: ClusterClient, parts: list[TopicPartition], resume: bool = False) -> bool:
    """Pause (``resume``: resume) ``parts`` on ``entry``'s client; a failure (not
    assigned any more, the client closed) is logged on ``kbear.consumer`` at debug
    level, never raised. Returns whether the call was made."""
    call = "resume" if resume else "pause"
    try:
        (entry.consumer.resume if resume else entry.consumer.pause)(parts)
    except (KafkaException, RuntimeError) as exc:
        log.debug("kbear: %s on cluster %r failed: %s", call, entry.cluster_id, exc)
        return False
    return True


def resume_quietly(entry: ClusterClient, parts: list[TopicPartition]) -> None:
    """Resume ``parts`` on ``entry``'s client (:func:`pause_quietly`)."""
    pause_quietly(entry, parts, resume=True)


@dataclass(eq=False)
class Hold:
    """Partitions of one client held paused (see the module docstring).

    ``ended(hold, sought, how, fell_back)`` is called once the partitions were
    resumed: ``sought`` the partitions with the offsets they were sought to,
    ``how`` says what happened (for a log line), ``fell_back`` whether the look-up
    failed or some partition was not sought in time. ``tag``: the owner's data.
    ``parked``: the partitions were assigned at an absolute offset that is no
    start (so that librdkafka starts no offset query of its own: a seek while its
    query waits for the reply is undone by that reply, librdkafka 2.x); each is
    sought, an ``OFFSET_INVALID`` start too (``auto.offset.reset``), and one left
    without a start is sought to ``OFFSET_INVALID`` when the hold ends.
    """

    entry: ClusterClient
    parts: list[TopicPartition]
    give_up_at: float
    look_up: LookUp | None = None
    look_up_at: float = 0.0
    ended: Callable[[Hold, list[TopicPartition], str, bool], None] | None = None
    tag: Any = None
    parked: bool = False
    lookup: Future[dict[Key, int]] | None = None
    offsets: dict[Key, int] | None = None
    #: partitions still to seek, with their start (librdkafka had not started them)
    left: list[TopicPartition] = field(default_factory=list)

    def starts(self, offsets: dict[Key, int]) -> list[TopicPartition]:
        """The held partitions that ``offsets`` gives a start (an offset >= 0; parked:
        ``OFFSET_INVALID`` too), with it."""
        least = OFFSET_INVALID if self.parked else 0
        return [
            TopicPartition(tp.topic, tp.partition, o)
            for tp in self.parts
            if (o := offsets.get((tp.topic, tp.partition), -2)) >= 0 or o == least
        ]


class Holds:
    """The held partitions of one part of a RoutedConsumer (see the module docstring).

    Args:
        clock: monotonic seconds.

    Its methods are called from the client's rebalance callbacks and from the
    polling thread between calls, under the consumer's lock.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._holds: list[Hold] = []

    @property
    def pending(self) -> bool:
        """Whether some partitions are still held."""
        return bool(self._holds)

    def hold(
        self,
        entry: ClusterClient,
        parts: list[TopicPartition],
        *,
        give_up_s: float,
        look_up: LookUp | None = None,
        after_s: float = 0.0,
        ended: Callable[[Hold, list[TopicPartition], str, bool], None] | None = None,
        tag: Any = None,
        parked: bool = False,
    ) -> Hold | None:
        """Pause ``parts`` (physical names) of ``entry``'s client until their start
        offsets, asked with ``look_up`` ``after_s`` seconds from now, were applied,
        or ``give_up_s`` passed (``parked``: see :class:`Hold`). Returns None
        (nothing held) when there is nothing to hold or the pause failed (logged at
        debug level)."""
        if not parts or not pause_quietly(entry, parts):
            return None
        now = self._clock()
        hold = Hold(entry, list(parts), now + give_up_s, look_up, now + after_s, ended, tag, parked)
        if look_up is not None and after_s <= 0:
            hold.lookup = look_up()
        self._holds.append(hold)
        return hold

    def release(self, entry: ClusterClient, partitions: Iterable[TopicPartition] | None = None) -> list[Hold]:
        """``partitions`` (physical names; None: all) of ``entry``'s client leave it,
        or its holds end (an assignment): those held are resumed and forgotten; a hold
        left with none is dropped, its look-up cancelled. Returns the holds that lost
        partitions."""
        keys = None if partitions is None else {(tp.topic, tp.partition) for tp in partitions}
        touched: list[Hold] = []
        for hold in list(self._holds):
            if hold.entry is not entry:
                continue
            gone = [tp for tp in hold.parts if keys is None or (tp.topic, tp.partition) in keys]
            if not gone:
                continue
            touched.append(hold)
            resume_quietly(entry, gone)
            hold.parts = [tp for tp in hold.parts if tp not in gone]
            hold.left = [tp for tp in hold.left if tp not in gone]
            if not hold.parts:
                if hold.lookup is not None:
                    hold.lookup.cancel()
                self._holds.remove(hold)
        return touched

    def holding(self, hold: Hold | None) -> bool:
        """Whether ``hold`` is still held."""
        return hold is not None and hold in self._holds

    def tick(self) -> None:
        """Submit the look-ups due, seek and resume what they answered, end the
        holds past their time; never blocks."""
        now = self._clock()
        for hold in list(self._holds):
            if hold.offsets is None:
                if hold.lookup is None and hold.look_up is not None and now >= hold.look_up_at:
                    hold.lookup = hold.look_up()
                if hold.lookup is None or not hold.lookup.done():
                    if now >= hold.give_up_at:
                        if hold.lookup is not None:
                            hold.lookup.cancel()
                        self._end(hold, [], "not looked up in time", fell_back=hold.look_up is not None)
                    continue
                try:
                    hold.offsets = hold.lookup.result()
                except Exception as exc:  # any failure of the look-up falls back
                    self._end(hold, [], f"not looked up ({exc})", fell_back=True)
                    continue
                hold.left = hold.starts(hold.offsets)
            self._seek(hold, now)

    def _seek(self, hold: Hold, now: float) -> None:
        entry = hold.entry
        left: list[TopicPartition] = []
        failed: list[TopicPartition] = []
        for tp in hold.left:
            resume_quietly(entry, [tp])
            try:
                entry.consumer.seek(tp)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._STATE:  # not started yet (nothing fetched): next call
                    pause_quietly(entry, [tp])
                    left.append(tp)
                else:
                    failed.append(tp)
                    log.warning(
                        "kbear: seek of %s [%d] on cluster %r failed (read from where librdkafka "
                        "started it): %s",
                        tp.topic,
                        tp.partition,
                        entry.cluster_id,
                        exc,
                    )
        hold.left = left
        if left and now < hold.give_up_at:
            return
        sought = [tp for tp in hold.starts(hold.offsets or {}) if tp not in left and tp not in failed]
        how = f"at {sought}" if not left else f"at {sought}; {left} not sought in time"
        self._end(hold, sought, how, fell_back=bool(left))

    def _end(self, hold: Hold, sought: list[TopicPartition], how: str, *, fell_back: bool) -> None:
        if hold in self._holds:
            self._holds.remove(hold)
        resume_quietly(hold.entry, hold.parts)
        if hold.parked:  # not sought: from the reset policy, not from where they were parked
            done = {(tp.topic, tp.partition) for tp in sought}
            for tp in hold.parts:
                if (tp.topic, tp.partition) not in done:
                    try:
                        hold.entry.consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID))
                    except KafkaException as exc:
                        log.warning(
                            "kbear: seek of %s [%d] on cluster %r to auto.offset.reset failed: %s",
                            tp.topic,
                            tp.partition,
                            hold.entry.cluster_id,
                            exc,
                        )
        if hold.ended is not None:
            hold.ended(hold, sought, how, fell_back)

    def close(self, *, keep_look_ups: bool = False) -> list[Hold]:
        """The consumer closes: nothing more is sought nor resumed. Returns the holds
        dropped; their look-ups are cancelled unless ``keep_look_ups`` (the owner
        still wants their answers)."""
        holds, self._holds = self._holds, []
        for hold in holds:
            if hold.lookup is not None and not keep_look_ups:
                hold.lookup.cancel()
        return holds
