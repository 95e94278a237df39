"""kbear for Spark Structured Streaming: routed Kafka sources and sinks.

Option helpers (pure Python, no pyspark needed): :func:`kafka_options`,
:func:`write_options`, :func:`checkpoint_location`, :func:`translate_properties`
(librdkafka ``clusters.yaml`` properties to the Java client's ``kafka.*``
options; the table is :data:`TRANSLATION_TABLE`).

With pyspark (>= 4.0, and pyarrow): :func:`read_stream`, :func:`write_stream`,
:func:`guard`, :func:`register`, the ``kbear`` Python streaming source
(:class:`KBearDataSource`) and :func:`run_query`, a supervisor that restarts a
query on Spark's connector at route changes and failovers from translated offsets
(:class:`QuerySupervisor`); the last three imported on first use.
"""

from __future__ import annotations

from typing import Any

from kbear.spark._options import (
    FORBIDDEN_READ_OPTIONS,
    FORBIDDEN_WRITE_OPTIONS,
    TRANSLATION_TABLE,
    SparkOptionsError,
    checkpoint_location,
    describe_options,
    kafka_options,
    translate_properties,
    write_options,
)
from kbear.spark._stream import RouteGuard, guard, jvm_kafka_available, read_stream, register, write_stream

__all__ = [
    "FORBIDDEN_READ_OPTIONS",
    "FORBIDDEN_WRITE_OPTIONS",
    "SOURCE_NAME",
    "TRANSLATION_TABLE",
    "KBearDataSource",
    "QuerySupervisor",
    "RouteGuard",
    "SparkOptionsError",
    "checkpoint_location",
    "describe_options",
    "guard",
    "jvm_kafka_available",
    "kafka_options",
    "read_stream",
    "register",
    "run_query",
    "translate_properties",
    "write_options",
    "write_stream",
]

#: The name of kbear's Python streaming source: ``spark.readStream.format("kbear")``.
SOURCE_NAME = "kbear"


def __getattr__(name: str) -> Any:
    # KBearDataSource needs pyspark: imported on first use only.
    if name == "KBearDataSource":
        from kbear.spark._source import KBearDataSource

        return KBearDataSource
    if name in ("run_query", "QuerySupervisor"):
        from kbear.spark import _supervise

        return getattr(_supervise, name)
    raise AttributeError(f"module 'kbear.spark' has no attribute {name!r}")
