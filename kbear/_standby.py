"""The route to a failed-over cluster's standby: the one mechanism of every failover
trigger (private; issue #27 item 2).

Whoever decides that a cluster is failed over -- a client itself
(``kbear.failover.enable``), the operator (``kbear failover``, written in
``clusters.yaml`` as ``kbear.failover.active``) or ``kbear serve`` watching its
clusters -- hands a set of failed-over cluster ids to :func:`standby_route`, which
turns a route to one of them into the same route to its standby
(``kbear.failover.to``), following the chain of standbys while they are failed
over too (the configuration refuses a chain that loops). Same rule id; the topic is
the mirror's copy on the standby (:meth:`kbear.config.Failover.remote_topic`, hop by
hop): under MirrorMaker 2's default replication policy, topic ``T`` of ``east`` is
``<alias>.T`` on the standby, read *and written* there by failed-over clients, so that
one log holds the mirrored past and what producers write after the failover (nothing
lost, nothing read twice beyond the mirror's sync lag; docs/concepts/failover.md,
"Topic names on the standby"); under the identity policy, an identical mirror or
none, the same name. No I/O.
"""

from __future__ import annotations

from collections.abc import Set
from types import MappingProxyType

from kbear._route import Route
from kbear.config import ClusterConfig, KBearConfig, MirrorKind

__all__ = ["standby_cluster", "standby_route", "topics_note"]


def _walk(config: KBearConfig, cluster_id: str, topic: str, failed: Set[str]) -> tuple[str, str]:
    """(cluster, topic) at the end of ``cluster_id``'s chain of failed-over standbys."""
    current, seen = cluster_id, {cluster_id}
    while current in failed:
        cluster = config.clusters.get(current)
        standby = None if cluster is None else cluster.failover.standby
        if cluster is None or standby is None or standby not in config.clusters or standby in seen:
            break
        seen.add(standby)
        topic = cluster.failover.remote_topic(topic)
        current = standby
    return current, topic


def standby_cluster(config: KBearConfig, cluster_id: str, failed: Set[str]) -> str | None:
    """The cluster that takes ``cluster_id``'s routes while the clusters of ``failed``
    are failed over: its standby, or the standby's standby if that one is failed over
    too, and so on; None when ``cluster_id`` is not failed over or has no standby."""
    current, _topic = _walk(config, cluster_id, "", failed)
    return None if current == cluster_id else current


def standby_route(route: Route, config: KBearConfig, failed: Set[str]) -> Route:
    """``route``, or the same route to its cluster's standby when that cluster is in
    ``failed`` (see :func:`standby_cluster`), its topic the name under which it is read
    and written there: each hop's mirror copy (``kbear.mirror.replication.policy``)."""
    if not failed or route.cluster_id not in failed:
        return route
    target, topic = _walk(config, route.cluster_id, route.topic, failed)
    if target == route.cluster_id:
        return route
    cluster = config.clusters[target]
    return Route(
        cluster_id=target,
        topic=topic,
        requested_topic=route.requested_topic,
        bootstrap_servers=cluster.bootstrap_servers,
        rule_id=route.rule_id,
        properties=MappingProxyType(dict(cluster.client_properties)),
    )


def topics_note(cluster: ClusterConfig, back: bool) -> str:
    """What ``cluster``'s topics are called on its standby once failed over (the
    mirror's copies, :func:`standby_route`), what producers write there,
    and what the operator does about the mirror; for a fail-back, where what the
    producers wrote on the standby goes. One sentence of the plan."""
    failover = cluster.failover
    standby, mirror = failover.standby, failover.mirror
    copy = failover.remote_topic("<topic>")
    if back:
        where = f"'{copy}' on {standby!r}" if copy != "<topic>" else f"{standby!r}"
        return (
            f"topics go back to {cluster.id!r} under their own names; what producers wrote to {where} "
            "while failed over is read by each group's drain before it switches back, and stays there"
            + (
                " (MirrorMaker 2 does not copy a topic back to its source cluster)"
                if copy != "<topic>"
                else ""
            )
        )
    if mirror is MirrorKind.NONE:
        return (
            f"topics keep their names on {standby!r}; producers write there; consumer groups start as "
            "kbear.switch.start says (no mirror)"
        )
    if mirror is MirrorKind.IDENTICAL:
        return (
            f"topics keep their names on {standby!r} (an offset-preserving mirror); producers write there, "
            "so the mirror's copies must take writes (Cluster Linking: promote or fail over the "
            "mirror topics)"
        )
    named = (
        f"are MirrorMaker 2's copies '{copy}' on {standby!r} (kbear.mirror.replication.policy: default)"
        if copy != "<topic>"
        else f"keep their names on {standby!r}, MirrorMaker 2's copies (identity replication policy)"
    )
    return (
        f"topics {named}: consumer groups read them from the translated offsets and producers write "
        f"there too, after the mirrored records; stop MirrorMaker 2's {failover.source_alias} -> {standby} "
        f"flow before {cluster.id!r} comes back (it would copy what {cluster.id!r} held unmirrored into the "
        "same topics, read again after the fail-back)"
    )
