"""The SparkSession of the tests, with Spark's own Kafka connector on its classpath.

Spark's JVM Kafka source and sink (``spark-sql-kafka-0-10``) are not part of
pyspark: :func:`connector_jars` has Maven resolve ``jvm/spark-kafka/pom.xml`` at
the installed pyspark's exact version (:mod:`integration.jvm`) and keeps the jars
pyspark does not ship itself (``pyspark/jars``: Scala, Hadoop client, lz4,
snappy, slf4j... would otherwise be on the classpath twice, at other versions).

The jars must be on the driver's classpath when its JVM starts: pyspark launches
one JVM per Python process and keeps it for later sessions, so a session built
later with ``spark.jars`` would not load them. Hence one session per test
process, made by :func:`session` (the ``spark_session`` fixture of the root
``conftest.py``), shared by ``tests/`` and ``integration/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from integration.jvm import JvmUnavailable, classpath

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from kbear.spark import QuerySupervisor

#: Longest wait for a query to reach an expected state (seconds): generous for 2 cores.
WAIT_S = 180.0


def pyspark_jars_dir() -> Path:
    """The ``jars`` directory of the installed pyspark (the jars its JVM starts with)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _shipped(jar: Path, shipped: set[str]) -> bool:
    # a jar resolved from Maven's repository sits in .../<artifactId>/<version>/; pyspark
    # ships the same artifact as <artifactId>-<any version>.jar
    prefix = f"{jar.parent.parent.name}-"
    return any(n.startswith(prefix) and n[len(prefix) : len(prefix) + 1].isdigit() for n in shipped)


def connector_jars() -> list[Path]:
    """``spark-sql-kafka-0-10_2.13`` at pyspark's version and its runtime dependencies,
    minus the artifacts pyspark already ships (any version).

    Raises:
        JvmUnavailable: Java or Maven is missing, or Maven Central does not serve the
            connector at this pyspark version (the ``spark`` extra keeps pyspark at a
            version it serves; see ``jvm/spark-kafka/pom.xml``).
    """
    import pyspark

    jars = classpath("spark-kafka", {"spark.version": pyspark.__version__})
    shipped = {p.name for p in pyspark_jars_dir().glob("*.jar")}
    return [j for j in jars if not _shipped(j, shipped)]


def stop_queries(spark: SparkSession, wait_s: float = 180.0) -> None:
    """Stop every query still running in ``spark`` (a test's end). A query whose stop
    outlasts ``spark.sql.streaming.stopTimeout`` because it is still ending (Spark's Kafka
    connector waits for its admin client's calls to a cluster killed by the test) is
    waited for up to ``wait_s``; the stop's error is raised when it runs on after that
    or ends with an exception of its own."""
    for query in spark.streams.active:
        try:
            query.stop()
        except Exception:
            deadline = time.monotonic() + wait_s
            # stopped (isActive is False at once), it is active until its thread ends
            while spark.streams.get(query.id) is not None and time.monotonic() < deadline:
                time.sleep(0.5)
            if spark.streams.get(query.id) is not None or query.exception() is not None:
                raise


def java_version() -> str | None:
    """``java -version``'s first line, or None when no Java runs here."""
    java = shutil.which("java") or (
        os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else None
    )
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stderr.splitlines()[0] if out.returncode == 0 and out.stderr else None


def session(jars: list[Path] | None, master: str = "local[2]", app: str = "kbear-tests") -> SparkSession:
    """A SparkSession on ``master`` (default ``local[2]``; no UI, 127.0.0.1, 2 shuffle
    partitions) for the tests and the applications they run (``app``: its name), with
    ``jars`` as ``spark.jars`` when given. Its Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.sql.streaming.stopTimeout", "30s")
        # a Python worker must connect back within this (default 15 s): more than that
        # was seen on this 2-core machine under the load of parallel test runs
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def child_env(config: object, *, master: str | None = None, jars: list[Path] | None = None) -> dict[str, str]:
    """The environment of a Spark application the tests run as a child process (the
    pipeline example, a job of their own): ``KBEAR_CONFIG`` (``config``), this
    interpreter for its Python workers, Spark's Kafka connector (``KBEAR_SPARK_JARS``)
    when ``jars`` are given, a cluster manager (``KBEAR_SPARK_MASTER``) when
    ``master`` is, and 120 s for a Python worker to connect back (Spark's default 15 s
    is too short on a loaded 2-core machine)."""
    env = {**os.environ, "KBEAR_CONFIG": str(config), "PYSPARK_PYTHON": sys.executable}
    env["PYSPARK_SUBMIT_ARGS"] = "--conf spark.python.authenticate.socketTimeout=120s pyspark-shell"
    env.pop("KBEAR_SPARK_JARS", None)
    env.pop("KBEAR_SPARK_MASTER", None)
    if jars:
        env["KBEAR_SPARK_JARS"] = ",".join(str(j) for j in jars)
    if master is not None:
        env["KBEAR_SPARK_MASTER"] = master
    return env


def run_pipeline_example(env: dict[str, str], messages: int, timeout_s: int) -> tuple[str, dict[str, int]]:
    """Run ``examples/spark_pipeline.py --produce`` with ``env`` (:func:`child_env`);
    its output and the counts per topic it printed. Fails the test when it fails."""
    import ast

    example = Path(__file__).resolve().parent.parent / "examples" / "spark_pipeline.py"
    done = subprocess.run(
        [sys.executable, str(example), "--produce", "--messages", str(messages), "--timeout", str(timeout_s)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s + 180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    prefix = "counted per topic (from the routed 'stats' topic): "
    (line,) = [x for x in done.stdout.splitlines() if x.startswith(prefix)]
    # the counts the example printed, read back as a dict (its order is Spark's row order)
    return done.stdout, ast.literal_eval(line[len(prefix) :].rsplit("; ", 1)[0])


def wait_for(query: StreamingQuery, done: Callable[[], bool], what: str) -> None:
    """Wait (at most :data:`WAIT_S`) until ``done()``; ``query`` must not have failed."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        if query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}; last {query.lastProgress}")
        time.sleep(0.3)


def wait_supervised(supervisor: QuerySupervisor, done: Callable[[], bool], what: str) -> None:
    """Wait (at most :data:`WAIT_S`) until ``done()``; the supervision (``run_query``)
    must not have failed. ``what``: what is awaited, for the message on a timeout."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert supervisor.exception is None, supervisor.exception
        assert time.monotonic() < deadline, (
            f"timed out after {WAIT_S} s waiting for {what}: restarts {supervisor.restarts}"
        )
        time.sleep(0.5)


__all__ = [
    "WAIT_S",
    "JvmUnavailable",
    "child_env",
    "connector_jars",
    "java_version",
    "pyspark_jars_dir",
    "run_pipeline_example",
    "session",
    "stop_queries",
    "wait_for",
    "wait_supervised",
]
