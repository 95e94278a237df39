"""Translated starts looked up in the background, so that the call applying a move
keeps its timeout (issue #27: ``poll()`` at most 50 ms past its timeout during a
failover).

A topic moved with ``kbear.switch.start=translated`` (a failover to a mirrored
standby, or a rule change) starts on its new cluster where the group's offsets
translate to (:class:`kbear.consumer._translated.MirrorStarts`): MirrorMaker 2's
checkpoints and offset syncs are read there, and the group's committed offsets,
each read bounded by 10 s; on Apache Kafka that took 180-340 ms, inside the
``poll()`` that served the new cluster's assignment. :class:`LaterStarts` moves
that work out of the polling thread, holding the partitions as the take-overs do
(:class:`kbear.consumer._holding.Holds`):

- in ``on_assign``, the moved topic's partitions are assigned at an absolute
  offset (``PARKED_AT``) and paused at once (after kbear's other hooks): nothing is
  fetched, and librdkafka starts no offset query of its own (with the logical
  default, the ``ListOffsets`` of ``auto.offset.reset`` on a standby where the group
  committed nothing: a seek while it waits for its reply is undone by that reply,
  500 ms later the partition restarts from ``auto.offset.reset``, librdkafka 2.x);
  their translation is submitted to the consumer's background thread, with the
  group's committed offsets of the partitions it leaves without a start;
- in the polling thread, between calls, once the translation answered: each
  partition is resumed and sought at once to its translated start, else its
  committed offset, else ``OFFSET_INVALID`` (``auto.offset.reset``) (paused
  again and retried at the next calls while librdkafka has not started it yet:
  ``_STATE``), and the translated starts committed (asynchronously: the group's
  position on the new cluster, for a member starting there later);
- a failed translation of a topic leaves its committed offsets (a warning); a
  look-up that failed or has not answered ``give_up_s`` after the assignment
  seeks the partitions to ``auto.offset.reset`` (a warning);
- a revocation before the translation was applied resumes the revoked partitions
  (still assigned while ``on_revoke`` runs: one assigned again later must not stay
  paused), forgets them, and hands the topic's plan back for the next assignment
  (``on_revoke`` returns the plans to keep): the translation is made again there;
- the consumer's close before the translation was applied still commits it (waited
  for at most until the hold would give up), before the clients leave their
  groups: a consumer closed right after a failover does not lose the group's
  start there.

Nothing of a moved topic is delivered before its start is known, so per-key order
and the no-loss guarantees of the synchronous start hold.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from confluent_kafka import OFFSET_INVALID, KafkaException, TopicPartition

from kbear._switch_types import StartPlan
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._holding import Hold, Holds, Key, Submit

log = logging.getLogger("kbear.consumer")

#: ``commit(entry, offsets, why)``: an asynchronous commit that never raises
Commit = Callable[[ClusterClient, list[TopicPartition], str], None]
#: ``translate(entry, partitions, plan)``: the partitions with their start offsets
Translate = Callable[[ClusterClient, list[TopicPartition], StartPlan], list[TopicPartition]]
#: physical topic -> its partitions and the plan they start from
Plans = dict[str, tuple[list[TopicPartition], StartPlan]]
#: ``committed(entry, partitions)``: the group's committed offsets there (blocking;
#: :func:`kbear.consumer._guard.committed_offsets`)
Committed = Callable[[ClusterClient, list[TopicPartition]], dict[Key, int]]
#: the absolute offset the partitions waiting for their translated start are
#: assigned at (paused: nothing is read from it; see :class:`LaterStarts`)
PARKED_AT = 0


def _translate_all(
    translate: Translate,
    committed: Committed | None,
    entry: ClusterClient,
    plans: list[tuple[list[TopicPartition], StartPlan]],
) -> dict[Key, int]:
    """The translated starts of each topic's partitions, the others' committed
    offsets, else ``OFFSET_INVALID`` (``auto.offset.reset``) (run in the background
    thread)."""
    out: dict[Key, int] = {}
    for parts, plan in plans:
        try:
            out.update({(tp.topic, tp.partition): tp.offset for tp in translate(entry, parts, plan)})
        except Exception as exc:  # any failure: from the committed offsets
            log.warning(
                "kbear: translated start of %r on cluster %r failed (%r): from the committed offsets",
                parts[0].topic if parts else "",
                entry.cluster_id,
                exc,
            )
    rest = [tp for parts, _ in plans for tp in parts if out.get((tp.topic, tp.partition), -1) < 0]
    found = committed(entry, rest) if rest and committed is not None else {}
    for tp in rest:
        key = (tp.topic, tp.partition)
        out[key] = o if (o := found.get(key, -1)) >= 0 else OFFSET_INVALID
    return out


@dataclass(eq=False)
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

    submit: Submit
    translate: Translate
    commit: Commit
    _: KW_ONLY
    give_up_s: float
    clock: Callable[[], float]
    #: the group's committed offsets, the start of a partition left without a
    #: translation (None: ``auto.offset.reset``)
    committed: Committed | None = None

    #: called when a start is deferred: the consumer's next calls must take the
    #: poll loop, whose work between calls applies it (unbinds the fast paths)
    deferred_hook: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self._holds = Holds(self.clock)

    @property
    def pending(self) -> bool:
        """Whether some partitions still wait for their translated start."""
        return self._holds.pending

    def start(self, entry: ClusterClient, plans: Plans) -> None:
        """``entry``'s client was just assigned the partitions of ``plans`` (physical
        topic -> its partitions and plan): paused, their translation submitted."""
        parts = [tp for ps, _ in plans.values() for tp in ps]
        if not parts:
            return
        asked = list(plans.values())
        hold = self._holds.hold(
            entry,
            parts,
            give_up_s=self.give_up_s,
            look_up=lambda: self.submit(
                entry.cluster_id, _translate_all, self.translate, self.committed, entry, asked
            ),
            ended=self._ended,
            tag=dict(plans),
            parked=True,
        )
        if hold is None:
            log.warning(
                "kbear: translated start on cluster %r not applied (pause failed): "
                "the partitions start from auto.offset.reset",
                entry.cluster_id,
            )
            for tp in parts:  # not from where they were parked
                with contextlib.suppress(KafkaException, RuntimeError):
                    entry.consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID))
            return
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
        for hold in self._holds.release(entry, partitions):
            plans: Plans = hold.tag
            for topic, (parts, plan) in list(plans.items()):
                kept = [tp for tp in parts if (tp.topic, tp.partition) not in revoked]
                if len(kept) < len(parts):
                    again.append((topic, plan))
                if kept:
                    plans[topic] = (kept, plan)
                else:
                    del plans[topic]
        return again

    def tick(self) -> None:
        """Seek and resume the partitions whose translation answered; never blocks."""
        self._holds.tick()

    def _ended(self, hold: Hold, sought: list[TopicPartition], how: str, fell_back: bool) -> None:
        if fell_back and not hold.offsets:
            how = f"{how}: from the group's committed offsets"
        (log.warning if fell_back else log.info)(
            "kbear: translated start of %s on cluster %r %s", sorted(hold.tag), hold.entry.cluster_id, how
        )
        sought = [tp for tp in sought if tp.offset >= 0]
        if sought:
            # the group's position on this cluster, not this member's: a member starting
            # here later (a restart, a partition handed on before anything new was
            # read) starts from it, not from auto.offset.reset
            self.commit(hold.entry, sought, "of the translated start offsets")

    def close(self) -> None:
        """The consumer closes: nothing more is sought nor resumed, but the translated
        starts not applied yet are committed all the same (asynchronously; the client's
        close waits for the commit, as for ``enable.auto.commit``'s last one): a
        member starting on the cluster later starts there, not from
        ``auto.offset.reset``. A translation still being read is waited for, at most
        until its hold would have given up (the consumer's close waits for its
        background thread anyway); one that fails or is not read by then is left.
        Called before the clients leave their groups."""
        for hold in self._holds.close(keep_look_ups=True):
            offsets = hold.offsets
            if offsets is None and hold.lookup is not None:
                try:
                    offsets = hold.lookup.result(timeout=max(0.0, hold.give_up_at - self.clock()))
                except Exception as exc:  # a failed, cancelled or late look-up: nothing to commit
                    hold.lookup.cancel()
                    log.warning(
                        "kbear: translated start of %s on cluster %r not committed at close: %r",
                        sorted(hold.tag),
                        hold.entry.cluster_id,
                        exc,
                    )
                    continue
            starts = [tp for tp in hold.starts(offsets or {}) if tp.offset >= 0]
            if starts:
                log.info(
                    "kbear: translated start of %s on cluster %r committed at close: %s",
                    sorted(hold.tag),
                    hold.entry.cluster_id,
                    starts,
                )
                self.commit(hold.entry, starts, "of the translated start offsets at close")
