"""A topic moved away from a dead cluster by an ordinary rule change loses nothing
(issue #27 item 3): once the drain of the old cluster times out
(``kbear.switch.drain.timeout.ms``), what its client still holds is taken back
(purged) and sent along the new route, each produce() getting one delivery report,
for its final delivery.

The scenario of the issue on embedded clusters: ``A`` ("east") goes down, messages
are produced, the rule is changed to ``B`` ("west"); checked against what a plain
consumer reads back from ``B``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError
from test_faults import on

from conftest import read_all, rewrite_rules, rule
from kbear import RoutedProducer, Router, _events
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

#: a producer that would wait 20 s for a dead cluster, and gives a move 1 s to drain
CONF = {"message.timeout.ms": 20_000, "kbear.switch.drain.timeout.ms": 1000, "kbear.reload.interval.ms": 0}
KEYS = [f"k{i}".encode() for i in range(8)]


class Reports:
    """Every delivery report, by value."""

    def __init__(self) -> None:
        self.reports: dict[bytes, list[tuple[KafkaError | None, str, int, int]]] = {}

    def delivery(self, err: Any, msg: Any) -> None:
        self.reports.setdefault(msg.value(), []).append((err, msg.topic(), msg.partition(), msg.offset()))


def message(i: int, phase: str) -> tuple[bytes, bytes]:
    """(key, value) of the ``i``-th message of ``phase``; the value carries its order."""
    return KEYS[i % len(KEYS)], f"{phase}-{i:04d}".encode()


@pytest.mark.parametrize("pinned", [False, True], ids=["dispatched", "pinned"])
def test_topic_moved_off_a_dead_cluster_loses_nothing(
    native_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    kbear_events: list[_events.Event],
    pinned: bool,
) -> None:
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    # pinned: one rule for everything (produce() is the cluster's own method);
    # dispatched: a topic rule beside the global one
    before = [rule("all", "use cluster A", isGlobal=True)] if pinned else on("A", topic)
    after = [rule("all", "use cluster B", isGlobal=True)] if pinned else on("B", topic)
    conf_dir = make_config(before)
    router = Router.from_path(conf_dir)
    r = Reports()
    producer = RoutedProducer(CONF, router=router, on_delivery=r.delivery)
    try:
        warm = [message(i, "warm") for i in range(10)]
        for key, value in warm:
            producer.produce(topic, value, key)
        assert producer.flush(10) == 0

        a.set_broker_down(-1)
        stuck = [message(i, "stuck") for i in range(200)]
        stamp = int(time.time() * 1000) - 60_000  # an explicit timestamp, kept
        own = Reports()  # a third of the messages report to a callback of their own
        for n, (key, value) in enumerate(stuck):
            if n % 3 == 0:  # plain: what the delivery report gives back is enough
                producer.produce(topic, value, key)
            elif n % 3 == 1:
                producer.produce(topic, value, key, timestamp=stamp + n, headers=[("n", str(n).encode())])
            else:
                producer.produce(
                    topic,
                    value,
                    key,
                    timestamp=stamp + n,
                    headers={"n": str(n).encode()},
                    callback=own.delivery,
                )

        # flush() and poll() keep their timeouts while the cluster is dead
        for call, timeout in ((producer.flush, 0.5), (producer.poll, 0.3)):
            started = time.monotonic()
            call(timeout)
            assert time.monotonic() - started < timeout + 0.25, call
        assert len(producer) == len(stuck)

        rewrite_rules(conf_dir, after)
        assert router.reload() is True
        later = [message(i, "later") for i in range(50)]
        started = time.monotonic()
        for key, value in later:  # the first call applies the move: drain (1 s), take back
            producer.produce(topic, value, key)
        assert time.monotonic() - started < 1.0 + 2.0
        assert producer.flush(15) == 0
    finally:
        producer.close(5)
        a.set_broker_up(-1)
        router.close()

    # every produce() got exactly one report, a success, to its callback; none showed the purge
    sent = warm + stuck + later
    mine = {v for n, (_, v) in enumerate(stuck) if n % 3 == 2}
    assert set(own.reports) == mine
    r.reports.update(own.reports)
    assert {v: len(r.reports.get(v, [])) for _, v in sent} == {v: 1 for _, v in sent}
    assert [v for _, v in sent if r.reports[v][0][0] is not None] == []
    assert all(rep[0][1] == topic for rep in r.reports.values())

    # the stuck and later messages are on B, once each, where their reports say
    on_b = {m.value(): m for m in read_all(b, topic)}
    assert set(on_b) == {v for _, v in stuck + later}
    for value, m in on_b.items():
        _, _, partition, offset = r.reports[value][0]
        assert (m.partition(), m.offset()) == (partition, offset)
    # same key, headers and timestamp (when given) as produced
    for n, (key, value) in enumerate(stuck):
        m = on_b[value]
        assert m.key() == key
        assert m.headers() == (None if n % 3 == 0 else [("n", str(n).encode())])
        if n % 3:  # (a plain message gets its CreateTime when re-sent)
            assert m.timestamp() == (TIMESTAMP_CREATE_TIME, stamp + n)
    # per key, B holds the messages in the order they were produced (stuck before later)
    for key in KEYS:
        stored = sorted(
            (m for m in on_b.values() if m.key() == key), key=lambda m: (m.partition(), m.offset())
        )
        assert len({m.partition() for m in stored}) == 1
        assert [m.value() for m in stored] == [v for k, v in stuck + later if k == key]

    # counted: 200 taken back from A (queued or in flight), none failed
    resent = [e for e in kbear_events if isinstance(e, _events.MessagesResent)]
    assert [e.cluster for e in resent] == ["A"]
    assert resent[0].queued + resent[0].in_flight == len(stuck)
    assert resent[0].failed == 0


def test_explicit_partition_is_kept(
    native_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
) -> None:
    """A message produced to an explicit partition goes to that partition on the new
    cluster; one without goes where the new cluster's partitioner puts its key."""
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 4)
    conf_dir = make_config(on("A", topic))
    router = Router.from_path(conf_dir)
    r = Reports()
    producer = RoutedProducer(CONF, router=router, on_delivery=r.delivery)
    try:
        producer.produce(topic, b"warm")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        for i in range(20):
            producer.produce(topic, f"p{i % 4}-{i}".encode(), b"same-key", i % 4)
        rewrite_rules(conf_dir, on("B", topic))
        assert router.reload() is True
        producer.poll(0)  # applies the move
        assert producer.flush(15) == 0
    finally:
        producer.close(5)
        a.set_broker_up(-1)
        router.close()
    stored = read_all(b, topic)
    assert len(stored) == 20
    assert all(m.value().startswith(f"p{m.partition()}-".encode()) for m in stored)
    assert all(len(reps) == 1 and reps[0][0] is None for reps in r.reports.values())
