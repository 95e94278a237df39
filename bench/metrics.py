"""Metrics on / metrics off: one-cluster produce and consume through kbear's routed clients.

    PYTHONPATH=. .venv/bin/python bench/metrics.py            # 9 rounds of 800000 messages
    PYTHONPATH=. .venv/bin/python bench/metrics.py --quick    # 3 rounds of 50000

"on" = ``kbear.metrics.instrument()`` in force when the client is built, with a
statistics interval of 1000 ms (five times more often than the default 5000 ms),
and a thread scraping the registry every second meanwhile (as a Prometheus
server would, but more often). Rounds alternate off and on; the ratio is the
median time off / median time on (throughput on / off; 1.0 = no cost).
Clusters are librdkafka mock clusters in this process: client-side cost only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry, generate_latest

from kbear import RoutedConsumer, RoutedProducer
from kbear.metrics import instrument, uninstrument
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

VALUE = b"x" * 100
PRODUCER_CONF = {"linger.ms": 5, "queue.buffering.max.messages": 2_000_000, "log_level": 3}
STATS_MS = 1000
#: 16 partitions: the mock keeps about 5 MB of each, so 800,000 x 100 B stay readable
PARTITIONS = 16


def write_config(directory: Path, servers: str) -> Path:
    import yaml

    (directory / "clusters.yaml").write_text(
        yaml.safe_dump({"clusters": [{"id": "A", "meta": {"bootstrap.servers": servers}}]})
    )
    rules = [{"id": "all", "meta": {"rule.isGlobal": True}, "rule": "use cluster A"}]
    replace_file(directory / "route-rules.yaml", yaml.safe_dump({"route-rules": rules}))
    return directory


def alternate(off: Callable[[], float], on: Callable[[], float], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(rounds):
        for name, fn in (("off", off), ("on", on)) if i % 2 == 0 else (("on", on), ("off", off)):
            times[name].append(fn())
    off_s, on_s = statistics.median(times["off"]), statistics.median(times["on"])
    return {"off_s": off_s, "on_s": on_s, "ratio": off_s / on_s}


def bench_produce(conf_dir: Path, n: int, rounds: int, registry: CollectorRegistry) -> dict[str, float]:
    common = {**PRODUCER_CONF, "kbear.config": str(conf_dir), "kbear.reload.interval.ms": 0}
    off = RoutedProducer(common, topics=["bench"])
    instrument(registry, stats_interval_ms=STATS_MS)
    on = RoutedProducer(common, topics=["bench"])  # built while instrumented: statistics on

    def run(producer: RoutedProducer) -> Callable[[], float]:
        def timed() -> float:
            t0 = time.perf_counter()
            produce = producer.produce
            for _ in range(n):
                produce("bench", VALUE)
            producer.flush()
            return time.perf_counter() - t0

        return timed

    result = alternate(run(off), run(on), rounds)
    off.close()
    on.close()
    uninstrument(registry)
    return result


def bench_consume(conf_dir: Path, total: int, rounds: int, registry: CollectorRegistry) -> dict[str, float]:
    conf = {
        "group.id": "bench",
        "enable.auto.commit": False,
        "log_level": 3,
        "queued.min.messages": 200_000,
        "kbear.config": str(conf_dir),
        "kbear.reload.interval.ms": 0,
    }

    def run(metrics_on: bool) -> Callable[[], float]:
        def timed() -> float:
            if metrics_on:
                instrument(registry, stats_interval_ms=STATS_MS)
            consumer = RoutedConsumer(conf)
            try:
                consumer.assign(
                    [TopicPartition("bench-consume", p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
                )
                got, deadline = 0, time.perf_counter() + 60
                while got == 0 and time.perf_counter() < deadline:
                    got += 0 if consumer.poll(1.0) is None else 1
                time.sleep(1.0)  # let the fetchers fill the local queue: the timed part is the client
                poll = consumer.poll
                t0 = time.perf_counter()
                while got < total and time.perf_counter() < deadline:
                    got += 0 if poll(1.0) is None else 1
                took = time.perf_counter() - t0
                if got < total:
                    raise RuntimeError(f"consumed {got} of {total}")
                return took
            finally:
                consumer.close()
                uninstrument(registry)

        return timed

    return alternate(run(False), run(True), rounds)


def measure(quick: bool) -> dict[str, Any]:
    """Both rows: ``{"produce": {...}, "consume": {...}, "rounds": n}`` (each with
    ``off_s``, ``on_s``, ``ratio``; ``bench/run.py --only metrics`` uses it)."""
    # rounds of about a second or more: shorter ones measure the machine's noise
    # (one statistics callback costs ~0.2 ms, one scrape ~1 ms: see docs/guides/metrics.md)
    n, rounds = (50_000, 3) if quick else (800_000, 9)
    cluster = EmbeddedCluster()
    cluster.create_topic("bench", PARTITIONS)
    cluster.create_topic("bench-consume", PARTITIONS)  # only the filler's messages
    registry = CollectorRegistry()
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(1.0):
            generate_latest(registry)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    with tempfile.TemporaryDirectory() as tmp:
        conf_dir = write_config(Path(tmp), cluster.bootstrap_servers)
        produce = bench_produce(conf_dir, n, rounds, registry)
        filler = Producer({**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers})
        for i in range(n):
            filler.produce("bench-consume", VALUE, partition=i % PARTITIONS)
            if i % 10_000 == 0:
                filler.poll(0)
        filler.flush()
        # the mock cluster drops its oldest segments: read what it keeps
        probe = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "probe"})
        marks = [probe.get_watermark_offsets(TopicPartition("bench-consume", p)) for p in range(PARTITIONS)]
        probe.close()
        kept = sum(high - low for low, high in marks)
        consume = bench_consume(conf_dir, kept, rounds, registry)
    stop.set()
    scraper.join()
    cluster.close()
    consume["messages"] = kept
    produce["messages"] = n
    return {"produce": produce, "consume": consume, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 50000 messages")
    args = parser.parse_args(argv)
    measured = measure(args.quick)
    rounds = measured["rounds"]
    rows: list[tuple[str, dict[str, Any]]] = [
        ("produce, one cluster", measured["produce"]),
        ("consume (poll), one cluster", measured["consume"]),
    ]
    print(
        f"| benchmark ({rounds} rounds) | messages | metrics off (s) | metrics on (s) | throughput on / off |"
    )
    print("|---|---|---|---|---|")
    for name, r in rows:
        count = int(r["messages"])
        print(f"| {name} | {count} | {r['off_s']:.3f} | {r['on_s']:.3f} | {r['ratio']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
