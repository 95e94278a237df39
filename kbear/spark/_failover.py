"""The ``kbear`` source's failovers, driver side: a cluster that does not answer, the
lost-cluster policy, and the start on a standby translated through its mirror.

- A cluster that does not answer a micro-batch's questions (metadata, end offsets)
  gives its topics no new offsets in that batch: a warning when it stops (and when it
  answers again), the ``kbear_clusters_unanswered_total`` metric while it does not
  (:class:`~kbear._events.ClusterUnanswered`), not a query failure.
- The same observations feed the clients' lost-cluster policy
  (:class:`kbear._lost.LostWatch`, ``kbear.failover.enable`` /
  ``kbear.failover.after.ms``): a cluster lost with failover enabled has its routes
  sent to its standby (:func:`kbear._standby.standby_route`), as the operator's
  ``kbear failover`` (``kbear.failover.active``) does through the router.
- A move from a failed-over cluster to the standby it is mirrored to (``kbear.mirror``
  ``mm2`` or ``identical``, the topic being the mirror's copy) is not drained: the
  standby is read from this source's positions on the lost cluster, translated
  (:func:`mirror_start`): MirrorMaker 2's offset syncs (never past the true position:
  what was mirrored after the sync used is read again, nothing is skipped), narrowed
  to right after the copy of the last record read when found on the standby
  (:mod:`kbear.spark._copies`), the same offsets for an identical mirror. A partition
  without a translation starts at the standby's earliest offset (nothing lost), or its
  latest with ``kbear.switch.start: latest``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kbear import _events
from kbear._lost import LostWatch
from kbear._route import Route
from kbear._standby import standby_route
from kbear.config import Failover, KBearConfig, MirrorKind
from kbear.spark._copies import copied_in_step, copy_after, mark_of
from kbear.spark._read import READER_CONF

if TYPE_CHECKING:
    from kbear.mirror import OffsetSync, OffsetSyncIndex

__all__ = [
    "META_TIMEOUT_S",
    "PROBE_TIMEOUT_S",
    "SourceFailover",
    "fail_back_start",
    "mirror_of",
    "mirror_start",
]

log = logging.getLogger("kbear.spark")

#: Bound of a metadata or end-offsets question to a cluster that answers (seconds).
META_TIMEOUT_S = 10.0
#: The same, to a cluster that did not answer its last question (seconds): a batch
#: does not wait long on a cluster known down.
PROBE_TIMEOUT_S = 2.0


class SourceFailover:
    """The lost-cluster policy of one ``kbear`` source reader (driver side; see the module).

    Args:
        enabled: ``kbear.failover.enable``.
        after_ms: ``kbear.failover.after.ms``.
        config: the configuration in force (None: not routed, no standby).
    """

    def __init__(self, enabled: bool, after_ms: int, config: Callable[[], KBearConfig] | None) -> None:
        self._config = config
        self._watch = (
            None if config is None else LostWatch("spark", enabled, after_ms, config, log, wall=time.time)
        )
        #: clusters that did not answer their last question
        self.down: set[str] = set()

    @property
    def failed(self) -> set[str]:
        """The clusters this source failed over itself (``kbear.failover.enable``)."""
        return set() if self._watch is None else self._watch.failed

    def timeout(self, cluster: str) -> float:
        """How long to wait for ``cluster``'s answer (seconds)."""
        return PROBE_TIMEOUT_S if cluster in self.down else META_TIMEOUT_S

    def answered(self, cluster: str) -> None:
        """``cluster`` answered a question."""
        if cluster in self.down:
            self.down.discard(cluster)
            log.warning("kbear source: cluster %r answers again", cluster)
        if self._watch is not None:
            self._watch.observe(cluster, True)

    def unanswered(self, cluster: str, topics: list[str], error: Exception) -> None:
        """``cluster`` did not answer a batch's question about ``topics`` (physical
        names): they get no new offsets in this batch."""
        if cluster not in self.down:
            log.warning(
                "kbear source: cluster %r does not answer (%s): micro-batches go on without its "
                "topics %s until it answers or is failed over",
                cluster,
                error,
                topics,
                extra=_events.fields("cluster_unanswered", None, cluster=cluster),
            )
        self.down.add(cluster)
        _events.emit(_events.ClusterUnanswered("spark", cluster))
        if self._watch is not None:
            self._watch.observe(cluster, False)

    def tick(self) -> None:
        """Let time pass: a cluster the policy declares lost now is failed over (with
        ``kbear.failover.enable`` and a standby): its routes go to the standby from
        the next lookup on."""
        if self._watch is not None:
            for cluster, standby in self._watch.tick():
                log.warning("kbear source: cluster %r failed over to %r by this query", cluster, standby)

    def release(self, config: KBearConfig) -> None:
        """End this source's own failovers the operator decided about since
        (:meth:`kbear._lost.LostWatch.release`)."""
        if self._watch is not None and self._watch.failed:
            self._watch.release(config)

    def route(self, route: Route, config: KBearConfig) -> Route:
        """``route``, or the same route to its standby when this source failed its cluster over."""
        return standby_route(route, config, self.failed)

    def recorded(self) -> dict[str, dict[str, Any]]:
        """This source's own failovers, for the offsets: cluster -> ``{"at": wall-clock
        seconds, "decided": the operator's kbear.failover.decided then (ISO) or None}``."""
        if self._watch is None:
            return {}
        out = {}
        for cluster in sorted(self._watch.failed):
            decided, at = self._watch.since(cluster)
            out[cluster] = {"at": at.timestamp(), "decided": None if decided is None else decided.isoformat()}
        return out

    def restore(self, recorded: Mapping[str, Mapping[str, Any]]) -> None:
        """Take up the failovers recorded in the offsets (a restarted query)."""
        if self._watch is None:
            return
        for cluster, what in recorded.items():
            if cluster in self._watch.failed:
                continue
            decided = what.get("decided")
            self._watch.restore(
                cluster,
                None if decided is None else datetime.fromisoformat(str(decided)),
                datetime.fromtimestamp(float(what.get("at", 0.0)), UTC),
            )

    def mirror(self, cluster: str, kind: MirrorKind | None = None) -> Failover | None:
        """:func:`mirror_of` in the configuration in force (None: not routed)."""
        return None if self._config is None else mirror_of(self._config(), cluster, kind)

    def mirror_move(self, old: Route, new: Route) -> bool:
        """Whether a move from ``old`` to ``new`` is a failover to the standby that
        ``old``'s cluster is mirrored to (``mm2`` or ``identical``), to the mirror's
        copy of the topic, the cluster failed over by this source or by the operator
        (``kbear.failover.active``)."""
        failover = None if self._config is None else _copied_to(self._config(), old, new)
        return failover is not None and (failover.active or old.cluster_id in self.failed)


