"""The ``kbear`` source's stream reader: micro-batches planned on the driver, ranges
read on executors (see :class:`kbear.spark.KBearDataSource`)."""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from kbear._modes import SwitchMode
from kbear._route import NoRouteError, Route
from kbear._switch import SwitchEngine
from kbear._switch_report import tell
from kbear._switch_types import Progress, Switch
from kbear.config import ConfigError
from kbear.router import Router
from kbear.spark._clusters import ClusterQuestions, start_positions
from kbear.spark._copies import Mark, mark_of
from kbear.spark._failover import SourceFailover, fail_back_start, mirror_start
from kbear.spark._options import SparkOptionsError, same_route
from kbear.spark._read import RangePart, StandbyRead, read_range
from kbear.spark._source_settings import SourceSettings

__all__ = ["KBearStreamReader"]

log = logging.getLogger("kbear.spark")


_OFFSET_VERSION = 1
# offsets: {"v": 1,
#           "positions": {cluster: {physical topic: {partition: next offset}}},
#           "routes": {logical topic: {"cluster": c, "topic": physical}},
#           "draining": {logical topic: {"cluster": c, "topic": physical, "then": [{"cluster", "topic"}...],
#                                        "since": wall-clock seconds the drain began}},
#           "failed": {cluster: {"at": wall-clock seconds, "decided": ISO time or null}},
#           "translated": {logical topic: {"from": {"cluster", "topic"}, "to": {"cluster", "topic"},
#                                         "mirror": "mm2" | "identical",
#                                         "partitions": {partition: {"from", "to", "by"}}}},
#           "last": {cluster: {physical topic: {partition: [offset, fingerprint]}}}}
# (a drain is read until this source's positions reach the old cluster's high watermarks;
# "then": routes the topic took meanwhile, each drained in turn before the current route;
# "since": the drain's start, so that its duration is measured once, across micro-batches
# and restarts; absent in offsets written before it was recorded: the drain counts from
# the first micro-batch that reads them;
# "failed": the clusters this query failed over itself (kbear.failover.enable), taken up
# by a restarted query; "translated": each topic's last failover to a mirror's standby,
# where it started there and what decided it (kbear.spark._failover.mirror_start);
# "last": the last record read of each partition of a cluster mirrored by MirrorMaker 2,
# whose copy a failover looks for on the standby (kbear.spark._copies);
# all three absent in offsets written before they were recorded)
Offsets = dict[str, Any]


def _target(logical: str, where: Mapping[str, Any]) -> Route:
    """The route recorded in offsets as ``{"cluster", "topic"}`` for ``logical``."""
    return Route(str(where["cluster"]), str(where["topic"]), logical, "", "", {})


