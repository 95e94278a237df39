"""The ``kbear`` Python streaming data source: Kafka read with confluent-kafka (needs pyspark >= 4.0).

Registered with :func:`kbear.spark.register`; used as
``spark.readStream.format("kbear").option(...).load()``. It honours the option
names and the schema of Spark's Kafka connector (``spark-sql-kafka-0-10``),
so a job can switch between the two; see :class:`KBearDataSource`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from kbear._modes import SwitchMode
from kbear._route import NoRouteError, Route
from kbear._switch import Progress, Switch, SwitchEngine
from kbear._switch_report import tell
from kbear.config import ConfigError
from kbear.router import Router
from kbear.spark._options import SparkOptionsError
from kbear.spark._read import READER_CONF, RangePart, read_range
from kbear.spark._source_settings import SourceSettings, option_bool

__all__ = ["SOURCE_NAME", "KBearDataSource", "KBearStreamReader"]

log = logging.getLogger("kbear.spark")

#: The name the source is registered under (``format("kbear")``).
SOURCE_NAME = "kbear"

_BASE_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
_HEADERS = "headers array<struct<key: string, value: binary>>"
_EARLIEST, _LATEST = -2, -1
_OFFSET_VERSION = 1
_META_TIMEOUT_S = 10.0
# offsets: {"v": 1,
#           "positions": {cluster: {physical topic: {partition: next offset}}},
#           "routes": {logical topic: {"cluster": c, "topic": physical}},
#           "draining": {logical topic: {"cluster": c, "topic": physical, "then": [{"cluster", "topic"}...],
#                                        "since": wall-clock seconds the drain began}}}
# (a drain is read until this source's positions reach the old cluster's high watermarks;
# "then": routes the topic took meanwhile, each drained in turn before the current route;
# "since": the drain's start, so that its duration is measured once, across micro-batches
# and restarts; absent in offsets written before it was recorded: the drain counts from
# the first micro-batch that reads them)
Offsets = dict[str, Any]


def _target(logical: str, where: Mapping[str, Any]) -> Route:
    """The route recorded in offsets as ``{"cluster", "topic"}`` for ``logical``."""
    return Route(str(where["cluster"]), str(where["topic"]), logical, "", "", {})


def source_schema(include_headers: bool) -> str:
    """The DDL schema of the source: the Kafka connector's columns, then ``cluster``."""
    return f"{_BASE_SCHEMA}{', ' + _HEADERS if include_headers else ''}, cluster string"


class KBearDataSource(DataSource):
    """Spark Python data source ``kbear``: Kafka through confluent-kafka, optionally routed.

    Options (case-insensitive; names of Spark's Kafka connector where one exists):

    - ``subscribe`` (required): comma-separated topics (logical names when routed).
    - ``kbear.config``: a kbear configuration directory, readable by the driver:
      routed mode. Each topic is looked up (consumer lookup with ``kbear.group``,
      else producer lookup) with the client of ``kbear.client.id`` /
      ``kbear.client.meta.<k>``, and looked up again before every micro-batch.
    - ``kafka.bootstrap.servers``: one cluster, not routed (exactly one of the
      two); ``kbear.cluster`` names it in offsets and the ``cluster`` column
      (default ``kafka``).
    - ``kafka.<property>``: a librdkafka property for every cluster's reader
      (the cluster's own ``clusters.yaml`` properties win).
    - ``startingOffsets``: ``latest`` (default), ``earliest`` or JSON
      ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest; absent
      partitions start at earliest). Only for a new query.
    - ``maxOffsetsPerTrigger``: most offsets per micro-batch over all
      partitions (Spark >= 4.2; earlier versions read all available).
    - ``includeHeaders``: ``true`` adds the ``headers`` column.
    - ``kbear.switch.start`` (formerly ``kbear.switch.startingOffsets``, still
      read with a DeprecationWarning): where a topic starts on a cluster it
      moves to and was never read there: ``earliest`` (default, nothing lost)
      or ``latest``.
    - ``kafkaConsumer.pollTimeoutMs``: longest wait for a task's records, ms
      (default 120000).

    Refused, with Spark's advice: ``kafka.auto.offset.reset``,
    ``kafka.enable.auto.commit``, ``kafka.key.deserializer``,
    ``kafka.value.deserializer``, ``kafka.interceptor.classes``,
    ``subscribePattern``, ``assign``.

    Schema: ``key`` binary, ``value`` binary, ``topic`` string (logical name),
    ``partition`` int, ``offset`` long, ``timestamp`` timestamp,
    ``timestampType`` int (0 create time, 1 log-append time, -1 none),
    ``headers`` (with ``includeHeaders``), and kbear's ``cluster`` string.

    Offsets (checkpointed JSON) are keyed by cluster, physical topic and
    partition, and record each topic's route: a route change between
    micro-batches first finishes the old cluster's backlog up to the end
    offsets seen when the change was noticed, then reads the new cluster
    (from offsets recorded earlier on it, else ``kbear.switch.start``).
    Messages produced to the old cluster after the change was noticed are not read.
    """

    @classmethod
    def name(cls) -> str:
        """``"kbear"``."""
        return SOURCE_NAME

    def schema(self) -> str:
        """The schema as DDL (see the class docstring)."""
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        return source_schema(option_bool(lowered.get("includeheaders"), False))

    def streamReader(self, schema: StructType) -> KBearStreamReader:
        """A :class:`KBearStreamReader` for the options.

        Raises:
            SparkOptionsError: bad or forbidden options.
            ConfigError: ``kbear.config`` is not a valid configuration.
        """
        return KBearStreamReader(SourceSettings(self.options))


