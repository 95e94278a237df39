"""Reading one offset range of one partition (runs on Spark executors)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.datasource import InputPartition

from kbear._secrets import redact

log = logging.getLogger("kbear.spark")

# Consumer settings of every reader: positions come from the offsets, never from a group.
READER_CONF = {
    "group.id": "kbear-spark-reader",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "earliest",
}


class RangePart(InputPartition):
    """One Kafka partition's offset range [start, end) on one cluster."""

    def __init__(
        self,
        cluster: str,
        properties: dict[str, str],
        topic: str,
        logical: str,
        partition: int,
        start: int,
        end: int,
        include_headers: bool,
        timeout_s: float,
    ) -> None:
        super().__init__((cluster, topic, partition, start, end))
        self.cluster = cluster
        self.properties = properties
        self.topic = topic
        self.logical = logical
        self.partition = partition
        self.start = start
        self.end = end
        self.include_headers = include_headers
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return (
            f"RangePart(cluster={self.cluster!r}, topic={self.topic!r}, partition={self.partition}, "
            f"start={self.start}, end={self.end}, properties={redact(self.properties)!r})"
        )


def _timestamp(ts: tuple[int, int]) -> tuple[datetime | None, int]:
    kind, ms = ts
    if kind == 0:  # TIMESTAMP_NOT_AVAILABLE
        return None, -1
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC), kind - 1


def read_range(part: RangePart) -> Iterator[tuple[Any, ...]]:
    """Rows of ``part``: offsets [start, end) of one partition, read with an assigned Consumer."""
    consumer = Consumer({**part.properties, **READER_CONF})
    try:
        tp = TopicPartition(part.topic, part.partition, part.start)
        consumer.assign([tp])
        deadline = time.monotonic() + part.timeout_s
        next_offset = part.start
        while next_offset < part.end:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"kbear source: {part.cluster}/{part.topic}[{part.partition}] offsets "
                    f"{next_offset}..{part.end} not read within {part.timeout_s} s"
                )
            batch = consumer.consume(min(10_000, part.end - next_offset), 0.5)
            if not batch:
                # the range's tail may be gone (retention, compaction, control records)
                position = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
                if position >= part.end:
                    break
                continue
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("kbear source: %s: %s", part.cluster, err)
                    continue
                offset = msg.offset()
                if offset is None:
                    continue
                if offset >= part.end:
                    next_offset = part.end
                    break
                next_offset = offset + 1
                ts, ts_type = _timestamp(msg.timestamp())
                row: tuple[Any, ...] = (
                    msg.key(),
                    msg.value(),
                    part.logical,
                    part.partition,
                    offset,
                    ts,
                    ts_type,
                )
                if part.include_headers:
                    headers: Any = msg.headers() or []
                    row += ([(k, v) for k, v in headers],)
                yield (*row, part.cluster)
    finally:
        consumer.close()
