"""kbear benchmarks: routed clients next to plain confluent-kafka, in one process run.

    .venv/bin/python bench/run.py            # every benchmark, writes bench/RESULTS.md and bench/results.json
    .venv/bin/python bench/run.py --quick    # fewer rounds and messages (a smoke run)
    .venv/bin/python bench/run.py --backend kafka   # produce/consume/dispatch rows on Apache Kafka

Each throughput figure is a ratio routed/raw (higher is better; 1.0 = as fast as
plain confluent-kafka) measured side by side: rounds alternate raw and routed,
and the median of the rounds is reported, with the per-call overhead in ns.
Clusters are librdkafka mock clusters in this process (kbear.testing), so the
figures measure client-side cost, not a network. ``--backend kafka`` runs the
one-cluster produce and consume rows and the two-cluster dispatch row against two
local Apache Kafka clusters instead (integration/kafka.py: JVM processes, jars
from Maven), kbear and plain confluent-kafka in the same run, and writes
bench/results-kafka.json and bench/RESULTS-kafka.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path
from typing import Any

from _common import fill, global_rule, machine, topic_rule, write_config
from _memory import bench_memory
from _report import render_markdown
from _routing import bench_lookup, bench_switch
from _throughput import bench_consume, bench_produce, bench_produce_dispatch, bench_turns

from kbear.testing import EmbeddedCluster

HERE = Path(__file__).resolve().parent


def start_clusters(backend: str, tmp: Path, results: dict[str, Any]) -> tuple[Any, Any]:
    """Two clusters, ``A`` and ``B``: librdkafka mock clusters, or Apache Kafka
    (one combined broker/controller each, started side by side; the version and
    start-up go into ``results["backend"]``)."""
    if backend == "mock":
        results["backend"] = {"name": "mock"}
        return EmbeddedCluster(), EmbeddedCluster()
    import sys
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(HERE.parent))  # the repository's integration/ package
    from integration.kafka import KafkaCluster

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(KafkaCluster, name, tmp) for name in ("A", "B")]
    a, b = (f.result() for f in futures)
    results["backend"] = {
        "name": "kafka",
        "version": a.version,
        "startup_s": [round(c.startup_s or 0.0, 1) for c in (a, b)],
        "heap": a.heap,
    }
    return a, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and messages")
    ap.add_argument("--render", action="store_true", help="only rewrite RESULTS.md from results.json")
    ap.add_argument(
        "--backend",
        choices=("mock", "kafka"),
        default="mock",
        help="mock: librdkafka mock clusters in this process (default); kafka: two local Apache Kafka "
        "clusters (JVM processes), for the produce1, dispatch and consume1 rows",
    )
    ap.add_argument(
        "--only",
        nargs="*",
        help="run only these benchmarks (produce1, produce2, dispatch, turns, consume1, consume2, aio, metrics, "
        "lookup, switch, memory) "
        "and update their figures in the existing results",
    )
    args = ap.parse_args()
    if args.render:
        (HERE / "RESULTS.md").write_text(render_markdown(json.loads((HERE / "results.json").read_text())))
        return 0
    rounds = 3 if args.quick else 9
    n = 50_000 if args.quick else 200_000
    kafka_rows = ["produce1", "dispatch", "consume1"]
    want = set(
        args.only
        or (kafka_rows if args.backend == "kafka" else None)
        or [
            "produce1",
            "produce2",
            "dispatch",
            "turns",
            "consume1",
            "consume2",
            "aio",
            "metrics",
            "lookup",
            "switch",
            "memory",
        ]
    )
    if args.backend == "kafka" and want - set(kafka_rows):
        ap.error(f"--backend kafka runs {', '.join(kafka_rows)} only")
    # one file for Apache Kafka's rows, quick or not (its header says which)
    name = "results-kafka" if args.backend == "kafka" else "results-quick" if args.quick else "results"
    results: dict[str, Any] = {}
    if args.only and (HERE / f"{name}.json").exists():
        # a partial run updates the figures it measures and keeps the others
        results = json.loads((HERE / f"{name}.json").read_text())
        results["rerun"] = {**results.get("rerun", {}), **dict.fromkeys(args.only, machine()["date"])}
    else:
        results["machine"] = machine()
    results["quick"] = args.quick
    tmp = Path(tempfile.mkdtemp(prefix="kbear-bench-"))
    a, b = start_clusters(args.backend, tmp, results)
    clusters = {"A": a, "B": b}
    try:
        parts_n = 8 if args.quick else 16
        for c in (a, b):
            for t in ("p1", "p2", "p3", "c1", "c2"):
                c.create_topic(t, parts_n)
        boot = {k: v.bootstrap_servers for k, v in clusters.items()}
        one = write_config(tmp / "one", boot, [global_rule("A")])
        two = write_config(
            tmp / "two", boot, [global_rule("A"), topic_rule("p3", "B"), topic_rule("c2", "B")]
        )
        if "produce1" in want:
            results["produce_one_cluster"] = bench_produce(n, rounds, one, {"A": a}, ["p1"], {"p1": "A"})
            print("produce, one cluster:", results["produce_one_cluster"], flush=True)
        if "produce2" in want:
            results["produce_two_clusters"] = bench_produce(
                n, rounds, two, clusters, ["p1", "p2", "p3"], {"p1": "A", "p2": "A", "p3": "B"}
            )
            print("produce, 3 topics on 2 clusters:", results["produce_two_clusters"], flush=True)
        if "dispatch" in want:
            # #25 item 5's method: 30 rounds of one block of 50,000 calls per way, taking turns
            blocks = rounds if args.quick else 30
            results["produce_dispatch"] = bench_produce_dispatch(
                blocks, two, clusters, ["p1", "p2", "p3"], {"p1": "A", "p2": "A", "p3": "B"}
            )
            print("produce, 3 topics on 2 clusters, by dispatcher:", results["produce_dispatch"], flush=True)
            results["produce_dispatch_one"] = bench_produce_dispatch(
                blocks, one, {"A": a}, ["p1"], {"p1": "A"}
            )
            print("produce, one cluster, CPU time:", results["produce_dispatch_one"], flush=True)
        if "turns" in want:
            for c, t in ((a, "q1"), (b, "q2")):
                c.create_topic(t, parts_n)
                fill(c, t, parts_n, 5_000 if args.quick else 10_000)
            turns_dir = write_config(tmp / "turns", boot, [global_rule("A"), topic_rule("q2", "B")])
            for mode, blk in (("poll", 1_000), ("consume", 10)):
                key = f"turns_{mode}"
                results[key] = bench_turns(
                    rounds if args.quick else 15,
                    turns_dir,
                    clusters,
                    {"q1": "A", "q2": "B"},
                    parts_n,
                    10,
                    blk,
                    mode,
                )
                print(key, results[key], flush=True)
        per_part = 5_000 if args.quick else 20_000  # 20k x 100 B a partition: under the mock's ~5 MB
        if {"consume1", "consume2"} & want:
            fill(a, "c1", parts_n, per_part)
            fill(b, "c2", parts_n, per_part)
        for mode in ("consume", "poll"):
            if "consume1" in want:
                key = f"{mode}_one_cluster"
                results[key] = bench_consume(
                    rounds, one, clusters, {"c1": "A"}, parts_n, parts_n * per_part, mode
                )
                print(key, results[key], flush=True)
            if "consume2" in want:
                key = f"{mode}_two_clusters"
                results[key] = bench_consume(
                    rounds, two, clusters, {"c1": "A", "c2": "B"}, parts_n, 2 * parts_n * per_part, mode
                )
                print(key, results[key], flush=True)
        if "aio" in want:
            # The asyncio clients next to confluent_kafka.aio's (bench/aio.py has the live-move rows).
            import asyncio

            import aio

            one_dir = write_config(tmp / "aio-one", {"A": a.bootstrap_servers}, [global_rule("A")])
            results["aio_produce"] = asyncio.run(aio.bench_produce(n, rounds, one_dir, a))
            results["aio_consume"] = asyncio.run(aio.bench_consume(min(n, 160_000), rounds, one_dir, a))
            print("aio:", results["aio_produce"], results["aio_consume"], flush=True)
        if "metrics" in want:
            # kbear.metrics on / off (bench/metrics.py; its own cluster, statistics every 1 s, scraped every 1 s)
            import metrics as metrics_bench

            results["metrics"] = metrics_bench.measure(args.quick)
            print("metrics:", results["metrics"], flush=True)
        if "lookup" in want:
            lookups = 2_000 if args.quick else 20_000
            results["lookup"] = [
                bench_lookup(tmp, r, 100_000 if not args.quick else 10_000, lookups)
                for r in ((1_000, 10_000) if not args.quick else (100, 1_000))
            ]
            print("lookup:", results["lookup"], flush=True)
        if "switch" in want:
            results["switch"] = bench_switch(tmp, 1000)
            print("switch:", results["switch"], flush=True)
        if "memory" in want:
            results["memory"] = bench_memory(1 if args.quick else 3)
            print("memory:", results["memory"], flush=True)
    finally:
        a.close()
        b.close()
    results["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    (HERE / f"{name}.json").write_text(json.dumps(results, indent=2))
    md = HERE / (name.replace("results", "RESULTS") + ".md")
    md.write_text(render_markdown(results))
    print(f"wrote {HERE / name}.json and {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
