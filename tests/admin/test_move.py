"""``kbear move`` on embedded clusters: the rule change (text kept, second move edits
the same rule, the new configuration routes every client and group to the target),
the plan (missing topic, partition-count mismatch: exit 1; ready: exit 0), and
``--apply`` moving a topic under load with nothing lost.

The librdkafka mock cluster has no DescribeConfigs or CreateTopics: the plan notes
that the configuration was not compared, and ``--create`` is tested on real
brokers (``integration/test_move_command.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_GROUP, rule
from kbear import RoutedConsumer, RoutedProducer, Router
from kbear.admin._move_rules import plan_rule_change
from kbear.cli import main
from kbear.config import load_config
from kbear.testing import EmbeddedCluster, Traffic

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

RULES = """\
# comments stay
route-rules:
  - id: default   # everything on A
    meta:
      rule.isGlobal: true
    rule: use cluster A
  - id: g-rule
    priority: 2
    meta:
      consumerGroup.groupName: g1
      consumerGroup.topicId: orders
    rule: use cluster A
  - id: uat
    priority: 1
    meta:
      rule.isGlobal: true
    rule: use cluster A when client.env=uat
"""


def move(conf: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["move", "--config", str(conf), "--json", "--request-timeout", "1", *args])
    return code, json.loads(out.getvalue())


def test_the_rule_change_outranks_every_rule_of_the_topic_and_keeps_the_file(
    make_config: Callable[..., Path],
) -> None:
    conf = make_config([])
    (conf / "route-rules.yaml").write_text(RULES)
    config = load_config(conf)
    change = plan_rule_change(config, "orders", "B", None)
    assert change.added and change.priority == 3  # above the group rule's 2
    assert change.new_text.startswith(RULES)  # appended: comments and layout kept
    assert not change.rewritten
    assert '+    rule: "use cluster B"' in change.diff
    after = Router(change.config)
    for group in (None, "g1"):
        assert after.route("orders", group).cluster_id == "B"
        assert after.route("orders", group, client=_uat()).cluster_id == "B"
    assert after.route("payments").cluster_id == "A"  # other topics stay

    # a second move of the same topic edits that rule (remap kept as asked)
    (conf / "route-rules.yaml").write_text(change.new_text)
    again = plan_rule_change(load_config(conf), "orders", "A", "orders.v2")
    assert not again.added and not again.rewritten
    assert again.new_text.count("move-orders") == 1
    assert Router(again.config).route("orders").topic == "orders.v2"
    assert "# comments stay" in again.new_text


def _uat() -> Any:
    from kbear import Client

    return Client("x", {"env": "uat"})


def test_a_file_in_flow_style_is_written_back_whole(make_config: Callable[..., Path]) -> None:
    conf = make_config([])
    (conf / "route-rules.yaml").write_text(
        '{"route-rules": [{"id": "d", "meta": {"rule.isGlobal": true}, "rule": "use cluster A"}]}\n'
    )
    change = plan_rule_change(load_config(conf), "orders", "B", None)
    assert change.rewritten
    assert Router(change.config).route("orders").cluster_id == "B"


def test_plan_reports_missing_topic_and_partition_mismatch(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    a, b = two_clusters
    missing, short, same = unique("missing"), unique("short"), unique("same")
    for topic in (missing, short, same):
        a.create_topic(topic, 3)
    b.create_topic(short, 2)
    b.create_topic(same, 3)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])

    code, report = move(conf, "--topic", missing, "--to", "B", "--group", "g")
    plan = report["plan"]
    assert code == 1 and not plan["ready"]
    assert plan["producer"] == {
        "now": {"cluster": "A", "topic": missing, "rule": "all"},
        "after": {"cluster": "B", "topic": missing, "rule": f"move-{missing}"},
    }
    assert plan["groups"][0]["after"]["cluster"] == "B"
    assert any(f"'{missing}' does not exist on B" in p for p in plan["problems"])

    code, report = move(conf, "--topic", short, "--to", "B")
    assert code == 1
    assert any("partition count differs: 3 on A, 2 on B" in p for p in report["plan"]["problems"])

    code, report = move(conf, "--topic", same, "--to", "B")
    assert code == 0 and report["plan"]["ready"], report
    # the mock has no DescribeConfigs: said, not hidden
    assert any("configuration on A not compared" in n for n in report["plan"]["notes"])
    assert "move-" not in (conf / "route-rules.yaml").read_text()  # a plan writes nothing

    # unknown cluster: a usage error naming the clusters
    assert move_code(conf, "--topic", same, "--to", "C") == 2
    # a topic no rule routes: exit 3, as kbear route
    only_b = make_config([rule("only-b", "use cluster B", topic="b")])
    assert move_code(only_b, "--topic", "x", "--to", "B") == 3


def move_code(conf: Path, *args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(["move", "--config", str(conf), *args])


def test_plan_text_shows_routes_diff_offsets_and_switch_start(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    a, b = two_clusters
    topic = unique("orders")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "move",
                "--config",
                str(conf),
                "--topic",
                topic,
                "--to",
                "B",
                "--group",
                "g",
                "--request-timeout",
                "1",
            ]
        )
    text = out.getvalue()
    assert code == 0
    assert f"producers: A/{topic} (rule all) -> B/{topic} (rule move-{topic})" in text
    assert "+++ route-rules.yaml (after the move)" in text
    assert "kbear.switch.start: committed (default): no committed offsets on B" in text
    assert "ready: yes" in text


def test_plan_reads_each_groups_committed_offsets_and_lag(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    """The plan reads committed offsets with a Consumer that never joins the group
    (librdkafka 2.16's AdminClient.list_consumer_group_offsets crashes on a cluster
    whose coordinator is loading): what the group committed, and its lag."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    a, b = two_clusters
    topic, group = unique("orders"), unique("group")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    with Producer({"bootstrap.servers": a.bootstrap_servers}) as producer:
        for i in range(10):
            producer.produce(topic, b"x", partition=i % 2)
        assert producer.flush(10) == 0
    committer = Consumer({"bootstrap.servers": a.bootstrap_servers, "group.id": group})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        committer.close()
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])

    code, report = move(conf, "--topic", topic, "--to", "B", "--group", group)
    assert code == 0, report
    (planned,) = report["plan"]["groups"]
    assert planned["committed_source"] == {"0": 3, "1": None}
    assert planned["lag_source"] == 2 + 5  # partition 0 from its commit, 1 from its start
    assert planned["committed_target"] == {"0": None, "1": None} and planned["lag_target"] == 0


