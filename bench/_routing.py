"""bench/run.py's configuration benchmarks: loading and looking up a generated rule
set (lookup) and the time a route change takes to reach the producer (switch)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from _common import VALUE, global_rule, write_config
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from kbear import Client, RoutedProducer, Router, load_config
from kbear.config import _documents as kbear_documents
from kbear.testing import EmbeddedCluster


def generate_rules(
    n_rules: int, n_topics: int, clusters: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    topics = [f"topic.{i:06d}" for i in range(n_topics)]
    rules: list[dict[str, Any]] = [global_rule(clusters[0])]
    for i in range(n_rules - 1):
        t = topics[i % n_topics]
        rules.append(
            {
                "id": f"r{i}",
                "priority": i % 3,
                "meta": {"topic.id": t},
                "rule": f"use cluster {clusters[i % len(clusters)]} when client.env=env{i % 7}",
            }
        )
    return rules, topics


def bench_lookup(tmp: Path, n_rules: int, n_topics: int, lookups: int) -> dict[str, Any]:
    """Load times of a generated configuration (JSON-style and block-style YAML, and a
    reload where only route-rules.yaml changed), then cached and uncached lookups."""
    import yaml

    clusters = {"c1": "127.0.0.1:1", "c2": "127.0.0.1:2"}
    rules, topics = generate_rules(n_rules, n_topics, list(clusters))
    topics_doc = {"topics": [{"id": t, "meta": {"bu": f"bu{i % 10}"}} for i, t in enumerate(topics)]}
    timings: dict[str, float] = {}
    for style in ("block", "json"):
        d = tmp / f"lookup-{n_rules}-{style}"
        d.mkdir(parents=True, exist_ok=True)
        dump = (lambda doc: yaml.safe_dump(doc, sort_keys=False)) if style == "block" else json.dumps
        (d / "clusters.yaml").write_text(
            dump({"clusters": [{"id": c, "meta": {"bootstrap.servers": b}} for c, b in clusters.items()]})
        )
        (d / "route-rules.yaml").write_text(dump({"route-rules": rules}))
        (d / "topics.yaml").write_text(dump(topics_doc))
        t0 = time.perf_counter()
        config = load_config(d)
        timings[f"load_{style}_s"] = time.perf_counter() - t0
        timings[f"{style}_bytes"] = sum(f.stat().st_size for f in d.iterdir())
        if style == "block" and kbear_documents._fastyaml.AVAILABLE:
            # the same files read by PyYAML alone, as without the fast-yaml extra
            kbear_documents._fastyaml.AVAILABLE = False
            try:
                t0 = time.perf_counter()
                load_config(d)
                timings["load_block_pyyaml_s"] = time.perf_counter() - t0
            finally:
                kbear_documents._fastyaml.AVAILABLE = True
    # reload with only route-rules.yaml changed: topics.yaml is not parsed again
    (d / "route-rules.yaml").write_text(json.dumps({"route-rules": [*rules, global_rule("c2")]}))
    t0 = time.perf_counter()
    load_config(d)
    timings["reload_rules_only_s"] = time.perf_counter() - t0
    router = Router(config)
    clients = [Client("app", {"env": f"env{i % 7}", "n": str(i)}) for i in range(lookups)]
    t0 = time.perf_counter()
    for i, client in enumerate(clients):  # every client distinct: every lookup misses the cache
        router.route_producer(topics[(i * 7919) % n_topics], client)
    uncached_s = (time.perf_counter() - t0) / lookups
    client = Client("app", {"env": "env1"})
    router.route_producer(topics[1], client)
    t0 = time.perf_counter()
    for _ in range(lookups):
        router.route_producer(topics[1], client)
    cached_s = (time.perf_counter() - t0) / lookups
    return {
        "rules": n_rules,
        "topics": n_topics,
        "load_s": timings["load_json_s"],
        **timings,
        "uncached_us": uncached_s * 1e6,
        "cached_us": cached_s * 1e6,
    }


def bench_switch(tmp: Path, interval_ms: int) -> dict[str, Any]:
    """File change -> first message of the moved topic on the new cluster."""
    a, b = EmbeddedCluster(), EmbeddedCluster()
    try:
        for c in (a, b):
            c.create_topic("moving", 1)
        d = write_config(
            tmp / "switch", {"A": a.bootstrap_servers, "B": b.bootstrap_servers}, [global_rule("A")]
        )
        producer = RoutedProducer(
            {"linger.ms": 0, "kbear.config": str(d), "kbear.reload.interval.ms": interval_ms},
            topics=["moving"],
        )
        watcher = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "w", "log_level": 3})
        watcher.assign([TopicPartition("moving", 0, OFFSET_BEGINNING)])
        time.sleep(0.2)
        write_config(d, {"A": a.bootstrap_servers, "B": b.bootstrap_servers}, [global_rule("B")])
        changed = time.perf_counter()
        seen = None
        while seen is None and time.perf_counter() - changed < 30:
            producer.produce("moving", VALUE)
            producer.poll(0)
            msg = watcher.poll(0.001)
            if msg is not None and msg.error() is None:
                seen = time.perf_counter() - changed
        producer.close()
        watcher.close()
        return {"reload_interval_ms": interval_ms, "switch_s": seen}
    finally:
        a.close()
        b.close()
