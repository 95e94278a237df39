"""Commits that keep a group's committed offsets close behind its members while a
move reshuffles the group (issue #11: group moves without duplicate storms).

Every move makes kbear resubscribe cluster clients (the old cluster's without
the topic, the new cluster's with it); with the classic (eager) group protocol
each resubscription rebalances the whole group on that cluster, once per member
as the members switch one after the other. The next owner of a partition starts
at the group's committed offset. Brokers differ in what they accept while a
group prepares a rebalance: Apache Kafka accepts the commit a member makes in
``on_revoke``; others refuse it (librdkafka's mock cluster: ``REBALANCE_IN_PROGRESS``;
noida-db: ``ILLEGAL_GENERATION``), and everything a member read
since its last accepted commit (up to ``auto.commit.interval.ms``) was read
again by the next owner: 15-30 % duplicates measured on a group of 2 or 3.

:class:`MoveGuard`, from a route change until ``linger_s`` after this member's
last switch (the other members switch later, up to the drain timeout, and each
switch rebalances the group again):

- commits, at the start of a ``poll()``/``consume()`` that follows one that
  returned messages of a cluster, that cluster client's stored offsets,
  asynchronously (at most once per ``COMMIT_EVERY_S`` per client): the group's
  committed offset trails this member's position by about one call;
- when the group refuses such a commit because it is rebalancing
  (``REBALANCE_IN_PROGRESS``, ``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``),
  pauses that client's assigned partitions at the next call until its next
  assignment (at most ``session.timeout.ms``): the member stops reading what it
  could not commit.

With an eager protocol it also holds the partitions this member takes over from
another until their committed offsets were read again (issue #25 item 4). On
brokers that refuse the commit a member makes as its partitions leave it while
the group rebalances (librdkafka's mock cluster with the classic protocol), that
member commits its positions of the partitions that went to other members in the
new generation's ``on_assign`` (:mod:`kbear.consumer._rebalance`). Their new owner
fetches the group's committed offsets at the same moment, as its own assignment
starts: it wins that race about half the time and reads again what the other
member had read (a new group's whole backlog, when the first member on a move's
new cluster read it alone before the others joined). So the partitions this
member did not hold in the generation before and that start at the group's
committed offset are paused in ``on_assign``; ``RECHECK_AFTER_S`` later the
group's committed offsets of those partitions are read again in the background
(:func:`committed_offsets`, with the cluster's background client), then each is
sought there and resumed; where no offset is committed, or the look-up failed, it
is resumed where librdkafka started it. At most ``session.timeout.ms`` after the
assignment every partition is resumed. Nothing is lost: a committed offset is the
position of a member that handed every message before it to its application.

Both pauses are holds of :class:`kbear.consumer._holding.Holds`.

Only with ``enable.auto.commit`` on: kbear commits on the application's behalf
only when the application lets librdkafka commit. No broker call waits here: the
commits are asynchronous, their answers arrive through ``on_commit``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._holding import Hold, Holds, Key, LookUp, Submit

log = logging.getLogger("kbear.consumer")

#: Shortest time between two commits of one cluster's client during a move (seconds).
COMMIT_EVERY_S = 0.01

#: Errors of a commit refused because the group is rebalancing (or fenced this member).
REFUSED_IN_REBALANCE = frozenset(
    {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}
)

#: Seconds between a take-over and the second look at the group's committed
#: offsets: the time the partitions' former owner has to serve its own
#: ``on_assign`` of the same generation and commit there (one call of its poll loop).
RECHECK_AFTER_S = 0.5

#: Timeout of the background look-up of the committed offsets, seconds.
LOOKUP_TIMEOUT_S = 5.0

#: ``look_up(entry, parts)``: the look-up of ``parts``' committed offsets, to submit
TakeOverLookUp = Callable[[ClusterClient, list[TopicPartition]], LookUp]


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


def committed_look_up(submit: Submit, watcher: Callable[[ClusterClient], Any]) -> TakeOverLookUp:
    """The look-up of taken-over partitions' committed offsets, for
    :meth:`kbear.consumer._guard.MoveGuard.taken`: ``submit`` runs it in the consumer's
    background thread (:meth:`kbear.consumer._mover.SwitchDriver.submit`), ``watcher``
    gives a cluster's background client (:meth:`ClusterRegistry.watcher`)."""

    def look_up(entry: ClusterClient, parts: list[TopicPartition]) -> LookUp:
        return lambda: submit(entry.cluster_id, committed_offsets, watcher, entry, list(parts))

    return look_up