def test_apply_moves_a_topic_under_load_with_nothing_lost(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    a, b = two_clusters
    topic, group = unique("moving"), unique("group")
    a.create_topic(topic, 3)
    b.create_topic(topic, 3)
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    watch = {"kbear.config": str(conf), "kbear.reload.interval.ms": 200}
    producer = RoutedProducer(watch)
    consumer = RoutedConsumer({**watch, **FAST_GROUP, "group.id": group, "kbear.switch.drain.idle.ms": 500})
    consumer.subscribe([topic])
    traffic = Traffic(producer, consumer, topic, produce_for=60).start()
    try:
        time.sleep(2)
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
            "2",
            "--timeout",
            "60",
        )
        time.sleep(1)
    finally:
        traffic.stop(timeout=60)
        consumer.close()
        producer.close(10)
    assert code == 0, report
    assert report["apply"]["switched"] and report["apply"]["switch_s"] is not None
    assert "move-" in (conf / "route-rules.yaml").read_text()
    assert traffic.delivered and not traffic.lost
    # the project's bound for the consumer protocol (0 seen here)
    assert traffic.duplicates <= len(traffic.delivered) // 100


def test_cluster_reads_are_retried_on_retriable_errors_only() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from kbear.admin._move_state import retried

    calls: list[int] = []

    def flaky(code: int, fail: int) -> str:
        calls.append(code)
        if len(calls) <= fail:
            raise KafkaException(KafkaError(code))
        return "answer"

    assert retried(5.0, flaky, KafkaError._TRANSPORT, 2) == "answer" and len(calls) == 3
    calls.clear()
    # a topic created a moment before: its partitions have no leader yet
    assert retried(5.0, flaky, KafkaError.NOT_LEADER_FOR_PARTITION, 2) == "answer" and len(calls) == 3
    calls.clear()
    with pytest.raises(KafkaException):
        retried(5.0, flaky, KafkaError.TOPIC_AUTHORIZATION_FAILED, 1)
    assert len(calls) == 1


