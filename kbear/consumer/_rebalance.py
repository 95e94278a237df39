"""Rebalance callbacks of the per-cluster clients, as the application sees them.

Each cluster's client gets wrapped ``on_assign`` / ``on_revoke`` / ``on_lost``
callbacks that:

- call the application's callback with the RoutedConsumer and logical topic
  names, and make the RoutedConsumer's partition calls inside it address the
  cluster being rebalanced;
- apply the start offsets of ``kbear.switch.start`` to the first assignment of
  a topic just moved to the cluster;
- commit, before partitions leave this member (``on_revoke``), the positions
  reached on them, when ``enable.auto.commit`` is on: the member that gets them
  next starts where this one stopped, instead of at the last auto-commit (the
  source of duplicates when a group follows a move). Topics whose drain already
  committed their end offsets are left out. The commit is sent without waiting
  (issue #39: a synchronous commit there held ``poll(0.1)`` for 16 s when a
  broker of the old cluster died mid-move): librdkafka sends it to the group
  coordinator before the request that rejoins the group, on the same
  connection, so the coordinator has it before it hands the partitions to their
  next owner. When the group refuses it (it is rebalancing; librdkafka's
  mock does: the answer reaches ``on_commit`` before the next
  assignment) and the next assignment gives the partitions back (eager
  protocols), the member goes on from its own positions instead of the older
  committed offsets, and commits them all in the new generation (those of the
  partitions that went to other members, and those it reads on from).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from kbear._switch_types import StartPlan
from kbear.consumer._acks import CommitPoints
from kbear.consumer._cluster import ClusterClient
from kbear.consumer._startlater import PARKED_AT
from kbear.consumer._subscription import RebalanceCallback

if TYPE_CHECKING:
    from kbear.consumer._startlater import LaterStarts, Translate

log = logging.getLogger("kbear.consumer")

#: Longest wait for offsets_for_times on the new cluster (kbear.switch.start=timestamp), seconds.
TIMESTAMP_LOOKUP_TIMEOUT_S = 10.0


#: (rebalancer, cluster) of the rebalance callback running in this context. A
#: context variable, not a thread-local: the asyncio clients (:mod:`kbear.aio`) carry
#: it, with the rest of the callback's context, to the executor thread that runs a
#: call the callback makes (a thread-local would lose it there and deadlock on the
#: consumer's lock, held by the thread serving the callback).
_CURRENT: contextvars.ContextVar[tuple[Rebalancer, ClusterClient] | None] = contextvars.ContextVar(
    "kbear_rebalance_current", default=None
)


class Rebalancer:
    """The rebalance state of a RoutedConsumer and the wrapping of its callbacks.

    Args:
        owner: what the application's callbacks receive as their consumer (the
            RoutedConsumer), handed to them as it is, never used here; held weakly
            (the consumer is freed at its last reference): once it is gone, the
            application's callbacks are not called (as confluent-kafka's, at a
            consumer's collection).
        native: the application's confluent-kafka configuration (for
            ``enable.auto.commit``, ``group.protocol``, ``partition.assignment.strategy``).

    Attributes:
        current: the cluster whose callback is running in the calling thread's
            context (partition calls go there), or None: another thread's calls
            made meanwhile address their topics' clusters as usual.
        assigned_in_callback: the application assigned inside the running callback.
        start_at: (cluster id, physical topic) -> where a moved topic starts on
            that cluster at its next assignment.
        committed_to_end: (cluster id, physical topic) of topics switched away
            after a complete drain: their revocation needs no commit.
        resume_at: cluster id -> (physical topic, partition) -> this member's
            position at a revocation whose commit the group refused (eager
            protocols only): kept for the cluster's next assignment only.
    """

    def __init__(self, owner: object, native: Mapping[str, Any]) -> None:
        try:
            self._owner: Callable[[], object] = weakref.ref(owner)
        except TypeError:  # not weakly referable (None): held as it is
            self._owner = lambda: owner
        self.commit_on_revoke = str(native.get("enable.auto.commit", "true")).lower() in ("true", "1")
        self.incremental = str(native.get("group.protocol", "classic")) == "consumer" or "cooperative" in str(
            native.get("partition.assignment.strategy", "")
        )
        self.callbacks: dict[str, RebalanceCallback] = {}
        self.assigned_in_callback = False
        self.start_at: dict[tuple[str, str], StartPlan] = {}
        self.committed_to_end: set[tuple[str, str]] = set()
        #: cluster id -> the positions its last revocation committed, until answered
        self._revoking: dict[str, list[TopicPartition]] = {}
        self.resume_at: dict[str, dict[tuple[str, int], int]] = {}
        #: called with the entry once an ``on_assign`` of its client was served
        self.assigned_hook: Callable[[ClusterClient], None] | None = None
        #: eager protocols: called with the entry and the partitions (physical names)
        #: of an ``on_assign`` that this member did not hold in the generation before
        #: and that start at the group's committed offsets
        #: (:meth:`kbear.consumer._guard.MoveGuard.taken`), then with the entry at
        #: its next ``on_revoke`` (``MoveGuard.revoked``)
        self.taken_hook: Callable[[ClusterClient, list[TopicPartition]], None] | None = None
        self.revoking_hook: Callable[[ClusterClient], None] | None = None
        #: cluster id -> (physical topic, partition) of its client's last assignment
        self._held: dict[str, set[tuple[str, int]]] = {}
        #: cluster id -> (physical topic, partition) -> offset its client's last
        #: assignment resumed at (this member's position at a refused commit)
        self._resumed_at: dict[str, dict[tuple[str, int], int]] = {}
        #: ``kbear.ack.mode=individual``: lowers the positions committed at a
        #: revocation to the acknowledged prefix (``AckLayer.commit_points``)
        self.commit_points: CommitPoints | None = None
        #: ``kbear.ack.mode=individual``: called with the entry and the revoked
        #: partitions (physical names) after the revocation's commit
        self.revoked_hook: Callable[[ClusterClient, list[TopicPartition]], None] | None = None
        #: ``kbear.switch.start=translated``: the start offsets of a moved topic's
        #: partitions (physical names) on ``entry``'s cluster, from its plan
        #: (:class:`kbear.consumer._translated.MirrorStarts`)
        self.translate: Translate | None = None
        #: when set, ``translate`` runs in the background: the moved topic's partitions
        #: are assigned paused and sought once it answered (:mod:`kbear.consumer._startlater`)
        self.later: LaterStarts | None = None

    def _tell(self, name: str, entry: ClusterClient, partitions: list[TopicPartition]) -> None:
        """Call the application's ``name`` callback, if any, with the consumer and
        ``partitions`` under their logical names; not once the consumer was collected."""
        callback, owner = self.callbacks.get(name), self._owner()
        if callback is not None and (owner is not None or not isinstance(self._owner, weakref.ref)):
            callback(owner, entry.to_logical(partitions))

    @property
    def current(self) -> ClusterClient | None:
        scope = _CURRENT.get()
        return scope[1] if scope is not None and scope[0] is self else None

    @contextlib.contextmanager
    def _serving(self, entry: ClusterClient) -> Iterator[None]:
        """Inside: ``entry``'s callback runs (:attr:`current`)."""
        outer = _CURRENT.set((self, entry))
        try:
            yield
        finally:
            _CURRENT.reset(outer)

    def callbacks_for(self, entry: ClusterClient) -> dict[str, Callable[..., None]]:
        """The rebalance callbacks to subscribe ``entry``'s client with."""
        out: dict[str, Callable[..., None]] = {"on_assign": self._assign(entry)}
        if (
            self.commit_on_revoke
            or "on_revoke" in self.callbacks
            or self.revoked_hook is not None
            or self.later is not None
        ):
            out["on_revoke"] = self._revoke(entry)
        if "on_lost" in self.callbacks:
            out["on_lost"] = self._revoke(entry, lost=True)
        return out

    def _revoke(self, entry: ClusterClient, *, lost: bool = False) -> Callable[[Any, list[Any]], None]:
        """``on_revoke`` of ``entry``'s client, or (``lost``) its ``on_lost``: lost
        partitions are forgotten as revoked ones are, and commit nothing."""

        def callback(_consumer: Any, partitions: list[TopicPartition]) -> None:
            with self._serving(entry), contextlib.ExitStack() as then:
                if self.revoked_hook is not None:  # also when the application's callback raised
                    then.callback(self.revoked_hook, entry, partitions)
                if self.revoking_hook is not None and not lost:
                    self.revoking_hook(entry)
                if self.later is not None:
                    # those still waiting for their translated start are resumed, and their
                    # topic's plan applies to the cluster's next assignment (unless a newer
                    # switch planned another start)
                    for topic, plan in self.later.revoked(entry, partitions):
                        self.start_at.setdefault((entry.cluster_id, topic), plan)
                positions = [] if lost else self._positions_to_commit(entry, partitions)
                self._tell("on_lost" if lost else "on_revoke", entry, partitions)
                if positions:
                    if not self.incremental:
                        self._revoking[entry.cluster_id] = positions
                    commit_async(entry, positions, "before its partitions leave this member")

        return callback

    def commit_answered(self, cluster_id: str, err: Any, partitions: list[TopicPartition]) -> None:
        """``on_commit`` of ``cluster_id``'s client. When it answers the commit of the
        last revocation there (eager protocols) with a refusal, the positions are
        remembered: if the next assignment gives the partitions back, reading goes
        on from there, not from the group's older committed offset (what this
        member read already is not read again). Nothing is skipped: the member read
        everything before them. No client call here (see
        :meth:`kbear.consumer._guard.MoveGuard.commit_answered`)."""
        positions = self._revoking.get(cluster_id)
        if positions is None:
            return
        answered = {(tp.topic, tp.partition, tp.offset) for tp in partitions}
        if answered != {(tp.topic, tp.partition, tp.offset) for tp in positions}:
            return  # another commit's answer
        del self._revoking[cluster_id]
        if err is not None or any(tp.error is not None for tp in partitions):
            self.resume_at[cluster_id] = {(tp.topic, tp.partition): tp.offset for tp in positions}

    def _positions_to_commit(
        self, entry: ClusterClient, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        if not self.commit_on_revoke:
            return []
        keep = [tp for tp in partitions if (entry.cluster_id, tp.topic) not in self.committed_to_end]
        for tp in partitions:
            self.committed_to_end.discard((entry.cluster_id, tp.topic))
        if not keep:
            return []
        # where this member resumed (a refused commit): its position until it reads more
        # (librdkafka knows no position before the partition's first message)
        resumed = self._resumed_at.pop(entry.cluster_id, {})
        try:
            positions = [
                tp
                if tp.offset >= 0
                else TopicPartition(tp.topic, tp.partition, resumed.get((tp.topic, tp.partition), -1))
                for tp in entry.consumer.position(keep)
            ]
        except KafkaException:
            return []
        return self.lowered(entry, [tp for tp in positions if tp.offset >= 0])

    def lowered(self, entry: ClusterClient, positions: list[TopicPartition]) -> list[TopicPartition]:
        """``positions`` (physical names) of ``entry``'s cluster as committed when their
        partitions leave it: with ``kbear.ack.mode=individual``, lowered to the
        acknowledged prefix (:attr:`commit_points`); else as they are."""
        return positions if self.commit_points is None else self.commit_points(entry, positions)

    def _assign(self, entry: ClusterClient) -> Callable[[Any, list[Any]], None]:
        def callback(_consumer: Any, partitions: list[TopicPartition]) -> None:
            with self._serving(entry):
                self.assigned_in_callback = False
                resume = self.resume_at.pop(entry.cluster_id, None)
                self._resumed_at.pop(entry.cluster_id, None)
                # an answer to the last revocation's commit arriving from now on is ignored:
                # what it would remember belongs to the generation that just ended
                self._revoking.pop(entry.cluster_id, None)
                started, later = self._start_offsets(entry, partitions)
                if resume:
                    started = _resumed(started, resume)
                    self._resumed_at[entry.cluster_id] = {
                        key: tp.offset
                        for tp in started
                        if resume.get(key := (tp.topic, tp.partition)) == tp.offset
                    }
                    later = _still_unstarted(later, started)
                waiting = {(tp.topic, tp.partition) for parts, _ in later.values() for tp in parts}
                taken = self._taken(entry, started, waiting)
                self._tell("on_assign", entry, started)
                if waiting:  # parked: librdkafka starts no offset query (kbear.consumer._startlater)
                    started = [
                        TopicPartition(tp.topic, tp.partition, PARKED_AT)
                        if (tp.topic, tp.partition) in waiting
                        else tp
                        for tp in started
                    ]
                if (started is not partitions or taken) and not self.assigned_in_callback:
                    # assigned here (not by librdkafka after the callback): taken-over
                    # partitions are paused below, on the assignment itself
                    if self.incremental:
                        entry.consumer.incremental_assign(started)
                    else:
                        entry.consumer.assign(started)
                if resume:
                    _commit_resumed(entry, resume)
                if self.assigned_hook is not None:
                    self.assigned_hook(entry)
                if taken and self.taken_hook is not None and not self.assigned_in_callback:
                    self.taken_hook(entry, taken)
                if later and self.later is not None:  # last: no hook above resumes them
                    self.later.start(entry, later)

        return callback

    def _taken(
        self, entry: ClusterClient, started: list[TopicPartition], waiting: set[tuple[str, int]]
    ) -> list[TopicPartition]:
        """The partitions of this eager assignment that this member did not hold in
        the generation before and that start at the group's committed offsets (not
        ``waiting`` for a translated start), when ``taken_hook`` wants them (else none)."""
        held = self._held.get(entry.cluster_id, set())
        self._held[entry.cluster_id] = {(tp.topic, tp.partition) for tp in started}
        if self.taken_hook is None or self.incremental:
            return []
        return [
            tp
            for tp in started
            if tp.offset == OFFSET_INVALID
            and (key := (tp.topic, tp.partition)) not in held
            and key not in waiting
        ]

    def _start_offsets(
        self, entry: ClusterClient, partitions: list[TopicPartition]
    ) -> tuple[list[TopicPartition], dict[str, tuple[list[TopicPartition], StartPlan]]]:
        """``partitions`` with the start offsets of ``kbear.switch.start`` applied to
        the partitions of topics just moved to this cluster (their first assignment
        only), and, when ``later`` is set, the partitions whose translation is left
        to it (physical topic -> partitions, plan), which start from the committed
        offsets until it answered (it commits the translated starts)."""
        if not self.start_at:
            return partitions, {}
        plans: dict[str, StartPlan] = {}
        for topic in {tp.topic for tp in partitions}:
            plan = self.start_at.pop((entry.cluster_id, topic), None)
            if plan is not None and (plan.offset is not None or plan.translated):
                plans[topic] = plan
        if not plans:
            return partitions, {}
        later: dict[str, tuple[list[TopicPartition], StartPlan]] = {}
        starts: dict[tuple[str, int], TopicPartition] = {}
        for topic, plan in plans.items():
            parts = [tp for tp in partitions if tp.topic == topic]
            if plan.translated and self.later is not None:
                later[topic] = (parts, plan)
            else:
                starts.update(
                    ((tp.topic, tp.partition), tp) for tp in planned(entry, parts, plan, self.translate)
                )
        out = [starts.get((tp.topic, tp.partition), tp) for tp in partitions]
        log.info(
            "kbear: start of moved topics on cluster %r: %s%s",
            entry.cluster_id,
            out,
            f" (translated in the background: {sorted(later)})" if later else "",
        )
        return out, later


def planned(
    entry: ClusterClient,
    parts: list[TopicPartition],
    plan: StartPlan,
    translate: Translate | None,
) -> list[TopicPartition]:
    """``parts`` (one topic moved to ``entry``'s cluster, physical names) with the start
    offsets of ``plan``: as given (the group's committed offsets there, else
    ``auto.offset.reset``), the beginning, the end, by timestamp (no offset at or
    after it, or a lookup that fails: the end), or translated through the old
    cluster's mirror (``translate``, blocking)."""
    if plan.translated and translate is not None:
        return translate(entry, parts, plan)
    if plan.offset is None:
        return parts
    out = [TopicPartition(tp.topic, tp.partition, plan.offset) for tp in parts]
    if not plan.by_time:
        return out
    found: dict[int, int] = {}
    try:
        for tp in entry.consumer.offsets_for_times(out, timeout=TIMESTAMP_LOOKUP_TIMEOUT_S):
            found[tp.partition] = tp.offset
    except KafkaException as exc:
        log.warning("kbear: offsets by time of %r on %r failed: %s", out[0].topic, entry.cluster_id, exc)
    return [
        TopicPartition(tp.topic, tp.partition, o if (o := found.get(tp.partition, -1)) >= 0 else OFFSET_END)
        for tp in out
    ]


def _still_unstarted(
    later: dict[str, tuple[list[TopicPartition], StartPlan]], started: list[TopicPartition]
) -> dict[str, tuple[list[TopicPartition], StartPlan]]:
    """``later`` without the partitions that ``started`` gives a start offset already
    (this member's own position at a refused commit)."""
    unstarted = {(tp.topic, tp.partition) for tp in started if tp.offset == OFFSET_INVALID}
    out = {}
    for topic, (parts, plan) in later.items():
        kept = [tp for tp in parts if (tp.topic, tp.partition) in unstarted]
        if kept:
            out[topic] = (kept, plan)
    return out


def _resumed(partitions: list[TopicPartition], resume: dict[tuple[str, int], int]) -> list[TopicPartition]:
    """``partitions`` (an assignment) with the partitions found in ``resume`` starting
    at the offsets there, unless a start offset was already chosen for them; the
    same list when none is found."""
    if not any((tp.topic, tp.partition) in resume and tp.offset == OFFSET_INVALID for tp in partitions):
        return partitions
    out = [
        TopicPartition(tp.topic, tp.partition, resume[key])
        if (key := (tp.topic, tp.partition)) in resume and tp.offset == OFFSET_INVALID
        else tp
        for tp in partitions
    ]
    log.info("kbear: partitions back at this member resume where it stopped: %s", out)
    return out


def _commit_resumed(entry: ClusterClient, resume: dict[tuple[str, int], int]) -> None:
    """The group refused the commit of this member's positions as its partitions left
    it (it was rebalancing): they are committed now, in the new generation
    (asynchronously: never waits). A partition that went to another member: its new
    owner starts there (:mod:`kbear.consumer._guard` reads the group's offsets
    again a moment after its assignment). A partition given back: this member reads
    on from there, and the group's committed offset must not stay behind what it
    read, or the partition's next owner (this member too) reads it again when the
    partition has nothing newer to commit before the next rebalance."""
    done = [TopicPartition(t, p, off) for (t, p), off in resume.items() if off >= 0]
    if done:
        commit_async(entry, done, "of the positions the group refused as the partitions left")


def commit_async(entry: ClusterClient, offsets: list[TopicPartition] | None, why: str) -> None:
    """Send a commit of ``offsets`` (None: the stored offsets) on ``entry``'s cluster
    without waiting for it; a refusal at sending is logged on ``kbear.consumer`` with
    ``why``, never raised (its outcome reaches the application's ``on_commit``, if any)."""
    try:
        if offsets is None:
            entry.consumer.commit(asynchronous=True)
        else:
            entry.consumer.commit(offsets=offsets, asynchronous=True)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            log.warning("kbear: commit on cluster %r %s failed: %s", entry.cluster_id, why, exc)
