"""The mirror's copy of a record the ``kbear`` source read (MirrorMaker 2): found on the
standby by its content, so that a failover starts right after what was read instead of
at the offset sync before it.

MirrorMaker 2's offset syncs translate an upstream offset to the downstream offset of
the newest sync at or before it: what was mirrored between that sync and the position
is read again (up to ``offset.lag.max`` records per partition). The source narrows
this with the record itself: the last record it read of each partition of a cluster
mirrored by MirrorMaker 2 is remembered in its offsets (its offset and a digest of its
timestamp, key and value, which MirrorMaker 2 copies unchanged: :func:`fingerprint`),
and its copy is looked for on the standby between the sync at or before it and the
sync at or after it (:func:`copy_after`). Only records proven copies of what was read
are skipped: the first record of that span with the same digest is taken (an earlier
record with the same content gives an earlier start, so more read again, never a
skipped record); no copy found, the offset sync's translation applies.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import struct
import time
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

if TYPE_CHECKING:
    from kbear.mirror import OffsetSyncIndex

__all__ = [
    "COPY_SCAN_LIMIT",
    "COPY_SCAN_TIMEOUT_S",
    "Mark",
    "copied_in_step",
    "copy_after",
    "fingerprint",
    "last_records",
]

#: A record read: (its upstream offset, :func:`fingerprint`).
Mark = tuple[int, str]

#: At most how many records of the standby are read looking for one copy.
COPY_SCAN_LIMIT = 10_000
#: Bound of one look for a copy (seconds).
COPY_SCAN_TIMEOUT_S = 10.0


def fingerprint(msg: Any) -> str:
    """A digest (16 hex digits, BLAKE2b) of a message's timestamp (ms), key and value:
    what MirrorMaker 2 copies unchanged (the timestamp type and offset differ)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack(">q", msg.timestamp()[1]))
    for part in (msg.key(), msg.value()):
        h.update(b"\x00" if part is None else b"\x01" + struct.pack(">I", len(part)) + part)
    return h.hexdigest()


def last_records(
    consumer: Consumer, topic: str, ends: Mapping[int, int], timeout_s: float
) -> dict[int, Mark]:
    """Partition -> the record at offset ``ends[p] - 1`` of ``topic`` as a :data:`Mark`,
    read with ``consumer`` (assigned here, unassigned after). A partition whose record
    there is not a data record (a transaction marker, compacted away) or not fetched
    within ``timeout_s`` seconds is left out.

    Raises:
        KafkaException: the cluster did not answer the assignment.
    """
    wanted = {p: e - 1 for p, e in ends.items() if e > 0}
    if not wanted:
        return {}
    out: dict[int, Mark] = {}
    passed: set[int] = set()
    consumer.assign([TopicPartition(topic, p, o) for p, o in wanted.items()])
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) + len(passed) < len(wanted) and time.monotonic() < deadline:
            for msg in consumer.consume(len(wanted), min(0.2, max(0.0, deadline - time.monotonic()))):
                p, o = msg.partition(), msg.offset()
                if msg.error() is not None or p not in wanted or p in out or o is None:
                    continue
                if o == wanted[p]:
                    out[p] = (o, fingerprint(msg))
                elif o > wanted[p]:
                    passed.add(p)
            left = [TopicPartition(topic, p) for p in wanted if p not in out and p not in passed]
            if left:
                passed.update(
                    tp.partition for tp in consumer.position(left) if tp.offset > wanted[tp.partition]
                )
    finally:
        consumer.unassign()
    return out


def remember(
    offsets: dict[str, Any],
    read: set[tuple[str, str]],
    consumer: Callable[[str], Consumer],
    timeout_s: float,
) -> None:
    """Record under ``offsets["last"]`` (cluster -> physical topic -> partition ->
    ``[offset, fingerprint]``) the record before each position of ``read`` (cluster,
    physical topic), asked with ``consumer(cluster)``: one fetch per topic whose
    positions moved; a record not fetched keeps the one recorded before."""
    last = offsets.setdefault("last", {})
    for cluster, topic in sorted(read):
        known = last.setdefault(cluster, {}).setdefault(topic, {})
        ends = offsets["positions"][cluster][topic].items()
        due = {int(p): e for p, e in ends if known.get(p, [-1])[0] != e - 1}
        try:
            got = last_records(consumer(cluster), topic, due, timeout_s)
        except KafkaException:
            continue
        known.update({str(p): list(mark) for p, mark in got.items()})
    if not last:
        del offsets["last"]


