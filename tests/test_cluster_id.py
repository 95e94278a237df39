"""``kbear.cluster.id`` (#27 item 6): a routed client whose bootstrap servers lead to
another cluster than the one ``clusters.yaml`` declares refuses it, with an error
naming the cluster and a metric; the right id, or none, changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from conftest import FAST_GROUP, message_count, rewrite_rules, rule
from kbear import RoutedConsumer, RoutedProducer, WrongClusterError, _events
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}


def reported_id(cluster: EmbeddedCluster) -> str:
    return str(Producer({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=5).cluster_id)


def config(directory: Path, a: EmbeddedCluster, b: EmbeddedCluster, declared: str | None) -> Path:
    """Cluster ``A`` declared with ``declared`` as its id but reached at ``b``'s address
    (the misrouted bootstrap), or at its own when ``b`` is ``a``."""
    directory.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {"bootstrap.servers": b.bootstrap_servers}
    if declared is not None:
        meta["kbear.cluster.id"] = declared
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": [{"id": "A", "meta": meta}]}))
    rewrite_rules(directory, [rule("all", "use cluster A", isGlobal=True)])
    return directory


@pytest.fixture
def mismatches() -> Iterator[list[_events.ClusterIdMismatch]]:
    seen: list[_events.ClusterIdMismatch] = []

    def listen(event: Any) -> None:
        if isinstance(event, _events.ClusterIdMismatch):
            seen.append(event)

    _events.subscribe(listen)
    try:
        yield seen
    finally:
        _events.unsubscribe(listen)


def test_a_producer_refuses_a_cluster_that_reports_another_id(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    tmp_path: Path,
    closing: Callable[[Any], Any],
    mismatches: list[_events.ClusterIdMismatch],
) -> None:
    a, b = two_clusters
    expected, wrong = reported_id(a), reported_id(b)
    assert expected != wrong
    b.create_topic("orders", 1)
    conf = {"kbear.config": str(config(tmp_path / "c", a, b, expected)), **NO_WATCH}
    # one cluster for every route: the producer builds its client at once, so the
    # constructor refuses it (with several clusters, the first produce() there does)
    for _ in range(2):
        with pytest.raises(WrongClusterError) as caught:
            closing(RoutedProducer(conf)).produce("orders", b"v")
        error = caught.value
        assert (error.cluster, error.expected, error.reported) == ("A", expected, wrong)
        assert "cluster 'A'" in error.args[0].str() and b.bootstrap_servers in error.args[0].str()
        assert error.args[0].fatal()
    assert message_count(b, "orders") == 0  # nothing was written there
    assert [(m.kind, m.cluster, m.expected, m.reported) for m in mismatches] == [
        ("producer", "A", expected, wrong),
        ("producer", "A", expected, wrong),
    ]


def test_a_consumer_refuses_it(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    tmp_path: Path,
    closing: Callable[[Any], Any],
    mismatches: list[_events.ClusterIdMismatch],
) -> None:
    a, b = two_clusters
    b.create_topic("orders", 1)
    conf = {
        "kbear.config": str(config(tmp_path / "c", a, b, reported_id(a))),
        "group.id": "g",
        **FAST_GROUP,
        **NO_WATCH,
    }
    # one cluster: built (and refused) by the constructor; with several, by subscribe()
    with pytest.raises(WrongClusterError, match=r"cluster 'A': its brokers .* report cluster id"):
        closing(RoutedConsumer(conf)).subscribe(["orders"])
    assert [(m.kind, m.cluster) for m in mismatches] == [("consumer", "A")]


@pytest.mark.parametrize("declared", ["right", None])
def test_the_right_id_or_none_changes_nothing(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    tmp_path: Path,
    closing: Callable[[Any], Any],
    mismatches: list[_events.ClusterIdMismatch],
    declared: str | None,
) -> None:
    a, _b = two_clusters
    a.create_topic("orders", 1)
    expected = reported_id(a) if declared else None
    producer = closing(
        RoutedProducer({"kbear.config": str(config(tmp_path / "c", a, a, expected)), **NO_WATCH})
    )
    producer.produce("orders", b"v")
    assert producer.flush(10) == 0
    assert mismatches == []


def test_the_metric_counts_refusals(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    tmp_path: Path,
    closing: Callable[[Any], Any],
) -> None:
    from prometheus_client import CollectorRegistry

    from kbear.metrics import instrument, uninstrument

    a, b = two_clusters
    registry = CollectorRegistry()
    instrument(registry=registry)
    try:
        conf = {"kbear.config": str(config(tmp_path / "c", a, b, reported_id(a))), **NO_WATCH}
        with pytest.raises(WrongClusterError):
            closing(RoutedProducer(conf)).produce("orders", b"v")
        value = registry.get_sample_value(
            "kbear_cluster_id_mismatches_total", {"kind": "producer", "cluster": "A"}
        )
        assert value == 1.0
    finally:
        uninstrument(registry)
