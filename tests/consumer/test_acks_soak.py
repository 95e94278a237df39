"""Soak of message-level acknowledgement (issue #15), bounded to well under 2 minutes.

3 routed consumers of one group (kbear.ack.mode=individual, each in its own
thread) read a 3-partition topic; 10 % of the good messages are nacked at random
(each once, at its first delivery to a consumer, with probability 0.1), 1 % are poison (always
nacked); the topic moves from cluster A to cluster B in the middle (drain mode);
the dead-letter topic is routed to cluster B throughout. Asserted: every good
message is acknowledged (processed), every poison message is in the dead-letter
topic exactly once, nothing is lost. Figures: ``-s`` prints them.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_GROUP, read_all, rewrite_rules, rule
from kbear import RoutedConsumer, RoutedProducer, Router
from kbear.testing import EmbeddedCluster

pytestmark = pytest.mark.soak

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

PER_PHASE = 2500  # messages before and after the move
POISON_EVERY = 100  # 1 %
NACK_RATE = 0.10
MAX_REDELIVER = 3
BOUND_S = 90.0


def test_soak_nacks_poison_and_a_live_move(
    two_clusters: Clusters, make_config: Callable[..., Path], unique: Callable[[str], str]
) -> None:
    a, b = two_clusters
    topic, group = unique("soak"), unique("soak-group")
    dlq = f"{topic}-{group}-DLQ"
    for cluster in (a, b):
        cluster.create_topic(topic, 3)
    b.create_topic(dlq, 1)

    def rules(where: str) -> list[dict[str, Any]]:
        return [
            rule("all", "use cluster A", isGlobal=True),
            rule("t", f"use cluster {where}", topic=topic),
            rule("dlq", "use cluster B", topic=dlq),
        ]

    conf_dir = make_config(rules("A"))
    router = Router.from_path(conf_dir)
    conf = {
        "group.id": group,
        **FAST_GROUP,
        "kbear.reload.interval.ms": 0,
        "kbear.ack.mode": "individual",
        "kbear.nack.backoff.min.ms": 20,
        "kbear.nack.backoff.max.ms": 200,
        "kbear.max.redeliver.count": MAX_REDELIVER,
        "kbear.switch.drain.idle.ms": 300,
        "kbear.switch.drain.timeout.ms": 10_000,
    }
    acked: Counter[bytes] = Counter()
    nacks = Counter[str]()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    consumers = [RoutedConsumer(conf, router=router) for _ in range(3)]
    assigned: dict[int, int] = {}  # consumer -> partitions of its last assignment
    switched: list[tuple[str, str | None]] = []
    for c in consumers:
        c.on_route_change(lambda old, new: switched.append((old.cluster_id, new and new.cluster_id)))

    def run(c: RoutedConsumer, seed: int) -> None:
        rnd = random.Random(seed)
        seen: set[bytes] = set()
        try:
            c.subscribe([topic], on_assign=lambda _c, parts: assigned.update({seed: len(parts)}))
            while not stop.is_set():
                m = c.poll(0.05)
                if m is None or m.error() is not None:
                    continue
                value = m.value()
                # 10 % of the good messages are nacked once, at their first delivery here
                first = value not in seen
                seen.add(value)
                if value.startswith(b"poison") or (first and rnd.random() < NACK_RATE):
                    c.nack(m)
                    with lock:
                        nacks["poison" if value.startswith(b"poison") else "good"] += 1
                    continue
                c.ack(m)
                with lock:
                    acked[value] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c, i), daemon=True) for i, c in enumerate(consumers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    producer = RoutedProducer({"kbear.reload.interval.ms": 0}, router=router)
    good: set[bytes] = set()
    poison: set[bytes] = set()

    def produce(first: int) -> None:
        for i in range(first, first + PER_PHASE):
            value = f"poison-{i}" if i % POISON_EVERY == 0 else f"good-{i}"
            (poison if i % POISON_EVERY == 0 else good).add(value.encode())
            producer.produce(topic, value.encode(), f"k{i % 30}".encode())
        assert producer.flush(10) == 0

    try:
        deadline = start + 15
        while sum(assigned.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        produce(0)
        deadline = time.monotonic() + 20
        while len(acked) < len(good) // 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        rewrite_rules(conf_dir, rules("B"))  # the live move, halfway
        assert router.reload() is True
        moved_at = time.monotonic()
        produce(PER_PHASE)
        deadline = start + BOUND_S
        dead: list[Any] = []
        while time.monotonic() < deadline and not errors:
            with lock:
                done = set(acked) >= good
            if done:
                dead = read_all(b, dlq, timeout=2)
                if len(dead) >= len(poison):
                    break
            time.sleep(0.2)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        for c in consumers:
            c.close()
        producer.close()
        router.close()
    assert not errors, errors
    assert switched and set(switched) == {("A", "B")}  # the live move happened
    missing = good - set(acked)
    assert not missing, f"{len(missing)} good messages never acknowledged, e.g. {sorted(missing)[:5]}"
    dead_values = Counter(m.value() for m in read_all(b, dlq, timeout=5))
    assert set(dead_values) == poison
    assert all(n == 1 for n in dead_values.values()), dead_values
    assert read_all(a, dlq, timeout=1) == []
    duplicates = sum(n - 1 for n in acked.values())
    print(
        f"\nkbear ack soak: {len(good)} good + {len(poison)} poison messages, 3 consumers, move at "
        f"{moved_at - start:.1f} s; done in {elapsed:.1f} s; nacks: {dict(nacks)}; "
        f"good acked more than once: {duplicates}; dead letters: {sum(dead_values.values())}"
    )
