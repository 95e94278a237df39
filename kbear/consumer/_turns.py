"""``RoutedConsumer.poll()``/``consume()`` over several clusters with nothing to translate.

Responsible for: building the turn-taking pair the consumer binds over its class
methods: the compiled one (``kbear._cdispatch.TurnTaker``, see kbear._compiled)
in front of the pure-Python closures, or the closures alone. Each call first
asks the next cluster's client in turn without waiting and returns what it got;
when that client has nothing, the call goes to the full path (every client, then
the wait). Calls of another shape than ``poll([timeout])`` /
``consume([num_messages], [timeout])`` go to the pure-Python closures, which stay
the reference of the behaviour (errors included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbear._compiled import EXTENSION

__all__ = ["turn_taking"]

#: The compiled turn taker's type, or None (not built, or KBEAR_PURE_PYTHON set).
_TurnTaker: Any = None if EXTENSION is None else EXTENSION.TurnTaker


def turn_taking(
    consumers: list[Any],
    slow_poll: Callable[..., Any],
    slow_consume: Callable[..., list[Any]],
) -> tuple[Callable[..., Any], Callable[..., list[Any]]]:
    """poll() and consume() taking turns over ``consumers``.

    Args:
        consumers: the clusters' confluent-kafka Consumers, in turn order.
        slow_poll, slow_consume: the full paths (the class methods bound to the
            routed consumer), called with the caller's arguments.

    Returns:
        (poll, consume): compiled when the extension is available, else the
        pure-Python closures.
    """
    polls = [c.poll for c in consumers]
    consumes = [c.consume for c in consumers]
    n = len(consumers)
    turn = [0]

    def poll(timeout: float | None = None) -> Any:
        i = turn[0] = (turn[0] + 1) % n
        msg = polls[i](0)
        if msg is not None:
            return msg
        return slow_poll(timeout)

    def consume(num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        i = turn[0] = (turn[0] + 1) % n
        if 1 <= num_messages <= 1_000_000:
            msgs: list[Any] = consumes[i](num_messages, 0)
            if msgs:
                return msgs
        return slow_consume(num_messages, timeout)

    poll.__doc__ = slow_poll.__doc__
    consume.__doc__ = slow_consume.__doc__
    if _TurnTaker is None:
        return poll, consume
    return (
        _TurnTaker("poll", tuple(polls), slow_poll, poll),
        _TurnTaker("consume", tuple(consumes), slow_consume, consume),
    )
