"""Wall and CPU time of one task of kbear's Python Spark source, without Spark.

One Apache Kafka broker process (``integration/kafka.py``), one topic of one
partition holding ``--rows`` records of ``--size`` bytes. ``--repeat`` times, the
source's range read (``kbear.spark._read.read_range``, what ``read()`` runs in
Spark's Python worker) reads the whole partition into Arrow record batches of the
source's schema; per read: wall seconds, this process's CPU seconds (every thread:
librdkafka's too) and the reading thread's. ``--property K=V`` adds a librdkafka
property to the reader's (as a cluster's ``clusters.yaml`` properties do: they win
over the source's fetch defaults), e.g. ``fetch.queue.backoff.ms=1000`` (librdkafka's
default); ``--collector-on`` leaves Python's garbage collector on while batches are
fetched and built (the source pauses it).

Printed: one JSON object (``--json-out FILE`` writes it too).

    .venv/bin/python bench/spark_read.py --rows 250000
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the integration/ package

from _common import emit  # type: ignore[import-not-found]
from spark import fill  # type: ignore[import-not-found]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--property", action="append", default=[], metavar="K=V")
    parser.add_argument("--collector-on", action="store_true")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)

    import kbear.spark._read as read
    from integration.kafka import KafkaCluster
    from kbear.spark._source import arrow_schema, spark_schema

    if args.collector_on:
        read.collector_paused = contextlib.nullcontext  # type: ignore[attr-defined,assignment]
    schema = arrow_schema(spark_schema(include_headers=False))
    workdir = Path(tempfile.mkdtemp(prefix="kbear-bench-spark-read-"))
    cluster = KafkaCluster("bench", workdir)
    runs: list[dict[str, float]] = []
    try:
        cluster.create_topic("bench-spark-read", 1)
        fill(cluster.bootstrap_servers, "bench-spark-read", args.rows, args.size)
        props = {"bootstrap.servers": cluster.bootstrap_servers}
        props.update(dict(p.split("=", 1) for p in args.property))
        for _ in range(args.repeat):
            part = read.RangePart(
                "bench", props, "bench-spark-read", "bench", 0, 0, args.rows, False, 120.0, None, schema
            )
            wall, cpu, thread = time.monotonic(), time.process_time(), time.thread_time()
            rows = sum(batch.num_rows for batch in read.read_range(part))
            if rows != args.rows:
                raise RuntimeError(f"read {rows} rows, not {args.rows}")
            runs.append(
                {
                    "wall_s": round(time.monotonic() - wall, 3),
                    "cpu_s": round(time.process_time() - cpu, 3),
                    "thread_cpu_s": round(time.thread_time() - thread, 3),
                }
            )
    finally:
        cluster.close()
    result = {
        "rows": args.rows,
        "size": args.size,
        "properties": args.property,
        "collector_on": args.collector_on,
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
    }
    return emit(result, args.json_out)


if __name__ == "__main__":
    main()
