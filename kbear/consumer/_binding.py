"""Which ``poll()``/``consume()`` a RoutedConsumer's own attributes hold: its fast paths.

Responsible for: binding ``poll`` and ``consume`` (instance attributes over the
facade's methods, which delegate to the poll loop) to the cheapest correct code
for the consumer's state: with one cluster and nothing for kbear to do per
message (no remap, drain, pattern, pending reload...), that cluster's client's
own bound methods; with several such clusters, the turn taking of
:mod:`kbear.consumer._turns`; otherwise nothing bound. :class:`PollBinding`
decides; the facade stores what it is told (``store``), in its own attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._gate import CallGate
from kbear.consumer._guard import MoveGuard
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._subscription import ReadState, SubscriptionKind
from kbear.consumer._turns import turn_taking

#: ``store(poll, consume)``: bind both (None, None: unbind both)
Store = Callable[[Callable[..., Any] | None, Callable[..., list[Any]] | None], None]


@dataclass(eq=False)
class PollBinding:
    """The fast paths of one RoutedConsumer (see the module docstring).

    Args:
        state, registry, driver, guard: the consumer's shared state, per-cluster
            clients, switch driver and move guard (what needs kbear per message).
        gate: the turns of calls from other threads (none is bound while one waits).
        slow_poll, slow_consume: the poll loop's ``poll`` / ``consume`` (the turn
            taking falls back to them).
        store: where the consumer keeps what is bound.
    """

    state: ReadState
    registry: ClusterRegistry
    driver: SwitchDriver
    guard: MoveGuard
    gate: CallGate
    slow_poll: Callable[..., Any]
    slow_consume: Callable[..., list[Any]]
    store: Store
    #: the one cluster's client whose own ``poll``/``consume`` are bound, else None
    pinned: ClusterClient | None = None
    _closed: bool = field(default=False, init=False)
    _fixed: bool = field(default=False, init=False)

    def refresh(self) -> None:
        """Bind ``poll`` and ``consume`` to what the consumer's state allows now (call
        after every change of the clients read or of what needs kbear per message)."""
        if self._fixed:
            return
        active = self.registry.active
        state = self.state
        self.pinned = None
        if (
            not active
            or self._closed
            or state.pending
            or state.watching
            or self.driver.busy
            or self.guard.active
            or self.gate.waiting
            or self.registry.leaving
            or state.sub.kind is SubscriptionKind.PATTERN
            or self.driver.engine.tracks_timestamps
            or any(entry.renames for entry in active)
        ):
            self.store(None, None)
            return
        if len(active) == 1:
            self.pinned = active[0]
            self.store(active[0].consumer.poll, active[0].consumer.consume)
        else:
            consumers = [entry.consumer for entry in active]
            self.store(*turn_taking(consumers, self.slow_poll, self.slow_consume))
        if state.pending:  # a reload landed meanwhile (watcher thread)
            self.pinned = None
            self.store(None, None)

    def unbind(self) -> None:
        """Bind nothing: the next call takes the poll loop (a reload is pending; called
        from the reloading thread)."""
        if not self._fixed:
            self.pinned = None
            self.store(None, None)

    def fix(self, poll: Callable[..., Any], consume: Callable[..., list[Any]]) -> None:
        """Bind ``poll`` and ``consume`` for good (the acknowledgement layer's)."""
        self._fixed = True
        self.store(poll, consume)

    def close(self) -> None:
        """The consumer closes: nothing is bound any more (but what was fixed)."""
        self._closed = True
        self.refresh()
