"""A producer that fails over a lost cluster itself (issue #27 items 2a and 3):
``kbear.failover.enable``, cluster ``A`` with standby ``B``; ``A``'s broker goes down;
after ``kbear.failover.after.ms`` the producer sends A's topics to B, taking back
what A's client held. Checked against what a plain consumer reads from B."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME

from conftest import read_all, rule, write_standby_config
from kbear import RoutedProducer, _events
from kbear.cli import main
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
#: every topic on A
ALL_ON_A = [rule("all", "use cluster A", isGlobal=True)]

AFTER_MS = 600
CONF = {
    "message.timeout.ms": 30_000,
    "kbear.failover.enable": True,
    "kbear.failover.after.ms": AFTER_MS,
    "kbear.reload.interval.ms": 0,
}


def poll_until(producer: RoutedProducer, done: Callable[[], bool], timeout: float) -> float:
    """poll(0.05) until ``done()``; returns the longest poll() call, in seconds."""
    end, longest = time.monotonic() + timeout, 0.0
    while not done() and time.monotonic() < end:
        started = time.monotonic()
        producer.poll(0.05)
        longest = max(longest, time.monotonic() - started)
    return longest


@pytest.mark.parametrize("pinned", [False, True], ids=["dispatched", "pinned"])
def test_producer_fails_over_a_lost_cluster_and_loses_nothing(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    kbear_events: list[_events.Event],
    pinned: bool,
) -> None:
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    rules = (
        ALL_ON_A
        if pinned
        else [rule("t", "use cluster A", topic=topic), rule("all", "use cluster B", isGlobal=True)]
    )
    reports: dict[bytes, list[Any]] = {}

    def delivery(err: Any, msg: Any) -> None:
        reports.setdefault(msg.value(), []).append((err, msg.topic()))

    producer = RoutedProducer(
        {**CONF, "kbear.config": str(write_standby_config(tmp_path / "conf", native_clusters, rules))},
        on_delivery=delivery,
    )
    try:
        producer.produce(topic, b"warm", b"k")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        lost_at = time.monotonic()
        stamp = int(time.time() * 1000) - 60_000
        values = []
        for n in range(90):
            value = f"m-{n:03d}".encode()
            values.append(value)
            if n % 3 == 0:
                producer.produce(topic, value, f"k{n % 5}".encode())
            elif n % 3 == 1:
                producer.produce(
                    topic, value, f"k{n % 5}".encode(), timestamp=stamp + n, headers=[("n", b"1")]
                )
            else:
                producer.produce(topic, value, f"k{n % 5}".encode(), callback=delivery)
            if n % 10 == 0:
                producer.poll(0)
        longest = poll_until(producer, lambda: all(v in reports for v in values), 15)
        delivered_at = time.monotonic()
        assert producer.flush(10) == 0
    finally:
        producer.close(5)
        a.set_broker_up(-1)

    # every produce() got one report, a success; the failover came after after.ms, not much later
    assert {v: len(reports.get(v, [])) for v in values} == {v: 1 for v in values}
    assert [v for v in values if reports[v][0][0] is not None] == []
    assert AFTER_MS / 1000 <= delivered_at - lost_at < AFTER_MS / 1000 + 5
    assert longest < 0.05 + 0.5  # poll() kept its timeout (a take-back runs in one of them)
    on_b = {m.value(): m for m in read_all(b, topic)}
    assert set(on_b) == set(values)
    for n, value in enumerate(values):
        if n % 3 == 1:
            assert on_b[value].timestamp() == (TIMESTAMP_CREATE_TIME, stamp + n)
            assert on_b[value].headers() == [("n", b"1")]
    failovers = [e for e in kbear_events if isinstance(e, _events.FailedOver)]
    assert [(e.trigger, e.cluster, e.standby, e.back) for e in failovers] == [("client", "A", "B", False)]
    lost = [e for e in kbear_events if isinstance(e, _events.ClusterHealthChanged)]
    assert [(e.observer, e.cluster, e.lost) for e in lost] == [("producer", "A", True)]
    resent = [e for e in kbear_events if isinstance(e, _events.MessagesResent)]
    assert sum(e.queued + e.in_flight for e in resent) == len(values) and not any(e.failed for e in resent)


def test_without_any_delivery_callback_messages_produced_once_suspect_are_taken_back(
    native_clusters: Clusters, tmp_path: Path, unique: Callable[[str], str]
) -> None:
    """No on_delivery anywhere: librdkafka drops a purged message's report unless it
    has a callback; once A is suspect (its brokers all down), kbear records every
    message (its CreateTime kept), so flush() ends with all of them on B."""
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    conf_dir = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    producer = RoutedProducer({**CONF, "kbear.config": str(conf_dir)})
    try:
        producer.produce(topic, b"warm")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        poll_until(producer, lambda: False, 0.3)  # serves A's _ALL_BROKERS_DOWN: suspect
        before = int(time.time() * 1000)
        values = [f"m-{n:03d}".encode() for n in range(50)]
        for value in values:
            producer.produce(topic, value)
        after = int(time.time() * 1000)
        started = time.monotonic()
        assert producer.flush(10) == 0  # sliced: the failover happens inside
        assert time.monotonic() - started < 10
    finally:
        producer.close(5)
        a.set_broker_up(-1)
    on_b = {m.value(): m for m in read_all(b, topic)}
    assert set(on_b) == set(values)
    assert all(before <= on_b[v].timestamp()[1] <= after for v in values)


def test_failover_off_reports_the_loss_and_keeps_the_route(
    native_clusters: Clusters, tmp_path: Path, unique: Callable[[str], str], kbear_events: list[_events.Event]
) -> None:
    a, _ = native_clusters
    topic = unique("orders")
    a.create_topic(topic, 1)
    conf_dir = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    producer = RoutedProducer({**CONF, "kbear.failover.enable": False, "kbear.config": str(conf_dir)})
    try:
        producer.produce(topic, b"warm")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        producer.produce(topic, b"stuck")
        started = time.monotonic()
        assert producer.flush(AFTER_MS / 1000 + 1.0) == 1  # flush() keeps its timeout
        assert time.monotonic() - started < AFTER_MS / 1000 + 1.5
        producer.poll(0)
        assert producer.route(topic).cluster_id == "A"
    finally:
        producer.purge()
        producer.close(1)
        a.set_broker_up(-1)
    lost = [e for e in kbear_events if isinstance(e, _events.ClusterHealthChanged)]
    assert [(e.cluster, e.lost) for e in lost] == [("A", True)]
    assert not [e for e in kbear_events if isinstance(e, _events.FailedOver)]


def test_brokers_back_before_after_ms_while_idle_is_no_loss(
    native_clusters: Clusters, tmp_path: Path, unique: Callable[[str], str], kbear_events: list[_events.Event]
) -> None:
    """All of A's brokers down for a moment while the producer is idle (no delivery
    there to tell it A is back): librdkafka's statistics say so, A is not lost."""
    a, _ = native_clusters
    topic = unique("orders")
    a.create_topic(topic, 1)
    conf_dir = write_standby_config(tmp_path / "conf", native_clusters, ALL_ON_A)
    after_s = 3.0  # longer than librdkafka's reconnection (its backoff) takes here
    producer = RoutedProducer(
        {**CONF, "kbear.failover.after.ms": int(after_s * 1000), "kbear.config": str(conf_dir)}
    )
    try:
        producer.produce(topic, b"warm")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        try:
            poll_until(producer, lambda: False, 0.3)  # serves A's _ALL_BROKERS_DOWN
        finally:
            a.set_broker_up(-1)
        poll_until(producer, lambda: False, after_s * 2)
        assert producer.route(topic).cluster_id == "A"
    finally:
        producer.close(5)
    assert not [e for e in kbear_events if isinstance(e, (_events.FailedOver, _events.ClusterHealthChanged))]


