"""kbear.spark end to end with a real local SparkSession (pyspark, Java 17).

One SparkSession for the module (start-up ~15 s here, the first micro-batch of a
query ~20 s while Spark's Python workers start). Clusters run in this process;
Spark's Python workers reach them over TCP on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import SparkSession

from conftest import Rule, keyed, plain_producer, read_all, rewrite_rules, rule
from integration.spark import wait_for
from kbear import Router
from kbear.spark import SparkOptionsError, guard, jvm_kafka_available, read_stream, write_stream
from kbear.testing import EmbeddedCluster


@pytest.fixture
def spark(spark_session: tuple[SparkSession, str | None]) -> Iterator[SparkSession]:
    session, _missing = spark_session
    yield session
    for q in session.streams.active:
        q.stop()


def produce(cluster: EmbeddedCluster, topic: str, pairs: Sequence[tuple[bytes, bytes]]) -> None:
    p = plain_producer(cluster)
    for k, v in pairs:
        p.produce(topic, key=k, value=v)
    assert p.flush(10) == 0


def rows_of(spark: SparkSession, table: str) -> list[Any]:
    return spark.sql(f"SELECT key, topic, cluster, partition, offset FROM {table}").collect()


def test_read_stream_follows_a_route_change_every_message_once(
    spark: SparkSession,
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[[Sequence[Rule]], Path],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    a, b = two_clusters
    orders, audit = unique("orders"), unique("audit")
    for c in (a, b):
        c.create_topic(orders, 4)
        c.create_topic(audit, 2)
    before = [rule("o", "use cluster A", topic=orders), rule("g", "use cluster B", isGlobal=True)]
    conf = make_config(before)
    produce(a, orders, keyed(300, "a"))
    produce(b, audit, keyed(100, "audit"))

    df = read_stream(
        spark, [orders, audit], config=str(conf), options={"startingOffsets": "earliest"}, source="kbear"
    )
    assert df.isStreaming and df.columns[-1] == "cluster"
    table = "kbear_route_change"
    query = (
        df.writeStream.format("memory")
        .queryName(table)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(query, lambda: len(rows_of(spark, table)) >= 400, "the first 400 rows")
        produce(a, orders, keyed(200, "a", start=300))  # A's backlog at the change
        rewrite_rules(conf, [rule("o", "use cluster B", topic=orders), before[1]])
        produce(b, orders, keyed(150, "b"))
        wait_for(query, lambda: len(rows_of(spark, table)) >= 750, "750 rows after the move")
        time.sleep(1.0)  # a few more micro-batches: nothing may be read twice
        rows = rows_of(spark, table)
    finally:
        query.stop()
    seen = [(r["cluster"], r["topic"], r["key"]) for r in rows]
    assert len(seen) == len(set(seen)) == 750
    expected = (
        {("A", orders, k) for k, _ in keyed(500, "a")}
        | {("B", orders, k) for k, _ in keyed(150, "b")}
        | {("B", audit, k) for k, _ in keyed(100, "audit")}
    )
    assert set(seen) == expected
    end = query.lastProgress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    assert end["routes"][orders] == {"cluster": "B", "topic": orders}
    assert end["draining"] == {}


def test_write_stream_kbear_sink_to_a_routed_topic(
    spark: SparkSession,
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    make_config: Callable[[Sequence[Rule]], Path],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    a, b = two_clusters
    src, out = unique("src"), unique("out")
    a.create_topic(src, 2)
    b.create_topic(f"{out}.v2", 2)
    conf = make_config(
        [rule("s", "use cluster A", topic=src), rule("o", f"use cluster B, topic {out}.v2", topic=out)]
    )
    produce(a, src, keyed(120, "s"))
    df = read_stream(spark, src, config=str(conf), options={"startingOffsets": "earliest"}, source="kbear")
    query = write_stream(
        df.select("key", "value"),
        out,
        checkpoint=str(tmp_path / "ckpt"),
        config=str(conf),
        sink="kbear",
        trigger={"processingTime": "200 milliseconds"},
    )
    try:
        wait_for(query, lambda: len(read_all(b, f"{out}.v2", timeout=1)) >= 120, "120 messages on B")
    finally:
        query.stop()
    got = read_all(b, f"{out}.v2")
    assert sorted(m.key() for m in got) == sorted(k for k, _ in keyed(120, "s"))


def test_guard_stops_a_query_when_its_route_changes(
    spark: SparkSession, make_router: Callable[[Sequence[Rule]], Router], tmp_path: Path
) -> None:
    router = make_router([rule("g", "use cluster A", isGlobal=True)])
    query = spark.readStream.format("rate").load().writeStream.format("noop").start()
    seen: list[Any] = []
    g = guard(
        query,
        ["orders"],
        router=router,
        on_change=lambda old, new: seen.append((old, new)),
        watch_interval_s=None,
    )
    rewrite_rules(Path(str(router.config.directory)), [rule("g", "use cluster B", isGlobal=True)])
    router.reload()
    query.awaitTermination(60)
    assert not query.isActive
    assert g.fired is not None and g.message is not None and "orders: A/orders -> B/orders" in g.message
    assert seen and seen[0][1]["orders"].cluster_id == "B"


def test_jvm_connector_plan(
    spark: SparkSession,
    spark_session: tuple[SparkSession, str | None],
    make_router: Callable[[Sequence[Rule]], Router],
) -> None:
    if spark_session[1] is not None:
        pytest.skip(spark_session[1])
    assert jvm_kafka_available(spark)
    router = make_router(
        [
            rule("o", "use cluster A", topic="orders"),
            rule("g", "use cluster B, topic audit.v2", isGlobal=True),
        ]
    )
    df = read_stream(spark, ["orders", "audit"], router=router, source="kafka")
    assert df.isStreaming
    assert {"key", "value", "topic", "partition", "offset", "cluster"} <= set(df.columns)
    with pytest.raises(SparkOptionsError, match=r"kafka\.group\.id"):
        read_stream(
            spark, ["orders", "audit"], router=router, source="kafka", options={"kafka.group.id": "g"}
        )
