"""The lag of a MirrorMaker 2 mirror per consumer group, for ``GET /clusters``.

For a cluster with ``kbear.mirror: mm2`` and a standby, the mirror's checkpoints
(``<alias>.checkpoints.internal`` on the standby, :func:`kbear.mirror.read_mirror`)
say, per consumer group and partition, the offset the group had committed on the
cluster when MirrorMaker 2 last translated it. The group's committed offset on
the cluster now, minus that, is what the group would read again after a failover
(records, summed over the partitions): its **lag behind the mirror**. When the
cluster does not answer, the checkpoints are shown without the lag.

Reading is blocking I/O bounded by ``timeout_s`` per read; the server does it in
the background (:class:`kbear.server.clusters.ClusterBoard`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from kbear.config import ClusterConfig, MirrorKind, ReplicationPolicy
from kbear.mirror import read_mirror

__all__ = ["GroupLag", "MirrorLag", "read_mirror_lag"]


@dataclass(frozen=True)
class GroupLag:
    """One group's lag on one topic: records behind the mirror's last checkpoint
    (None: the cluster did not answer), over ``partitions`` checkpointed partitions."""

    group: str
    topic: str
    lag: int | None
    partitions: int


@dataclass
class MirrorLag:
    """A mirror's lag per group, read at ``read_at`` (Unix time, seconds); ``error``
    says what could not be read ('' when everything was)."""

    read_at: float
    groups: list[GroupLag] = field(default_factory=list)
    error: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "readAt": self.read_at,
            "error": self.error or None,
            "groups": [dataclasses.asdict(g) for g in self.groups],
        }


def _source_topic(cluster: ClusterConfig, remote: str) -> str:
    failover = cluster.failover
    prefix = f"{failover.source_alias}."
    if failover.policy is ReplicationPolicy.DEFAULT and remote.startswith(prefix):
        return remote[len(prefix) :]
    return remote


def _committed(
    conf: Mapping[str, Any], wanted: Mapping[str, list[tuple[str, int]]], timeout_s: float
) -> dict[str, dict[tuple[str, int], int]]:
    """Each group's committed offset on the cluster of ``conf`` for the partitions wanted."""
    settings: dict[str, Any] = dict(conf)
    settings["error_cb"] = lambda err: None  # the answer (or its absence) says it
    admin = AdminClient(settings)
    out: dict[str, dict[tuple[str, int], int]] = {}
    for group, partitions in wanted.items():
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])
        futures = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)
        answer = futures[group].result(timeout=timeout_s)
        out[group] = {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}
    return out


def read_mirror_lag(
    cluster: ClusterConfig, standby: ClusterConfig, timeout_s: float = 5.0
) -> MirrorLag | None:
    """The lag per group of ``cluster``'s mirror to ``standby`` (both with their
    properties resolved); None when ``cluster`` is not mirrored by MirrorMaker 2."""
    if cluster.failover.mirror is not MirrorKind.MM2:
        return None
    out = MirrorLag(time.time())
    source_conf = dict(cluster.client_properties)
    view = read_mirror(cluster.failover, dict(standby.client_properties), source_conf, timeout_s=timeout_s)
    if not view.complete:
        out.error = f"the checkpoints on {standby.id} were not read to their end"
    checkpoints = view.checkpoints.all()
    wanted: dict[str, list[tuple[str, int]]] = {}
    for c in checkpoints:
        wanted.setdefault(c.group, []).append((_source_topic(cluster, c.topic), c.partition))
    try:
        committed = _committed(source_conf, wanted, timeout_s) if wanted else {}
    except Exception as exc:  # KafkaException, a timeout: the cluster does not answer
        committed = {}
        out.error = f"{cluster.id} did not answer: {exc}"
    by_key: dict[tuple[str, str], list[int | None]] = {}
    for c in checkpoints:
        topic = _source_topic(cluster, c.topic)
        now = committed.get(c.group, {}).get((topic, c.partition))
        by_key.setdefault((c.group, topic), []).append(
            None if now is None else max(0, now - c.upstream_offset)
        )
    for (group, topic), lags in sorted(by_key.items()):
        known = None if any(x is None for x in lags) else sum(x for x in lags if x is not None)
        out.groups.append(GroupLag(group, topic, known, len(lags)))
    return out
