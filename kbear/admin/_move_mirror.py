"""``kbear move`` over a mirror: where a group would start with
``kbear.switch.start=translated``, partition by partition, and how far behind
the mirror is (#27 item 4).

Only when the topic's current cluster declares a mirror to the target
(``kbear.failover.to`` naming it, ``kbear.mirror`` not ``none``). For
MirrorMaker 2 the checkpoints and offset syncs are read and translated as a
consumer would at the switch (:mod:`kbear.mirror`), from the group's committed
offsets on the source now (the drain commits the source's ends before the
switch: what it reads until then moves the start further, never back); for an
``identical`` mirror the offsets stay as they are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kbear._route import Route
from kbear.admin._move_state import TopicState
from kbear.config import KBearConfig, MirrorKind
from kbear.mirror import read_mirror

__all__ = ["MirroredStart", "mirrored_starts"]


@dataclass(frozen=True)
class MirroredStart:
    """Where a group starts on one partition of the target with ``translated``.

    Attributes:
        partition: the partition.
        offset: the start offset on the target (None: no translation; the
            committed offset there, else ``auto.offset.reset``).
        decided_by: ``checkpoint``, ``offset-sync``, ``none`` (MirrorMaker 2) or
            ``identical``.
        reread_at_most: at most how many messages are read again (None: unknown).
        mirror_behind: messages of the source not yet known mirrored (MirrorMaker
            2: past its last offset sync; identical: the source's end offset less
            the target's), None when unknown.
    """

    partition: int
    offset: int | None
    decided_by: str
    reread_at_most: int | None
    mirror_behind: int | None

    def describe(self, source_down: str | None = None) -> str:
        """One line of a plan: where the partition starts, what decided it, the
        re-reads bound, how far behind the mirror is (``source_down``: the source
        cluster, when it did not answer: why that is unknown)."""
        at = "committed offset there" if self.offset is None else f"offset {self.offset}"
        reread = "" if self.reread_at_most is None else f", at most {self.reread_at_most} read again"
        if self.mirror_behind is not None:
            behind = f"{self.mirror_behind} message(s)"
        else:
            behind = "unknown" if source_down is None else f"unknown ({source_down} does not answer)"
        start = f"starts at {at} ({self.decided_by}{reread})"
        return f"partition {self.partition}: {start}; mirror behind: {behind}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def mirrored_starts(
    config: KBearConfig,
    now: Route,
    to: str,
    target_topic: str,
    group: str,
    committed: dict[int, int | None],
    source: TopicState,
    target: TopicState,
    timeout_s: float,
) -> tuple[str, list[MirroredStart]] | None:
    """``group``'s translated starts on ``to`` (see the module docstring); None when
    ``now``'s cluster declares no mirror to ``to``. ``source`` without partitions
    (the source cluster does not answer: a failover): the target's partitions, from
    the checkpoints alone, how far behind the mirror is unknown.

    Returns:
        (a description of the mirror, one :class:`MirroredStart` per partition of
        the source).
    """
    source_cluster = config.clusters.get(now.cluster_id)
    target_cluster = config.clusters.get(to)
    if source_cluster is None or target_cluster is None:
        return None
    failover = source_cluster.failover
    if failover.mirror is MirrorKind.NONE or failover.standby != to:
        return None
    upstream = {p: o for p, o in committed.items() if o is not None and o >= 0}
    partitions = sorted(source.high or target.high)
    if failover.mirror is MirrorKind.IDENTICAL:
        return f"identical mirror {now.cluster_id} -> {to}", [
            MirroredStart(
                p,
                upstream.get(p),
                "identical",
                0 if p in upstream else None,
                source.high[p] - target.high[p] if p in target.high and p in source.high else None,
            )
            for p in partitions
        ]
    view = read_mirror(
        failover,
        target_cluster.client_properties,
        source_cluster.client_properties if source.partitions is not None else None,
        timeout_s=timeout_s,
    )
    remote = failover.remote_topic(now.topic)
    starts = view.translate(group, failover, now.topic, partitions, upstream)
    out = []
    for p in partitions:
        latest = view.syncs.latest(now.topic, p)
        behind = (
            source.high[p] - (latest.upstream_offset + 1) if latest is not None and p in source.high else None
        )
        start = starts[p]
        out.append(MirroredStart(p, start.offset, start.source.value, start.reread_bound, behind))
    where = view.syncs_topic or "no offset syncs found"
    text = f"MirrorMaker 2 {failover.source_alias} -> {to}, copy '{remote}' (offset syncs: {where})"
    if remote != target_topic:
        text += f"; the move routes to '{target_topic}', not the copy: remap the rule to '{remote}'"
    return text, out
