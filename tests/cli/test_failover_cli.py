"""``kbear failover`` / ``kbear failback`` (issue #27 item 2b), end to end on embedded
clusters: plan, --apply writing clusters.yaml, a running producer following at its
reload and losing nothing, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _mirror_replicator import Replicator
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import read_all, rule, write_mirror_config, write_standby_config
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

        # a fail-back now: A does not answer, not ready (a fail-back of a cluster that
        # clusters.yaml does not fail over is still a decision: the clients that failed
        # A over themselves would come back)
        code, back = run_cli(capsys, "failback", "--config", str(conf), "--cluster", "A")
        assert (
            code == 1 and not back["done"] and not back["ready"] and "'A' does not answer" in back["why_not"]
        )
        assert "+      kbear.failover.decided: " in back["diff"]

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
        # the key removed, the decision's time written (for the clients that failed
        # over themselves), the rest as it was
        decided = re.compile(r'^      kbear\.failover\.decided: "[0-9T:.-]+Z"\n', re.M)
        assert decided.sub("", (conf / "clusters.yaml").read_text()) == original
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


def test_the_failover_plan_prints_where_each_group_starts_on_the_standby(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """#27 item 4: ``kbear failover`` (the plan) prints, per group and partition, where
    the group starts on the standby (MirrorMaker 2's translation: from the group's
    committed offsets when the cluster answers, from its checkpoints when it is down)
    and how far behind the mirror is."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, 2)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2")
    replicator = Replicator(east, west, topic, 2, remote=topic, skip=0.0, sync_every=3, rng=random.Random(4))
    replicator.create_topics()
    group = topic + ".group"
    try:
        with Producer({"bootstrap.servers": east.bootstrap_servers}) as producer:
            for i in range(40):
                producer.produce(topic, f"m{i}".encode(), partition=i % 2)
            assert producer.flush(10) == 0
        committer = Consumer({"bootstrap.servers": east.bootstrap_servers, "group.id": group})
        committed = [TopicPartition(topic, 0, 12), TopicPartition(topic, 1, 7)]
        committer.commit(offsets=committed, asynchronous=False)
        committer.close()
        replicator.copy({0: 16, 1: 20})  # partition 0: 4 messages of east not mirrored yet
        checkpoints = replicator.checkpoint(group)
        assert set(checkpoints) == {0, 1}

        # east answers: the committed offsets translated through the offset syncs
        args = ["failover", "--config", str(directory), "--cluster", "east"]
        args += ["--group", group, "--topic", topic]
        code = main(args)
        text = capsys.readouterr().out
        assert code == 0, text
        assert f"group '{group}', topic '{topic}' on west as '{topic}': MirrorMaker 2 east -> west" in text
        for p in (0, 1):  # east holds 20 per partition; behind: past the mirror's last offset sync
            behind = 20 - (replicator.copied[p].syncs[-1][0] + 1)
            line = rf"partition {p}: starts at offset \d+ \(.*mirror behind: {behind} message"
            assert re.search(line, text)

        east.set_broker_down(1)
        try:
            code, plan = run_cli(capsys, *args)
        finally:
            east.set_broker_up(1)
    finally:
        replicator.close()
    assert code == 0, plan  # ready: the standby answers
    [entry] = plan["groups"]
    assert (entry["group"], entry["topic"], entry["standby_topic"]) == (group, topic, topic)
    # east down: the checkpoints decide (what MirrorMaker 2 wrote), how far behind is unknown
    starts = {s["partition"]: s for s in entry["starts"]}
    assert {p: (s["offset"], s["decided_by"]) for p, s in starts.items()} == {
        p: (c.downstream_offset, "checkpoint") for p, c in checkpoints.items()
    }
    assert [s["mirror_behind"] for s in starts.values()] == [None, None]


def test_the_failover_plan_under_mm2_s_default_policy_names_the_mirror_s_copies(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under MirrorMaker 2's default replication policy the failover reads and writes
    ``east.T`` on west: the plan translates the group's starts there and says what
    producers do."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, 2)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2", policy="default")
    replicator = Replicator(east, west, topic, 2, skip=0.0, sync_every=3, rng=random.Random(5))
    replicator.create_topics()
    group = topic + ".group"
    try:
        with Producer({"bootstrap.servers": east.bootstrap_servers}) as producer:
            for i in range(20):
                producer.produce(topic, f"m{i}".encode(), partition=i % 2)
            assert producer.flush(10) == 0
        committer = Consumer({"bootstrap.servers": east.bootstrap_servers, "group.id": group})
        committer.commit(
            offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 4)], asynchronous=False
        )
        committer.close()
        replicator.copy()
        checkpoints = replicator.checkpoint(group)
        assert set(checkpoints) == {0, 1}
        args = [
            "failover",
            "--config",
            str(directory),
            "--cluster",
            "east",
            "--group",
            group,
            "--topic",
            topic,
        ]
        east.set_broker_down(1)
        try:
            code, plan = run_cli(capsys, *args)
            text_code = main(args)
            text = capsys.readouterr().out
        finally:
            east.set_broker_up(1)
    finally:
        replicator.close()
    assert code == 0 == text_code, plan
    [entry] = plan["groups"]
    assert entry["standby_topic"] == f"east.{topic}"
    assert entry["mirror"].startswith(f"MirrorMaker 2 east -> west, copy 'east.{topic}'")
    starts = {s["partition"]: (s["offset"], s["decided_by"]) for s in entry["starts"]}
    assert starts == {p: (c.downstream_offset, "checkpoint") for p, c in checkpoints.items()}
    assert "MirrorMaker 2's copies 'east.<topic>' on 'west'" in plan["topics"]
    assert "producers write there too" in plan["topics"]
    assert f"group '{group}', topic '{topic}' on west as 'east.{topic}'" in text
    assert "stop MirrorMaker 2's east -> west flow" in text
