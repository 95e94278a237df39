"""poll(timeout) and consume(n, timeout) keep their timeout during a topic move,
also when the old cluster answers slowly (2 s per round trip) or not at all
(issue #11: never longer than timeout + 50 ms).

A RoutedConsumer reads a topic on cluster A; the route moves it to B; then A is
made slow (``set_broker_rtt``) or taken down. The drain's checks (commit,
watermarks, the group's committed offsets) run in the background, so every call
returns in time; once A recovers the drain ends, the topic is read on B, and
nothing is lost. The longest call is printed (``-s``) and asserted.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_GROUP, consume_until, rewrite_rules, rule

from kbear import RoutedConsumer, RoutedProducer, Router
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

TIMEOUT_S = 0.1
#: what the issue allows above the timeout
SLACK_S = 0.05
#: how long the old cluster stays slow or down while the calls are timed
FAULT_S = 6.0


def rules(cluster: str, topic: str) -> list[dict[str, Any]]:
    return [
        rule("move", f"use cluster {cluster}", topic=topic),
        rule("global", "use cluster A", isGlobal=True),
    ]


def timed_calls(consumer: RoutedConsumer, use_consume: bool, seconds: float) -> tuple[float, list[Any]]:
    """Call poll(0.1) or consume(100, 0.1) for ``seconds``; the longest call and the messages."""
    longest = 0.0
    got: list[Any] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        if use_consume:
            msgs = consumer.consume(100, TIMEOUT_S)
        else:
            msg = consumer.poll(TIMEOUT_S)
            msgs = [] if msg is None else [msg]
        longest = max(longest, time.monotonic() - t0)
        got.extend(m for m in msgs if m.error() is None)
    return longest, got


@pytest.mark.parametrize("fault", ["slow", "down"])
@pytest.mark.parametrize("use_consume", [False, True], ids=["poll", "consume"])
def test_calls_keep_their_timeout_while_the_old_cluster_is_slow_or_down(
    two_clusters: Clusters,
    make_config: Callable[..., Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
    fault: str,
    use_consume: bool,
) -> None:
    a, b = two_clusters
    if not a.native:
        pytest.skip("needs librdkafka's mock C API (broker RTT and down)")
    topic = unique("slow-move")
    for cluster in (a, b):
        cluster.create_topic(topic, 3)
    conf_dir = make_config(rules("A", topic))
    router = Router.from_path(conf_dir)
    closing(router)
    producer = closing(RoutedProducer({"kbear.reload.interval.ms": 0}, router=router))
    consumer = closing(
        RoutedConsumer(
            {
                "group.id": unique("g"),
                **FAST_GROUP,
                "kbear.reload.interval.ms": 0,
                "kbear.switch.drain.idle.ms": 200,
                "kbear.switch.drain.timeout.ms": 60_000,
            },
            router=router,
        )
    )
    consumer.subscribe([topic])
    before = [f"A-{i}".encode() for i in range(60)]
    for i, value in enumerate(before):
        producer.produce(topic, value, f"k{i % 6}".encode())
    assert producer.flush(10) == 0
    got = [m.value() for m in consume_until(consumer, len(before), timeout=20)]

    rewrite_rules(conf_dir, rules("B", topic))
    assert router.reload()
    after = [f"B-{i}".encode() for i in range(30)]
    for i, value in enumerate(after):
        producer.produce(topic, value, f"k{i % 6}".encode())
    assert producer.flush(10) == 0

    if fault == "slow":
        a.set_broker_rtt(-1, 2000)
    else:
        a.set_broker_down(-1)
    try:
        longest, during = timed_calls(consumer, use_consume, FAULT_S)
    finally:
        if fault == "slow":
            a.set_broker_rtt(-1, 0)
        else:
            a.set_broker_up(-1)
    got += [m.value() for m in during]
    call = "consume" if use_consume else "poll"
    print(f"\n[{fault}, {call}] longest call during the drain: {longest * 1000:.0f} ms")
    assert longest <= TIMEOUT_S + SLACK_S

    # A recovered: the drain ends, the topic is read on B, nothing lost or read twice
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        len(got) < len(before) + len(after) or consumer.routes()[topic].cluster_id != "B"
    ):
        _, more = timed_calls(consumer, use_consume, 0.5)
        got += [m.value() for m in more]
    assert consumer.routes()[topic].cluster_id == "B"
    assert Counter(got) == Counter(before + after)
