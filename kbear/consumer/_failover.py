"""A RoutedConsumer that fails over a lost cluster itself (private; issue #27 items 2a, 4).

:class:`ConsumerFailover` feeds the lost-cluster policy (:class:`kbear._lost.LostWatch`)
with what the consumer's member clients see (librdkafka's ``_ALL_BROKERS_DOWN`` in
their ``error_cb``; the broker states of their statistics, ``statistics.interval.ms``
as :func:`kbear._events.configure` combines it) and lets time
pass at each ``poll()``/``consume()`` while a cluster is seen down (the fast paths
are unbound meanwhile). With ``kbear.failover.enable``, a cluster declared lost joins
the consumer's failed-over clusters: its lookups send that cluster's routes to its
standby (``kbear.failover.to``), applied as a configuration reload is, by the
caller's thread; the drain of the lost cluster ends at once (nothing more can be read
there), and the group starts on the standby as the lost cluster's mirror says
(:meth:`ConsumerFailover.mirror_start`).

The consumer's own failover of a cluster ends when the operator decides about it
afterwards (``kbear failback --apply`` writes ``kbear.failover.decided``;
:meth:`ConsumerFailover.release`, at the reload that brings it): its topics go back
as any route change, the standby drained before the cluster is read again.

The same start applies to a failover decided elsewhere (``kbear.failover.active``
written by ``kbear failover`` or ``kbear serve``): a failover is a move from a cluster
to the standby it is mirrored to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import InitVar, dataclass

from kbear._lost import LostWatch
from kbear._route import Route
from kbear._standby import standby_route
from kbear._switch import SwitchEngine
from kbear.consumer._subscription import ReadState
from kbear.consumer._translated import mirror_to, mirrored_to
from kbear.router import Router

log = logging.getLogger("kbear.consumer")

__all__ = ["ConsumerFailover"]


@dataclass(eq=False)
class ConsumerFailover:
    """The client failover of one RoutedConsumer (see the module).

    Args:
        enabled: ``kbear.failover.enable``.
        after_ms: ``kbear.failover.after.ms``.
        router: the consumer's router (the standbys and mirrors of ``clusters.yaml``).
        state: the consumer's shared state (``pending``, ``watching``).
        engine: its switch engine (a lost cluster is dead there: its drains end at once).
        unbind: takes ``poll``/``consume`` off their fast paths.
    """

    enabled: bool
    after_ms: InitVar[int]
    router: Router
    state: ReadState
    engine: SwitchEngine
    unbind: Callable[[], None]

    def __post_init__(self, after_ms: int) -> None:
        router = self.router
        self._watch = LostWatch("consumer", self.enabled, after_ms, lambda: router.config, log)

    def held_lost(self) -> frozenset[str]:
        """The clusters this consumer holds for lost: failed over by it, or declared
        lost by the policy (:mod:`kbear._health`) and not recovered."""
        return self._watch.lost() | self._watch.failed

    def observe(self, cluster_id: str, reachable: bool) -> None:
        """What a member client of ``cluster_id`` says of its brokers (``error_cb``:
        False; statistics: either). Runs in the thread serving the client's callbacks."""
        self._watch.observe(cluster_id, reachable)
        if self.enabled and not self.state.watching and self._watch.deciding:
            self.state.watching = True
            self.unbind()

    def tick(self) -> None:
        """Let time pass (the caller's thread, between calls): a cluster declared lost
        now is failed over, applied as a pending reload."""
        decided = self._watch.tick()
        for cluster_id, _standby in decided:
            self.engine.cluster_down(cluster_id, True)
        if decided:
            self.state.pending = True
        self.state.watching = self.enabled and self._watch.deciding

    def release(self) -> None:
        """Before a reload is applied (the caller's thread): end the failovers the
        operator decided about since (:meth:`kbear._lost.LostWatch.release`); such a
        cluster counts as alive for the switch engine again (the operator found it
        answering), and the reload's lookups route its topics as configured."""
        if not self._watch.failed:
            return
        for cluster_id in self._watch.release(self.router.config):
            self.engine.cluster_down(cluster_id, False)
        self.state.watching = self.enabled and self._watch.deciding

    def route(self, route: Route) -> Route:
        """``route``, or the same route to its cluster's standby when this consumer
        failed that cluster over."""
        failed = self._watch.failed
        return standby_route(route, self.router.config, failed) if failed else route

    def lost(self, old: Route, new: Route | None) -> bool:
        """Whether a move from ``old`` ends at once when its cluster is dead: the
        consumer failed it over, or it is mirrored to ``new``'s cluster."""
        return old.cluster_id in self._watch.failed or mirrored_to(self.router, old, new)

    def mirror_start(self, old: Route, new: Route | None) -> bool:
        """Whether a move from ``old`` to ``new`` is a failover to the standby that
        ``old``'s cluster is mirrored to (``kbear.mirror`` ``mm2`` or ``identical``):
        failed over by this consumer or in ``clusters.yaml``
        (``kbear.failover.active``). Such a move starts as the mirror says
        (``translated``: translated by MirrorMaker 2, the same offsets for an identical
        mirror), whatever ``kbear.switch.start`` says."""
        failover = None if new is None else mirror_to(self.router, old.cluster_id, new.cluster_id)
        if failover is None or new is None or new.topic != failover.remote_topic(old.topic):
            return False  # (not the mirror's copy, MirrorMaker 2's default policy: as configured)
        return old.cluster_id in self._watch.failed or failover.active