def mark_of(offsets: Mapping[str, Any], cluster: str, topic: str, p: str, below: int) -> Mark | None:
    """The record read last of ``cluster``/``topic``/``p`` recorded in ``offsets``
    (:func:`remember`), when it is before offset ``below``."""
    got = offsets.get("last", {}).get(cluster, {}).get(topic, {}).get(p)
    return None if got is None or int(got[0]) >= below else (int(got[0]), str(got[1]))


def _scan(
    conf: Mapping[str, Any], topic: str, partition: int, begin: int, stop: int | None
) -> Generator[Any]:
    """The data records of ``topic``/``partition`` in [begin, stop) (stop None: the high
    watermark), in offset order, until :data:`COPY_SCAN_TIMEOUT_S` has passed or the
    cluster does not answer."""
    consumer = Consumer(dict(conf))
    deadline = time.monotonic() + COPY_SCAN_TIMEOUT_S
    try:
        tp = TopicPartition(topic, partition)
        if stop is None:
            stop = consumer.get_watermark_offsets(tp, timeout=COPY_SCAN_TIMEOUT_S, cached=False)[1]
        consumer.assign([TopicPartition(topic, partition, begin)])
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.5)
            if not batch and consumer.position([tp])[0].offset >= stop:
                return
            for msg in batch:
                offset = msg.offset()
                if msg.error() is not None or offset is None:
                    continue
                if offset >= stop:
                    return
                yield msg
    except KafkaException:
        return
    finally:
        consumer.close()


def _find(
    conf: Mapping[str, Any], topic: str, partition: int, digest: str, begin: int, stop: int | None
) -> int | None:
    """The offset of the first record of ``topic``/``partition`` in [begin, stop) (stop
    None: the high watermark) whose fingerprint is ``digest``; None: none found within
    :data:`COPY_SCAN_LIMIT` records and :data:`COPY_SCAN_TIMEOUT_S`."""
    with contextlib.closing(_scan(conf, topic, partition, begin, stop)) as records:
        found = (m for m in itertools.islice(records, COPY_SCAN_LIMIT) if fingerprint(m) == digest)
        return next((int(m.offset()) for m in found), None)


def copy_after(
    syncs: OffsetSyncIndex,
    conf: Mapping[str, Any],
    source_topic: str,
    target_topic: str,
    partition: int,
    mark: Mark,
    *,
    begin: int | None = None,
    settled: bool = False,
) -> int | None:
    """The offset right after the standby's copy of the record ``mark`` (upstream
    offset, fingerprint) of ``source_topic``/``partition``, or None when not found.

    Args:
        syncs: the mirror's offset syncs.
        conf: a librdkafka consumer configuration of the standby (assigned only).
        source_topic, target_topic: the topic's names upstream and on the standby.
        partition: the partition.
        mark: the record read.
        begin: look no earlier than this standby offset (default: the translation of
            the record's offset through the newest sync at or before it).
        settled: only when a sync at or after the record is known (then every reader
            of the syncs topic from now on translates the record the same way, and
            finds the same copy).
    """
    upstream, digest = mark
    through = syncs.translate(source_topic, partition, upstream)
    if through is None:
        return None
    after = syncs.at_or_after(source_topic, partition, upstream)
    if settled and after is None:
        return None
    stop = None if after is None else after.downstream_offset + 1
    found = _find(conf, target_topic, partition, digest, max(through[0], begin or 0), stop)
    return None if found is None else found + 1


def copied_in_step(
    source_conf: Mapping[str, Any],
    source_topic: str,
    target_conf: Mapping[str, Any],
    target_topic: str,
    partition: int,
    begin: int,
    target_begin: int,
    target_end: int,
) -> int:
    """The source offset after the records of ``source_topic``/``partition`` from
    ``begin`` on whose copies are, one by one and in order, the records of
    ``target_topic`` from ``target_begin`` up to ``target_end`` (the same
    :func:`fingerprint`); ``begin`` when the first differs. At most
    :data:`COPY_SCAN_LIMIT` records are compared."""
    count = min(COPY_SCAN_LIMIT, max(0, target_end - target_begin))
    at = begin
    with (
        contextlib.closing(_scan(target_conf, target_topic, partition, target_begin, target_end)) as copies,
        contextlib.closing(_scan(source_conf, source_topic, partition, begin, None)) as originals,
    ):
        for copy, original in zip(itertools.islice(copies, count), originals, strict=False):
            if fingerprint(original) != fingerprint(copy):
                break
            at = int(original.offset()) + 1
    return at
