"""Start-to-first-message: a ClientBalancedConsumer next to a subscribing RoutedConsumer
of the same group, on a warm in-process cluster.

    PYTHONPATH=. .venv/bin/python bench/balanced_start.py [--runs 7] [--rebalance-delay-ms 3000]

Each round uses a fresh group shared by the three readers (none commits, all start
at the earliest offset): a client-balanced node (``source_count=1``: it owns every
partition; no group join), and a RoutedConsumer that subscribes with the classic
protocol and with the next-generation protocol (``group.protocol=consumer``,
KIP-848). The time runs from the constructor to the first message returned by
``poll``; the order of the three alternates between rounds. Prints the median and
the range of the rounds. The cluster is librdkafka's mock (kbear.testing); its
classic group coordinator waits ``group.initial.rebalance.delay.ms`` before the
first rebalance of a new group: 0 by default here, Apache Kafka's broker default
is 3000 (``--rebalance-delay-ms 3000``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from kbear import ClientBalancedConsumer, RoutedConsumer, Router
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

TOPIC = "bench.balanced"
POLL_S = 0.01
LIMIT_S = 30.0


def first_message(make: Callable[[], Any], start: Callable[[Any], None]) -> float:
    """Seconds from construction to the first message (``LIMIT_S`` bounds the wait)."""
    t0 = time.perf_counter()
    consumer = make()
    try:
        start(consumer)
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(POLL_S)
            if msg is not None and msg.error() is None:
                return time.perf_counter() - t0
        raise RuntimeError(f"no message within {LIMIT_S} s")
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rebalance-delay-ms", type=int, default=0)
    args = parser.parse_args()
    cluster = EmbeddedCluster(group_initial_rebalance_delay_ms=args.rebalance_delay_ms)
    with cluster, tempfile.TemporaryDirectory() as tmp:
        cluster.create_topic(TOPIC, 4)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        for i in range(4000):
            producer.produce(TOPIC, value=b"x" * 100, key=b"%d" % i)
        producer.flush(10)
        directory = Path(tmp)
        replace_file(
            directory / "clusters.yaml",
            f"clusters:\n  - id: A\n    meta:\n      bootstrap.servers: {cluster.bootstrap_servers}\n",
        )
        replace_file(
            directory / "route-rules.yaml",
            "route-rules:\n  - id: all\n    meta:\n      rule.isGlobal: true\n    rule: use cluster A\n",
        )
        router = Router.from_path(directory)
        base = {"auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 3}
        modes: dict[str, Callable[[str], float]] = {
            "client-balanced (no join)": lambda g: first_message(
                lambda: ClientBalancedConsumer(
                    {**base, "group.id": g}, source_count=1, node_id=0, router=router
                ),
                lambda c: c.subscribe([TOPIC]),
            ),
            "subscribe, classic protocol": lambda g: first_message(
                lambda: RoutedConsumer({**base, "group.id": g}, router=router),
                lambda c: c.subscribe([TOPIC]),
            ),
            "subscribe, group.protocol=consumer": lambda g: first_message(
                lambda: RoutedConsumer({**base, "group.id": g, "group.protocol": "consumer"}, router=router),
                lambda c: c.subscribe([TOPIC]),
            ),
        }
        names = list(modes)
        results: dict[str, list[float]] = {name: [] for name in names}
        modes[names[0]]("bench-warmup")  # metadata and connections of the process warmed once
        for run in range(args.runs):
            order = names[run % len(names) :] + names[: run % len(names)]
            for name in order:
                results[name].append(modes[name](f"bench-{run}"))
        router.close()
    print(
        f"start to first message, {args.runs} rounds, group.initial.rebalance.delay.ms "
        f"{args.rebalance_delay_ms}, median (min-max), ms:"
    )
    for name, times in results.items():
        ms = [t * 1000 for t in times]
        print(f"  {name:<36} {statistics.median(ms):8.1f}  ({min(ms):.1f}-{max(ms):.1f})")


if __name__ == "__main__":
    main()
