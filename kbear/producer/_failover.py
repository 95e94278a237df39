"""A RoutedProducer that fails over a lost cluster itself (private; issue #27 item 2a).

:class:`ClientFailover` feeds the lost-cluster policy (:mod:`kbear._health`) with
what the producer's cluster clients see -- librdkafka's ``_ALL_BROKERS_DOWN``
(their ``error_cb``: the client becomes suspect and records every message, see
:mod:`kbear.producer._pending`) and a delivery there again (the suspicion ends) --
and lets time pass at each ``poll()``/``flush()``. A cluster the policy declares
lost is reported (:class:`~kbear._events.ClusterHealthChanged`); with
``kbear.failover.enable`` and a standby (``kbear.failover.to``), it joins the
producer's failed-over clusters (:attr:`ProducerState.failed`): every lookup now
sends its topics to the standby (:func:`kbear._standby.standby_route`), applied as a
configuration reload is, by the caller's thread at its next call -- the drain of a
client whose brokers are all down does not wait, and what it held is taken back
and sent to the standby (:mod:`kbear.producer._takeback`).

A recovered cluster is reported, not switched back to: the failover holds until the
operator decides about the cluster (``kbear failback --apply``, which writes
``kbear.failover.decided``): the reload that brings that decision ends it
(:meth:`ClientFailover.release`, :meth:`kbear._lost.LostWatch.release`) and its topics
go back as any route change, drain-then-switch (docs/concepts/failover.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass

from kbear._clients import ClientRegistry, Deadline
from kbear._lost import LostWatch
from kbear._route import Route
from kbear._standby import standby_route
from kbear.config import KBearConfig
from kbear.producer._cluster import ClusterProducer
from kbear.producer._state import ProducerState

log = logging.getLogger("kbear.producer")

__all__ = ["ClientFailover", "failover_lookup"]

#: flush()'s slices (seconds) while a cluster is down and may be failed over
_SLICE_S = 0.1


def failover_lookup(
    lookup: Callable[[str], Route], config: Callable[[], KBearConfig], state: ProducerState
) -> Callable[[str], Route]:
    """``lookup`` with the routes to the producer's failed-over clusters sent to
    their standby."""

    def route(topic: str) -> Route:
        found = lookup(topic)
        failed = state.failed
        return standby_route(found, config(), failed) if failed else found

    return route


@dataclass(eq=False)
class ClientFailover:
    """Applies the lost-cluster policy to one RoutedProducer's clusters
    (:class:`kbear._lost.LostWatch`).

    Args:
        enabled: ``kbear.failover.enable``: fail over a lost cluster (else only report).
        after_ms: ``kbear.failover.after.ms``.
        state: the producer's state (``failed``, ``pending``).
        clients: the producer's client registry.
        config: the configuration in force.
        unbind: takes produce() off its fast path (a change is pending).
        clock: monotonic seconds (tests give their own).
    """

    enabled: bool
    after_ms: InitVar[int]
    _state: ProducerState
    _clients: ClientRegistry[ClusterProducer]
    _config: Callable[[], KBearConfig]
    _unbind: Callable[[], None]
    clock: InitVar[Callable[[], float]] = time.monotonic

    def __post_init__(self, after_ms: int, clock: Callable[[], float]) -> None:
        failed = self._state.failed
        self._watch = LostWatch("producer", self.enabled, after_ms, self._config, log, clock, failed=failed)

    def observe_down(self, cluster_id: str, reachable: bool) -> None:
        """A client of ``cluster_id`` reported every broker down (``reachable`` False:
        its ``error_cb``), or what its statistics say of its brokers."""
        self._watch.observe(cluster_id, reachable)

    def tick(self) -> None:
        """Let time pass: a watched cluster whose client delivered again is reachable;
        a failover decided now is applied by the caller's thread, as a reload."""
        if self._watch.tick(self._delivered) and self.enabled:
            self._state.pending = True
            self._unbind()

    def release(self) -> None:
        """Before a reload is applied (the caller's thread, under the producer's lock):
        end the failovers the operator decided about since (``kbear.failover.decided``);
        the reload's lookups then route their topics as the configuration says."""
        if self._state.failed:
            self._watch.release(self._config())

    def _delivered(self, cluster_id: str) -> bool:
        entry = self._clients.get(cluster_id)
        return entry is not None and not entry.rescue.suspected  # delivered there again

    def flush(self, timeout: float | None, apply_changes: Callable[[], None]) -> int:
        """The producer's ``flush(timeout)`` (seconds, None or negative: infinite) over
        every cluster's client; returns the messages left. With
        ``kbear.failover.enable``, each client is flushed in slices of 100 ms, the failover
        (``apply_changes``: a pending change applied, its take-back included) made
        between them, so that ``flush()`` ends once the standby has the messages and
        keeps its timeout (a change applied here counts)."""
        deadline = Deadline(timeout)
        self.tick()
        if self._state.pending:
            apply_changes()
        # kbear.failover.enable: a cluster may be lost while flush() waits, and the
        # failover happens between two slices
        watching = self.enabled
        while True:
            left = 0
            for entry in self._clients.all():
                remaining = deadline.as_arg()
                if watching:
                    remaining = _SLICE_S if remaining < 0 else min(remaining, _SLICE_S)
                left += int(entry.producer.flush(remaining))
            if not left or not watching or deadline.expired():
                return left
            self.tick()
            if self._state.pending:
                apply_changes()
