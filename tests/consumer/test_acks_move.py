"""Message-level acknowledgement through live route moves, and random ack / nack /
crash sequences (property test) on embedded clusters."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conftest import FAST_GROUP, committed_offsets, rewrite_rules, rule
from kbear import RoutedConsumer, Router
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

INDIVIDUAL = {
    **FAST_GROUP,
    "kbear.reload.interval.ms": 0,
    "kbear.ack.mode": "individual",
    "kbear.nack.backoff.min.ms": 50,
    "kbear.nack.backoff.max.ms": 200,
    "kbear.switch.drain.idle.ms": 200,
}


def fill(cluster: EmbeddedCluster, topic: str, values: list[bytes], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(10) == 0


def on(cluster: str) -> list[dict[str, Any]]:
    return [rule("all", f"use cluster {cluster}", isGlobal=True)]


@dataclass
class FiveRead:
    """A consumer (individual acks, drains cut after 1 s) that read a0..a4 on A."""

    c: RoutedConsumer
    got: dict[bytes, Any]  # value -> message
    conf_dir: Path
    router: Router
    topic: str
    group: str

    def move_to_b(self) -> None:
        rewrite_rules(self.conf_dir, on("B"))
        assert self.router.reload() is True


@pytest.fixture(params=["subscribe", "assign"])
def five_read(
    request: pytest.FixtureRequest,
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> FiveRead:
    """:class:`FiveRead`, the topic subscribed to or assigned manually (both ways in move)."""
    a, b = two_clusters
    topic, group = unique("t"), unique("g")
    a.create_topic(topic, 1)
    b.create_topic(topic, 1)
    conf_dir = make_config(on("A"))
    router = Router.from_path(conf_dir)
    closing(router)
    c = closing(
        RoutedConsumer(
            {"group.id": group, **INDIVIDUAL, "kbear.switch.drain.timeout.ms": 1000}, router=router
        )
    )
    if request.param == "subscribe":
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    fill(a, topic, [f"a{i}".encode() for i in range(5)])
    got: dict[bytes, Any] = {}
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got[m.value()] = m
    assert len(got) == 5
    return FiveRead(c, got, conf_dir, router, topic, group)


def test_unacked_message_of_the_old_cluster_is_redelivered_after_the_move(
    two_clusters: Clusters, five_read: FiveRead
) -> None:
    """a1 nacked, a3 held beyond the drain timeout: a1 comes again during the move, A's
    committed offset stays before a3, and a3 is redelivered from memory after it."""
    a, b = two_clusters
    c, got, topic, group = five_read.c, five_read.got, five_read.topic, five_read.group
    for value, m in got.items():
        if value == b"a1":
            c.nack(m)  # redelivered from memory during the move
        elif value != b"a3":  # a3: held unacknowledged beyond the drain timeout
            c.ack(m)
    five_read.move_to_b()
    fill(b, topic, [b"b0", b"b1"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while (c.routes()[topic].cluster_id != "B" or len(seen) < 3) and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            seen.append(m.value())
            c.ack(m)
    assert c.routes()[topic].cluster_id == "B"
    assert sorted(seen) == [b"a1", b"b0", b"b1"]
    # a3 was read on A and never acknowledged: A's committed offset stays before it
    assert committed_offsets(a, group, topic) == {0: 3}
    # ... and it is still redelivered after the move, from memory
    c.nack(got[b"a3"])
    m = None
    deadline = time.monotonic() + 5
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.1)
    assert m is not None and m.value() == b"a3"
    c.ack(m)
    for _ in range(5):
        c.poll(0.1)
    # the commit of the prefix on the old cluster after the move is best effort: the
    # mock refuses it (UNKNOWN_MEMBER_ID) while the group lingers there
    assert committed_offsets(a, group, topic)[0] in (3, 5)


def test_messages_never_acknowledged_before_a_cut_drain_are_read_again_after_a_restart(
    two_clusters: Clusters, five_read: FiveRead
) -> None:
    """Five messages read on A, none acknowledged, and the topic moves to B (the drain
    cut by its timeout): the group's committed offset on A stays before them, so that
    a consumer of the group on A after a restart reads them again."""
    a, _ = two_clusters
    c, topic = five_read.c, five_read.topic
    five_read.move_to_b()
    deadline = time.monotonic() + 10
    while c.routes()[topic].cluster_id != "B" and time.monotonic() < deadline:
        c.poll(0.1)
    assert c.routes()[topic].cluster_id == "B"
    for _ in range(5):  # the commits sent as the topic left A are answered
        c.poll(0.1)
    c.close()  # the restart
    assert committed_offsets(a, five_read.group, topic)[0] in (0, OFFSET_INVALID)


@given(st.lists(st.sampled_from(["ack", "ack", "nack", "skip", "commit", "crash"]), min_size=4, max_size=16))
@settings(
    max_examples=20,
    deadline=None,
    phases=[Phase.generate],  # no shrinking: each example runs consumers on a cluster
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_random_ack_nack_crash_sequences_lose_nothing(
    two_clusters: Clusters,
    make_router: Callable[..., Router],
    unique: Callable[[str], str],
    actions: list[str],
) -> None:
    """Each action applies to the next message delivered: ``ack``, ``nack``, ``skip``
    (left unacknowledged), ``commit`` (``commit()``: the acknowledged prefix),
    ``crash`` (the consumer goes away without committing: auto-commit is off, so
    whatever it did not commit is read again by its successor). After every commit
    the group's committed offset is never past an unacknowledged message; at the
    end a last consumer acks what comes, and every message was acknowledged."""
    a, _ = two_clusters
    router = make_router(on("A"))
    topic, group = unique("p"), unique("pg")
    a.create_topic(topic, 1)
    # more messages than actions: every action finds a message (skips and commits
    # take one each and nothing brings them back within a consumer)
    values = [f"m{i}".encode() for i in range(20)]
    fill(a, topic, values)
    acked: set[int] = set()

    def consumer() -> RoutedConsumer:
        c = RoutedConsumer({"group.id": group, **INDIVIDUAL, "enable.auto.commit": False}, router=router)
        c.subscribe([topic])
        return c

    def commit(c: RoutedConsumer) -> bool:
        try:
            c.commit(asynchronous=False)
        except KafkaException as exc:  # nothing acknowledged yet: nothing stored (as confluent-kafka)
            assert exc.args[0].code() == KafkaError._NO_OFFSET
            return False
        return True

    def check_committed() -> None:
        committed = committed_offsets(a, group, topic).get(0, -1)
        assert all(o in acked for o in range(max(committed, 0))), (committed, acked)

    c = consumer()
    skipped: list[Any] = []
    try:
        for action in actions:
            m = None
            deadline = time.monotonic() + 5
            while m is None and time.monotonic() < deadline:
                m = c.poll(0.05)
                if m is not None and m.error() is not None:
                    m = None
            assert m is not None  # nothing is lost: there is always something to read
            if action == "ack":
                c.ack(m)
                acked.add(m.offset())
            elif action == "nack":
                c.nack(m)
            elif action == "skip":
                skipped.append(m)
            elif action == "commit":  # the message taken stays unacknowledged
                skipped.append(m)
                commit(c)
                check_committed()
            elif action == "crash":
                c.close()  # auto-commit off: nothing more is committed
                check_committed()
                c = consumer()
                skipped = []
        # the last consumer acks the messages it left unacknowledged, then whatever
        # comes, until the group committed the end
        for m in skipped:
            c.ack(m)
            acked.add(m.offset())
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                c.ack(m)
                acked.add(m.offset())
            elif m is None and commit(c) and committed_offsets(a, group, topic) == {0: len(values)}:
                break
        assert acked == set(range(len(values)))
        assert committed_offsets(a, group, topic) == {0: len(values)}
    finally:
        c.close()
