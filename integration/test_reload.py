"""Configuration reload from the files on disk, through the routed clients' watchers
(``kbear.reload.interval.ms``): rules and cluster addresses change while clients run."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from integration.conftest import Harness
from integration.helpers import global_rule, poll_until, read_topic, topic_rule, values

WATCH_MS = 100


def wait_route(client: Any, topic: str, cluster: str, timeout_s: float = 10.0) -> None:
    """Call the client (which applies reloads) until ``topic`` routes to ``cluster``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        route = client.route(topic) if hasattr(client, "route") else client.routes().get(topic)
        if route is not None and route.cluster_id == cluster:
            return
        client.poll(0.05)
    raise AssertionError(f"{topic} still not routed to {cluster} after {timeout_s} s")


def send(producer: Any, topic: str, label: str, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        out.append(f"{label}-{i}".encode())
        producer.produce(topic, out[-1], f"k{i % 7}".encode())
    assert producer.flush(30) == 0
    return out


def test_watchers_follow_rules_rewritten_on_disk(it: Harness) -> None:
    topic = it.create_topic(it.name("orders"), 3, "A")
    physical = it.create_topic(topic + ".on-b", 3, "B")
    conf = it.config([topic_rule(topic, "A", rule_id="orders"), global_rule("A")])
    producer = it.producer(conf, reload_ms=WATCH_MS)
    consumer = it.consumer(
        conf, it.name("readers"), reload_ms=WATCH_MS, **{"kbear.switch.drain.idle.ms": 300}
    )
    moves: list[tuple[str, str | None]] = []
    consumer.on_route_change(lambda old, new: moves.append((old.cluster_id, new and new.cluster_id)))
    consumer.subscribe([topic])
    before = send(producer, topic, "A", 300)
    assert sorted(values(poll_until(consumer, 300, timeout_s=30))) == sorted(before)

    # an invalid file on disk is refused: the routes stay
    (conf.path / "route-rules.yaml").write_text("route-rules: [ {id: broken, rule: use cluster\n")
    time.sleep(5 * WATCH_MS / 1000)
    producer.poll(0.1)
    assert producer.route(topic).cluster_id == "A"

    conf.write_rules([topic_rule(topic, "B", physical=physical, rule_id="orders"), global_rule("A")])
    wait_route(producer, topic, "B")
    after = send(producer, topic, "B", 300)
    got = poll_until(consumer, 300, timeout_s=30)
    assert sorted(values(got)) == sorted(after)
    assert {m.topic() for m in got} == {topic}
    assert moves == [("A", "B")]
    assert sorted(values(read_topic(it.bootstrap("A"), topic, 300))) == sorted(before)
    assert sorted(values(read_topic(it.bootstrap("B"), physical, 300))) == sorted(after)


def test_cluster_address_rewritten_on_disk(it: Harness) -> None:
    """clusters.yaml gives cluster ``main`` a new address (A's, then B's): the
    producer retires its client of the old address after delivering its messages."""
    topic = it.create_topic(it.name("relocated"), 2)
    conf = it.config([global_rule("main")], clusters={"main": it.bootstrap("A")})
    reports: list[Any] = []
    producer = it.producer(conf, reload_ms=WATCH_MS, on_delivery=lambda err, msg: reports.append(err))
    first = send(producer, topic, "first", 200)

    conf.write_clusters({"main": it.bootstrap("B")})
    deadline = time.monotonic() + 10
    while producer.route(topic).bootstrap_servers != it.bootstrap("B") and time.monotonic() < deadline:
        producer.poll(0.05)
    assert producer.route(topic).bootstrap_servers == it.bootstrap("B")
    second = send(producer, topic, "second", 200)
    assert reports == [None] * 400
    assert Counter(values(read_topic(it.bootstrap("A"), topic, 200))) == Counter(first)
    assert Counter(values(read_topic(it.bootstrap("B"), topic, 200))) == Counter(second)