@dataclass(eq=False)
class MoveGuard:
    """The commits and pauses described in the module docstring, for one RoutedConsumer.

    Args:
        registry: the consumer's per-cluster clients.
        enabled: ``enable.auto.commit`` is on (otherwise the guard does nothing).
        linger_s: seconds the guard stays on after this member's last switch
            (the drain timeout plus ``session.timeout.ms``: the other members'
            switches and the rebalances they cause).
        pause_s: longest pause after a refused commit, in seconds
            (``session.timeout.ms``: by then the member has been rebalanced or
            removed from the group).
        clock: monotonic seconds.

    Calls come from the polling thread (:meth:`tick`, :meth:`read`), from the
    clients' ``on_commit`` callbacks (:meth:`commit_answered`, which calls no
    client) and from the rebalance callbacks (:meth:`assigned`, :meth:`taken`,
    :meth:`revoked`). ``takeover``: eager protocols, the look-up of the committed
    offsets of partitions taken over from other members during a move
    (:func:`committed_look_up`); None: not held.
    """

    registry: ClusterRegistry
    _: KW_ONLY
    enabled: bool
    linger_s: float
    pause_s: float
    clock: Callable[[], float]

    takeover: TakeOverLookUp | None = None

    def __post_init__(self) -> None:
        self._until = 0.0
        self._read: set[str] = set()  # cluster ids that returned messages since their last commit
        self._last_commit: dict[str, float] = {}
        #: the partitions paused after a refused commit, and those taken over
        self.holds = Holds(self.clock)
        #: cluster id -> its hold after a refused commit
        self._paused: dict[str, Hold] = {}
        self._refused: set[str] = set()  # cluster ids whose commit was refused, to pause

    @property
    def active(self) -> bool:
        """Whether the guard is on (the poll loop must then report what it reads)."""
        return self._until > 0.0

    def route_changed(self) -> None:
        """A route of this consumer changed: on until :meth:`switched` says otherwise."""
        if self.enabled:
            self._until = math.inf

    def switched(self, draining: bool) -> None:
        """This member carried out a switch; ``draining``: other moves still drain."""
        if self.enabled:
            self._until = math.inf if draining else self.clock() + self.linger_s

    def read(self, entry: ClusterClient) -> None:
        """``entry``'s client returned a message to the application."""
        if self._until:
            self._read.add(entry.cluster_id)

    def tick(self) -> bool:
        """Commit what was read since the last call, resume overdue pauses; returns
        False when the guard is off (it turns off ``linger_s`` after the last switch,
        once nothing is paused: the consumer may re-bind its fast paths)."""
        now = self.clock()
        if not self._until:
            return False
        for cluster_id in list(self._refused):
            self._refused.discard(cluster_id)
            if not self._is_paused(cluster_id):
                self._pause(cluster_id)
        for cluster_id in list(self._read):
            entry = self.registry.get(cluster_id)
            if entry is None or self._is_paused(cluster_id):
                self._read.discard(cluster_id)
                continue
            if now - self._last_commit.get(cluster_id, 0.0) < COMMIT_EVERY_S:
                continue
            self._read.discard(cluster_id)
            self._last_commit[cluster_id] = now
            try:
                entry.consumer.commit(asynchronous=True)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._NO_OFFSET:
                    log.debug("kbear: commit on cluster %r during a move: %s", cluster_id, exc)
        if self.holds.pending:
            self.holds.tick()
        if now > self._until and not self.holds.pending:
            self._until = 0.0
            self._read.clear()
            return False
        return True

    def commit_answered(self, cluster_id: str, err: Any, partitions: list[TopicPartition]) -> None:
        """``on_commit`` of ``cluster_id``'s client: a commit the group refused because it
        is rebalancing is noted; the next :meth:`tick` pauses the client's partitions.
        No client call here: the callback may be served inside any call on that
        client, ``close()`` included (a call on the client from there hangs)."""
        if not self.active or self._is_paused(cluster_id):
            return
        codes = {tp.error.code() for tp in partitions if tp.error is not None}
        if err is not None:
            codes.add(err.code())
        if codes & REFUSED_IN_REBALANCE:
            self._refused.add(cluster_id)

    def _is_paused(self, cluster_id: str) -> bool:
        return self.holds.holding(self._paused.get(cluster_id))

    def _pause(self, cluster_id: str) -> None:
        entry = self.registry.get(cluster_id)
        if entry is None:
            return
        try:
            mine = entry.consumer.assignment()
        except (KafkaException, RuntimeError) as exc:
            log.debug("kbear: pause on cluster %r after a refused commit failed: %s", cluster_id, exc)
            return
        hold = self.holds.hold(entry, mine, give_up_s=self.pause_s)
        if hold is not None:
            self._paused[cluster_id] = hold
            log.info(
                "kbear: cluster %r refused a commit while its group rebalances: %d partitions paused "
                "until the next assignment",
                cluster_id,
                len(mine),
            )

    def assigned(self, entry: ClusterClient) -> None:
        """``entry``'s client got its next assignment (``on_assign``): resume what
        the guard paused there."""
        self._refused.discard(entry.cluster_id)  # refused in the generation that ended
        self.holds.release(entry)
        self._paused.pop(entry.cluster_id, None)

    def taken(self, entry: ClusterClient, parts: list[TopicPartition]) -> None:
        """``on_assign`` of ``entry``'s client (eager protocols): ``parts`` were held by
        other members and start at the group's committed offsets; during a move they
        are held until those offsets were read again (module docstring)."""
        if not self._until or self.takeover is None:
            return
        hold = self.holds.hold(
            entry,
            parts,
            give_up_s=self.pause_s,
            look_up=self.takeover(entry, parts),
            after_s=RECHECK_AFTER_S,
            ended=_taken_over,
        )
        if hold is not None:
            log.info(
                "kbear: %d partitions taken over on cluster %r start at the group's committed offsets "
                "as read again in %.1f s",
                len(parts),
                entry.cluster_id,
                RECHECK_AFTER_S,
            )

    def revoked(self, entry: ClusterClient) -> None:
        """``on_revoke`` of ``entry``'s client (eager protocols: all its partitions):
        what is held there is resumed and no longer waited for."""
        self.holds.release(entry)

    def close(self) -> None:
        """The consumer closes: the guard does nothing more (its clients are closing)."""
        self.holds.close()
        self.enabled = False
        self._until = 0.0
        self._read.clear()
        self._refused.clear()
        self._paused.clear()


def _taken_over(hold: Hold, _sought: list[TopicPartition], how: str, _fell_back: bool) -> None:
    log.info("kbear: taken-over partitions on cluster %r resumed (%s)", hold.entry.cluster_id, how)
