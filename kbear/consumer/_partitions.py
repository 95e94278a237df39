"""The RoutedConsumer calls addressed to partitions, each sent to its topic's cluster.

``commit``, ``committed``, ``position``, ``assignment``, ``get_watermark_offsets``,
``assign`` / ``unassign`` / ``incremental_*``, ``store_offsets``, ``seek``,
``pause`` / ``resume``, ``offsets_for_times``: the partitions (logical topic
names) are split by cluster, renamed to physical topics, asked of each
cluster's client and answered under their logical names in the caller's order.
Inside a rebalance callback every partition is the rebalanced cluster's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any, TypeVar, cast

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kbear.consumer._assigned import AssignedMoves
from kbear.consumer._cluster import ClusterRegistry
from kbear.consumer._gate import CallGate
from kbear.consumer._individual import AckLayer
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._placing import Placement
from kbear.consumer._rebalance import Rebalancer
from kbear.consumer._subscription import Subscription

F = TypeVar("F", bound=Callable[..., Any])


def locked(method: F) -> F:
    """Run ``method`` under the consumer's lock (``self.lock``, reentrant), once
    ``self.check_open()`` passed: calls from several threads do not interleave their
    changes of kbear's state.

    Inside a rebalance callback the lock is not taken: the callback runs in a
    thread inside a cluster client's ``poll()`` (or ``close()``), and another
    thread holding the lock may be waiting in a call on that very client, which
    confluent-kafka holds until the ``poll()`` returns. The callback's calls
    address the rebalanced cluster only (:attr:`Rebalancer.current`).

    From a thread other than the polling one, the call takes its turn first
    (:mod:`kbear.consumer._gate`): confluent-kafka lets it reach a client only
    between two polls of it."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.rebalancer.current is not None:
            self.check_open()
            return method(self, *args, **kwargs)
        with self.gate.turn(), self.lock:
            self.check_open()
            return method(self, *args, **kwargs)

    return cast(F, call)


def next_offset(message: Any) -> TopicPartition:
    """The TopicPartition after ``message`` (its offset + 1), keeping its leader epoch."""
    # TopicPartition takes neither metadata=None nor leader_epoch=None.
    epoch = message.leader_epoch()
    extra: dict[str, Any] = {} if epoch is None else {"leader_epoch": epoch}
    return TopicPartition(
        str(message.topic()), int(message.partition() or 0), int(message.offset() or 0) + 1, **extra
    )


