"""The ``kbear`` Python streaming data source: Kafka read with confluent-kafka (needs pyspark >= 4.0).

Registered with :func:`kbear.spark.register`; used as
``spark.readStream.format("kbear").option(...).load()``. It honours the option
names and the schema of Spark's Kafka connector (``spark-sql-kafka-0-10``),
so a job can switch between the two; see :class:`KBearDataSource`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kbear.spark._translate import option_bool

if TYPE_CHECKING:
    from kbear.spark._reader import KBearStreamReader

__all__ = ["SOURCE_NAME", "KBearDataSource"]

#: The name the source is registered under (``format("kbear")``).
SOURCE_NAME = "kbear"


def spark_schema(include_headers: bool) -> StructType:
    """The source's schema: the Kafka connector's columns (``headers`` with
    ``include_headers``), then ``cluster``."""
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        *([StructField("headers", ArrayType(header))] if include_headers else []),
        StructField("cluster", StringType()),
    ]
    return StructType(fields)


class KBearDataSource(DataSource):
    """Spark Python data source ``kbear``: Kafka through confluent-kafka, optionally routed.

    Options (case-insensitive; names of Spark's Kafka connector where one exists):

    - ``subscribe`` (required): comma-separated topics (logical names when routed).
    - ``kbear.config``: a kbear configuration directory, readable by the driver:
      routed mode. Each topic is looked up (consumer lookup with ``kbear.group``,
      else producer lookup) with the client of ``kbear.client.id`` /
      ``kbear.client.meta.<k>``, and looked up again before every micro-batch.
    - ``kafka.bootstrap.servers``: one cluster, not routed (exactly one of the
      two); ``kbear.cluster`` names it in offsets and the ``cluster`` column
      (default ``kafka``).
    - ``kafka.<property>``: a librdkafka property for every cluster's reader
      (the cluster's own ``clusters.yaml`` properties win).
    - ``startingOffsets``: ``latest`` (default), ``earliest`` or JSON
      ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest; absent
      partitions start at earliest). Only for a new query.
    - ``maxOffsetsPerTrigger``: most offsets per micro-batch over all
      partitions (Spark >= 4.2; earlier versions read all available).
    - ``includeHeaders``: ``true`` adds the ``headers`` column.
    - ``kbear.switch.start``: where a topic starts on a cluster it
      moves to and was never read there: ``earliest`` (default, nothing lost)
      or ``latest``.
    - ``kafkaConsumer.pollTimeoutMs``: longest wait for a task's records, ms
      (default 120000).
    - ``kbear.failover.enable``: ``true``: a cluster that does not answer for
      ``kbear.failover.after.ms`` (default 30000) is failed over to its standby
      (``kbear.failover.to``) by the query itself, as the clients do; the
      operator's ``kbear failover`` applies with or without it.

    Refused, with Spark's advice: ``kafka.auto.offset.reset``,
    ``kafka.enable.auto.commit``, ``kafka.key.deserializer``,
    ``kafka.value.deserializer``, ``kafka.interceptor.classes``,
    ``subscribePattern``, ``assign``.

    Schema: ``key`` binary, ``value`` binary, ``topic`` string (logical name),
    ``partition`` int, ``offset`` long, ``timestamp`` timestamp,
    ``timestampType`` int (0 create time, 1 log-append time, -1 none),
    ``headers`` (with ``includeHeaders``), and kbear's ``cluster`` string.

    Offsets (checkpointed JSON) are keyed by cluster, physical topic and
    partition, and record each topic's route: a route change between
    micro-batches first finishes the old cluster's backlog up to the end
    offsets seen when the change was noticed, then reads the new cluster
    (from offsets recorded earlier on it, else ``kbear.switch.start``).
    Messages produced to the old cluster after the change was noticed are not read.

    A cluster that does not answer gives its topics no new offsets (a warning,
    the ``kbear_clusters_unanswered_total`` metric) while the other topics go
    on. Once it is failed over to a standby it is mirrored to (``kbear.mirror``
    ``mm2`` or ``identical``), its topics are read on the standby from this
    query's positions translated through the mirror (MirrorMaker 2's offset
    syncs: never past the true position, so what was mirrored after the sync
    used is read again and nothing is skipped); the offsets record the
    translation (``translated``). A task whose cluster dies while it reads
    finishes its range on the standby once the mirror's offset syncs cover it.
    """

    @classmethod
    def name(cls) -> str:
        """``"kbear"``."""
        return SOURCE_NAME

    def schema(self) -> str:
        """The schema as DDL (see the class docstring)."""
        lowered = {str(k).lower(): str(v) for k, v in self.options.items()}
        fields = spark_schema(option_bool(lowered.get("includeheaders"), False)).fields
        return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields)

    def streamReader(self, schema: StructType) -> KBearStreamReader:
        """A :class:`KBearStreamReader` for the options; its tasks hand Spark Arrow
        record batches of ``schema`` (one per fetch) where pyspark takes them.

        Raises:
            SparkOptionsError: bad or forbidden options.
            ConfigError: ``kbear.config`` is not a valid configuration.
        """
        # imported here: schema() (Spark's first call, in a Python process of its own) needs neither
        from kbear.spark._reader import KBearStreamReader
        from kbear.spark._source_settings import SourceSettings

        return KBearStreamReader(SourceSettings(self.options), arrow_schema(schema))


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects of record batches from ``read()`` (its own
    conversion: ``to_arrow_schema``, UTC timestamps), or None where this pyspark
    does not say (tuples are read then)."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(schema, timezone="UTC")
    except (ImportError, TypeError):
        return None
