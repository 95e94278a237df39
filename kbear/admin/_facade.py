"""RoutedAdminClient: construction, one confluent-kafka AdminClient per cluster,
the cluster-wide calls (metadata, group listings, cluster description, ACLs,
SCRAM credentials, leader elections), poll and close."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._group import ListConsumerGroupsResult

from kbear._base import NO_CONFIG, RoutedClientBase, check_config_argument, rename_metadata
from kbear._clients import Deadline, cluster_config, open_router, single_cluster, split_config
from kbear.admin._futures import gather
from kbear.admin._groups import GroupCalls
from kbear.admin._names import Names
from kbear.admin._split import rename_partitions
from kbear.admin._topics import TopicCalls
from kbear.router import Client, Router

__all__ = ["RoutedAdminClient"]

log = logging.getLogger("kbear.admin")


def _tagged(items: list[Any], cluster_id: str) -> list[Any]:
    for item in items:
        item.cluster = cluster_id
    return items


class RoutedAdminClient(TopicCalls, GroupCalls, RoutedClientBase):
    """A ``confluent_kafka.admin.AdminClient`` whose calls go to the clusters the
    routes name.

    Args:
        config: a confluent-kafka (librdkafka) configuration without
            ``bootstrap.servers`` (each cluster's comes from clusters.yaml), plus
            kbear keys: ``kbear.config`` (configuration directory, when ``router``
            is None), ``kbear.client.id`` / ``kbear.client.meta.<k>`` (the client
            the routes are looked up for), ``kbear.reload.interval.ms`` (watch
            interval, default 10000 ms, 0 disables; every call looks its routes up
            again, so a reload applies to the next call).
        router: a :class:`~kbear.Router` to share; the admin client does not close it.
        client: who asks (``client.*`` factors); or use ``kbear.client.*`` keys.
        **kwargs: more configuration, as confluent-kafka accepts (``logger=``).

    Raises:
        TypeError: ``config`` is not a dict (confluent-kafka's "expected configuration dict").
        ValueError: ``bootstrap.servers`` is set, a kbear key is unknown or bad,
            or neither ``router`` nor ``kbear.config`` is given.
        ConfigError: the configuration directory is invalid.

    Routing (details in each method): a topic goes where a producer lookup sends it,
    under its physical name; a consumer group's offsets per topic where the group's
    consumer lookup sends it; futures and results come back under the names the
    application used. Every routed method takes ``cluster=`` to address one cluster
    by its id with names as they are there. Cluster-wide calls (``list_topics``,
    ``list_groups``, ``list_consumer_groups``, ``describe_cluster``, ``cluster_id``,
    ACLs) take ``cluster=``; without it they go to the one cluster every route of the
    client names when the configuration proves there is one, else to every cluster,
    with each listed item tagged with a ``cluster`` attribute (or, for
    ``describe_cluster``/``cluster_id``, a dict by cluster id). Futures, exceptions
    (``KafkaException`` carrying ``KafkaError``) and input checks are confluent-kafka's;
    an unroutable name raises :class:`~kbear.NoRouteError` before anything is sent.
    """

    _closed_message = "Admin client has been closed"

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        config = check_config_argument(config, kwargs, router)
        RoutedClientBase.__init__(self)
        self._log = log
        native, self._settings = split_config(config, kwargs, client, "RoutedAdminClient")
        self._native = native
        self._router, self._owns_router = open_router(router, self._settings, "RoutedAdminClient")
        self._client = self._settings.client
        self._lock = threading.Lock()
        # cluster id -> (its properties, its AdminClient); clients whose cluster's
        # properties changed stay referenced (retired) so their pending futures complete
        self._admins: dict[str, tuple[dict[str, str], AdminClient]] = {}
        self._retired: list[AdminClient] = []
        self._closed = False
        self._listen(self._owns_router)

    # ------------------------------------------------------------------ clusters

    def _admin(self, cluster_id: str) -> AdminClient:
        """The AdminClient of ``cluster_id`` (built on first use, rebuilt when the
        cluster's properties changed in clusters.yaml)."""
        cluster = self._router.config.clusters[cluster_id]
        properties = cluster.client_properties
        with self._lock:
            if self._closed:
                raise RuntimeError(self._closed_message)
            entry = self._admins.get(cluster_id)
            if entry is not None and entry[0] == properties:
                return entry[1]
            if entry is not None:
                self._retired.append(entry[1])
            admin = AdminClient(cluster_config(self._native, properties))
            self._admins[cluster_id] = (properties, admin)
            return admin

    def _native_clients(self) -> list[Any]:
        with self._lock:
            return [admin for _props, admin in self._admins.values()] + list(self._retired)

    def _names(self, group: str | None = None) -> Names:
        return Names(self._router, self._client, group)

    def _target(self, cluster: str | None) -> str | None:
        """``cluster`` checked against clusters.yaml, or None (route each name)."""
        if cluster is None:
            return None
        known = self._router.config.clusters
        if cluster not in known:
            raise ValueError(f"RoutedAdminClient: unknown cluster {cluster!r} (known: {', '.join(known)})")
        return cluster

    def _cluster_wide(self, cluster: str | None) -> list[str]:
        """The clusters a cluster-wide call goes to: ``cluster``, else the one cluster
        every route of the client names (when proven), else all of them."""
        target = self._target(cluster)
        if target is not None:
            return [target]
        config = self._router.config
        only = single_cluster(config, self._client)
        if only is not None:
            return [only]
        return list(config.clusters)

    def _one_cluster(self, cluster: str | None, call: str) -> str:
        clusters = self._cluster_wide(cluster)
        if len(clusters) > 1:
            raise ValueError(
                f"RoutedAdminClient.{call}: pass cluster= (one of {', '.join(clusters)}): "
                "the routes of this client name several clusters"
            )
        return clusters[0]

    @property
    def clusters(self) -> list[str]:
        """The cluster ids of the configuration in force (clusters.yaml order)."""
        return list(self._router.config.clusters)

    # ------------------------------------------------------------------ metadata

    def list_topics(
        self, topic: str | None = None, timeout: float = -1, *, cluster: str | None = None
    ) -> Any:
        """Cluster metadata, as ``AdminClient.list_topics``.

        With ``topic``: from the cluster of its route, the topic listed under the
        name given. Without: the metadata of the cluster(s) of :meth:`_cluster_wide`;
        from several clusters, one ``ClusterMetadata`` (``brokers``, ``cluster_id``,
        ``controller_id`` of the first) listing each topic under its logical name from
        the cluster its producer route names (a topic no route names on a cluster,
        such as a copy a move left behind, is only seen with ``cluster=``). Every
        ``TopicMetadata`` carries a ``cluster`` attribute (cluster id).

        Raises:
            NoRouteError: ``topic`` has no route.
            KafkaException: a cluster did not answer within ``timeout`` seconds.
        """
        if topic is not None:
            target = self._target(cluster)
            if target is not None:
                md = self._admin(target).list_topics(topic, timeout)
                _tagged(list(md.topics.values()), target)
                return md
            route = self._names().route(topic)
            md = self._admin(route.cluster_id).list_topics(route.topic, timeout)
            _tagged(list(md.topics.values()), route.cluster_id)
            return rename_metadata(md, route, topic)
        clusters = self._cluster_wide(cluster)
        deadline = Deadline(timeout)
        if len(clusters) == 1:
            md = self._admin(clusters[0]).list_topics(None, deadline.as_arg())
            _tagged(list(md.topics.values()), clusters[0])
            return md
        names = self._names()
        merged = None
        topics: dict[str, Any] = {}
        for cluster_id in clusters:
            md = self._admin(cluster_id).list_topics(None, deadline.as_arg())
            merged = merged or md
            for physical, tmd in md.topics.items():
                logical = names.logical(cluster_id, physical)
                if logical is not None:
                    tmd.topic = logical
                    topics[logical] = _tagged([tmd], cluster_id)[0]
        assert merged is not None
        merged.topics = topics
        return merged

    def list_groups(
        self, group: str | None = None, timeout: float = -1, *, cluster: str | None = None
    ) -> list[Any]:
        """Deprecated in confluent-kafka (2.0.2, warns the same): ``GroupMetadata`` of
        the cluster(s) of :meth:`_cluster_wide` (``group`` given: the clusters its
        routes name), concatenated, each tagged with a ``cluster`` attribute.

        Raises:
            KafkaException: a cluster failed or did not answer within ``timeout`` seconds.
        """
        warnings.warn(
            "list_groups() is deprecated, use list_consumer_groups() and describe_consumer_groups() instead.",
            category=DeprecationWarning,
            stacklevel=2,
        )
        if group is not None and cluster is None:
            clusters = self._names().group_clusters(group)
        else:
            clusters = self._cluster_wide(cluster)
        deadline = Deadline(timeout)
        out: list[Any] = []
        for cluster_id in clusters:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                groups = self._admin(cluster_id).list_groups(group, deadline.as_arg())
            out += _tagged(list(groups), cluster_id)
        return out

    def list_consumer_groups(self, *, cluster: str | None = None, **kwargs: Any) -> Future[Any]:
        """Consumer groups of the cluster(s) of :meth:`_cluster_wide`, as
        ``AdminClient.list_consumer_groups`` (``states``, ``types``, ``request_timeout``).

        Returns:
            a future of one ``ListConsumerGroupsResult``: ``valid`` and ``errors``
            of every cluster concatenated, each ``ConsumerGroupListing`` tagged with
            a ``cluster`` attribute; or the first failed cluster's exception.
        """
        clusters = self._cluster_wide(cluster)
        answers = [self._admin(c).list_consumer_groups(**dict(kwargs)) for c in clusters]

        def merge(results: list[Any]) -> ListConsumerGroupsResult:
            valid: list[Any] = []
            errors: list[Any] = []
            for cluster_id, result in zip(clusters, results, strict=True):
                valid += _tagged(list(result.valid or []), cluster_id)
                errors += list(result.errors or [])
            return ListConsumerGroupsResult(valid=valid, errors=errors)

        return gather(answers, merge)

    def describe_cluster(self, *, cluster: str | None = None, **kwargs: Any) -> Future[Any]:
        """``AdminClient.describe_cluster`` of ``cluster`` (or of the one cluster every
        route names): a future of ``DescribeClusterResult``. With several clusters:
        a future of ``{cluster_id: DescribeClusterResult}``."""
        clusters = self._cluster_wide(cluster)
        if len(clusters) == 1:
            return self._admin(clusters[0]).describe_cluster(**kwargs)
        answers = [self._admin(c).describe_cluster(**kwargs) for c in clusters]
        return gather(answers, lambda results: dict(zip(clusters, results, strict=True)))

    def cluster_id(self, timeout: float = -1, *, cluster: str | None = None) -> Any:
        """``AdminClient.cluster_id`` of ``cluster`` (or of the one cluster every route
        names): a str. With several clusters: ``{kbear cluster id: cluster id}``."""
        clusters = self._cluster_wide(cluster)
        deadline = Deadline(timeout)
        ids = {c: self._admin(c).cluster_id(deadline.as_arg()) for c in clusters}
        return ids[clusters[0]] if len(clusters) == 1 else ids

    # ------------------------------------------------------------------ ACLs, SCRAM, elections

    def _on_each(self, cluster: str | None, call: Any) -> tuple[list[str], list[Any]]:
        clusters = self._cluster_wide(cluster)
        return clusters, [call(self._admin(c)) for c in clusters]

    def create_acls(
        self, acls: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[Any, Future[Any]]:
        """``AdminClient.create_acls`` on the cluster(s) of :meth:`_cluster_wide`: a
        binding's future succeeds (None) when every cluster created it, else raises
        the first cluster's ``KafkaException``."""
        _clusters, answers = self._on_each(cluster, lambda a: a.create_acls(acls, **kwargs))
        return {acl: gather([answer[acl] for answer in answers], lambda _r: None) for acl in answers[0]}

    def describe_acls(
        self, acl_binding_filter: Any, *, cluster: str | None = None, **kwargs: Any
    ) -> Future[Any]:
        """``AdminClient.describe_acls`` on the cluster(s) of :meth:`_cluster_wide`: a
        future of every cluster's ``AclBinding`` list, concatenated, each tagged with
        a ``cluster`` attribute."""
        clusters, answers = self._on_each(cluster, lambda a: a.describe_acls(acl_binding_filter, **kwargs))
        return gather(answers, lambda results: _concat_tagged(clusters, results))

    def delete_acls(
        self, acl_binding_filters: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[Any, Future[Any]]:
        """``AdminClient.delete_acls`` on the cluster(s) of :meth:`_cluster_wide`: per
        filter, a future of the deleted bindings of every cluster, tagged with ``cluster``."""
        clusters, answers = self._on_each(cluster, lambda a: a.delete_acls(acl_binding_filters, **kwargs))
        return {
            f: gather([answer[f] for answer in answers], lambda results: _concat_tagged(clusters, results))
            for f in answers[0]
        }

    def describe_user_scram_credentials(
        self, users: list[str] | None = None, *, cluster: str | None = None, **kwargs: Any
    ) -> Any:
        """``AdminClient.describe_user_scram_credentials`` of one cluster (SCRAM users
        are per cluster).

        Raises:
            ValueError: no ``cluster=`` and the routes of the client name several clusters.
        """
        target = self._one_cluster(cluster, "describe_user_scram_credentials")
        return self._admin(target).describe_user_scram_credentials(users, **kwargs)

    def alter_user_scram_credentials(
        self, alterations: list[Any], *, cluster: str | None = None, **kwargs: Any
    ) -> dict[str, Future[Any]]:
        """``AdminClient.alter_user_scram_credentials`` on one cluster.

        Raises:
            ValueError: no ``cluster=`` and the routes of the client name several clusters.
        """
        target = self._one_cluster(cluster, "alter_user_scram_credentials")
        return self._admin(target).alter_user_scram_credentials(alterations, **kwargs)

    def elect_leaders(
        self,
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
        AdminClient._check_elect_leaders(election_type, partitions)
        if partitions is None or cluster is not None:
            target = self._one_cluster(cluster, "elect_leaders")
            return self._admin(target).elect_leaders(election_type, partitions, **kwargs)
        routes = self._names().routes(tp.topic for tp in partitions)
        per_cluster: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            per_cluster.setdefault(routes[tp.topic].cluster_id, []).append(tp)
        to_logical = {r.topic: t for t, r in routes.items() if r.remapped}
        answers = []
        for cluster_id, tps in per_cluster.items():
            to_physical = {t: r.topic for t, r in routes.items() if r.cluster_id == cluster_id}
            physical = rename_partitions(tps, to_physical)
            answers.append(self._admin(cluster_id).elect_leaders(election_type, physical, **kwargs))

        def merge(results: list[Any]) -> dict[TopicPartition, Any]:
            out: dict[TopicPartition, Any] = {}
            for result in results:
                for tp, error in result.items():
                    out[rename_partitions([tp], to_logical)[0]] = error
            return out

        return gather(answers, merge)

    # ------------------------------------------------------------------ lifecycle

    def poll(self, timeout: float | None = None) -> int:
        """Serve the callbacks (``error_cb``, ``stats_cb``...) of every cluster's client.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            The number of events served.
        """
        clients = self._native_clients()
        if len(clients) == 1:
            return int(clients[0].poll(-1 if timeout is None else timeout))
        served = sum(int(c.poll(0)) for c in clients)
        deadline = Deadline(timeout)
        while not served and clients and not deadline.expired():
            left = deadline.remaining()
            served = sum(int(c.poll(0.01 if left is None else min(0.01, left))) for c in clients)
        return served

    def close(self) -> None:
        """Stop following the configuration (and close an owned router) and drop the
        cluster clients. Not in confluent-kafka's AdminClient (which has no close);
        idempotent. Futures still pending when the clients are dropped fail with
        ``_DESTROY``, as when a confluent-kafka AdminClient is collected."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._admins.clear()
            self._retired.clear()
        self._stop_listening()
        if self._owns_router:
            self._router.close()

    def __enter__(self) -> RoutedAdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _concat_tagged(clusters: list[str], results: list[Any]) -> list[Any]:
    out: list[Any] = []
    for cluster_id, result in zip(clusters, results, strict=True):
        out += _tagged(list(result or []), cluster_id)
    return out
