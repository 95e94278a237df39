"""A last-resort watchdog for every test of this repository (tests/ and integration/).

pytest-timeout (300 s, ``pyproject.toml``) fails a test that hangs, with every
thread's traceback, but its timer needs the GIL: a hang inside C code that holds
it (seen once in librdkafka's ``Consumer.close()`` serving a callback that called
back into the closing client) escapes it and would eat CI's whole time limit.
faulthandler's watchdog runs without the GIL: past ``WATCHDOG_S`` seconds in one
test it writes every thread's traceback to ``WATCHDOG_LOG`` (pytest captures the
process's stderr meanwhile) and ends the process with status 1 (CI fails, fast;
``scripts/test.sh`` prints the file then).
"""

from __future__ import annotations

import faulthandler
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Longest time one test (setup, call and teardown) may take before the process is
#: ended, seconds (``KBEAR_TEST_WATCHDOG_S``); above pytest-timeout's 300 s so that it
#: gets its chance first.
WATCHDOG_S = float(os.environ.get("KBEAR_TEST_WATCHDOG_S", "420"))
#: Where the tracebacks go (``KBEAR_TEST_WATCHDOG_LOG``).
WATCHDOG_LOG = Path(
    os.environ.get("KBEAR_TEST_WATCHDOG_LOG") or Path(tempfile.gettempdir()) / "kbear-test-watchdog.log"
)


@pytest.fixture(scope="session")
def _watchdog_log() -> Iterator[TextIO]:
    with WATCHDOG_LOG.open("w") as log:
        yield log


@pytest.fixture(autouse=True)
def _watchdog(request: pytest.FixtureRequest, _watchdog_log: TextIO) -> Iterator[None]:
    print(f"watchdog: {request.node.nodeid}", file=_watchdog_log, flush=True)
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=_watchdog_log)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def spark_session() -> Iterator[tuple[SparkSession, str | None]]:
    """The test process's one SparkSession and why Spark's Kafka connector is absent
    (None when its jars are on the classpath). One per process: pyspark keeps its JVM,
    whose classpath the first session fixes (``integration/spark.py``); start-up ~10-15 s."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from integration.spark import JvmUnavailable, connector_jars, java_version, session, stop_queries

    if java_version() is None:
        pytest.skip("no Java runtime (java not on PATH nor in JAVA_HOME): Spark needs Java 17+")
    jars: list[Any] = []
    missing: str | None = None
    try:
        jars = connector_jars()
    except JvmUnavailable as exc:
        missing = f"Spark's Kafka connector jars could not be resolved: {exc}"
    spark = session(jars)
    try:
        yield spark, missing
    finally:
        try:
            stop_queries(spark)
        finally:
            spark.stop()
