"""Spark's own Kafka connector (``spark-sql-kafka-0-10``, the Java client) against the
backend's clusters, through kbear's routing: ``read_stream(source="kafka")`` over
topics on two clusters, ``write_stream(sink="kafka")``, ``spark.readStream.format("kafka")``
with ``kafka_options()`` as a user writes it, and a route change while a query runs
(``guard`` stops it; the query restarted on its new ``checkpoint_location`` reads
the new cluster). ``run_query``'s supervisor through a rule change (the old cluster
drained, every message read once) and through a failover and fail-back without a
mirror (the old cluster read again from its start, as documented).

One SparkSession for the whole test process (root ``conftest.py``, ``spark_session``):
its JVM starts with the connector's jars, which Maven resolves at the installed
pyspark's version (``integration/spark.py``, ``jvm/spark-kafka/pom.xml``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from integration.backends import Started
from integration.conftest import Harness
from integration.helpers import read_topic, topic_rule, write_yaml_atomically
from integration.spark import stop_queries, wait_for, wait_supervised


@pytest.fixture
def spark(spark_session: tuple[SparkSession, str | None], started: Started) -> Iterator[SparkSession]:
    session, missing = spark_session
    if missing is not None:
        pytest.skip(missing)
    if started.backend.name == "mock":
        pytest.skip("librdkafka's mock clusters do not talk to Java clients (integration/BACKENDS.md)")
    yield session
    stop_queries(session)


def produce(producer: Any, topic: str, label: str, n: int) -> list[bytes]:
    """``n`` messages keyed ``<label>-<i>`` through ``producer`` (flushed); the keys."""
    keys = [f"{label}-{i}".encode() for i in range(n)]
    for key in keys:
        producer.produce(topic, value=b"v-" + key, key=key)
        producer.poll(0)
    assert producer.flush(30) == 0
    return keys


def table_rows(spark: SparkSession, table: str) -> list[tuple[Any, ...]]:
    """``(cluster, topic, key)`` of every row of a memory-sink table."""
    return [(r["cluster"], r["topic"], bytes(r["key"])) for r in spark.table(table).collect()]


def to_memory(df: Any, table: str, checkpoint: str) -> StreamingQuery:
    return (
        df.select("key", "topic", "cluster")
        .writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def test_read_stream_kafka_source_over_two_clusters(it: Harness, spark: SparkSession, tmp_path: Any) -> None:
    from kbear.spark import read_stream

    orders, audit = it.name("orders"), it.name("audit")
    it.create_topic(orders, 3, "A")
    it.create_topic(f"{audit}.v2", 2, "B")
    conf = it.config([topic_rule(orders, "A"), topic_rule(audit, "B", physical=f"{audit}.v2")])
    producer = it.producer(conf)
    sent = {("A", orders, k) for k in produce(producer, orders, "o", 300)}
    sent |= {("B", audit, k) for k in produce(producer, audit, "a", 200)}

    df = read_stream(
        spark, [orders, audit], config=str(conf), options={"startingOffsets": "earliest"}, source="kafka"
    )
    table = "kbear_it_read_two"
    query = to_memory(df, table, str(tmp_path / "ckpt"))
    try:
        wait_for(query, lambda: len(table_rows(spark, table)) >= len(sent), f"{len(sent)} rows")
        time.sleep(1.5)  # a few more micro-batches: nothing may arrive twice
        rows = table_rows(spark, table)
    finally:
        query.stop()
    assert [r for r, n in Counter(rows).items() if n > 1] == []
    assert set(rows) == sent  # logical topic names, the cluster of each row
    sources = query.lastProgress["sources"]
    assert len(sources) == 2 and all("KafkaV2" in s["description"] for s in sources)


def keys_on(bootstrap: str, topic: str, expected: int) -> Counter[bytes]:
    """How often each key is stored in ``topic`` on the cluster at ``bootstrap``."""
    return Counter(bytes(m.key()) for m in read_topic(bootstrap, topic, expected, timeout_s=60))


def test_write_stream_kafka_sink_fixed_topic_and_topic_column(
    it: Harness, spark: SparkSession, tmp_path: Any
) -> None:
    from pyspark.sql import functions as F

    from kbear.spark import read_stream, write_stream

    src, out, left, right = (it.name(p) for p in ("src", "out", "left", "right"))
    it.create_topic(src, 2, "A")
    it.create_topic(f"{out}.v2", 2, "B")
    it.create_topic(left, 1, "A")
    it.create_topic(f"{right}.v2", 1, "B")
    conf = it.config(
        [
            topic_rule(src, "A"),
            topic_rule(out, "B", physical=f"{out}.v2"),
            topic_rule(left, "A"),
            topic_rule(right, "B", physical=f"{right}.v2"),
        ]
    )
    sent = produce(it.producer(conf), src, "s", 200)
    df = read_stream(spark, src, config=str(conf), options={"startingOffsets": "earliest"}, source="kafka")
    fixed = write_stream(
        df.select("key", "value"),
        out,
        checkpoint=str(tmp_path / "fixed"),
        config=str(conf),
        sink="kafka",
        trigger={"processingTime": "500 milliseconds"},
    )
    # a topic column of logical names on two clusters: each micro-batch split per cluster
    even = F.substring_index(F.col("key").cast("string"), "-", -1).cast("int") % 2 == 0
    column = write_stream(
        df.select("key", "value", F.when(even, F.lit(left)).otherwise(F.lit(right)).alias("topic")),
        checkpoint=str(tmp_path / "column"),
        config=str(conf),
        sink="kafka",
        trigger={"processingTime": "500 milliseconds"},
    )
    try:
        for query, bootstrap, topic, n in (
            (fixed, it.bootstrap("B"), f"{out}.v2", 200),
            (column, it.bootstrap("A"), left, 100),
            (column, it.bootstrap("B"), f"{right}.v2", 100),
        ):
            wait_for(query, lambda b=bootstrap, t=topic, n=n: len(read_topic(b, t, n, 1, 0)) >= n, topic)
    finally:
        fixed.stop()
        column.stop()
    assert keys_on(it.bootstrap("B"), f"{out}.v2", 200) == Counter(sent)
    assert keys_on(it.bootstrap("A"), left, 100) == Counter(k for i, k in enumerate(sent) if i % 2 == 0)
    assert keys_on(it.bootstrap("B"), f"{right}.v2", 100) == Counter(k for i, k in enumerate(sent) if i % 2)
    assert read_topic(it.bootstrap("A"), out, 0, 1, 0.2) == []  # nothing on the other cluster


def test_connector_options_as_a_user_writes_them(it: Harness, spark: SparkSession, tmp_path: Any) -> None:
    """``spark.readStream.format("kafka").options(**kafka_options(...))`` and
    ``df.writeStream.format("kafka").options(**write_options(...))``, no kbear call between."""
    from kbear.spark import kafka_options, write_options

    src, copy = it.name("user.src"), it.name("user.copy")
    it.create_topic(f"{src}.v1", 3, "B")
    it.create_topic(copy, 1, "A")
    conf = it.config([topic_rule(src, "B", physical=f"{src}.v1"), topic_rule(copy, "A")])
    sent = produce(it.producer(conf), src, "u", 150)

    options = kafka_options(src, group="reporting", config=str(conf), startingOffsets="earliest")
    assert options["subscribe"] == f"{src}.v1" and options["groupIdPrefix"] == "reporting-kbear-B"
    df = spark.readStream.format("kafka").options(**options).load()
    table = "kbear_it_user_options"
    seen = df.select("key", "topic").writeStream.format("memory").queryName(table)
    read_query = seen.option("checkpointLocation", str(tmp_path / "read")).start()
    write_query = (
        df.select("key", "value")
        .writeStream.format("kafka")
        .options(**write_options(copy, config=str(conf)))
        .option("checkpointLocation", str(tmp_path / "write"))
        .start()
    )
    try:
        wait_for(read_query, lambda: spark.table(table).count() >= 150, "150 rows read")
        wait_for(write_query, lambda: len(read_topic(it.bootstrap("A"), copy, 150, 1, 0)) >= 150, "copy")
    finally:
        read_query.stop()
        write_query.stop()
    rows = spark.table(table).collect()
    assert Counter(bytes(r["key"]) for r in rows) == Counter(sent)
    assert {r["topic"] for r in rows} == {f"{src}.v1"}  # Spark's own column: the physical name
    assert keys_on(it.bootstrap("A"), copy, 150) == Counter(sent)


def test_route_change_guard_stops_and_the_restarted_query_reads_the_new_cluster(
    it: Harness, spark: SparkSession, tmp_path: Any
) -> None:
    """What ``docs/spark-connector.md`` promises for a JVM-connector query paired with
    ``guard`` and ``checkpoint_location``: the query stops on the change; restarted on
    its new checkpoint (``startingOffsets=earliest``) it reads every message of the new
    cluster once; nothing is read twice; the old cluster's messages not read before
    the stop (its backlog, and what producers still sent there) are not read."""
    from kbear import Router
    from kbear.spark import checkpoint_location, guard, read_stream

    topic = it.name("moving")
    it.create_topic(topic, 2)
    conf = it.config([topic_rule(topic, "A")])
    router = Router.from_path(str(conf))
    old_producer = it.producer(conf)  # never reloads: a producer that has not seen the change yet
    first = produce(old_producer, topic, "first", 200)

    base = str(tmp_path / "ckpt")
    before = checkpoint_location(base, topic, router=router)
    options = {"startingOffsets": "earliest"}

    def start(table: str, checkpoint: str) -> StreamingQuery:
        df = read_stream(spark, topic, router=router, options=options, source="kafka")
        return to_memory(df, table, checkpoint)

    query = start("kbear_it_mv1", before)
    stopped = guard(query, topic, router=router, watch_interval_s=0.5)
    try:
        wait_for(query, lambda: len(table_rows(spark, "kbear_it_mv1")) >= 200, "the first 200 rows")
        backlog = produce(old_producer, topic, "backlog", 100)  # on A at the change, maybe unread
        conf.write_rules([topic_rule(topic, "B")])
        query.awaitTermination(60)
        assert not query.isActive
        assert stopped.fired is not None and f"{topic}: A/{topic} -> B/{topic}" in str(stopped.message)
        late = produce(old_producer, topic, "late", 50)  # still sent to A after the stop
        after = checkpoint_location(base, topic, router=router)
        assert after != before
        moved = produce(it.producer(conf), topic, "moved", 150)
        assert router.route(topic).cluster_id == "B"
        query = start("kbear_it_mv2", after)
        wait_for(query, lambda: len(table_rows(spark, "kbear_it_mv2")) >= 150, "150 rows on B")
        time.sleep(1.5)
    finally:
        query.stop()
        stopped.close()
        router.close()
    rows = table_rows(spark, "kbear_it_mv1") + table_rows(spark, "kbear_it_mv2")
    twice = [r for r, n in Counter(rows).items() if n > 1]
    read_a = {k for c, _, k in rows if c == "A"}
    lost = set(first + backlog + late) - read_a
    assert twice == []
    assert {k for c, _, k in rows if c == "B"} == set(moved)
    assert set(first) <= read_a and read_a <= set(first + backlog)
    assert set(late) <= lost and lost <= set(backlog + late)
    it.note(
        f"JVM connector, guard + restart: {len(rows)} read, {len(lost)} lost on the old cluster "
        f"({len(set(backlog) - read_a)} of {len(backlog)} backlog, {len(late)} sent after the stop), 0 twice"
    )


def test_the_spark_pipeline_example_runs_with_the_connector(
    it: Harness, spark_session: tuple[SparkSession, str | None], spark: SparkSession
) -> None:
    """``examples/spark_pipeline.py`` on the backend's clusters (``east`` = A, ``west`` = B),
    Spark's connector given as ``KBEAR_SPARK_JARS``: its own process and SparkSession."""
    from integration.spark import child_env, connector_jars, run_pipeline_example

    it.create_topic("orders", 2, "A")
    it.create_topic("payments", 2, "B")
    it.create_topic("stats.v1", 1, "B")
    conf = it.config(
        [
            topic_rule("orders", "east"),
            topic_rule("stats", "west", physical="stats.v1"),
            {"id": "default-west", "meta": {"rule.isGlobal": True}, "rule": "use cluster west"},
        ],
        clusters={"east": it.bootstrap("A"), "west": it.bootstrap("B")},
    )
    stdout, counted = run_pipeline_example(child_env(conf, jars=connector_jars()), 300, 240)
    assert "reading with Spark's Kafka connector (source=kafka)" in stdout
    assert counted == {"orders": 300, "payments": 300}


