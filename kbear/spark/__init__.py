"""kbear for Spark Structured Streaming: routed Kafka sources and sinks.

Option helpers (pure Python, no pyspark needed): :func:`kafka_options`,
:func:`write_options`, :func:`checkpoint_location`, :func:`translate_properties`
(librdkafka ``clusters.yaml`` properties to the Java client's ``kafka.*``
options; the table is :data:`TRANSLATION_TABLE`).

With pyspark (>= 4.0, and pyarrow): :func:`read_stream`, :func:`write_stream`,
:func:`guard`, :func:`register`, the ``kbear`` Python streaming source
(:class:`KBearDataSource`) and :func:`run_query`, a supervisor that restarts a
query on Spark's connector at route changes and failovers from translated offsets
(:class:`QuerySupervisor`).

Every name is imported from its module on first use (PEP 562): the Python process
Spark starts to plan each query of the ``kbear`` source imports the source's
modules, not the helpers of the driver's program.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from kbear.spark._source import KBearDataSource
    from kbear.spark._stream import (
        RouteGuard,
        guard,
        jvm_kafka_available,
        read_stream,
        register,
        write_stream,
    )
    from kbear.spark._supervise import QuerySupervisor, run_query

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

#: public name -> the module it is imported from on first use
_EXPORTS = {
    **dict.fromkeys(
        (
            "FORBIDDEN_READ_OPTIONS",
            "FORBIDDEN_WRITE_OPTIONS",
            "TRANSLATION_TABLE",
            "SparkOptionsError",
            "checkpoint_location",
            "describe_options",
            "kafka_options",
            "translate_properties",
            "write_options",
        ),
        "kbear.spark._options",
    ),
    **dict.fromkeys(
        ("RouteGuard", "guard", "jvm_kafka_available", "read_stream", "register", "write_stream"),
        "kbear.spark._stream",
    ),
    "KBearDataSource": "kbear.spark._source",
    "QuerySupervisor": "kbear.spark._supervise",
    "run_query": "kbear.spark._supervise",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module at first use (then kept here)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kbear.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
