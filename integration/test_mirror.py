"""MirrorMaker 2 between the two Apache Kafka clusters (``A`` = east, ``B`` = west):
what it writes on the target is read back and decoded here, the mirrored topic,
the offset syncs and the checkpoints of a group that committed on the source.
Runs on the ``kafka`` backend only (MirrorMaker 2 is a Kafka Connect application)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from integration.backends import RDKAFKA_LOG, BackendUnavailable, admin_client, topic_partitions
from integration.conftest import Harness
from integration.helpers import global_rule, read_topic, topic_rule, values, write_yaml_atomically
from integration.mirror import Checkpoint, MirrorMaker2, OffsetSync, decode_checkpoint, decode_offset_sync

T = TypeVar("T")
MESSAGES = 120
PARTITIONS = 2
#: MirrorMaker 2 starts three connectors and creates its internal topics first: on
#: a busy 2-core machine its first mirrored record has taken up to ~60 s
WAIT_S = 150.0


@pytest.fixture
def mirror_it(it: Harness) -> Harness:
    if it.backend.name != "kafka":
        pytest.skip(f"MirrorMaker 2 runs on the kafka backend only (this is {it.backend.name})")
    return it


def wait_until(what: str, probe: Callable[[], T | None], mm2: MirrorMaker2, timeout_s: float = WAIT_S) -> T:
    """``probe()`` every second until it returns something (bounded); fails with the
    MirrorMaker 2 log's tail when it never does or the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not mm2.alive():
            break
        got = probe()
        if got is not None:
            return got
        time.sleep(1.0)
    tail = mm2.log_path.read_text(errors="replace")[-2000:] if mm2.log_path.is_file() else ""
    pytest.fail(f"{what} not seen within {timeout_s:.0f} s (MirrorMaker 2 alive: {mm2.alive()}); log: {tail}")


