"""Shared plumbing of RoutedProducer and RoutedConsumer (private).

- splitting the application's configuration into kbear keys and the
  confluent-kafka configuration;
- the router and client each routed client uses;
- merging a cluster's properties into the configuration of its client;
- proving from the configuration alone that a client uses one cluster only.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from kbear._identity import Client
from kbear.config import ClusterConfig, KBearConfig, RuleKind
from kbear.router import Router
from kbear.settings import KBEAR_PREFIX, KBearSettings, parse_settings

_FORBIDDEN = ("bootstrap.servers", "metadata.broker.list")


def split_config(
    config: Mapping[str, Any] | None, kwargs: Mapping[str, Any], client: Client | None, kind: str
) -> tuple[dict[str, Any], KBearSettings]:
    """Separate kbear keys from the confluent-kafka configuration.

    Raises:
        ValueError: ``bootstrap.servers`` (or ``metadata.broker.list``) is
            present, a kbear key is unknown or has a bad value, or a client is
            given both as ``client=`` and as ``kbear.client.*`` keys.
    """
    merged: dict[str, Any] = dict(config or {})
    merged.update(kwargs)
    for key in _FORBIDDEN:
        if key in merged:
            raise ValueError(
                f"{kind}: '{key}' must not be set: kbear takes the bootstrap servers from the "
                "route of each topic (clusters.yaml); remove it and set 'kbear.config' or pass "
                "router="
            )
    kbear_conf = {k: v for k, v in merged.items() if k.startswith(KBEAR_PREFIX)}
    native = {k: v for k, v in merged.items() if not k.startswith(KBEAR_PREFIX)}
    settings = parse_settings(kbear_conf, client, kind)
    if settings.metrics_enable:
        from kbear.metrics import instrument  # the optional extra, imported only when asked for

        instrument()
    return native, settings


def open_router(router: Router | None, settings: KBearSettings, kind: str) -> tuple[Router, bool]:
    """The router to use and whether the routed client owns it (and must close it).

    Starts the router's watcher when ``kbear.reload.interval.ms`` > 0.

    ``kbear.config`` is a configuration directory or a meta-service ``http(s)://``
    URL (asked on behalf of the settings' client, see :mod:`kbear.meta`).

    Raises:
        ValueError: neither ``router=`` nor ``kbear.config`` is given.
        ConfigError: the configuration is invalid (or a meta-service unreachable
            with no cached answer to start from).
    """
    owned = router is None
    if router is None:
        if settings.config_dir is None:
            raise ValueError(f"{kind}: set 'kbear.config' (a configuration directory) or pass router=")
        # A meta-service is told who asks: the kbear.client.* keys, else the
        # environment (Client.from_environment); a directory ignores it.
        given = settings.client.id is not None or bool(settings.client.meta)
        router = Router.from_source(settings.config_dir, client=settings.client if given else None)
    if settings.reload_interval_ms > 0 and router.source is not None:
        router.watch(settings.reload_interval_ms / 1000.0)
    return router, owned


@dataclass(frozen=True)
class ClusterTarget:
    """A whole cluster rather than a topic on it: what a client needs to be built
    for that cluster.

    Attributes:
        cluster_id: the cluster id (clusters.yaml).
        bootstrap_servers: the cluster's ``bootstrap.servers``.
        properties: the cluster's librdkafka client properties (clusters.yaml
            ``meta``, including ``bootstrap.servers``).
    """

    cluster_id: str
    bootstrap_servers: str
    properties: Mapping[str, str] = field(repr=False)


def cluster_target(cluster_id: str, cluster: ClusterConfig) -> ClusterTarget:
    """The :class:`ClusterTarget` of ``cluster`` (clusters.yaml entry ``cluster_id``)."""
    return ClusterTarget(cluster_id, cluster.bootstrap_servers, cluster.client_properties)


def cluster_config(native: Mapping[str, Any], properties: Mapping[str, str]) -> dict[str, Any]:
    """The configuration of one cluster's client: the application's keys, then the
    cluster's properties from ``clusters.yaml`` (which win: they are the cluster's own
    connection and security settings)."""
    merged = dict(native)
    merged.update(properties)
    return merged


def renamed(tp: TopicPartition, topic: str) -> TopicPartition:
    """A copy of ``tp`` under another topic name (TopicPartition is immutable and
    takes neither ``metadata=None`` nor ``leader_epoch=None``)."""
    extra: dict[str, Any] = {}
    if tp.metadata is not None:
        extra["metadata"] = tp.metadata
    if tp.leader_epoch is not None:
        extra["leader_epoch"] = tp.leader_epoch
    return TopicPartition(topic, tp.partition, tp.offset, **extra)


class Deadline:
    """A timeout in seconds as confluent-kafka takes it (None or negative: infinite)."""

    __slots__ = ("end",)

    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None or timeout < 0 else time.monotonic() + timeout

    def remaining(self) -> float | None:
        """Seconds left (>= 0), or None for infinite."""
        if self.end is None:
            return None
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def as_arg(self) -> float:
        """Remaining time as a confluent-kafka timeout argument (-1 = infinite)."""
        left = self.remaining()
        return -1 if left is None else left


def single_cluster(config: KBearConfig, client: Client, group: str | None = None) -> str | None:
    """The cluster every lookup of ``client`` yields, for any topic, without a remap;
    None when the configuration does not prove there is one.

    Args:
        config: the configuration in force.
        client: who asks (its ``client.*`` factors).
        group: the consumer group of a consumer lookup; None for producer lookups.

    Proof: every rule that can match (its ``client.*`` conditions hold; other
    conditions are unknown; consumer-group rules only of ``group``) names the same
    cluster without ``, topic``, and some global rule surely matches (all its
    conditions are ``client.*`` conditions that hold), so no lookup ends in
    NoRouteError (CRRL spec, "Kinds of rule").
    """
    factors = client.factors()
    cluster: str | None = None
    sure = False
    for rule in config.rules:
        if rule.kind is RuleKind.CONSUMER_GROUP and (
            group is None or rule.meta.get("consumerGroup.groupName") != group
        ):
            continue  # another group's rule, or a producer lookup
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
