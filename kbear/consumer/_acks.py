"""Per-partition acknowledged offsets and the contiguous prefix that may be committed.

Responsible for: knowing, for each partition read (cluster id, physical topic,
partition), which offsets were read and not yet acknowledged, and the offset
the group may commit there: the lowest offset read and not acknowledged, or,
when every offset read is acknowledged, the offset after the highest one read.
Kafka offsets have gaps (compaction, transaction markers): the prefix is made
of the offsets *read*, not of consecutive integers. Pure logic: no I/O, no
clock, no confluent-kafka (``kbear.ack.mode=individual``, issue #15).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition

#: (cluster id, physical topic, partition)
PartitionKey = tuple[str, str, int]
#: ``(cluster client, positions) -> positions lowered to the acknowledged prefix``
CommitPoints = Callable[[Any, list[TopicPartition]], list[TopicPartition]]


class _Partition:
    """The offsets of one partition read and not acknowledged (a set, and a heap
    with lazy deletion for its minimum), and the offset after the highest read."""

    __slots__ = ("heap", "next", "open")

    def __init__(self) -> None:
        self.open: set[int] = set()
        self.heap: list[int] = []
        self.next = -1

    def point(self) -> int:
        heap = self.heap
        while heap and heap[0] not in self.open:
            heapq.heappop(heap)
        return heap[0] if heap else self.next


class AckTracker:
    """The acknowledged offsets of every partition read (see the module docstring).

    Offsets are ints >= 0; a partition is a :data:`PartitionKey`. Not thread-safe:
    the caller serializes (the consumer's acknowledgement layer holds a lock).
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[PartitionKey, _Partition] = {}

    def read(self, key: PartitionKey, offset: int) -> bool:
        """``offset`` of ``key`` was read: it stays unacknowledged until :meth:`ack`.

        Returns False when it is already read and unacknowledged (the same message
        read again, e.g. after a seek back): nothing changes.
        """
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Partition()
        if offset in part.open:
            return False
        part.open.add(offset)
        heapq.heappush(part.heap, offset)
        if offset + 1 > part.next:
            part.next = offset + 1
        return True

    def ack(self, key: PartitionKey, offsets: list[int] | tuple[int, ...]) -> int | None:
        """Acknowledge ``offsets`` of ``key`` (unknown ones are ignored).

        Returns:
            The commit point (:meth:`point`) after it, or None when the partition
            is not tracked.
        """
        part = self._parts.get(key)
        if part is None:
            return None
        for offset in offsets:
            part.open.discard(offset)
        return part.point()

    def ack_upto(self, key: PartitionKey, offset: int) -> tuple[int | None, list[int]]:
        """Acknowledge every offset of ``key`` up to and including ``offset``
        (cumulative acknowledgement).

        Returns:
            (the commit point after it or None when not tracked, the offsets acknowledged now).
        """
        part = self._parts.get(key)
        if part is None:
            return None, []
        done = sorted(o for o in part.open if o <= offset)
        part.open.difference_update(done)
        return part.point(), done

    def point(self, key: PartitionKey) -> int | None:
        """The offset the group may commit for ``key``: the lowest offset read and
        not acknowledged, else the offset after the highest read; None when nothing
        of ``key`` was read (since it was last forgotten)."""
        part = self._parts.get(key)
        if part is None or part.next < 0:
            return None
        return part.point()

    def forget(self, key: PartitionKey) -> None:
        """Stop tracking ``key`` (its partition left this member: the next owner
        reads again from the committed offset)."""
        self._parts.pop(key, None)

    def __len__(self) -> int:
        """How many offsets are read and not acknowledged, over every partition."""
        return sum(len(p.open) for p in self._parts.values())
