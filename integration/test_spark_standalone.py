"""The example pipeline (``examples/spark_pipeline.py``) on a Spark standalone cluster:
pyspark's own ``sbin`` starting a master and two workers on 127.0.0.1
(``integration/standalone.py``), the job's executors on the workers, reading and
writing routed topics with kbear's Python source and sink on two Apache Kafka
clusters of its own.
"""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from integration.backends import BackendUnavailable
from integration.conftest import Harness
from integration.helpers import topic_rule
from integration.standalone import StandaloneCluster


@pytest.fixture
def standalone(it: Harness, tmp_path: Path) -> Iterator[StandaloneCluster | None]:
    """A Spark standalone cluster (master + 2 workers on 127.0.0.1), None where it cannot
    start; None on the mock backend (the test skips there)."""
    if it.backend.name == "mock":
        yield None
        return
    try:
        cluster = StandaloneCluster(tmp_path / "standalone")
    except BackendUnavailable as exc:
        logging.getLogger("kbear.it").warning("no Spark standalone cluster: %s", exc)
        yield None
        return
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.timeout(900)  # two clusters, the standalone cluster and a Spark application on 2 cores
def test_the_spark_pipeline_example_runs_on_a_standalone_cluster(
    it: Harness, standalone: StandaloneCluster | None
) -> None:
    """``examples/spark_pipeline.py`` on two clusters of its own with ``KBEAR_SPARK_MASTER``
    the standalone master: its executors run on the workers."""
    if it.backend.name == "mock":
        pytest.skip("the pipeline's sink and Spark's connector need Kafka brokers")
    if standalone is None:
        pytest.skip("no Spark standalone cluster here")
    # clusters of this test's own: the example's topic names are fixed
    try:
        east, west = it.spare_cluster("C"), it.spare_cluster("D")
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    east.create_topic("orders", 2)
    west.create_topic("payments", 2)
    west.create_topic("stats.v1", 1)
    conf = it.config(
        [
            topic_rule("orders", "east"),
            topic_rule("stats", "west", physical="stats.v1"),
            {"id": "default-west", "meta": {"rule.isGlobal": True}, "rule": "use cluster west"},
        ],
        clusters={"east": east.bootstrap_servers, "west": west.bootstrap_servers},
    )
    env = {**os.environ, "KBEAR_CONFIG": str(conf), "KBEAR_SPARK_MASTER": standalone.master_url}
    env["PYSPARK_PYTHON"] = sys.executable
    # Python workers connect back within this (Spark's default 15 s is too short on a loaded 2-core machine)
    env["PYSPARK_SUBMIT_ARGS"] = "--conf spark.python.authenticate.socketTimeout=120s pyspark-shell"
    env.pop("KBEAR_SPARK_JARS", None)  # the Python source: nothing to ship to the workers
    example = Path(__file__).resolve().parent.parent / "examples" / "spark_pipeline.py"
    done = subprocess.run(
        [sys.executable, str(example), "--produce", "--messages", "200", "--timeout", "300"],
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    prefix = "counted per topic (from the routed 'stats' topic): "
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(prefix)]
    assert ast.literal_eval(line[len(prefix) :].rsplit("; ", 1)[0]) == {"orders": 200, "payments": 200}
    assert standalone.workers_registered() == 2
