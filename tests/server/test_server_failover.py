"""``kbear serve --failover-after-ms`` (issue #27 item 2c): the service watches its
clusters and, once one is lost, answers every client with the standby route."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import read_all, rule, write_standby_config
from kbear import RoutedProducer, _events
from kbear.cli import main
from kbear.config import ClusterConfig, load_config
from kbear.testing import EmbeddedCluster

pytest.importorskip("uvicorn")

from kbear.server.embedded import EmbeddedMetaService
from kbear.server.failover import FailoverWatch

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
ALL_ON_A = [rule("all", "use cluster A", isGlobal=True)]


def test_the_fleet_follows_the_service_and_loses_nothing(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    kbear_events: list[_events.Event],
) -> None:
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    conf = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    reports: dict[bytes, list[Any]] = {}
    with EmbeddedMetaService(conf, failover_after_ms=600) as service:
        fleet = [
            RoutedProducer(
                {"kbear.config": service.url, "kbear.reload.interval.ms": 200, "message.timeout.ms": 30_000},
                on_delivery=lambda err, msg: reports.setdefault(msg.value(), []).append(err),
            )
            for _ in range(2)
        ]
        try:
            for producer in fleet:
                producer.produce(topic, b"warm")
                assert producer.flush(10) == 0
            a.set_broker_down(-1)
            lost_at = time.monotonic()
            values = []
            for n in range(40):
                values.append(f"m-{n:03d}".encode())
                fleet[n % 2].produce(topic, values[-1], b"k")
            end = time.monotonic() + 15
            while time.monotonic() < end and not all(v in reports for v in values):
                for producer in fleet:
                    producer.poll(0.02)
            took = time.monotonic() - lost_at
            assert [p.route(topic).cluster_id for p in fleet] == ["B", "B"]
        finally:
            for producer in fleet:
                producer.close(5)
            a.set_broker_up(-1)
    assert {v: reports.get(v) for v in values} == {v: [None] for v in values}
    assert 0.6 <= took < 0.6 + 5
    assert {m.value() for m in read_all(b, topic)} == set(values)
    assert 'kbear.failover.active: "true"' in (conf / "clusters.yaml").read_text()
    assert load_config(conf).clusters["A"].failover.active
    serve = [(e.trigger, e.cluster, e.standby) for e in kbear_events if isinstance(e, _events.FailedOver)]
    assert ("serve", "A", "B") in serve


def test_no_failover_while_the_standby_does_not_answer(native_clusters: Clusters, tmp_path: Path) -> None:
    conf = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    down: set[str] = {"A", "B"}
    now = [0.0]

    def probe(cluster: ClusterConfig, timeout_s: float) -> str | None:
        return "refused" if cluster.id in down else None

    watch = FailoverWatch(conf, lambda: load_config(conf), after_ms=1000, probe=probe, clock=lambda: now[0])
    watch.check()
    now[0] = 1.5
    assert [(t.cluster, t.lost) for t in watch.check()] == [("A", True)]  # B has no standby: not watched
    assert not load_config(conf).clusters["A"].failover.active  # B does not answer: not failed over
    down.discard("B")
    now[0] = 2.0
    watch.check()  # tried again: B answers now
    assert load_config(conf).clusters["A"].failover.active


def test_a_client_failed_over_itself_follows_the_fail_back_through_the_service(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    kbear_events: list[_events.Event],
) -> None:
    """Issue #27 item 5 through ``kbear serve`` (no watch of its own): a producer of the
    fleet fails ``A`` over itself; ``A`` back and ``kbear failback --apply`` on the
    served directory: the service's answers carry ``A``'s ``kbear.failover.decided``,
    and the producer comes back to ``A`` at its next refresh, without a restart."""
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    conf = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    reports: dict[bytes, list[Any]] = {}
    values = [f"m-{n:03d}".encode() for n in range(60)]

    def until(producer: RoutedProducer, cluster: str) -> None:
        end = time.monotonic() + 15
        while time.monotonic() < end and producer.route(topic).cluster_id != cluster:
            producer.poll(0.05)

    with EmbeddedMetaService(conf) as service:
        producer = RoutedProducer(
            {
                "kbear.config": service.url,
                "kbear.reload.interval.ms": 200,
                "message.timeout.ms": 30_000,
                "kbear.failover.enable": True,
                "kbear.failover.after.ms": 600,
            },
            on_delivery=lambda err, msg: reports.setdefault(msg.value(), []).append(err),
        )
        try:
            producer.produce(topic, b"warm", b"k")
            assert producer.flush(10) == 0
            a.set_broker_down(-1)
            for value in values[:20]:
                producer.produce(topic, value, b"k")
            until(producer, "B")
            assert producer.route(topic).cluster_id == "B"
            for value in values[20:40]:
                producer.produce(topic, value, b"k")
            a.set_broker_up(-1)
            failback = ["failback", "--config", str(conf), "--cluster", "A", "--apply", "--timeout", "5"]
            assert main(failback) == 0
            until(producer, "A")
            assert producer.route(topic).cluster_id == "A"
            for value in values[40:]:
                producer.produce(topic, value, b"k")
            assert producer.flush(15) == 0
        finally:
            producer.close(5)
            a.set_broker_up(-1)
    assert {v: reports.get(v) for v in values} == {v: [None] for v in values}
    assert [m.value() for m in read_all(b, topic)] == values[:40]  # one key: in order
    assert [m.value() for m in read_all(a, topic) if m.value() != b"warm"] == values[40:]
