"""One cluster's confluent-kafka Producer, and when a producer needs only one (private).

:class:`ClusterProducer` is a cluster's client with the properties it was built
from and the logical names of the remapped topics it sends (delivery reports);
:func:`~kbear._clients.single_cluster` proves from the configuration alone that
every producer lookup of a client yields one cluster without a remap (the fast path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from kbear._clients import single_cluster

__all__ = ["ClusterProducer", "logical_callback", "single_cluster"]


def logical_callback(cb: Callable[[Any, Any], None], logical: str) -> Callable[[Any, Any], None]:
    def deliver(err: Any, msg: Any) -> None:
        msg.set_topic(logical)
        cb(err, msg)

    return deliver


class ClusterProducer:
    """The confluent-kafka Producer of one cluster, with the properties it was built from."""

    __slots__ = ("cluster_id", "logical", "producer", "properties", "retired_at")

    def __init__(
        self,
        cluster_id: str,
        properties: Mapping[str, str],
        producer: Producer,
        logical: dict[str, str],
    ) -> None:
        self.cluster_id = cluster_id
        self.properties = dict(properties)
        self.producer = producer
        # physical topic -> logical topic, for remapped topics (delivery reports)
        self.logical = logical
        # the reload generation that retired this client (RoutedProducer._retired)
        self.retired_at = 0
