"""Where each consumer group starts on the standby at a failover: ``kbear failover``'s
plan, per group and partition (private; issue #27 item 4).

A failover sends a cluster's routes to its standby, each topic under the name of the
mirror's copy there (:func:`kbear._standby.standby_route`: ``<alias>.<topic>`` under
MirrorMaker 2's default replication policy, else the same name); a consumer group starts there as the
cluster's mirror says (:mod:`kbear.consumer._failover`): MirrorMaker 2's
translation of its offsets, an identical mirror's same offsets, or, without a
mirror, ``kbear.switch.start``. The plan reads the mirror as a consumer would at the
switch (:func:`kbear.admin._move_mirror.mirrored_starts`): from the group's committed
offsets on the cluster when it answers, else (the usual case of a failover) from
MirrorMaker 2's checkpoints alone, how far behind the mirror is then unknown.

The groups: those given (``--group``, with the topics given, ``--topic``, else every
topic of ``topics.yaml`` and of ``consumer-groups.yaml``), else those of
``consumer-groups.yaml``; only the (group, topic) pairs routed to the cluster now.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field

from kbear._route import NoRouteError, Route
from kbear.admin._facade import RoutedAdminClient
from kbear.admin._move_mirror import MirroredStart, mirrored_starts
from kbear.admin._move_state import CommittedOffsets, TopicState, read_topic
from kbear.config import KBearConfig, MirrorKind
from kbear.router import Router

__all__ = ["GroupStarts", "failover_starts"]


@dataclass
class GroupStarts:
    """Where one group starts one topic on the standby.

    Attributes:
        group, topic: the consumer group and the topic (logical name).
        standby_topic: the topic read on the standby (the route's name).
        mirror: how the start is decided (the mirror, or why there is none).
        starts: per partition (empty without a mirror's start).
    """

    group: str
    topic: str
    standby_topic: str
    mirror: str
    starts: list[MirroredStart] = field(default_factory=list)


def _pairs(config: KBearConfig, groups: list[str], topics: list[str]) -> list[tuple[str, str]]:
    """(group, topic) pairs to look at (see the module docstring), in order."""
    if not groups:
        return sorted(config.consumer_groups)
    if not topics:
        topics = sorted(set(config.topics) | {t for _, t in config.consumer_groups})
    return [(g, t) for g in groups for t in topics]


def failover_starts(
    config: KBearConfig,
    cluster_id: str,
    groups: list[str],
    topics: list[str],
    cluster_answers: bool,
    timeout_s: float,
) -> list[GroupStarts]:
    """Where the groups start on ``cluster_id``'s standby once it is failed over.

    Args:
        config: the configuration in force (the cluster not failed over yet).
        cluster_id: the cluster to fail over (it has a standby).
        groups: the groups to show (empty: those of ``consumer-groups.yaml``).
        topics: the topics of ``groups`` (empty: those of the configuration).
        cluster_answers: the cluster answered (its committed offsets and end offsets
            are read); else the checkpoints alone decide.
        timeout_s: bound of each request, seconds.

    Raises:
        KafkaException: the standby did not answer a metadata or offsets request.
    """
    router = Router(config)
    routes: list[tuple[str, str, Route]] = []
    for group, topic in _pairs(config, groups, topics):
        try:
            route = router.route_consumer(topic, group)
        except NoRouteError:
            continue
        if route.cluster_id == cluster_id:
            routes.append((group, topic, route))
    if not routes:
        router.close()
        return []
    out: list[GroupStarts] = []
    admin = RoutedAdminClient({"kbear.reload.interval.ms": 0}, router=router)
    try:
        with closing(CommittedOffsets(router)) as offsets:
            for group, topic, route in routes:
                out.append(
                    _group_starts(config, admin, offsets, group, topic, route, cluster_answers, timeout_s)
                )
    finally:
        admin.close()
        router.close()
    return out


def _group_starts(
    config: KBearConfig,
    admin: RoutedAdminClient,
    offsets: CommittedOffsets,
    group: str,
    topic: str,
    route: Route,
    cluster_answers: bool,
    timeout_s: float,
) -> GroupStarts:
    failover = config.clusters[route.cluster_id].failover
    standby = failover.standby
    assert standby is not None
    copy = failover.remote_topic(route.topic)
    entry = GroupStarts(group, topic, copy, "")
    if failover.mirror is MirrorKind.NONE:
        entry.mirror = f"no mirror (kbear.mirror: none): starts as kbear.switch.start says on {standby}"
        return entry
    target = read_topic(admin, standby, copy, timeout_s)
    if target.partitions is None:
        entry.mirror = f"'{copy}' does not exist on {standby}"
        return entry
    source = TopicState(route.cluster_id, route.topic)
    committed: dict[int, int | None] = {}
    if cluster_answers:
        source = read_topic(admin, route.cluster_id, route.topic, timeout_s)
        if source.partitions:
            committed = offsets.read(route.cluster_id, group, route.topic, source.partitions, timeout_s)
    found = mirrored_starts(config, route, standby, copy, group, committed, source, target, timeout_s)
    if found is not None:
        entry.mirror, entry.starts = found
    return entry
