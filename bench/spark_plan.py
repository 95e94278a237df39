"""CPU time of the Python process Spark starts to plan each query of the ``kbear`` source.

Spark (4.x) starts a fresh interpreter for a Python streaming source's planning
(``pyspark.sql.streaming.python_streaming_source_runner``), which unpickles the data
source class (importing its module), then calls ``streamReader()`` and the
reader's offsets and partitions. ``--runs`` fresh processes each do those first
steps off Spark and without a cluster: the runner module imported, the source's
module imported, ``schema()``, then ``streamReader()`` routed by a one-cluster
configuration (what ``bench/spark.py`` uses). Printed (one JSON object): the median
CPU ms of each step, the modules the steps after the runner import, and the
machine's load averages before and after (figures are upper bounds on a busy machine).

    .venv/bin/python bench/spark_plan.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_STEPS = """
import sys, time
t = [time.process_time()]
import pyspark.sql.streaming.python_streaming_source_runner
t.append(time.process_time()); before = set(sys.modules)
from kbear.spark._source import KBearDataSource, spark_schema
t.append(time.process_time())
source = KBearDataSource({"subscribe": "t", "kbear.config": sys.argv[1]})
source.schema()
t.append(time.process_time())
reader = source.streamReader(spark_schema(False))
t.append(time.process_time())
print(t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], len(set(sys.modules) - before))
reader.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp)
        (conf / "clusters.yaml").write_text(
            "clusters:\n  - id: bench\n    meta:\n      bootstrap.servers: 127.0.0.1:1\n"
        )
        (conf / "route-rules.yaml").write_text(
            "route-rules:\n  - id: all\n    priority: 0\n    meta: {rule.isGlobal: true}\n    rule: use cluster bench\n"
        )
        runs = [
            [
                float(x)
                for x in subprocess.run(
                    [sys.executable, "-c", _STEPS, str(conf)],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=120,
                ).stdout.split()
            ]
            for _ in range(args.runs)
        ]
    names = ("pyspark_runner", "source_module", "schema", "stream_reader")
    result = {
        "runs": args.runs,
        "cpu_ms_median": {
            n: round(1000 * statistics.median(r[i] for r in runs), 1) for i, n in enumerate(names)
        },
        "kbear_cpu_ms_median": round(1000 * statistics.median(sum(r[1:4]) for r in runs), 1),
        "modules_after_runner": int(runs[-1][4]),
        "load_average": {"before": load_before, "after": os.getloadavg()},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
