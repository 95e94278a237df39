"""Routed Structured Streaming reads and writes (pyspark imported only when called)."""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kbear._identity import Client
from kbear._route import NoRouteError, Route
from kbear.config import KBearConfig
from kbear.router import Router
from kbear.spark._options import (
    FORBIDDEN_READ_OPTIONS,
    SparkOptionsError,
    _router,
    check_options,
    route_topics,
    same_route,
    source_options,
    topic_names,
    translate_properties,
    write_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["RouteGuard", "guard", "jvm_kafka_available", "read_stream", "register", "write_stream"]

log = logging.getLogger("kbear.spark")


def register(spark: SparkSession) -> None:
    """Register the ``kbear`` Python streaming source with ``spark`` (idempotent).

    Then ``spark.readStream.format("kbear")`` works; see
    :class:`kbear.spark.KBearDataSource` for its options and schema.

    Raises:
        ImportError: pyspark (>= 4.0) or pyarrow is not installed.
    """
    from kbear.spark._source import KBearDataSource

    spark.dataSource.register(KBearDataSource)


def jvm_kafka_available(spark: SparkSession) -> bool:
    """Whether Spark's JVM Kafka connector (``spark-sql-kafka-0-10``) is usable in ``spark``.

    Asked through Spark's public API: a Kafka stream read without options, which
    the connector, when Spark finds it, refuses for want of ``subscribe`` /
    ``subscribePattern`` / ``assign`` (``IllegalArgumentException``); without it,
    Spark refuses the format (``KAFKA_DATA_SOURCE_NOT_ENABLED``). Nothing is read
    and no job runs. Under Spark Connect the server answers. Any other failure
    answers False.
    """
    from pyspark.errors import IllegalArgumentException

    try:
        spark.readStream.format("kafka").load().schema  # noqa: B018 (Spark Connect analyses here)
    except IllegalArgumentException as exc:
        return "subscribe" in str(exc)  # the connector's own check of its options ran
    except Exception:
        return False
    return True


def _config_dir(router: Router | None, config: str | None) -> str:
    directory = config if config is not None else (router.config.directory if router is not None else None)
    if directory is None:
        raise ValueError(
            "the kbear source and sink need a configuration directory: pass config= or a "
            "router loaded from a directory"
        )
    return str(directory)


def _choose(spark: SparkSession, source: str) -> str:
    if source not in ("auto", "kafka", "kbear"):
        raise ValueError(f"source must be 'auto', 'kafka' or 'kbear', got {source!r}")
    if source == "auto":
        return "kafka" if jvm_kafka_available(spark) else "kbear"
    return source


def read_stream(
    spark: SparkSession,
    topics: str | Iterable[str],
    *,
    group: str | None = None,
    client: Client | None = None,
    router: Router | None = None,
    config: str | None = None,
    options: Mapping[str, str] | None = None,
    source: str = "auto",
) -> DataFrame:
    """A streaming DataFrame of routed topics, on as many clusters as the routes name.

    Args:
        spark: the session.
        topics: logical topic names (iterable, or comma-separated ``str``).
        group: consumer group for consumer lookups; None makes producer lookups.
        client: who reads (``client.*`` factors); anonymous when None.
        router: a :class:`~kbear.Router`; or ``config``, a configuration directory.
        options: more source options (``startingOffsets``, ``maxOffsetsPerTrigger``,
            ``includeHeaders``, ``kafka.*``); the forbidden ones are refused.
        source: ``"kafka"`` (Spark's JVM connector: one source per cluster,
            named ``kbear_<cluster>`` where the session enables source names:
            Spark >= 4.2 with ``spark.sql.streaming.queryEvolution.enableSourceEvolution``,
            unioned by name), ``"kbear"`` (the Python source, which routes and
            follows route changes itself) or ``"auto"`` (``kafka`` when its
            classes load, else ``kbear``).

    Returns:
        Columns of Spark's Kafka source (``key``, ``value``, ``topic`` with the
        logical name, ``partition``, ``offset``, ``timestamp``,
        ``timestampType``, ``headers`` with ``includeHeaders``) plus ``cluster``.

    Raises:
        SparkOptionsError: forbidden options, ``kafka.group.id`` with topics on
            several clusters, an untranslatable cluster property (``kafka``).
        NoRouteError: a topic has no route.
        ValueError: ``source="kbear"`` without a configuration directory.

    With ``source="kafka"`` the routes are fixed when the query starts: pair
    the query with :func:`guard` and :func:`kbear.spark.checkpoint_location`.
    """
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts, FORBIDDEN_READ_OPTIONS)
    if _choose(spark, source) == "kbear":
        register(spark)
        kbear = {"kbear.config": _config_dir(router, config), "subscribe": ",".join(topic_names(topics))}
        if group is not None:
            kbear["kbear.group"] = group
        if client is not None:
            kbear.update({f"kbear.client.meta.{k}": v for k, v in client.meta.items()})
            if client.id is not None:
                kbear["kbear.client.id"] = client.id
        return spark.readStream.format("kbear").options(**kbear, **opts).load()
    routes = route_topics(topics, group=group, client=client, router=_router(router, config, client))
    return jvm_frames(spark, routes, group, opts)


