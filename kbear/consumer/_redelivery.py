"""When an unacknowledged message is delivered again (nack and ack timeout).

Responsible for: the multiplier backoff of redeliveries (:class:`Backoff`), the
decision between another redelivery and the dead-letter topic
(:func:`next_delivery`), the messages waiting for their redelivery time
(:class:`Schedule`) and the acknowledgement timeout (:class:`AckTimer`). Pure
logic: times are seconds of a clock the caller passes in (monotonic in the
consumer, a fake one in tests); no I/O (``kbear.ack.mode=individual``, issue #15).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class Backoff:
    """Redelivery delays growing by a multiplier (Pulsar's ``MultiplierRedeliveryBackoff``).

    Args:
        min_s: delay of the first redelivery, seconds (``kbear.nack.backoff.min.ms`` / 1000).
        max_s: longest delay, seconds (``kbear.nack.backoff.max.ms`` / 1000).
        multiplier: growth per redelivery (``kbear.nack.backoff.multiplier``, >= 1).

    With 1 s, 60 s and 2 the delays of successive redeliveries are 1, 2, 4, 8,
    16, 32, 60, 60... s.
    """

    __slots__ = ("max_s", "min_s", "multiplier")

    def __init__(self, min_s: float, max_s: float, multiplier: float) -> None:
        self.min_s = min_s
        self.max_s = max_s
        self.multiplier = multiplier

    def delay(self, redeliveries: int) -> float:
        """Seconds before the redelivery that follows ``redeliveries`` earlier ones (>= 0)."""
        if self.min_s <= 0:
            return 0.0
        try:
            value = self.min_s * self.multiplier ** max(0, redeliveries)
        except OverflowError:
            return self.max_s
        return min(value, self.max_s)


def next_delivery(redeliveries: int, base: float, backoff: Backoff, max_redeliver: int) -> float | None:
    """When a message redelivered ``redeliveries`` times so far (nack, ack timeout,
    retry topic) and failed again at ``base`` (seconds) is delivered again, or None
    when it goes to the dead-letter topic instead: after ``max_redeliver``
    redeliveries (``kbear.max.redeliver.count``; 0: never)."""
    if max_redeliver > 0 and redeliveries >= max_redeliver:
        return None
    return base + backoff.delay(redeliveries)


class Schedule(Generic[T]):
    """Items due at a time (seconds), handed out in time order; an item is in the
    schedule at most once (adding it again moves it)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._live: dict[int, int] = {}  # id(item) -> seq of its live entry
        self._seq = itertools.count()

    def add(self, due: float, item: T) -> None:
        seq = next(self._seq)
        self._live[id(item)] = seq
        heapq.heappush(self._heap, (due, seq, item))

    def discard(self, item: T) -> None:
        self._live.pop(id(item), None)

    def __len__(self) -> int:
        return len(self._live)

    def _clean(self) -> None:
        heap = self._heap
        while heap and self._live.get(id(heap[0][2])) != heap[0][1]:
            heapq.heappop(heap)

    def next_due(self) -> float | None:
        """The earliest due time, or None when empty."""
        self._clean()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[T, float]]:
        """(item, its due time) of the items due at ``now`` (earliest first), removed."""
        out: list[tuple[T, float]] = []
        heap = self._heap
        while True:
            self._clean()
            if not heap or heap[0][0] > now:
                return out
            due, _, item = heapq.heappop(heap)
            del self._live[id(item)]
            out.append((item, due))


class AckTimer(Schedule[T]):
    """The acknowledgement timeout (``kbear.ack.timeout.ms``): items delivered and
    not stopped within ``timeout_s`` are reported by :meth:`expired`, which looks
    at most once per ``tick_s`` (``kbear.ack.timeout.tick.ms``). Each item is
    scheduled at its delivery time + ``timeout_s``."""

    def __init__(self, timeout_s: float, tick_s: float) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self.tick_s = tick_s
        self._next_check = 0.0

    def start(self, item: T, now: float) -> None:
        """``item`` was delivered at ``now``: its timeout runs."""
        self.add(now + self.timeout_s, item)

    def stop(self, item: T) -> None:
        """``item`` was acknowledged (or nacked): its timeout stops."""
        self.discard(item)

    def next_check(self) -> float | None:
        """When :meth:`expired` may next report something, or None when nothing runs."""
        due = self.next_due()
        return None if due is None else max(self._next_check, due)

    def expired(self, now: float) -> list[tuple[T, float]]:
        """(item, its deadline) of the items whose timeout ran out by ``now``, stopped;
        nothing between two ticks."""
        if now < self._next_check:
            return []
        self._next_check = now + self.tick_s
        return self.pop_due(now)
