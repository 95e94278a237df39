"""The message buffer of RoutedAIOProducer (no I/O).

Responsible for: holding the messages ``produce()`` accepted until they are
handed to the routed producer as batches, one ``produce_batch`` per topic and
partition in the order they were produced (per-partition order kept), and
turning delivery reports, which arrive in executor threads, into results of
the messages' asyncio futures on the loop.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from confluent_kafka import KafkaError, KafkaException

#: One accepted message: (topic, partition or -1, produce_batch dict, future).
Pending = tuple[str, int, dict[str, Any], "asyncio.Future[Any]"]
#: (topic, partition, messages, futures) handed to one produce_batch call.
Batch = tuple[str, int, list[dict[str, Any]], list["asyncio.Future[Any]"]]


class MessageBuffer:
    """Messages accepted by ``produce()`` and not yet handed to librdkafka, and the
    delivery reports not yet given to their futures.

    ``reports`` is appended to from executor threads (``deque.append`` is
    thread-safe) and read on the loop by :meth:`settle`.
    """

    def __init__(self) -> None:
        self._pending: list[Pending] = []
        self.reports: collections.deque[tuple[asyncio.Future[Any], Any, Any]] = collections.deque()
        #: futures handed to librdkafka whose delivery report has not been settled
        self.in_flight = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, topic: str, partition: int, message: dict[str, Any], future: asyncio.Future[Any]) -> None:
        """Accept one message (``message``: the ``produce_batch`` dict: value, key,
        timestamp) whose delivery resolves ``future``."""
        self._pending.append((topic, partition, message, future))

    def take(self) -> list[Batch]:
        """Empty the buffer into batches, one per (topic, partition), in first-produced
        order; each message dict gets the callback reporting to its future."""
        groups: dict[tuple[str, int], Batch] = {}
        for topic, partition, message, future in self._pending:
            batch = groups.get((topic, partition))
            if batch is None:
                batch = groups[(topic, partition)] = (topic, partition, [], [])
            message["callback"] = self._reporter(future)
            batch[2].append(message)
            batch[3].append(future)
        self.in_flight += len(self._pending)
        self._pending = []
        return list(groups.values())

    def _reporter(self, future: asyncio.Future[Any]) -> Any:
        reports = self.reports

        def report(err: Any, msg: Any) -> None:
            reports.append((future, err, msg))

        return report

    def failed_at_enqueue(self, batch: Batch) -> None:
        """Report the messages of ``batch`` librdkafka refused at once (``_error``
        set by ``produce_batch``: no delivery report will come for them)."""
        for message, future in zip(batch[2], batch[3], strict=True):
            err = message.get("_error")
            if err is not None:
                self.reports.append((future, err, None))

    def failed(self, batch: Batch, exc: BaseException) -> None:
        """Report every message of ``batch`` as failed with ``exc`` (the batch call raised)."""
        for future in batch[3]:
            self.reports.append((future, exc, None))

    def cancel(self) -> None:
        """Drop the buffered messages (``purge``), cancelling their futures."""
        for _topic, _partition, _message, future in self._pending:
            future.cancel()
        self._pending = []

    def settle(self) -> int:
        """On the loop: give every delivery report received so far to its future
        (a result: the delivered ``Message``; an error: ``KafkaException``).
        Returns the number settled."""
        n = 0
        reports = self.reports
        while reports:
            future, err, msg = reports.popleft()
            n += 1
            if future.done():  # cancelled by the application meanwhile
                continue
            if err is None:
                future.set_result(msg)
            elif isinstance(err, BaseException):
                future.set_exception(err)
            elif isinstance(err, KafkaError):
                future.set_exception(KafkaException(err))
            else:
                future.set_exception(KafkaException(KafkaError(KafkaError._FAIL, str(err))))
        self.in_flight -= n
        return n
