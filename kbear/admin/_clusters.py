"""The clusters of a RoutedAdminClient (private): one explicit object its parts share.

:class:`AdminClusters` is what the topic, group and cluster-wide calls need of
their client, as aiokafka hands one ``SubscriptionState`` to its parts: the
AdminClient of a cluster (from the client registry), the names' routes, a
``cluster=`` argument checked, the clusters a cluster-wide call goes to, and
whether the client is closed. No part sees the facade.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka.admin import AdminClient

from kbear._clients import ClientRegistry, ClusterEntry, cluster_target, single_cluster
from kbear._identity import Client
from kbear.admin._names import Names
from kbear.config import RuleKind
from kbear.router import Router

#: confluent-kafka's words for a call on a closed AdminClient
CLOSED = "AdminClient has been closed"
#: confluent-kafka's words for its C methods (list_topics, list_groups, cluster_id,
#: set_sasl_credentials) on a closed client
HANDLE_CLOSED = "Handle has been closed"


class AdminClusters:
    """The AdminClient of each cluster of one RoutedAdminClient, and how a call picks them.

    Args:
        router: the router (its configuration in force is read at each call).
        client: the client the routes are looked up for.
        native: the application's confluent-kafka configuration (no kbear keys).
    """

    def __init__(self, router: Router, client: Client, native: dict[str, Any]) -> None:
        self.router = router
        self.client = client
        self._lock = threading.Lock()
        # clients whose cluster's properties changed stay referenced (retired) until
        # close() so their pending futures complete
        self._registry: ClientRegistry[ClusterEntry] = ClientRegistry(
            "admin", native, lambda cid, props, built, _: ClusterEntry(cid, props, built), observed=False
        )
        self.closed = False

    def admin(self, cluster_id: str) -> AdminClient:
        """The AdminClient of ``cluster_id`` (built on first use, rebuilt when the
        cluster's properties changed in clusters.yaml).

        Raises:
            RuntimeError: closed ("AdminClient has been closed").
        """
        target = cluster_target(cluster_id, self.router.config.clusters[cluster_id])
        with self._lock:
            if self.closed:
                raise RuntimeError(CLOSED)
            admin: AdminClient = self._registry.client(target).client
            return admin

    def clients(self) -> list[Any]:
        """Every cluster's AdminClient built so far, retired ones included."""
        with self._lock:
            return [entry.client for entry in self._registry.all()]

    def close(self) -> bool:
        """Drop every client; False when already closed."""
        with self._lock:
            if self.closed:
                return False
            self.closed = True
            self._registry.clear()
            return True

    def check_open(self, message: str | None = None) -> None:
        """Raises RuntimeError (confluent-kafka's words, ``message`` if given) once closed."""
        if self.closed:
            raise RuntimeError(message or CLOSED)

    def names(self, group: str | None = None) -> Names:
        """The routes of names for this client (and consumer ``group``)."""
        self.check_open()
        return Names(self.router, self.client, group)

    def target(self, cluster: str | None) -> str | None:
        """``cluster`` checked against clusters.yaml, or None (route each name).

        Raises:
            ValueError: an unknown cluster id.
        """
        self.check_open()
        if cluster is None:
            return None
        known = self.router.config.clusters
        if cluster not in known:
            raise ValueError(f"RoutedAdminClient: unknown cluster {cluster!r} (known: {', '.join(known)})")
        return cluster

    def cluster_wide(self, cluster: str | None) -> list[str]:
        """The clusters a cluster-wide call goes to: ``cluster``, else the one cluster
        every route of the client names (when proven), else all of them."""
        target = self.target(cluster)
        if target is not None:
            return [target]
        config = self.router.config
        only = single_cluster(config, self.client)
        factors = self.client.factors()
        for rule in config.rules:  # single_cluster leaves out consumer-group rules
            conditions = rule.statement.conditions
            never = any(c.key.startswith("client.") and factors.get(c.key) != c.value for c in conditions)
            moved = rule.statement.cluster != only or rule.statement.topic is not None
            if rule.kind is RuleKind.CONSUMER_GROUP and moved and not never:
                only = None
        if only is not None:
            return [only]
        return list(config.clusters)

    def one_cluster(self, cluster: str | None, call: str) -> str:
        """The one cluster of a call that needs one (``call``: its name, for the error).

        Raises:
            ValueError: the routes of this client name several clusters and no ``cluster=``.
        """
        clusters = self.cluster_wide(cluster)
        if len(clusters) > 1:
            raise ValueError(
                f"RoutedAdminClient.{call}: pass cluster= (one of {', '.join(clusters)}): "
                "the routes of this client name several clusters"
            )
        return clusters[0]
