"""Reading one offset range of one partition (runs on Spark executors)."""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from pyspark.sql.datasource import InputPartition

from kbear._gcpause import collector_paused
from kbear._secrets import redact
from kbear.config import Failover, MirrorKind
from kbear.spark._copies import copy_after, fingerprint

log = logging.getLogger("kbear.spark")

# Consumer settings of every reader: positions come from the offsets, never from a group.
READER_CONF = {
    "group.id": "kbear-spark-reader",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "earliest",
}


#: Fetch settings of every reader, under the cluster's and the job's properties: one
#: partition per reader, so larger fetches than librdkafka's defaults (1 MiB per
#: partition, 64 MiB queued) mean fewer round trips; and a 10 ms pause, not
#: librdkafka's 1000 ms (``fetch.queue.backoff.ms``), before fetching again once the
#: local queue holds ``queued.min.messages`` (100,000): each time it does, a task
#: waited a second (``bench/spark_read.py``, the evidence's Spark page).
FETCH_DEFAULTS = {
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.max.messages.kbytes": 262144,
    "fetch.queue.backoff.ms": 10,
}

# Message's methods, for map() over a batch of messages (without error events: an offset each)
_ERROR: Callable[[Any], KafkaError | None] = Message.error
_OFFSET: Callable[[Any], int] = Message.offset  # type: ignore[assignment]
_TIMESTAMP: Callable[[Any], tuple[int, int]] = Message.timestamp
_KEY: Callable[[Any], bytes | None] = Message.key
_VALUE: Callable[[Any], bytes | None] = Message.value
#: Most messages per ``consume()`` call, and so per record batch of a task.
BATCH_ROWS = 10_000

#: librdkafka errors (``error_cb``) saying the cluster does not answer: _TRANSPORT, _ALL_BROKERS_DOWN
_DOWN = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


@dataclass
class StandbyRead:
    """Where a range may be finished when its cluster stops answering during the read:
    ``cluster``'s standby (``properties``), the topic's copy there (``topic``), the
    mirror (``failover``: the old cluster's declaration), after ``after_s`` seconds
    without an answer (``kbear.failover.after.ms``). ``before`` and ``last``: the
    records read last before the range and its last record (``(offset, fingerprint)``,
    :mod:`kbear.spark._copies`), when known, to find their copies on the standby."""

    cluster: str
    properties: dict[str, str] = field(repr=False)
    topic: str
    failover: Failover = field(repr=False)
    after_s: float
    before: tuple[int, str] | None = field(default=None, repr=False)
    last: tuple[int, str] | None = field(default=None, repr=False)


@dataclass(repr=False)
class RangePart(InputPartition):
    """One Kafka partition's offset range [start, end) on one cluster."""

    cluster: str
    properties: dict[str, str]
    topic: str
    logical: str
    partition: int
    start: int
    end: int
    include_headers: bool
    timeout_s: float
    standby: StandbyRead | None = None
    arrow: Any = None

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


