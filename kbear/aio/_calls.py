"""Running the blocking routed clients' calls off the event loop, and their callbacks on it.

Responsible for: the executor call of every awaitable method (:class:`Calls`),
the callbacks the application gives as coroutines (or plain functions) turned
into the blocking callbacks the routed clients call from an executor thread
(:func:`blocking_callback`), and re-entrant calls: a call a callback makes while
the call that served the callback is still blocked in its thread.

Re-entrancy is carried by :mod:`contextvars`, never by the thread: a call runs
in the executor inside a copy of the awaiting task's context; a callback runs on
the loop in a task whose context is a copy of the serving thread's context; so
the calls the callback makes carry that context to their own executor thread.
Two values travel that way: kbear's rebalance scope (the cluster whose callback
is running, :mod:`kbear.consumer._rebalance`), which lets the call skip the
consumer's lock and address that cluster, and confluent-kafka's re-entry
identity (``cimpl._reentry_identity_var``, confluent-kafka >= 2.13), which lets
it through the per-client gate confluent-kafka puts in front of a client busy
in another thread. Without that variable (older confluent-kafka) there is no
gate and nothing to present.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import itertools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import cimpl

T = TypeVar("T")

log = logging.getLogger("kbear.aio")

#: confluent-kafka's re-entry identity (0: none), read by its per-client call gate.
_GATE: contextvars.ContextVar[int] | None = getattr(cimpl, "_reentry_identity_var", None)
_IDS = itertools.count(1)

#: Longest wait, in seconds, between checks that the loop a callback was sent to still runs.
_LOOP_CHECK_S = 1.0


#: Background tasks still running (a reference keeps a task from being collected).
_TASKS: set[asyncio.Task[Any]] = set()


def keep_task(task: asyncio.Task[T]) -> asyncio.Task[T]:
    """``task``, referenced until it is done (asyncio keeps only weak references)."""
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


def _call_context() -> contextvars.Context:
    """A copy of the current context for one executor call, holding a re-entry
    identity: the current one inside a callback, a new one for a top-level call."""
    ctx = contextvars.copy_context()
    if _GATE is not None and not ctx.get(_GATE, 0):
        # Kept within 32 bits: confluent-kafka stores it in a C unsigned long.
        ctx.run(_GATE.set, (next(_IDS) & 0xFFFFFFFF) or 1)
    return ctx


class Calls:
    """The executor side of an asyncio client.

    Args:
        executor: where blocking calls run (``concurrent.futures.Executor``);
            None builds a ``ThreadPoolExecutor`` of ``max_workers`` threads,
            owned (shut down by :meth:`shutdown`).
        max_workers: size of the owned executor (confluent-kafka's defaults: 100
            for the consumer, 4 for the producer).

    Raises:
        ValueError: ``max_workers`` < 1 (as confluent-kafka's ``AIOConsumer``).
    """

    def __init__(self, executor: concurrent.futures.Executor | None, max_workers: int) -> None:
        self.owned = executor is None
        if executor is None:
            if max_workers < 1:
                raise ValueError("max_workers must be at least 1")
            executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix="kbear-aio"
            )
        self.executor = executor
        self.loop = asyncio.get_running_loop()

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Start ``fn(*args, **kwargs)`` in the executor, in a copy of the caller's context."""
        ctx = _call_context()
        return self.loop.run_in_executor(self.executor, functools.partial(ctx.run, fn, *args, **kwargs))

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Await ``fn(*args, **kwargs)`` run in the executor.

        Cancelling the awaiting task does not stop a call already running (a
        blocking librdkafka call cannot be interrupted): it completes in its
        thread and its result is dropped; see :meth:`call_keeping` for calls
        whose result must not be lost.
        """
        return await self.submit(fn, *args, **kwargs)

    async def call_keeping(
        self, fn: Callable[..., T], keep: Callable[[T], None], *args: Any, **kwargs: Any
    ) -> T:
        """As :meth:`call`, but when the awaiting task is cancelled, the call's
        result, once there, goes to ``keep`` instead of being dropped (messages a
        cancelled ``poll()`` returned are handed out by the next one)."""
        fut = self.submit(fn, *args, **kwargs)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:

            def done(f: asyncio.Future[T]) -> None:
                if not f.cancelled() and f.exception() is None:
                    keep(f.result())

            fut.add_done_callback(done)
            raise

    async def shutdown(self) -> None:
        """Shut the owned executor down, waiting for running calls, off the loop."""
        if self.owned:
            await self.loop.run_in_executor(None, functools.partial(self.executor.shutdown, wait=True))


def blocking_callback(
    loop: asyncio.AbstractEventLoop,
    callback: Callable[..., Any],
    edit_args: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
) -> Callable[..., Any]:
    """The blocking callback a routed client calls (from an executor thread) for
    the application's ``callback``: a coroutine function, run as a task on
    ``loop``, or a plain function, run on ``loop`` too (asyncio code expects its
    callbacks on the loop). The calling thread waits for it to finish, as
    confluent-kafka's ``aio`` clients do; its exceptions propagate there.

    ``edit_args`` rewrites the arguments first (the rebalance callbacks get the
    asyncio consumer instead of the blocking one).

    Called on the loop's own thread (a call the library makes without an
    executor), a coroutine is scheduled and not waited for.
    """

    def run(*args: Any) -> Any:
        if edit_args is not None:
            args = edit_args(args)
        ctx = contextvars.copy_context()

        async def invoke() -> Any:
            result = callback(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            result = callback(*args)
            if inspect.isawaitable(result):
                keep_task(asyncio.ensure_future(result))
            return None
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            task = loop.create_task(invoke(), context=ctx)

            def finish(t: asyncio.Task[Any]) -> None:
                if t.cancelled():
                    done.cancel()
                elif t.exception() is not None:
                    done.set_exception(t.exception())
                else:
                    done.set_result(t.result())

            task.add_done_callback(finish)

        loop.call_soon_threadsafe(start)
        while True:
            try:
                return done.result(timeout=_LOOP_CHECK_S)
            except concurrent.futures.TimeoutError:
                if loop.is_closed() or not loop.is_running():
                    log.error("kbear: the event loop of callback %r stopped; callback skipped", callback)
                    return None

    return run


def wrap_config_callbacks(
    loop: asyncio.AbstractEventLoop, conf: dict[str, Any], names: tuple[str, ...]
) -> None:
    """Replace the callbacks ``names`` of ``conf`` (confluent-kafka configuration
    keys such as ``error_cb``, ``on_commit``) by their blocking versions; a
    ``logger`` (a ``logging.Logger``) is made to log from the loop's thread."""
    for name in names:
        cb = conf.get(name)
        if cb is not None:
            conf[name] = blocking_callback(loop, cb)
    logger = conf.get("logger")
    if logger is not None:
        conf["logger"] = _LoopLogger(loop, logger)


class _LoopLogger:
    """A logger whose ``log`` calls are made on the event loop's thread, without waiting."""

    def __init__(self, loop: asyncio.AbstractEventLoop, logger: Any) -> None:
        self._loop = loop
        self._logger = logger

    def log(self, *args: Any, **kwargs: Any) -> None:
        self._loop.call_soon_threadsafe(functools.partial(self._logger.log, *args, **kwargs))
