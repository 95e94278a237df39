"""Route-change notifications of the asyncio clients, delivered on the event loop.

Responsible for: turning the application's ``on_route_change`` callback (a
coroutine function or a plain function) into the listener the blocking routed
client calls from the thread that applied the switch (an executor thread): the
callback is scheduled on the loop and the switch does not wait for it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from kbear._route import Route
from kbear.aio._calls import keep_task

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
