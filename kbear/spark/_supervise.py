"""A supervisor for queries on Spark's own Kafka connector: it stops the query at a
route change or a failover and starts it again on the new route, from offsets
translated from the stopped query's last committed ones (:func:`run_query`).

Spark's connector fixes its clusters when a query starts and keeps its positions in
the query's checkpoint, keyed by topic and partition only: a query cannot move to
another cluster. The supervisor runs one query per *generation*, each on its own
checkpoint (``<checkpoint_root>/<n>``, the routes it was started on beside it in
``<n>.routes.json``), and starts generation n+1 with ``startingOffsets`` per cluster:

- a topic whose route did not change: the offsets generation n committed (a
  change of its cluster's client properties in ``clusters.yaml``, such as
  ``bootstrap.servers`` or a rotated credential, starts the next generation too,
  since the connector keeps the properties it was started with);
- a topic failed over to the standby its cluster is mirrored to (the operator's
  ``kbear failover``, or the supervisor's own with ``failover_enable``): the
  committed offsets translated through the mirror (MirrorMaker 2's offset syncs,
  never past the true position; the same offsets for ``kbear.mirror: identical``);
  a partition without a translation starts at the standby's earliest offset;
- a topic failed back from that standby (the operator's ``kbear failback``): the
  standby is read up to its end offsets as for a move (below), then each partition of
  the old cluster starts after the last record whose copy was read on the standby
  (:func:`~kbear.spark._failover.fail_back_start`: the offset syncs, then record by
  record; never before what an earlier generation committed there);
- a topic moved elsewhere (a rule change): generation n reads the old cluster up to
  the end offsets seen when the change was noticed (bounded by ``drain_timeout_s``),
  then the new cluster is read from where an earlier generation committed there
  (a topic moved back, or failed back from a standby without MirrorMaker 2), else
  from its earliest offset.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import ConfigError
from kbear.router import Router
from kbear.spark._clusters import EARLIEST, ClusterQuestions
from kbear.spark._failover import SourceFailover, fail_back_start, mirror_start
from kbear.spark._options import (
    FORBIDDEN_READ_OPTIONS,
    _router,
    check_options,
    route_topics,
    same_route,
    topic_names,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["QuerySupervisor", "committed_offsets", "run_query"]

log = logging.getLogger("kbear.spark")

#: ``build(df, checkpoint)``: the application's query over ``df``, started with
#: ``checkpointLocation`` ``checkpoint``.
BuildQuery = Callable[["DataFrame", str], "StreamingQuery"]
#: Longest wait for a generation's stop before the next one starts (seconds), whatever
#: ``spark.sql.streaming.stopTimeout`` says (Spark's default, 0, waits as long as it takes).
STOP_WAIT_S = 30.0
Positions = dict[str, dict[str, dict[str, int]]]  # cluster -> physical topic -> partition -> offset


def committed_offsets(checkpoint: str | Path) -> list[dict[str, dict[str, int]]]:
    """The end offsets of the last micro-batch a query committed, one mapping per source
    (physical topic -> partition -> next offset, Spark's Kafka offsets), in the order
    of Spark's offsets log; empty when none was committed. ``checkpoint``: a local path."""
    root = Path(checkpoint)
    commits = root / "commits"
    batches = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not batches:
        return []
    lines = (root / "offsets" / str(max(batches))).read_text().splitlines()
    out: list[dict[str, dict[str, int]]] = []
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        out.append(
            {t: {str(p): int(o) for p, o in ps.items()} for t, ps in parsed.items()}
            if isinstance(parsed, dict)
            else {}
        )
    return out


class QuerySupervisor:
    """Runs the application's query on Spark's connector through route changes and
    failovers (see the module; made by :func:`run_query`).

    Attributes:
        query: the query of the current generation.
        generation: its number (0 first).
        restarts: one entry per restart: ``{"generation", "reason", "routes",
            "starting"}`` (``starting``: cluster -> topic -> partition -> offset;
            ``translated``: topic -> the record of
            :func:`~kbear.spark._failover.mirror_start` or, after a fail-back,
            :func:`~kbear.spark._failover.fail_back_start`).
        exception: what ended the supervision with an error (the query's exception
            when no failover or route change explains it), else None.
    """

    def __init__(
        self,
        spark: SparkSession,
        topics: list[str],
        build: BuildQuery,
        *,
        checkpoint_root: str,
        router: Router,
        group: str | None,
        client: Client | None,
        options: Mapping[str, str],
        failover_enable: bool,
        failover_after_ms: int,
        poll_s: float,
        drain_timeout_s: float,
    ) -> None:
        self._spark, self._topics, self._build = spark, topics, build
        self._root = Path(checkpoint_root)
        self._router, self._group, self._client = router, group, client
        self._options = dict(options)
        self._poll_s, self._drain_timeout_s = poll_s, drain_timeout_s
        self._fo = SourceFailover(failover_enable, failover_after_ms, lambda: router.config)
        self._q = ClusterQuestions(self._properties, lambda: self._fo)
        self._stop = threading.Event()
        #: the last record before each committed offset on clusters mirrored by
        #: MirrorMaker 2 (kbear.spark._copies.remember): a failover starts after its copy
        self._last: dict[str, Any] = {}
        self.restarts: list[dict[str, Any]] = []
        #: generations whose stop outlasted STOP_WAIT_S (not active
        #: any more, yet in spark.streams.active until their thread ends):
        #: (generation, query id, its clusters, time.monotonic() of the stop)
        self._ending: list[tuple[int, str, list[str], float]] = []
        self.exception: BaseException | None = None
        self._root.mkdir(parents=True, exist_ok=True)
        done = sorted(int(p.name) for p in self._root.iterdir() if p.is_dir() and p.name.isdigit())
        self.generation = done[-1] if done else 0
        recorded = self._recorded_routes()
        self._routes = recorded if recorded is not None else self._lookup()
        self.query = self._start(None)
        now = self._lookup()
        if any(not same_route(now[t], self._routes[t]) for t in now):
            self._restart(now, "the routes changed while the application was down")
        self._thread = threading.Thread(target=self._loop, name="kbear-spark-supervisor", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ routes

    def _properties(self, cluster: str) -> dict[str, str]:
        return dict(self._router.config.clusters[cluster].client_properties)

    def _lookup(self) -> dict[str, Route]:
        config = self._router.config
        routes = route_topics(self._topics, group=self._group, client=self._client, router=self._router)
        return {t: self._fo.route(r, config) for t, r in routes.items()}

    def _recorded_routes(self) -> dict[str, Route] | None:
        path = self._root / f"{self.generation}.routes.json"
        if not path.is_file():
            return None
        config = self._router.config
        out = {}
        for t, r in json.loads(path.read_text()).items():
            cluster = config.clusters.get(r["cluster"])
            if cluster is None:
                return None
            out[t] = Route(
                r["cluster"], r["topic"], t, cluster.bootstrap_servers, "", cluster.client_properties
            )
        return out

    # ------------------------------------------------------------------ generations

    def _start(self, per_cluster: Mapping[str, Mapping[str, str]] | None) -> StreamingQuery:
        from kbear.spark._stream import jvm_frames

        routes = {t: {"cluster": r.cluster_id, "topic": r.topic} for t, r in self._routes.items()}
        (self._root / f"{self.generation}.routes.json").write_text(json.dumps(routes))
        df = jvm_frames(self._spark, self._routes, self._group, self._options, per_cluster)
        return self._build(df, str(self._root / str(self.generation)))

    def _committed(self, generation: int | None = None) -> Positions:
        """What a generation (default: the current one) committed, by cluster (its sources
        matched by topic names against the routes recorded beside its checkpoint)."""
        n = self.generation if generation is None else generation
        path = self._root / f"{n}.routes.json"
        by_cluster: dict[str, set[str]] = {}
        for r in json.loads(path.read_text()).values() if path.is_file() else []:
            by_cluster.setdefault(r["cluster"], set()).add(r["topic"])
        out: Positions = {}
        for source in committed_offsets(self._root / str(n)):
            for cluster, names in by_cluster.items():
                if set(source) and set(source) <= names:
                    out.setdefault(cluster, {}).update(source)
                    break
        return out

    def _starting(self, new: Mapping[str, Route]) -> tuple[Positions, dict[str, Any]] | None:
        """Generation n+1's start offsets and translations; None when a cluster does not answer."""
        committed = self._committed()
        config = self._router.config
        starting: Positions = {}
        translated: dict[str, Any] = {}
        self._q.begin()
        for logical, route in new.items():
            marks = self._q.answer(route.cluster_id, route.topic)
            if marks is None:
                return None
            old = self._routes[logical]
            upstream = committed.get(old.cluster_id, {}).get(old.topic, {})
            if same_route(old, route):
                start = {str(p): upstream.get(str(p), EARLIEST) for p in marks}
            elif self._fo.mirror_move(old, route):
                start, translated[logical] = mirror_start(
                    config,
                    old,
                    route,
                    upstream,
                    marks,
                    self._properties,
                    old.cluster_id not in self._fo.down,
                    "earliest",
                    {"last": self._last},
                )
            elif (back := self._fail_back(old, route, upstream, marks)) is not None:
                start, translated[logical] = back
            else:
                before = {p: int(o) for p, o in self._read_before(route).items()}
                # within the partition's offsets, else it was emptied or made again: all of it
                start = {
                    str(p): before[str(p)] if low <= before.get(str(p), -1) <= high else EARLIEST
                    for p, (low, high) in marks.items()
                }
            starting.setdefault(route.cluster_id, {})[route.topic] = start
        return starting, translated

    def _read_before(self, route: Route) -> dict[str, int]:
        """The offsets (partition -> next offset) the newest earlier generation that read
        ``route`` committed there; empty when none did."""
        for n in range(self.generation - 1, -1, -1):
            if before := self._committed(n).get(route.cluster_id, {}).get(route.topic, {}):
                return before
        return {}

    def _fail_back(
        self, old: Route, new: Route, read: Mapping[str, int], marks: Mapping[int, tuple[int, int]]
    ) -> tuple[dict[str, int], dict[str, Any]] | None:
        """Where ``new`` starts after a fail-back from its MirrorMaker 2 standby ``old``
        (drained; ``read``: what was committed there), with the record for ``translated``
        (:func:`~kbear.spark._failover.fail_back_start`, from the offsets the newest
        earlier generation reading ``new`` committed, else ``new``'s earliest); None:
        no such fail-back, or its mirror not read."""
        before = self._read_before(new)
        at = {str(p): max(int(before.get(str(p), low)), low) for p, (low, _high) in marks.items()}
        try:
            return fail_back_start(self._router.config, old, new, at, read, self._properties)
        except KafkaException as exc:
            log.warning("kbear supervisor: %s fails back from earliest (mirror not read: %s)", new.topic, exc)
            return None

    def _restart(self, new: dict[str, Route], reason: str) -> bool:
        """Stop the current generation (done by the caller when draining) and start the next
        on ``new`` routes; False when a cluster does not answer (tried again later)."""
        self._stop_query()
        planned = self._starting(new)
        if planned is None:
            return False
        starting, translated = planned
        self._routes = dict(new)
        self.generation += 1
        per_cluster = {c: {"startingOffsets": json.dumps(topics)} for c, topics in starting.items()}
        self.query = self._start(per_cluster)
        self.restarts.append(
            {
                "generation": self.generation,
                "reason": reason,
                "routes": {t: f"{r.cluster_id}/{r.topic}" for t, r in new.items()},
                "starting": starting,
                "translated": translated,
            }
        )
        log.warning(
            "kbear supervisor: query restarted (generation %d): %s; from %s",
            self.generation,
            reason,
            starting,
        )
        return True

    def _stop_query(self) -> None:
        """Stop the current generation, waiting at most :data:`STOP_WAIT_S`. One reading a
        cluster that does not answer may take longer: Spark's connector closes its admin
        client, which waits for its calls to that cluster (up to the admin client's
        ``default.api.timeout.ms``, sometimes until the cluster answers again), and
        Spark's default ``spark.sql.streaming.stopTimeout`` (0) waits as long as it
        takes. It is left to end and :meth:`stop` waits for it."""
        query = self.query
        if not query.isActive:
            return
        errors: list[Exception] = []

        def stop() -> None:
            try:
                query.stop()
            except Exception as exc:
                errors.append(exc)

        stopper = threading.Thread(target=stop, name="kbear-spark-stop", daemon=True)
        stopper.start()
        stopper.join(STOP_WAIT_S)
        if stopper.is_alive() or errors:
            clusters = sorted({r.cluster_id for r in self._routes.values()})
            self._ending.append((self.generation, query.id, clusters, time.monotonic()))
            log.warning(
                "kbear supervisor: generation %d (clusters %s; not answering: %s) did not stop within "
                "%.0f s, it is left to end: %s",
                self.generation,
                clusters,
                sorted(self._fo.down & set(clusters)),
                STOP_WAIT_S,
                errors[0] if errors else "its stop() still waits",
            )

    def _drain(self, moved: Iterable[str]) -> None:
        """Let the current generation read the old routes of ``moved`` up to their end
        offsets now (bounded by ``drain_timeout_s``)."""
        ends: dict[tuple[str, str, str], int] = {}  # (cluster, physical topic, partition) -> end
        self._q.begin()
        for t in moved:
            old = self._routes[t]
            marks = self._q.answer(old.cluster_id, old.topic)
            if marks is None:
                return
            ends.update({(old.cluster_id, old.topic, str(p)): high for p, (_low, high) in marks.items()})
        deadline = time.monotonic() + self._drain_timeout_s
        while time.monotonic() < deadline and self.query.isActive and not self._stop.is_set():
            committed = self._committed()
            if all(committed.get(c, {}).get(t, {}).get(p, -1) >= end for (c, t, p), end in ends.items()):
                return
            time.sleep(min(self._poll_s, 1.0))
        log.warning(
            "kbear supervisor: the drain of %s did not end within %.0f s",
            sorted(moved),
            self._drain_timeout_s,
        )

    # ------------------------------------------------------------------ the loop

    def _probe(self) -> None:
        self._q.begin()
        for route in self._routes.values():
            self._q.answer(route.cluster_id, route.topic)
        self._fo.tick()
        committed = self._committed()
        state = {"positions": committed, "last": self._last}
        self._q.remember(state, {(c, t) for c, topics in committed.items() for t in topics})
        self._last = state.get("last", {})

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                self._step()
            except Exception as exc:  # the supervision ends; the application sees it
                log.exception("kbear supervisor: stopped")
                self.exception = exc
                return

    def _step(self) -> None:
        try:
            self._router.reload()
        except ConfigError as exc:
            log.warning("kbear supervisor: configuration reload refused, keeping the last good one: %s", exc)
        self._fo.release(self._router.config)
        self._probe()
        try:
            now = self._lookup()
        except NoRouteError as exc:
            log.warning("kbear supervisor: %s; the query goes on", exc)
            return
        moved = [t for t in now if not same_route(now[t], self._routes[t])]
        if moved:
            failover = all(
                self._fo.mirror_move(self._routes[t], now[t]) or self._routes[t].cluster_id in self._fo.down
                for t in moved
            )
            if not failover:
                self._drain(moved)
            reason = ", ".join(f"{t}: {self._routes[t].cluster_id} -> {now[t].cluster_id}" for t in moved)
            self._restart(now, ("failover " if failover else "route change ") + reason)
            return
        # Spark's connector fixed the clusters' properties when the query started: a change
        # in clusters.yaml (bootstrap.servers, a rotated credential) needs the next generation.
        changed = {
            r.cluster_id for t, r in now.items() if dict(r.properties) != dict(self._routes[t].properties)
        }
        if changed:
            self._restart(now, "client properties changed: " + ", ".join(sorted(changed)))
            return
        if not self.query.isActive and not self._stop.is_set():
            error = self.query.exception()
            down = {r.cluster_id for r in self._routes.values()} & self._fo.down
            if error is not None and down:
                log.warning(
                    "kbear supervisor: the query failed while clusters %s do not answer; waiting for a "
                    "failover: %s",
                    sorted(down),
                    error,
                )
                return
            if error is not None:
                raise RuntimeError(f"the query failed: {error}")
            self._stop.set()  # ended on its own (availableNow, or stopped by the application)

    # ------------------------------------------------------------------ API

    def stop(self) -> None:
        """Stop supervising and stop the current query; return once no query the
        supervisor started runs any more.

        A generation whose stop outlasted :data:`STOP_WAIT_S` (one reading a cluster
        that does not answer, stopped at a failover: its connector closes its admin
        client, which waits for its calls there) is waited for, up to the admin
        client's ``default.api.timeout.ms`` (the ``kafka.default.api.timeout.ms``
        option, 60 s by default) more. Kafka's admin client may wait longer, until
        the cluster answers again.

        Raises:
            TimeoutError: a generation was still running then (its number, query id
                and clusters in the message); it ends once its clusters answer.
        """
        self._stop.set()
        self._thread.join(timeout=60)
        self._stop_query()
        self._q.close()
        api_timeout_s = int(self._options.get("kafka.default.api.timeout.ms", 60_000)) / 1000
        deadline = max((since for *_, since in self._ending), default=0.0) + api_timeout_s
        while (
            running := [e for e in self._ending if self._spark.streams.get(e[1]) is not None]
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        if running:
            raise TimeoutError(
                "kbear supervisor: still running after their stop: "
                + "; ".join(f"generation {n} (query {q}, clusters {c})" for n, q, c, _ in running)
                + " (Spark's Kafka connector waits for its admin client's calls to a cluster not answering)"
            )

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until the supervision ends (:meth:`stop`, the query's end, or
        :attr:`exception`); True when it ended within ``timeout_s``."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


def run_query(
    spark: SparkSession,
    topics: str | Iterable[str],
    build: BuildQuery,
    *,
    checkpoint_root: str,
    router: Router | None = None,
    config: str | None = None,
    group: str | None = None,
    client: Client | None = None,
    options: Mapping[str, str] | None = None,
    failover_enable: bool = False,
    failover_after_ms: int = 30_000,
    poll_s: float = 2.0,
    drain_timeout_s: float = 60.0,
) -> QuerySupervisor:
    """Run a query on Spark's Kafka connector that follows route changes and failovers.

    Args:
        spark: the session (Spark's Kafka connector on its classpath).
        topics: logical topic names (iterable, or comma-separated ``str``).
        build: ``build(df, checkpoint)`` -> the started query over ``df`` (the
            columns of :func:`kbear.spark.read_stream`), with ``checkpointLocation``
            ``checkpoint``; called once per generation.
        checkpoint_root: a local directory for the generations' checkpoints (its own
            per query; kept across application restarts, which go on with the last
            generation).
        router, config: a :class:`~kbear.Router`, or a configuration directory.
        group, client: the lookups' consumer group and client.
        options: more source options (``startingOffsets`` for the first generation,
            ``maxOffsetsPerTrigger``, ``kafka.*``); the forbidden ones are refused.
        failover_enable, failover_after_ms: ``kbear.failover.enable`` and
            ``kbear.failover.after.ms``: the supervisor fails a cluster over itself
            once no broker answered it for that long (the operator's ``kbear
            failover`` applies either way).
        poll_s: seconds between two looks at the routes and the clusters.
        drain_timeout_s: longest wait (seconds) for a query to read its old
            cluster's end offsets before a route change restarts it.

    Returns:
        The running :class:`QuerySupervisor` (``query``, ``restarts``, ``stop()``,
        ``await_termination()``). A generation stopped at a failover may run on
        while its connector waits for the lost cluster: the next one starts after
        at most 30 s (``STOP_WAIT_S``), and :meth:`QuerySupervisor.stop` waits for
        it (or raises ``TimeoutError`` naming it).

    Raises:
        SparkOptionsError: forbidden options, an untranslatable cluster property.
        NoRouteError: a topic has no route.
    """
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts, FORBIDDEN_READ_OPTIONS)
    return QuerySupervisor(
        spark,
        topic_names(topics),
        build,
        checkpoint_root=checkpoint_root,
        router=_router(router, config, client),
        group=group,
        client=client,
        options=opts,
        failover_enable=failover_enable,
        failover_after_ms=failover_after_ms,
        poll_s=poll_s,
        drain_timeout_s=drain_timeout_s,
    )