def mirror_of(config: KBearConfig, cluster: str, kind: MirrorKind | None = None) -> Failover | None:
    """``cluster``'s failover declaration when it is mirrored (by ``kind`` when given)
    to a standby of ``config``, else None."""
    declared = config.clusters.get(cluster)
    if declared is None:
        return None
    failover = declared.failover
    if (
        failover.mirror is MirrorKind.NONE
        or (kind is not None and failover.mirror is not kind)
        or failover.standby not in config.clusters
    ):
        return None
    return failover


def _copied_to(
    config: KBearConfig, src: Route, dst: Route, kind: MirrorKind | None = None
) -> Failover | None:
    """``src``'s cluster's mirror declaration (by ``kind`` when given) when ``dst`` is the
    mirror's copy of ``src``'s topic on its standby, else None."""
    failover = mirror_of(config, src.cluster_id, kind)
    if (
        failover is None
        or failover.standby != dst.cluster_id
        or failover.remote_topic(src.topic) != dst.topic
    ):
        return None
    return failover


def mirror_start(
    config: KBearConfig,
    old: Route,
    new: Route,
    upstream: Mapping[str, int],
    marks: Mapping[int, tuple[int, int]],
    properties: Callable[[str], dict[str, str]],
    old_answers: bool,
    fallback: str,
    last: Mapping[str, Any],
) -> tuple[dict[str, int], dict[str, Any]]:
    """Where the standby ``new`` is read from after a failover from ``old``.

    Args:
        config: the configuration (``old``'s cluster's mirror declaration).
        old, new: the routes before and after the failover.
        upstream: partition (str) -> this source's next offset on ``old``.
        marks: partition -> (low, high) watermarks of ``new``'s topic.
        properties: cluster id -> librdkafka properties to reach it.
        old_answers: whether ``old``'s cluster answers (its offset syncs are read
            there too when the standby holds none).
        fallback: ``earliest`` or ``latest``: where a partition without a
            translation starts (``kbear.switch.start``).
        last: offsets holding ``last``, the last record read of each partition
            (:func:`~kbear.spark._copies.remember`): under MirrorMaker 2, a partition
            read on ``old`` up to right after that record starts right after its copy
            when found on the standby (:mod:`kbear.spark._copies`).

    Returns:
        (positions on ``new``: partition (str) -> offset, the translation for the
        offsets: ``{"from": {...}, "to": {...}, "mirror": kind, "partitions":
        {p: {"from": upstream or None, "to": offset, "by": checkpoint | offset-sync
        | record | identical | none}}}``; ``record``: after the copy of the last
        record read).
    """
    failover = config.clusters[old.cluster_id].failover
    known = {int(p): int(o) for p, o in upstream.items() if int(o) >= 0}
    positions: dict[str, int] = {}
    by: dict[int, tuple[str, int | None]] = {}
    if failover.mirror is MirrorKind.IDENTICAL:
        for p in marks:
            by[p] = ("identical", known[p]) if p in known else ("none", None)
    else:
        from kbear.mirror import StartSource, read_mirror  # a cluster mirrored by MirrorMaker 2 only

        view = read_mirror(
            failover,
            properties(new.cluster_id),
            properties(old.cluster_id) if old_answers else None,
        )
        for p, s in view.translate("", failover, old.topic, marks, upstream=known).items():
            by[p] = ("none", None) if s.source is StartSource.NONE else (s.source.value, s.offset)
        for p, at in known.items():
            mark = mark_of(last, old.cluster_id, old.topic, str(p), at)
            if mark is not None and p in by and by[p][1] is not None:
                where = ({**properties(new.cluster_id), **READER_CONF}, old.topic, new.topic, p)
                found = copy_after(view.syncs, *where, mark)
                if found is not None and found > (by[p][1] or 0):
                    by[p] = ("record", found)
        if not view.complete:
            log.warning(
                "kbear source: the mirror's offset syncs of %r were not read to their end", old.cluster_id
            )
    for p, (low, high) in marks.items():
        offset = by[p][1]
        if offset is None:
            offset = low if fallback == "earliest" else high
        positions[str(p)] = min(max(offset, low), high)
    missing = sorted(p for p, (how, _) in by.items() if how == "none")
    log.warning(
        "kbear source: %r fails over from %s/%s to %s/%s at %s (translated by %s)%s",
        old.requested_topic,
        old.cluster_id,
        old.topic,
        new.cluster_id,
        new.topic,
        positions,
        failover.mirror.value,
        f"; partitions {missing} without a translation start at the {fallback} offset" if missing else "",
    )
    for decided_by, count in sorted(
        Counter("committed" if h == "none" else h for h, _ in by.values()).items()
    ):
        _events.emit(
            _events.MirroredStart(
                "spark", old.requested_topic, new.cluster_id, old.cluster_id, decided_by, count
            )
        )
    parts = {str(p): {"from": known.get(p), "to": positions[str(p)], "by": by[p][0]} for p in sorted(marks)}
    return positions, _translation(old, new, failover, parts)


