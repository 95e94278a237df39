"""One cluster's confluent-kafka Producer, and when a producer needs only one (private).

:class:`ClusterProducer` is a cluster's client with the properties it was built
from and the logical names of the remapped topics it sends (delivery reports);
:func:`single_cluster` proves from the configuration alone that every producer
lookup of a client yields one cluster without a remap (the fast path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from kbear.config import KBearConfig, RuleKind
from kbear.router import Client


def logical_callback(cb: Callable[[Any, Any], None], logical: str) -> Callable[[Any, Any], None]:
    def deliver(err: Any, msg: Any) -> None:
        msg.set_topic(logical)
        cb(err, msg)

    return deliver


def single_cluster(config: KBearConfig, client: Client) -> str | None:
    """The cluster every producer lookup of ``client`` yields, for any topic, without
    a remap; None when the configuration does not prove there is one.

    Proof: every topic or global rule that can match this client (its ``client.*``
    conditions hold; other conditions are unknown) names the same cluster without
    ``, topic``, and some global rule surely matches (all its conditions are
    ``client.*`` conditions that hold), so no lookup ends in NoRouteError.
    """
    factors = client.factors()
    cluster: str | None = None
    sure = False
    for rule in config.rules:
        if rule.kind is RuleKind.CONSUMER_GROUP:
            continue
        conds = rule.statement.conditions
        if any(c.key.startswith("client.") and factors.get(c.key) != c.value for c in conds):
            continue  # never matches this client
        if rule.statement.topic is not None:
            return None
        if cluster is None:
            cluster = rule.statement.cluster
        elif cluster != rule.statement.cluster:
            return None
        if rule.kind is RuleKind.GLOBAL and all(c.key.startswith("client.") for c in conds):
            sure = True
    return cluster if sure else None


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
