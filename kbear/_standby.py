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
from kbear.config import KBearConfig

__all__ = ["standby_cluster", "standby_route", "standby_topic"]


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


def standby_topic(config: KBearConfig, cluster_id: str, topic: str, failed: Set[str]) -> str:
    """The name under which ``topic`` of ``cluster_id`` is read and written on the
    cluster that takes its routes (:func:`standby_cluster`): each hop's mirror copy
    (``kbear.mirror.replication.policy``); ``topic`` when not failed over."""
    return _walk(config, cluster_id, topic, failed)[1]


def standby_route(route: Route, config: KBearConfig, failed: Set[str]) -> Route:
    """``route``, or the same route to its cluster's standby when that cluster is in
    ``failed`` (see :func:`standby_cluster`), its topic the mirror's copy there
    (:func:`standby_topic`)."""
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
