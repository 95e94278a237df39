"""Futures of the routed admin client (private): one logical future fed by the
futures of one or several clusters.

confluent-kafka's admin calls answer with ``concurrent.futures.Future`` objects
that librdkafka's background thread completes. A routed call sends one request
per cluster and hands the application futures of its own, completed from the
clusters' futures' done-callbacks (so in librdkafka's thread, as confluent-kafka
completes its own): a future's result is the cluster's result, renamed to the
logical topic names where needed, and its exception is the cluster's exception
object itself (``KafkaException`` carrying the ``KafkaError``), so error codes are
exactly confluent-kafka's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any


def new_future() -> Future[Any]:
    """A running future, as confluent-kafka's ``AdminClient._create_future``."""
    future: Future[Any] = Future()
    future.set_running_or_notify_cancel()
    return future


def forward(source: Future[Any], transform: Callable[[Any], Any] | None = None) -> Future[Any]:
    """A future completed with ``transform(source.result())`` (or the result itself),
    or with ``source``'s exception; an exception raised by ``transform`` completes
    it too (never lost in a callback)."""
    return gather([source], lambda results: results[0] if transform is None else transform(results[0]))


def gather(sources: Sequence[Future[Any]], combine: Callable[[list[Any]], Any]) -> Future[Any]:
    """A future completed once every future of ``sources`` is done: with
    ``combine(results)`` (results in the order of ``sources``) when all
    succeeded, else with the exception of the first failed future in that order.

    ``sources`` must not be empty.
    """

    def decide(done: Sequence[Future[Any]]) -> Any:
        for source in done:
            exc = source.exception()
            if exc is not None:
                raise exc
        return combine([source.result() for source in done])

    return settled(sources, decide)


def settled(sources: Sequence[Future[Any]], decide: Callable[[Sequence[Future[Any]]], Any]) -> Future[Any]:
    """A future completed once every future of ``sources`` is done, with
    ``decide(sources)``'s return value or the exception it raises (the exception
    object itself, so a cluster's ``KafkaException`` reaches the application as is).

    ``sources`` must not be empty.
    """
    target = new_future()
    # a done-callback runs in the thread completing its future (librdkafka's), or at
    # once in the caller's thread when that future is done already: count under a lock
    remaining = [len(sources)]
    lock = threading.Lock()

    def done(_f: Future[Any]) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if not last:
            return
        try:
            value = decide(sources)
        except BaseException as exc:  # also a bug in decide: the future must complete
            target.set_exception(exc)
        else:
            target.set_result(value)

    for source in sources:
        source.add_done_callback(done)
    return target


def completed(value: Any) -> Future[Any]:
    """A future already completed with ``value``."""
    future = new_future()
    future.set_result(value)
    return future
