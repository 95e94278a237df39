"""A consumer that fails over a lost cluster itself (issue #27 items 2a and 4):
``kbear.failover.enable``, ``east`` mirrored to its standby ``west`` (MirrorMaker 2's
format, written by the test replicator, identity replication policy: the copy has the
topic's name); ``east``'s broker goes down; after ``kbear.failover.after.ms`` the
consumer reads the topic on ``west``: its drain of ``east`` ends at once (not after
``kbear.switch.drain.timeout.ms``) and the group starts where the mirror says
(``translated``, though ``kbear.switch.start`` is the default ``committed``), skipping
nothing."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _mirror_replicator import Replicator
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from conftest import FAST_GROUP, consume_until, write_mirror_config
from kbear import RoutedConsumer, RoutedProducer, _events
from kbear.cli import main
from kbear.testing import EmbeddedCluster
from tests.consumer.test_translated_start import slow_mirror

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
PARTITIONS = 2
AFTER_MS = 800
LIST_OFFSETS = 2  # the Kafka protocol's API key


def produce(cluster: EmbeddedCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=f"k{i % 6}".encode(), partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def consumer_of(directory: Path, closing: Callable[[Any], Any], group: str) -> RoutedConsumer:
    conf = {
        "group.id": group,
        **FAST_GROUP,
        "kbear.config": str(directory),
        "kbear.reload.interval.ms": 0,
        "kbear.switch.drain.idle.ms": 200,
        "kbear.switch.drain.timeout.ms": 60_000,
        "kbear.failover.enable": True,
        "kbear.failover.after.ms": AFTER_MS,
    }
    return closing(RoutedConsumer(conf))


def read_some(consumer: RoutedConsumer, count: int, spread: bool = False) -> list[Any]:
    """At least ``count`` messages (``spread``: from every partition), or fewer at the
    time bound; committed."""
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while (
        len(got) < count or (spread and len({m.partition() for m in got}) < PARTITIONS)
    ) and time.monotonic() < deadline:
        got.extend(m for m in consumer.consume(max(1, count - len(got)), 0.1) if m.error() is None)
    consumer.commit(asynchronous=False)
    return got


def until_on_west(consumer: RoutedConsumer, topic: str, timeout: float) -> tuple[list[Any], list[Any], float]:
    """consume(10, 0.1) until ``topic`` is read on west and a message came from there;
    returns what was read before the switch (east's, fetched before it went down),
    after it, and the longest call, in seconds."""
    east: list[Any] = []
    west: list[Any] = []
    longest = 0.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = consumer.routes()[topic].cluster_id
        started = time.monotonic()
        batch = [m for m in consumer.consume(10, 0.1) if m.error() is None]
        longest = max(longest, time.monotonic() - started)
        (east if before == "east" and consumer.routes()[topic].cluster_id == "east" else west).extend(batch)
        if consumer.routes()[topic].cluster_id == "west" and west:
            break
    return east, west, longest


def identically_mirrored(
    clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    sent: list[bytes],
) -> tuple[str, Path, RoutedConsumer]:
    """A topic on ``east`` with ``kbear.mirror: identical`` to ``west`` (``sent`` at the
    same offsets on both), its configuration, and a consumer of it subscribed (group
    ``<topic>.group``)."""
    east, west = clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    west.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "identical")
    produce(east, topic, sent)
    produce(west, topic, sent)  # the mirror: same offsets
    consumer = consumer_of(directory, closing, topic + ".group")
    consumer.subscribe([topic])
    return topic, directory, consumer


@pytest.fixture
def east_down(native_clusters: Clusters) -> Iterator[Callable[[], None]]:
    """Takes east's broker down (brought up again at teardown)."""
    east, _west = native_clusters
    downed: list[bool] = []

    def down() -> None:
        east.set_broker_down(1)
        downed.append(True)

    yield down
    if downed:
        east.set_broker_up(1)


def checkpointed_then_lost(
    consumer: RoutedConsumer, replicator: Replicator, topic: str, group: str, east_down: Callable[[], None]
) -> tuple[list[bytes], list[Any], list[Any], list[Any], float, float]:
    """60 messages produced on east; the group reads 20 (committed), the mirror copies
    every record and checkpoints the commit, the group reads 10 more (committed past
    the checkpoint); east goes down and the consumer fails over to west. Returns the
    messages sent, those read before the checkpoint, after it, on west, the seconds
    from the loss to west and the longest ``consume()`` call."""
    sent = [f"e-{i}".encode() for i in range(60)]
    produce(replicator.east, topic, sent)
    consumer.subscribe([topic])
    first = read_some(consumer, 20, spread=True)
    assert len(first) >= 20
    replicator.copy()  # every record mirrored
    assert replicator.checkpoint(group)  # MirrorMaker 2 checkpointed the commit
    more = read_some(consumer, 10)  # read (and committed) after the checkpoint, and below

    east_down()
    lost_at = time.monotonic()
    more_east, rest, longest = until_on_west(consumer, topic, 20)
    assert consumer.routes()[topic].cluster_id == "west", "the consumer did not fail over"
    return sent, first, more + more_east, rest, time.monotonic() - lost_at, longest


def reads_again(
    counts: Counter[Any], first: list[Any], more: list[Any], rest: list[Any], events: list[_events.Event]
) -> str:
    """What a failed re-read bound shows: how many were read again, the mirrored starts,
    and each value read more than once with each read's (phase, partition, offset)."""
    reads = [(phase, m) for phase, ms in (("first", first), ("more", more), ("rest", rest)) for m in ms]
    twice = {
        v: [(ph, m.partition(), m.offset()) for ph, m in reads if m.value() == v]
        for v, n in counts.items()
        if n > 1
    }
    starts = [e for e in events if isinstance(e, _events.MirroredStart)]
    again = sum(n - 1 for n in counts.values())
    return f"{again} read again, {len(more)} after the checkpoint; starts {starts}; reads of each: {twice}"


def test_a_consumer_fails_over_a_lost_cluster_to_its_mm2_standby_at_the_translated_offsets(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
    east_down: Callable[[], None],
) -> None:
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2")
    replicator = Replicator(
        east, west, topic, PARTITIONS, remote=topic, skip=0.0, sync_every=5, rng=random.Random(27)
    )
    replicator.create_topics()
    try:
        group = topic + ".group"
        consumer = consumer_of(directory, closing, group)
        sent, first, more, rest, to_west, longest = checkpointed_then_lost(
            consumer, replicator, topic, group, east_down
        )
        # after kbear.failover.after.ms, well before the drain timeout (60 s): the
        # drain of the lost cluster ended at once
        assert AFTER_MS / 1000 <= to_west < AFTER_MS / 1000 + 8
        assert longest < 0.1 + 0.5  # consume() kept its timeout
        rest += consume_until(consumer, len(sent), timeout=3, batch=10)  # what is left, plus re-reads
    finally:
        replicator.close()

    counts = Counter(m.value() for m in first + more + rest)
    assert set(counts) == set(sent)  # nothing skipped
    # translated from the checkpoint (kbear.switch.start is committed: there are no
    # commits on west, so auto.offset.reset=earliest would read all 60 again)
    reread = sum(n - 1 for n in counts.values())
    assert reread <= len(more) + sum(replicator.max_sync_gap(p) for p in range(PARTITIONS)), reads_again(
        counts, first, more, rest, kbear_events
    )
    failovers = [(e.trigger, e.cluster, e.standby) for e in kbear_events if isinstance(e, _events.FailedOver)]
    assert failovers == [("client", "east", "west")]
    lost = [
        (e.observer, e.cluster, e.lost) for e in kbear_events if isinstance(e, _events.ClusterHealthChanged)
    ]
    assert lost == [("consumer", "east", True)]
    # both partitions started from the checkpoints (the source is down: no offset sync
    # can translate the group's offsets there)
    starts = [e for e in kbear_events if isinstance(e, _events.MirroredStart)]
    assert [(e.cluster, e.source, e.decided_by, e.partitions, e.translated) for e in starts] == [
        ("west", "east", "checkpoint", PARTITIONS, True)
    ]


def test_a_slow_offset_look_up_on_the_standby_does_not_undo_the_translated_start(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
    east_down: Callable[[], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group has no commit on the standby: for a partition assigned at the logical
    default (paused or not) librdkafka looks up ``auto.offset.reset`` (ListOffsets),
    and a seek made while that look-up waits for its reply is undone by the reply
    (500 ms later the partition restarts at the beginning, librdkafka 2.x): the
    translated start's seek then read the whole mirror again. Here the standby
    answers the first ListOffsets after 3 s and the translation is applied within
    them; the partitions waiting for it are assigned at an absolute offset (no
    look-up), so the group starts at the translation."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2")
    replicator = Replicator(
        east, west, topic, PARTITIONS, remote=topic, skip=0.0, sync_every=5, rng=random.Random(27)
    )
    replicator.create_topics()
    entered, release = slow_mirror(monkeypatch)
    try:
        group = topic + ".group"
        consumer = consumer_of(directory, closing, group)
        sent = [f"e-{i}".encode() for i in range(60)]
        produce(east, topic, sent)
        consumer.subscribe([topic])
        first = read_some(consumer, 20, spread=True)
        replicator.copy()
        assert replicator.checkpoint(group)
        more = read_some(consumer, 10)
        west.push_request_rtts(1, LIST_OFFSETS, [3000])  # the standby's next ListOffsets, 3 s late
        east_down()
        # east's, fetched before it went down (west's wait for the translation)
        deadline = time.monotonic() + 20
        while not entered.is_set() and time.monotonic() < deadline:
            more += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        assert entered.is_set(), "the translated start was never read"
        until = time.monotonic() + 0.5  # the member's own offset look-up (if any) is sent
        while time.monotonic() < until:
            more += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        release.set()
        rest = consume_until(consumer, len(sent), timeout=5, batch=10)
        until = time.monotonic() + 4  # a restart at the beginning would come by then
        while time.monotonic() < until:
            rest += [m for m in consumer.consume(100, 0.2) if m.error() is None]
    finally:
        release.set()
        replicator.close()

    counts = Counter(m.value() for m in first + more + rest)
    assert set(counts) == set(sent)  # nothing skipped
    reread = sum(n - 1 for n in counts.values())
    assert reread <= len(more) + sum(replicator.max_sync_gap(p) for p in range(PARTITIONS)), reads_again(
        counts, first, more, rest, kbear_events
    )


def test_a_consumer_fails_over_to_an_identical_mirror_at_the_group_s_offsets_there(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
    east_down: Callable[[], None],
) -> None:
    """``kbear.mirror: identical`` (Cluster Linking and the like: the same records at the
    same offsets, the group's commits synced): the group goes on from its committed
    offsets on the standby."""
    _east, west = native_clusters
    sent = [f"m-{i}".encode() for i in range(40)]
    topic, _directory, consumer = identically_mirrored(native_clusters, tmp_path, unique, closing, sent)
    group = topic + ".group"
    first = read_some(consumer, 16, spread=True)
    # the mirror syncs the group's commits to the standby
    synced = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)
    mirror = Consumer({"bootstrap.servers": west.bootstrap_servers, "group.id": group})
    try:
        mirror.commit(offsets=[tp for tp in synced if tp.offset >= 0], asynchronous=False)
    finally:
        mirror.close()
    more = read_some(consumer, 6)

    east_down()
    more_east, rest, _longest = until_on_west(consumer, topic, 20)
    more += more_east
    assert consumer.routes()[topic].cluster_id == "west", "the consumer did not fail over"
    rest += consume_until(consumer, len(sent), timeout=3, batch=10)
    counts = Counter(m.value() for m in first + more + rest)
    assert set(counts) == set(sent)  # nothing skipped
    assert sum(n - 1 for n in counts.values()) <= len(more)  # from the synced commits, not the start
    # (east was down: its offsets unknown, the fallback is the committed offsets on west)
    starts = [e for e in kbear_events if isinstance(e, _events.MirroredStart)]
    assert [(e.cluster, e.decided_by, e.partitions, e.translated) for e in starts] == [
        ("west", "committed", PARTITIONS, False)
    ]


def test_close_after_a_failover_does_not_wait_for_the_lost_cluster(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    east_down: Callable[[], None],
) -> None:
    """After the consumer failed east over, its client of east (a group member of a
    cluster that does not answer) is closed in the background: close() returns at
    once instead of waiting for east's coordinator (tens of seconds, confluent-kafka's
    own consumer too)."""
    sent = [f"c-{i}".encode() for i in range(20)]
    topic, _directory, consumer = identically_mirrored(native_clusters, tmp_path, unique, closing, sent)
    assert read_some(consumer, 10)
    east_down()
    until_on_west(consumer, topic, 20)
    assert consumer.routes()[topic].cluster_id == "west", "the consumer did not fail over"
    started = time.monotonic()
    consumer.close()
    took = time.monotonic() - started
    assert took <= 2.0, f"close() took {took:.1f} s after the failover"
    with pytest.raises(RuntimeError):
        consumer.poll(0)


def test_a_short_outage_is_not_a_loss(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
) -> None:
    """Hysteresis: east down for less than ``kbear.failover.after.ms`` (here 3 s), then
    back: the consumer stays on east and reads what is produced there."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "identical")
    group = topic + ".group"
    conf = {
        "group.id": group,
        **FAST_GROUP,
        "kbear.config": str(directory),
        "kbear.reload.interval.ms": 0,
        "kbear.failover.enable": True,
        "kbear.failover.after.ms": 3000,
    }
    consumer = closing(RoutedConsumer(conf))
    consumer.subscribe([topic])
    produce(east, topic, [b"before"])
    assert [m.value() for m in consume_until(consumer, 1, timeout=10)] == [b"before"]
    east.set_broker_down(1)
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            consumer.consume(10, 0.1)
    finally:
        east.set_broker_up(1)
    end = time.monotonic() + 4  # past after.ms since the outage began
    while time.monotonic() < end:
        consumer.consume(10, 0.1)
    produce(east, topic, [b"after"])
    assert [m.value() for m in consume_until(consumer, 1, timeout=10)] == [b"after"]
    assert consumer.routes()[topic].cluster_id == "east"
    assert not [e for e in kbear_events if isinstance(e, (_events.FailedOver, _events.ClusterHealthChanged))]


def test_under_mm2_s_default_policy_clients_fail_over_to_the_mirror_s_copy(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
    east_down: Callable[[], None],
) -> None:
    """MirrorMaker 2's default replication policy: ``east``'s topic ``T`` is ``east.T`` on
    ``west``. The failed-over consumer reads ``east.T`` from the translated offsets, and a
    producer failing over writes ``east.T`` too: the group reads ``east``'s messages once
    (plus the mirror's lag) and the new ones, under the topic's own name."""
    east, west = native_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirror_config(tmp_path / "conf", east, west, "mm2", policy="default")
    replicator = Replicator(east, west, topic, PARTITIONS, skip=0.0, sync_every=5, rng=random.Random(28))
    assert replicator.remote == f"east.{topic}"
    replicator.create_topics()
    try:
        group = topic + ".group"
        consumer = consumer_of(directory, closing, group)
        sent, first, more, rest, _to_west, _longest = checkpointed_then_lost(
            consumer, replicator, topic, group, east_down
        )
        assert consumer.routes()[topic].topic == f"east.{topic}"
        rest += consume_until(consumer, len(sent), timeout=3, batch=10)
    finally:
        replicator.close()

    # a producer of the fleet fails over too, and writes the mirror's copy
    reports: list[tuple[str | None, str]] = []
    producer = closing(
        RoutedProducer(
            {
                "kbear.config": str(directory),
                "kbear.reload.interval.ms": 0,
                "kbear.failover.enable": True,
                "kbear.failover.after.ms": AFTER_MS,
                "linger.ms": 0,
            }
        )
    )
    new = [f"w-{i}".encode() for i in range(20)]
    for i, value in enumerate(new):
        producer.produce(
            topic,
            value,
            key=f"k{i % 6}".encode(),
            on_delivery=lambda err, msg: reports.append((None if err is None else str(err), msg.topic())),
        )
    assert producer.flush(20) == 0
    assert reports == [(None, topic)] * len(new)  # reported under the topic's own name
    rest += consume_until(consumer, len(new), timeout=10, batch=10)

    assert {m.topic() for m in first + more + rest} == {topic}
    counts = Counter(m.value() for m in first + more + rest)
    assert set(counts) == set(sent) | set(new)  # nothing skipped, the new writes read
    assert all(counts[v] == 1 for v in new)  # written once, read once
    reread = sum(n - 1 for n in counts.values())
    assert reread <= len(more) + sum(replicator.max_sync_gap(p) for p in range(PARTITIONS)), reads_again(
        counts, first, more, rest, kbear_events
    )
    on_west = Consumer({"bootstrap.servers": west.bootstrap_servers, "group.id": group + ".check"})
    try:
        copy = f"east.{topic}"
        ends = [on_west.get_watermark_offsets(TopicPartition(copy, p), timeout=5)[1] for p in range(2)]
        names = set(on_west.list_topics(timeout=5).topics)
    finally:
        on_west.close()
    assert sum(ends) == len(sent) + len(new)  # the mirrored past and the new writes, one log
    assert topic not in names  # nothing written under the topic's own name on west
    starts = [e for e in kbear_events if isinstance(e, _events.MirroredStart)]
    assert [(e.cluster, e.source, e.decided_by, e.translated) for e in starts] == [
        ("west", "east", "checkpoint", True)
    ]


def read_while(consumer: RoutedConsumer, going: Callable[[list[Any]], bool], timeout: float) -> list[Any]:
    """consume(10, 0.1) while ``going(read so far)``, at most ``timeout`` s; committed."""
    read: list[Any] = []
    end = time.monotonic() + timeout
    while going(read) and time.monotonic() < end:
        read += [m for m in consumer.consume(10, 0.1) if m.error() is None]
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:  # nothing new to commit
            raise
    return read


def test_a_consumer_failed_over_itself_follows_the_operators_failback(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    kbear_events: list[_events.Event],
) -> None:
    """Issue #27 item 5: ``east`` back and ``kbear failback --apply`` (which writes
    ``kbear.failover.decided``): at its reload the consumer reads ``west`` to its end
    (what producers wrote there while failed over), then ``east`` again; no restart."""
    east, west = native_clusters
    mirrored = [f"m-{i}".encode() for i in range(20)]
    topic, directory, consumer = identically_mirrored(native_clusters, tmp_path, unique, closing, mirrored)
    read = read_while(
        consumer, lambda got: len({m.partition() for m in got}) < PARTITIONS or len(got) < 8, 15
    )
    east.set_broker_down(1)
    try:
        read += read_while(consumer, lambda _: consumer.routes()[topic].cluster_id == "east", 20)
        assert consumer.routes()[topic].cluster_id == "west", "the consumer did not fail over"
        on_west = [f"w-{i}".encode() for i in range(20)]  # producers failed over too
        produce(west, topic, on_west)
    finally:
        east.set_broker_up(1)
    on_east = [f"e-{i}".encode() for i in range(20)]  # producers back on east
    produce(east, topic, on_east)
    # east answers again: nothing moves back by itself
    read += read_while(consumer, lambda _: True, 1.5)
    assert consumer.routes()[topic].cluster_id == "west"
    assert not {m.value() for m in read} & set(on_east)

    assert (
        main(["failback", "--config", str(directory), "--cluster", "east", "--apply", "--timeout", "5"]) == 0
    )
    assert consumer.router.reload() is True
    read += read_while(consumer, lambda got: not set(on_east) <= {m.value() for m in got}, 30)
    assert consumer.routes()[topic].cluster_id == "east"
    values = [m.value() for m in read]
    assert set(mirrored + on_west + on_east) <= set(values)  # nothing skipped
    # drain-then-switch: west read to its end before east again
    assert max(values.index(v) for v in on_west) < min(values.index(v) for v in on_east)
    failovers = [(e.trigger, e.cluster, e.back) for e in kbear_events if isinstance(e, _events.FailedOver)]
    assert failovers == [("client", "east", False), ("client", "east", True)]
