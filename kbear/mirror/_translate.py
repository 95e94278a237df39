"""A consumer group's offsets on a mirror's source, translated to its target (pure: no I/O).

Where a group starts on the target of a MirrorMaker 2 mirror, partition by
partition, from:

- the group's committed offset ``u`` on the source, when it is known (the source
  answered; after a drain, its end);
- the group's latest **checkpoint** (``<alias>.checkpoints.internal`` on the
  target): MirrorMaker 2's own translation of a committed offset ``c``;
- the **offset syncs** (``mm2-offset-syncs.<alias>.internal``): pairs (upstream
  offset, downstream offset) of records mirrored.

The rule is MirrorMaker 2's since Kafka 3.5 (KAFKA-14666, ``OffsetSyncStore``):
through the latest sync at or before ``u``, ``u`` becomes that sync's downstream
offset when the sync is for ``u`` itself, else the downstream offset plus one.
A translation is never past the true position (the first record mirrored from
an upstream offset at or after ``u``): the group may re-read what was mirrored
between the sync and ``u``, and skips nothing. A checkpoint is used when its
upstream offset is at or before ``u`` (it is then conservative too); with ``u``
unknown (the source is down) the checkpoint alone decides. The larger of the
conservative candidates wins (the one that re-reads least). A checkpoint's own
upstream offset ``c`` is translated through the offset syncs read too: MirrorMaker
2's checkpoint task translates through the syncs *it* had read when it made the
checkpoint, which may be older than the newest sync at or before ``c`` in the
offset-syncs topic (the task reads that topic on its own schedule); through the
newest one the start is further on, as conservative (every sync at or before ``c``
is), and what is read again is bounded by that sync's lag, ``c`` minus its upstream
offset. This matters when the source is down and the checkpoint decides alone. A partition with
none of these has no translation (:attr:`StartSource.NONE`): the caller falls
back on the group's committed offsets on the target, else ``auto.offset.reset``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from kbear.mirror._codec import Checkpoint, OffsetSync

__all__ = ["CheckpointIndex", "OffsetSyncIndex", "StartSource", "TranslatedStart", "translate_group"]


class StartSource(StrEnum):
    """What decided a translated start: a ``checkpoint``, an ``offset-sync``, or
    ``none`` (no translation: committed offsets on the target, else ``auto.offset.reset``)."""

    CHECKPOINT = "checkpoint"
    OFFSET_SYNC = "offset-sync"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class TranslatedStart:
    """Where a group starts on one partition of the target.

    Attributes:
        partition: the partition (same number on both sides, as MirrorMaker 2 mirrors).
        offset: the start offset on the target; None: no translation.
        source: what decided it (:class:`StartSource`).
        upstream_offset: the source offset translated (the group's, or the
            checkpoint's when the group's was unknown); None without one.
        anchor_upstream: the upstream offset of the offset sync the start was
            translated through: for ``offset-sync``, the newest sync at or before
            ``upstream_offset`` among those read; for a checkpoint, the sync
            MirrorMaker 2 used, when the syncs read still hold it. The group
            re-reads at most ``upstream_offset - anchor_upstream`` messages (the
            mirror's sync lag there). None when not known.
    """

    partition: int
    offset: int | None
    source: StartSource
    upstream_offset: int | None = None
    anchor_upstream: int | None = None

    @property
    def reread_bound(self) -> int | None:
        """At most how many messages the group reads again on this partition (None: unknown)."""
        if self.upstream_offset is None or self.anchor_upstream is None:
            return None
        return max(0, self.upstream_offset - self.anchor_upstream)


@dataclass
class OffsetSyncIndex:
    """The offset syncs of a mirror, per source (topic, partition), in upstream order.

    Feed it records in the order of the offset-syncs topic (:meth:`add`). A sync
    at or before the last one of its partition (the topic was re-created or
    truncated on the source, or the mirror restarted further back) drops the syncs
    at or after it, as MirrorMaker 2's store does.
    """

    _syncs: dict[tuple[str, int], tuple[list[int], list[int]]] = field(default_factory=dict)

    def add(self, sync: OffsetSync) -> None:
        """Record ``sync`` (the newest so far)."""
        ups, downs = self._syncs.setdefault((sync.topic, sync.partition), ([], []))
        if ups and sync.upstream_offset <= ups[-1]:
            cut = bisect.bisect_left(ups, sync.upstream_offset)
            del ups[cut:], downs[cut:]
        ups.append(sync.upstream_offset)
        downs.append(sync.downstream_offset)

    def extend(self, syncs: Iterable[OffsetSync]) -> OffsetSyncIndex:
        """Record ``syncs`` in order; returns this index."""
        for sync in syncs:
            self.add(sync)
        return self

    def latest(self, topic: str, partition: int) -> OffsetSync | None:
        """The newest sync of source ``topic``/``partition``, if any."""
        ups, downs = self._syncs.get((topic, partition), ([], []))
        if not ups:
            return None
        return OffsetSync(topic, partition, ups[-1], downs[-1])

    def anchor_of(self, topic: str, partition: int, upstream: int, downstream: int) -> int | None:
        """The upstream offset of the sync that translates ``upstream`` to ``downstream``
        by MirrorMaker 2's rule (the latest such sync at or before ``upstream``): the
        sync a checkpoint was made through; None when no sync known here does."""
        ups, downs = self._syncs.get((topic, partition), ([], []))
        for at in range(bisect.bisect_right(ups, upstream) - 1, -1, -1):
            if downs[at] + (ups[at] < upstream) == downstream:
                return ups[at]
            if downs[at] < downstream - 1:
                break
        return None

    def at_or_after(self, topic: str, partition: int, upstream: int) -> OffsetSync | None:
        """The oldest sync of source ``topic``/``partition`` at or after ``upstream``:
        every record up to its upstream offset is on the target, at or before its
        downstream offset (None: no sync that far yet)."""
        ups, downs = self._syncs.get((topic, partition), ([], []))
        at = bisect.bisect_left(ups, upstream)
        if at == len(ups):
            return None
        return OffsetSync(topic, partition, ups[at], downs[at])

    def translate(self, topic: str, partition: int, upstream: int) -> tuple[int, int] | None:
        """Source ``topic``/``partition`` offset ``upstream`` on the target, as
        (downstream offset, upstream offset of the sync used); None when no sync is
        at or before ``upstream`` (too far back to translate)."""
        ups, downs = self._syncs.get((topic, partition), ([], []))
        at = bisect.bisect_right(ups, upstream) - 1
        if at < 0:
            return None
        down = downs[at] if ups[at] == upstream else downs[at] + 1
        return down, ups[at]


@dataclass
class CheckpointIndex:
    """The latest checkpoint per (group, target topic, partition), as a compacted
    checkpoints topic keeps it (the last record of a key wins)."""

    _latest: dict[tuple[str, str, int], Checkpoint] = field(default_factory=dict)

    def add(self, checkpoint: Checkpoint) -> None:
        """Record ``checkpoint`` (the newest of its key so far)."""
        self._latest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint

    def extend(self, checkpoints: Iterable[Checkpoint]) -> CheckpointIndex:
        """Record ``checkpoints`` in order; returns this index."""
        for checkpoint in checkpoints:
            self.add(checkpoint)
        return self

    def get(self, group: str, topic: str, partition: int) -> Checkpoint | None:
        """The latest checkpoint of ``group`` on target ``topic``/``partition``."""
        return self._latest.get((group, topic, partition))

    def all(self) -> list[Checkpoint]:
        """Every latest checkpoint, by (group, target topic, partition)."""
        return [self._latest[key] for key in sorted(self._latest)]

    def partitions(self, group: str, topic: str) -> set[int]:
        """The partitions of target ``topic`` with a checkpoint of ``group``."""
        return {p for (g, t, p) in self._latest if g == group and t == topic}


def _one(
    partition: int,
    upstream: int | None,
    checkpoint: Checkpoint | None,
    syncs: OffsetSyncIndex,
    source_topic: str,
) -> TranslatedStart:
    # the group's offset when known (a later sync than any at or before the
    # checkpoint's), else the checkpoint's own: translated through the newest sync read
    through = checkpoint.upstream_offset if upstream is None and checkpoint is not None else upstream
    candidates: list[TranslatedStart] = []
    if checkpoint is not None and (upstream is None or checkpoint.upstream_offset <= upstream):
        # the sync MirrorMaker 2 translated the checkpoint through, when still known
        anchor = syncs.anchor_of(
            source_topic, partition, checkpoint.upstream_offset, checkpoint.downstream_offset
        )
        start = TranslatedStart(
            partition, checkpoint.downstream_offset, StartSource.CHECKPOINT, through, anchor
        )
        candidates.append(start)
    if through is not None and (by_sync := syncs.translate(source_topic, partition, through)) is not None:
        down, anchor = by_sync
        candidates.append(TranslatedStart(partition, down, StartSource.OFFSET_SYNC, through, anchor))
    if not candidates:
        return TranslatedStart(partition, None, StartSource.NONE, upstream)
    # the furthest conservative start; on a tie the one through the later sync (the
    # tighter bound of what is read again)
    return max(
        candidates, key=lambda c: (c.offset or 0, -1 if c.anchor_upstream is None else c.anchor_upstream)
    )


def translate_group(
    group: str,
    source_topic: str,
    target_topic: str,
    partitions: Iterable[int],
    *,
    upstream: Mapping[int, int] | None = None,
    checkpoints: CheckpointIndex,
    syncs: OffsetSyncIndex,
) -> dict[int, TranslatedStart]:
    """Where ``group`` starts on ``target_topic`` (the mirrored copy of ``source_topic``).

    Args:
        group: the consumer group id (the same on both clusters).
        source_topic: the topic's name on the source (offset syncs are keyed by it).
        target_topic: its name on the target (checkpoints are keyed by it):
            ``<alias>.<topic>`` under MirrorMaker 2's default replication policy.
        partitions: the partitions to place.
        upstream: partition -> the group's committed offset on the source (a
            negative offset or a missing partition: unknown, e.g. the source is down).
        checkpoints: the checkpoints read from the target.
        syncs: the offset syncs read.

    Returns:
        partition -> :class:`TranslatedStart` (see the module docstring for the rule).
    """
    known = {p: o for p, o in (upstream or {}).items() if o >= 0}
    out = {}
    for partition in sorted(set(partitions)):
        checkpoint = checkpoints.get(group, target_topic, partition)
        out[partition] = _one(partition, known.get(partition), checkpoint, syncs, source_topic)
    return out
