"""Turns for the calls other threads make on clients a poll loop keeps polling.

confluent-kafka (2.16) serializes the calls made on one client: a call from
another thread (``assignment()``, ``position()``, ``commit()``...) waits until
the ``poll()`` in progress returns, and a thread polling in a loop enters its
next ``poll()`` first. Measured with a plain confluent-kafka ``Consumer``
(2.16.1): ``assignment()`` from the main thread returned after 55.9 s while
another thread looped on ``poll(0.1)``; a RoutedConsumer held its own lock
meanwhile, so its poll thread waited too once it needed it.

:class:`CallGate` gives such a call its turn: the thread making it says so
(:meth:`CallGate.turn`), the fast paths are unbound, and the poll loop, before
its next wait on a client, lets the call through (:meth:`CallGate.yield_to`,
bounded by the poll's own timeout). A call from another thread waits at most
for the ``poll()``/``consume()`` in progress: as long as its timeout. Calls
made by the polling thread itself (between two polls, or in a rebalance
callback) pass at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CallGate:
    """The turns of one RoutedConsumer (see the module docstring).

    Args:
        unbind: unbinds the consumer's fast paths (the next ``poll()``/``consume()``
            takes the poll loop, which yields here).
    """

    def __init__(self, unbind: Callable[[], None]) -> None:
        self._unbind = unbind
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0
        #: the thread that last entered the poll loop (``threading.get_ident()``)
        self.poller: int | None = None
        #: a turn unbound the fast paths: the poll loop binds them again
        self.unbound = False

    @property
    def waiting(self) -> bool:
        """A call from another thread waits for its turn."""
        return self._waiting > 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Around a call on the clients: from a thread other than the polling one
        (or before any poll), the poll loop lets it through before its next wait
        on a client."""
        if self.poller == threading.get_ident():
            yield
            return
        with self._cond:
            self._waiting += 1
        self.unbound = True
        self._unbind()
        try:
            yield
        finally:
            with self._cond:
                self._waiting -= 1
                if not self._waiting:
                    self._cond.notify_all()

    def yield_to(self, timeout: float | None) -> bool:
        """In the poll loop: wait until no call from another thread waits, for at
        most ``timeout`` seconds (None: no limit). Returns whether none waits now."""
        self.poller = threading.get_ident()
        if not self._waiting:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting, timeout)
