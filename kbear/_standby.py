"""The route to a failed-over cluster's standby: the one mechanism of every failover
trigger (private; issue #27 item 2).

Whoever decides that a cluster is failed over -- a client itself
(``kbear.failover.enable``), the operator (``kbear failover``, written in
``clusters.yaml`` as ``kbear.failover.active``) or ``kbear serve`` watching its
clusters -- hands a set of failed-over cluster ids to :func:`standby_route`, which
turns a route to one of them into the same route to its standby
(``kbear.failover.to``), following the chain of standbys while they are failed
over too (the configuration refuses a chain that loops). Same topic (a producer
writes under the same name on the standby), same rule id. No I/O.
"""

from __future__ import annotations

from collections.abc import Set
from types import MappingProxyType

from kbear._route import Route
from kbear.config import KBearConfig

__all__ = ["standby_cluster", "standby_route"]


def standby_cluster(config: KBearConfig, cluster_id: str, failed: Set[str]) -> str | None:
    """The cluster that takes ``cluster_id``'s routes while the clusters of ``failed``
    are failed over: its standby, or the standby's standby if that one is failed over
    too, and so on; None when ``cluster_id`` is not failed over or has no standby."""
    current, seen = cluster_id, {cluster_id}
    while current in failed:
        cluster = config.clusters.get(current)
        standby = None if cluster is None else cluster.failover.standby
        if standby is None or standby not in config.clusters or standby in seen:
            break
        seen.add(standby)
        current = standby
    return None if current == cluster_id else current


def standby_route(route: Route, config: KBearConfig, failed: Set[str]) -> Route:
    """``route``, or the same route to its cluster's standby when that cluster is in
    ``failed`` (see :func:`standby_cluster`)."""
    if not failed or route.cluster_id not in failed:
        return route
    target = standby_cluster(config, route.cluster_id, failed)
    if target is None:
        return route
    cluster = config.clusters[target]
    return Route(
        cluster_id=target,
        topic=route.topic,
        requested_topic=route.requested_topic,
        bootstrap_servers=cluster.bootstrap_servers,
        rule_id=route.rule_id,
        properties=MappingProxyType(dict(cluster.client_properties)),
    )