def read_range(part: RangePart) -> Iterator[Any]:
    """Rows of ``part``: offsets [start, end) of one partition, read with an assigned Consumer:
    Arrow record batches of ``part.arrow`` (a ``pyarrow.Schema``, the source's), one per
    fetch, or tuples when it is None.

    When the cluster stops answering during the read (every broker down) for
    ``part.standby.after_s`` and the range is on its standby already (the standby
    declared mirrored: the same offsets for ``identical``; for MirrorMaker 2, an
    offset sync at or past the range's last offset), the rest of the range is read
    there (:func:`_standby_rows`): a superset of it, the rows labelled with the
    standby. Else the read waits for the cluster, up to ``part.timeout_s``.
    """
    cluster, topic, end, standby = part.cluster, part.topic, part.end, part.standby
    down = [False]

    def on_error(err: KafkaError) -> None:
        if err.code() in _DOWN:
            down[0] = True

    consumer = Consumer({**FETCH_DEFAULTS, **part.properties, **READER_CONF, "error_cb": on_error})
    fallback: Iterator[Any] | None = None
    read_last: Any = None  # the last message read (its copy is looked for on the standby)
    try:
        consumer.assign([TopicPartition(topic, part.partition, part.start)])
        deadline = time.monotonic() + part.timeout_s
        progress_at = time.monotonic()
        next_offset = part.start
        while next_offset < end:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"kbear source: {cluster}/{topic}[{part.partition}] offsets "
                    f"{next_offset}..{end} not read within {part.timeout_s} s"
                )
            if standby is not None and down[0] and now - progress_at >= standby.after_s:
                fallback = _standby_rows(part, standby, next_offset, read_last)
                if fallback is not None:
                    break
                progress_at = now  # not on the standby yet: ask again later
            with collector_paused():
                got, after, rows, last = _fetch(consumer, part, min(BATCH_ROWS, end - next_offset))
            if not got:
                # the range's tail may be gone (retention, compaction, control records)
                if down[0]:
                    continue
                position = consumer.position([TopicPartition(topic, part.partition)])[0].offset
                if position >= end:
                    break
                continue
            next_offset = max(next_offset, after)
            if rows is not None:
                read_last = last
                progress_at = time.monotonic()
                down[0] = False
                if part.arrow is not None:
                    yield rows
                else:
                    yield from rows
    finally:
        consumer.close()
    if fallback is not None:
        yield from fallback


def _fetch(consumer: Consumer, part: RangePart, most: int) -> tuple[bool, int, Any, Any]:
    """One ``consume()`` of at most ``most`` messages: (whether it returned any, the offset
    after the last one below ``part.end`` (``part.end`` when reached, else 0 when none), those
    messages as one record batch of ``part.arrow`` or, without it, a list of tuples,
    and the last of them; None and None when none)."""
    batch = consumer.consume(most, 0.5)
    if not batch:
        return False, 0, None, None
    cluster = part.cluster
    good, offsets, done = _in_range(batch, part.end, cluster)
    after = part.end if done else offsets[-1] + 1 if offsets else 0
    if not good:
        return True, after, None, None
    if part.arrow is not None:
        return True, after, _record_batch(part, good, offsets, cluster), good[-1]
    rows = [_row(part, msg, offset, cluster) for msg, offset in zip(good, offsets, strict=True)]
    return True, after, rows, good[-1]


def _in_range(batch: list[Any], end: int, cluster: str) -> tuple[list[Any], list[int], bool]:
    """The messages of ``batch`` (one partition's, in offset order) below offset ``end``,
    their offsets, and whether ``end`` was reached. Error events are logged and left
    out (fatal ones raised: :class:`KafkaException`).

    Without error events (the common case) the work per message is done by
    ``map`` over the messages' methods, not by a Python loop.
    """
    if not any(map(_ERROR, batch)):
        offsets = list(map(_OFFSET, batch))
        if offsets[-1] < end:
            return batch, offsets, False
        cut = bisect.bisect_left(offsets, end)
        return batch[:cut], offsets[:cut], True
    good: list[Any] = []
    offsets = []
    for msg in batch:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise KafkaException(err)
            log.warning("kbear source: %s: %s", cluster, err)
            continue
        offset = msg.offset()
        if offset is None:
            continue
        if offset >= end:
            return good, offsets, True
        good.append(msg)
        offsets.append(offset)
    return good, offsets, False


