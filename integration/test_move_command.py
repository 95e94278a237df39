"""``kbear move`` against real brokers: the plan finds a missing topic and a
partition-count mismatch (exit 1), ``--create`` fixes both (source's partitions and
configuration), ``--apply`` moves a topic under load with nothing lost and reports
the switch time.

``--create`` needs CreateTopics, CreatePartitions and DescribeConfigs (Apache
Kafka: kafka, docker); ``--apply`` runs on every backend (``tests/admin/test_move.py`` also runs it
on the mock cluster).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic, OffsetSpec, ResourceType

from integration.backends import admin_client, topic_partitions
from integration.conftest import Harness
from integration.helpers import ConfigDir, global_rule
from kbear.cli import main
from kbear.testing import Traffic

ADMIN_BACKENDS = ("docker", "kafka")


def move(conf: ConfigDir, *args: str) -> tuple[int, dict[str, Any]]:
    """Run ``kbear move --json`` in this process; (exit code, the JSON printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["move", "--config", str(conf), "--json", "--request-timeout", "5", *args])
    return code, json.loads(out.getvalue())


def retention(it: Harness, cluster: str, topic: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = admin_client(it.bootstrap(cluster))
    return str(admin.describe_configs([resource])[resource].result(20)["retention.ms"].value)


def ends(it: Harness, cluster: str, topic: str) -> int:
    """Sum of the high watermarks of ``topic`` on ``cluster``."""
    admin = admin_client(it.bootstrap(cluster))
    request = {
        TopicPartition(topic, p): OffsetSpec.latest()
        for p in range(topic_partitions(it.bootstrap(cluster), topic))
    }
    return sum(f.result(20).offset for f in admin.list_offsets(request).values())


def test_plan_finds_a_missing_topic_and_a_partition_mismatch_and_create_fixes_them(it: Harness) -> None:
    if it.backend.name not in ADMIN_BACKENDS:
        pytest.skip(f"the {it.backend.name} backend lacks CreateTopics/DescribeConfigs (BACKENDS.md)")
    missing, short = it.name("missing"), it.name("short")
    source = admin_client(it.bootstrap("A"))
    specs = [NewTopic(t, 3, 1, config={"retention.ms": "3600000"}) for t in (missing, short)]
    for future in source.create_topics(specs, operation_timeout=10).values():
        future.result(20)
    target = admin_client(it.bootstrap("B"))
    target.create_topics([NewTopic(short, 2, 1)], operation_timeout=10)[short].result(20)
    conf = it.config([global_rule("A")])

    code, report = move(conf, "--topic", missing, "--to", "B", "--group", it.name("g"))
    assert code == 1 and not report["plan"]["ready"]
    assert any(f"'{missing}' does not exist on B" in p for p in report["plan"]["problems"])
    assert "use cluster B" in report["plan"]["rule_change"]["diff"]
    code, report = move(conf, "--topic", short, "--to", "B")
    assert code == 1
    assert any("partition count differs: 3 on A, 2 on B" in p for p in report["plan"]["problems"])
    assert any("retention.ms=3600000 on A" in p for p in report["plan"]["problems"])

    for topic in (missing, short):
        code, report = move(conf, "--topic", topic, "--to", "B", "--create")
        assert code == 0, report
        assert report["plan"]["ready"] and report["created"]
        assert topic_partitions(it.bootstrap("B"), topic) == 3
        assert retention(it, "B", topic) == "3600000"
    # nothing written without --apply
    assert "move-" not in (conf.path / "route-rules.yaml").read_text()


def test_apply_moves_a_topic_under_load_with_nothing_lost(it: Harness) -> None:
    topic = it.create_topic(it.name("moving"), 3)
    group = it.name("group")
    conf = it.config([global_rule("A")])
    producer = it.producer(conf, reload_ms=200)
    consumer = it.consumer(conf, group, reload_ms=200)
    consumer.subscribe([topic])
    with Traffic(producer, consumer, topic) as traffic:  # ~400 messages/s
        time.sleep(3)  # load on A, the group reading it
        code, report = move(
            conf,
            "--topic",
            topic,
            "--group",
            group,
            "--to",
            "B",
            "--apply",
            "--stable",
            "3",
            "--timeout",
            "90",
        )
        time.sleep(1)  # some load on B after the switch
    assert code == 0, report
    applied = report["apply"]
    assert applied["switched"] and applied["switch_s"] is not None
    lost, delivered = traffic.lost, traffic.delivered
    assert not lost, f"{len(lost)} of {len(delivered)} delivered messages never consumed"
    assert producer.route(topic).cluster_id == "B"
    assert ends(it, "B", topic) > 0  # the load went on there
    dupes = traffic.duplicates
    it.note(
        f"kbear move --apply: switch {applied['switch_s']} s after the rule write, "
        f"waited {applied['waited_s']} s; "
        f"{len(delivered)} delivered, 0 lost, {dupes} duplicates"
    )
