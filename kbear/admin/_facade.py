"""RoutedAdminClient: the facade that builds the admin client's parts and hands each
what it needs: :class:`~kbear.admin._clusters.AdminClusters` (one AdminClient per
cluster, from the client registry; how a call picks its clusters), shared by the
topic calls (``_topics``), the group calls (``_groups``) and the cluster-wide calls
(``_cluster_calls``); each public call is delegated to its part
(:func:`kbear._delegate.delegate`: same signature and docstring)."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from kbear import _events
from kbear._base import NO_CONFIG, RouteChangeCallback, RoutedClient, open_client, open_core, refuse_calls
from kbear._clients import poll_clients
from kbear._delegate import delegate
from kbear._identity import Client
from kbear.admin._cluster_calls import ClusterCalls
from kbear.admin._clusters import CLOSED, HANDLE_CLOSED, AdminClusters
from kbear.admin._groups import GroupCalls
from kbear.admin._topics import TopicCalls
from kbear.router import Router

__all__ = ["RoutedAdminClient"]

log = logging.getLogger("kbear.admin")

#: the parts a call goes to: in an instance whose __init__ never ran, each refuses
_PARTS = ("_core", "_clusters", "_topics", "_groups", "_cluster_calls")


class RoutedAdminClient(RoutedClient):
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

    def __new__(cls, *args: Any, **kwargs: Any) -> RoutedAdminClient:
        self = super().__new__(cls)
        # What an instance whose __init__ never ran (a subclass not calling it) has:
        # every call refuses as a closed confluent-kafka AdminClient.
        self._initialized = False
        refuse_calls(self, _PARTS, CLOSED)
        return self

    def __init__(
        self,
        config: Mapping[str, Any] | None = NO_CONFIG,
        *,
        router: Router | None = None,
        client: Client | None = None,
        **kwargs: Any,
    ) -> None:
        native, settings = open_client(self, config, kwargs, client, router, "RoutedAdminClient")
        self._core, owns_router = open_core("client", native, settings, router, "RoutedAdminClient", log)
        used = self._core.router
        self._clusters = clusters = AdminClusters(used, settings.client, native)
        self._topics = TopicCalls(clusters)
        self._groups = GroupCalls(clusters)
        self._cluster_calls = ClusterCalls(clusters)
        # Every call looks its routes up again: a reload needs no listener. A router
        # of its own is closed (its watcher stopped) by close(), or when the admin
        # client is collected unclosed.
        self._router_closer = weakref.finalize(self, used.close) if owns_router else None
        self._initialized = True
        # As a confluent-kafka AdminClient has its client (callbacks, logger, error_cb on
        # connection errors) from construction: when every route names one cluster.
        only = clusters.cluster_wide(None)
        if len(only) == 1:
            clusters.admin(only[0])

    # ------------------------------------------------------------------ the calls, by part

    create_topics = delegate("_topics", TopicCalls.create_topics)
    delete_topics = delegate("_topics", TopicCalls.delete_topics)
    create_partitions = delegate("_topics", TopicCalls.create_partitions)
    describe_topics = delegate("_topics", TopicCalls.describe_topics)
    describe_configs = delegate("_topics", TopicCalls.describe_configs)
    incremental_alter_configs = delegate("_topics", TopicCalls.incremental_alter_configs)
    alter_configs = delegate("_topics", TopicCalls.alter_configs)
    list_offsets = delegate("_topics", TopicCalls.list_offsets)
    delete_records = delegate("_topics", TopicCalls.delete_records)
    list_consumer_group_offsets = delegate("_groups", GroupCalls.list_consumer_group_offsets)
    alter_consumer_group_offsets = delegate("_groups", GroupCalls.alter_consumer_group_offsets)
    describe_consumer_groups = delegate("_groups", GroupCalls.describe_consumer_groups)
    delete_consumer_groups = delegate("_groups", GroupCalls.delete_consumer_groups)
    list_topics = delegate("_cluster_calls", ClusterCalls.list_topics)
    list_groups = delegate("_cluster_calls", ClusterCalls.list_groups)
    list_consumer_groups = delegate("_cluster_calls", ClusterCalls.list_consumer_groups)
    describe_cluster = delegate("_cluster_calls", ClusterCalls.describe_cluster)
    cluster_id = delegate("_cluster_calls", ClusterCalls.cluster_id)
    create_acls = delegate("_cluster_calls", ClusterCalls.create_acls)
    describe_acls = delegate("_cluster_calls", ClusterCalls.describe_acls)
    delete_acls = delegate("_cluster_calls", ClusterCalls.delete_acls)
    describe_user_scram_credentials = delegate("_cluster_calls", ClusterCalls.describe_user_scram_credentials)
    alter_user_scram_credentials = delegate("_cluster_calls", ClusterCalls.alter_user_scram_credentials)
    elect_leaders = delegate("_cluster_calls", ClusterCalls.elect_leaders)

    @property
    def clusters(self) -> list[str]:
        """The cluster ids of the configuration in force (clusters.yaml order)."""
        return list(self._core.router.config.clusters)

    def on_route_change(self, callback: RouteChangeCallback) -> None:
        """Register ``callback(old_route, new_route)``, as the producer's and the
        consumer's: an admin client keeps no routes in use (every call looks its
        names up again), so the hook is kept and never called."""
        self._core.listeners.append(callback)

    def snapshot(self) -> _events.ClientSnapshot | None:
        """What this client shows kbear's metrics now (:class:`kbear._events.ClientSnapshot`):
        kind ``client``, its ``client.id`` and the configuration in force (no routes
        in use, no drains); None once closed, or when its constructor failed."""
        if not self._initialized or self._clusters.closed:
            return None
        return self._core.snapshot({}, 0)

    # ------------------------------------------------------------------ lifecycle

    def poll(self, timeout: float | None = None) -> int:
        """Serve the callbacks (``error_cb``, ``stats_cb``...) of every cluster's client;
        a callback's exception reaches the caller, as with confluent-kafka.

        Args:
            timeout: maximum time to block in seconds (None or -1: infinite).

        Returns:
            The number of events served. Before any call has built a cluster's
            client there is nothing to serve: it waits ``timeout`` (at most 1 s
            when infinite) and returns 0, so a polling loop does not spin.
        """
        self._clusters.check_open()
        clients = self._clusters.clients()
        if not clients:
            time.sleep(1.0 if timeout is None or timeout < 0 else timeout)
            return 0
        return poll_clients(clients, timeout)

    def __len__(self) -> int:
        """Requests and callbacks waiting in every cluster's client (0 once closed, or
        for an instance whose ``__init__`` never ran, as confluent-kafka)."""
        if not self._initialized or self._clusters.closed:
            return 0
        return sum(len(client) for client in self._clusters.clients())

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on clients
        built later (``AdminClient.set_sasl_credentials``).

        Raises:
            TypeError: ``username`` or ``password`` is not a str.
            RuntimeError: the client is closed ("Handle has been closed").
        """
        self._clusters.check_open(HANDLE_CLOSED)
        self._core.set_credentials(self._clusters.clients(), username, password)

    def close(self) -> None:
        """Stop following the configuration (and close an owned router) and drop the
        cluster clients: what leaving a ``with`` block does (confluent-kafka's
        AdminClient has no ``close()``; kbear's is that). Idempotent; afterwards every
        call raises RuntimeError with confluent-kafka's words. Futures still pending
        when the clients are dropped fail with ``_DESTROY``, as when a confluent-kafka
        AdminClient is collected."""
        if not self._clusters.close():
            return
        if self._router_closer is not None:
            self._router_closer()
