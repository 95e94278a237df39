"""The cluster-wide calls of RoutedAdminClient (private): metadata, group
listings, the cluster's description and id, ACLs, SCRAM credentials, leader
elections.

Each takes ``cluster=`` (a cluster id of clusters.yaml). Without it a call goes
to the one cluster every route of the client names, when the configuration
proves there is one (so a one-cluster configuration answers as a plain
AdminClient), else to every cluster: listed items carry a ``cluster`` attribute
(the cluster id), single results come as a dict by cluster id. SCRAM
credentials, and leader elections of every partition, need one cluster.
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import ListConsumerGroupsResult

from kbear._base import rename_metadata
from kbear._clients import Deadline
from kbear.admin._checks import check_elect_leaders
from kbear.admin._clusters import HANDLE_CLOSED, AdminClusters
from kbear.admin._futures import gather
from kbear.admin._split import rename_partitions, split_partitions


def _tagged(items: list[Any], cluster_id: str) -> list[Any]:
    for item in items:
        item.cluster = cluster_id
    return items


def _concat_tagged(clusters: list[str], results: list[Any]) -> list[Any]:
    out: list[Any] = []
    for cluster_id, result in zip(clusters, results, strict=True):
        out += _tagged(list(result or []), cluster_id)
    return out


class ClusterCalls:
    """list_topics, list_groups, list_consumer_groups, describe_cluster, cluster_id,
    ACLs, SCRAM credentials, elect_leaders."""

    def __init__(self, clusters: AdminClusters) -> None:
        self._clusters = clusters

    # ------------------------------------------------------------------ metadata

    def list_topics(
        self, /, topic: str | None = None, timeout: float = -1, *, cluster: str | None = None
    ) -> Any:
        """Cluster metadata, as ``AdminClient.list_topics``.

        With ``topic``: from the cluster of its route, the topic listed under the
        name given. Without: the metadata of the cluster(s) of the clusters of a cluster-wide call;
        from several clusters, one ``ClusterMetadata`` (``brokers``, ``cluster_id``,
        ``controller_id`` of the first) listing each topic under its logical name from
        the cluster its producer route names (a topic no route names on a cluster,
        such as a copy a move left behind, is only seen with ``cluster=``). Every
        ``TopicMetadata`` carries a ``cluster`` attribute (cluster id).

        Raises:
            NoRouteError: ``topic`` has no route.
            KafkaException: a cluster did not answer within ``timeout`` seconds.
        """
        self._clusters.check_open(HANDLE_CLOSED)

        def read(cluster_id: str, name: str | None, wait: float) -> Any:
            md = self._clusters.admin(cluster_id).list_topics(name, wait)
            _tagged(list(md.topics.values()), cluster_id)
            return md

        if topic is not None:
            target = self._clusters.target(cluster)
            if target is not None:
                return read(target, topic, timeout)
            route = self._clusters.names().route(topic)
            return rename_metadata(read(route.cluster_id, route.topic, timeout), route, topic)
        clusters = self._clusters.cluster_wide(cluster)
        deadline = Deadline(timeout)
        if len(clusters) == 1:
            return read(clusters[0], None, deadline.as_arg())
        names = self._clusters.names()
        merged = None
        topics: dict[str, Any] = {}
        for cluster_id in clusters:
            md = read(cluster_id, None, deadline.as_arg())
            merged = merged or md
            for physical, tmd in md.topics.items():
                logical = names.logical(cluster_id, physical)
                if logical is not None:
                    tmd.topic = logical
                    topics[logical] = tmd
        assert merged is not None
        merged.topics = topics
        return merged

    def list_groups(
        self, /, group: str | None = None, timeout: float = -1, *, cluster: str | None = None
    ) -> list[Any]:
        """Deprecated in confluent-kafka (2.0.2, warns the same): ``GroupMetadata`` of
        the cluster(s) of the clusters of a cluster-wide call (``group`` given: the clusters its
        routes name), concatenated, each tagged with a ``cluster`` attribute.

        Raises:
            KafkaException: a cluster failed or did not answer within ``timeout`` seconds.
        """
        self._clusters.check_open(HANDLE_CLOSED)
        warnings.warn(
            "list_groups() is deprecated, use list_consumer_groups() and describe_consumer_groups() instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        if group is not None and cluster is None:
            clusters = self._clusters.names().group_clusters(group)
        else:
            clusters = self._clusters.cluster_wide(cluster)
        deadline = Deadline(timeout)
        out: list[Any] = []
        for cluster_id in clusters:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                groups = self._clusters.admin(cluster_id).list_groups(group, deadline.as_arg())
            out += _tagged(list(groups), cluster_id)
        return out

    def list_consumer_groups(self, /, *, cluster: str | None = None, **kwargs: Any) -> Future[Any]:
        """Consumer groups of the cluster(s) of the clusters of a cluster-wide call, as
        ``AdminClient.list_consumer_groups`` (``states``, ``types``, ``request_timeout``).

        Returns:
            a future of one ``ListConsumerGroupsResult``: ``valid`` and ``errors``
            of every cluster concatenated, each ``ConsumerGroupListing`` tagged with
            a ``cluster`` attribute; or the first failed cluster's exception.
        """
        clusters = self._clusters.cluster_wide(cluster)
        answers = [self._clusters.admin(c).list_consumer_groups(**dict(kwargs)) for c in clusters]

        def merge(results: list[Any]) -> ListConsumerGroupsResult:
            valid = _concat_tagged(clusters, [result.valid for result in results])
            errors = [error for result in results for error in result.errors or []]
            return ListConsumerGroupsResult(valid=valid, errors=errors)

        return gather(answers, merge)

    def describe_cluster(self, /, *, cluster: str | None = None, **kwargs: Any) -> Future[Any]:
        """``AdminClient.describe_cluster`` of ``cluster`` (or of the one cluster every
        route names): a future of ``DescribeClusterResult``. With several clusters:
        a future of ``{cluster_id: DescribeClusterResult}``."""
        clusters = self._clusters.cluster_wide(cluster)
        if len(clusters) == 1:
            return self._clusters.admin(clusters[0]).describe_cluster(**kwargs)
        answers = [self._clusters.admin(c).describe_cluster(**kwargs) for c in clusters]
        return gather(answers, lambda results: dict(zip(clusters, results, strict=True)))

    def cluster_id(self, /, timeout: float = -1, *, cluster: str | None = None) -> Any:
        """``AdminClient.cluster_id`` of ``cluster`` (or of the one cluster every route
        names): a str. With several clusters: ``{kbear cluster id: cluster id}``."""
        self._clusters.check_open(HANDLE_CLOSED)
        clusters = self._clusters.cluster_wide(cluster)
        deadline = Deadline(timeout)
        ids = {c: self._clusters.admin(c).cluster_id(deadline.as_arg()) for c in clusters}
        return ids[clusters[0]] if len(clusters) == 1 else ids

    # ------------------------------------------------------------------ ACLs, SCRAM, elections

    def _on_each(self, cluster: str | None, call: Any) -> tuple[list[str], list[Any]]:
        clusters = self._clusters.cluster_wide(cluster)
        return clusters, [call(self._clusters.admin(c)) for c in clusters]

    def create_acls(
        self, /, acls: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[Any, Future[Any]]:
        """``AdminClient.create_acls`` on the cluster(s) of the clusters of a cluster-wide call: a
        binding's future succeeds (None) when every cluster created it, else raises
        the first cluster's ``KafkaException``."""
        _clusters, answers = self._on_each(cluster, lambda a: a.create_acls(acls, **kwargs))
        return {acl: gather([answer[acl] for answer in answers], lambda _r: None) for acl in answers[0]}

    def describe_acls(
        self, /, acl_binding_filter: Any, *, cluster: str | None = None, **kwargs: Any
    ) -> Future[Any]:
        """``AdminClient.describe_acls`` on the cluster(s) of the clusters of a cluster-wide call: a
        future of every cluster's ``AclBinding`` list, concatenated, each tagged with
        a ``cluster`` attribute."""
        clusters, answers = self._on_each(cluster, lambda a: a.describe_acls(acl_binding_filter, **kwargs))
        return gather(answers, lambda results: _concat_tagged(clusters, results))

    def delete_acls(
        self, /, acl_binding_filters: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[Any, Future[Any]]:
        """``AdminClient.delete_acls`` on the cluster(s) of the clusters of a cluster-wide call: per
        filter, a future of the deleted bindings of every cluster, tagged with ``cluster``."""
        clusters, answers = self._on_each(cluster, lambda a: a.delete_acls(acl_binding_filters, **kwargs))
        return {
            f: gather([answer[f] for answer in answers], lambda results: _concat_tagged(clusters, results))
            for f in answers[0]
        }

    def describe_user_scram_credentials(
        self, /, users: list[str] | None = None, *, cluster: str | None = None, **kwargs: Any
    ) -> Any:
        """``AdminClient.describe_user_scram_credentials`` of one cluster (SCRAM users
        are per cluster).

        Raises:
            ValueError: no ``cluster=`` and the routes of the client name several clusters.
        """
        target = self._clusters.one_cluster(cluster, "describe_user_scram_credentials")
        return self._clusters.admin(target).describe_user_scram_credentials(users, **kwargs)

    def alter_user_scram_credentials(
        self, /, alterations: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """``AdminClient.alter_user_scram_credentials`` on one cluster.

        Raises:
            ValueError: no ``cluster=`` and the routes of the client name several clusters.
        """
        target = self._clusters.one_cluster(cluster, "alter_user_scram_credentials")
        return self._clusters.admin(target).alter_user_scram_credentials(alterations, **kwargs)

    def elect_leaders(
        self,
        /,
        election_type: Any,
        partitions: list[TopicPartition] | None = None,
        *,
        cluster: str | None = None,
        **kwargs: Any,
    ) -> Future[Any]:
        """``AdminClient.elect_leaders``: the partitions of each topic on the cluster of
        its route (results keyed by the names given); ``partitions=None`` (every
        partition) on one cluster.

        Raises:
            ValueError: ``partitions=None`` without ``cluster=`` while the routes name
                several clusters; confluent-kafka's input checks.
            NoRouteError: a topic has no route.
        """
        check_elect_leaders(election_type, partitions)
        if partitions is None or cluster is not None:
            target = self._clusters.one_cluster(cluster, "elect_leaders")
            return self._clusters.admin(target).elect_leaders(election_type, partitions, **kwargs)
        routes = self._clusters.names().routes(tp.topic for tp in partitions)
        per_cluster, to_logical = split_partitions(partitions, routes)
        admin = self._clusters.admin
        answers = [admin(c).elect_leaders(election_type, tps, **kwargs) for c, tps in per_cluster.items()]

        def merge(results: list[Any]) -> dict[TopicPartition, Any]:
            return {rename_partitions([tp], to_logical)[0]: error for r in results for tp, error in r.items()}

        return gather(answers, merge)
