"""RoutedAIOProducer: ``confluent_kafka.aio.AIOProducer`` over routed topics.

Responsible for: the asyncio face of :class:`kbear.RoutedProducer`, with the
batching of confluent-kafka's ``AIOProducer``: ``produce()`` buffers the message
and returns a future of its delivery; full buffers (``batch_size``) and idle ones
(``buffer_timeout``) go to the routed producer's ``produce_batch`` in an executor
thread. A route change is applied there, by the routed producer's own switch
(the drain of the old cluster before a topic goes to the new one): the event
loop is never held by a move. A background task polls for delivery reports
while messages are in flight, so futures resolve without the application
calling ``poll()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kbear._base import NO_CONFIG, weak_method
from kbear._delegate import delegate
from kbear._identity import Client
from kbear.aio._batch import Batch, MessageBuffer
from kbear.aio._calls import Calls, keep_task, wrap_config_callbacks
from kbear.aio._notify import AsyncRouted, awaits
from kbear.producer import RoutedProducer
from kbear.router import Router

log = logging.getLogger("kbear.aio")

_CONFIG_CALLBACKS = ("error_cb", "throttle_cb", "stats_cb")
#: How long one background poll for delivery reports waits, seconds.
_REPORT_POLL_S = 0.05
#: confluent-kafka's words when ``produce()`` is given headers (its batches cannot carry them)
NO_HEADERS = (
    "Headers are not supported in AIOProducer batch mode. "
    "Use the synchronous Producer.produce() method if headers are required."
)


class RoutedAIOProducer(AsyncRouted):
    """A routed ``confluent_kafka.aio.AIOProducer``: same constructor, methods,
    arguments, results and exceptions, over a :class:`kbear.RoutedProducer`.

    Args:
        producer_conf: confluent-kafka configuration plus ``kbear.*`` keys, as
            :class:`kbear.RoutedProducer` (``bootstrap.servers`` comes from the
            route). ``error_cb``, ``throttle_cb``, ``stats_cb`` may be coroutine
            functions or plain functions; they run on the event loop. Not modified.
        max_workers: threads of the executor built when ``executor`` is None
            (confluent-kafka's default, 4).
        executor: a ``concurrent.futures.Executor`` to run blocking calls in.
        batch_size: buffered messages that trigger a batch (default 1000, as
            confluent-kafka).
        buffer_timeout: seconds of inactivity after which a non-empty buffer is
            sent anyway (default 1.0, as confluent-kafka; 0 disables).
        router, client: as :class:`kbear.RoutedProducer`.

    Must be constructed inside a running event loop.

    Raises:
        RuntimeError: no running event loop.
        ValueError: ``max_workers`` < 1.
        TypeError, KafkaException, ConfigError: as :class:`kbear.RoutedProducer`.
    """

    def __init__(
        self,
        producer_conf: Mapping[str, Any] = NO_CONFIG,
        max_workers: int = 4,
        executor: concurrent.futures.Executor | None = None,
        batch_size: int = 1000,
        buffer_timeout: float = 1.0,
        *,
        router: Router | None = None,
        client: Client | None = None,
    ) -> None:
        self._is_closed = False
        self._calls = Calls(executor, max_workers)
        conf = producer_conf
        if isinstance(producer_conf, Mapping):
            conf = dict(producer_conf)
            wrap_config_callbacks(self._calls.loop, conf, _CONFIG_CALLBACKS)
        self._producer = self._open(conf, router, client)
        self._batch_size = batch_size
        self._buffer = MessageBuffer()
        self._buffer_timeout = buffer_timeout
        self._last_activity = time.monotonic()
        self._poller: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        if buffer_timeout > 0:
            interval = max(0.1, min(1.0, buffer_timeout / 2))
            self._timer = keep_task(
                self._calls.loop.create_task(_flush_when_idle(weak_method(self._send_if_idle), interval))
            )

    def _open(self, conf: Any, router: Router | None, client: Client | None) -> RoutedProducer:
        """The blocking routed producer this one drives (a subclass may drive a subclass)."""
        return RoutedProducer(conf, router=router, client=client)

    # ------------------------------------------------------------------ kbear additions

    @property
    def routed(self) -> RoutedProducer:
        """The blocking :class:`kbear.RoutedProducer` this producer drives."""
        return self._producer

    route = delegate("_producer", RoutedProducer.route)

    # ------------------------------------------------------------------ lifecycle

    def __len__(self) -> int:
        """Messages not yet delivered: buffered here plus queued or in flight in
        the routed producer's clients (0 once closed, as confluent-kafka)."""
        if self._is_closed:
            return 0
        return len(self._producer) + len(self._buffer)

    async def close(self) -> None:
        """Send what is buffered, wait for every delivery report, close the routed
        producer (its clients and configuration watcher) and shut the owned
        executor down.

        Raises:
            KafkaException: as ``flush`` / ``RoutedProducer.close``; the executor is
                shut down anyway.
        """
        self._is_closed = True
        if self._timer is not None:
            self._timer.cancel()
        try:
            await self.flush()
            await self._calls.call(self._producer.close)
        finally:
            if self._poller is not None:
                self._poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._poller
            self._buffer.settle()
            await self._calls.shutdown()

    # ------------------------------------------------------------------ messages

    async def produce(
        self, topic: str, value: Any | None = None, key: Any | None = None, *args: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        """Accept a message for ``topic`` (a logical name) and return the future of
        its delivery, as ``AIOProducer.produce``.

        Args:
            topic: the logical topic; its route gives the cluster and physical topic.
            value, key: str or bytes (or None).
            partition: int (keyword), -1 or absent: the partitioner's choice.
            timestamp: int (keyword), ms since the epoch.

        Returns:
            An ``asyncio.Future`` resolving to the delivered ``Message`` (topic: the
            logical name) or raising ``KafkaException`` (delivery failed; also
            ``NoRouteError`` when the topic has no route).

        Raises:
            NotImplementedError: ``headers`` given (as confluent-kafka's
                ``AIOProducer``, whose batches cannot carry them).
            RuntimeError: the producer is closed.

        Cancelling the awaiting task never leaves a message half-handled: it is
        either in the buffer (and will be sent and reported to its future) or was
        not accepted.
        """
        if self._is_closed:
            raise RuntimeError("Producer has been closed")
        if "headers" in kwargs:
            raise NotImplementedError(NO_HEADERS)
        message: dict[str, Any] = {"value": value, "key": key}
        if "timestamp" in kwargs:
            message["timestamp"] = kwargs["timestamp"]
        return await self._accept(topic, kwargs.get("partition", -1), message)

    async def _accept(
        self, topic: str, partition: int | None, message: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """Buffer ``message`` (a ``produce_batch`` dict) for ``topic``; send the buffer
        when full. Returns the future of the message's delivery."""
        future: asyncio.Future[Any] = self._calls.loop.create_future()
        self._buffer.add(topic, -1 if partition is None else int(partition), message, future)
        self._last_activity = time.monotonic()
        if len(self._buffer) >= self._batch_size:
            await self._send_buffer()
        return future

    def _send_batches(self, batches: list[Batch]) -> None:
        """In an executor thread: hand ``batches`` to the routed producer (its route
        changes and drains happen here), then serve delivery reports ready now."""
        for batch in batches:
            try:
                self._send_batch(batch)
            except Exception as exc:  # no route, closed, bad argument: every message fails
                self._buffer.failed(batch, exc)
                continue
            self._buffer.failed_at_enqueue(batch)
        self._producer.poll(0)

    def _send_batch(self, batch: Batch) -> None:
        """In an executor thread: one batch to the routed producer (raises: every
        message of the batch fails with that exception)."""
        topic, partition, messages, _futures = batch
        self._producer.produce_batch(topic, messages, partition=partition)

    async def _send_buffer(self) -> None:
        """Hand the buffer to the routed producer. The batch goes on when the
        awaiting task is cancelled; its reports reach their futures."""
        if not len(self._buffer):
            return
        batches = self._buffer.take()
        sent = self._calls.submit(self._send_batches, batches)
        sent.add_done_callback(lambda _f: self._after_send())
        await asyncio.shield(sent)

    def _after_send(self) -> None:
        self._buffer.settle()
        self._ensure_poller()

    def _ensure_poller(self) -> None:
        if self._buffer.in_flight > 0 and (self._poller is None or self._poller.done()):
            self._poller = keep_task(self._calls.loop.create_task(self._poll_reports()))

    async def _poll_reports(self) -> None:
        """Serve delivery reports while messages are in flight (one executor thread)."""
        while self._buffer.in_flight > 0:
            try:
                await self._calls.call(self._producer.poll, _REPORT_POLL_S)
            except RuntimeError:  # closed (or executor shut down): close() settles the rest
                return
            self._buffer.settle()

    async def _send_if_idle(self) -> bool:
        """Send the buffer when nothing was produced for ``buffer_timeout`` seconds;
        False once closed (the buffer timeout's task ends)."""
        if self._is_closed:
            return False
        if len(self._buffer) and time.monotonic() - self._last_activity >= self._buffer_timeout:
            try:
                await self._send_buffer()
            except Exception:
                log.exception("kbear: sending the buffer after buffer_timeout failed")
            self._last_activity = time.monotonic()
        return True

    async def poll(self, timeout: float = 0, *args: Any, **kwargs: Any) -> int:
        """Serve delivery reports (``timeout`` in seconds: 0 does not wait, -1 waits
        until one is served), as ``AIOProducer.poll``. Returns the number served."""
        served: int = await self._calls.call(self._producer.poll, timeout, *args, **kwargs)
        self._buffer.settle()
        return served

    async def flush(self, *args: Any, **kwargs: Any) -> int:
        """Send the buffer, then wait for every message to be delivered
        (``flush(timeout=-1)``, seconds), as ``AIOProducer.flush``. Returns the
        number of messages still queued or in flight."""
        await self._send_buffer()
        self._last_activity = time.monotonic()
        left: int = await self._calls.call(self._producer.flush, *args, **kwargs)
        self._buffer.settle()
        return left

    async def purge(self, *args: Any, **kwargs: Any) -> None:
        """Cancel the buffered messages' futures and drop them, then purge the
        routed producer's queues (``purge(in_queue=True, in_flight=True,
        blocking=True)``), as ``AIOProducer.purge``; purged messages' futures
        raise ``KafkaException`` (``_PURGE_QUEUE`` / ``_PURGE_INFLIGHT``) once
        their reports are served."""
        self._buffer.cancel()
        self._last_activity = time.monotonic()
        await self._calls.call(self._producer.purge, *args, **kwargs)

    list_topics = awaits("AIOProducer.list_topics", "see :meth:`kbear.RoutedProducer.list_topics`")
    cluster_id = awaits("AIOProducer.cluster_id", "see :meth:`kbear.RoutedProducer.cluster_id`")
    set_sasl_credentials = awaits("AIOProducer.set_sasl_credentials", "every cluster's client")

    # ------------------------------------------------------------------ transactions

    init_transactions = awaits("AIOProducer.init_transactions", "see :class:`kbear.RoutedProducer`")

    begin_transaction = awaits("AIOProducer.begin_transaction", "after :meth:`flush`", first="flush")
    send_offsets_to_transaction = awaits("AIOProducer.send_offsets_to_transaction")
    commit_transaction = awaits("AIOProducer.commit_transaction", "after :meth:`flush`", first="flush")
    abort_transaction = awaits("AIOProducer.abort_transaction", "after :meth:`flush`", first="flush")


async def _flush_when_idle(send_if_idle: Callable[[], Any], interval: float) -> None:
    """The buffer timeout's task, given the producer's ``_send_if_idle`` through a
    weak reference (:func:`kbear._base.weak_method`; as confluent-kafka's
    ``BufferTimeoutManager``): a producer dropped unclosed is freed at its last
    reference, and the task ends then, or once the producer is closed."""
    while True:
        await asyncio.sleep(interval)
        step = send_if_idle()  # None: the producer is gone
        if step is None or not await step:
            return