def _translation(
    old: Route, new: Route, failover: Failover, parts: dict[str, Any], **more: Any
) -> dict[str, Any]:
    """The record of a start translated from ``old`` to ``new`` for the offsets' ``translated``."""
    ends = {
        "from": {"cluster": old.cluster_id, "topic": old.topic},
        "to": {"cluster": new.cluster_id, "topic": new.topic},
    }
    return {**ends, "mirror": failover.mirror.value, **more, "partitions": parts}


def _last_sync_below(
    syncs: OffsetSyncIndex, topic: str, partition: int, downstream: int
) -> OffsetSync | None:
    """The newest sync of ``topic``/``partition`` whose copy lies below ``downstream``
    (every record up to its upstream offset has its copy there), None: none."""
    found, upstream = None, 0
    while (sync := syncs.at_or_after(topic, partition, upstream)) is not None:
        if sync.downstream_offset >= downstream:
            break
        found, upstream = sync, sync.upstream_offset + 1
    return found


def fail_back_start(
    config: KBearConfig,
    old: Route,
    new: Route,
    positions: Mapping[str, int],
    read: Mapping[str, int],
    properties: Callable[[str], dict[str, str]],
) -> tuple[dict[str, int], dict[str, Any]] | None:
    """Where ``new`` is read from after a fail-back from its standby ``old`` (drained).

    When ``new``'s cluster is mirrored to ``old`` by MirrorMaker 2 (``old.topic`` the
    copy of ``new.topic``), each partition starts after the newest record of ``new``
    whose copy this source read on ``old``, never before this source's own position
    on ``new``: through the offset syncs (the newest sync whose downstream offset is
    below this source's position on ``old``), then the records after that sync whose
    copies follow it on ``old`` one by one, in order, with the same timestamp, key
    and value (:func:`kbear.spark._copies.copied_in_step`). What ``new`` holds past
    the position and was mirrored and read on the standby is not read again; what
    was never mirrored is read.

    Args:
        config: the configuration (``new``'s cluster's mirror declaration).
        old, new: the standby, drained, and the cluster failed back to.
        positions: partition (str) -> this source's next offset on ``new``.
        read: partition (str) -> this source's next offset on ``old``.
        properties: cluster id -> librdkafka properties to reach it.

    Returns:
        (partition (str) -> start offset on ``new``, the record for the offsets'
        ``translated``: ``{"from", "to", "mirror": "mm2", "back": true, "partitions":
        {p: {"from": position on old, "to": start, "by": "record" | "offset-sync" |
        "position"}}}``),
        or None when this is no fail-back through MirrorMaker 2.
    """
    failover = _copied_to(config, new, old, MirrorKind.MM2)
    if failover is None:
        return None
    from kbear.mirror import read_mirror  # a cluster mirrored by MirrorMaker 2 only

    view = read_mirror(failover, properties(old.cluster_id), properties(new.cluster_id))
    starts: dict[str, int] = {}
    parts: dict[str, dict[str, Any]] = {}
    new_conf = {**properties(new.cluster_id), **READER_CONF}
    old_conf = {**properties(old.cluster_id), **READER_CONF}
    for p, at in positions.items():
        below = int(read.get(p, 0))
        mine = int(at)  # this source's own position on new
        sync = _last_sync_below(view.syncs, new.topic, int(p), below)
        by_sync = 0 if sync is None else sync.upstream_offset + 1
        in_step = by_sync
        if sync is not None:  # the records after the sync, copied one by one in order
            in_step = copied_in_step(
                new_conf, new.topic, old_conf, old.topic, int(p), by_sync, sync.downstream_offset + 1, below
            )
        starts[p] = max(mine, by_sync, in_step)
        how = "record" if in_step > max(mine, by_sync) else ("offset-sync" if by_sync > mine else "position")
        parts[p] = {"from": read.get(p), "to": starts[p], "by": how}
    log.warning(
        "kbear source: %r fails back from %s/%s to %s/%s at %s (after the copies read on %s)",
        new.requested_topic,
        old.cluster_id,
        old.topic,
        new.cluster_id,
        new.topic,
        starts,
        old.cluster_id,
    )
    return starts, _translation(old, new, failover, parts, back=True)