def records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of ``topic`` now (empty while the topic does not exist)."""
    if not topic_partitions(bootstrap, topic):
        return []
    ends = admin_client(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "kbear-it-mm2-reader", "enable.auto.commit": False},
        logger=RDKAFKA_LOG,
    )
    try:
        total = 0
        for p in ends:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return [(m.key(), m.value()) for m in read_topic(bootstrap, topic, total, timeout_s=20, grace_s=0)]
    finally:
        consumer.close()


@pytest.fixture
def mm2(mirror_it: Harness, tmp_path: Path) -> Iterator[MirrorMaker2]:
    it = mirror_it
    try:
        mirror = MirrorMaker2(
            it.clusters["A"],
            it.clusters["B"],
            tmp_path / "mm2",
            topics=r"mirrored\..*",
            groups=r"mm2-group\..*",
        )
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield mirror
    finally:
        mirror.close()


@pytest.mark.timeout(400)  # MirrorMaker 2 took ~100 s to mirror its first record on a busy machine
def test_mirrormaker2_mirrors_a_topic_and_checkpoints_a_group(mirror_it: Harness, mm2: MirrorMaker2) -> None:
    it = mirror_it
    topic = it.create_topic(it.name("mirrored"), PARTITIONS, "A")
    east = it.bootstrap("A")
    west = it.bootstrap("B")
    producer = Producer({"bootstrap.servers": east, "linger.ms": 5})
    sent = [f"m-{i}".encode() for i in range(MESSAGES)]
    for i, value in enumerate(sent):
        producer.produce(topic, value, key=f"k{i % 8}".encode())
    assert producer.flush(30) == 0

    # a group reads everything on east and commits (checkpointed by MirrorMaker 2)
    group = it.name("mm2-group")
    consumer = Consumer(
        {
            "bootstrap.servers": east,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **it.backend.consumer_conf,
        },
        logger=RDKAFKA_LOG,
    )
    got: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < MESSAGES and time.monotonic() < deadline:
            got.extend(m for m in consumer.consume(500, 0.2) if m.error() is None)
        committed = consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(values(got)) == sorted(sent)
    ends = {tp.partition: tp.offset for tp in committed or []}
    per_partition = {p: sum(1 for m in got if m.partition() == p) for p in range(PARTITIONS)}
    assert all(n > 0 for n in per_partition.values())  # 8 keys over 2 partitions
    assert ends == per_partition  # the committed offsets: the ends

    # the mirrored topic on west holds what was produced on east, per partition
    remote = mm2.remote_topic(topic)
    mirrored = wait_until(
        f"{remote} with {MESSAGES} records on west",
        lambda: (lambda r: r if len(r) >= MESSAGES else None)(read_topic(west, remote, MESSAGES, 5, 0)),
        mm2,
    )
    # same partition, same offset (the mirrored topic started empty), same key and value
    assert sorted((m.partition(), m.offset(), m.key(), m.value()) for m in mirrored) == sorted(
        (m.partition(), m.offset(), m.key(), m.value()) for m in got
    )

    # offset syncs (on west: offset-syncs.topic.location=target): east offset -> west offset
    def syncs_of_every_partition() -> list[OffsetSync] | None:
        decoded = [decode_offset_sync(k, v) for k, v in records(west, mm2.offset_syncs_topic)]
        mine = [s for s in decoded if s.topic == topic]
        return mine if {s.partition for s in mine} == set(ends) else None

    syncs = wait_until("offset syncs of every partition", syncs_of_every_partition, mm2)
    # the mirrored topic started empty: every record keeps its offset
    assert all(s.upstream_offset == s.downstream_offset < ends[s.partition] for s in syncs), syncs

    # checkpoints (on west, east.checkpoints.internal): the group's east offsets and their translation
    def checkpoints_of_the_commit() -> dict[int, Checkpoint] | None:
        decoded = [decode_checkpoint(k, v) for k, v in records(west, mm2.checkpoints_topic)]
        latest = {c.partition: c for c in decoded if c.group == group}
        done = all(p in latest and latest[p].upstream_offset == n for p, n in ends.items())
        return latest if done else None

    checkpoints = wait_until(f"checkpoints of {group}", checkpoints_of_the_commit, mm2)
    syncs = [decode_offset_sync(k, v) for k, v in records(west, mm2.offset_syncs_topic)]
    for partition, offset in ends.items():
        checkpoint = checkpoints[partition]
        assert checkpoint.topic == remote  # named as on the target
        assert checkpoint.upstream_offset == offset
        assert checkpoint.metadata == ""
        # MirrorMaker 2 translates through a sync at or before the committed offset:
        # its downstream offset, plus one when the sync is for an earlier record
        translations = {
            s.downstream_offset + (s.upstream_offset < offset)
            for s in syncs
            if s.topic == topic and s.partition == partition and s.upstream_offset <= offset
        }
        assert checkpoint.downstream_offset in translations, (checkpoint, translations)
        assert checkpoint.downstream_offset <= offset
    it.note(
        f"MirrorMaker 2: {len(mirrored)} records mirrored, {len(syncs)} offset syncs, checkpoints "
        f"{sorted((c.partition, c.upstream_offset, c.downstream_offset) for c in checkpoints.values())}"
    )


@pytest.mark.timeout(500)  # MirrorMaker 2 takes up to ~100 s to mirror its first record here
def test_a_group_moved_to_the_mirror_with_translated_starts(mirror_it: Harness, mm2: MirrorMaker2) -> None:
    """#27 item 4 on Apache Kafka: a routed consumer group reads part of a topic on
    east, MirrorMaker 2 mirrors and checkpoints it, the rules move the topic to its
    mirrored copy on west (``east.<topic>``) and the group goes on there from its
    translated offsets: nothing skipped, re-reads bounded by the mirror's sync lag."""
    it = mirror_it
    topic = it.create_topic(it.name("mirrored"), PARTITIONS, "A")
    remote = mm2.remote_topic(topic)
    group = it.name("mm2-group")
    config = it.config([global_rule("east")], {"east": it.bootstrap("A")})
    write_yaml_atomically(
        config.path / "clusters.yaml",
        {
            "clusters": [
                {
                    "id": "east",
                    "meta": {
                        "bootstrap.servers": it.bootstrap("A"),
                        "kbear.failover.to": "west",
                        "kbear.mirror": "mm2",
                        "kbear.mirror.source.alias": mm2.aliases[0],
                    },
                },
                {"id": "west", "meta": {"bootstrap.servers": it.bootstrap("B")}},
            ]
        },
    )
    producer = Producer({"bootstrap.servers": it.bootstrap("A"), "linger.ms": 5})
    sent = [f"t-{i}".encode() for i in range(MESSAGES)]
    for i, value in enumerate(sent):
        producer.produce(topic, value, key=f"k{i % 8}".encode())
    assert producer.flush(30) == 0

    consumer = it.consumer(
        config,
        group,
        **{
            "kbear.switch.start": "translated",
            "kbear.switch.drain.idle.ms": 500,
            "enable.auto.commit": False,
        },
    )
    consumer.subscribe([topic])
    first: list[Message] = []
    deadline = time.monotonic() + 60
    while len(first) < MESSAGES // 2 and time.monotonic() < deadline:
        first.extend(m for m in consumer.consume(MESSAGES // 2 - len(first), 0.2) if m.error() is None)
    consumer.commit(asynchronous=False)
    committed = {p: 0 for p in range(PARTITIONS)}
    for m in first:
        committed[m.partition()] = max(committed[m.partition()], m.offset() + 1)

    # MirrorMaker 2 mirrored everything and checkpointed the commit (the consumer keeps polling)
    def mirrored_and_checkpointed() -> bool | None:
        consumer.consume(10, 0.2)  # no more is read: the application pauses, keeps its group membership
        copied = read_topic(it.bootstrap("B"), remote, MESSAGES, 5, 0)
        cps = [decode_checkpoint(k, v) for k, v in records(it.bootstrap("B"), mm2.checkpoints_topic)]
        latest = {c.partition: c.upstream_offset for c in cps if c.group == group}
        done = len(copied) >= MESSAGES and all(latest.get(p) == o for p, o in committed.items() if o)
        return True if done else None

    consumer.pause(consumer.assignment())
    wait_until("the topic mirrored and the group checkpointed", mirrored_and_checkpointed, mm2)
    consumer.resume(consumer.assignment())

    config.write_rules([topic_rule(topic, "west", physical=remote, rule_id="move"), global_rule("east")])
    rest: list[Message] = []
    assert consumer.router.reload()  # no watcher here (reload_ms=0): reload by hand
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        consumer.routes()[topic].cluster_id != "west" or len({m.value() for m in first + rest}) < MESSAGES
    ):
        rest.extend(m for m in consumer.consume(100, 0.2) if m.error() is None)
    rest.extend(m for m in consumer.consume(MESSAGES, 2.0) if m.error() is None)
    assert consumer.routes()[topic].cluster_id == "west"
    counts = Counter(m.value() for m in first + rest)
    assert set(counts) == set(sent)  # nothing skipped
    # re-reads: at most what lies past the last offset sync of each partition
    syncs = [decode_offset_sync(k, v) for k, v in records(it.bootstrap("B"), mm2.offset_syncs_topic)]
    reader = Consumer({"bootstrap.servers": it.bootstrap("A"), "group.id": "kbear-it-mm2-marks"})
    try:
        ends = {
            p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        reader.close()
    lag = {
        p: ends[p]
        - max((s.upstream_offset for s in syncs if s.topic == topic and s.partition == p), default=0)
        for p in range(PARTITIONS)
    }
    reread = sum(n - 1 for n in counts.values())
    assert reread <= sum(lag.values()), (reread, lag)
    it.note(f"translated start on MirrorMaker 2: {reread} messages read again, sync lag per partition {lag}")
