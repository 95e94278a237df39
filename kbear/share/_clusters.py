"""The share consumer of each cluster a routed share consumer reads (private).

A share group lives on one cluster: a :class:`~kbear.RoutedShareConsumer` whose
topics are on several clusters holds one confluent-kafka ``ShareConsumer`` per
cluster, each in the share group ``group.id`` of its cluster and subscribed to
the physical names of the topics read there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import TopicPartition

from kbear._clients import ClientRegistry, ClusterEntry, Target, cluster_config, current_factory, renamed

V = TypeVar("V")

#: the keys of a share consumer's configuration an admin client asking for the Kafka
#: cluster id is built with (connection and security), prefixes included
_ADMIN_KEYS = (
    "bootstrap.servers",
    "client.id",
    "socket.",
    "security.",
    "sasl.",
    "ssl.",
    "oauth_cb",
    "error_cb",
)

#: how long committing the pending acknowledgements before a new subscription may take (seconds)
RESUBSCRIBE_COMMIT_TIMEOUT_S = 10.0

#: confluent-kafka's acknowledgement commit callback: ``callback(offsets, exception)``
CommitCallback = Callable[[dict[TopicPartition, set[int]], Any], None]


class ShareCluster(ClusterEntry):
    """One cluster's ``ShareConsumer`` (``client``) and the topics it reads.

    Attributes:
        topics: physical topic -> logical topic, subscribed on this cluster now.
        names: physical -> logical of every topic ever read here (acknowledgement
            results may arrive after a topic left the subscription).
    """

    __slots__ = ("acquired", "names", "topics")

    def __init__(self, cluster_id: str, properties: Mapping[str, str], client: Any, _prepared: Any) -> None:
        super().__init__(cluster_id, properties, client)
        self.topics: dict[str, str] = {}
        self.names: dict[str, str] = {}
        #: records were acquired here since the last commit (acknowledgements may be pending)
        self.acquired = False

    def logical(self, physical: str) -> str:
        """The logical name of ``physical`` on this cluster (itself when not renamed)."""
        return self.names.get(physical, physical)

    def read(self, physical: str, logical: str) -> None:
        """Subscribe ``physical`` (logical ``logical``) here from the next :meth:`resubscribe`."""
        self.topics[physical] = logical
        self.names[physical] = logical

    def commit(self, timeout: float) -> dict[TopicPartition, Any]:
        """Commit the acknowledgements pending here (``commit_sync``), physical names.

        Raises:
            KafkaException: the commit failed.
        """
        results: dict[TopicPartition, Any] = self.client.commit_sync(timeout)
        self.acquired = False
        return results

    def resubscribe(self) -> None:
        """Set the cluster's subscription to :attr:`topics` (unsubscribed when empty),
        after committing the acknowledgements pending here: a new subscription
        starts a new share session, and acknowledgements not sent in the old one
        would be lost (the records redelivered).

        Raises:
            KafkaException: confluent-kafka refused the subscription.
        """
        if self.acquired:
            with contextlib.suppress(Exception):  # the broker answers for each record later
                self.commit(RESUBSCRIBE_COMMIT_TIMEOUT_S)
        if self.topics:
            self.client.subscribe(sorted(self.topics))
        else:
            self.client.unsubscribe()

    def renamed_keys(self, results: Mapping[TopicPartition, V]) -> dict[TopicPartition, V]:
        """``results`` (keyed by physical TopicPartitions) keyed by logical ones."""
        out: dict[TopicPartition, V] = {}
        for tp, value in results.items():
            name = self.logical(tp.topic)
            out[tp if name == tp.topic else renamed(tp, name)] = value
        return out

    def commit_callback(self, callback: CommitCallback) -> CommitCallback:
        """``callback`` as this cluster's client calls it: with logical topic names."""

        def renaming(offsets: dict[TopicPartition, set[int]], exception: Any) -> None:
            callback(self.renamed_keys(offsets), exception)

        return renaming


class ShareClusters(ClientRegistry[ShareCluster]):
    """The share consumers of one routed share consumer, built on first use (a
    :class:`~kbear._clients.ClientRegistry` giving each the acknowledgement commit
    callback).

    Args:
        native: the application's confluent-kafka configuration (kbear keys removed).
    """

    def __init__(self, native: dict[str, Any]) -> None:
        super().__init__("share_consumer", native, ShareCluster)
        self.commit_callback: CommitCallback | None = None
        self._kafka_ids: dict[str, str] = {}

    def kafka_cluster_id(self, cluster_id: str, timeout: float) -> str:
        """The Kafka cluster id of ``cluster_id`` (a ShareConsumer cannot tell it):
        asked once with an admin client built from the share consumer's connection
        and security settings, then kept.

        Raises:
            KafkaException: the cluster did not answer within ``timeout`` seconds.
            LookupError: no share consumer of ``cluster_id`` was built.
        """
        known = self._kafka_ids.get(cluster_id)
        if known is not None:
            return known
        entry = self.get(cluster_id)
        if entry is None:
            raise LookupError(f"kbear: cluster {cluster_id!r} has no share consumer yet")
        conf = cluster_config(self.native, entry.properties)
        admin = current_factory()(
            "admin", cluster_id, {k: v for k, v in conf.items() if k.startswith(_ADMIN_KEYS)}
        )
        answer = str(admin.list_topics(timeout=timeout).cluster_id)
        self._kafka_ids[cluster_id] = answer
        return answer

    def client(self, target: Target) -> ShareCluster:
        """The share consumer of ``target``'s cluster (a Route or ClusterTarget), built
        if needed.

        Raises:
            KafkaException, ValueError: confluent-kafka refused the configuration.
        """
        before = self.get(target.cluster_id)
        entry = super().client(target)
        if entry is not before and self.commit_callback is not None:
            entry.client.set_acknowledgement_commit_callback(entry.commit_callback(self.commit_callback))
        return entry

    def reading(self) -> list[ShareCluster]:
        """The share consumers subscribed to at least one topic."""
        return [e for e in self.all() if e.topics]

    def set_commit_callback(self, callback: CommitCallback | None) -> None:
        """Give ``callback`` (with logical names) to every share consumer, now and later.

        Raises:
            TypeError: ``callback`` is neither callable nor None (as confluent-kafka).
        """
        if callback is not None and not callable(callback):
            raise TypeError("expected callable or None for callback")
        for entry in self.all():
            entry.client.set_acknowledgement_commit_callback(
                None if callback is None else entry.commit_callback(callback)
            )
        self.commit_callback = callback
