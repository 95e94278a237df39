"""Reading what a MirrorMaker 2 mirror wrote: its checkpoints and offset syncs, from
the clusters (blocking I/O, bounded in time; decoding and translation are pure,
in :mod:`kbear.mirror._codec` and :mod:`kbear.mirror._translate`).

Topic names are MirrorMaker 2's (``ReplicationPolicy``'s defaults, the same under
``DefaultReplicationPolicy`` and ``IdentityReplicationPolicy``): checkpoints in
``<source alias>.checkpoints.internal`` on the target; offset syncs in
``mm2-offset-syncs.<source alias>.internal`` on the target when MirrorMaker 2
runs with ``offset-syncs.topic.location=target``, else (its default) in
``mm2-offset-syncs.<target alias>.internal`` on the source, whose target alias
kbear does not know: the one offset-syncs topic of the source is read then, and
none when there are several.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbear.config import Failover
from kbear.mirror._codec import MirrorRecordError, decode_checkpoint, decode_offset_sync
from kbear.mirror._translate import CheckpointIndex, OffsetSyncIndex, TranslatedStart, translate_group

__all__ = ["MirrorView", "checkpoints_topic", "offset_syncs_topic", "read_mirror", "read_records"]

log = logging.getLogger("kbear.mirror")

#: Default bound of one read of a mirror's topics (seconds).
READ_TIMEOUT_S = 10.0
#: librdkafka keys of a cluster's client configuration the readers drop: the group's
#: settings (the application's callbacks are dropped too, and ``group.id`` and
#: ``enable.auto.commit`` set, by :func:`_reader`)
_DROPPED = frozenset(
    {
        "group.instance.id",
        "group.protocol",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "partition.assignment.strategy",
    }
)
_SYNCS_ON_SOURCE = re.compile(r"^mm2-offset-syncs\.(.+)\.internal$")


def checkpoints_topic(failover: Failover) -> str:
    """``<source alias>.checkpoints.internal``: where the target holds the checkpoints."""
    return f"{failover.source_alias}.checkpoints.internal"


def offset_syncs_topic(failover: Failover) -> str:
    """``mm2-offset-syncs.<source alias>.internal``: the offset syncs on the target
    (``offset-syncs.topic.location=target``)."""
    return f"mm2-offset-syncs.{failover.source_alias}.internal"


def _reader(conf: Mapping[str, Any]) -> Consumer:
    kept = {k: v for k, v in conf.items() if k not in _DROPPED and not callable(v)}
    kept.update(
        {
            "group.id": "kbear-mirror-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 50,
        }
    )
    return Consumer(kept)


def read_records(
    conf: Mapping[str, Any], topic: str, timeout_s: float = READ_TIMEOUT_S
) -> tuple[list[tuple[bytes | None, bytes | None]], bool]:
    """Every (key, value) of ``topic`` up to its end offsets now, in offset order per
    partition (partitions one after the other).

    Args:
        conf: a librdkafka configuration of the cluster (``bootstrap.servers``,
            security); group keys and callbacks are dropped, nothing is committed.
        topic: the topic; one that does not exist reads as empty.
        timeout_s: bound of the whole read (seconds).

    Returns:
        (records, complete): ``complete`` is False when the read stopped at the
        time bound or the cluster did not answer (records then holds what was read).
    """
    deadline = time.monotonic() + timeout_s
    consumer = _reader(conf)
    try:
        try:
            meta = consumer.list_topics(topic, timeout=max(0.1, timeout_s)).topics.get(topic)
        except KafkaException as exc:
            log.warning("kbear: mirror topic %r could not be listed: %s", topic, exc)
            return [], False
        if meta is None or meta.error is not None or not meta.partitions:
            return [], meta is not None
        pending: dict[int, int] = {}  # partition -> its end offset, until read to it
        starts = []
        for p in sorted(meta.partitions):
            left = deadline - time.monotonic()
            if left <= 0:
                return [], False
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=left)
            except KafkaException as exc:
                log.warning("kbear: mirror topic %r partition %d: no watermarks: %s", topic, p, exc)
                return [], False
            if high > low:
                pending[p] = high
                starts.append(TopicPartition(topic, p, low))
        got: dict[int, list[tuple[bytes | None, bytes | None]]] = {p: [] for p in pending}
        consumer.assign(starts)
        while pending and (left := deadline - time.monotonic()) > 0:
            # consume() waits for its count or its timeout: short waits, many rounds
            for msg in consumer.consume(500, min(left, 0.05)):
                if msg.error() is not None:
                    continue
                p, offset = msg.partition(), msg.offset()
                if p in pending:
                    got[p].append((msg.key(), msg.value()))
                    if offset is not None and offset + 1 >= pending[p]:
                        del pending[p]
        return [r for p in sorted(got) for r in got[p]], not pending
    finally:
        consumer.close()


def _decoded(records: Iterable[tuple[bytes | None, bytes | None]], decode: Any, what: str) -> list[Any]:
    out = []
    for key, value in records:
        try:
            out.append(decode(key, value))
        except MirrorRecordError as exc:
            log.warning("kbear: a record of %s is not MirrorMaker 2's: %s", what, exc)
    return out


@dataclass(frozen=True)
class MirrorView:
    """What a MirrorMaker 2 mirror wrote, read at one time.

    Attributes:
        checkpoints: the latest checkpoints.
        syncs: the offset syncs.
        complete: both topics were read to their end.
        syncs_topic: where the syncs were read (None: none found).
    """

    checkpoints: CheckpointIndex
    syncs: OffsetSyncIndex
    complete: bool
    syncs_topic: str | None

    def translate(
        self,
        group: str,
        failover: Failover,
        source_topic: str,
        partitions: Iterable[int],
        upstream: Mapping[int, int] | None = None,
    ) -> dict[int, TranslatedStart]:
        """:func:`~kbear.mirror.translate_group` over this view, the target topic
        named by ``failover``'s replication policy."""
        return translate_group(
            group,
            source_topic,
            failover.remote_topic(source_topic),
            partitions,
            upstream=upstream,
            checkpoints=self.checkpoints,
            syncs=self.syncs,
        )


