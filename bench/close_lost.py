"""How long ``close()`` takes: a healthy routed consumer next to confluent-kafka's
Consumer, and a routed consumer after it failed over a lost cluster.

- **healthy**: the same group work on one embedded cluster (subscribe, read the
  topic's messages, commit), then ``close()``; a plain ``confluent_kafka.Consumer``
  and a ``RoutedConsumer`` take turns, ``--rounds`` each; the median of each and of
  the per-round ratios routed / plain.
- **after a failover**: a ``RoutedConsumer`` (``kbear.failover.enable``,
  ``kbear.failover.after.ms`` 800) reading ``east``; east's broker goes down, the
  consumer fails over to ``west`` and reads there; then ``close()``. kbear holds
  east for lost: its client is closed in the background (kbear/consumer/_closing.py).
  ``--plain-dead`` adds one plain Consumer whose cluster went down before its
  ``close()`` (confluent-kafka waits for the coordinator: ``session.timeout.ms``).

Writes ``bench/results-close.json`` and the section of bench/RESULTS.md rendered
from it (bench/_report.py)::

    PYTHONPATH=. .venv/bin/python bench/close_lost.py --rounds 9 --plain-dead
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _failover_clusters import MockPair
from _report import render_markdown
from failover import write_conf

from kbear import RoutedConsumer
from kbear.testing import EmbeddedCluster

HERE = Path(__file__).resolve().parent
MESSAGES = 20
GROUP = {"group.protocol": "consumer", "auto.offset.reset": "earliest"}


def fill(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(MESSAGES):
        producer.produce(topic, f"m{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0


def read(consumer: Any, count: int, timeout: float = 20.0) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        got += msg is not None and msg.error() is None
    return got


def timed_close(consumer: Any) -> float:
    started = time.perf_counter()
    consumer.close()
    return time.perf_counter() - started


def healthy(rounds: int, conf_dir: Path, cluster: EmbeddedCluster) -> dict[str, Any]:
    """Plain and routed consumers take turns: subscribe, read, commit, close."""
    plain_s: list[float] = []
    routed_s: list[float] = []
    for i in range(rounds):
        for kind in ("plain", "routed"):
            topic = f"healthy-{kind}-{i}"
            cluster.create_topic(topic, 2)
            fill(cluster.bootstrap_servers, topic)
            group = {**GROUP, "group.id": f"g-{topic}"}
            consumer: Any
            if kind == "plain":
                consumer = Consumer({**group, "bootstrap.servers": cluster.bootstrap_servers})
            else:
                consumer = RoutedConsumer(
                    {**group, "kbear.config": str(conf_dir), "kbear.reload.interval.ms": 0}
                )
            consumer.subscribe([topic])
            assert read(consumer, MESSAGES) == MESSAGES, kind
            consumer.commit(asynchronous=False)
            (plain_s if kind == "plain" else routed_s).append(timed_close(consumer))
    ratios = [r / p for p, r in zip(plain_s, routed_s, strict=True)]
    return {
        "rounds": rounds,
        "plain_ms": round(statistics.median(plain_s) * 1000, 2),
        "routed_ms": round(statistics.median(routed_s) * 1000, 2),
        "ratio": round(statistics.median(ratios), 3),
        "plain_range_ms": [round(min(plain_s) * 1000, 2), round(max(plain_s) * 1000, 2)],
        "routed_range_ms": [round(min(routed_s) * 1000, 2), round(max(routed_s) * 1000, 2)],
    }


def after_failover(rounds: int) -> dict[str, Any]:
    """A routed consumer fails east over to west, reads there, then closes."""
    took: list[float] = []
    for i in range(rounds):
        pair = MockPair()
        try:
            topic = f"failover-{i}"
            pair.create_topic(topic, 2)
            fill(pair.east_bootstrap, topic)
            fill(pair.west_bootstrap, topic)
            with tempfile.TemporaryDirectory() as tmp:
                conf_dir = write_conf(Path(tmp) / "conf", pair)
                consumer = RoutedConsumer(
                    {
                        **GROUP,
                        "group.id": f"g-{topic}",
                        "kbear.config": str(conf_dir),
                        "kbear.reload.interval.ms": 0,
                        "kbear.switch.drain.idle.ms": 200,
                        "kbear.failover.enable": True,
                        "kbear.failover.after.ms": 800,
                    }
                )
                consumer.subscribe([topic])
                assert read(consumer, MESSAGES) == MESSAGES
                consumer.commit(asynchronous=False)
                pair.lose()
                deadline = time.monotonic() + 30
                while consumer.routes()[topic].cluster_id != "west" and time.monotonic() < deadline:
                    consumer.poll(0.1)
                assert consumer.routes()[topic].cluster_id == "west", "no failover"
                assert read(consumer, MESSAGES) == MESSAGES  # west's copy, from the start
                took.append(timed_close(consumer))
        finally:
            pair.restore()
            pair.close()
    return {
        "rounds": rounds,
        "routed_ms": round(statistics.median(took) * 1000, 1),
        "routed_max_ms": round(max(took) * 1000, 1),
    }


def plain_dead() -> float:
    """One plain Consumer, in a group on a cluster that goes down before close()."""
    cluster = EmbeddedCluster()
    try:
        cluster.create_topic("dead", 2)
        fill(cluster.bootstrap_servers, "dead")
        consumer = Consumer({**GROUP, "group.id": "g-dead", "bootstrap.servers": cluster.bootstrap_servers})
        consumer.subscribe(["dead"])
        assert read(consumer, MESSAGES) == MESSAGES
        cluster.set_broker_down(-1)
        time.sleep(2.0)  # librdkafka sees every broker down
        return timed_close(consumer)
    finally:
        cluster.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9, help="healthy closes of each kind (default 9)")
    ap.add_argument("--failovers", type=int, default=3, help="closes after a failover (default 3)")
    ap.add_argument("--plain-dead", action="store_true", help="also time a plain Consumer on a dead cluster")
    args = ap.parse_args()
    cluster = EmbeddedCluster()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            conf_dir = Path(tmp) / "conf"
            conf_dir.mkdir()
            (conf_dir / "clusters.yaml").write_text(
                f"clusters:\n  - id: one\n    meta:\n      bootstrap.servers: '{cluster.bootstrap_servers}'\n"
            )
            (conf_dir / "route-rules.yaml").write_text(
                "route-rules:\n  - id: all\n    priority: 0\n    meta: {rule.isGlobal: true}\n"
                "    rule: use cluster one\n"
            )
            result: dict[str, Any] = {"healthy": healthy(args.rounds, conf_dir, cluster)}
    finally:
        cluster.close()
    if args.failovers:
        result["after_failover"] = after_failover(args.failovers)
    if args.plain_dead:
        result["plain_dead_s"] = round(plain_dead(), 1)
    result["machine"] = (
        f"{platform.platform()}, Python {platform.python_version()}, confluent-kafka "
        f"{metadata.version('confluent-kafka')}, librdkafka {confluent_kafka.libversion()[0]}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(json.dumps(result))
    if not args.failovers:  # a partial run: printed only
        return 0
    (HERE / "results-close.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "RESULTS.md").write_text(render_markdown(json.loads((HERE / "results.json").read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
