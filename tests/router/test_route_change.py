"""Live route changes: rewriting route-rules.yaml moves a topic between clusters
while a RoutedProducer and a RoutedConsumer keep running."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from conftest import (
    FAST_GROUP,
    committed_offsets,
    consume_until,
    drain_more,
    end_offsets,
    message_count,
    plain_producer,
    rewrite_rules,
    rule,
)
from kbear import ConfigError, NoRouteError, Route, RoutedConsumer, RoutedProducer, Router
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]


def on(cluster: str, topic: str, physical: str | None = None) -> list[dict[str, Any]]:
    """Rules: everything on cluster A, except ``topic`` on ``cluster`` (remapped to ``physical``)."""
    statement = f"use cluster {cluster}" + (f", topic {physical}" if physical else "")
    return [
        rule("move", statement, topic=topic),
        rule("global", "use cluster A", isGlobal=True),
    ]


@pytest.fixture
def topic(two_clusters: Clusters, unique: Callable[[str], str]) -> str:
    """A topic with 3 partitions on both clusters."""
    name = unique("moving")
    for cluster in two_clusters:
        cluster.create_topic(name, 3)
    return name


@pytest.fixture
def staying(two_clusters: Clusters, unique: Callable[[str], str]) -> str:
    """A second topic, with 2 partitions on cluster A, that no rule moves."""
    name = unique("staying")
    two_clusters[0].create_topic(name, 2)
    return name


@pytest.fixture
def conf_dir(make_config: Callable[..., Path], topic: str) -> Path:
    return make_config(on("A", topic))


@pytest.fixture
def router(conf_dir: Path) -> Any:
    router = Router.from_path(conf_dir)
    yield router
    router.close()


def move(conf_dir: Path, router: Router, rules: list[dict[str, Any]]) -> None:
    rewrite_rules(conf_dir, rules)
    assert router.reload() is True


@dataclass
class Scene:
    """Clusters A and B, ``topic`` (3 partitions) on both and routed to A by the rules
    in ``conf_dir``; the clients it makes are closed after the test."""

    clusters: Clusters
    conf_dir: Path
    router: Router
    topic: str
    closing: Callable[[Any], Any]

    @property
    def group(self) -> str:
        return self.topic + ".group"

    def producer(self, conf: dict[str, Any] | None = None, **kwargs: Any) -> RoutedProducer:
        """A RoutedProducer on the router; ``conf`` adds to NO_WATCH."""
        producer = RoutedProducer({**NO_WATCH, **(conf or {})}, router=self.router, **kwargs)
        return cast(RoutedProducer, self.closing(producer))

    def consumer(self, **extra: Any) -> RoutedConsumer:
        """A RoutedConsumer of the group ``<topic>.group``; ``extra``: settings by name."""
        return make_consumer(self.router, self.closing, self.group, **extra)

    def subscribed(self, *topics: str, partitions: int = 3, **extra: Any) -> RoutedConsumer:
        """A consumer subscribed to ``topics`` (default: the topic), once assigned ``partitions``."""
        consumer = self.consumer(**extra)
        consumer.subscribe(list(topics) or [self.topic])
        wait_assigned(consumer, partitions)
        return consumer

    def move_to(self, cluster: str, physical: str | None = None) -> None:
        """Route the topic to ``cluster`` (as ``physical`` there, if given) and reload."""
        move(self.conf_dir, self.router, on(cluster, self.topic, physical))


@pytest.fixture
def scene(
    two_clusters: Clusters, conf_dir: Path, router: Router, topic: str, closing: Callable[[Any], Any]
) -> Scene:
    return Scene(two_clusters, conf_dir, router, topic, closing)


KEYS = [f"key{i}".encode() for i in range(12)]


def produce_round(producer: RoutedProducer, topic: str, label: str, per_key: int) -> list[bytes]:
    """``per_key`` messages for each of KEYS, values ``label-key-i``; returns the values."""
    values = []
    for i in range(per_key):
        for key in KEYS:
            value = f"{label}-{key.decode()}-{i}".encode()
            producer.produce(topic, value, key)
            values.append(value)
    return values


# --------------------------------------------------------------------------- producer


def test_single_cluster_producer_follows_a_move_without_loss(scene: Scene) -> None:
    """Every route on A: produce() takes the one-cluster fast path; a reload that moves
    the topic to B still drains A first and sends later messages to B."""
    (a, b), topic = scene.clusters, scene.topic
    reports: list[bytes] = []
    producer = scene.producer({"linger.ms": 2000, "on_delivery": lambda e, m: reports.append(m.value())})
    before = produce_round(producer, topic, "A", 4)
    scene.move_to("B")
    after = produce_round(producer, topic, "B", 3)
    assert producer.flush(10) == 0
    assert message_count(a, topic) == len(before)
    assert message_count(b, topic) == len(after)
    assert Counter(reports) == Counter(before + after)
    assert all(v.startswith(b"A-") for v in reports[: len(before)])
    # and back: the topic returns to A (the configuration proves one cluster again)
    scene.move_to("A")
    again = produce_round(producer, topic, "A2", 1)
    assert producer.flush(10) == 0
    assert message_count(a, topic) == len(before) + len(again)


def test_a_pinned_producer_s_drain_is_logged_without_an_empty_topic_name(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """A producer whose routes are all on one cluster drains every topic at once: its
    log lines say so instead of naming the topic ''."""
    producer, topic = scene.producer(), scene.topic
    produce_round(producer, topic, "A", 1)
    with caplog.at_level(logging.INFO, logger="kbear"):
        scene.move_to("B")
        produce_round(producer, topic, "B", 1)
    assert producer.flush(10) == 0
    drains = [r.getMessage() for r in caplog.records if "drain" in r.getMessage()]
    assert any("draining cluster 'A'" in m for m in drains), drains
    assert not any("topic ''" in m for m in drains), drains


def test_unroutable_topic_still_fails_when_every_rule_names_one_cluster(
    make_config: Callable[..., Path], topic: str, closing: Callable[[Any], Any]
) -> None:
    """Only a topic rule (no global rule): another topic has no route and must not be
    sent to A by the one-cluster fast path."""
    router = Router.from_path(make_config([rule("only", "use cluster A", topic=topic)]))
    producer = closing(RoutedProducer(NO_WATCH, router=router))
    producer.produce(topic, b"v", b"k")
    with pytest.raises(NoRouteError):
        producer.produce(topic + "-other", b"v", b"k")
    assert producer.flush(10) == 0
    router.close()


def test_producer_moves_topic_without_loss(scene: Scene) -> None:
    (a, b), topic = scene.clusters, scene.topic
    reports: list[tuple[Any, str, bytes]] = []
    changes: list[tuple[Route, Route | None]] = []
    # a long linger keeps the first messages in flight when the route changes
    producer = scene.producer(
        {"linger.ms": 2000, "on_delivery": lambda e, m: reports.append((e, m.topic(), m.value()))}
    )
    producer.on_route_change(lambda old, new: changes.append((old, new)))
    before = produce_round(producer, topic, "A", 4)
    assert len(producer) == len(before)
    scene.move_to("B")
    assert changes == []  # applied at the next call, in the caller's thread
    after = produce_round(producer, topic, "B", 3)
    assert producer.flush(10) == 0

    assert message_count(a, topic) == len(before)
    assert message_count(b, topic) == len(after)
    assert [(old.cluster_id, new.cluster_id if new else None) for old, new in changes] == [("A", "B")]
    assert producer.route(topic).cluster_id == "B"
    # every message reported delivered once, and the old cluster's first: the
    # producer drained A before sending the topic to B
    assert all(err is None and t == topic for err, t, _ in reports)
    values = [v for _, _, v in reports]
    assert Counter(values) == Counter(before + after)
    assert all(v.startswith(b"A-") for v in values[: len(before)])


def test_producer_moves_topic_to_a_remapped_topic(scene: Scene) -> None:
    (a, b), topic = scene.clusters, scene.topic
    physical = topic + ".v2"
    b.create_topic(physical, 2)
    reports: list[str] = []
    producer = scene.producer({"on_delivery": lambda e, m: reports.append(m.topic())})
    before = produce_round(producer, topic, "A", 1)
    assert producer.flush(10) == 0
    scene.move_to("B", physical)
    after = produce_round(producer, topic, "B", 2)
    assert producer.flush(10) == 0
    assert message_count(a, topic) == len(before)
    assert message_count(b, physical) == len(after)
    assert message_count(b, topic) == 0
    assert reports == [topic] * (len(before) + len(after))


def test_invalid_reload_keeps_the_old_routes(scene: Scene) -> None:
    (a, b), topic, conf_dir, router = scene.clusters, scene.topic, scene.conf_dir, scene.router
    producer = scene.producer(topics=[topic])
    rewrite_rules(conf_dir, [rule("bad", "use cluster C", topic=topic)])  # no cluster C
    with pytest.raises(ConfigError, match="cluster 'C'"):
        router.reload()
    rewrite_rules(conf_dir, [rule("broken", "use cluster B when", topic=topic)])  # CRRL syntax
    with pytest.raises(ConfigError):
        router.reload()
    sent = produce_round(producer, topic, "A", 1)
    assert producer.flush(10) == 0
    assert producer.route(topic).cluster_id == "A"
    assert message_count(a, topic) == len(sent)
    assert message_count(b, topic) == 0


def test_watcher_picks_up_the_change(
    two_clusters: Clusters, conf_dir: Path, topic: str, closing: Callable[[Any], Any]
) -> None:
    _a, b = two_clusters
    producer = closing(
        RoutedProducer({"kbear.config": str(conf_dir), "kbear.reload.interval.ms": 50}, topics=[topic])
    )
    assert producer.route(topic).cluster_id == "A"
    rewrite_rules(conf_dir, on("B", topic))
    deadline = time.monotonic() + 10
    while producer.route(topic).cluster_id != "B" and time.monotonic() < deadline:
        producer.poll(0.05)
    assert producer.route(topic).cluster_id == "B"
    sent = produce_round(producer, topic, "B", 1)
    assert producer.flush(10) == 0
    assert message_count(b, topic) == len(sent)


# --------------------------------------------------------------------------- consumer


def make_consumer(router: Router, closing: Callable[[Any], Any], group: str, **extra: Any) -> RoutedConsumer:
    conf = {"group.id": group, **FAST_GROUP, **NO_WATCH, "kbear.switch.drain.idle.ms": 200, **extra}
    return closing(RoutedConsumer(conf, router=router))


def wait_assigned(consumer: RoutedConsumer, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(consumer.assignment()) < count and time.monotonic() < deadline:
        assert consumer.poll(0.05) is None
    assert len(consumer.assignment()) == count


def by_key(messages: list[Any]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for m in messages:
        out.setdefault(m.key(), []).append(m.value())
    return out


def assert_a_then_b(messages: list[Any], on_a: int, on_b: int) -> None:
    """Per key: everything from A (``on_a`` rounds of produce_round), in order, then
    everything from B, in order."""
    for key, values in by_key(messages).items():
        label = key.decode()
        expected = [f"A-{label}-{i}".encode() for i in range(on_a)]
        assert values == expected + [f"B-{label}-{i}".encode() for i in range(on_b)]


def test_consumer_follows_the_move_in_drain_mode(scene: Scene) -> None:
    (a, b), topic, group = scene.clusters, scene.topic, scene.group
    producer = scene.producer()
    consumer = scene.consumer()
    changes: list[tuple[str, str | None]] = []
    consumer.on_route_change(lambda old, new: changes.append((old.cluster_id, new and new.cluster_id)))
    consumer.subscribe([topic])
    wait_assigned(consumer, 3)

    before = produce_round(producer, topic, "A", 5)
    assert producer.flush(10) == 0
    scene.move_to("B")
    after = produce_round(producer, topic, "B", 3)
    assert producer.flush(10) == 0
    assert message_count(a, topic) == len(before)
    assert message_count(b, topic) == len(after)

    first = consumer.poll(0)  # applies the change: the drain starts
    assert consumer.routes()[topic].cluster_id == "A"  # still reading the old cluster
    messages = [] if first is None else [first]
    messages += consume_until(consumer, len(before) + len(after) - len(messages), timeout=20)
    assert Counter(m.value() for m in messages) == Counter(before + after)  # exactly once
    assert drain_more(consumer, 0.3) == []
    assert_a_then_b(messages, 5, 3)
    assert changes == [("A", "B")]
    assert consumer.routes()[topic].cluster_id == "B"
    # what was read on A is committed there, at A's end offsets
    ends = end_offsets(a, topic)
    committed = committed_offsets(a, group, topic)
    assert {p: o for p, o in committed.items() if ends[p]} == {p: e for p, e in ends.items() if e}
    # only B's partitions remain assigned (A's were revoked)
    assert sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == [(topic, p) for p in range(3)]


def test_drain_does_not_wait_for_partitions_with_nothing_to_read(scene: Scene) -> None:
    """Before the move only one partition of A got messages; the other two have
    no position. The drain must end once the consumer is idle at the ends, not
    after kbear.switch.drain.timeout.ms (set here far beyond the test's wait)."""
    a, topic = scene.clusters[0], scene.topic
    producer = scene.producer()
    consumer = scene.subscribed(**{"kbear.switch.drain.timeout.ms": 120_000})
    for i in range(5):
        producer.produce(topic, f"A{i}".encode(), b"one-key")
    assert producer.flush(10) == 0
    assert len(consume_until(consumer, 5)) == 5
    assert sorted(end_offsets(a, topic).values()) == [0, 0, 5]

    scene.move_to("B")
    after = produce_round(producer, topic, "B", 1)
    assert producer.flush(10) == 0
    messages = consume_until(consumer, len(after), timeout=10)
    assert sorted(m.value() for m in messages) == sorted(after)
    assert consumer.routes()[topic].cluster_id == "B"


def test_consumer_switches_at_once_in_immediate_mode(scene: Scene) -> None:
    a, topic, group = scene.clusters[0], scene.topic, scene.group
    producer = scene.producer()
    consumer = scene.subscribed(**{"kbear.switch.mode": "immediate"})
    before = produce_round(producer, topic, "A", 2)
    assert producer.flush(10) == 0
    assert len(consume_until(consumer, len(before))) == len(before)

    scene.move_to("B")
    consumer.poll(0)
    assert consumer.routes()[topic].cluster_id == "B"  # no drain
    # what was read on A was committed at the switch
    ends = end_offsets(a, topic)
    committed = committed_offsets(a, group, topic)
    assert {p: o for p, o in committed.items() if ends[p]} == {p: e for p, e in ends.items() if e}

    # messages written to A after the switch are left behind; B's are read
    late = plain_producer(a)
    late.produce(topic, b"left-behind", b"key0")
    assert late.flush(10) == 0
    after = produce_round(producer, topic, "B", 2)
    assert producer.flush(10) == 0
    messages = consume_until(consumer, len(after))
    assert sorted(m.value() for m in messages) == sorted(after)
    assert drain_more(consumer, 0.3) == []


def test_consumer_moves_one_topic_and_keeps_reading_the_other(scene: Scene, staying: str) -> None:
    """Two topics on A; one moves to B (remapped), the other stays on A."""
    b, topic = scene.clusters[1], scene.topic
    physical = topic + ".on-b"
    b.create_topic(physical, 2)
    producer = scene.producer()
    consumer = scene.consumer()
    revoked: list[str] = []
    consumer.subscribe([topic, staying], on_revoke=lambda c, parts: revoked.extend(tp.topic for tp in parts))
    wait_assigned(consumer, 5)

    sent = produce_round(producer, topic, "A", 1) + produce_round(producer, staying, "S", 1)
    assert producer.flush(10) == 0
    scene.move_to("B", physical)
    sent += produce_round(producer, topic, "B", 1) + produce_round(producer, staying, "T", 1)
    assert producer.flush(10) == 0
    assert message_count(b, physical) == len(KEYS)

    messages = consume_until(consumer, len(sent), timeout=20)
    assert Counter(m.value() for m in messages) == Counter(sent)
    assert {m.topic() for m in messages} == {topic, staying}  # logical names only
    assert drain_more(consumer, 0.3) == []
    assert consumer.routes()[staying].cluster_id == "A"
    assert consumer.routes()[topic].cluster_id == "B"
    assert set(revoked) <= {topic}  # the moved topic's A partitions, under its logical name
    assigned = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
    assert assigned == sorted([(topic, 0), (topic, 1), (staying, 0), (staying, 1)])


def test_topics_that_lose_their_route_are_all_dropped(scene: Scene, unique: Callable[[str], str]) -> None:
    a, topic, conf_dir, router = scene.clusters[0], scene.topic, scene.conf_dir, scene.router
    other = unique("other")
    a.create_topic(other, 2)
    rewrite_rules(
        conf_dir, [rule("t1", "use cluster A", topic=topic), rule("t2", "use cluster A", topic=other)]
    )
    assert router.reload() is True
    consumer = scene.consumer(**{"kbear.switch.mode": "immediate"})
    changes: list[tuple[str, Route | None]] = []
    consumer.on_route_change(lambda old, new: changes.append((old.requested_topic, new)))
    consumer.subscribe([topic, other])
    wait_assigned(consumer, 5)

    move(conf_dir, router, [rule("unrelated", "use cluster B", topic=unique("unrelated"))])
    consumer.poll(0)
    assert consumer.routes() == {}
    assert sorted(changes) == sorted([(topic, None), (other, None)])
    assert drain_more(consumer, 0.3) == []
    assert consumer.assignment() == []


def test_a_raising_route_change_hook_does_not_leave_topics_behind(
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
) -> None:
    """Two topics move at one reload and the first hook call raises: the error is
    logged, and both topics still go to the new cluster."""
    a, b = two_clusters
    x, y = unique("x"), unique("y")
    for cluster in two_clusters:
        for name in (x, y):
            cluster.create_topic(name, 1)
    conf_dir = make_config([rule("global", "use cluster A", isGlobal=True)])
    router = Router.from_path(conf_dir)
    producer = closing(RoutedProducer(NO_WATCH, router=router, topics=[x, y]))
    calls: list[str] = []

    def hook(old: Route, new: Route | None) -> None:
        calls.append(old.requested_topic)
        raise RuntimeError("hook failed")

    producer.on_route_change(hook)
    rewrite_rules(conf_dir, [rule("global", "use cluster B", isGlobal=True)])
    assert router.reload() is True
    producer.produce(x, b"v", b"k")
    assert sorted(calls) == sorted([x, y])
    assert producer.route(x).cluster_id == "B"
    assert producer.route(y).cluster_id == "B"
    producer.produce(y, b"v", b"k")
    assert producer.flush(10) == 0
    assert message_count(b, x) == 1 and message_count(b, y) == 1
    assert message_count(a, x) == 0
    router.close()


def tune_cluster_a(conf_dir: Path, router: Router) -> None:
    """Add a client property to cluster A in clusters.yaml, and reload."""
    clusters = yaml.safe_load((conf_dir / "clusters.yaml").read_text())
    clusters["clusters"][0]["meta"]["fetch.wait.max.ms"] = "50"
    replace_file(conf_dir / "clusters.yaml", yaml.safe_dump(clusters))
    assert router.reload() is True


@pytest.mark.parametrize("mode", ["drain", "immediate"])
def test_consumer_follows_a_change_of_its_clusters_properties(mode: str, scene: Scene, staying: str) -> None:
    """A rotated credential or a tuned property in clusters.yaml changes the route of
    every topic of the cluster at once: both topics go on, nothing lost or doubled."""
    topic = scene.topic
    producer = scene.producer()
    consumer = scene.subscribed(topic, staying, partitions=5, **{"kbear.switch.mode": mode})
    sent = produce_round(producer, topic, "A", 1) + produce_round(producer, staying, "S", 1)
    assert producer.flush(10) == 0

    tune_cluster_a(scene.conf_dir, scene.router)
    sent += produce_round(producer, topic, "B", 1) + produce_round(producer, staying, "T", 1)
    assert producer.flush(10) == 0

    messages = consume_until(consumer, len(sent), timeout=30)
    assert Counter(m.value() for m in messages) == Counter(sent)
    assert drain_more(consumer, 0.5) == []
    for t in (topic, staying):
        assert consumer.routes()[t].properties.get("fetch.wait.max.ms") == "50"
    wait_assigned(consumer, 5)
    assigned = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
    assert assigned == sorted([(topic, 0), (topic, 1), (topic, 2), (staying, 0), (staying, 1)])


def test_a_manual_assignment_survives_a_change_of_its_clusters_properties(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """assign()ed partitions are read on by the rebuilt client from the old one's positions."""
    caplog.set_level("INFO", logger="kbear.consumer")
    topic, producer, consumer = scene.topic, scene.producer(), scene.consumer()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    first = produce_round(producer, topic, "A", 1)
    assert producer.flush(10) == 0
    assert Counter(m.value() for m in consume_until(consumer, len(first))) == Counter(first)

    tune_cluster_a(scene.conf_dir, scene.router)
    second = produce_round(producer, topic, "B", 1)
    assert producer.flush(10) == 0

    assert Counter(m.value() for m in consume_until(consumer, len(second))) == Counter(second)
    assert drain_more(consumer, 0.5) == []
    assert "client of cluster 'A' rebuilt: its properties changed" in caplog.text
    assert sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == [(topic, p) for p in range(3)]


def test_a_manual_assignment_follows_the_move_in_drain_mode(scene: Scene) -> None:
    """assign()ed partitions leave the old cluster once read to its end and are
    assigned on the new one: every message once, per key A's then B's, in order."""
    topic, producer, consumer = scene.topic, scene.producer(), scene.consumer()
    changes: list[tuple[str, str | None]] = []
    consumer.on_route_change(lambda old, new: changes.append((old.cluster_id, new and new.cluster_id)))
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    before = produce_round(producer, topic, "A", 5)
    assert producer.flush(10) == 0
    scene.move_to("B")
    after = produce_round(producer, topic, "B", 3)
    assert producer.flush(10) == 0

    messages = consume_until(consumer, len(before) + len(after), timeout=20)
    assert Counter(m.value() for m in messages) == Counter(before + after)  # exactly once
    assert drain_more(consumer, 0.3) == []
    assert_a_then_b(messages, 5, 3)
    assert changes == [("A", "B")]
    assert consumer.routes()[topic].cluster_id == "B"
    assert sorted((tp.topic, tp.partition) for tp in consumer.assignment()) == [(topic, p) for p in range(3)]


def test_only_the_assigned_partitions_move_in_immediate_mode(scene: Scene) -> None:
    """incremental_assign() of partitions 0 and 2: after an immediate switch the same
    two partitions are read on the new cluster (from the group's committed offsets,
    else auto.offset.reset), and partition 1 is read on neither."""
    topic, producer = scene.topic, scene.producer()
    consumer = scene.consumer(**{"kbear.switch.mode": "immediate"})
    consumer.incremental_assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 2)])

    def produce_each(label: str) -> dict[int, list[bytes]]:
        sent: dict[int, list[bytes]] = {p: [f"{label}-{p}-{i}".encode() for i in range(4)] for p in range(3)}
        for p, values in sent.items():
            for value in values:
                producer.produce(topic, value, partition=p)
        assert producer.flush(10) == 0
        return sent

    on_a = produce_each("A")
    got = consume_until(consumer, 8)
    assert sorted(m.value() for m in got) == sorted(on_a[0] + on_a[2])
    scene.move_to("B")
    assert consumer.poll(0.2) is None  # applies the switch
    assert consumer.routes()[topic].cluster_id == "B"
    on_b = produce_each("B")
    got = consume_until(consumer, 8, timeout=20)
    assert sorted(m.value() for m in got) == sorted(on_b[0] + on_b[2])
    assert drain_more(consumer, 0.3) == []
    assert sorted(tp.partition for tp in consumer.assignment()) == [0, 2]


def test_after_unassign_no_route_is_followed(scene: Scene) -> None:
    topic, consumer = scene.topic, scene.consumer()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    assert set(consumer.routes()) == {topic}
    consumer.unassign()
    assert consumer.routes() == {}
    scene.move_to("B")
    assert consumer.poll(0.3) is None
    assert consumer.assignment() == [] and consumer.routes() == {}
