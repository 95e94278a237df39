"""RoutedAdminClient: construction, one confluent-kafka AdminClient per cluster,
the cluster a name or a ``cluster=`` argument addresses, poll and close (the
calls themselves: ``_topics``, ``_groups``, ``_cluster_calls``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from kbear._base import NO_CONFIG, RoutedClientBase, check_config_argument
from kbear._clients import (
    ClientRegistry,
    ClusterEntry,
    cluster_target,
    open_router,
    poll_clients,
    split_config,
)
from kbear._identity import Client
from kbear.admin._cluster_calls import ClusterCalls
from kbear.admin._groups import GroupCalls
from kbear.admin._names import Names
from kbear.admin._topics import TopicCalls
from kbear.router import Router

__all__ = ["RoutedAdminClient"]

log = logging.getLogger("kbear.admin")


class RoutedAdminClient(TopicCalls, GroupCalls, ClusterCalls, RoutedClientBase):
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

    _closed_message = "AdminClient has been closed"
    #: confluent-kafka's words for its C methods (list_topics, list_groups,
    #: cluster_id, set_sasl_credentials) on a closed client
    _handle_closed_message = "Handle has been closed"

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
        # one AdminClient per cluster; clients whose cluster's properties changed stay
        # referenced (retired) until close() so their pending futures complete
        self._admins: ClientRegistry[ClusterEntry] = ClientRegistry(
            "admin", native, lambda cid, props, client, _: ClusterEntry(cid, props, client), observed=False
        )
        self._closed = False
        self._listen(self._owns_router)
        # As a confluent-kafka AdminClient has its client (callbacks, logger, error_cb on
        # connection errors) from construction: when every route names one cluster.
        only = self._cluster_wide(None)
        if len(only) == 1:
            self._admin(only[0])

    # ------------------------------------------------------------------ clusters

    def _admin(self, cluster_id: str) -> AdminClient:
        """The AdminClient of ``cluster_id`` (built on first use, rebuilt when the
        cluster's properties changed in clusters.yaml)."""
        target = cluster_target(cluster_id, self._router.config.clusters[cluster_id])
        with self._lock:
            if self._closed:
                raise RuntimeError(self._closed_message)
            admin: AdminClient = self._admins.client(target).client
            return admin

    def _native_clients(self) -> list[Any]:
        with self._lock:
            return [entry.client for entry in self._admins.all()]

    def _check_open(self, message: str | None = None) -> None:
        """Raises RuntimeError (confluent-kafka's words) once closed."""
        if self._closed:
            raise RuntimeError(message or self._closed_message)

    def _names(self, group: str | None = None) -> Names:
        self._check_open()
        return Names(self._router, self._client, group)

    def _target(self, cluster: str | None) -> str | None:
        """``cluster`` checked against clusters.yaml, or None (route each name)."""
        self._check_open()
        if cluster is None:
            return None
        known = self._router.config.clusters
        if cluster not in known:
            raise ValueError(f"RoutedAdminClient: unknown cluster {cluster!r} (known: {', '.join(known)})")
        return cluster

    @property
    def clusters(self) -> list[str]:
        """The cluster ids of the configuration in force (clusters.yaml order)."""
        return list(self._router.config.clusters)

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
        self._check_open()
        clients = self._native_clients()
        if not clients:
            time.sleep(1.0 if timeout is None or timeout < 0 else timeout)
            return 0
        return poll_clients(clients, timeout)

    def __len__(self) -> int:
        """Requests and callbacks waiting in every cluster's client (0 once closed, or
        for an instance whose ``__init__`` never ran, as confluent-kafka)."""
        if not self._initialized or self._closed:
            return 0
        return sum(len(client) for client in self._native_clients())

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Set SASL/PLAIN or SCRAM credentials on every cluster's client and on clients
        built later (``AdminClient.set_sasl_credentials``).

        Raises:
            TypeError: ``username`` or ``password`` is not a str.
            RuntimeError: the client is closed ("Handle has been closed").
        """
        self._check_open(self._handle_closed_message)
        super().set_sasl_credentials(username, password)

    def close(self) -> None:
        """Stop following the configuration (and close an owned router) and drop the
        cluster clients: what leaving a ``with`` block does (confluent-kafka's
        AdminClient has no ``close()``; kbear's is that). Idempotent; afterwards every
        call raises RuntimeError with confluent-kafka's words. Futures still pending
        when the clients are dropped fail with ``_DESTROY``, as when a confluent-kafka
        AdminClient is collected."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._admins.clear()
        self._stop_listening()
        if self._owns_router:
            self._router.close()

    def __enter__(self) -> RoutedAdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        """Close (as confluent-kafka's AdminClient after a ``with`` block: every call
        then raises RuntimeError); exceptions of the block propagate."""
        self.close()