@dataclass(eq=False)
class PartitionCalls:
    """The partition-addressed calls of :class:`~kbear.RoutedConsumer` (its methods of
    the same names delegate here).

    Args:
        sub: the consumer's subscription (its routes in use).
        registry, rebalancer, driver: its per-cluster clients, rebalance state and
            switch driver (the stale commits after a switch).
        placement: where its partitions are read.
        assigned: the route following of a manual assignment.
        gate: the turns of calls from other threads on the clients.
        lock: the consumer's lock.
        check_open: raises ``RuntimeError`` when the consumer is closed.
        repin: called when the clients read changed.

    Attributes:
        acks: the acknowledgement layer (``kbear.ack.mode=individual``), or None.
    """

    sub: Subscription
    registry: ClusterRegistry
    rebalancer: Rebalancer
    driver: SwitchDriver
    placement: Placement
    assigned: AssignedMoves
    gate: CallGate
    _: KW_ONLY
    lock: threading.RLock
    check_open: Callable[[], None]
    repin: Callable[[], None]
    acks: AckLayer | None = None

    def _per_cluster(
        self, partitions: list[TopicPartition], call: Callable[[Any, list[TopicPartition]], Any]
    ) -> list[TopicPartition]:
        if not partitions:  # (also inside a rebalance callback: nothing asked of the client)
            return []
        result: list[TopicPartition | None] = [None] * len(partitions)
        for entry, indexes, parts in self.placement.split(partitions):
            answered = call(entry.consumer, parts)
            if not answered:  # an asynchronous commit, pause, resume, store answer nothing
                continue
            for index, tp in zip(indexes, entry.to_logical(list(answered)), strict=True):
                result[index] = tp
        return [tp for tp in result if tp is not None]

    # ------------------------------------------------------------------ offsets

    @locked
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """Commit offsets, each on its topic's cluster (as ``Consumer.commit``).

        Args:
            message: commit this message's offset + 1.
            offsets: commit these TopicPartitions (logical topic names).
            asynchronous: return at once (True) or wait for the commits.

        Returns:
            None when asynchronous, else the committed TopicPartitions (logical names).

        Raises:
            ValueError: both ``message`` and ``offsets`` are given.
            KafkaException: the commit failed, e.g. ``_NO_OFFSET`` when nothing
                was consumed on any cluster.

        A message received from a topic's old cluster before a route switch is
        already committed there by the switch; committing it afterwards is a
        no-op until the new cluster has delivered a message of that topic.
        """
        if message is None and offsets is None:
            return self._commit_all(asynchronous)
        given = self._given("commit", message, offsets)
        committed = self._per_cluster(
            given, lambda c, parts: c.commit(offsets=parts, asynchronous=asynchronous) or []
        )
        return None if asynchronous else committed

    def _given(
        self, call: str, message: Message | None, offsets: list[TopicPartition] | None
    ) -> list[TopicPartition]:
        """The offsets that ``call`` (``commit``, ``store_offsets``) is given: ``offsets``,
        or ``message``'s offset + 1 (none: a message of the old cluster of a topic
        switched since, committed there by the switch).

        Raises:
            ValueError: both are given.
            KafkaException: ``_INVALID_ARG`` with ``kbear.ack.mode=individual``.
        """
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if self.acks is not None:
            raise KafkaException(
                KafkaError(
                    KafkaError._INVALID_ARG,
                    f"{call}: kbear.ack.mode=individual commits the acknowledged prefix only; "
                    "use ack()/ack_cumulative(), and commit() without message or offsets",
                )
            )
        if offsets is not None:
            return offsets
        assert message is not None
        return [] if str(message.topic()) in self.driver.stale_commits else [next_offset(message)]

    def _commit_all(self, asynchronous: bool) -> list[TopicPartition] | None:
        if self.acks is not None:  # kbear.ack.mode=individual: the acknowledged prefixes
            self.acks.flush_stores()
        out: list[TopicPartition] = []
        no_offset: KafkaException | None = None
        committed_any = False
        current = self.rebalancer.current
        # inside a rebalance callback: the rebalanced cluster (also when close() runs it)
        for entry in list(self.registry.active) if current is None else [current]:
            try:
                answered = entry.consumer.commit(asynchronous=asynchronous)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError._NO_OFFSET:
                    no_offset = no_offset or exc
                    continue
                raise
            committed_any = True
            if answered:
                out.extend(entry.to_logical(answered))
        if not committed_any and no_offset is not None:
            raise no_offset
        return None if asynchronous else out

    @locked
    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        """Committed offsets of ``partitions`` (logical names), each asked of its cluster.

        Args:
            partitions: the partitions to look up.
            timeout: maximum time in seconds per cluster (-1: infinite).

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: a cluster did not answer.
        """
        return self._per_cluster(partitions, lambda c, parts: c.committed(parts, timeout=timeout))

    @locked
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Current positions (next offset to fetch) of ``partitions`` (logical names)."""
        return self._per_cluster(partitions, lambda c, parts: c.position(parts))

    @locked
    def assignment(self) -> list[TopicPartition]:
        """The partitions assigned on every cluster, with logical topic names.

        While a topic moves, its old cluster may still hold a partition the new
        one was already given: each partition is listed once, as the cluster its
        route names now."""
        entries = list(self.registry)
        current = self.rebalancer.current
        if current is not None and current not in entries:  # on_revoke run by close()
            entries.append(current)
        found: dict[tuple[str, int], tuple[TopicPartition, str]] = {}
        for entry in entries:
            for tp in entry.to_logical(entry.consumer.assignment()):
                key = (tp.topic, tp.partition)
                route = self.sub.routes.get(tp.topic)
                if key not in found or (route is not None and route.cluster_id == entry.cluster_id):
                    found[key] = (tp, entry.cluster_id)
        return [tp for tp, _ in found.values()]

    @locked
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        """Low and high watermark of ``partition`` on its topic's cluster (as confluent-kafka)."""
        ((entry, _, parts),) = self.placement.split([partition])
        kwargs: dict[str, Any] = {"cached": cached}
        if timeout is not None:
            kwargs["timeout"] = timeout
        result: tuple[int, int] | None = entry.consumer.get_watermark_offsets(parts[0], **kwargs)
        return result

    @locked
    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        """For each partition (``offset`` holding a timestamp in ms since the epoch), the
        earliest offset whose timestamp is at or after it, asked of its topic's cluster.

        Args:
            partitions: TopicPartitions with logical names.
            timeout: maximum time in seconds per cluster (-1: infinite).
        """
        return self._per_cluster(partitions, lambda c, parts: c.offsets_for_times(parts, timeout=timeout))

    @locked
    def store_offsets(
        self, message: Message | None = None, offsets: list[TopicPartition] | None = None
    ) -> None:
        """Store offsets for the next (auto-)commit, as ``Consumer.store_offsets``
        (``message``: its offset + 1; ``offsets``: logical topic names).

        Raises:
            ValueError: neither or both of ``message`` and ``offsets`` are given.
        """
        if message is None and offsets is None:
            raise ValueError("expected either message or offsets")
        given = self._given("store_offsets", message, offsets)
        self._per_cluster(given, lambda c, parts: c.store_offsets(offsets=parts))

    @locked
    def seek(self, partition: TopicPartition) -> None:
        """Set the fetch position of an assigned partition (logical name), as ``Consumer.seek``."""
        ((entry, _, parts),) = self.placement.split([partition])
        entry.consumer.seek(parts[0])

    @locked
    def pause(self, partitions: list[TopicPartition]) -> None:
        """Pause fetching ``partitions`` (logical names) on their clusters."""
        self._per_cluster(partitions, lambda c, parts: c.pause(parts))

    @locked
    def resume(self, partitions: list[TopicPartition]) -> None:
        """Resume fetching ``partitions`` (logical names) on their clusters."""
        self._per_cluster(partitions, lambda c, parts: c.resume(parts))

    # ------------------------------------------------------------------ assignment

    @locked
    def assign(self, partitions: list[TopicPartition]) -> None:
        """Set the assignment (as ``Consumer.assign``), each partition on its topic's cluster.

        Inside a rebalance callback it assigns on the cluster being rebalanced
        only; outside, it replaces the assignment of every cluster (clusters with
        no partition in ``partitions`` and no subscription are unassigned). Outside
        a subscription, the topics assigned follow their route changes: a moved
        topic's partitions leave the old cluster (drained first, per
        ``kbear.switch``) and are assigned on the new one from ``kbear.switch.start``
        (the offsets given here apply to the first cluster only).

        Args:
            partitions: TopicPartitions with logical topic names; ``offset`` as
                confluent-kafka (``OFFSET_BEGINNING``, ``OFFSET_END``,
                ``OFFSET_STORED``, or an offset).

        Raises:
            NoRouteError: a topic has no route.
            KafkaException: confluent-kafka refused the assignment.
        """
        named = self.placement.assign(partitions, incremental=False)
        self.assigned.follow((tp.topic for tp in partitions), replace=True)
        if self.rebalancer.current is None:
            for entry in self.registry:
                if entry.cluster_id not in named and not entry.topics:
                    entry.consumer.unassign()
                    self.registry.deactivate(entry)
            self.repin()

    @locked
    def unassign(self) -> None:
        """Remove the assignment (inside a rebalance callback: of the cluster being
        rebalanced; outside: of every cluster, and the assigned topics' routes are no
        longer followed)."""
        current = self.rebalancer.current
        if current is not None:
            current.consumer.unassign()
            self.rebalancer.assigned_in_callback = True
            return
        for entry in self.registry:
            entry.consumer.unassign()
            if not entry.topics:
                self.registry.deactivate(entry)
        self.assigned.stop_following()
        self.repin()

    @locked
    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add ``partitions`` (logical names) to the assignment of their clusters
        (outside a subscription their topics follow route changes, as with ``assign``)."""
        self.placement.assign(partitions, incremental=True)
        self.assigned.follow((tp.topic for tp in partitions), replace=False)

    @locked
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove ``partitions`` (logical names) from the assignment of their clusters."""
        for entry, _, parts in self.placement.split(partitions):
            entry.consumer.incremental_unassign(parts)
            if entry is self.rebalancer.current:
                self.rebalancer.assigned_in_callback = True
