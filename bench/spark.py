"""Rows per second of kbear's Python Spark source beside Spark's own Kafka connector.

One Apache Kafka broker process (``integration/kafka.py``), one topic of
``--partitions`` partitions holding ``--rows`` records of ``--size`` bytes. One
SparkSession (``local[2]``, Spark's Kafka connector on its classpath,
``integration/spark.py``) reads the whole topic with
``kbear.spark.read_stream(..., source=S)`` for S in ``kafka`` (the connector) and
``kbear`` (the Python source, routed by a one-cluster configuration), each query
``trigger(availableNow=True)`` into the ``noop`` sink from ``startingOffsets:
earliest`` on a fresh checkpoint. A warm-up query of each source runs first; then
``--rounds`` rounds, the two sources taking turns (which goes first alternates).
Time: from ``start()`` to the end of ``awaitTermination()`` (wall clock); rows: the
sum of the query's ``numInputRows``.

Printed (one JSON object; ``--json-out FILE`` writes it too): each source's rows/s
per round and median, ``ratio``: the median kbear rows/s over the median
connector rows/s (target >= 0.9 on 1,000,000 rows), and the machine's load
averages (1, 5, 15 minutes) before and after.

    .venv/bin/python bench/spark.py --rows 1000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the integration/ package

from _common import emit  # type: ignore[import-not-found]
from confluent_kafka import Producer


def fill(bootstrap: str, topic: str, rows: int, size: int) -> float:
    """``rows`` records of ``size`` bytes (keys spread over the partitions); seconds taken."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "compression.type": "none"}
    )
    value = b"x" * size
    began = time.monotonic()
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value, key=str(i % 1024).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - began


def run_query(spark: Any, source: str, topic: str, config: str, workdir: Path, n: int) -> tuple[float, int]:
    """One availableNow query of ``source`` over ``topic``: (seconds, rows read)."""
    from kbear.spark import read_stream

    df = read_stream(spark, [topic], config=config, source=source, options={"startingOffsets": "earliest"})
    began = time.monotonic()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(workdir / f"ckpt-{source}-{n}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    took = time.monotonic() - began
    if query.exception() is not None:
        raise RuntimeError(f"{source}: {query.exception()}")
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return took, rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)

    from integration.kafka import KafkaCluster
    from integration.spark import connector_jars, session

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="kbear-bench-spark-"))
    cluster = KafkaCluster("bench", workdir)
    try:
        topic = "bench-spark"
        cluster.create_topic(topic, args.partitions)
        fill_s = fill(cluster.bootstrap_servers, topic, args.rows, args.size)
        config = workdir / "conf"
        config.mkdir()
        (config / "clusters.yaml").write_text(
            f"clusters:\n  - id: bench\n    meta:\n      bootstrap.servers: {cluster.bootstrap_servers}\n"
        )
        (config / "route-rules.yaml").write_text(
            "route-rules:\n  - id: all\n    priority: 0\n    meta: {rule.isGlobal: true}\n"
            "    rule: use cluster bench\n"
        )
        spark = session(connector_jars())
        spark.sparkContext.setLogLevel("ERROR")
        n = 0
        for source in ("kafka", "kbear"):  # warm-up
            run_query(spark, source, topic, str(config), workdir, n := n + 1)
        rates: dict[str, list[float]] = {"kafka": [], "kbear": []}
        for r in range(args.rounds):
            for source in ("kafka", "kbear") if r % 2 == 0 else ("kbear", "kafka"):
                took, rows = run_query(spark, source, topic, str(config), workdir, n := n + 1)
                if rows != args.rows:
                    raise RuntimeError(f"{source} read {rows} rows, not {args.rows}")
                rates[source].append(rows / took)
        spark.stop()
    finally:
        cluster.close()
    median = {s: statistics.median(v) for s, v in rates.items()}
    import pyspark

    result = {
        "rows": args.rows,
        "size": args.size,
        "partitions": args.partitions,
        "fill_s": round(fill_s, 1),
        "rows_per_s": {s: [round(x) for x in v] for s, v in rates.items()},
        "median_rows_per_s": {s: round(v) for s, v in median.items()},
        "ratio": round(median["kbear"] / median["kafka"], 3),
        "pyspark": pyspark.__version__,
        "kafka": getattr(cluster, "version", None),
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }
    return emit(result, args.json_out)


if __name__ == "__main__":
    main()
