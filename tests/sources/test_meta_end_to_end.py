"""kbear's meta-service client against kbear's own server (issue #12): routed
clients with ``kbear.config=http://...`` served by ``kbear serve`` (in-process,
:class:`kbear.server.embedded.EmbeddedMetaService`) over a directory; a remap
keyed by the requested topic, a consumer-group rule, and a live move driven by
editing the served directory, under load, losing nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import FAST_GROUP, message_count, rewrite_rules, rule, write_config
from kbear import RoutedConsumer, RoutedProducer
from kbear.testing import EmbeddedCluster

pytest.importorskip("uvicorn", reason="kbear serve needs the server extra")
from kbear.server.embedded import EmbeddedMetaService

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def rules(moving_on: str, names: dict[str, str]) -> list[dict[str, Any]]:
    return [
        rule("moving", f"use cluster {moving_on}", topic=names["moving"]),
        rule("remap", f"use cluster B, topic {names['physical']}", topic=names["logical"]),
        rule("group-on-b", "use cluster B", group=names["group"], group_topic=names["grouped"]),
        rule("default", "use cluster A", isGlobal=True),
    ]


@pytest.fixture
def names(unique: Callable[[str], str], two_clusters: Clusters) -> dict[str, str]:
    a, b = two_clusters
    n = {k: unique(k) for k in ("moving", "logical", "physical", "grouped", "group")}
    for cluster in (a, b):
        cluster.create_topic(n["moving"], 3)
        cluster.create_topic(n["grouped"], 3)
    b.create_topic(n["physical"], 3)
    return n


@pytest.fixture
def served(tmp_path: Path, two_clusters: Clusters, names: dict[str, str]) -> Iterator[tuple[Path, str]]:
    a, b = two_clusters
    directory = write_config(tmp_path / "served", {"A": a, "B": b}, rules("A", names))
    with EmbeddedMetaService(directory, watch_interval_s=0.1) as service:
        yield directory, service.url


def test_routes_from_kbear_serve_remap_and_group_rule(
    served: tuple[Path, str], names: dict[str, str], two_clusters: Clusters
) -> None:
    _directory, url = served
    a, b = two_clusters
    producer = RoutedProducer({"kbear.config": url, "kbear.reload.interval.ms": 200})
    reports: list[Any] = []
    try:
        producer.produce(names["logical"], b"x", on_delivery=lambda err, msg: reports.append((err, msg)))
        producer.produce(names["grouped"], b"y")
        assert producer.flush(10) == 0
        route = producer.route(names["logical"])
        assert (route.cluster_id, route.topic) == ("B", names["physical"])
        assert producer.route(names["grouped"]).cluster_id == "A"  # producers: the global rule
    finally:
        producer.close()
    assert reports and reports[0][0] is None and reports[0][1].topic() == names["logical"]
    assert message_count(b, names["physical"]) == 1
    assert message_count(a, names["grouped"]) == 1
    consumer = RoutedConsumer(
        {"kbear.config": url, "group.id": names["group"], **FAST_GROUP, "kbear.reload.interval.ms": 200}
    )
    try:
        consumer.subscribe([names["grouped"], names["logical"]])
        routes = consumer.routes()
        assert routes[names["grouped"]].cluster_id == "B"  # the consumer-group rule
        assert (routes[names["logical"]].cluster_id, routes[names["logical"]].topic) == (
            "B",
            names["physical"],
        )
    finally:
        consumer.close()


def test_live_move_by_editing_the_served_directory_loses_nothing(
    served: tuple[Path, str], names: dict[str, str], two_clusters: Clusters
) -> None:
    directory, url = served
    a, b = two_clusters
    topic = names["moving"]
    common = {"kbear.config": url, "kbear.reload.interval.ms": 200}
    producer = RoutedProducer(common)
    consumer = RoutedConsumer({**common, "group.id": names["group"], **FAST_GROUP})
    consumer.subscribe([topic])
    sent: list[bytes] = []
    got: list[bytes] = []
    keys = [b"k%d" % i for i in range(6)]
    try:
        deadline = time.monotonic() + 60
        i = 0
        moved = False
        while time.monotonic() < deadline and (len(sent) < 600 or not moved):
            key = keys[i % len(keys)]
            value = b"%s:%05d" % (key, i)
            producer.produce(topic, value, key)
            sent.append(value)
            i += 1
            if i == 200:
                rewrite_rules(directory, rules("B", names))
            moved = producer.route(topic).cluster_id == "B" and consumer.routes()[topic].cluster_id == "B"
            for msg in consumer.consume(100, 0.01):
                if msg.error() is None:
                    got.append(msg.value())
        assert moved, "the clients did not follow the served change"
        assert producer.flush(15) == 0
        while len(got) < len(sent) and time.monotonic() < deadline + 30:
            got.extend(m.value() for m in consumer.consume(500, 0.2) if m.error() is None)
    finally:
        producer.close()
        consumer.close()
    assert len(got) == len(set(got)), "a message was read twice"
    assert sorted(got) == sorted(sent), "a message was lost"
    for key in keys:
        mine = [v for v in got if v.startswith(key + b":")]
        assert mine == sorted(mine), f"order of key {key!r} broken"
    assert message_count(b, topic) > 0
    assert message_count(a, topic) + message_count(b, topic) == len(sent)
