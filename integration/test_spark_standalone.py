"""Spark applications on a Spark standalone cluster: pyspark's own ``sbin`` starting a
master and two workers on 127.0.0.1 (``integration/standalone.py``), the applications'
executors on the workers, with kbear's Python source: the example pipeline
(``examples/spark_pipeline.py``) reading and writing routed topics on two Apache Kafka
clusters of its own, and a query through a cluster killed behind MirrorMaker 2
(``integration/spark_failover_job.py``).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from integration.backends import BackendUnavailable
from integration.conftest import Harness
from integration.helpers import topic_rule
from integration.spark import child_env, run_pipeline_example
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
    _stdout, counted = run_pipeline_example(child_env(conf, master=standalone.master_url), 200, 300)
    assert counted == {"orders": 200, "payments": 200}
    assert standalone.workers_registered() == 2


@pytest.mark.timeout(1200)  # MirrorMaker 2, the standalone cluster and a Spark application on 2 cores
def test_a_query_on_a_standalone_cluster_reads_every_message_through_a_killed_cluster(
    it: Harness, standalone: StandaloneCluster | None, tmp_path: Path
) -> None:
    """kbear's Python source in a Spark application on the standalone cluster (its tasks
    on the workers) through east's broker process killed mid-stream, failing east over
    itself (``kbear.failover.enable``) to west, mirrored by a real MirrorMaker 2: every
    message read, without a query exception, few read twice."""
    if standalone is None:
        pytest.skip("no Spark standalone cluster here")
    from integration.lost_east import declare_failover, mirror_to_west, spare_east
    from integration.test_spark_failover import AFTER, BEFORE, PARTITIONS, produce, read_twice, wait_mirrored

    east = spare_east(it)
    topic = it.name("spark-standalone")
    with mirror_to_west(it, east, [topic], tmp_path / "mm2", partitions=PARTITIONS) as mm2:
        config = declare_failover(it, east)
        sent = produce(east.bootstrap_servers, topic, "east", BEFORE)
        wait_mirrored(it, mm2, [topic], BEFORE)
        out, stop = tmp_path / "rows.jsonl", tmp_path / "stop"
        options = {
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "40",  # the kill lands mid-stream: the query is behind
            "kbear.failover.enable": "true",
            "kbear.failover.after.ms": "3000",
        }
        args = [topic, str(out), str(stop), str(tmp_path / "ckpt"), json.dumps(options)]
        job = subprocess.Popen(
            [sys.executable, "-m", "integration.spark_failover_job", *args],
            env=child_env(config, master=standalone.master_url),
            cwd=Path(__file__).resolve().parent.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def got() -> list[tuple[str, bytes, int, int]]:
            lines = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
            return [(c, v.encode(), p, o) for c, v, p, o in map(json.loads, lines)]

        def wait(what: str, done: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 300
            while not done():
                assert job.poll() is None, f"the job ended ({job.returncode}): {job.communicate()[0][-3000:]}"
                assert time.monotonic() < deadline, f"{what}: not within 300 s ({len(got())} rows)"
                time.sleep(0.5)

        try:
            wait("read in part on east", lambda: len(got()) >= 40)
            east.kill()
            read_before = len(got())
            sent += produce(it.bootstrap("B"), topic, "west", AFTER)
            wait("every message read", lambda: {v for _, v, *_ in got()} >= set(sent))
            stop.touch()
            output = job.communicate(timeout=180)[0]
        finally:
            if job.poll() is None:
                job.kill()
                job.wait(30)
    assert job.returncode == 0, output[-3000:]
    rows = got()
    assert {v for _, v, *_ in rows} == set(sent)  # 0 lost
    twice, where = read_twice(rows)
    assert twice <= 100, (twice, where)
    assert standalone.workers_registered() == 2
    it.note(
        f"Spark standalone (master + 2 workers), kbear source through east killed: {read_before}/{BEFORE} "
        f"read on east at the kill, {twice} read twice ({where})"
    )
