"""RoutedAIOConsumer: ``confluent_kafka.aio.AIOConsumer`` over routed topics.

Responsible for: the asyncio face of :class:`kbear.RoutedConsumer`. Every call
runs the blocking routed consumer's method in an executor thread, so its switch
engine (drains, commits during a move, the pause after a refused commit, the
rebalance callbacks) is the blocking client's own, unchanged; nothing of a move
runs on the event loop. What is added here: the application's callbacks as
coroutines (run on the loop, the calling thread waiting as confluent-kafka's
``aio`` does), and messages a cancelled ``poll()``/``consume()`` had already
taken, handed out by the next call instead of being lost.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Message

from kbear._base import NO_CONFIG
from kbear._delegate import delegate
from kbear._identity import Client
from kbear.aio._calls import Calls, blocking_callback, wrap_config_callbacks
from kbear.aio._notify import AsyncRouted, awaits
from kbear.consumer import RoutedConsumer
from kbear.router import Router

_CONFIG_CALLBACKS = ("error_cb", "throttle_cb", "stats_cb", "on_commit")


class RoutedAIOConsumer(AsyncRouted):
    """A routed ``confluent_kafka.aio.AIOConsumer``: same constructor, methods
    (each a coroutine), arguments, results and exceptions, over a
    :class:`kbear.RoutedConsumer`.

    Args:
        consumer_conf: confluent-kafka configuration plus ``kbear.*`` keys, as
            :class:`kbear.RoutedConsumer` (``bootstrap.servers`` comes from the
            route). Callbacks (``error_cb``, ``throttle_cb``, ``stats_cb``,
            ``on_commit``) may be coroutine functions or plain functions; they
            run on the event loop (``oauth_cb`` stays a plain function called in
            the client's thread, as with confluent-kafka). Not modified.
        max_workers: threads of the executor built when ``executor`` is None
            (confluent-kafka's default, 100).
        executor: a ``concurrent.futures.Executor`` to run blocking calls in
            (at least two workers when callbacks call the consumer back).
        router, client: as :class:`kbear.RoutedConsumer`.

    Must be constructed inside a running event loop.

    Raises:
        RuntimeError: no running event loop.
        ValueError: ``max_workers`` < 1; no ``group.id`` (as confluent-kafka).
        TypeError, KafkaException, ConfigError, NoRouteError: as
            :class:`kbear.RoutedConsumer`.

    Rebalance callbacks given to :meth:`subscribe` (``on_assign``, ``on_revoke``,
    ``on_lost``) get this consumer as first argument and may await its methods.
    """

    def __init__(
        self,
        consumer_conf: Mapping[str, Any] = NO_CONFIG,
        max_workers: int = 100,
        executor: concurrent.futures.Executor | None = None,
        *,
        router: Router | None = None,
        client: Client | None = None,
    ) -> None:
        self._closed = False
        self._calls = Calls(executor, max_workers)
        conf = consumer_conf
        if isinstance(consumer_conf, Mapping):
            conf = dict(consumer_conf)
            wrap_config_callbacks(self._calls.loop, conf, _CONFIG_CALLBACKS)
        self._consumer = self._open(conf, router, client)
        #: messages a cancelled poll()/consume() took (_keep): handed out first
        self._kept: collections.deque[Any] = collections.deque()

    def _open(self, conf: Any, router: Router | None, client: Client | None) -> RoutedConsumer:
        """The blocking routed consumer this one drives (a subclass may drive a subclass)."""
        return RoutedConsumer(conf, router=router, client=client)

    # ------------------------------------------------------------------ kbear additions

    @property
    def routed(self) -> RoutedConsumer:
        """The blocking :class:`kbear.RoutedConsumer` this consumer drives (for
        synchronous inspection; do not call it concurrently with a pending await)."""
        return self._consumer

    routes = delegate("_consumer", RoutedConsumer.routes)

    memberids = awaits(RoutedConsumer.memberids)

    # ------------------------------------------------------------------ lifecycle

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("Consumer closed")
        return await self._calls.call(fn, *args, **kwargs)

    async def close(self, *args: Any, **kwargs: Any) -> None:
        """Close the consumer (as ``RoutedConsumer.close``: commits what was read
        when ``enable.auto.commit`` is on, also during a move, and no more), then
        shut the owned executor down. Messages a cancelled ``poll()`` kept and the
        application never received are not committed by this close unless their
        offsets were already stored."""
        try:
            await self._call(self._consumer.close, *args, **kwargs)
        finally:
            self._closed = True
            await self._calls.shutdown()

    # ------------------------------------------------------------------ messages

    def _keep(self, result: Any) -> None:
        """Keep what a cancelled poll() (a message or None) or consume() (a list) returned."""
        if isinstance(result, list):
            self._kept.extend(result)
        elif result is not None:
            self._kept.append(result)

    async def _read(self, fn: Callable[..., Any], count: Any, *args: Any, **kwargs: Any) -> Any:
        """What was kept (:meth:`_keep`) first: one item (``count`` None: a poll), or up
        to ``count`` (a consume); else ``fn(*args, **kwargs)`` (the blocking poll or
        consume) awaited, its result kept when the awaiting task is cancelled."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self._kept and count is None:
            return self._kept.popleft()
        if self._kept and isinstance(count, int) and count > 0:
            return [self._kept.popleft() for _ in range(min(count, len(self._kept)))]
        return await self._calls.call_keeping(fn, self._keep, *args, **kwargs)

    async def poll(self, *args: Any, **kwargs: Any) -> Message | None:
        """Consume one message (``poll(timeout=None)``, timeout in seconds), as
        ``AIOConsumer.poll``. Cancelling the awaiting task loses no message: one
        the routed consumer had already returned is handed out by the next call."""
        result: Message | None = await self._read(self._consumer.poll, None, *args, **kwargs)
        return result

    async def consume(self, *args: Any, **kwargs: Any) -> list[Message]:
        """Consume up to ``num_messages`` messages (``consume(num_messages=1,
        timeout=-1)``, timeout in seconds), as ``AIOConsumer.consume``; messages kept
        from a cancelled call come first (up to ``num_messages``)."""
        count = args[0] if args else kwargs.get("num_messages", 1)
        result: list[Message] = await self._read(self._consumer.consume, count, *args, **kwargs)
        return result

    # ------------------------------------------------------------------ message-level acknowledgement

    ack = awaits(RoutedConsumer.ack)
    ack_cumulative = awaits(RoutedConsumer.ack_cumulative)
    nack = awaits(RoutedConsumer.nack)
    reconsume_later = awaits(RoutedConsumer.reconsume_later)

    # ------------------------------------------------------------------ subscription

    def _edit_rebalance_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (self, *args[1:])

    async def subscribe(self, *args: Any, **kwargs: Any) -> None:
        """Subscribe to logical topics (``subscribe(topics, on_assign=None,
        on_revoke=None, on_lost=None)``), as ``AIOConsumer.subscribe``; the
        callbacks (coroutine functions or plain functions) get this consumer."""
        for name in ("on_assign", "on_revoke", "on_lost"):
            cb = kwargs.get(name)
            if cb is not None:
                kwargs[name] = blocking_callback(self._calls.loop, cb, self._edit_rebalance_args)
        await self._call(self._consumer.subscribe, *args, **kwargs)

    unsubscribe = awaits("AIOConsumer.unsubscribe")

    # ------------------------------------------------------------------ the rest, as confluent-kafka

    commit = awaits("AIOConsumer.commit", "each offset to the cluster of its topic")
    seek = awaits("AIOConsumer.seek")
    pause = awaits("AIOConsumer.pause")
    resume = awaits("AIOConsumer.resume")
    store_offsets = awaits("AIOConsumer.store_offsets")
    committed = awaits("AIOConsumer.committed")
    assign = awaits("AIOConsumer.assign")
    unassign = awaits("AIOConsumer.unassign")
    incremental_assign = awaits("AIOConsumer.incremental_assign")
    incremental_unassign = awaits("AIOConsumer.incremental_unassign")
    assignment = awaits("AIOConsumer.assignment")
    position = awaits("AIOConsumer.position")
    consumer_group_metadata = awaits("AIOConsumer.consumer_group_metadata")
    set_sasl_credentials = awaits("AIOConsumer.set_sasl_credentials", "every cluster's client")
    list_topics = awaits("AIOConsumer.list_topics")
    cluster_id = awaits("AIOConsumer.cluster_id")
    get_watermark_offsets = awaits("AIOConsumer.get_watermark_offsets")
    offsets_for_times = awaits("AIOConsumer.offsets_for_times")