def _source_syncs_topic(conf: Mapping[str, Any], timeout_s: float) -> str | None:
    consumer = _reader(conf)
    try:
        topics = consumer.list_topics(timeout=max(0.1, timeout_s)).topics
    except KafkaException:
        return None
    finally:
        consumer.close()
    found = sorted(t for t in topics if _SYNCS_ON_SOURCE.match(t))
    return found[0] if len(found) == 1 else None


def read_mirror(
    failover: Failover,
    target_conf: Mapping[str, Any],
    source_conf: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = READ_TIMEOUT_S,
) -> MirrorView:
    """Read a MirrorMaker 2 mirror's checkpoints and offset syncs (see the module docstring).

    Args:
        failover: the source cluster's declaration (alias, replication policy).
        target_conf: a librdkafka configuration of the target (standby) cluster.
        source_conf: one of the source cluster, when it can be asked (None: it is
            down; the offset syncs are then read on the target only).
        timeout_s: bound of each topic's read (seconds).

    Returns:
        a :class:`MirrorView`; records that are not MirrorMaker 2's are skipped with
        a warning on the ``kbear.mirror`` logger. Never raises for an absent cluster
        or topic: the view is then empty and ``complete`` False.
    """
    raw, complete = read_records(target_conf, checkpoints_topic(failover), timeout_s)
    checkpoints = CheckpointIndex().extend(_decoded(raw, decode_checkpoint, checkpoints_topic(failover)))
    where: str | None = offset_syncs_topic(failover)
    raw_syncs, syncs_done = read_records(target_conf, offset_syncs_topic(failover), timeout_s)
    if not raw_syncs and source_conf is not None:
        where = _source_syncs_topic(source_conf, timeout_s)
        if where is not None:
            raw_syncs, syncs_done = read_records(source_conf, where, timeout_s)
    syncs = OffsetSyncIndex().extend(_decoded(raw_syncs, decode_offset_sync, where or "offset syncs"))
    return MirrorView(checkpoints, syncs, complete and syncs_done, where if raw_syncs else None)