Seen = list[tuple[str, bytes]]  # (cluster, key) of each row a supervised query read


def collecting(seen: Seen) -> Callable[[Any, str], StreamingQuery]:
    """``run_query``'s ``build``: each generation appends its micro-batches' rows to ``seen``."""

    def build(df: Any, checkpoint: str) -> StreamingQuery:
        def keep(batch: Any, _batch_id: int) -> None:
            seen.extend((r["cluster"], bytes(r["key"])) for r in batch.select("cluster", "key").collect())

        return (
            df.writeStream.foreachBatch(keep)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    return build


def test_run_query_drains_the_old_cluster_then_reads_the_new_one_from_its_start(
    it: Harness, spark: SparkSession, tmp_path: Any
) -> None:
    """A rule moves the topic from A to B while ``run_query``'s query is behind on A:
    the running generation reads A up to the end offsets seen at the change, then the
    next one reads B from its earliest offsets (what producers wrote there meanwhile
    included): every message read once."""
    from kbear.spark import run_query

    topic = it.name("supervised-move")
    it.create_topic(topic, 2)
    conf = it.config([topic_rule(topic, "A")])
    on_a = produce(it.producer(conf), topic, "a", 400)
    seen: Seen = []
    supervisor = run_query(
        spark,
        [topic],
        collecting(seen),
        checkpoint_root=str(tmp_path / "supervised"),
        config=str(conf),
        options={"startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"},  # behind at the change
        poll_s=0.5,
        drain_timeout_s=100,
    )
    try:
        wait_supervised(supervisor, lambda: len(seen) >= 20, "a first micro-batch on A")
        conf.write_rules([topic_rule(topic, "B")])
        at_change = len(seen)
        on_b = produce(it.producer(conf), topic, "b", 150)  # written on B during the drain
        wait_supervised(supervisor, lambda: bool(supervisor.restarts), "the restart on B")
        read_at_restart = len(seen)
        wait_supervised(supervisor, lambda: len({k for c, k in seen if c == "B"}) >= 150, "B's messages")
        time.sleep(1.5)  # a few more micro-batches: nothing may arrive twice
    finally:
        supervisor.stop()
    assert at_change < len(on_a)  # the query was behind on A when the rule changed
    assert [k for k, n in Counter(seen).items() if n > 1] == []  # 0 read twice
    assert Counter(k for c, k in seen if c == "A") == Counter(on_a)  # A drained: 0 lost
    assert Counter(k for c, k in seen if c == "B") == Counter(on_b)
    assert supervisor.restarts == [
        {
            "generation": 1,
            "reason": f"route change {topic}: A -> B",
            "routes": {topic: f"B/{topic}"},
            "starting": {"B": {topic: {"0": -2, "1": -2}}},  # B's earliest offsets
            "translated": {},
        }
    ]
    it.note(
        f"run_query through a rule change A -> B: {at_change}/{len(on_a)} read on A at the change, "
        f"{read_at_restart - at_change} more read by the drain, then {len(on_b)} on B; 0 lost, 0 twice"
    )


def test_run_query_fails_back_without_a_mirror_and_goes_on_where_it_stopped_on_the_old_cluster(
    it: Harness, spark: SparkSession, tmp_path: Any
) -> None:
    """A declared with B as its standby and no mirror (``kbear.mirror`` left out:
    ``none``): ``kbear failover --apply`` moves ``run_query``'s query to B as a rule
    change would (A drained, B from its earliest offsets), and ``kbear failback
    --apply`` back to A, where the query's first generation committed there: A's
    messages read before the failover are not read again, those written on A since
    are read; nothing is lost."""
    from kbear.cli import main as kbear_cli
    from kbear.spark import run_query

    topic = it.name("supervised-back")
    it.create_topic(topic, 2)
    conf = it.config([topic_rule(topic, "A")])
    clusters = [
        {"id": "A", "meta": {"bootstrap.servers": it.bootstrap("A"), "kbear.failover.to": "B"}},
        {"id": "B", "meta": {"bootstrap.servers": it.bootstrap("B")}},
    ]
    write_yaml_atomically(conf.path / "clusters.yaml", {"clusters": clusters})
    first = produce(it.producer(conf), topic, "a", 100)
    seen: Seen = []
    supervisor = run_query(
        spark,
        [topic],
        collecting(seen),
        checkpoint_root=str(tmp_path / "supervised"),
        config=str(conf),
        options={"startingOffsets": "earliest"},
        poll_s=0.5,
    )
    try:
        wait_supervised(supervisor, lambda: len(seen) >= len(first), "A's messages")
        assert kbear_cli(["failover", "--config", str(conf), "--cluster", "A", "--apply"]) == 0
        wait_supervised(supervisor, lambda: len(supervisor.restarts) == 1, "the restart on B")
        on_b = produce(it.producer(conf), topic, "b", 50)
        wait_supervised(supervisor, lambda: len(seen) >= len(first) + len(on_b), "B's messages")
        assert kbear_cli(["failback", "--config", str(conf), "--cluster", "A", "--apply"]) == 0
        wait_supervised(supervisor, lambda: len(supervisor.restarts) == 2, "the restart on A")
        back = produce(it.producer(conf), topic, "back", 30)
        wait_supervised(supervisor, lambda: set(back) <= {k for c, k in seen if c == "A"}, "A's new messages")
        time.sleep(1.5)  # a few more micro-batches: nothing more may arrive
    finally:
        supervisor.stop()
    assert Counter(k for c, k in seen if c == "B") == Counter(on_b)
    assert Counter(k for c, k in seen if c == "A") == Counter(first + back)  # once each
    over, again = supervisor.restarts
    assert (over["reason"], over["routes"]) == (f"route change {topic}: A -> B", {topic: f"B/{topic}"})
    assert over["starting"] == {"B": {topic: {"0": -2, "1": -2}}}
    assert (again["reason"], again["routes"]) == (f"route change {topic}: B -> A", {topic: f"A/{topic}"})
    # where the first generation stopped on A (it drained A: its end), not A's earliest (-2)
    assert sorted(again["starting"]) == ["A"] and sum(again["starting"]["A"][topic].values()) == len(first)
    assert again["translated"] == {}
    it.note(
        f"run_query failed over A -> B and back without a mirror: {len(first)} read on A, "
        f"{len(on_b)} on B, then A from where it stopped: 0 read again, {len(back)} new; 0 lost"
    )


def test_run_query_restarts_on_a_changed_bootstrap_servers_where_its_query_stopped(
    it: Harness, spark: SparkSession, tmp_path: Any
) -> None:
    """A's ``bootstrap.servers`` changes in ``clusters.yaml`` (the same brokers under
    another name, as when brokers are replaced behind a new address) while
    ``run_query``'s query reads A: Spark's connector fixed its options when the query
    started, so the supervisor starts the next generation with A's new properties,
    where the stopped one committed (as a Python consumer replaces its client of A):
    nothing drained, nothing lost, nothing read twice."""
    from kbear.spark import run_query

    topic = it.name("supervised-props")
    it.create_topic(topic, 2)
    conf = it.config([topic_rule(topic, "A")])
    first = produce(it.producer(conf), topic, "a", 60)
    seen: Seen = []
    supervisor = run_query(
        spark,
        [topic],
        collecting(seen),
        checkpoint_root=str(tmp_path / "supervised"),
        config=str(conf),
        options={"startingOffsets": "earliest"},
        poll_s=0.5,
    )
    try:
        wait_supervised(supervisor, lambda: len(seen) >= len(first), "A's messages")
        renamed = it.bootstrap("A").replace("127.0.0.1", "localhost")
        assert renamed != it.bootstrap("A")
        conf.write_clusters({"A": renamed, "B": it.bootstrap("B")})
        wait_supervised(supervisor, lambda: bool(supervisor.restarts), "the restart with A's new properties")
        then = produce(it.producer(conf), topic, "then", 30)
        wait_supervised(supervisor, lambda: len(seen) >= len(first) + len(then), "A's new messages")
        time.sleep(1.5)  # a few more micro-batches: nothing more may arrive
    finally:
        supervisor.stop()
    assert Counter(k for _, k in seen) == Counter(first + then)  # once each
    (restart,) = supervisor.restarts
    assert (restart["reason"], restart["routes"]) == ("client properties changed: A", {topic: f"A/{topic}"})
    # where generation 0 stopped on A (all of it read), not A's earliest (-2)
    assert sorted(restart["starting"]) == ["A"]
    assert sum(restart["starting"]["A"][topic].values()) == len(first)
