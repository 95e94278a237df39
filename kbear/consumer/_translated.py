"""``kbear.switch.start=translated``: where a moved topic starts on its new cluster,
from the group's offsets on the old one and the old cluster's mirror.

The old cluster's ``clusters.yaml`` entry says how it is mirrored
(:class:`kbear.config.Failover`):

- ``kbear.mirror: mm2`` (MirrorMaker 2) with ``kbear.failover.to`` naming the new
  cluster, the topic read there being the mirror's copy (``<alias>.<topic>`` under
  the default replication policy: where a failover routes it, and a rule change
  with a remap): MirrorMaker 2's checkpoints and offset syncs are read (on the new
  cluster; the offset syncs on the old one too when it answers) and translated
  (:mod:`kbear.mirror`): never past the true position; a partition without a
  translation starts from the group's committed offset on the new cluster, else
  ``auto.offset.reset``; one whose committed offset on the new cluster is past the
  translation (a member of the group already read there) starts from it;
- ``kbear.mirror: identical`` (offsets the same on both sides): the group's
  committed offsets on the old cluster at the switch, as they are;
- no mirror to the new cluster (``none``, or another standby): the committed
  offsets on the new cluster, with a warning.

The reads run when the topic's partitions are assigned on the new cluster, each
bounded by :data:`TRANSLATION_TIMEOUT_S`: for a subscription in the consumer's
background thread while the partitions wait paused (:mod:`kbear.consumer._startlater`),
so that the call serving the assignment keeps its timeout; for a manual assignment
in ``assign()``. They use clients of their own (the group's committed offsets: the
cluster's background client), never the member's.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaException, TopicPartition

from kbear import _events
from kbear._clients import cluster_config
from kbear._route import Route
from kbear._switch_types import StartPlan
from kbear.config import Failover, MirrorKind
from kbear.consumer._cluster import ClusterClient
from kbear.mirror import StartSource, TranslatedStart, read_mirror
from kbear.router import Router

__all__ = ["TRANSLATION_TIMEOUT_S", "MirrorStarts", "mirror_to", "mirrored_to"]

log = logging.getLogger("kbear.consumer")

#: what decided a start that is not translated (:class:`~kbear._events.MirroredStart`)
COMMITTED = "committed"

#: Bound of each read of a mirror's topics at a translated start (seconds).
TRANSLATION_TIMEOUT_S = 10.0


def mirror_to(router: Router, cluster_id: str, standby: str) -> Failover | None:
    """The failover declaration of ``cluster_id`` when it declares a mirror
    (``kbear.mirror`` not ``none``) to ``standby`` (its ``kbear.failover.to``), else None."""
    cluster = router.config.clusters.get(cluster_id)
    failover = None if cluster is None else cluster.failover
    if failover is None or failover.mirror is MirrorKind.NONE or failover.standby != standby:
        return None
    return failover


def mirrored_to(router: Router, old: Route, new: Route | None) -> bool:
    """Whether ``old``'s cluster declares a mirror to ``new``'s (:func:`mirror_to`):
    the drain of such a move ends at once when the old cluster is dead, since what it
    could not read there is on the new one."""
    return new is not None and mirror_to(router, old.cluster_id, new.cluster_id) is not None


class MirrorStarts:
    """The ``translate`` of a consumer's :class:`~kbear.consumer._rebalance.Rebalancer`.

    Args:
        router: the consumer's router (the old cluster's mirror declaration).
        group: the consumer group id.
        native: the application's confluent-kafka configuration (merged under each
            cluster's properties to reach it).
        offsets_client: the client of a cluster asked for the group's committed
            offsets there (the registry's background client,
            :meth:`~kbear.consumer._cluster.ClusterRegistry.watcher`).

    Attributes:
        last: (cluster id, physical topic) -> partition -> the last translation made
            for a topic moved there (``mm2`` only), for logs and tests.
    """

    def __init__(
        self,
        router: Router,
        group: str,
        native: Mapping[str, Any],
        offsets_client: Callable[[ClusterClient], Any],
    ) -> None:
        self._router = router
        self._group = group
        self._native = dict(native)
        self._offsets_client = offsets_client
        self.last: dict[tuple[str, str], dict[int, TranslatedStart]] = {}

    def __call__(
        self, entry: ClusterClient, partitions: list[TopicPartition], plan: StartPlan
    ) -> list[TopicPartition]:
        """``partitions`` (physical names, on ``entry``'s cluster) with their translated
        start offsets (``OFFSET_INVALID``: the committed offset, else ``auto.offset.reset``);
        what decided them is reported (:class:`~kbear._events.MirroredStart`, per kind of
        start)."""
        source = plan.source
        if source is None or not partitions:
            return partitions
        out, decided = self._starts(entry, partitions, plan, source)
        for decided_by, count in sorted(Counter(decided).items()):
            _events.emit(
                _events.MirroredStart(
                    "consumer", source.requested_topic, entry.cluster_id, source.cluster_id, decided_by, count
                )
            )
        return out

    def _starts(
        self, entry: ClusterClient, partitions: list[TopicPartition], plan: StartPlan, source: Route
    ) -> tuple[list[TopicPartition], list[str]]:
        """The start of each partition and what decided it (``committed``: no translation)."""
        committed = [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in partitions]
        failover = mirror_to(self._router, source.cluster_id, entry.cluster_id)
        if failover is None:
            log.warning(
                "kbear: kbear.switch.start=translated: cluster %r is not declared mirrored to %r "
                "(kbear.mirror, kbear.failover.to in clusters.yaml): %r starts from the committed offsets",
                source.cluster_id,
                entry.cluster_id,
                source.requested_topic,
            )
            return committed, [COMMITTED] * len(partitions)
        copy = failover.remote_topic(source.topic)
        if partitions[0].topic != copy:
            # (a failover routes to the mirror's copy, kbear._standby; a rule change
            # may route elsewhere, e.g. to the topic's own name under MirrorMaker 2's
            # default replication policy, whose copy is <alias>.<topic>: a remap does it)
            log.warning(
                "kbear: kbear.switch.start=translated: %r is read as %r on cluster %r, not the mirror's "
                "copy %r (remap the rule to it): it starts from the committed offsets",
                source.requested_topic,
                partitions[0].topic,
                entry.cluster_id,
                copy,
            )
            return committed, [COMMITTED] * len(partitions)
        known = {p: o for p, o in plan.upstream.items() if o >= 0}
        if failover.mirror is MirrorKind.IDENTICAL:
            out = [
                TopicPartition(tp.topic, tp.partition, known.get(tp.partition, OFFSET_INVALID))
                for tp in partitions
            ]
            log.info(
                "kbear: %r starts on cluster %r at its offsets on %r: %s",
                source.requested_topic,
                entry.cluster_id,
                source.cluster_id,
                out,
            )
            return out, ["identical" if tp.partition in known else COMMITTED for tp in partitions]
        out = self._mm2(entry, partitions, plan, failover, known)
        starts = self.last[(entry.cluster_id, partitions[0].topic)]
        # committed: no translation, or the group's commit on the standby went further
        decided = [
            COMMITTED
            if (d := starts[tp.partition]).source is StartSource.NONE or tp.offset != d.offset
            else d.source.value
            for tp in out
        ]
        return out, decided

    def _mm2(
        self,
        entry: ClusterClient,
        partitions: list[TopicPartition],
        plan: StartPlan,
        failover: Failover,
        known: dict[int, int],
    ) -> list[TopicPartition]:
        source = plan.source
        assert source is not None
        target_topic = partitions[0].topic
        view = read_mirror(
            failover,
            cluster_config(self._native, entry.properties),
            cluster_config(self._native, source.properties) if known else None,
            timeout_s=TRANSLATION_TIMEOUT_S,
        )
        # (the topic read is the mirror's copy, failover.remote_topic: checked by _starts)
        numbers = [tp.partition for tp in partitions]
        starts = view.translate(self._group, failover, source.topic, numbers, known)
        self.last[(entry.cluster_id, target_topic)] = starts
        ahead = _committed_ahead(self._offsets_client(entry), entry.cluster_id, partitions, starts)
        out = [
            TopicPartition(
                tp.topic,
                tp.partition,
                ahead.get(
                    tp.partition, o if (o := starts[tp.partition].offset) is not None else OFFSET_INVALID
                ),
            )
            for tp in partitions
        ]
        missing = sorted(p for p, s in starts.items() if s.source is StartSource.NONE and p not in ahead)
        log.info(
            "kbear: %r starts on cluster %r translated from %r by MirrorMaker 2 (%s): %s%s",
            source.requested_topic,
            entry.cluster_id,
            source.cluster_id,
            ", ".join(
                f"{p}: committed {ahead[p]} (past {s.source.value} {s.offset})"
                if p in ahead
                else f"{p}: {s.source.value} {s.offset}"
                for p, s in sorted(starts.items())
            ),
            "" if view.complete else " (the mirror's topics were not read to their end)",
            f"; partitions {missing} from the committed offsets" if missing else "",
        )
        return out


def _committed_ahead(
    client: Any, cluster_id: str, partitions: list[TopicPartition], starts: Mapping[int, TranslatedStart]
) -> dict[int, int]:
    """The group's committed offsets on the standby that are past the translation, by
    partition: a member of the group has read there since the move (members of a group
    move one by one, each its own client's decision or reload), so the translation
    would read that again. MirrorMaker 2's own ``sync.group.offsets`` likewise never
    moves a group's offsets on the target back. A lookup that fails (bounded by
    :data:`TRANSLATION_TIMEOUT_S`) leaves the translation. ``client``: a client of
    the group's cluster ``cluster_id``."""
    try:
        committed = client.committed(
            [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=TRANSLATION_TIMEOUT_S
        )
    except KafkaException as exc:
        log.warning("kbear: the group's committed offsets on cluster %r: %s", cluster_id, exc)
        return {}
    ahead = {}
    for tp in committed:
        start = starts.get(tp.partition)
        translated = -1 if start is None or start.offset is None else start.offset
        if tp.error is None and tp.offset >= 0 and tp.offset > translated:
            ahead[tp.partition] = tp.offset
    return ahead
