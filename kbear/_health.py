"""The lost-cluster policy: when a cluster counts as lost, and when as back (private).

No I/O, no clock of its own, no logging: observations in, transitions out, so the
blocking and asyncio clients and ``kbear serve`` drive the same rules and the tests
drive them with a fake clock (milliseconds, any monotonic origin).

A cluster is **lost** when no broker of it was reachable for ``after_ms``
(``kbear.failover.after.ms``, default 30000) without a break: one failed request or
a short outage is not a loss. It is **recovered** only after being reachable for
``recover_ms`` (default: ``after_ms``) without a break, so a cluster whose brokers
come and go (a slow or flapping cluster) does not switch back and forth: while it
recovers, one more unreachable observation makes it lost again at once.

The observations (:func:`reachable_from_error`, :func:`reachable_from_stats`) come
from librdkafka: its ``_ALL_BROKERS_DOWN`` error (``error_cb``: every broker
connection of the client is down) and the broker states of its statistics
(``stats_cb``: a broker ``UP`` means reachable; none up while some are connecting
or down means unreachable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ClusterHealth",
    "HealthBoard",
    "Transition",
    "reachable_from_error",
    "reachable_from_stats",
]

#: ``kbear.failover.after.ms``'s default (issue #27)
DEFAULT_AFTER_MS = 30_000

#: librdkafka's ``_ALL_BROKERS_DOWN`` (``RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN``)
_ALL_BROKERS_DOWN = -187

#: broker states (librdkafka's statistics, ``brokers.*.state``) of a usable connection
_CONNECTED = frozenset({"UP", "UPDATE"})
#: broker states of a client trying to reach a broker it cannot use
_TRYING = frozenset({"DOWN", "TRY_CONNECT", "CONNECT"})


class ClusterHealth(StrEnum):
    """What the policy says of a cluster.

    - ``up``: reachable (or nothing says otherwise);
    - ``suspect``: unreachable for less than ``after_ms``;
    - ``lost``: unreachable for ``after_ms`` or more (declared lost);
    - ``recovering``: lost, reachable again for less than ``recover_ms``.
    """

    UP = "up"
    SUSPECT = "suspect"
    LOST = "lost"
    RECOVERING = "recovering"


@dataclass(frozen=True, slots=True)
class Transition:
    """A cluster was declared lost (``lost=True``) or recovered (``lost=False``), after
    being unreachable (or reachable again) for ``for_ms``: what each observer emits as
    :class:`~kbear._events.ClusterHealthChanged` (under its own ``observer`` label, in
    seconds; this policy, below the events, keeps no label and counts milliseconds)."""

    cluster: str
    lost: bool
    for_ms: float


def reachable_from_error(code: int) -> bool | None:
    """What a librdkafka error (``KafkaError.code()``) says of its cluster: False for
    ``_ALL_BROKERS_DOWN``, None (nothing) for every other error."""
    return False if code == _ALL_BROKERS_DOWN else None


def reachable_from_stats(stats: Mapping[str, Any]) -> bool | None:
    """What librdkafka's statistics (the ``stats_cb`` JSON, parsed) say of the
    cluster: True when a broker is ``UP`` (or ``UPDATE``); False when none is and
    some are ``DOWN``, ``TRY_CONNECT`` or ``CONNECT``; None otherwise (no broker
    known yet, or only brokers never needed: ``INIT``)."""
    brokers = stats.get("brokers")
    if not isinstance(brokers, Mapping):
        return None
    states = {b.get("state") for b in brokers.values() if isinstance(b, Mapping)}
    if states & _CONNECTED:
        return True
    if states & _TRYING:
        return False
    return None


@dataclass(slots=True)
class _Cluster:
    """One cluster's observations: since when it is unreachable (or reachable)."""

    down_since: float | None = None  # unreachable since, None: reachable
    up_since: float | None = None  # while lost: reachable since
    lost: bool = False


class HealthBoard:
    """The lost-cluster policy over several clusters (see the module).

    Args:
        after_ms: how long (ms) every broker of a cluster must be unreachable before
            it is lost (``kbear.failover.after.ms``); at least 0.
        recover_ms: how long (ms) a lost cluster must be reachable again before it is
            recovered (default: ``after_ms``).

    Raises:
        ValueError: a negative duration.
    """

    def __init__(self, after_ms: float = DEFAULT_AFTER_MS, recover_ms: float | None = None) -> None:
        recover = after_ms if recover_ms is None else recover_ms
        if after_ms < 0 or recover < 0:
            raise ValueError(f"durations must be >= 0 ms (after_ms={after_ms}, recover_ms={recover})")
        self.after_ms = after_ms
        self.recover_ms = recover
        self._clusters: dict[str, _Cluster] = {}

    def observe(self, cluster: str, reachable: bool | None, now_ms: float) -> None:
        """Record that ``cluster`` was (``reachable``) or was not reachable at
        ``now_ms`` (None: nothing known). Decisions are :meth:`tick`'s: one place
        reports every transition."""
        c = self._clusters.setdefault(cluster, _Cluster())
        if reachable is False:
            if c.down_since is None:
                c.down_since = now_ms
            c.up_since = None
        elif reachable is True:
            if not c.lost:
                c.down_since = None
            elif c.up_since is None:
                c.up_since = now_ms

    def forget(self, cluster: str) -> None:
        """Drop what was observed of ``cluster``: it counts as up, as before any
        observation (a lost cluster the operator declared back starts afresh)."""
        self._clusters.pop(cluster, None)

    def tick(self, now_ms: float) -> list[Transition]:
        """Let time pass (``now_ms``) for every cluster: the transitions it causes."""
        decided = (self._decide(cluster, c, now_ms) for cluster, c in self._clusters.items())
        return [t for t in decided if t is not None]

    def _decide(self, cluster: str, c: _Cluster, now_ms: float) -> Transition | None:
        if not c.lost:
            if c.down_since is not None and now_ms - c.down_since >= self.after_ms:
                c.lost, c.up_since = True, None
                return Transition(cluster, True, now_ms - c.down_since)
            return None
        if c.up_since is not None and now_ms - c.up_since >= self.recover_ms:
            took = now_ms - c.up_since
            c.lost, c.up_since, c.down_since = False, None, None
            return Transition(cluster, False, took)
        return None

    def health(self, cluster: str, now_ms: float) -> ClusterHealth:
        """What the policy says of ``cluster`` at ``now_ms`` (time passing counted;
        nothing changed: transitions are reported by :meth:`tick` only)."""
        c = self._clusters.get(cluster)
        if c is None:
            return ClusterHealth.UP
        if not c.lost:
            if c.down_since is None:
                return ClusterHealth.UP
            return ClusterHealth.LOST if now_ms - c.down_since >= self.after_ms else ClusterHealth.SUSPECT
        if c.up_since is None:
            return ClusterHealth.LOST
        return ClusterHealth.UP if now_ms - c.up_since >= self.recover_ms else ClusterHealth.RECOVERING

    def lost(self) -> frozenset[str]:
        """The clusters declared lost (and not recovered) at the last observation or tick."""
        return frozenset(cid for cid, c in self._clusters.items() if c.lost)
