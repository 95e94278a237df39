"""librdkafka's statistics in routed clients: the application's ``stats_cb`` is called
as confluent-kafka calls it (only with ``statistics.interval.ms`` set by the
application, at its interval), whatever kbear's failover watch and metrics need; kbear's
own parts get the shortest interval they need unless the application set one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from conftest import FAST_GROUP, rule, write_standby_config
from kbear import RoutedConsumer, RoutedProducer
from kbear._clients import ClientKind, confluent_client, mount
from kbear._lost import STATS_INTERVAL_MS
from kbear.metrics import DEFAULT_STATS_INTERVAL_MS, instrument, uninstrument
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
KINDS = ["producer", "consumer"]


@pytest.fixture
def built() -> Iterator[dict[str, dict[str, Any]]]:
    """kind -> the configuration of the last cluster client built (confluent-kafka's clients)."""
    seen: dict[str, dict[str, Any]] = {}

    def record(kind: ClientKind, cluster_id: str, conf: dict[str, Any]) -> Any:
        seen.setdefault(kind, conf)  # (a consumer's background client comes later)
        return confluent_client(kind, cluster_id, conf)

    with mount(record):
        yield seen


@pytest.fixture
def metrics_on() -> Iterator[CollectorRegistry]:
    """kbear.metrics instrumented with its default statistics interval."""
    reg = CollectorRegistry()
    instrument(reg)
    yield reg
    uninstrument(reg)


def open_client(
    kind: str, clusters: Clusters, tmp_path: Path, closing: Callable[[Any], Any], conf: dict[str, Any]
) -> Callable[[float], None]:
    """A routed client of ``kind`` with the failover watch on (A's standby: B), its
    client of A built; returns its poll(timeout)."""
    all_on_a = [rule("all", "use cluster A", isGlobal=True)]
    directory = write_standby_config(tmp_path / "conf", clusters, all_on_a)
    common = {"kbear.config": str(directory), "kbear.reload.interval.ms": 0, "kbear.failover.enable": True}
    if kind == "producer":
        producer = closing(RoutedProducer({**common, **conf}))
        producer.produce("stats-interval", b"v")
        return lambda timeout: producer.poll(timeout)
    consumer = closing(RoutedConsumer({**common, **FAST_GROUP, "group.id": "stats-interval", **conf}))
    consumer.subscribe(["stats-interval"])
    return lambda timeout: consumer.poll(timeout) and None


def poll_for(poll: Callable[[float], None], seconds: float, done: Callable[[], bool] = lambda: False) -> None:
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        poll(0.05)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stats_cb_without_statistics_interval_is_never_called(
    kind: str,
    two_clusters: Clusters,
    tmp_path: Path,
    closing: Callable[[Any], Any],
    built: dict[str, dict[str, Any]],
) -> None:
    """As with confluent-kafka (librdkafka: statistics off at 0, the default), though
    the failover watch reads statistics every second for itself."""
    silent: list[str] = []
    poll = open_client(kind, two_clusters, tmp_path, closing, {"stats_cb": silent.append})
    poll_for(poll, 2.5 * STATS_INTERVAL_MS / 1000, lambda: kind in built)
    assert built[kind]["statistics.interval.ms"] == STATS_INTERVAL_MS  # the watch reads statistics
    poll_for(poll, 2.5 * STATS_INTERVAL_MS / 1000)
    assert silent == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_applications_interval_stands_and_its_stats_cb_is_called(
    kind: str,
    two_clusters: Clusters,
    tmp_path: Path,
    closing: Callable[[Any], Any],
    built: dict[str, dict[str, Any]],
    metrics_on: CollectorRegistry,
) -> None:
    seen: list[str] = []
    conf = {"statistics.interval.ms": 200, "stats_cb": seen.append}
    poll = open_client(kind, two_clusters, tmp_path, closing, conf)
    poll_for(poll, 10, lambda: bool(seen))
    assert built[kind]["statistics.interval.ms"] == 200
    assert seen


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_and_the_watch_get_the_shorter_interval(
    kind: str,
    two_clusters: Clusters,
    tmp_path: Path,
    closing: Callable[[Any], Any],
    built: dict[str, dict[str, Any]],
    metrics_on: CollectorRegistry,
) -> None:
    """The failover watch notices a cluster answering again within about a second,
    metrics on or not."""
    assert DEFAULT_STATS_INTERVAL_MS > STATS_INTERVAL_MS
    silent: list[str] = []
    poll = open_client(kind, two_clusters, tmp_path, closing, {"stats_cb": silent.append})
    poll_for(poll, 5, lambda: kind in built)
    assert built[kind]["statistics.interval.ms"] == STATS_INTERVAL_MS
    poll_for(poll, 2.5 * STATS_INTERVAL_MS / 1000)
    assert silent == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_shorter_metrics_interval_is_kept_with_the_watch(
    kind: str,
    two_clusters: Clusters,
    tmp_path: Path,
    closing: Callable[[Any], Any],
    built: dict[str, dict[str, Any]],
) -> None:
    reg = CollectorRegistry()
    instrument(reg, stats_interval_ms=300)
    try:
        poll = open_client(kind, two_clusters, tmp_path, closing, {})
        poll_for(poll, 5, lambda: kind in built)
        assert built[kind]["statistics.interval.ms"] == 300
    finally:
        uninstrument(reg)