class KBearStreamReader(DataSourceStreamReader):
    """Plans and reads micro-batches of the ``kbear`` source (see :class:`KBearDataSource`).

    Driver side (``initialOffset``, ``latestOffset``, ``partitions``) keeps one
    metadata Consumer per cluster; executors (``read``) open one Consumer per
    task, assigned at the range's start offset (no consumer group joins).
    """

    def __init__(self, settings: SourceSettings) -> None:
        self._s = settings
        self._router = (
            Router.from_source(settings.config_dir, client=settings.client) if settings.config_dir else None
        )
        self._meta: dict[str, tuple[dict[str, str], Consumer]] = {}
        self._last: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to run read() on executors: the router (locks) and the
        # driver's metadata consumers stay behind; read() needs neither.
        return {"_s": self._s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._s = state["_s"]
        # executors may not see the configuration directory: loaded on first driver-side use
        self._router = None
        self._meta = {}
        self._last = None

    # ------------------------------------------------------------------ routing

    def _routes(self, previous: Mapping[str, Route] | None = None) -> dict[str, Route]:
        """Logical topic -> route now (routed) or the fixed cluster (direct)."""
        s = self._s
        if self._router is None and s.config_dir is not None:
            self._router = Router.from_source(s.config_dir, client=s.client)
        if self._router is None:
            props = {"bootstrap.servers": str(s.bootstrap)}
            return {t: Route(s.cluster, t, t, str(s.bootstrap), "-", props) for t in s.topics}
        try:
            self._router.reload()
        except ConfigError as exc:
            log.warning("kbear source: configuration reload refused, keeping the last good one: %s", exc)
        out = {}
        for t in s.topics:
            try:
                out[t] = self._router.route(t, s.group, s.client)
            except NoRouteError:
                if previous is None or t not in previous:
                    raise
                log.warning("kbear source: topic %s has no route any more; keeps %s", t, previous[t])
                out[t] = previous[t]
        return out

    def _properties(self, cluster: str) -> dict[str, str]:
        if self._router is None and self._s.config_dir is not None:
            self._router = Router.from_source(self._s.config_dir, client=self._s.client)
        if self._router is None:
            props = {"bootstrap.servers": str(self._s.bootstrap)}
        else:
            props = dict(self._router.config.clusters[cluster].client_properties)
        merged = dict(self._s.extra)
        merged.update(props)
        return merged

    def _consumer(self, cluster: str) -> Consumer:
        props = self._properties(cluster)
        current = self._meta.get(cluster)
        if current is not None and current[0] == props:
            return current[1]
        if current is not None:
            current[1].close()
        consumer = Consumer({**props, **READER_CONF})
        self._meta[cluster] = (props, consumer)
        return consumer

    def _marks(self, cluster: str, topic: str) -> dict[int, tuple[int, int]]:
        """Partition -> (low, high) watermarks; empty when the topic does not exist."""
        consumer = self._consumer(cluster)
        md = consumer.list_topics(topic, timeout=_META_TIMEOUT_S).topics.get(topic)
        if md is None or md.error is not None:
            return {}
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_META_TIMEOUT_S, cached=False)
            for p in sorted(md.partitions)
        }

    # ------------------------------------------------------------------ offsets

    def _start_positions(self, cluster: str, topic: str, how: str | dict[str, int]) -> dict[str, int]:
        marks = self._marks(cluster, topic)
        out = {}
        for p, (low, high) in marks.items():
            wanted: int
            if isinstance(how, dict):
                wanted = int(how.get(str(p), _EARLIEST))
            else:
                wanted = _EARLIEST if how == "earliest" else _LATEST
            out[str(p)] = low if wanted == _EARLIEST else high if wanted == _LATEST else max(wanted, low)
        return out

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
            offsets["positions"].setdefault(route.cluster_id, {})[route.topic] = self._start_positions(
                route.cluster_id, route.topic, how
            )
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

        Spark < 4.2 calls it without arguments: the previous end is then the
        one this reader last returned.
        """
        if start is None:
            start = self._last if self._last is not None else self.initialOffset()
        new: Offsets = copy.deepcopy(start)
        positions: dict[str, dict[str, dict[str, int]]] = new["positions"]
        previous = {t: _target(t, r) for t, r in new["routes"].items()}
        routes = self._routes(previous)
        # Wall-clock seconds: a drain's start is kept in the checkpoint, read again by a
        # restarted query (another process, another monotonic clock).
        now = time.time()
        engine = self._engine(new, previous, now)
        for logical, route in routes.items():
            current = previous.get(logical)
            if current is not None and (current.cluster_id, current.topic) != (route.cluster_id, route.topic):
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
            if route.topic not in on_cluster:
                on_cluster[route.topic] = self._start_positions(
                    route.cluster_id, route.topic, self._s.switch_start
                )
        marks = self._drive(engine, positions, now)
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
        for logical in routes:
            drain = new["draining"].get(logical)
            if drain is not None:
                for p, (_low, high) in marks.get(logical, {}).items():
                    wanted[(drain["cluster"], drain["topic"], str(p))] = high
                continue
            r = new["routes"][logical]
            known = positions.setdefault(r["cluster"], {}).setdefault(r["topic"], {})
            for p, (low, high) in self._marks(r["cluster"], r["topic"]).items():
                key = str(p)
                if key not in known:
                    # first seen: start here (earliest, as Spark's connector does) and read it next batch
                    known[key] = low
                else:
                    wanted[(r["cluster"], r["topic"], key)] = high
        self._advance(positions, wanted, limit)
        self._last = new
        return new

    def _engine(self, offsets: Offsets, routes: Mapping[str, Route], now: float) -> SwitchEngine:
        """A switch engine holding the drains recorded in ``offsets`` (the checkpoint
        is the truth: a restarted query goes on with the same drains, since the
        time recorded there; they were reported when they began)."""
        engine = SwitchEngine(
            SwitchMode.DRAIN, idle_s=0.0, timeout_s=None, reset_to_end=False, first_probe_s=0.0
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
        self, engine: SwitchEngine, positions: Mapping[str, Mapping[str, Mapping[str, int]]], now: float
    ) -> dict[str, dict[int, tuple[int, int]]]:
        """Probe every drain synchronously (this source's positions on the old cluster
        are its "committed" offsets) and carry out the switches the engine decides.
        Returns logical topic -> the old cluster's watermarks, for drains still running."""
        marks: dict[str, dict[int, tuple[int, int]]] = {}
        tell(engine.outcomes(), "spark", log)  # the drains begun by this batch's route changes
        for _ in range(16):  # a chain of moves is drained one route per round; bounded
            actions = engine.step(now)
            tell(engine.outcomes(), "spark", log)
            if not actions:
                break
            for action in actions:
                if isinstance(action, Switch):
                    log.info("kbear source: %s drained on %s", action.topic, action.old.cluster_id)
                    marks.pop(action.topic, None)
                    continue
                old = action.route
                found = self._marks(old.cluster_id, old.topic)
                read = positions.get(old.cluster_id, {}).get(old.topic, {})
                marks[action.topic] = found
                committed = {p: int(read.get(str(p), low)) for p, (low, _high) in found.items()}
                engine.progress(action.topic, Progress(action.seq, marks=found, committed=committed), now)
        return marks

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
        position is recorded in ``end``).
        """
        logical_of: dict[tuple[str, str], str] = {}
        for offsets in (start, end):
            for t, r in offsets["routes"].items():
                logical_of.setdefault((r["cluster"], r["topic"]), t)
            for t, d in offsets["draining"].items():
                logical_of.setdefault((d["cluster"], d["topic"]), t)
        parts: list[InputPartition] = []
        for cluster, topics in end["positions"].items():
            for topic, ends in topics.items():
                starts = start["positions"].get(cluster, {}).get(topic, {})
                for p, stop in ends.items():
                    begin = starts.get(p)
                    if begin is None or stop <= begin:
                        continue
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
                        )
                    )
        return parts

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
        for _props, consumer in self._meta.values():
            consumer.close()
        self._meta.clear()
        if self._router is not None:
            self._router.close()
