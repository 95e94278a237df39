"""The RoutedConsumer calls about its clusters as a whole: member ids, the group
metadata and the cluster id, answered by the one cluster (or every cluster) read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kbear._base import not_one_cluster
from kbear.consumer._cluster import ClusterRegistry


@dataclass(eq=False)
class ClusterCalls:
    """``memberid``, ``memberids``, ``consumer_group_metadata``, ``cluster_id`` of
    :class:`~kbear.RoutedConsumer` (its methods of the same names delegate here).

    Args:
        registry: the consumer's per-cluster clients.
        check_open: raises ``RuntimeError`` when the consumer is closed.
    """

    registry: ClusterRegistry
    check_open: Callable[[], None]

    def memberid(self) -> str | None:
        """The group member id on the (first) cluster this consumer is subscribed to,
        or None before it joined. See :meth:`memberids` for every cluster."""
        self.check_open()
        active = self.registry.active
        return active[0].consumer.memberid() if active else None

    def memberids(self) -> dict[str, str | None]:
        """Cluster id -> group member id on that cluster (kbear addition)."""
        self.check_open()
        return {e.cluster_id: e.consumer.memberid() for e in self.registry.active}

    def consumer_group_metadata(self) -> Any:
        """The group metadata for ``RoutedProducer.send_offsets_to_transaction``.

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster (group metadata exists per cluster) or from none yet.
        """
        return self._one(
            "consumer_group_metadata", "group metadata exists for one cluster only"
        ).consumer_group_metadata()

    def cluster_id(self, timeout: float = -1) -> str:
        """The Kafka cluster id (KIP-78) of the one cluster this consumer reads
        from, as ``confluent_kafka.Consumer.cluster_id`` (``timeout`` in seconds,
        -1: infinite).

        Raises:
            KafkaException: ``_STATE`` when this consumer reads from more than one
                cluster or from none yet; the cluster's errors (e.g. ``_TIMED_OUT``).
        """
        one = self._one("cluster_id", "ask a route's cluster (routes()) or a one-cluster client")
        return str(one.cluster_id(timeout))

    def _one(self, call: str, hint: str) -> Any:
        """The client of the one cluster read (else of the one built).

        Raises:
            KafkaException: ``_STATE`` (:func:`kbear._base.not_one_cluster`, with ``hint``)
                when there are several or none.
        """
        self.check_open()
        clusters = self.registry.active or list(self.registry)
        if len(clusters) != 1:
            raise not_one_cluster(call, "RoutedConsumer reads from", (e.cluster_id for e in clusters), hint)
        return clusters[0].consumer