def _record_batch(part: RangePart, msgs: list[Any], offsets: list[int], cluster: str) -> Any:
    """``msgs`` (at ``offsets``) as one Arrow record batch of the source's schema (``part.arrow``).

    Built column by column from lists (one ``map`` over the messages per column);
    ``topic`` and ``cluster`` are one value repeated; the timestamp columns are
    converted by Arrow when every message has a timestamp of the same type (the
    common case), else message by message.
    """
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = part.arrow
    n = len(msgs)
    types = schema.types
    stamps = list(map(_TIMESTAMP, msgs))
    kinds, millis = zip(*stamps, strict=True)
    if kinds[0] != 0 and kinds.count(kinds[0]) == n:  # one timestamp type (0: TIMESTAMP_NOT_AVAILABLE)
        timestamps = pa.array(millis, pa.timestamp("ms", tz="UTC")).cast(types[5])
        timestamp_types = pa.repeat(pa.scalar(kinds[0] - 1, types[6]), n)
    else:
        timestamps = pa.array([ms * 1000 if kind else None for kind, ms in stamps], pa.int64()).cast(types[5])
        timestamp_types = pa.array([kind - 1 for kind in kinds], types[6])
    columns = [
        pa.array(list(map(_KEY, msgs)), types[0]),
        pa.array(list(map(_VALUE, msgs)), types[1]),
        pa.repeat(pa.scalar(part.logical, types[2]), n),
        pa.repeat(pa.scalar(part.partition, types[3]), n),
        pa.array(offsets, types[4]),
        timestamps,
        timestamp_types,
    ]
    if part.include_headers:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in msgs],
                schema.field("headers").type,
            )
        )
    columns.append(pa.repeat(pa.scalar(cluster, types[-1]), n))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _row(part: RangePart, msg: Any, offset: int, cluster: str) -> tuple[Any, ...]:
    ts, ts_type = _timestamp(msg.timestamp())
    row: tuple[Any, ...] = (msg.key(), msg.value(), part.logical, part.partition, offset, ts, ts_type)
    if part.include_headers:
        headers: Any = msg.headers() or []
        row += ([(k, v) for k, v in headers],)
    return (*row, cluster)


def _standby_rows(
    part: RangePart, standby: StandbyRead, next_offset: int, read_last: Any
) -> Iterator[Any] | None:
    """The rest of ``part`` from ``next_offset`` on, read on its standby; None when the
    standby is not known to hold it yet. Under MirrorMaker 2 it starts right after the
    copy of the last record read (``read_last``, else ``standby.before``) and ends with
    the copy of the range's last record (``standby.last``) when found
    (:func:`kbear.spark._copies.copy_after`), else it spans the offset syncs around."""
    failover = standby.failover
    if failover.mirror is MirrorKind.IDENTICAL:
        start, stop = next_offset, part.end
    else:
        from kbear.mirror import read_mirror  # a cluster mirrored by MirrorMaker 2 only

        view = read_mirror(failover, standby.properties, None)
        last = view.syncs.at_or_after(part.topic, part.partition, part.end - 1)
        if last is None:
            return None
        where = ({**standby.properties, **READER_CONF}, part.topic, standby.topic, part.partition)
        mark = standby.before if read_last is None else (read_last.offset(), fingerprint(read_last))
        found = None if mark is None else copy_after(view.syncs, *where, mark)
        if found is None:
            first = view.syncs.translate(part.topic, part.partition, next_offset)
            found = 0 if first is None else first[0]
        start = found
        end_mark = standby.last if standby.last is not None and standby.last[0] == part.end - 1 else None
        ends = (
            None if end_mark is None else copy_after(view.syncs, *where, end_mark, begin=start, settled=True)
        )
        stop = last.downstream_offset + 1 if ends is None else ends
    log.warning(
        "kbear source: cluster %r stopped answering while %s[%d] offsets %d..%d were read: read on its "
        "standby %r, %s[%d] offsets %d..%d (its mirror's copy)",
        part.cluster,
        part.topic,
        part.partition,
        next_offset,
        part.end,
        standby.cluster,
        standby.topic,
        part.partition,
        start,
        stop,
    )
    on_standby = replace(part, cluster=standby.cluster, properties=standby.properties, topic=standby.topic)
    return read_range(replace(on_standby, start=start, end=stop, standby=None))
