"""#27 on Apache Kafka with MirrorMaker 2: a cluster lost for real (its broker
process killed), the producer failing over itself, the consumer group following the
operator's ``kbear failover`` onto the mirror with translated starts, then the
cluster back on its data and the operator's ``kbear failback``.

Runs on the ``kafka`` backend only (MirrorMaker 2 is a Kafka Connect application,
and the test kills and restarts a broker process). East is a cluster of its own
(``C``, this test's), so the session's clusters stay up; west is ``B``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from integration.backends import Cluster
from integration.conftest import Harness
from integration.helpers import read_topic
from integration.lost_east import declare_failover, mirror_to_west, spare_east
from integration.mirror import MirrorMaker2, decode_checkpoint, decode_offset_sync
from integration.test_mirror import records, wait_until
from kbear import RoutedConsumer, RoutedProducer
from kbear.cli import main as kbear_cli

PARTITIONS = 2
KEYS = 8
#: before the loss (mirrored and read), held by east only (never mirrored), produced
#: while east is lost, produced after the fail-back
MIRRORED, UNMIRRORED, DURING, AFTER = 200, 50, 100, 50


class Delivery:
    def __init__(self) -> None:
        self.ok: list[bytes] = []
        self.failed: list[bytes] = []

    def __call__(self, err: Any, msg: Any) -> None:
        (self.ok if err is None else self.failed).append(msg.value())


def produce(
    producer: RoutedProducer, topic: str, label: str, n: int, rate: float, also: Any = None
) -> list[bytes]:
    """``n`` keyed messages at ``rate`` per second, the producer (and ``also``) polled between."""
    sent = []
    started = time.monotonic()
    for i in range(n):
        value = f"{label}-{i:04d}-k{i % KEYS}".encode()
        producer.produce(topic, value, key=f"k{i % KEYS}".encode())
        sent.append(value)
        while time.monotonic() - started < (i + 1) / rate:
            producer.poll(0.01)
            if also is not None:
                also()
    return sent


@pytest.fixture
def east(it: Harness) -> Cluster:
    return spare_east(it)


@pytest.mark.timeout(600)  # MirrorMaker 2 takes up to ~100 s to mirror its first record on a busy machine
def test_failover_to_the_mirror_and_failback_lose_nothing(
    it: Harness, east: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kbear")  # the translated starts, shown when an assertion fails
    topic = it.name("orders")
    group = it.name("mm2-failover")
    with mirror_to_west(it, east, [topic], tmp_path / "mm2", groups=group, partitions=PARTITIONS) as mm2:
        _scenario(it, east, mm2, topic, group, caplog)


def _scenario(
    it: Harness, east: Cluster, mm2: MirrorMaker2, topic: str, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = declare_failover(it, east)
    delivery = Delivery()
    producer_conf = {"on_delivery": delivery, "kbear.failover.enable": True, "kbear.failover.after.ms": 2000}
    producer = it.producer(config, reload_ms=500, **producer_conf)
    consumers: list[RoutedConsumer] = [
        it.consumer(
            config,
            group,
            reload_ms=500,
            **{"group.protocol": "consumer", "kbear.switch.start": "translated", "enable.auto.commit": False},
        )
        for _ in range(2)
    ]
    read: list[tuple[str, bytes]] = []  # (where it was read: the route's cluster, value)
    ends = dict.fromkeys(range(PARTITIONS), 0)  # the group's offsets on east before the loss

    east_down = False

    def poll() -> None:
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                where = c.routes()[topic].cluster_id
                read.append((where, m.value()))
                if not read[-1][1].startswith(b"during"):
                    ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
                if where == "west" or not east_down:
                    # each message committed once read: a partition handed to the other
                    # member in a rebalance goes on from there (a commit left to a
                    # rebalance callback may be refused, and then its reads repeat)
                    with contextlib.suppress(KafkaException):
                        c.commit(message=m, asynchronous=False)

    def read_until(values: set[bytes], what: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not values <= {v for _, v in read}:
            poll()
        missing = values - {v for _, v in read}
        assert not missing, f"{what}: {len(missing)} not read, e.g. {sorted(missing)[:3]}"

    for c in consumers:
        c.subscribe([topic])

    # 1. east serves; MirrorMaker 2 mirrors it to west and checkpoints the group's commits
    mirrored = produce(producer, topic, "mirrored", MIRRORED, 200.0, poll)
    assert producer.flush(30) == 0
    read_until(set(mirrored), "before the loss")  # and committed, message by message
    assert {w for w, _ in read} == {"east"} and sum(ends.values()) == MIRRORED
    before = dict(ends)

    def checkpointed() -> bool | None:
        for c in consumers:
            c.poll(0.05)  # nothing more to read: the group keeps its membership
        copied = read_topic(it.bootstrap("B"), topic, MIRRORED, 5, 0)
        latest = {}
        for k, v in records(it.bootstrap("B"), mm2.checkpoints_topic):
            cp = decode_checkpoint(k, v)
            if cp.group == group:
                latest[cp.partition] = (cp.upstream_offset, cp.downstream_offset)
        # the checkpoint's translation as fresh as the offset syncs allow: a checkpoint
        # made before MirrorMaker 2 read its last sync translates through an older one
        # (further back), and the bound below is the newest sync's
        syncs = [decode_offset_sync(k, v) for k, v in records(it.bootstrap("B"), mm2.offset_syncs_topic)]
        fresh = {}
        for p, n in before.items():
            near = [s for s in syncs if s.topic == topic and s.partition == p and s.upstream_offset <= n]
            if near:
                s = max(near, key=lambda s: s.upstream_offset)
                fresh[p] = s.downstream_offset + (1 if n > s.upstream_offset else 0)
        done = len(copied) >= MIRRORED and all(
            latest.get(p, (-1, -1))[0] == n and latest[p][1] >= fresh.get(p, 0)
            for p, n in before.items()
            if n
        )
        return True if done else None

    wait_until("the topic mirrored and the group's commits checkpointed", checkpointed, mm2)

    # 2. the mirror stops; east takes messages it never mirrors (the group does not read them yet)
    mm2.close()
    for c in consumers:
        c.pause(c.assignment())
    unmirrored = produce(producer, topic, "unmirrored", UNMIRRORED, 500.0)
    assert producer.flush(30) == 0

    # 3. east's broker process is killed; the producer fails over itself, the operator
    #    moves the consumers (kbear failover --apply), which start where the mirror says
    east.kill()
    east_down = True
    lost_at = time.monotonic()
    for c in consumers:
        c.resume(c.assignment())
    during = produce(producer, topic, "during", DURING, 50.0, poll)
    deadline = time.monotonic() + 30  # kbear.failover.after.ms after librdkafka saw every broker down
    while producer.route(topic).cluster_id != "west" and time.monotonic() < deadline:
        producer.poll(0.1)
        poll()
    assert producer.route(topic).cluster_id == "west", "the producer did not fail over"
    failed_over_s = time.monotonic() - lost_at
    assert kbear_cli(["failover", "--config", str(config), "--cluster", "east", "--apply"]) == 0
    assert producer.flush(30) == 0
    read_until(set(during), "while east is lost")
    all_read_on_west_s = time.monotonic() - lost_at
    assert {c.routes()[topic].cluster_id for c in consumers} == {"west"}

    # 4. east comes back on its data; the operator fails back (kbear failback --apply):
    #    the producer that failed over itself follows at its next reload (no restart)
    east.start()
    east_down = False
    assert kbear_cli(["failback", "--config", str(config), "--cluster", "east", "--apply"]) == 0
    deadline = time.monotonic() + 30
    while producer.route(topic).cluster_id != "east" and time.monotonic() < deadline:
        producer.poll(0.1)
        poll()
    assert producer.route(topic).cluster_id == "east", "the producer did not follow the fail-back"
    after = produce(producer, topic, "after", AFTER, 100.0, poll)
    assert producer.flush(30) == 0
    read_until(set(unmirrored) | set(after), "after the fail-back")
    assert {c.routes()[topic].cluster_id for c in consumers} == {"east"}

    # nothing reported delivered is lost; every message is read; what east held and
    # never mirrored is read once, on east after the fail-back
    sent = mirrored + unmirrored + during + after
    assert delivery.failed == []
    assert sorted(delivery.ok) == sorted(sent)
    on_east = {m.value() for m in read_topic(east.bootstrap_servers, topic, MIRRORED + UNMIRRORED + AFTER)}
    on_west = [
        m.value()
        for m in sorted(
            read_topic(it.bootstrap("B"), topic, MIRRORED + DURING), key=lambda m: (m.partition(), m.offset())
        )
    ]
    assert set(sent) <= on_east | set(on_west)
    assert not set(unmirrored) & set(on_west)
    counts = Counter(v for _, v in read)
    assert set(counts) == set(sent)
    assert {counts[v] for v in unmirrored} == {1}
    assert {w for w, v in read if v in set(unmirrored)} == {"east"}
    # read again: only mirrored messages (read on east before the loss); on west, from the
    # translated starts, at most the mirror's sync lag per partition (the records past its
    # last offset sync)
    assert {v for v, n in counts.items() if n > 1} <= set(mirrored)
    syncs = [decode_offset_sync(k, v) for k, v in records(it.bootstrap("B"), mm2.offset_syncs_topic)]
    lag = sum(
        n - max((s.upstream_offset for s in syncs if s.topic == topic and s.partition == p), default=0)
        for p, n in before.items()
    )
    again_on_west = sum(1 for w, v in read if w == "west" and v in set(mirrored))
    starts = [r.getMessage() for r in caplog.records if "starts on cluster" in r.getMessage()]
    reads = Counter((w, v.split(b"-")[0]) for w, v in read)
    assert again_on_west <= lag, (again_on_west, lag, sorted(reads.items()), starts)
    # per key, west holds the messages in the order they were produced
    by_key: dict[bytes, list[bytes]] = {}
    for value in on_west:
        by_key.setdefault(value.rsplit(b"-", 1)[1], []).append(value)
    assert all(vs == sorted(vs, key=sent.index) for vs in by_key.values())
    it.note(
        f"failover to MirrorMaker 2's copy: producer on west {failed_over_s:.1f} s after the kill, "
        f"all read on west {all_read_on_west_s:.1f} s after the kill, {again_on_west} read again there "
        f"(sync lag {lag}), {len(unmirrored)} unmirrored read once after the fail-back "
        f"(followed by the producer that failed over itself, without a restart)"
    )