class KBearStreamReader(DataSourceStreamReader):
    """Plans and reads micro-batches of the ``kbear`` source (see :class:`KBearDataSource`).

    Driver side (``initialOffset``, ``latestOffset``, ``partitions``) keeps one
    metadata Consumer per cluster; executors (``read``) open one Consumer per
    task, assigned at the range's start offset (no consumer group joins).
    """

    def __init__(self, settings: SourceSettings, arrow: Any = None) -> None:
        self.__setstate__({"_s": settings, "_arrow": arrow})
        self._loaded()

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to run read() on executors: the router (locks) and the
        # driver's metadata consumers stay behind; read() needs neither.
        return {"_s": self._s, "_arrow": self._arrow}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._s = state["_s"]
        self._arrow = state.get("_arrow")
        # executors may not see the configuration directory: loaded on first driver-side use
        self._router: Router | None = None
        self._last: Offsets | None = None
        self._fo = SourceFailover(False, 0, None)
        self._q = ClusterQuestions(self._properties, lambda: self._fo)

    def _loaded(self) -> Router | None:
        """The router, loaded here on first use (None: not routed)."""
        s = self._s
        if self._router is None and s.config_dir is not None:
            router = self._router = Router.from_source(s.config_dir, client=s.client)
            self._fo = SourceFailover(s.failover_enable, s.failover_after_ms, lambda: router.config)
        return self._router

    # ------------------------------------------------------------------ routing

    def _routes(self, previous: Mapping[str, Route] | None = None) -> dict[str, Route]:
        """Logical topic -> route now (routed) or the fixed cluster (direct)."""
        s, router = self._s, self._loaded()
        if router is None:
            props = {"bootstrap.servers": str(s.bootstrap)}
            return {t: Route(s.cluster, t, t, str(s.bootstrap), "-", props) for t in s.topics}
        try:
            router.reload()
        except ConfigError as exc:
            log.warning("kbear source: configuration reload refused, keeping the last good one: %s", exc)
        config = router.config
        self._fo.release(config)
        out = {}
        for t in s.topics:
            try:
                out[t] = self._fo.route(router.route(t, s.group, s.client), config)
            except NoRouteError:
                if previous is None or t not in previous:
                    raise
                log.warning("kbear source: topic %s has no route any more; keeps %s", t, previous[t])
                out[t] = previous[t]
        return out

    def _properties(self, cluster: str) -> dict[str, str]:
        router = self._loaded()
        if router is None:
            return {**self._s.extra, "bootstrap.servers": str(self._s.bootstrap)}
        return {**self._s.extra, **router.config.clusters[cluster].client_properties}

    def initialOffset(self) -> Offsets:
        """The start of a new query: each topic's route and ``startingOffsets`` positions.

        Raises:
            NoRouteError: a topic has no route.
            SparkOptionsError: ``startingOffsets`` is not earliest, latest or JSON.
        """
        starting: str | dict[str, dict[str, int]] = self._s.starting.lower()
        if starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(self._s.starting)
            except ValueError:
                raise SparkOptionsError(
                    [f"startingOffsets must be 'earliest', 'latest' or JSON, got {self._s.starting!r}"]
                ) from None
            if not isinstance(parsed, dict):
                raise SparkOptionsError(
                    ["startingOffsets JSON must be an object {topic: {partition: offset}}"]
                )
            starting = parsed
        offsets: Offsets = {"v": _OFFSET_VERSION, "positions": {}, "routes": {}, "draining": {}}
        for logical, route in self._routes().items():
            how = starting if isinstance(starting, str) else starting.get(logical, {})
            offsets["routes"][logical] = {"cluster": route.cluster_id, "topic": route.topic}
            marks = self._q.marks(route.cluster_id, route.topic)
            offsets["positions"].setdefault(route.cluster_id, {})[route.topic] = start_positions(marks, how)
        self._last = offsets
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when the option is set, else ``ReadAllAvailable``."""
        if self._s.max_offsets is not None:
            return ReadMaxRows(self._s.max_offsets)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        """The end of the next micro-batch, from ``start`` (the previous end).

        Looks the routes up again (reloading the configuration directory); a
        changed route starts a drain of the old cluster, decided by the switch
        engine (:mod:`kbear._switch`, the same as RoutedConsumer's): the old
        cluster is read until a batch finds nothing more there (this source's
        positions at the old cluster's high watermarks), then the new route is
        read. Positions on the new route are fixed when the move is first seen
        (``kbear.switch.start``), so what is produced there during the drain is
        read too. A drain never times out here: skipping offsets would lose
        them. Partitions seen for the first time get a start position and are
        read from the next micro-batch on. ``limit`` (``ReadMaxRows``) caps the
        offsets advanced over all partitions.

        A cluster that does not answer gives its topics no new offsets in this
        batch (a warning, the ``kbear_clusters_unanswered_total`` metric); with
        ``kbear.failover.enable`` it is failed over once lost for
        ``kbear.failover.after.ms``. A move to the standby a failed-over cluster
        is mirrored to (this query's failover or the operator's ``kbear
        failover``) is not drained: the standby is read from this source's
        positions translated through the mirror (:mod:`kbear.spark._failover`),
        recorded under ``translated`` in the offsets.

        Spark < 4.2 calls it without arguments: the previous end is then the
        one this reader last returned.
        """
        if start is None:
            start = self._last if self._last is not None else self.initialOffset()
        new: Offsets = copy.deepcopy(start)
        new.setdefault("translated", {})
        self._q.begin()
        positions: dict[str, dict[str, dict[str, int]]] = new["positions"]
        previous = {t: _target(t, r) for t, r in new["routes"].items()}
        self._fo.restore(new.get("failed", {}))
        self._fo.tick()
        routes = self._routes(previous)
        # Wall-clock seconds: a drain's start is kept in the checkpoint, read again by a
        # restarted query (another process, another monotonic clock).
        now = time.time()
        engine = self._engine(new, previous, now)
        for logical, route in list(routes.items()):
            current = previous.get(logical)
            if current is not None and not same_route(current, route):
                if self._fo.mirror_move(current, route):
                    if not self._fail_over(new, engine, logical, current, route):
                        routes[logical] = current  # the standby does not answer: next batch
                    continue
                log.info(
                    "kbear source: %s moves %s/%s -> %s/%s",
                    logical,
                    current.cluster_id,
                    current.topic,
                    route.cluster_id,
                    route.topic,
                )
                engine.route_changed(logical, current, route, now)
            new["routes"][logical] = {"cluster": route.cluster_id, "topic": route.topic}
            on_cluster = positions.setdefault(route.cluster_id, {})
            found = None if route.topic in on_cluster else self._q.answer(route.cluster_id, route.topic)
            if found is not None:
                on_cluster[route.topic] = start_positions(found, self._s.switch_start)
        marks = self._drive(engine, new, now)
        new["draining"] = {}
        for logical, (old, _) in engine.drains().items():
            then = [r for r in engine.chain(logical)[:-1] if r is not None]
            new["draining"][logical] = {
                "cluster": old.cluster_id,
                "topic": old.topic,
                "then": [{"cluster": r.cluster_id, "topic": r.topic} for r in then],
                "since": engine.drain_started(logical),
            }
        wanted: dict[tuple[str, str, str], int] = {}
        # a start translated in this batch (a failover to the standby, a fail-back once the
        # standby is drained: "translated" changed) is read from the next batch on, as
        # partitions() reads from the positions this batch started with
        fresh = {t for t, record in new["translated"].items() if record != start.get("translated", {}).get(t)}
        for logical in routes:
            if logical in fresh:
                continue
            drain = new["draining"].get(logical)
            if drain is not None:
                for p, (_low, high) in marks.get(logical, {}).items():
                    wanted[(drain["cluster"], drain["topic"], str(p))] = high
                continue
            r = new["routes"][logical]
            found = self._q.answer(r["cluster"], r["topic"])
            if found is None:
                continue  # not answering: no new offsets from it in this batch
            known = positions.setdefault(r["cluster"], {}).setdefault(r["topic"], {})
            # a position fixed in this batch (a new partition, a move's start on the new
            # route) is read from the next batch: partitions() reads only from start's
            read_from = start["positions"].get(r["cluster"], {}).get(r["topic"], {})
            for p, (low, high) in found.items():
                key = str(p)
                if key not in known:
                    known[key] = low  # first seen: start here (earliest, as Spark's connector does)
                elif key in read_from:
                    wanted[(r["cluster"], r["topic"], key)] = high
        self._advance(positions, wanted, limit)
        self._q.remember(new, {(c, t) for c, t, _ in wanted})
        new["failed"] = self._fo.recorded()
        for key in ("failed", "translated"):
            if not new[key]:
                del new[key]
        self._last = new
        return new

    def _fail_over(self, new: Offsets, engine: SwitchEngine, logical: str, old: Route, route: Route) -> bool:
        """Start ``logical`` on the standby ``route`` from this source's positions on
        ``old`` translated through the mirror (no drain of ``old``: it is failed over).
        False when the standby does not answer (the topic stays on ``old`` this batch)."""
        assert self._router is not None
        marks = self._q.answer(route.cluster_id, route.topic)
        if marks is None:
            return False
        engine.forget([logical])
        new["draining"].pop(logical, None)
        upstream = new["positions"].get(old.cluster_id, {}).get(old.topic, {})
        try:
            starts, record = mirror_start(
                self._router.config,
                old,
                route,
                upstream,
                marks,
                self._properties,
                old.cluster_id not in self._fo.down and old.cluster_id not in self._q.silent,
                self._s.switch_start,
                new,
            )
        except KafkaException as exc:
            self._fo.unanswered(route.cluster_id, [route.topic], exc)
            return False
        new["positions"].setdefault(route.cluster_id, {})[route.topic] = starts
        new["translated"][logical] = record
        new["routes"][logical] = {"cluster": route.cluster_id, "topic": route.topic}
        return True

    def _engine(self, offsets: Offsets, routes: Mapping[str, Route], now: float) -> SwitchEngine:
        """A switch engine holding the drains recorded in ``offsets`` (the checkpoint
        is the truth: a restarted query goes on with the same drains, since the
        time recorded there; they were reported when they began)."""
        engine = SwitchEngine(
            SwitchMode.DRAIN, idle_s=0.0, timeout_s=None, reset_to_end=False, first_probe_s=0.0, kind="spark"
        )
        drains: Mapping[str, Mapping[str, Any]] = offsets["draining"]
        for logical, d in drains.items():
            chain: list[Route | None] = [_target(logical, r) for r in d.get("then", [])]
            if logical in routes:
                chain.append(routes[logical])
            since = d.get("since")
            started = float(since) if isinstance(since, int | float) else now
            engine.resume(logical, _target(logical, d), chain, started, now)
        return engine

    def _drive(
        self, engine: SwitchEngine, offsets: Offsets, now: float
    ) -> dict[str, dict[int, tuple[int, int]]]:
        """Probe every drain synchronously (this source's positions on the old cluster
        are its "committed" offsets) and carry out the switches the engine decides.
        Returns logical topic -> the old cluster's watermarks, for drains still running."""
        marks: dict[str, dict[int, tuple[int, int]]] = {}
        tell(engine.outcomes(), log)  # the drains begun by this batch's route changes
        for _ in range(16):  # a chain of moves is drained one route per round; bounded
            actions = engine.step(now)
            tell(engine.outcomes(), log)
            if not actions:
                break
            for action in actions:
                if isinstance(action, Switch):
                    log.info("kbear source: %s drained on %s", action.topic, action.old.cluster_id)
                    marks.pop(action.topic, None)
                    if action.new is not None:
                        self._fail_back(offsets, action.topic, action.old, action.new)
                    continue
                old = action.route
                answer = self._q.answer(old.cluster_id, old.topic)
                if answer is None:
                    continue  # the old cluster does not answer: the drain waits
                found = answer
                read = offsets["positions"].get(old.cluster_id, {}).get(old.topic, {})
                marks[action.topic] = found
                committed = {p: int(read.get(str(p), low)) for p, (low, _high) in found.items()}
                engine.progress(action.topic, Progress(action.seq, marks=found, committed=committed), now)
        return marks

    def _fail_back(self, new: Offsets, logical: str, old: Route, route: Route) -> None:
        """After the drain of ``old``, ``route`` is read from after what this source read
        of it as copies on ``old``, when ``old`` is its MirrorMaker 2 standby
        (:func:`~kbear.spark._failover.fail_back_start`; recorded under ``translated``)."""
        at = new["positions"].get(route.cluster_id, {}).get(route.topic)
        if self._router is None or not at:
            return
        read = new["positions"].get(old.cluster_id, {}).get(old.topic, {})
        try:
            got = fail_back_start(self._router.config, old, route, at, read, self._properties)
        except KafkaException as exc:
            log.warning("kbear source: %s fails back from its position (mirror not read: %s)", logical, exc)
            return
        if got is not None:
            new["positions"][route.cluster_id][route.topic], new["translated"][logical] = got

    @staticmethod
    def _advance(
        positions: dict[str, dict[str, dict[str, int]]],
        wanted: Mapping[tuple[str, str, str], int],
        limit: ReadLimit | None,
    ) -> None:
        gaps = {k: max(0, v - positions[k[0]][k[1]].get(k[2], 0)) for k, v in wanted.items()}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        total = sum(gaps.values())
        if budget is not None and total > budget:
            share = {k: gap * budget // total for k, gap in gaps.items()}
            left = budget - sum(share.values())
            for k in sorted(gaps):
                extra = min(left, gaps[k] - share[k])
                share[k] += extra
                left -= extra
            gaps = share
        for (cluster, topic, p), gap in gaps.items():
            if gap:
                positions[cluster][topic][p] = positions[cluster][topic].get(p, 0) + gap

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """One task per (cluster, topic, partition) whose position moved from ``start`` to ``end``.

        A partition absent from ``start`` is not read in this batch (its start
        position is recorded in ``end``), nor the topic of a failover made in this
        batch (its translated start is recorded in ``end``).
        """
        restarted = {
            (r["to"]["cluster"], r["to"]["topic"])
            for t, r in end.get("translated", {}).items()
            if r != start.get("translated", {}).get(t)
        }
        logical_of: dict[tuple[str, str], str] = {}
        for offsets in (start, end):
            for t, r in offsets["routes"].items():
                logical_of.setdefault((r["cluster"], r["topic"]), t)
            for t, d in offsets["draining"].items():
                logical_of.setdefault((d["cluster"], d["topic"]), t)
        parts: list[InputPartition] = []
        for cluster, topics in end["positions"].items():
            for topic, ends in topics.items():
                if (cluster, topic) in restarted:
                    continue
                starts = start["positions"].get(cluster, {}).get(topic, {})
                for p, stop in ends.items():
                    begin = starts.get(p)
                    if begin is None or stop <= begin:
                        continue
                    last = mark_of(end, cluster, topic, p, stop)
                    parts.append(
                        RangePart(
                            cluster,
                            self._properties(cluster),
                            topic,
                            logical_of.get((cluster, topic), topic),
                            int(p),
                            begin,
                            stop,
                            self._s.include_headers,
                            self._s.poll_timeout_s,
                            self._standby(cluster, topic, mark_of(start, cluster, topic, p, begin), last),
                            self._arrow,
                        )
                    )
        return parts

    def _standby(
        self, cluster: str, topic: str, before: Mark | None = None, last: Mark | None = None
    ) -> StandbyRead | None:
        """Where a task may finish a range of ``cluster`` that stops answering: its
        standby when ``cluster`` is declared mirrored there (``kbear.mirror``), with the
        records read before the range and the range's last (``before``, ``last``)."""
        failover = self._fo.mirror(cluster)
        if failover is None or failover.standby is None:
            return None
        return StandbyRead(
            failover.standby,
            self._properties(failover.standby),
            failover.remote_topic(topic),
            failover,
            self._s.failover_after_ms / 1000.0,
            before,
            last,
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """The records of one range, in offset order (runs on an executor).

        Raises:
            TimeoutError: the range's records did not all arrive within
                ``kafkaConsumer.pollTimeoutMs``.
            KafkaException: a fatal consumer error.
        """
        assert isinstance(partition, RangePart)
        return read_range(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: positions live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """Close the metadata consumers and the router's watcher."""
        self._q.close()
        if self._router is not None:
            self._router.close()
