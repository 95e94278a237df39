"""One client's watch over its clusters: the lost-cluster policy applied, the
failovers it decides (private; issue #27 item 2a).

A routed producer and a routed consumer both feed it what their cluster clients
see -- librdkafka's ``_ALL_BROKERS_DOWN`` (``error_cb``) and the broker states of
its statistics (``stats_cb``, :func:`watching_stats`) -- and let time pass at their
calls (:meth:`LostWatch.tick`). A cluster the policy (:mod:`kbear._health`) declares
lost is reported (:class:`~kbear._events.ClusterHealthChanged`, a warning with the
structured field ``event: cluster_lost``); with ``kbear.failover.enable`` and a
standby (``kbear.failover.to``), it joins the client's failed-over clusters
(:attr:`LostWatch.failed`) and a :class:`~kbear._events.FailedOver` (trigger
``client``) is emitted: the client's lookups send its routes to the standby
(:func:`kbear._standby.standby_route`) from then on. A recovered cluster is reported,
not switched back to: nothing moves back by itself. The client's failover of ``C``
ends when the operator decides about ``C`` after it (:meth:`LostWatch.release`): a
configuration it reloads carries a ``kbear.failover.decided`` time of ``C`` (written
by ``kbear failback --apply``, ``kbear failover --apply`` and ``kbear serve
--failover-after-ms``) that is not the one it had when it failed over and is later
than its failover (wall clock); its routes then follow ``clusters.yaml``, applied by
the client as a reload (drain-then-switch), and the policy starts afresh for ``C``
(lost again, it is failed over again, until the next decision).

No broker I/O: the client acts on what :meth:`LostWatch.tick` returns.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbear import _events
from kbear._health import ClusterHealth, HealthBoard, reachable_from_stats
from kbear.config import KBearConfig

__all__ = ["STATS_INTERVAL_MS", "LostWatch", "watching_stats"]

#: ``statistics.interval.ms`` of a client watching its brokers (``kbear.failover.enable``)
#: unless the application configured one, or :mod:`kbear.metrics` needs a shorter one
#: (:func:`kbear._events.configure`)
STATS_INTERVAL_MS = 1000


def watching_stats(
    cluster_id: str, stats_cb: Callable[[str], Any] | None, on_reachable: Callable[[str, bool], None]
) -> Callable[[str], Any]:
    """A ``stats_cb`` that gives ``on_reachable(cluster_id, reachable)`` what
    librdkafka's statistics say of the brokers (:func:`kbear._health.reachable_from_stats`),
    then calls ``stats_cb`` (if any) with the same JSON text: the application's
    (or :mod:`kbear.metrics`'), present only if the application turned statistics
    on itself (:func:`kbear._events.configure`), so it is called as confluent-kafka
    calls it. The watch reads statistics at the interval the application set, if
    it set one (0: none; a lost cluster is then seen back by a delivery only)."""

    def watch(stats: str) -> Any:
        try:
            reachable = reachable_from_stats(json.loads(stats))
        except ValueError:
            reachable = None
        if reachable is not None:
            on_reachable(cluster_id, reachable)
        return None if stats_cb is None else stats_cb(stats)

    return watch


@dataclass(eq=False)
class LostWatch:
    """The lost-cluster policy over one client's clusters (see the module).

    Args:
        observer: the client's kind in events and logs (``producer``, ``consumer``).
        enabled: ``kbear.failover.enable``: fail a lost cluster over (else only report).
        after_ms: ``kbear.failover.after.ms`` (ms).
        config: the configuration in force (each cluster's ``kbear.failover.to``).
        log: the client's logger (``kbear.producer``, ``kbear.consumer``).
        clock: monotonic seconds (tests give their own).
        failed: the set to keep the failed-over clusters in (the client's state).
        wall: the wall clock, seconds since the epoch (compared with the
            operator's ``kbear.failover.decided``).

    Attributes:
        failed: the clusters this client failed over itself (a cluster leaves it at
            :meth:`release`).

    Thread-safe: callbacks of several clients and several calling threads may observe
    and tick at once.
    """

    observer: str
    enabled: bool
    after_ms: InitVar[int]
    config: Callable[[], KBearConfig]
    log: logging.Logger
    clock: Callable[[], float] = time.monotonic
    failed: set[str] = field(default_factory=set)
    wall: Callable[[], float] = time.time
    #: cluster -> (its kbear.failover.decided then, the wall time) at this client's failover
    _since: dict[str, tuple[datetime | None, datetime]] = field(default_factory=dict, init=False)
    #: clusters observed down and not yet back (nothing to do while empty)
    _watched: set[str] = field(default_factory=set, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self, after_ms: int) -> None:
        self._board = HealthBoard(after_ms)

    def observe(self, cluster_id: str, reachable: bool) -> None:
        """A client of ``cluster_id`` reported every broker down (``reachable`` False:
        its ``error_cb``), or what its statistics say of its brokers."""
        with self._lock:
            if not reachable:
                self._watched.add(cluster_id)
            elif cluster_id not in self._watched:
                return  # up, as nothing said otherwise
            self._board.observe(cluster_id, reachable, self.clock() * 1000)

    def lost(self) -> frozenset[str]:
        """The clusters the policy holds for lost now (declared lost, not recovered)."""
        with self._lock:
            return self._board.lost()

    @property
    def deciding(self) -> bool:
        """Whether the policy may decide something as time passes: a cluster seen
        down and not lost yet, or lost and reachable again (recovering). A cluster
        lost and still unreachable needs no tick until an observation says otherwise."""
        if not self._watched:
            return False
        with self._lock:
            now = self.clock() * 1000
            return any(
                self._board.health(c, now) in (ClusterHealth.SUSPECT, ClusterHealth.RECOVERING)
                or (c not in self._board.lost() and self._board.health(c, now) is ClusterHealth.LOST)
                for c in self._watched
            )

    def tick(self, reachable: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
        """Let time pass; ``reachable(cluster_id)`` may say a watched cluster is
        reachable again (a delivery there). Returns the failovers decided now, as
        (cluster, standby) pairs (each cluster once in the client's life)."""
        if not self._watched:
            return []
        with self._lock:
            now = self.clock() * 1000
            if reachable is not None:
                for cluster_id in list(self._watched):
                    if reachable(cluster_id):
                        self._board.observe(cluster_id, True, now)
            out = []
            for t in self._board.tick(now):
                _events.emit(_events.ClusterHealthChanged(self.observer, t.cluster, t.lost, t.for_ms / 1000))
                if t.lost:
                    standby = self._lost(t.cluster, t.for_ms)
                    if standby is not None:
                        out.append((t.cluster, standby))
                else:
                    self.log.info(
                        "kbear: cluster %r is reachable again (for %.1f s); routes stay where they are",
                        t.cluster,
                        t.for_ms / 1000,
                        extra=_events.fields("cluster_recovered", None, cluster=t.cluster),
                    )
                    self._watched.discard(t.cluster)
            return out

    def _lost(self, cluster_id: str, for_ms: float) -> str | None:
        cluster = self.config().clusters.get(cluster_id)
        standby = None if cluster is None else cluster.failover.standby
        if not self.enabled:
            how = "kbear.failover.enable is off"
        else:
            how = f"failing over to {standby!r}" if standby else "no kbear.failover.to: no standby"
        self.log.warning(
            "kbear: cluster %r lost: no broker reachable for %.1f s (kbear.failover.after.ms); %s",
            cluster_id,
            for_ms / 1000,
            how,
            extra=_events.fields("cluster_lost", None, cluster=cluster_id),
        )
        if not (self.enabled and standby) or cluster_id in self.failed:
            return None
        self.failed.add(cluster_id)
        decided = None if cluster is None else cluster.failover.decided
        self._since[cluster_id] = (decided, datetime.fromtimestamp(self.wall(), UTC))
        _events.emit(_events.FailedOver("client", cluster_id, standby))
        return standby

    def since(self, cluster_id: str) -> tuple[datetime | None, datetime]:
        """(the operator's ``kbear.failover.decided`` then, the wall time) at this
        client's failover of ``cluster_id`` (one of :attr:`failed`).

        Raises:
            KeyError: the cluster is not failed over by this client.
        """
        with self._lock:
            return self._since[cluster_id]

    def restore(self, cluster_id: str, decided: datetime | None, at: datetime) -> None:
        """Take up a failover of ``cluster_id`` this client decided before (a restarted
        Spark query reads it from its checkpoint): ``decided``, the operator's
        ``kbear.failover.decided`` then; ``at``, when (wall time). No event: it was
        reported when decided."""
        with self._lock:
            self.failed.add(cluster_id)
            self._since[cluster_id] = (decided, at)

    def release(self, config: KBearConfig) -> list[str]:
        """End the failovers of this client that the operator decided about since:
        a cluster of :attr:`failed` whose ``kbear.failover.decided`` in ``config`` (the
        configuration about to be applied) differs from the one in force at the
        failover and is later than it. Such a cluster leaves :attr:`failed` (its
        routes follow ``config``: back to it after a fail-back, on the standby after
        an operator's failover) and the policy forgets what it saw of it. Returns
        the clusters released; the client applies the routes as a reload."""
        out = []
        with self._lock:
            for cluster_id in sorted(self.failed):
                cluster = config.clusters.get(cluster_id)
                decided = None if cluster is None else cluster.failover.decided
                before, at = self._since.get(cluster_id, (None, datetime.min.replace(tzinfo=UTC)))
                if decided is None or decided == before or decided <= at:
                    continue
                self.failed.discard(cluster_id)
                del self._since[cluster_id]
                self._board.forget(cluster_id)
                self._watched.discard(cluster_id)
                out.append(cluster_id)
                back = cluster is not None and not cluster.failover.active
                state = "failed back" if back else "failed over"
                self.log.warning(
                    "kbear: cluster %r %s by the operator at %s: this client's own failover of it ends; "
                    "its routes follow the configuration",
                    cluster_id,
                    state,
                    decided.isoformat(),
                    extra=_events.fields("failover_released", None, cluster=cluster_id),
                )
                if back and cluster is not None and cluster.failover.standby:
                    _events.emit(
                        _events.FailedOver("client", cluster_id, cluster.failover.standby, back=True)
                    )
        return out
