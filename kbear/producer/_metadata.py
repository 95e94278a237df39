"""Cluster metadata of a RoutedProducer: ``list_topics`` and
``cluster_id`` answered over the routes (a topic's cluster, every cluster merged,
or the one cluster in use)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kbear._base import not_one_cluster, rename_metadata
from kbear._clients import ClientRegistry, Deadline, cluster_target
from kbear._identity import Client
from kbear._route import Route
from kbear.config import KBearConfig
from kbear.producer._cluster import ClusterProducer, single_cluster


@dataclass(eq=False)
class Metadata:
    """The metadata calls of :class:`~kbear.RoutedProducer`.

    Args:
        clients: the producer's client registry.
        routes: the route table's routes (read only: logical topic -> route).
        route: ``route(topic)``: the topic's route (routing it if new).
        config: the configuration in force.
        client: the client the routes are looked up for.
    """

    _clients: ClientRegistry[ClusterProducer]
    _routes: Mapping[str, Route]
    route: Callable[[str], Route]
    _config: Callable[[], KBearConfig]
    _client: Client

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata, as ``confluent_kafka.Producer.list_topics``.

        With ``topic``: the metadata from that topic's cluster, the topic listed
        under the name asked for. Without: the topics of every configured
        cluster merged into one ``ClusterMetadata`` (``brokers`` and
        ``cluster_id`` of the first cluster; a topic on several clusters is
        listed once, from the cluster this producer routes it to when it has
        produced to it).

        Raises:
            NoRouteError: ``topic`` has no route.
            KafkaException: a cluster did not answer within ``timeout`` seconds.
        """
        if topic is not None:
            route = self.route(topic)
            entry = self._clients.client(route)
            md = entry.producer.list_topics(route.topic, timeout)
            return rename_metadata(md, route, topic)
        for cluster_id, cluster in self._config().clusters.items():
            if cluster_id not in self._clients:
                self._clients.client(cluster_target(cluster_id, cluster))
        merged = None
        routed = {r.topic: r.cluster_id for r in self._routes.values()}
        deadline = Deadline(timeout)
        for cluster_id, entry in self._clients.items():
            md = entry.producer.list_topics(None, deadline.as_arg())
            if merged is None:
                merged = md
                continue
            for name, tmd in md.topics.items():
                if name not in merged.topics or routed.get(name) == cluster_id:
                    merged.topics[name] = tmd
        return merged

    def cluster_id(self, timeout: float = -1) -> str:
        """The Kafka cluster id (KIP-78) of the one cluster this producer sends to,
        as ``confluent_kafka.Producer.cluster_id`` (``timeout`` in seconds, -1:
        infinite). When nothing was produced yet and the configuration proves
        every route goes to one cluster, that cluster's.

        Raises:
            KafkaException: ``_STATE`` when this producer sends to more than one
                cluster, or to none yet and its routes may go to several; the
                cluster's errors (e.g. ``_TIMED_OUT``).
        """
        clients = self._clients.all()
        if not clients:
            config = self._config()
            home = single_cluster(config, self._client)
            if home is not None and home in config.clusters:
                clients = [self._clients.client(cluster_target(home, config.clusters[home]))]
        if len(clients) != 1:
            raise not_one_cluster(
                "cluster_id",
                "RoutedProducer sends to",
                (c.cluster_id for c in clients),
                "ask a route's cluster (route(topic)) or a one-cluster client",
            )
        return str(clients[0].producer.cluster_id(timeout))
