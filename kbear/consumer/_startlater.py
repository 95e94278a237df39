"""Translated starts looked up in the background, so that the call applying a move
keeps its timeout (issue #27: ``poll()`` at most 50 ms past its timeout during a
failover).

A topic moved with ``kbear.switch.start=translated`` (a failover to a mirrored
standby, or a rule change) starts on its new cluster where the group's offsets
translate to (:class:`kbear.consumer._translated.MirrorStarts`): MirrorMaker 2's
checkpoints and offset syncs are read there, and the group's committed offsets,
each read bounded by 10 s; on Apache Kafka that took 180-340 ms, inside the
``poll()`` that served the new cluster's assignment. :class:`LaterStarts` moves
that work out of the polling thread, as :mod:`kbear.consumer._takeover` does for
the take-overs:

- in ``on_assign`` (after the assignment and kbear's other hooks), the moved
  topic's partitions are paused (librdkafka's start, the committed offset else
  ``auto.offset.reset``, is kept but nothing is fetched) and their translation is
  submitted to the consumer's background thread;
- in the polling thread, between calls, once the translation answered: each
  partition with a translated start is resumed and sought there at once (paused
  again and retried at the next calls while librdkafka has not started it yet:
  ``_STATE``), the others resumed where librdkafka started them, and the
  translated starts committed (asynchronously: the group's position on the new
  cluster, for a member starting there later);
- a failed translation, or one that has not answered ``give_up_s`` after the
  assignment, leaves the committed offsets (a warning, as a failed read did in the
  callback before);
- a revocation before the translation was applied resumes the revoked partitions
  (still assigned while ``on_revoke`` runs: one assigned again later must not stay
  paused), forgets them, and hands the topic's plan back for the next assignment
  (``on_revoke`` returns the plans to keep): the translation is made again there.

Nothing of a moved topic is delivered before its start is known, so per-key order
and the no-loss guarantees of the synchronous start hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear._switch import StartPlan
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._takeover import pause_quietly, resume_quietly

log = logging.getLogger("kbear.consumer")

Key = tuple[str, int]
#: ``submit(cluster_id, call, *args)`` runs ``call`` in the background thread
Submit = Callable[..., "Future[Any]"]
#: ``commit(entry, offsets, why)``: an asynchronous commit that never raises
Commit = Callable[[ClusterClient, list[TopicPartition], str], None]
#: ``translate(entry, partitions, plan)``: the partitions with their start offsets
Translate = Callable[[ClusterClient, list[TopicPartition], StartPlan], list[TopicPartition]]


def _translate_all(
    translate: Translate, entry: ClusterClient, plans: list[tuple[list[TopicPartition], StartPlan]]
) -> dict[Key, int]:
    """The translated starts of each topic's partitions (run in the background thread)."""
    out: dict[Key, int] = {}
    for parts, plan in plans:
        out.update({(tp.topic, tp.partition): tp.offset for tp in translate(entry, parts, plan)})
    return out


@dataclass(eq=False)
class _Pending:
    """The paused partitions of one ``on_assign`` waiting for their translated starts."""

    entry: ClusterClient
    #: topic (physical) -> its partitions and the plan they start from
    plans: dict[str, tuple[list[TopicPartition], StartPlan]]
    give_up_at: float
    lookup: Future[dict[Key, int]]
    offsets: dict[Key, int] | None = None
    #: partitions still to seek (librdkafka had not started them)
    left: list[TopicPartition] = field(default_factory=list)

    @property
    def parts(self) -> list[TopicPartition]:
        return [tp for parts, _ in self.plans.values() for tp in parts]