def jvm_frames(
    spark: SparkSession,
    routes: Mapping[str, Route],
    group: str | None,
    opts: Mapping[str, str],
    per_cluster: Mapping[str, Mapping[str, str]] | None = None,
) -> DataFrame:
    """Spark's Kafka connector over ``routes`` (logical topic -> route): one source per
    cluster (options: the cluster's translated properties, ``subscribe``,
    ``groupIdPrefix``, ``opts``, then ``per_cluster[cluster]``), the ``topic`` column
    mapped back to logical names, a ``cluster`` column, unioned by name.

    Raises:
        SparkOptionsError: ``kafka.group.id`` with topics on several clusters, an
            untranslatable cluster property.
    """
    from pyspark.sql import functions as F

    by_cluster: dict[str, list[str]] = {}
    for logical, route in routes.items():
        by_cluster.setdefault(route.cluster_id, []).append(logical)
    if len(by_cluster) > 1 and "kafka.group.id" in opts:
        raise SparkOptionsError(
            [
                "kafka.group.id would be shared by the sources of several clusters; leave it unset "
                "(each cluster's source gets its own groupIdPrefix)"
            ]
        )
    from pyspark.sql.streaming.readwriter import DataStreamReader

    # sources are named where the session names them: Spark >= 4.2 with
    # spark.sql.streaming.queryEvolution.enableSourceEvolution=true (off by default; a
    # named source then fails when the query is analysed, not when named)
    evolution = spark.conf.get("spark.sql.streaming.queryEvolution.enableSourceEvolution", "false")
    named = hasattr(DataStreamReader, "name") and str(evolution).strip().lower() == "true"
    frames = []
    for cluster, logicals in sorted(by_cluster.items()):
        options = source_options([routes[t] for t in logicals], group, opts)
        options.update((per_cluster or {}).get(cluster, {}))
        reader = spark.readStream.format("kafka").options(**options)
        if named:
            reader = reader.name(f"kbear_{re.sub(r'[^A-Za-z0-9_]', '_', cluster)}")
        df = reader.load()
        pairs = [x for t in logicals for x in (F.lit(routes[t].topic), F.lit(t))]
        df = df.withColumn("topic", F.coalesce(F.create_map(*pairs)[F.col("topic")], F.col("topic")))
        frames.append(df.withColumn("cluster", F.lit(cluster)))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


# --------------------------------------------------------------------------- sink


def _produce_partition(
    rows: Iterator[Any], config_dir: str, client: Client | None, fixed: str | None, native: Mapping[str, str]
) -> None:
    """Write ``rows`` (key, value, topic, headers) with a RoutedProducer (runs on executors)."""
    from kbear.producer import RoutedProducer

    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    conf = {**native, "kbear.config": config_dir, "kbear.reload.interval.ms": 0}
    with RoutedProducer(conf, client=client) as producer:
        for row in rows:
            data = row.asDict()
            topic = fixed if fixed is not None else data.get("topic")
            if topic is None:
                raise ValueError("row without a topic: give write_stream(topic=...) or a 'topic' column")
            headers = data.get("headers")
            producer.produce(
                topic,
                value=data.get("value"),
                key=data.get("key"),
                headers=[(h["key"], h["value"]) for h in headers] if headers else None,
                on_delivery=report,
            )
            producer.poll(0)
        remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"kbear sink: {remaining} message(s) undelivered, errors: {errors[:5]}")


