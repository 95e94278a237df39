"""``GET /clusters``: each served cluster's address, reachability and failover state.

:class:`ClusterBoard` probes every cluster of the served configuration every
``interval_s`` seconds with the failover watch's probe (a TCP connection to one
of its bootstrap servers, :func:`kbear.admin.tcp_probe`, bounded by
``min(interval_s, 2)`` seconds), all clusters at once, and keeps per cluster:
reachable or not, since when (the first probe that saw the current state),
the last error and when it was last probed. With ``kbear serve
--failover-after-ms`` the failover watch probes through the same board
(:meth:`ClusterBoard.probe`), so what the page shows is what the watch decides
on. A cluster that goes down reads unreachable within ``interval_s`` plus the
probe's bound.

Addresses are those a client that is not kbear's gets (``${NAME}`` resolved
from the server's environment, :mod:`kbear.server.service`); a cluster whose
address names an unset variable is shown as written, not probed, with the
variable named. Only ``bootstrap.servers`` and the non-secret properties are
shown: a key holding a secret (``sasl.password``, ``sasl.jaas.config``...)
reads ``***`` and a ``user:password@`` in an address is masked.

For a cluster with ``kbear.mirror: mm2`` and a standby, the mirror's lag per
consumer group (:mod:`kbear.server.mirror_lag`: MirrorMaker 2's checkpoints on
the standby against the groups' committed offsets) is read in the background at
most once per ``mirror_interval_s`` seconds (30), with the properties resolved
from the server's environment, and shown with the time it was read.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbear._secrets import REDACTED, is_secret
from kbear.admin import tcp_probe
from kbear.config import ClusterConfig, KBearConfig, MirrorKind, UnsetVariableError, resolve_placeholders
from kbear.server.holder import Rounds, iso
from kbear.server.mirror_lag import MirrorLag, read_mirror_lag

__all__ = ["DEFAULT_PROBE_INTERVAL_S", "ClusterBoard", "ProbeState", "mask_address"]

log = logging.getLogger("kbear.server")

#: Seconds between two probes of a cluster (``kbear serve --probe-interval``).
DEFAULT_PROBE_INTERVAL_S = 2.0
#: Seconds between two reads of a mirror's lag.
MIRROR_INTERVAL_S = 30.0
_USERINFO = re.compile(r"(?<=//)[^/@,]*@|^[^/@,]*:[^/@,]*@")


def mask_address(servers: str) -> str:
    """``servers`` with any ``user:password@`` hidden (``***@``)."""
    return ",".join(_USERINFO.sub(REDACTED + "@", part.strip()) for part in servers.split(","))


@dataclass(frozen=True)
class ProbeState:
    """What the probes last said of a cluster.

    Attributes:
        reachable: the last probe's answer.
        since: when the probes started saying so (Unix time, seconds).
        checked: when it was last probed (Unix time, seconds).
        error: why the last probe failed ('' when it did not).
        last_error: the last failure ever seen, and when ('' and None: none).
    """

    reachable: bool
    since: float
    checked: float
    error: str = ""
    last_error: str = ""
    last_error_at: float | None = None


class ClusterBoard(Rounds):
    """Probes the served clusters and answers ``GET /clusters``.

    Args:
        config: the configuration served now (called at each round).
        interval_s: seconds between two probes of a cluster (> 0).
        probe: ``probe(cluster, timeout_s)``: None when it answers, else why not;
            given the cluster with its placeholders resolved.
        environ: where ``${NAME}`` is resolved (``os.environ`` when None).
        clock: Unix time, seconds.
        mirror_interval_s: seconds between two reads of a mirror's lag.
    """

    def __init__(
        self,
        config: Callable[[], KBearConfig],
        interval_s: float = DEFAULT_PROBE_INTERVAL_S,
        probe: Callable[[ClusterConfig, float], str | None] = tcp_probe,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        mirror_interval_s: float = MIRROR_INTERVAL_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"probe interval must be > 0, got {interval_s}")
        super().__init__(interval_s, "kbear-serve-probe", "probing the clusters", first_now=True)
        self._config = config
        self._probe = probe
        self._environ = os.environ if environ is None else environ
        self._clock = clock
        self._states: dict[str, ProbeState] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="kbear-probe")
        self.mirror_interval_s = mirror_interval_s
        self._lags: dict[str, MirrorLag] = {}
        self._lag_asked: dict[str, float] = {}

    @property
    def timeout_s(self) -> float:
        """One probe's bound, seconds: ``min(interval_s, 2)``."""
        return min(self.interval_s, 2.0)

    def resolved(self, cluster: ClusterConfig) -> ClusterConfig:
        """``cluster`` with ``${NAME}`` in its ``bootstrap.servers`` resolved from the
        environment (what a probe needs; no credential is read).

        Raises:
            UnsetVariableError: a placeholder names an unset variable.
        """
        servers = resolve_placeholders(cluster.bootstrap_servers, self._environ)
        if servers == cluster.bootstrap_servers:
            return cluster
        return cluster.model_copy(update={"meta": {**cluster.meta, "bootstrap.servers": servers}})

    def probe(self, cluster: ClusterConfig, timeout_s: float) -> str | None:
        """Probe ``cluster`` (placeholders resolved first) and record the answer: what
        the failover watch calls. None when it answers, else why not."""
        try:
            error = self._probe(self.resolved(cluster), timeout_s)
        except UnsetVariableError as exc:
            error = f"{exc} on the server"
        self._record(cluster.id, error)
        return error

    def _record(self, cluster_id: str, error: str | None) -> None:
        now = self._clock()
        with self._lock:
            before = self._states.get(cluster_id)
            reachable = error is None
            since = before.since if before is not None and before.reachable == reachable else now
            last_error, last_at = (before.last_error, before.last_error_at) if before else ("", None)
            if error is not None:
                last_error, last_at = error, now
            self._states[cluster_id] = ProbeState(reachable, since, now, error or "", last_error, last_at)

    def check(self) -> None:
        """One round: probe, all at once, each cluster not probed within ``interval_s``
        (the failover watch probes some of them itself)."""
        config = self._config()
        now = self._clock()
        with self._lock:
            for gone in set(self._states) - set(config.clusters):
                del self._states[gone]
            due = [
                c
                for c in config.clusters.values()
                if (s := self._states.get(c.id)) is None or now - s.checked >= self.interval_s * 0.9
            ]
        for cluster in config.clusters.values():
            standby = config.clusters.get(cluster.failover.standby or "")
            if cluster.failover.mirror is not MirrorKind.MM2 or standby is None:
                continue
            if now - self._lag_asked.get(cluster.id, -1e18) >= self.mirror_interval_s:
                self._lag_asked[cluster.id] = now
                self._pool.submit(self.read_lag, cluster, standby)
        if due:
            list(self._pool.map(lambda c: self.probe(c, self.timeout_s), due))

    def read_lag(self, cluster: ClusterConfig, standby: ClusterConfig) -> MirrorLag | None:
        """Read ``cluster``'s mirror lag now (blocking, bounded) and keep it for the answer."""
        try:
            resolved = [
                c.model_copy(
                    update={"meta": {k: resolve_placeholders(v, self._environ) for k, v in c.meta.items()}}
                )
                for c in (cluster, standby)
            ]
            lag = read_mirror_lag(resolved[0], resolved[1], self.timeout_s * 2)
        except UnsetVariableError as exc:
            lag = MirrorLag(self._clock(), error=f"{exc} on the server")
        except Exception as exc:  # a round that fails is shown; the next one runs
            log.exception("kbear serve: reading the mirror of %r failed", cluster.id)
            lag = MirrorLag(self._clock(), error=str(exc))
        if lag is not None:
            with self._lock:
                self._lags[cluster.id] = lag
        return lag

    def state(self, cluster_id: str) -> ProbeState | None:
        """The last probes' state of ``cluster_id`` (None: not probed yet)."""
        with self._lock:
            return self._states.get(cluster_id)

    def stop(self) -> None:
        """Stop probing (waits for the current round)."""
        super().stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the answer

    def cluster_json(self, cluster: ClusterConfig) -> dict[str, Any]:
        """One cluster of ``GET /clusters`` (camelCase, as the protocol's messages)."""
        failover = cluster.failover
        unresolved = None
        properties: dict[str, str] = {}
        for key, value in cluster.meta.items():
            if key == "bootstrap.servers" or key.startswith("kbear."):
                continue
            properties[key] = REDACTED if is_secret(key) else value
            with contextlib.suppress(UnsetVariableError):  # an unset variable: shown as written
                properties[key] = resolve_placeholders(properties[key], self._environ)
        try:
            servers = mask_address(resolve_placeholders(cluster.bootstrap_servers, self._environ))
        except UnsetVariableError as exc:
            servers, unresolved = mask_address(cluster.bootstrap_servers), f"{exc} on the server"
        state = self.state(cluster.id)
        return {
            "id": cluster.id,
            "bootstrapServers": servers,
            "unresolved": unresolved,
            "properties": properties,
            "reachable": None if state is None else state.reachable,
            "since": None if state is None else iso(state.since, "seconds"),
            "checkedAt": None if state is None else iso(state.checked, "seconds"),
            "error": None if state is None or not state.error else state.error,
            "lastError": None if state is None or not state.last_error else state.last_error,
            "lastErrorAt": None
            if state is None or state.last_error_at is None
            else iso(state.last_error_at, "seconds"),
            "standby": failover.standby,
            "failedOver": failover.active,
            "decidedAt": None if failover.decided is None else failover.decided.isoformat(timespec="seconds"),
            "mirror": failover.mirror.value,
            "mirrorLag": None
            if (lag := self._lags.get(cluster.id)) is None
            else {**lag.as_json(), "readAt": iso(lag.read_at, "seconds")},
        }

    def clusters_json(self, config: KBearConfig) -> dict[str, Any]:
        """The ``GET /clusters`` answer: every cluster of ``config``, in file order."""
        return {
            "digest": config.digest,
            "probeIntervalSeconds": self.interval_s,
            "clusters": [self.cluster_json(c) for c in config.clusters.values()],
        }