class LaterStarts:
    """The translated starts of one RoutedConsumer applied from the background (see
    the module docstring).

    Args:
        submit: runs a call in the consumer's background thread
            (:meth:`kbear.consumer._mover.SwitchDriver.submit`).
        translate: the translated starts of a topic's partitions (blocking:
            :class:`kbear.consumer._translated.MirrorStarts`, whose broker calls use
            clients of its own, never the member's).
        commit: commits the translated starts once applied
            (:func:`kbear.consumer._rebalance.commit_async`).
        give_up_s: longest pause of a partition waiting for its start, seconds.
        clock: monotonic seconds.

    :meth:`start` and :meth:`revoked` are called from the client's rebalance
    callbacks, :meth:`tick` from the polling thread between calls, all under the
    consumer's lock.
    """

    def __init__(
        self,
        submit: Submit,
        translate: Translate,
        commit: Commit,
        *,
        give_up_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._submit = submit
        self._translate = translate
        self._commit = commit
        self._give_up_s = give_up_s
        self._clock = clock
        self._pending: list[_Pending] = []
        #: called when a start is deferred: the consumer's next calls must take the
        #: poll loop, whose work between calls applies it (unbinds the fast paths)
        self.deferred_hook: Callable[[], None] | None = None

    @property
    def pending(self) -> bool:
        """Whether some partitions still wait for their translated start."""
        return bool(self._pending)

    def start(self, entry: ClusterClient, plans: dict[str, tuple[list[TopicPartition], StartPlan]]) -> None:
        """``entry``'s client was just assigned the partitions of ``plans`` (physical
        topic -> its partitions and plan): paused, their translation submitted."""
        parts = [tp for ps, _ in plans.values() for tp in ps]
        if not parts:
            return
        try:
            entry.consumer.pause(parts)
        except (KafkaException, RuntimeError) as exc:
            log.warning(
                "kbear: translated start on cluster %r not applied (pause failed: %s): "
                "the partitions start from the group's committed offsets",
                entry.cluster_id,
                exc,
            )
            return
        lookup = self._submit(entry.cluster_id, _translate_all, self._translate, entry, list(plans.values()))
        self._pending.append(_Pending(entry, dict(plans), self._clock() + self._give_up_s, lookup))
        log.info(
            "kbear: %d partitions on cluster %r paused until their translated start is read",
            len(parts),
            entry.cluster_id,
        )
        if self.deferred_hook is not None:
            self.deferred_hook()

    def revoked(self, entry: ClusterClient, partitions: list[TopicPartition]) -> list[tuple[str, StartPlan]]:
        """``on_revoke`` (or ``on_lost``) of ``entry``'s client for ``partitions``
        (physical names): those still waiting are resumed and forgotten; returns
        (physical topic, plan) of the topics whose start was not applied, for the
        cluster's next assignment."""
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        again: list[tuple[str, StartPlan]] = []
        for pending in list(self._pending):
            if pending.entry is not entry:
                continue
            gone = [tp for tp in pending.parts if (tp.topic, tp.partition) in revoked]
            if not gone:
                continue
            resume_quietly(entry, gone)
            for topic, (parts, plan) in list(pending.plans.items()):
                kept = [tp for tp in parts if (tp.topic, tp.partition) not in revoked]
                if len(kept) < len(parts):
                    again.append((topic, plan))
                if kept:
                    pending.plans[topic] = (kept, plan)
                else:
                    del pending.plans[topic]
            pending.left = [tp for tp in pending.left if (tp.topic, tp.partition) not in revoked]
            if not pending.plans:
                pending.lookup.cancel()
                self._pending.remove(pending)
        return again

    def tick(self) -> None:
        """Seek and resume the partitions whose translation answered; never blocks."""
        now = self._clock()
        for pending in list(self._pending):
            if pending.offsets is None:
                if pending.lookup.done():
                    try:
                        pending.offsets = pending.lookup.result()
                    except Exception as exc:  # any failure of the look-up falls back
                        self._done(
                            pending, f"not read ({exc}): from the group's committed offsets", warn=True
                        )
                        continue
                    pending.left = [
                        tp for tp in pending.parts if pending.offsets.get((tp.topic, tp.partition), -1) >= 0
                    ]
                elif now >= pending.give_up_at:
                    pending.lookup.cancel()
                    self._done(
                        pending,
                        f"not read within {self._give_up_s:.0f} s: from the group's committed offsets",
                        warn=True,
                    )
                    continue
                else:
                    continue
            self._seek(pending, now)

    def _seek(self, pending: _Pending, now: float) -> None:
        offsets = pending.offsets or {}
        entry = pending.entry
        left: list[TopicPartition] = []
        failed: set[Key] = set()
        for tp in pending.left:
            # resumed, then sought at once (no call of the application's in between):
            # what librdkafka fetched from the old start meanwhile is discarded by the
            # seek; a partition sought while paused is fetched only a second after its
            # resume (measured on librdkafka 2.x)
            resume_quietly(entry, [tp])
            try:
                entry.consumer.seek(TopicPartition(tp.topic, tp.partition, offsets[(tp.topic, tp.partition)]))
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._STATE:  # not started yet (nothing fetched): next call
                    pause_quietly(entry, [tp])
                    left.append(tp)
                else:
                    failed.add((tp.topic, tp.partition))
                    log.warning(
                        "kbear: seek of %s [%d] to its translated start failed (it starts from the "
                        "group's committed offset): %s",
                        tp.topic,
                        tp.partition,
                        exc,
                    )
        pending.left = left
        if left and now < pending.give_up_at:
            return
        unsought = {(tp.topic, tp.partition) for tp in left} | failed
        sought = [
            TopicPartition(tp.topic, tp.partition, o)
            for tp in pending.parts
            if (o := offsets.get(key := (tp.topic, tp.partition), -1)) >= 0 and key not in unsought
        ]
        self._done(
            pending,
            f"at {sought}" if not left else f"at {sought}; {left} not sought in time",
            warn=bool(left),
        )
        if sought:
            # the group's position on this cluster, not this member's: a member starting
            # here later (a restart, a partition handed on before anything new was
            # read) starts from it, not from auto.offset.reset
            self._commit(entry, sought, "of the translated start offsets")

    def _done(self, pending: _Pending, how: str, *, warn: bool) -> None:
        if pending in self._pending:
            self._pending.remove(pending)
        resume_quietly(pending.entry, pending.parts)
        (log.warning if warn else log.info)(
            "kbear: translated start of %s on cluster %r %s",
            sorted(pending.plans),
            pending.entry.cluster_id,
            how,
        )

    def close(self) -> None:
        """The consumer closes: nothing more is sought nor resumed."""
        for pending in self._pending:
            pending.lookup.cancel()
        self._pending.clear()