def write_stream(
    df: DataFrame,
    topic: str | None = None,
    *,
    checkpoint: str,
    client: Client | None = None,
    router: Router | None = None,
    config: str | None = None,
    options: Mapping[str, str] | None = None,
    sink: str = "auto",
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start a streaming query writing ``df`` (``value``, optional ``key``, ``headers``,
    ``topic``) to routed topics.

    Args:
        df: a streaming DataFrame; ``key``/``value`` strings are cast to binary.
        topic: a fixed logical topic; None: each row's ``topic`` column (logical
            names, which may route to several clusters).
        checkpoint: the checkpoint directory (see :func:`kbear.spark.checkpoint_location`).
        client: who writes (producer lookups); router/config: as :func:`read_stream`.
        options: more sink options (``kafka.*`` for the JVM sink; librdkafka
            properties for the kbear sink).
        sink: ``"kafka"`` (Spark's JVM connector), ``"kbear"`` (each micro-batch
            written by a :class:`~kbear.RoutedProducer` per Spark partition,
            through ``foreachBatch``; at-least-once) or ``"auto"``.
        trigger: keyword arguments of ``DataStreamWriter.trigger`` (e.g.
            ``{"processingTime": "5 seconds"}``).
        query_name: the query's name; output_mode: ``append``, ``update`` or ``complete``.

    Returns:
        The started ``StreamingQuery``.

    Raises:
        SparkOptionsError: forbidden options or an untranslatable property.
        NoRouteError: the fixed topic (``kafka``) has no route; with a topic
            column the micro-batch fails instead.

    The JVM sink with a fixed topic routes once, at start: pair it with
    :func:`guard`. With a ``topic`` column (JVM) each micro-batch is split by
    cluster, routed when the batch runs. The kbear sink routes every batch.
    """
    from pyspark.sql import functions as F

    opts = {str(k): str(v) for k, v in (options or {}).items()}
    chosen = _choose(df.sparkSession, sink)
    data = df
    for name in ("key", "value"):
        if name in df.columns:
            data = data.withColumn(name, F.col(name).cast("binary"))
    if chosen == "kafka" and topic is not None and "topic" in data.columns:
        data = data.drop("topic")
    writer = data.writeStream.option("checkpointLocation", checkpoint).outputMode(output_mode)
    if query_name is not None:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    if chosen == "kafka" and topic is not None:
        return (
            writer.format("kafka")
            .options(**write_options(topic, client=client, router=router, config=config, **opts))
            .start()
        )
    if chosen == "kafka":
        routed = _router(router, config, client)
        return writer.foreachBatch(lambda batch, _batch_id: _write_split(batch, routed, client, opts)).start()
    directory = _config_dir(router, config)

    def write_batch(batch: DataFrame, _batch_id: int) -> None:
        wanted = [c for c in ("key", "value", "topic", "headers") if c in batch.columns]
        batch.select(*wanted).foreachPartition(
            lambda rows: _produce_partition(rows, directory, client, topic, opts)
        )

    return writer.foreachBatch(write_batch).start()


def _write_split(batch: DataFrame, router: Router, client: Client | None, opts: Mapping[str, str]) -> None:
    """Write one micro-batch with a ``topic`` column through the JVM sink, one write per cluster."""
    from pyspark.sql import functions as F

    try:
        router.reload()
    except Exception as exc:
        log.warning("kbear sink: configuration reload refused: %s", exc)
    topics = [r["topic"] for r in batch.select("topic").distinct().collect()]
    routes = {t: router.route_producer(t, client) for t in topics}
    by_cluster: dict[str, list[str]] = {}
    for t, r in routes.items():
        by_cluster.setdefault(r.cluster_id, []).append(t)
    for cluster, logicals in by_cluster.items():
        first = routes[logicals[0]]
        pairs = [x for t in logicals for x in (F.lit(t), F.lit(routes[t].topic))]
        part = batch.filter(F.col("topic").isin(logicals)).withColumn(
            "topic", F.create_map(*pairs)[F.col("topic")]
        )
        part.write.format("kafka").options(
            **translate_properties(first.properties, cluster=cluster), **opts
        ).save()


# --------------------------------------------------------------------------- guard


class RouteGuard:
    """Stops a streaming query when the route of one of its topics changes.

    Made by :func:`guard`. Call :meth:`close` to detach it (also done when it fires).

    Attributes:
        fired: ``(old_routes, new_routes)`` once the guard has stopped the query, else None.
        message: the reason given, once fired.
    """

    def __init__(
        self,
        query: StreamingQuery,
        router: Router,
        routes: Mapping[str, Route],
        group: str | None,
        client: Client | None,
        on_change: Callable[[dict[str, Route], dict[str, Route | None]], None] | None,
    ) -> None:
        self._query = query
        self._router = router
        self._routes = dict(routes)
        self._group = group
        self._client = client
        self._on_change = on_change
        self._lock = threading.Lock()
        self.fired: tuple[dict[str, Route], dict[str, Route | None]] | None = None
        self.message: str | None = None
        router.subscribe(self._check)

    def _lookup(self, topic: str) -> Route | None:
        try:
            return self._router.route(topic, self._group, self._client)
        except NoRouteError:
            return None

    def _check(self, _old: KBearConfig, _new: KBearConfig) -> None:
        with self._lock:
            if self.fired is not None:
                return
            now = {t: self._lookup(t) for t in self._routes}
            moved = {t: r for t, r in now.items() if r is None or not same_route(r, self._routes[t])}
            if not moved:
                return
            self.message = (
                "kbear: route changed for "
                + ", ".join(
                    f"{t}: {self._routes[t].cluster_id}/{self._routes[t].topic} -> "
                    f"{'no route' if r is None else f'{r.cluster_id}/{r.topic}'}"
                    for t, r in moved.items()
                )
                + "; stopping the query: restart it with the new routes and a new checkpoint_location()"
            )
            self.fired = (dict(self._routes), now)
        log.warning("%s (query %s)", self.message, self._query.name or self._query.id)
        if self._on_change is not None:
            try:
                self._on_change(dict(self._routes), now)
            except Exception:
                log.exception("kbear guard callback failed")
        try:
            self._query.stop()
        finally:
            self.close()

    def close(self) -> None:
        """Stop watching route changes."""
        self._router.unsubscribe(self._check)


def guard(
    query: StreamingQuery,
    topics: str | Iterable[str],
    *,
    router: Router,
    group: str | None = None,
    client: Client | None = None,
    on_change: Callable[[dict[str, Route], dict[str, Route | None]], None] | None = None,
    watch_interval_s: float | None = 10.0,
) -> RouteGuard:
    """Stop ``query`` (with a logged reason and ``on_change``) when a topic's route changes.

    For queries over Spark's JVM connector, whose routes are fixed at start.
    The routes in force when ``guard`` is called are the reference.

    Args:
        query: the running query.
        topics, group, client: the lookups the query was built from.
        router: the router to watch; its watcher is started with
            ``watch_interval_s`` seconds unless that is None (then call
            ``router.reload()`` yourself).
        on_change: ``on_change(old_routes, new_routes)``, called in the
            reloading thread before the query is stopped (``new_routes`` values
            are None for topics without a route any more).

    Returns:
        The :class:`RouteGuard` (``fired``, ``message``, ``close()``).

    Raises:
        NoRouteError: a topic has no route now.
    """
    routes = route_topics(topics, group=group, client=client, router=router)
    if watch_interval_s is not None and router.config.directory is not None:
        router.watch(watch_interval_s)
    return RouteGuard(query, router, routes, group, client, on_change)
