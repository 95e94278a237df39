"""Message-level acknowledgement through live route moves, and random ack / nack /
crash sequences (property test) on embedded clusters."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
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


def test_unacked_message_of_the_old_cluster_is_redelivered_after_the_move(
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
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
    c.subscribe([topic])
    fill(a, topic, [f"a{i}".encode() for i in range(5)])
    got: dict[bytes, Any] = {}
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got[m.value()] = m
    for value, m in got.items():
        if value == b"a1":
            c.nack(m)  # redelivered from memory during the move
        elif value != b"a3":  # a3: held unacknowledged beyond the drain timeout
            c.ack(m)
    rewrite_rules(conf_dir, on("B"))
    assert router.reload() is True
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
