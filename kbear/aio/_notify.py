"""What the asyncio clients share (:class:`AsyncRouted`), and their route-change
notifications, delivered on the event loop.

Responsible for: the executor, router and client properties and ``async with`` of
both asyncio clients, their methods that only await the blocking client's method of
the same name (:func:`awaits`), and turning the application's ``on_route_change`` callback (a
coroutine function or a plain function) into the listener the blocking routed
client calls from the thread that applied the switch (an executor thread): the
callback is scheduled on the loop and the switch does not wait for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Self

from kbear._identity import Client
from kbear._route import Route
from kbear.aio._calls import Calls, keep_task
from kbear.router import Router

log = logging.getLogger("kbear.aio")


def loop_route_listener(
    loop: asyncio.AbstractEventLoop, callback: Callable[[Route, Route | None], Any]
) -> Callable[[Route, Route | None], None]:
    """A route-change listener calling ``callback(old, new)`` on ``loop``, without
    waiting; what it raises is logged on ``kbear.aio``."""

    async def invoke(old: Route, new: Route | None) -> None:
        try:
            result = callback(old, new)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("kbear: on_route_change hook %r failed", callback)

    def start(old: Route, new: Route | None) -> None:
        keep_task(loop.create_task(invoke(old, new)))

    def listener(old: Route, new: Route | None) -> None:
        if loop.is_closed():
            return
        loop.call_soon_threadsafe(start, old, new)

    return listener


class AsyncRouted:
    """The part of :class:`~kbear.aio.RoutedAIOProducer` and
    :class:`~kbear.aio.RoutedAIOConsumer` that only reads the blocking routed
    client they drive (``routed``) and their executor calls (``_calls``)."""

    _calls: Calls

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (a blocking routed client's method) in the executor, awaited."""
        return await self._calls.call(fn, *args, **kwargs)

    @property
    def routed(self) -> Any:
        """The blocking routed client this one drives."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close the client (each asyncio client says what that does)."""
        raise NotImplementedError

    @property
    def executor(self) -> concurrent.futures.Executor:
        """The executor the blocking calls run in (as confluent-kafka's ``executor`` attribute)."""
        return self._calls.executor

    @property
    def router(self) -> Router:
        """The router the routes come from."""
        return self.routed.router  # type: ignore[no-any-return]

    @property
    def client(self) -> Client:
        """The client the routes are looked up for (``client.*`` factors)."""
        return self.routed.client  # type: ignore[no-any-return]

    def on_route_change(self, callback: Callable[[Route, Route | None], Any]) -> None:
        """Call ``callback(old_route, new_route)`` (a coroutine function or a plain
        function) on the event loop when a topic in use has switched clusters;
        the switch does not wait for it. What it raises is logged."""
        self.routed.on_route_change(loop_route_listener(self._calls.loop, callback))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def awaits(
    method: str | Callable[..., Any], note: str = "", *, first: str = ""
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """A coroutine method for an asyncio client's class body that awaits
    :meth:`AsyncRouted._call` of the blocking routed client's method of the same
    name, with the same arguments: ``seek = awaits("AIOConsumer.seek")``, documented
    "As ``AIOConsumer.seek``." (and `` (note)`` when given); given the blocking
    method itself (``ack = awaits(RoutedConsumer.ack)``: a kbear method), its
    signature and docstring (``functools.update_wrapper``). ``first``: the name of
    a coroutine method of the asyncio client awaited (without arguments) before
    (``first="flush"``). The API pages show it as the class's own ``async`` method
    (scripts/docs_griffe.py)."""
    name = method.rpartition(".")[2] if isinstance(method, str) else method.__name__

    async def call(self: AsyncRouted, *args: Any, **kwargs: Any) -> Any:
        if first:
            await getattr(self, first)()
        return await self._call(getattr(self.routed, name), *args, **kwargs)

    if not isinstance(method, str):
        return functools.update_wrapper(call, method)
    call.__name__ = name
    call.__qualname__ = f"AsyncRouted.{name}"
    call.__doc__ = f"As ``{method}``" + (f" ({note})." if note else ".")
    return call
