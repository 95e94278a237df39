"""The acknowledgements of a routed share consumer (private).

:class:`ShareAcks` holds the records of the last poll and carries out the
acknowledgement calls of :class:`~kbear.RoutedShareConsumer`:
each record is acknowledged on the cluster it was acquired from, under its
physical name; commits go to every cluster's share consumer and their results
come back under the logical names. The facade delegates its public
acknowledgement methods here (``kbear._delegate.delegate``) and tells this part
of each new batch and record from :meth:`~kbear.RoutedShareConsumer.poll`.

In ``explicit`` mode every record of a batch must be acknowledged before the
next poll, as confluent-kafka requires ("N records from previous poll have not
been acknowledged").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaException, TopicPartition

from kbear._base import Uninitialized
from kbear._clients import Deadline
from kbear.share._clusters import CommitCallback, ShareCluster, ShareClusters
from kbear.share._guard import (
    NOT_IN_FLIGHT,
    OFFSET_NOT_IN_FLIGHT,
    CallGuard,
    check_ack_type,
    check_coordinates,
    check_message,
    check_timeout,
)


class NeverOpened(Uninitialized):
    """Stands for the acknowledgement part of a share consumer whose ``__init__``
    never ran: any use raises ``IllegalStateException(message)``, as the closed
    call guard does (confluent-kafka's "Share consumer closed")."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise IllegalStateException(self.message)


@dataclass
class Acquired:
    """One record of the last batch: the share consumer ``owner`` (a cluster's)
    acquired it as ``physical``; ``message`` is the object handed to the
    application; ``acknowledged``: the application acknowledged it (any type)."""

    owner: ShareCluster
    physical: str
    message: Any
    acknowledged: bool = False


class ShareAcks:
    """Acknowledgements and their commits, for one routed share consumer.

    Args:
        guard: the consumer's call guard (one thread at a time; closed refuses).
        clusters: the consumer's share consumers, one per cluster.
        explicit: ``share.acknowledgement.mode`` is ``explicit``.
    """

    def __init__(self, guard: CallGuard, clusters: ShareClusters, explicit: bool) -> None:
        self._guard = guard
        self._clusters = clusters
        self._explicit = explicit
        #: the records of the last poll, by (logical topic, partition, offset)
        self._records: dict[tuple[str, int, int], list[Acquired]] = {}

    # ------------------------------------------------------------------ the last batch

    def check_acknowledged(self) -> None:
        """Before a poll: in ``explicit`` mode every record of the previous batch
        must have been acknowledged.

        Raises:
            IllegalStateException: "N records from previous poll have not been acknowledged".
        """
        if self._explicit:
            left = sum(1 for records in self._records.values() for r in records if not r.acknowledged)
            if left:
                raise IllegalStateException(f"{left} records from previous poll have not been acknowledged")

    def new_batch(self) -> None:
        """A new poll: forget the records of the previous one."""
        self._records = {}

    def add(self, owner: ShareCluster, logical: str, physical: str, message: Any) -> None:
        """Note ``message`` (logical topic ``logical``) acquired by ``owner`` as ``physical``."""
        key = (logical, message.partition(), message.offset())
        self._records.setdefault(key, []).append(Acquired(owner, physical, message))

    def _find(self, topic: str, partition: int, offset: int, message: Any = None) -> Acquired | None:
        """The record of the last batch at these logical coordinates, or None. Two
        records may share them during a move (the same logical topic read from two
        clusters): the one whose message object is ``message`` is preferred, else the
        first not acknowledged."""
        found = self._records.get((topic, partition, offset))
        if not found:
            return None
        for record in found:
            if message is not None and record.message is message:
                return record
        for record in found:
            if not record.acknowledged:
                return record
        return found[0]

    def cluster_of(self, message: Any) -> str | None:
        """The cluster id ``message`` (of the last poll) was acquired from, or None."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return None
        record = self._find(topic, partition, offset, message)
        return None if record is None else record.owner.cluster_id

    # ------------------------------------------------------------------ the public calls

    def acknowledge(self, message: Any, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record of the last poll (``explicit`` mode), on the cluster
        it was acquired from; sent at the next poll or commit.

        Args:
            message: a message returned by :meth:`poll` (its logical topic).
            ack_type: ``AcknowledgeType.ACCEPT`` (default), ``RELEASE`` or ``REJECT``.

        Raises:
            TypeError: ``message`` is not a Message, or ``ack_type`` not an int.
            ValueError: its topic is None, its partition or offset negative, or
                ``ack_type`` invalid.
            IllegalStateException: implicit mode, the record is not in flight, or closed.
        """
        with self._guard.call():
            check_message(message)
            where = (message.topic(), message.partition(), message.offset())
            self._acknowledge(*where, ack_type, message, NOT_IN_FLIGHT)

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, ack_type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge the record of the last poll at ``topic`` (logical),
        ``partition``, ``offset`` (``explicit`` mode), as :meth:`acknowledge`.

        Raises:
            TypeError: ``topic`` not a str, ``partition``/``offset`` not ints.
            ValueError: a negative partition or offset, or ``ack_type`` invalid.
            IllegalStateException: implicit mode, the record is not in flight, or closed.
        """
        with self._guard.call():
            if not isinstance(topic, str):
                raise TypeError(f"topic must be a str, not {type(topic).__name__}")
            check_coordinates(partition, offset)
            self._acknowledge(topic, partition, offset, ack_type, None, OFFSET_NOT_IN_FLIGHT)

    def _acknowledge(
        self, topic: str, partition: int, offset: int, ack_type: Any, message: Any, not_in_flight: str
    ) -> None:
        """Acknowledge the record of the last poll at these logical coordinates (of
        ``message`` when given) on the cluster it came from.

        Raises:
            IllegalStateException: ``not_in_flight``: implicit mode, or no such record.
            TypeError, ValueError: ``ack_type`` (:func:`check_ack_type`).
        """
        if not self._explicit:
            raise IllegalStateException(not_in_flight)
        check_ack_type(ack_type)
        record = self._find(topic, partition, offset, message)
        if record is None:
            raise IllegalStateException(not_in_flight)
        record.owner.client.acknowledge_offset(record.physical, partition, offset, ack_type)
        record.acknowledged = True

    def commit_sync(self, timeout: float = 60) -> dict[TopicPartition, KafkaException | None]:
        """Commit the pending acknowledgements on every cluster and wait for the
        answers (in ``implicit`` mode the last batch is accepted first).

        Args:
            timeout: seconds to wait in all (-1: no limit).

        Returns:
            Logical TopicPartition -> None (committed) or the KafkaException of that
            partition; empty when nothing was pending.

        Raises:
            TypeError: ``timeout`` is not a number.
            IllegalStateException: closed.
            KafkaException: a cluster's share consumer failed (the other clusters
                are committed first).
        """
        with self._guard.call():
            deadline = Deadline(check_timeout(timeout))
            results: dict[TopicPartition, KafkaException | None] = {}
            errors: list[BaseException] = []
            for entry in self._clusters.all():
                try:
                    results.update(entry.renamed_keys(entry.commit(deadline.as_arg())))
                except KafkaException as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]
            return results

    def commit_async(self) -> None:
        """Send the pending acknowledgements of every cluster without waiting; the
        answers go to the acknowledgement commit callback.

        Raises:
            IllegalStateException: closed.
            KafkaException: a cluster's share consumer failed.
        """
        self._guard.check()
        for entry in self._clusters.all():
            entry.client.commit_async()

    def set_acknowledgement_commit_callback(self, callback: CommitCallback | None) -> None:
        """Call ``callback(offsets, exception)`` when a cluster answers an
        acknowledgement commit: ``offsets`` is logical TopicPartition -> set of
        offsets, ``exception`` a KafkaException or None. Runs in the thread of the
        call serving the answer (poll, commit_sync, commit_async, close). None clears it.

        Raises:
            TypeError: ``callback`` is neither callable nor None.
            IllegalStateException: closed, or called from within the callback.
        """
        with self._guard.call():
            self._clusters.set_commit_callback(callback)
