"""Shared plumbing of RoutedProducer and RoutedConsumer (private).

- splitting the application's configuration into kbear keys and the
  confluent-kafka configuration;
- the router and client each routed client uses;
- merging a cluster's properties into the configuration of its client.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from kbear.config import ClusterConfig
from kbear.router import Client, Router

KBEAR_PREFIX = "kbear."
_CLIENT_META_PREFIX = "kbear.client.meta."
_FORBIDDEN = ("bootstrap.servers", "metadata.broker.list")

#: kbear keys and their defaults (ms). Source: this module; documented in the README.
_KNOWN = {
    "kbear.config": None,
    "kbear.client.id": None,
    "kbear.reload.interval.ms": 10_000,
    "kbear.switch.drain.timeout.ms": 30_000,
    "kbear.switch.drain.idle.ms": 2_000,
    "kbear.switch.mode": "drain",
    "kbear.switch.start": "committed",
    "kbear.switch.timestamp.margin.ms": 0,
}
_SWITCH_STARTS = ("committed", "timestamp", "earliest", "latest")


@dataclass(frozen=True)
class KBearSettings:
    """The kbear keys of a routed client's configuration, parsed."""

    config_dir: str | None
    client: Client
    reload_interval_ms: int
    drain_timeout_ms: int
    drain_idle_ms: int
    switch_mode: str
    switch_start: str
    timestamp_margin_ms: int


def _int_setting(conf: Mapping[str, Any], key: str) -> int:
    value = conf.get(key, _KNOWN[key])
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer number of milliseconds, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{key} must be >= 0, got {number}")
    return number


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
    unknown = [k for k in kbear_conf if k not in _KNOWN and not k.startswith(_CLIENT_META_PREFIX)]
    if unknown:
        raise ValueError(f"{kind}: unknown kbear configuration key(s) {sorted(unknown)}")
    meta = {
        k.removeprefix(_CLIENT_META_PREFIX): str(v)
        for k, v in kbear_conf.items()
        if k.startswith(_CLIENT_META_PREFIX)
    }
    client_id = kbear_conf.get("kbear.client.id")
    if client is not None and (client_id is not None or meta):
        raise ValueError(f"{kind}: pass the client either as client= or as kbear.client.* keys")
    if client is None:
        client = Client(None if client_id is None else str(client_id), meta)
    mode = str(kbear_conf.get("kbear.switch.mode", "drain"))
    if mode not in ("drain", "immediate"):
        raise ValueError(f"{kind}: kbear.switch.mode must be 'drain' or 'immediate', got {mode!r}")
    start = str(kbear_conf.get("kbear.switch.start", "committed"))
    if start not in _SWITCH_STARTS:
        raise ValueError(
            f"{kind}: kbear.switch.start must be one of {', '.join(_SWITCH_STARTS)}, got {start!r}"
        )
    settings = KBearSettings(
        config_dir=None if kbear_conf.get("kbear.config") is None else str(kbear_conf["kbear.config"]),
        client=client,
        reload_interval_ms=_int_setting(kbear_conf, "kbear.reload.interval.ms"),
        drain_timeout_ms=_int_setting(kbear_conf, "kbear.switch.drain.timeout.ms"),
        drain_idle_ms=_int_setting(kbear_conf, "kbear.switch.drain.idle.ms"),
        switch_mode=mode,
        switch_start=start,
        timestamp_margin_ms=_int_setting(kbear_conf, "kbear.switch.timestamp.margin.ms"),
    )
    return native, settings


def open_router(router: Router | None, settings: KBearSettings, kind: str) -> tuple[Router, bool]:
    """The router to use and whether the routed client owns it (and must close it).

    Starts the router's watcher when ``kbear.reload.interval.ms`` > 0.

    Raises:
        ValueError: neither ``router=`` nor ``kbear.config`` is given.
        ConfigError: the configuration directory is invalid.
    """
    owned = router is None
    if router is None:
        if settings.config_dir is None:
            raise ValueError(f"{kind}: set 'kbear.config' (a configuration directory) or pass router=")
        router = Router.from_path(settings.config_dir)
    if settings.reload_interval_ms > 0 and router.config.directory is not None:
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
    return ClusterTarget(cluster_id, cluster.bootstrap_servers, cluster.meta)


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
