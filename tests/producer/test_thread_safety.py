"""One RoutedProducer shared by 8 threads while reloads flip a topic's route between
clusters A and B (issue #7, "Thread safety").

Invariants checked against what a plain consumer reads back from each cluster:
every produce() that returned got exactly one delivery report; every message
reported delivered is on A or B, once, at the partition and offset of its report;
A + B hold exactly the delivered messages; no exception but BufferError (retried
after poll) escapes produce(); no thread is left hanging.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import read_all, rewrite_rules, rule
from kbear import RoutedProducer, Router
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

THREADS = 8
PER_THREAD = 5_000
FLIPS = 6  # route changes: A -> B -> A -> ... while the threads produce
JOIN_TIMEOUT_S = 60.0
NO_WATCH_CONF = {"kbear.reload.interval.ms": 0}


def rules_for(cluster: str, topic: str, remap: bool = False) -> list[dict[str, Any]]:
    """``topic`` on ``cluster``, everything else on A (so, without remap, the producer
    is pinned to A while the topic is there); with ``remap``, on A it is ``<topic>.a``."""
    statement = f"use cluster {cluster}" + (f", topic {topic}.a" if remap and cluster == "A" else "")
    return [
        rule("flip", statement, topic=topic),
        rule("global", "use cluster A", isGlobal=True),
    ]


class Reports:
    """Delivery reports, from whichever thread serves them (list.append is atomic)."""

    def __init__(self) -> None:
        self.ok: list[tuple[str, bytes, int, int]] = []
        self.failed: list[tuple[bytes, Any]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.ok.append((msg.topic(), msg.value(), msg.partition(), msg.offset()))
        else:
            self.failed.append((msg.value(), err))


def run_stress(
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    flip: Callable[[Router, Path, list[dict[str, Any]]], None],
    *,
    watch_s: float = 0.0,
    remap: bool = False,
) -> None:
    a, b = two_clusters
    topic = unique("shared")
    physical = {"A": f"{topic}.a" if remap else topic, "B": topic}
    a.create_topic(physical["A"], 3)
    b.create_topic(physical["B"], 3)
    conf_dir = make_config(rules_for("A", topic, remap))
    router = Router.from_path(conf_dir)
    reports = Reports()
    producer = RoutedProducer(
        {"linger.ms": 2, "kbear.reload.interval.ms": 0, "kbear.switch.drain.timeout.ms": 20_000},
        router=router,
        on_delivery=reports,
    )
    if watch_s:
        router.watch(watch_s)

    phase = PER_THREAD // (FLIPS + 1)
    sent = [0] * THREADS  # messages produce() accepted, per thread
    produced: list[list[bytes]] = [[] for _ in range(THREADS)]
    escaped: list[BaseException] = []
    flips_done = [0]
    cond = threading.Condition()
    stop = threading.Event()

    def worker(i: int) -> None:
        try:
            for j in range(PER_THREAD):
                if j and j % phase == 0:
                    # keep every flip in the middle of the stream: wait for the flips
                    # of the phases before this one (bounded; the flipper may fail)
                    with cond:
                        wanted = min(j // phase, FLIPS)
                        cond.wait_for(lambda w=wanted: flips_done[0] >= w or stop.is_set(), 30)
                value = f"t{i}-{j}".encode()
                key = f"t{i}-k{j % 40}".encode()
                while True:
                    try:
                        producer.produce(topic, value, key)
                        break
                    except BufferError:
                        producer.poll(0.05)
                produced[i].append(value)
                sent[i] += 1
                if j % 250 == 0:
                    producer.poll(0)
        except BaseException as exc:  # recorded, asserted below
            escaped.append(exc)

    def flipper() -> None:
        try:
            for f in range(FLIPS):
                # flip f lands halfway through phase f, while every thread produces
                target = int((f + 0.5) * phase * THREADS)
                deadline = time.monotonic() + 30
                while sum(sent) < target and time.monotonic() < deadline and not escaped:
                    time.sleep(0.002)
                flip(router, conf_dir, rules_for(rules_cluster(f), topic, remap))
                with cond:
                    flips_done[0] += 1
                    cond.notify_all()
        except BaseException as exc:
            escaped.append(exc)
            stop.set()
            with cond:
                cond.notify_all()

    def rules_cluster(f: int) -> str:
        return "B" if f % 2 == 0 else "A"

    # switch threads as often as possible: stale references and half-applied
    # changes get their chance between any two bytecodes
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    flip_thread = threading.Thread(target=flipper, daemon=True)
    try:
        for t in [*threads, flip_thread]:
            t.start()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for t in [*threads, flip_thread]:
            t.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in [*threads, flip_thread] if t.is_alive()]
        assert not alive, f"threads still running (deadlock?): {alive}"
        assert not escaped, escaped
        assert flips_done[0] == FLIPS
        assert producer.flush(30) == 0
    finally:
        sys.setswitchinterval(old_interval)
        stop.set()
        if not any(t.is_alive() for t in threads):  # a hung thread may hold the lock
            producer.close(30)
        router.close()

    values = [v for per_thread in produced for v in per_thread]
    assert len(values) == THREADS * PER_THREAD
    # every accepted produce() got exactly one report, and none failed
    assert reports.failed == []
    reported = Counter(v for _, v, _, _ in reports.ok)
    assert reported == Counter(values), "missing or duplicate delivery reports"
    assert {t for t, _, _, _ in reports.ok} == {topic}

    # what the clusters hold: exactly the delivered messages, each once, where reported
    where: dict[bytes, tuple[str, int, int]] = {}
    on: dict[str, int] = {}
    for name, cluster in (("A", a), ("B", b)):
        msgs = read_all(cluster, physical[name], timeout=30)
        on[name] = len(msgs)
        for m in msgs:
            assert m.value() not in where, f"{m.value()!r} stored twice"
            where[m.value()] = (name, m.partition(), m.offset())
    assert on["A"] + on["B"] == len(reports.ok)
    for _, value, partition, offset in reports.ok:
        assert value in where, f"{value!r} reported delivered but on no cluster"
        _cluster, stored_partition, stored_offset = where[value]
        assert (stored_partition, stored_offset) == (partition, offset)
    # the flips took effect: both clusters received part of the stream
    assert on["A"] > 0 and on["B"] > 0


def flip_now(router: Router, conf_dir: Path, rules: list[dict[str, Any]]) -> None:
    rewrite_rules(conf_dir, rules)
    assert router.reload() is True


def flip_by_watcher(router: Router, conf_dir: Path, rules: list[dict[str, Any]]) -> None:
    before = router.config.digest
    rewrite_rules(conf_dir, rules)
    deadline = time.monotonic() + 10
    while router.config.digest == before:  # the watcher applies it (50 ms + settle)
        if time.monotonic() > deadline:
            pytest.fail("the watcher did not apply the change within 10 s")
        time.sleep(0.01)


@pytest.mark.parametrize("remap", [False, True], ids=["pinned", "remapped"])
def test_shared_producer_with_explicit_reloads(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str], remap: bool
) -> None:
    run_stress(two_clusters, make_config, unique, flip_now, remap=remap)


def test_shared_producer_with_watcher(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    run_stress(two_clusters, make_config, unique, flip_by_watcher, watch_s=0.05)


def test_stale_produce_reference_is_still_served(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    """A thread that read ``producer.produce`` just before a reload (or an application
    that keeps ``send = producer.produce``) may call it after the switch: the message
    goes to the old cluster, and must still get its delivery report (the old
    cluster's client stays polled and flushed; it was dropped when unused, before)."""
    a, b = two_clusters
    topic = unique("stale")
    for cluster in two_clusters:
        cluster.create_topic(topic, 3)
    conf_dir = make_config(rules_for("A", topic))
    router = Router.from_path(conf_dir)
    reports = Reports()
    producer = RoutedProducer(NO_WATCH_CONF, router=router, on_delivery=reports)
    try:
        stale = producer.produce  # pinned: cluster A's own Producer.produce
        stale(topic, b"first")
        assert producer.flush(10) == 0
        flip_now(router, conf_dir, rules_for("B", topic))
        producer.produce(topic, b"moved")  # applies the move: A drained, topic now on B
        stale(topic, b"late")  # the stale reference still reaches A's client
        assert producer.flush(10) == 0
    finally:
        producer.close(10)
        router.close()
    assert sorted(v for _, v, _, _ in reports.ok) == [b"first", b"late", b"moved"]
    assert sorted(m.value() for m in read_all(a, topic)) == [b"first", b"late"]
    assert [m.value() for m in read_all(b, topic)] == [b"moved"]
