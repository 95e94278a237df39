"""``kbear serve --failover-after-ms MS``: the service watches the clusters it serves
and fails a lost one over for the whole fleet.

:class:`FailoverWatch` probes, every ``interval_s``, each cluster of the served
configuration that has a standby (``kbear.failover.to``) and is not failed over:
a TCP connection to one of its bootstrap servers (no credentials needed; ``kbear
serve`` probes through :class:`kbear.server.clusters.ClusterBoard`, which resolves
``${NAME}`` in the address from the server's environment and shows the answers at
``GET /clusters``). The lost-cluster policy
(:mod:`kbear._health`, ``after_ms``) decides; a lost cluster is failed over the way
``kbear failover --apply`` does it -- ``kbear.failover.active: "true"`` written into
the served directory's ``clusters.yaml``, atomically, once the standby answers --
so the service's next reload answers every client with the standby route, the
decision survives a restart, and ``kbear failback --apply`` undoes it. A cluster
whose standby does not answer is not failed over (logged; tried again at the next
probe). One decision, taken by one process, reaches every client of the service:
a client cut off from the lost cluster alone does not split the fleet's writes.

:meth:`FailoverWatch.check` is one round (tests drive it with a fake clock);
:meth:`start` runs rounds in a daemon thread until :meth:`stop`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from kbear import _events
from kbear._health import HealthBoard, Transition
from kbear.admin import apply_failover, plan_failover, tcp_probe
from kbear.config import ClusterConfig, ConfigError, KBearConfig
from kbear.server.holder import Rounds, load_unresolved

__all__ = ["FailoverWatch"]

log = logging.getLogger("kbear.server")


class FailoverWatch(Rounds):
    """Fails a served cluster over when the lost-cluster policy says it is lost.

    Args:
        directory: the served configuration directory (``clusters.yaml`` is written there).
        config: the configuration served now.
        after_ms: ``kbear.failover.after.ms`` of the service (unreachable this long: lost).
        interval_s: seconds between two rounds of probes.
        probe: ``probe(cluster, timeout_s)``: None when it answers, else why not
            (default: a TCP connection to a bootstrap server).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        directory: str | Path,
        config: Callable[[], KBearConfig],
        after_ms: int,
        interval_s: float = 1.0,
        probe: Callable[[ClusterConfig, float], str | None] = tcp_probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(interval_s, "kbear-failover-watch", "failover watch round", first_now=False)
        self._directory = Path(directory)
        self._config = config
        self._board = HealthBoard(after_ms)
        self._probe = probe
        self._clock = clock

    def check(self) -> list[Transition]:
        """One round: probe the watched clusters, fail over the ones declared lost;
        returns the policy's transitions."""
        config = self._config()
        timeout_s = min(self.interval_s, 2.0)
        for cluster in config.clusters.values():
            if cluster.failover.standby is None or cluster.failover.active:
                continue
            reachable = self._probe(cluster, timeout_s) is None
            self._board.observe(cluster.id, reachable, self._clock() * 1000)
        transitions = self._board.tick(self._clock() * 1000)
        for t in transitions:
            _events.emit(_events.ClusterHealthChanged("serve", t.cluster, t.lost, t.for_ms / 1000))
            if t.lost:
                self._fail_over(t.cluster, t.for_ms)
            else:
                log.info("kbear serve: cluster %r reachable again; its routes stay on its standby", t.cluster)
        # a cluster lost but not failed over yet (standby down, write refused): again
        for cluster_id in self._board.lost():
            lost = config.clusters.get(cluster_id)
            just_lost = any(t.cluster == cluster_id for t in transitions)
            if lost is not None and not lost.failover.active and not just_lost:
                self._fail_over(cluster_id, None)
        return transitions

    def _fail_over(self, cluster_id: str, for_ms: float | None) -> None:
        try:
            plan = plan_failover(
                self._directory,
                load_unresolved(self._directory),
                cluster_id,
                False,
                min(self.interval_s, 2.0),
                check=self._probe,
                load=load_unresolved,
            )
            if plan.done:
                return
            if not plan.ready:
                log.error("kbear serve: cluster %r lost, not failed over: %s", cluster_id, plan.why_not)
                return
            apply_failover(self._directory, plan)
        except (ValueError, ConfigError, OSError) as exc:
            log.error("kbear serve: cluster %r lost, not failed over: %s", cluster_id, exc)
            return
        log.warning(
            "kbear serve: cluster %r lost%s: failed over to %r (kbear.failover.active in clusters.yaml)",
            cluster_id,
            "" if for_ms is None else f" (no broker reachable for {for_ms / 1000:.1f} s)",
            plan.standby,
            extra=_events.fields("failed_over", None, cluster=cluster_id, reason="serve"),
        )
        _events.emit(_events.FailedOver("serve", cluster_id, plan.standby))
