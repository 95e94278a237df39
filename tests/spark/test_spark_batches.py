"""The kbear source's Arrow record batches (what its tasks hand Spark) hold the same rows
as its tuples: keys, values, offsets, both timestamp types and none, headers, the end
of a range inside a fetched batch, error events left out."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka import KafkaError, KafkaException, Message

from conftest import plain_producer
from kbear.spark._read import RangePart, _in_range, _record_batch, _row, read_range
from kbear.spark._source import arrow_schema, spark_schema
from kbear.testing import EmbeddedCluster


def part(include_headers: bool, props: dict[str, str], topic: str, start: int, end: int) -> RangePart:
    arrow = arrow_schema(spark_schema(include_headers))
    assert arrow is not None
    return RangePart("east", props, topic, "orders", 0, start, end, include_headers, 30.0, None, arrow)


def as_tuples(batches: list[Any]) -> list[tuple[Any, ...]]:
    """Record batches as the tuples the source reads without Arrow (headers as pairs)."""
    rows = []
    for batch in batches:
        for row in batch.to_pylist():
            if "headers" in row:
                row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
            rows.append(tuple(row.values()))
    return rows


def test_a_batch_of_mixed_timestamps_errors_and_the_range_end() -> None:
    msgs = [
        Message(topic="t", partition=0, offset=5, key=b"k5", value=b"v5", timestamp=(1, 1_700_000_000_123)),
        Message(error=KafkaError(KafkaError._MSG_TIMED_OUT)),  # a non-fatal event: left out
        Message(topic="t", partition=0, offset=7, key=None, value=b"v7", timestamp=(2, 1_700_000_000_456)),
        Message(
            topic="t",
            partition=0,
            offset=8,
            value=None,
            timestamp=(0, -1),
            headers=[("h", b"1"), ("h", b"2")],
        ),
        Message(topic="t", partition=0, offset=9, key=b"k9", value=b"v9", timestamp=(1, 1)),
    ]
    good, offsets, done = _in_range(msgs, 9, "east")
    assert (offsets, done) == ([5, 7, 8], True)
    p = part(True, {}, "t", 5, 9)
    tuples = [_row(p, m, o, "east") for m, o in zip(good, offsets, strict=True)]
    assert as_tuples([_record_batch(p, good, offsets, "east")]) == tuples
    assert tuples[0][5] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert [(t[5] is None, t[6]) for t in tuples] == [(False, 0), (False, 1), (True, -1)]
    assert tuples[2][7] == [("h", b"1"), ("h", b"2")]


def test_in_range_without_errors_cuts_at_the_end() -> None:
    msgs = [Message(topic="t", partition=0, offset=o, value=b"v", timestamp=(1, o)) for o in (3, 4, 6, 7)]
    assert _in_range(msgs, 100, "east") == (msgs, [3, 4, 6, 7], False)
    good, offsets, done = _in_range(msgs, 6, "east")
    assert (good, offsets, done) == (msgs[:2], [3, 4], True)
    fatal = KafkaError(KafkaError._FATAL, fatal=True)
    with pytest.raises(KafkaException) as raised:
        _in_range([*msgs, Message(error=fatal)], 100, "east")
    assert raised.value.args[0].fatal()


@pytest.mark.parametrize("include_headers", [False, True])
def test_a_range_read_as_record_batches_equals_the_tuples(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    unique: Callable[[str], str],
    include_headers: bool,
) -> None:
    a, _ = two_clusters
    topic = unique("orders")
    a.create_topic(topic, 1)
    producer = plain_producer(a)
    for i in range(25_000):
        producer.produce(
            topic, key=b"%d" % i if i % 7 else None, value=b"x" * (i % 100), headers=[("n", b"%d" % i)]
        )
    assert producer.flush(30) == 0
    props = {"bootstrap.servers": a.bootstrap_servers}
    start, end = 1_234, 23_456  # the end inside a fetched batch
    arrow = as_tuples(list(read_range(part(include_headers, props, topic, start, end))))
    tuples = list(read_range(RangePart("east", props, topic, "orders", 0, start, end, include_headers, 30.0)))
    assert arrow == tuples
    assert [row[4] for row in tuples] == list(range(start, end))
    assert {(row[2], row[3], row[-1]) for row in tuples} == {("orders", 0, "east")}
    assert all(row[5] is not None and row[6] == 0 for row in tuples)