class _NoLeaderYet:
    """A stand-in for RoutedAdminClient on a topic created a moment before: the
    metadata lists it; ListOffsets answers NOT_LEADER_FOR_PARTITION ``failures``
    times, then the watermarks; DescribeConfigs answers nothing to compare."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.offset_calls = 0

    def list_topics(self, **_kw: Any) -> Any:
        from types import SimpleNamespace

        partitions = {p: SimpleNamespace(id=p) for p in range(2)}
        return SimpleNamespace(topics={"t": SimpleNamespace(partitions=partitions, error=None)})

    def list_offsets(self, request: dict[Any, Any], **_kw: Any) -> dict[Any, Any]:
        from concurrent.futures import Future
        from types import SimpleNamespace

        from confluent_kafka import KafkaError, KafkaException

        self.offset_calls += 1
        out: dict[Any, Any] = {}
        for tp, spec in request.items():
            future: Future[Any] = Future()
            if self.offset_calls <= self.failures:
                future.set_exception(KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)))
            else:
                future.set_result(SimpleNamespace(offset=0 if spec._value == -2 else 10 + tp.partition))
            out[tp] = future
        return out

    def describe_configs(self, *_a: Any, **_kw: Any) -> Any:
        raise RuntimeError("no DescribeConfigs here")


def test_the_plan_reads_a_topic_whose_partitions_have_no_leader_yet() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from kbear.admin._move_state import read_topic

    admin = _NoLeaderYet(failures=3)
    state = read_topic(admin, "B", "t", 5.0)  # type: ignore[arg-type]
    assert state.partitions == 2 and state.low == {0: 0, 1: 0} and state.high == {0: 10, 1: 11}
    assert admin.offset_calls == 5  # three refused, then earliest and latest

    # bounded: a leader that never comes gives the error after the timeout
    admin = _NoLeaderYet(failures=10**6)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        read_topic(admin, "B", "t", 1.0)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
    assert 1.0 <= time.monotonic() - started < 5.0 and 3 <= admin.offset_calls < 30


class _Scripted:
    """A stand-in for RoutedAdminClient answering the watch's two calls from a
    script: per observation, the high watermark of partition 0 and the group's
    committed offset there (both on the old cluster)."""

    def __init__(self, script: list[tuple[int, int]]) -> None:
        self.script = script
        self.step = -1

    def list_offsets(self, request: dict[Any, Any], **_kw: Any) -> dict[Any, Any]:
        from types import SimpleNamespace

        from kbear.admin._futures import completed

        (tp, spec), *_ = request.items()
        if spec._value == -2:  # earliest: the first call of an observation
            self.step = min(self.step + 1, len(self.script) - 1)
            return {tp: completed(SimpleNamespace(offset=0))}
        return {tp: completed(SimpleNamespace(offset=self.script[self.step][0]))}

    def committed(
        self, cluster: str, group: str, topic: str, partitions: int, timeout_s: float
    ) -> dict[int, int | None]:
        assert (cluster, group, topic, partitions) == ("A", "g", "t", 1)
        return {0: self.script[self.step][1]}


def _watch(script: list[tuple[int, int]], stable_s: float, timeout_s: float) -> Any:
    from kbear.admin._move_state import TopicState
    from kbear.admin._move_watch import Watched, watch_switch

    now = [100.0]
    source = TopicState("A", "t", 1, {0: 0}, {0: script[0][0]})
    scripted = _Scripted(script)
    return watch_switch(
        scripted,  # type: ignore[arg-type]
        source,
        [Watched("g", "A", "t")],
        written_at=100.0,
        stable_s=stable_s,
        timeout_s=timeout_s,
        interval_s=0.5,
        clock=lambda: now[0],
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        read_committed=scripted.committed,
    )


def test_the_watch_reports_when_the_old_cluster_went_quiet_and_stayed() -> None:
    # producers stop at 1.0 s (end offset 30), the group commits its end at 2.0 s
    script = [(10, 5), (20, 15), (30, 25), (30, 28), (30, 30)] + [(30, 30)] * 20
    result = _watch(script, stable_s=2.0, timeout_s=30)
    assert result.switched and result.switch_s == 2.0
    assert result.produced_after_write == 20 and result.lags == {"g": 0}


def test_the_watch_gives_up_at_its_timeout_while_the_old_cluster_moves() -> None:
    script = [(i * 10, i * 10) for i in range(100)]  # lag 0 but producers still write there
    result = _watch(script, stable_s=1.0, timeout_s=5)
    assert not result.switched and result.switch_s is None and result.waited_s >= 5
