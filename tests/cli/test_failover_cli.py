"""``kbear failover`` / ``kbear failback`` (issue #27 item 2b), end to end on embedded
clusters: plan, --apply writing clusters.yaml, a running producer following at its
reload and losing nothing, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import read_all, rule, write_standby_config
from kbear import RoutedProducer, Router, _events
from kbear.cli import main
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main([*args, "--json", "--timeout", "2"])
    return code, json.loads(capsys.readouterr().out)


def test_operator_fails_over_and_back(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    kbear_events: list[_events.Event],
) -> None:
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    conf = write_standby_config(
        tmp_path / "conf", native_clusters, [rule("all", "use cluster A", isGlobal=True)]
    )
    original = (conf / "clusters.yaml").read_text()
    router = Router.from_path(conf)
    reports: dict[bytes, list[Any]] = {}
    producer = RoutedProducer(
        {"kbear.reload.interval.ms": 0, "message.timeout.ms": 30_000},
        router=router,
        on_delivery=lambda err, msg: reports.setdefault(msg.value(), []).append(err),
    )
    try:
        producer.produce(topic, b"warm")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        stuck = [f"stuck-{i}".encode() for i in range(40)]
        for value in stuck:
            producer.produce(topic, value, b"k")
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # the application polls: A's client reports its brokers down
            producer.poll(0.05)

        # the plan: ready (B answers), nothing written
        code, plan = run_cli(capsys, "failover", "--config", str(conf), "--cluster", "A")
        assert code == 0 and plan["ready"] and not plan["applied"] and not plan["done"]
        assert plan["standby"] == "B" and plan["rules"] == ["all"]
        assert plan["reachable"]["B"] is None and plan["reachable"]["A"] is not None
        assert '+      kbear.failover.active: "true"' in plan["diff"]
        assert (conf / "clusters.yaml").read_text() == original

        # a fail-back now: A does not answer, not ready (and nothing to do anyway: done)
        code, back = run_cli(capsys, "failback", "--config", str(conf), "--cluster", "A")
        assert code == 0 and back["done"]

        code, applied = run_cli(capsys, "failover", "--config", str(conf), "--cluster", "A", "--apply")
        assert code == 0 and applied["applied"]
        text = (conf / "clusters.yaml").read_text()
        assert "# the standby" in text and "# the two clusters of the test" in text  # comments kept
        assert router.reload() is True
        started = time.monotonic()
        producer.produce(topic, b"after", b"k")  # applies the change: A's messages taken back
        assert time.monotonic() - started < 2.0  # A's client knows A is down: no drain wait
        assert producer.route(topic).cluster_id == "B"
        assert producer.flush(15) == 0

        # done already
        code, again = run_cli(capsys, "failover", "--config", str(conf), "--cluster", "A")
        assert code == 0 and again["done"] and again["state"] == "failed-over"
        # fail-back while A is down: not ready (1), nothing written
        code, back = run_cli(capsys, "failback", "--config", str(conf), "--cluster", "A", "--apply")
        assert (
            code == 1
            and not back["ready"]
            and not back["applied"]
            and "'A' does not answer" in back["why_not"]
        )
        a.set_broker_up(-1)
        code, back = run_cli(capsys, "failback", "--config", str(conf), "--cluster", "A", "--apply")
        assert code == 0 and back["applied"]
        assert (conf / "clusters.yaml").read_text() == original
        assert router.reload() is True
        producer.produce(topic, b"back", b"k")
        assert producer.route(topic).cluster_id == "A"
        assert producer.flush(15) == 0
    finally:
        producer.close(5)
        a.set_broker_up(-1)
        router.close()
    assert {v: reports.get(v) for v in [*stuck, b"after"]} == {v: [None] for v in [*stuck, b"after"]}
    assert {m.value() for m in read_all(b, topic)} == {*stuck, b"after"}
    assert b"back" in {m.value() for m in read_all(a, topic)}
    failovers = [
        (e.trigger, e.cluster, e.standby, e.back) for e in kbear_events if isinstance(e, _events.FailedOver)
    ]
    assert failovers == [("config", "A", "B", False), ("config", "A", "B", True)]


def test_not_ready_and_errors(
    native_clusters: Clusters, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, b = native_clusters
    conf = write_standby_config(
        tmp_path / "conf", native_clusters, [rule("all", "use cluster A", isGlobal=True)]
    )
    b.set_broker_down(-1)
    try:
        code, plan = run_cli(capsys, "failover", "--config", str(conf), "--cluster", "A", "--apply")
    finally:
        b.set_broker_up(-1)
    assert code == 1 and not plan["applied"] and "'B' does not answer" in plan["why_not"]
    assert "kbear.failover.active" not in (conf / "clusters.yaml").read_text()
    assert main(["failover", "--config", str(conf), "--cluster", "nope"]) == 2
    assert "no cluster 'nope'" in capsys.readouterr().err
    assert main(["failover", "--config", str(conf), "--cluster", "B"]) == 2
    assert "has no standby" in capsys.readouterr().err
    assert main(["failover", "--config", str(conf)]) == 2  # usage: --cluster is required
