"""``kbear.switch.start=translated`` (#27 item 4): a group moved from a cluster to its
MirrorMaker 2 standby starts at its offsets translated through the mirror's
checkpoints and offset syncs (written here by the test replicator between two mock
clusters, in MirrorMaker 2's format), re-reading at most the mirror's sync lag and
skipping nothing; the drain of a dead cluster ends at once; and a fail-back
(#27 item 5) reads what the old cluster held and never mirrored."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _mirror_replicator import Replicator
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import FAST_GROUP, consume_until, end_offsets, read_all, rewrite_rules, rule
from kbear import RoutedConsumer, Router
from kbear.consumer import _translated
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}
Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
PARTITIONS = 2


def write_mirrored(directory: Path, east: EmbeddedCluster, west: EmbeddedCluster, topic: str) -> Path:
    """``east`` mirrored to ``west`` by MirrorMaker 2 (alias ``east``); ``topic`` on east."""
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        {
            "id": "east",
            "meta": {
                "bootstrap.servers": east.bootstrap_servers,
                "kbear.failover.to": "west",
                "kbear.mirror": "mm2",
                "kbear.mirror.source.alias": "east",
            },
        },
        {"id": "west", "meta": {"bootstrap.servers": west.bootstrap_servers}},
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    rewrite_rules(directory, on_east(topic))
    return directory


def on_east(topic: str) -> list[dict[str, Any]]:
    return [rule("global", "use cluster east", isGlobal=True)]


def on_west(topic: str) -> list[dict[str, Any]]:
    # the mirrored copy: <alias>.<topic> (MirrorMaker 2's default replication policy)
    return [rule("move", f"use cluster west, topic east.{topic}", topic=topic), *on_east(topic)]


@pytest.fixture
def mirrored(
    two_clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> Iterator[tuple[str, Path, Router, Replicator]]:
    east, west = two_clusters
    topic = unique("orders")
    east.create_topic(topic, PARTITIONS)
    directory = write_mirrored(tmp_path / "conf", east, west, topic)
    router = Router.from_path(directory)
    replicator = Replicator(east, west, topic, PARTITIONS, skip=0.0, sync_every=5, rng=random.Random(7))
    replicator.create_topics()
    try:
        yield topic, directory, router, replicator
    finally:
        replicator.close()
        router.close()


def produce(cluster: EmbeddedCluster, topic: str, label: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    values = [f"{label}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value, key=f"k{i % 6}".encode())
    assert producer.flush(10) == 0
    return values


def consumer_of(router: Router, closing: Callable[[Any], Any], group: str, **extra: Any) -> RoutedConsumer:
    conf = {
        "group.id": group,
        **FAST_GROUP,
        **NO_WATCH,
        "kbear.switch.drain.idle.ms": 200,
        "kbear.switch.start": "translated",
        **extra,
    }
    return closing(RoutedConsumer(conf, router=router))


def read_some(consumer: RoutedConsumer, count: int) -> list[Any]:
    """Exactly ``count`` messages (or fewer at the time bound), committed."""
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while len(got) < count and time.monotonic() < deadline:
        got.extend(m for m in consumer.consume(count - len(got), 0.1) if m.error() is None)
    consumer.commit(asynchronous=False)
    return got


def read_then_mirror(
    east: EmbeddedCluster, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> tuple[list[bytes], RoutedConsumer, list[Any]]:
    """60 messages produced on east, a consumer of the topic's group that read and
    committed 25 of them there, and every record mirrored (syncs every few records)."""
    topic, _directory, router, replicator = mirrored
    sent = produce(east, topic, "e", 60)
    consumer = consumer_of(router, closing, topic + ".group")
    consumer.subscribe([topic])
    first = read_some(consumer, 25)
    assert len(first) == 25
    replicator.copy()
    return sent, consumer, first


def test_a_group_moved_to_its_mm2_standby_rereads_at_most_the_sync_lag(
    two_clusters: Clusters, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> None:
    topic, directory, router, replicator = mirrored
    sent, consumer, first = read_then_mirror(two_clusters[0], mirrored, closing)

    rewrite_rules(directory, on_west(topic))
    assert router.reload() is True
    rest = consume_until(consumer, len(sent) - len(first), timeout=20)
    deadline = time.monotonic() + 20  # the drain ends (east idle), the group starts on west
    while consumer.routes()[topic].cluster_id != "west" and time.monotonic() < deadline:
        rest += [m for m in consumer.consume(10, 0.1) if m.error() is None]
    assert consumer.routes()[topic].cluster_id == "west"
    rest += consume_until(consumer, 100, timeout=1.5)  # and nothing more than the re-reads
    counts = Counter(m.value() for m in first + rest)
    assert set(counts) == set(sent)  # nothing skipped
    # the drain read east to its end: on west, only re-reads, at most the sync lag per partition
    partition_of = {m.value(): m.partition() for m in first + rest}
    reread = Counter()
    for value, n in counts.items():
        reread[partition_of[value]] += n - 1
    for partition, n in reread.items():
        assert n <= replicator.max_sync_gap(partition), (partition, n, replicator.copied[partition].syncs)


def test_the_drain_of_a_dead_cluster_ends_at_once_and_the_group_starts_at_its_checkpoint(
    two_clusters: Clusters, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> None:
    east, _west = two_clusters
    topic, directory, router, replicator = mirrored
    sent = produce(east, topic, "e", 60)
    group = topic + ".group"
    consumer = consumer_of(router, closing, group, **{"kbear.switch.drain.timeout.ms": 30_000})
    consumer.subscribe([topic])
    first = read_some(consumer, 20)
    assert len(first) == 20
    replicator.copy()
    # MirrorMaker 2 checkpointed the commit (of the partitions read so far; one
    # without a commit has no checkpoint and starts from auto.offset.reset, earliest)
    assert replicator.checkpoint(group)
    more = read_some(consumer, 10)  # read (and committed) after the last checkpoint

    east.set_broker_down(1)
    try:
        # the application keeps polling while east's broker is down (its client sees
        # every broker down), then the operator moves the topic to the standby
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            more += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        moved = time.monotonic()
        rewrite_rules(directory, on_west(topic))
        assert router.reload() is True
        rest: list[Any] = []
        while not rest and time.monotonic() - moved < 25:
            rest += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        # well before kbear.switch.drain.timeout.ms (30 s): the drain ended at once
        assert rest, "nothing read on west"
        assert time.monotonic() - moved < 10
        assert consumer.routes()[topic].cluster_id == "west"
        rest += consume_until(consumer, len(sent), timeout=3)  # everything left, plus re-reads
        counts = Counter(m.value() for m in first + more + rest)
        assert set(counts) == set(sent)  # nothing skipped
        # from the checkpoint: what was read since it is read again, and at most the
        # sync lag before it; nothing further back
        reread = sum(n - 1 for n in counts.values())
        assert reread <= len(more) + sum(replicator.max_sync_gap(p) for p in range(PARTITIONS))
    finally:
        east.set_broker_up(1)


def failed_over(directory: Path, active: bool) -> None:
    """``kbear.failover.active`` set on east (``kbear failover --apply``) or removed
    (``kbear failback --apply``)."""
    path = directory / "clusters.yaml"
    document = yaml.safe_load(path.read_text())
    meta = document["clusters"][0]["meta"]
    if active:
        meta["kbear.failover.active"] = "true"
    else:
        meta.pop("kbear.failover.active", None)
    path.write_text(yaml.safe_dump(document))


@pytest.mark.parametrize("how", ["rules", "failover"])
def test_fail_back_reads_what_the_old_cluster_held_and_loses_nothing(
    two_clusters: Clusters,
    mirrored: tuple[str, Path, Router, Replicator],
    closing: Callable[[Any], Any],
    how: str,
) -> None:
    """#27 item 5: east is lost with messages the mirror never copied; the group goes on
    on west (translated), west receives more; east comes back and the operator moves
    the topic back (an ordinary drain-then-switch move): west is drained, then the
    group reads on east from its committed offsets there, so the messages east held
    and never mirrored are delivered: nothing produced is lost. ``rules``: the moves
    are rule changes (remapped to the copy ``east.<topic>``); ``failover``: ``kbear
    failover`` and ``kbear failback`` (the failover reads and writes the copy itself,
    MirrorMaker 2's default replication policy)."""
    east, west = two_clusters
    topic, directory, router, replicator = mirrored
    before = produce(east, topic, "e", 40)
    consumer = consumer_of(router, closing, topic + ".group")
    consumer.subscribe([topic])
    got = read_some(consumer, 15)
    replicator.copy({p: 12 for p in range(PARTITIONS)})  # the mirror copies a part only
    replicator.checkpoint(topic + ".group")
    never_mirrored = {v for v in before if v not in {m.value() for m in got}} - {
        m.value() for m in read_all(west, replicator.remote)
    }
    assert never_mirrored  # east holds messages west never got

    east.set_broker_down(1)
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            got += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        if how == "rules":
            rewrite_rules(directory, on_west(topic))  # fail over
        else:
            failed_over(directory, True)
        assert router.reload() is True
        during = produce(west, replicator.remote, "w", 20)  # producers write to west meanwhile
        deadline = time.monotonic() + 20
        while not set(during) <= {m.value() for m in got} and time.monotonic() < deadline:
            got += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        assert consumer.routes()[topic].cluster_id == "west"
        assert set(during) <= {m.value() for m in got}
    finally:
        east.set_broker_up(1)

    assert consumer.routes()[topic].topic == replicator.remote
    # east is back: nothing moves until the operator says so, then an ordinary move back
    if how == "rules":
        rewrite_rules(directory, on_east(topic))
    else:
        failed_over(directory, False)
    assert router.reload() is True
    after = produce(east, topic, "back", 10)
    deadline = time.monotonic() + 30
    wanted = set(before) | set(during) | set(after)
    while not wanted <= {m.value() for m in got} and time.monotonic() < deadline:
        got += [m for m in consumer.consume(10, 0.1) if m.error() is None]
    assert consumer.routes()[topic].cluster_id == "east"
    read = {m.value() for m in got}
    assert never_mirrored <= read  # what east held and never mirrored is delivered
    assert wanted - read == set()  # 0 lost


def test_a_member_moving_after_another_starts_from_what_the_group_committed_on_west(
    two_clusters: Clusters, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> None:
    """Members of a group move one by one (each its own failover or reload): a member
    whose partitions the group already read and committed on west starts from those
    commits, not from the older translation (which would read them again)."""
    east, west = two_clusters
    topic, directory, router, replicator = mirrored
    produce(east, topic, "e", 60)
    group = topic + ".group"
    consumer = consumer_of(router, closing, group, **{"kbear.switch.drain.timeout.ms": 30_000})
    consumer.subscribe([topic])
    assert len(read_some(consumer, 20)) == 20
    replicator.copy()
    checkpoints = replicator.checkpoint(group)
    assert checkpoints
    remote = f"east.{topic}"
    ends = end_offsets(west, remote)
    # another member already read further on west and committed there
    ahead = {p: min(c.downstream_offset + 5, ends[p]) for p, c in checkpoints.items()}
    other = Consumer({"bootstrap.servers": west.bootstrap_servers, "group.id": group})
    try:
        other.commit(offsets=[TopicPartition(remote, p, o) for p, o in ahead.items()], asynchronous=False)
    finally:
        other.close()

    east.set_broker_down(1)
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            consumer.consume(10, 0.1)
        rewrite_rules(directory, on_west(topic))
        assert router.reload() is True
        left = sum(end - ahead.get(p, 0) for p, end in ends.items())
        rest: list[Any] = []
        deadline = time.monotonic() + 20
        while len(rest) < left and time.monotonic() < deadline:
            rest += [m for m in consumer.consume(10, 0.1) if m.error() is None]
        assert consumer.routes()[topic].cluster_id == "west"
        read = {p: sorted(m.offset() for m in rest if m.partition() == p) for p in ends}
        # from the commits on west, not the translated checkpoint: nothing read twice, nothing skipped
        assert read == {p: list(range(ahead.get(p, 0), end)) for p, end in ends.items()}
    finally:
        east.set_broker_up(1)


def slow_mirror(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """A mirror slow to read (its bound: 10 s a read): the translated start's read
    sets ``entered``, then waits for ``release`` (20 s at most) before reading."""
    entered, release = threading.Event(), threading.Event()
    real = _translated.read_mirror

    def slow_read_mirror(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(_translated, "read_mirror", slow_read_mirror)
    return entered, release


MANUAL = {"enable.auto.commit": False}


def read_all_then_move(
    east: EmbeddedCluster, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> tuple[list[bytes], RoutedConsumer]:
    """60 messages produced on east, all read and committed there by a member of the
    topic's group (manual commits), mirrored and checkpointed; then the topic is
    moved to west (the member not polled since)."""
    topic, directory, router, replicator = mirrored
    sent = produce(east, topic, "e", 60)
    first = consumer_of(router, closing, topic + ".group", **MANUAL)
    first.subscribe([topic])
    assert len(read_some(first, len(sent))) == len(sent)  # all read and committed on east
    replicator.copy()
    assert replicator.checkpoint(topic + ".group")
    rewrite_rules(directory, on_west(topic))
    assert router.reload() is True
    return sent, first


def joining_rereads(
    mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any], sent: list[bytes]
) -> None:
    """A member of the group started on west after the first closed reads again at
    most the mirror's sync lag per partition, not the 60 mirrored messages."""
    topic, _directory, router, replicator = mirrored
    second = consumer_of(router, closing, topic + ".group", **MANUAL)
    second.subscribe([topic])
    again = consume_until(second, len(sent), timeout=5)
    assert len(again) <= sum(replicator.max_sync_gap(p) for p in range(PARTITIONS)), len(again)


def test_a_member_joining_after_the_move_starts_at_the_translation_not_auto_offset_reset(
    two_clusters: Clusters, mirrored: tuple[str, Path, Router, Replicator], closing: Callable[[Any], Any]
) -> None:
    """The translated start is the group's position on west, not one member's: a
    member that starts on west later (a restart after the failover, a partition
    handed to another member before anything new was read there) starts from it, as
    from MirrorMaker 2's ``sync.group.offsets``, and not from ``auto.offset.reset``
    (which replays the whole mirrored partition): kbear commits the translated start
    of a partition without a committed offset on west."""
    topic = mirrored[0]
    sent, first = read_all_then_move(two_clusters[0], mirrored, closing)
    deadline = time.monotonic() + 20
    while first.routes()[topic].cluster_id != "west" and time.monotonic() < deadline:
        first.consume(10, 0.1)
    assert first.routes()[topic].cluster_id == "west"
    first.consume(100, 1.0)  # the re-reads past the checkpoint (the sync lag), never committed
    first.close()
    joining_rereads(mirrored, closing, sent)


@pytest.mark.parametrize("when", ["reading", "applied"])
def test_a_member_closed_right_after_the_move_still_commits_its_translated_start(
    two_clusters: Clusters,
    mirrored: tuple[str, Path, Router, Replicator],
    closing: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    when: str,
) -> None:
    """A member closed on west right after the move, so that a member starting there
    later does not replay the mirrored partitions from ``auto.offset.reset``:
    ``reading``: while the mirror is still read (a slow mirror, a busy machine), its
    close waits for the translation (as it waits for its background thread) and
    commits it; ``applied``: at once after the translated start was applied, its
    commit sent and not yet answered, the close keeps the commit."""
    caplog.set_level(logging.INFO, logger="kbear.consumer")
    entered, release = slow_mirror(monkeypatch)
    if when == "applied":
        release.set()
    sent, first = read_all_then_move(two_clusters[0], mirrored, closing)

    def reached() -> bool:
        if when == "reading":
            return entered.is_set()
        return any(r.getMessage().startswith("kbear: translated start of") for r in caplog.records)

    deadline = time.monotonic() + 20
    while not reached() and time.monotonic() < deadline:
        first.poll(0.01)
    assert reached()
    threading.Timer(0.5, release.set).start()  # (reading) the read ends while close() runs
    first.close()
    joining_rereads(mirrored, closing, sent)


def test_poll_keeps_its_timeout_while_the_mirror_is_read_and_then_starts_at_the_translation(
    two_clusters: Clusters,
    mirrored: tuple[str, Path, Router, Replicator],
    closing: Callable[[Any], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """#27 "done when": the calls that apply a failover keep their timeout. The
    translated start reads MirrorMaker 2's topics on the standby (180-340 ms on Apache
    Kafka, up to 10 s per read when it is slow): the ``poll(0)`` that serves the new
    cluster's assignment returns at once, the moved partitions wait (nothing read from
    the committed offsets or ``auto.offset.reset`` meanwhile), and once the mirror was
    read the group starts at the translation: nothing skipped, at most the sync lag
    read again."""
    topic, directory, router, replicator = mirrored
    sent, consumer, first = read_then_mirror(two_clusters[0], mirrored, closing)
    group = topic + ".group"
    assert replicator.checkpoint(group)

    entered, release = slow_mirror(monkeypatch)
    rewrite_rules(directory, on_west(topic))
    assert router.reload() is True
    rest: list[Any] = []
    longest = 0.0
    deadline = time.monotonic() + 20  # the drain of east ends (idle), the group joins on west
    while not entered.is_set() and time.monotonic() < deadline:
        began = time.monotonic()
        msg = consumer.poll(0)
        longest = max(longest, time.monotonic() - began)
        if msg is not None and msg.error() is None:
            rest.append(msg)
    assert entered.is_set(), "the translated start was never read"
    assert consumer.routes()[topic].cluster_id == "west"
    while_reading: list[Any] = []
    for _ in range(20):  # the mirror is still being read
        began = time.monotonic()
        msg = consumer.poll(0.05)
        longest = max(longest, time.monotonic() - began)
        if msg is not None and msg.error() is None:
            while_reading.append(msg)
    # generous bound: the call serving the assignment waited the whole read (20 s) before
    assert longest < 5, f"a poll took {longest:.1f} s"
    assert while_reading == []  # the moved partitions wait for their start
    release.set()
    rest += consume_until(consumer, len(sent), timeout=5)
    counts = Counter(m.value() for m in first + rest)
    assert set(counts) == set(sent)  # nothing skipped
    reread = sum(n - 1 for n in counts.values())
    assert reread <= sum(replicator.max_sync_gap(p) for p in range(PARTITIONS))
