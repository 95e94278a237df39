"""Benchmarks of the asyncio clients (issue #14), next to confluent-kafka's own ``aio`` clients.

    .venv/bin/python bench/aio.py            # writes bench/RESULTS-aio.md and bench/results-aio.json
    .venv/bin/python bench/aio.py --quick    # fewer rounds and messages (a smoke run)

- produce: ``await producer.produce(...)`` for N messages then ``flush()``, one
  cluster, ``RoutedAIOProducer`` vs ``confluent_kafka.aio.AIOProducer`` (same
  batch size), alternating rounds, median ratio raw/routed (1.0 = as fast);
- consume: ``await consumer.consume(1000, 1.0)`` until N messages, one cluster,
  ``RoutedAIOConsumer`` vs ``AIOConsumer``, assigned from the beginning;
- move: a live move of a topic under load through both asyncio clients (a
  producer task, a consumer task), with a task scheduled every 10 ms measuring
  the longest time the event loop was held; nothing lost, per-key order kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.aio import AIOConsumer, AIOProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRODUCER_CONF, VALUE, fill, global_rule, machine, topic_rule, write_config

from kbear.aio import RoutedAIOConsumer, RoutedAIOProducer
from kbear.testing import EmbeddedCluster, LoopWatch

HERE = Path(__file__).resolve().parent
NO_WATCH = {"kbear.reload.interval.ms": 0}


async def median_ratio(
    raw: Callable[[], Awaitable[float]], routed: Callable[[], Awaitable[float]], rounds: int
) -> tuple[float, float, float]:
    raw_t: list[float] = []
    routed_t: list[float] = []
    for i in range(rounds):
        order = (raw, routed) if i % 2 == 0 else (routed, raw)
        for fn in order:
            (raw_t if fn is raw else routed_t).append(await fn())
    r, k = statistics.median(raw_t), statistics.median(routed_t)
    return r, k, r / k


async def bench_produce(n: int, rounds: int, conf_dir: Path, cluster: EmbeddedCluster) -> dict[str, Any]:
    topic = "bench-aio-produce"
    cluster.create_topic(topic, 4)

    async def run(make: Callable[[], Any]) -> float:
        producer = make()
        t0 = time.perf_counter()
        for _ in range(n):
            await producer.produce(topic, value=VALUE)
        await producer.flush()
        elapsed = time.perf_counter() - t0
        await producer.close()
        return elapsed

    async def raw() -> float:
        return await run(
            lambda: AIOProducer({**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers})
        )

    async def routed() -> float:
        return await run(
            lambda: RoutedAIOProducer({**PRODUCER_CONF, "kbear.config": str(conf_dir), **NO_WATCH})
        )

    raw_s, routed_s, ratio = await median_ratio(raw, routed, rounds)
    per_message_ns = (routed_s - raw_s) / n * 1e9
    return {
        "messages": n,
        "raw_s": raw_s,
        "routed_s": routed_s,
        "ratio": ratio,
        "overhead_ns_per_message": per_message_ns,
    }


async def bench_consume(total: int, rounds: int, conf_dir: Path, cluster: EmbeddedCluster) -> dict[str, Any]:
    topic = "bench-aio-consume"
    partitions = 8  # at most 20k x 100 B a partition: the mock keeps about 5 MB of each
    cluster.create_topic(topic, partitions)
    fill(cluster, topic, partitions, total // partitions)
    conf = {
        "group.id": "bench-aio",
        "enable.auto.commit": False,
        "log_level": 3,
        "queued.min.messages": 200_000,
    }
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]

    async def run(consumer: Any) -> float:
        await consumer.assign(parts)
        got = 0
        deadline = time.perf_counter() + 180
        while got == 0 and time.perf_counter() < deadline:
            got += len(await consumer.consume(1000, 1.0))
        await asyncio.sleep(2.5)  # let the fetchers fill the local queue, as bench/run.py
        t0 = time.perf_counter()
        while got < total and time.perf_counter() < deadline:
            got += len(await consumer.consume(1000, 1.0))
        elapsed = time.perf_counter() - t0
        await consumer.close()
        if got < total:
            raise RuntimeError(f"consumed {got} of {total}")
        return elapsed

    async def raw() -> float:
        return await run(AIOConsumer({**conf, "bootstrap.servers": cluster.bootstrap_servers}))

    async def routed() -> float:
        return await run(RoutedAIOConsumer({**conf, "kbear.config": str(conf_dir), **NO_WATCH}))

    raw_s, routed_s, ratio = await median_ratio(raw, routed, rounds)
    per_message_ns = (routed_s - raw_s) / total * 1e9
    return {
        "messages": total,
        "raw_s": raw_s,
        "routed_s": routed_s,
        "ratio": ratio,
        "overhead_ns_per_message": per_message_ns,
    }


async def bench_move(
    n: int, tmp: Path, a: EmbeddedCluster, b: EmbeddedCluster, run_id: int
) -> dict[str, Any]:
    """One live move of a topic from A to B under load through both asyncio clients."""
    topic = f"bench-aio-move-{run_id}"
    a.create_topic(topic, 4)
    b.create_topic(topic, 4)
    rules = [global_rule("A")]
    conf_dir = write_config(
        tmp / f"move{run_id}", {"A": a.bootstrap_servers, "B": b.bootstrap_servers}, rules
    )
    watch = {"kbear.reload.interval.ms": 100}
    producer = RoutedAIOProducer(
        {"kbear.config": str(conf_dir), **watch}, batch_size=200, buffer_timeout=0.05
    )
    consumer = RoutedAIOConsumer(
        {
            "kbear.config": str(conf_dir),
            **watch,
            "group.id": f"bench-move-{run_id}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    await consumer.subscribe([topic])
    # Measured from here: construction is synchronous, as confluent-kafka's (it
    # builds the clients and starts the configuration watcher's thread).
    beat = LoopWatch()
    keys = [b"k%d" % i for i in range(16)]
    sent: list[bytes] = []
    moved_at = 0.0

    async def produce() -> None:
        nonlocal moved_at
        for i in range(n):
            key = keys[i % len(keys)]
            value = b"%s:%07d" % (key, i)
            await producer.produce(topic, value=value, key=key)
            sent.append(value)
            if i == n // 3:
                write_config(
                    conf_dir,
                    {"A": a.bootstrap_servers, "B": b.bootstrap_servers},
                    [topic_rule(topic, "B"), *rules],
                )
                moved_at = time.perf_counter()
            if i % 200 == 0:
                await asyncio.sleep(0.005)
        await producer.flush(30)

    producing = asyncio.create_task(produce())
    got: list[bytes] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (producing.done() and len(got) >= len(sent)):
        got.extend(m.value() for m in await consumer.consume(1000, 0.1) if m.error() is None)
    await producing
    worst = await beat.stop()
    order_ok = all(
        [v for v in got if v.startswith(k + b":")] == sorted(v for v in got if v.startswith(k + b":"))
        for k in keys
    )
    result = {
        "messages": len(sent),
        "consumed": len(got),
        "lost": len(set(sent) - set(got)),
        "duplicates": len(got) - len(set(got)),
        "order_kept": order_ok,
        "moved": producer.route(topic).cluster_id == "B" and consumer.routes()[topic].cluster_id == "B",
        "loop_held_max_ms": worst * 1000,
        "moved_at_s": moved_at,
    }
    await producer.close()
    await consumer.close()
    return result


async def bench_loop_baseline(n: int, a: EmbeddedCluster, run_id: int) -> dict[str, Any]:
    """The same load through confluent-kafka's own aio clients, no routing, no move:
    how long the event loop is held by the machine and the clients alone."""
    topic = f"bench-aio-base-{run_id}"
    a.create_topic(topic, 4)
    producer = AIOProducer({"bootstrap.servers": a.bootstrap_servers}, batch_size=200, buffer_timeout=0.05)
    consumer = AIOConsumer(
        {
            "bootstrap.servers": a.bootstrap_servers,
            "group.id": f"bench-base-{run_id}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    await consumer.subscribe([topic])
    beat = LoopWatch()

    async def produce() -> None:
        for i in range(n):
            await producer.produce(topic, value=b"%07d" % i, key=b"k%d" % (i % 16))
            if i % 200 == 0:
                await asyncio.sleep(0.005)
        await producer.flush(30)

    producing = asyncio.create_task(produce())
    got = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (producing.done() and got >= n):
        got += sum(1 for m in await consumer.consume(1000, 0.1) if m.error() is None)
    await producing
    worst = await beat.stop()
    await producer.close()
    await consumer.close()
    return {"messages": n, "consumed": got, "loop_held_max_ms": worst * 1000}


async def amain(quick: bool) -> dict[str, Any]:
    rounds = 3 if quick else 7
    n = 20_000 if quick else 200_000
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        a, b = EmbeddedCluster(), EmbeddedCluster()
        try:
            one = write_config(tmp / "one", {"A": a.bootstrap_servers}, [global_rule("A")])
            produce = await bench_produce(n, rounds, one, a)
            consume = await bench_consume(min(n, 160_000), rounds, one, a)
            moves: list[dict[str, Any]] = []
            baselines: list[dict[str, Any]] = []
            for i in range(2 if quick else 5):  # alternating: the machine's load hits both alike
                baselines.append(await bench_loop_baseline(5_000 if quick else 30_000, a, i))
                moves.append(await bench_move(5_000 if quick else 30_000, tmp, a, b, i))
        finally:
            b.close()
            a.close()
    return {
        "machine": machine(),
        "quick": quick,
        "produce": produce,
        "consume": consume,
        "moves": moves,
        "baselines": baselines,
    }


def render(r: dict[str, Any]) -> str:
    lines = [
        "# kbear asyncio benchmarks (bench/aio.py)",
        "",
        f"Machine: {r['machine']}; quick run: {r['quick']}.",
        "",
        "| benchmark | target | measured |",
        "|---|---|---|",
        f"| produce, one cluster: RoutedAIOProducer / confluent_kafka.aio.AIOProducer "
        f"({r['produce']['messages']:,} x 100 B, median of alternating rounds) | >= 0.95 | "
        f"{r['produce']['ratio']:.2f} |",
        f"| consume(1000), one cluster: RoutedAIOConsumer / AIOConsumer ({r['consume']['messages']:,} messages) "
        f"| >= 0.95 | {r['consume']['ratio']:.2f} |",
    ]
    for i, m in enumerate(r["moves"]):
        lines.append(
            f"| live move {i + 1} ({m['messages']:,} messages, 16 keys): lost / duplicates / order kept / "
            f"event loop held at most | 0 / - / yes / <= 50 ms | {m['lost']} / {m['duplicates']} / "
            f"{'yes' if m['order_kept'] else 'NO'} / {m['loop_held_max_ms']:.1f} ms |"
        )
    for i, m in enumerate(r["baselines"]):
        lines.append(
            f"| the same load through confluent_kafka.aio, no routing, no move, run {i + 1}: event loop held "
            f"at most | (reference) | {m['loop_held_max_ms']:.1f} ms |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds and messages")
    args = parser.parse_args()
    result = asyncio.run(amain(args.quick))
    suffix = "-quick" if args.quick else ""
    (HERE / f"results-aio{suffix}.json").write_text(json.dumps(result, indent=2, default=str))
    text = render(result)
    (HERE / f"RESULTS-aio{suffix}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
