"""The poll loop of a RoutedConsumer over its clusters' clients.

Responsible for: ``poll`` and ``consume`` over several clusters in turn (each
blocking wait cut in slices of ``_POLL_SLICE_S``, so no call outlives its
timeout by more than a slice), asking for the work due between slices (a
pending reload, the switch engine's decisions, a pattern refresh: the
subscription part's ``between_calls``), the logical names of messages read, the
clients still leaving, and the turns of calls from other threads
(:mod:`kbear.consumer._gate`); and which ``poll()``/``consume()`` the consumer's own
attributes hold, its fast paths (:meth:`PollLoop.refresh`): with one cluster and
nothing for kbear to do per message (no remap, drain, pattern, pending reload...),
that cluster's client's own bound methods; with several such clusters, the turn
taking of :mod:`kbear.consumer._turns`; otherwise nothing bound (the poll loop).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from confluent_kafka import Message

from kbear._clients import Deadline
from kbear.consumer._cluster import ClusterClient, ClusterRegistry
from kbear.consumer._gate import CallGate
from kbear.consumer._guard import MoveGuard
from kbear.consumer._mover import SwitchDriver
from kbear.consumer._subscription import ReadState, SubscriptionKind
from kbear.consumer._turns import turn_taking

# How long one blocking poll of one cluster's client may take while several are
# polled in turn (seconds): the worst added latency of a multi-cluster poll.
_POLL_SLICE_S = 0.01


#: ``fetch(entry, num_messages, timeout)``: messages of ``entry``'s client
Fetch = Callable[[ClusterClient, int, float], list[Message]]
#: ``store(poll, consume)``: bind both (None, None: unbind both)
Store = Callable[[Callable[..., Any] | None, Callable[..., list[Any]] | None], None]


def _poll_one(entry: ClusterClient, _num_messages: int, timeout: float) -> list[Message]:
    msg = entry.consumer.poll(timeout)
    return [] if msg is None else [msg]


def _consume(entry: ClusterClient, num_messages: int, timeout: float) -> list[Message]:
    return entry.consumer.consume(num_messages, timeout)  # type: ignore[no-any-return]


@dataclass(eq=False)
class PollLoop:
    """``poll`` and ``consume`` of :class:`~kbear.RoutedConsumer` over its clusters
    (its methods of the same names delegate here when not bound to a fast path),
    and its fast paths (the module docstring).

    Args:
        state: the consumer's shared state (subscription, pending reload).
        registry, driver, guard: its per-cluster clients, switch driver and move guard.
        gate: the turns of calls from other threads on the clients.
        between_calls: the work due between calls (the subscription part's; given
            the longest wait for the consumer's lock, seconds, None: no limit;
            raises ``RuntimeError`` when the consumer is closed).
        check_open: raises ``RuntimeError`` when the consumer is closed.
        store: where the consumer keeps its fast paths (in its own attributes).

    Attributes:
        tap: called with (entry, message) for each message read, before its
            logical name is set (``kbear.ack.mode=individual``:
            :meth:`DeliveryLoop.tap`); None otherwise.
        pinned: the one cluster's client whose own ``poll``/``consume`` are bound, else None.
    """

    state: ReadState
    registry: ClusterRegistry
    driver: SwitchDriver
    guard: MoveGuard
    gate: CallGate
    _: KW_ONLY
    between_calls: Callable[[float | None], None]
    check_open: Callable[[], None]
    store: Store

    tap: Callable[[ClusterClient, Any], None] | None = None
    pinned: ClusterClient | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)
    _fixed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._sub = self.state.sub
        self._rr = 0

    def refresh(self) -> None:
        """Bind ``poll`` and ``consume`` to what the consumer's state allows now (call
        after every change of the clients read or of what needs kbear per message)."""
        if self._fixed:
            return
        active = self.registry.active
        self.pinned = None
        if (
            not active
            or self._closed
            or self._needs_care()
            or self.gate.waiting
            or self.registry.leaving
            or self.driver.engine.tracks_timestamps
            or any(entry.renames for entry in active)
        ):
            self.store(None, None)
            return
        if len(active) == 1:
            self.pinned = active[0]
            self.store(active[0].consumer.poll, active[0].consumer.consume)
        else:
            self.store(*turn_taking([entry.consumer for entry in active], self.poll, self.consume))
        if self.state.pending:  # a reload landed meanwhile (watcher thread)
            self.unbind()

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

    def _out(self, entry: ClusterClient, msg: Any) -> Any:
        if self.tap is not None:
            self.tap(entry, msg)
        if self.guard.active:
            self.guard.read(entry)
        if entry.renames:
            physical = msg.topic()
            name = entry.logical_name(physical)
            if name != physical:
                msg.set_topic(name)
        driver = self.driver
        if driver.busy or driver.engine.tracks_timestamps:
            driver.message(entry, msg, self._sub.routes.get(msg.topic()))
        return msg

    def _take_turn(self, timeout: float | None) -> tuple[bool, float | None]:
        """Entering the poll loop: note the polling thread, let calls from other
        threads through first (for at most ``timeout`` seconds; None or negative:
        infinite) and bind the fast paths again, then do the work due between calls
        (a reload or a failover applied, a switch). Returns whether no call waits any
        more, and what is left of ``timeout``: both count in the call's timeout."""
        deadline = Deadline(timeout)
        gate = self.gate
        if gate.poller != threading.get_ident() or gate.waiting or gate.unbound:
            if not gate.yield_to(deadline.remaining()):
                return False, 0.0
            gate.unbound = False
            self.refresh()
        if self._needs_care():
            self.between_calls(deadline.remaining())
        return True, timeout if timeout is None or timeout <= 0 else deadline.remaining()

    def _looks_at(self, entry: ClusterClient) -> bool:
        """Whether kbear looks at each message of ``entry`` (:meth:`_out`)."""
        return entry.renames or self.driver.engine.tracks_timestamps or self.tap is not None

    def _needs_care(self) -> bool:
        return (
            self.state.pending
            or self.state.watching
            or self.driver.busy
            or self.guard.active
            or self._sub.kind is SubscriptionKind.PATTERN
        )

    def poll(self, timeout: float | None = None) -> Message | None:
        """Consume one message, serving callbacks, from the clusters in turn.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite);
                a topic move in progress does not lengthen it.

        Returns:
            A ``Message`` (check ``msg.error()`` as with confluent-kafka) or None on timeout.

        Raises:
            RuntimeError: the consumer is closed.
            KafkaException: errors of confluent-kafka.
        """
        msgs = self._read(_poll_one, 1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Message]:
        """Consume up to ``num_messages`` messages, from the clusters in turn.

        Args:
            num_messages: maximum number of messages to return (0 to 1000000).
            timeout: maximum time to block in seconds (None or -1: infinite);
                a topic move in progress does not lengthen it.

        Returns:
            A list of ``Message`` (possibly empty on timeout).

        Raises:
            ValueError: ``num_messages`` out of range (as confluent-kafka).
            RuntimeError: the consumer is closed.
        """
        return self._read(_consume, num_messages, timeout)

    def _read(self, fetch: Fetch, num_messages: int, timeout: float | None) -> list[Message]:
        """``poll``/``consume`` with ``fetch``: a leftover of a client still leaving,
        else one client's own call when it is read alone, else :meth:`_in_turn`."""
        through, timeout = self._take_turn(timeout)
        if not through:
            return []
        if self.registry.leaving and 1 <= num_messages <= 1_000_000:
            leftover = self._serve_leaving()
            if leftover is not None:
                return [leftover]
        active = self.registry.active
        tmo = -1 if timeout is None else timeout
        # one client read with nothing for kbear to do between its messages (only,
        # maybe, per message: _looks_at): that client's own call
        if len(active) == 1 and not (
            self.driver.busy or self.guard.active or self.registry.leaving or self.gate.waiting
        ):
            entry = active[0]
            msgs = fetch(entry, num_messages, tmo)
            return [self._out(entry, m) for m in msgs] if self._looks_at(entry) else msgs
        if not 0 <= num_messages <= 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")  # confluent-kafka's words
        if not active:
            self.check_open()
            leftover = self._idle(timeout)
            return [] if leftover is None else [leftover]
        return self._in_turn(active, fetch, num_messages, tmo)

    def _in_turn(
        self, active: list[ClusterClient], fetch: Fetch, num_messages: int, timeout: float | None
    ) -> list[Message]:
        """Up to ``num_messages`` messages fetched from ``active`` in turn: once each
        without waiting, then in slices of ``_POLL_SLICE_S`` (the work between calls
        done between slices) until some came or ``timeout`` ends."""
        n = len(active)
        start = self._rr = (self._rr + 1) % n
        deadline = Deadline(timeout)
        step = 0.0
        out: list[Message] = []
        while True:
            for i in range(n):
                entry = active[(start + i) % n]
                out.extend(self._out(entry, m) for m in fetch(entry, num_messages - len(out), step))
                if len(out) >= num_messages:
                    return out
            left = deadline.remaining()
            if out or (left is not None and left <= 0):
                return out
            if self.gate.waiting and not self.gate.yield_to(left):
                return out
            if self._needs_care() or self.registry.leaving:
                self.between_calls(deadline.remaining())
                if self.registry.leaving:
                    leftover = self._serve_leaving()
                    if leftover is not None:
                        return [leftover]
                active = self.registry.active
                n = len(active)
                if not n:
                    return out
            left = deadline.remaining()  # what the work between slices left
            if left is not None and left <= 0:
                return out
            step = _POLL_SLICE_S if left is None else min(_POLL_SLICE_S, left / n)

    def _serve_leaving(self) -> Message | None:
        """Poll (timeout 0) the clients of clusters just unsubscribed, so their
        revocation is served; forget those whose assignment is empty. Returns a
        message still queued on one of them, if any (confluent-kafka would return it too)."""
        for entry in list(self.registry.leaving):
            msg = entry.consumer.poll(0)
            if msg is not None:
                return self._out(entry, msg)  # type: ignore[no-any-return]
            if not entry.consumer.assignment():
                self.registry.deactivate(entry)
                self.refresh()
        return None

    def _idle(self, timeout: float | None) -> Message | None:
        """Nothing subscribed: wait as confluent-kafka would, but at most 1 s (an infinite
        timeout included, so a ``while True: poll()`` loop does not spin), serving the
        clusters still leaving, and the callbacks (logs, errors, statistics, OAuth
        tokens) of clients built but not read yet, as confluent-kafka's ``poll`` does."""
        deadline = Deadline(1.0 if timeout is None or timeout < 0 else min(timeout, 1.0))
        while True:
            if self.registry.leaving:
                msg = self._serve_leaving()
                if msg is not None:
                    return msg
            for entry in self.registry:
                if entry not in self.registry.leaving:
                    msg = entry.consumer.poll(0)
                    if msg is not None:
                        return self._out(entry, msg)  # type: ignore[no-any-return]
            left = deadline.remaining()
            if not left:
                return None
            time.sleep(min(_POLL_SLICE_S, left))