@pytest.mark.parametrize("pinned", [False, True], ids=["dispatched", "pinned"])
def test_producer_failed_over_itself_follows_the_operators_failback(
    native_clusters: Clusters,
    tmp_path: Path,
    unique: Callable[[str], str],
    kbear_events: list[_events.Event],
    pinned: bool,
) -> None:
    """Issue #27 item 5: ``A`` back and ``kbear failback --apply`` (which writes
    ``kbear.failover.decided``): at its reload the producer drains ``B`` and sends
    ``A``'s topics to ``A`` again; no restart."""
    a, b = native_clusters
    topic = unique("orders")
    for cluster in native_clusters:
        cluster.create_topic(topic, 3)
    rules = (
        ALL_ON_A
        if pinned
        else [rule("t", "use cluster A", topic=topic), rule("all", "use cluster B", isGlobal=True)]
    )
    conf = write_standby_config(tmp_path / "conf", native_clusters, rules)
    reports: dict[bytes, list[Any]] = {}

    def delivery(err: Any, msg: Any) -> None:
        reports.setdefault(msg.value(), []).append(err)

    producer = RoutedProducer({**CONF, "kbear.config": str(conf)}, on_delivery=delivery)
    values: list[bytes] = []

    def produce(first: int, last: int) -> None:
        for n in range(first, last):
            value = f"m-{n:03d}".encode()
            values.append(value)
            producer.produce(topic, value, f"k{n % 5}".encode())

    try:
        producer.produce(topic, b"warm", b"k0")
        assert producer.flush(10) == 0
        a.set_broker_down(-1)
        produce(0, 30)  # held by A's client, taken back at the failover
        poll_until(producer, lambda: producer.route(topic).cluster_id == "B", 15)
        assert producer.route(topic).cluster_id == "B"
        produce(30, 60)
        assert producer.flush(15) == 0

        a.set_broker_up(-1)
        # A answers again: nothing moves back by itself
        poll_until(producer, lambda: False, 1.5)
        assert producer.route(topic).cluster_id == "B"

        # the operator's fail-back: clusters.yaml does not fail A over, so only the
        # decision's time is written; the producer's own failover ends at its reload
        assert main(["failback", "--config", str(conf), "--cluster", "A", "--apply", "--timeout", "5"]) == 0
        assert "kbear.failover.decided" in (conf / "clusters.yaml").read_text()
        produce(60, 90)  # in flight on B when the reload is applied: drained first
        assert producer.router.reload() is True
        produce(90, 120)  # applies the reload: B drained, then A
        assert producer.route(topic).cluster_id == "A"
        assert producer.flush(15) == 0
    finally:
        producer.close(5)
        a.set_broker_up(-1)

    assert {v: reports.get(v) for v in values} == {v: [None] for v in values}  # each once, none lost
    on_b = [m for m in read_all(b, topic)]
    on_a = [m for m in read_all(a, topic) if m.value() != b"warm"]
    assert sorted(m.value() for m in on_b) == values[:90]
    assert sorted(m.value() for m in on_a) == values[90:]
    for msgs in (on_b, on_a):  # per key, in the order produced (each key on one partition)
        by_key: dict[bytes, list[bytes]] = {}
        for m in msgs:
            by_key.setdefault(m.key(), []).append(m.value())
        assert all(seen == sorted(seen) for seen in by_key.values())
    failovers = [
        (e.trigger, e.cluster, e.standby, e.back) for e in kbear_events if isinstance(e, _events.FailedOver)
    ]
    assert failovers == [("client", "A", "B", False), ("client", "A", "B", True)]
