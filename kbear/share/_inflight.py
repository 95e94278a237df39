"""The records of a routed share consumer's last poll (private; no I/O).

A share consumer's records are acknowledged on the cluster they were acquired
from, under their physical topic name, while the application sees (and
acknowledges by) the logical name. :class:`LastBatch` remembers, for the
records of the last :meth:`~kbear.RoutedShareConsumer.poll`, which cluster's
share consumer acquired each and under which name, and which were acknowledged:
in ``explicit`` mode every record of a batch must be before the next poll, as
confluent-kafka requires ("N records from previous poll have not been
acknowledged").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

C = TypeVar("C")


@dataclass
class Acquired(Generic[C]):
    """One record of the last batch: the share consumer ``owner`` (a cluster's)
    acquired it as ``physical``; ``message`` is the object handed to the
    application; ``acknowledged``: the application acknowledged it (any type)."""

    owner: C
    physical: str
    message: Any
    acknowledged: bool = False


class LastBatch(Generic[C]):
    """The records of the last poll, by (logical topic, partition, offset).

    Two records may share those coordinates during a move (the same logical topic
    read from two clusters): :meth:`find` then prefers the one whose message object
    is the one given, else the first not acknowledged.
    """

    def __init__(self) -> None:
        self._records: dict[tuple[str, int, int], list[Acquired[C]]] = {}

    def start(self) -> None:
        """A new poll: forget the previous batch."""
        self._records = {}

    def add(self, owner: C, logical: str, physical: str, message: Any) -> None:
        """Note ``message`` (logical topic ``logical``) acquired by ``owner`` as ``physical``."""
        key = (logical, message.partition(), message.offset())
        self._records.setdefault(key, []).append(Acquired(owner, physical, message))

    def find(self, topic: str, partition: int, offset: int, message: Any = None) -> Acquired[C] | None:
        """The record of the last batch at these logical coordinates, or None."""
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

    def unacknowledged(self) -> int:
        """How many records of the last batch are not acknowledged."""
        return sum(1 for records in self._records.values() for r in records if not r.acknowledged)
