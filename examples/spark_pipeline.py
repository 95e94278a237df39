"""A routed Spark Structured Streaming job: read two topics that live on two clusters,
count messages per topic and 10-second window, write the counts to a routed topic.

    .venv/bin/pip install -e '.[spark]'        # pyspark >= 4.0, pyarrow; needs Java 17+
    .venv/bin/python examples/spark_pipeline.py [--messages N]

Without ``KBEAR_CONFIG`` it starts two embedded clusters (``east``, ``west``) in this
process and writes a configuration for them: ``orders`` on east, ``payments`` on
west, ``stats`` on west as ``stats.v1``. No bootstrap server appears in the job:
:func:`kbear.spark.read_stream` routes the topics (Spark's JVM Kafka connector when
its classes load, else the ``kbear`` Python source) and
:func:`kbear.spark.write_stream` writes the counts. With ``KBEAR_CONFIG=dir`` the job
uses that configuration (real clusters, e.g. two Apache Kafka clusters) and produces
nothing itself unless ``--produce`` is given. ``KBEAR_SPARK_JARS`` (comma-separated
paths) puts Spark's Kafka connector on the session's classpath (``spark.jars``; the
embedded clusters do not talk to Java clients, so use it with ``KBEAR_CONFIG``).
``KBEAR_SPARK_MASTER`` (default ``local[2]``) runs it on a cluster manager, e.g. a
standalone master ``spark://127.0.0.1:7077`` whose workers run on this machine (the
configuration directory and this interpreter must be where the executors run).
Exit status 0 when every produced message was counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml
from confluent_kafka import Consumer, TopicPartition

from kbear import RoutedProducer, Router
from kbear.testing import EmbeddedCluster

TOPICS = ["orders", "payments"]


def write_demo_config(directory: Path, east: EmbeddedCluster, west: EmbeddedCluster) -> None:
    clusters = [
        {"id": "east", "meta": {"bootstrap.servers": east.bootstrap_servers}},
        {"id": "west", "meta": {"bootstrap.servers": west.bootstrap_servers}},
    ]
    rules = [
        {"id": "orders-east", "meta": {"topic.id": "orders"}, "rule": "use cluster east"},
        {"id": "stats-west", "meta": {"topic.id": "stats"}, "rule": "use cluster west, topic stats.v1"},
        {"id": "default-west", "meta": {"rule.isGlobal": True}, "rule": "use cluster west"},
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}))


def produce_demo_messages(config_dir: str, count: int) -> None:
    """``count`` keyed messages to each topic, through a :class:`kbear.RoutedProducer`."""
    with RoutedProducer({"kbear.config": config_dir, "kbear.reload.interval.ms": 0}) as producer:
        for topic in TOPICS:
            for i in range(count):
                producer.produce(topic, key=f"{topic}-{i}".encode(), value=b"{}")
                producer.poll(0)
            if producer.flush(30):
                raise RuntimeError(f"{topic}: messages not delivered within 30 s")
            route = producer.route(topic)
            print(f"produced {count} to {topic} on {route.cluster_id}/{route.topic}")


def read_counts(router: Router) -> dict[str, int]:
    """The latest count per (topic, window) in the stats topic, summed per topic."""
    route = router.route_producer("stats")
    c = Consumer({**route.properties, "group.id": "spark-pipeline-check"})
    latest: dict[tuple[str, str], int] = {}
    try:
        md = c.list_topics(route.topic, timeout=5).topics.get(route.topic)
        if md is None or md.error is not None:
            return {}
        parts = []
        for p in md.partitions:
            low, high = c.get_watermark_offsets(TopicPartition(route.topic, p), timeout=5)
            if high > low:
                parts.append((TopicPartition(route.topic, p, low), high))
        c.assign([tp for tp, _ in parts])
        wanted = sum(high - tp.offset for tp, high in parts)
        got = 0
        deadline = time.monotonic() + 10
        while got < wanted and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.2):
                if msg.error() is None:
                    got += 1
                    row = json.loads(msg.value())
                    latest[(row["topic"], row["window"]["start"])] = row["count"]
    finally:
        c.close()
    out: dict[str, int] = {}
    for (topic, _window), count in latest.items():
        out[topic] = out.get(topic, 0) + count
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500, help="messages per topic (default 500)")
    parser.add_argument("--timeout", type=float, default=180.0, help="longest run, seconds")
    parser.add_argument(
        "--produce", action="store_true", help="with KBEAR_CONFIG: produce --messages per topic first"
    )
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from kbear.spark import checkpoint_location, jvm_kafka_available, read_stream, write_stream

    work = Path(tempfile.mkdtemp(prefix="kbear-spark-"))
    clusters: list[EmbeddedCluster] = []
    config_dir = os.environ.get("KBEAR_CONFIG")
    if config_dir is None:
        east, west = EmbeddedCluster(), EmbeddedCluster()
        clusters = [east, west]
        config_dir = str(work / "config")
        Path(config_dir).mkdir()
        write_demo_config(Path(config_dir), east, west)
    router = Router.from_path(config_dir)
    produce = bool(clusters) or args.produce
    if produce:
        produce_demo_messages(config_dir, args.messages)

    builder = SparkSession.builder
    if os.environ.get("KBEAR_SPARK_JARS"):
        builder = builder.config("spark.jars", os.environ["KBEAR_SPARK_JARS"])
    spark = (
        builder.master(os.environ.get("KBEAR_SPARK_MASTER", "local[2]"))
        .appName("kbear-spark-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    if jvm_kafka_available(spark):
        print("reading with Spark's Kafka connector (source=kafka)")
    else:
        print("reading with kbear's Python source (source=kbear; Spark's Kafka connector absent)")
    try:
        events = read_stream(spark, TOPICS, config=config_dir, options={"startingOffsets": "earliest"})
        counts = events.groupBy(F.window("timestamp", "10 seconds"), "topic").count()
        out = counts.select(
            F.col("topic").alias("key"), F.to_json(F.struct("topic", "window", "count")).alias("value")
        )
        query = write_stream(
            out,
            "stats",
            checkpoint=checkpoint_location(str(work / "checkpoints"), TOPICS, router=router),
            config=config_dir,
            output_mode="update",
            trigger={"processingTime": "1 second"},
        )
        expected = {t: args.messages for t in TOPICS} if produce else None
        totals: dict[str, int] = {}
        while time.monotonic() - started < args.timeout:
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr)
                return 1
            totals = read_counts(router)
            if expected is not None and totals == expected:
                break
            time.sleep(1.0)
        query.stop()
    finally:
        spark.stop()
        for c in clusters:
            c.close()
    counted = dict(sorted(totals.items()))
    print(f"counted per topic (from the routed 'stats' topic): {counted}; {time.monotonic() - started:.1f} s")
    if expected is not None and totals != expected:
        print(f"expected {expected}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
