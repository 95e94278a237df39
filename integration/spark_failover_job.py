"""A Spark application reading one routed topic with kbear's Python source, for the
failover test on a Spark standalone cluster; the tests run it as a child process:

    python -m integration.spark_failover_job TOPIC OUT STOP CHECKPOINT OPTIONS_JSON

with ``KBEAR_CONFIG`` and ``KBEAR_SPARK_MASTER`` set (:func:`integration.spark.child_env`).
Each micro-batch's rows are appended to ``OUT`` as JSON lines ``[cluster, value,
partition, offset]`` (on the driver, through ``foreachBatch``); the query stops once
the file ``STOP`` exists (or after 15 minutes). Exit status 0 when the query ran
without an exception, 1 otherwise (the exception on stderr).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def main(topic: str, out: str, stop: str, checkpoint: str, options: str) -> int:
    from pyspark.sql import DataFrame

    from integration.spark import session
    from kbear.spark import read_stream

    spark = session(None, os.environ["KBEAR_SPARK_MASTER"], "kbear-failover-job")
    df = read_stream(
        spark, [topic], config=os.environ["KBEAR_CONFIG"], source="kbear", options=json.loads(options)
    )

    def keep(batch: DataFrame, _batch_id: int) -> None:
        rows: list[Any] = batch.select("cluster", "value", "partition", "offset").collect()
        with open(out, "a", encoding="utf-8") as f:
            for r in rows:
                f.write(
                    json.dumps([r["cluster"], bytes(r["value"]).decode(), r["partition"], r["offset"]]) + "\n"
                )

    query = (
        df.writeStream.foreachBatch(keep)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    deadline = time.monotonic() + 900
    while not Path(stop).exists() and time.monotonic() < deadline and query.isActive:
        query.awaitTermination(0.5)
    failed = query.exception()
    query.stop()
    spark.stop()
    if failed is not None:
        print(f"the query failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
