"""RoutedAsyncSerializingProducer / RoutedAsyncDeserializingConsumer next to confluent-kafka's
AsyncSerializingProducer / AsyncDeserializingConsumer, one cluster, in one process run (issue #28).

    .venv/bin/python bench/aio_serde.py            # writes bench/results-aio-serde.json
    .venv/bin/python bench/aio_serde.py --quick    # fewer rounds and messages
    .venv/bin/python bench/aio_serde.py --only consume --rounds 7   # one side, printed only

One in-process mock cluster (kbear.testing) and an in-memory asyncio Schema Registry
(``mock://``, named in clusters.yaml for kbear; both sides use the same
``AsyncSchemaRegistryClient``, kbear.schema_registry.async_registry_client). Avro values
(``AsyncAvroSerializer`` / ``AsyncAvroDeserializer``; kbear's built per cluster by
``per_cluster``) with string keys (``StringSerializer``).

- produce: N ``await producer.produce(topic, key=..., value=...)`` then ``await flush()``;
- consume: ``await consumer.consume(1000, 1.0)`` until N messages, assigned from the
  beginning, after the fetchers filled the local queues.

Timed in the process's CPU time (``time.process_time``: the event loop, the executor
threads, librdkafka's threads and the in-process mock cluster's, but not the other
processes of a shared machine, which make wall-clock rounds swing by a factor of 3).

Rounds alternate plain and routed; the figure is the median throughput ratio
routed/plain (1.0 = as fast as confluent-kafka), with the median µs per message.
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

import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.aio import AsyncDeserializingConsumer, AsyncSerializingProducer
from confluent_kafka.schema_registry.avro import AsyncAvroDeserializer, AsyncAvroSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PRODUCER_CONF, machine

from kbear.aio import RoutedAsyncDeserializingConsumer, RoutedAsyncSerializingProducer
from kbear.reload import replace_file
from kbear.schema_registry import async_registry_client, per_cluster
from kbear.testing import EmbeddedCluster

HERE = Path(__file__).resolve().parent
SCHEMA = """{"type": "record", "name": "Reading", "fields": [
  {"name": "seq", "type": "long"}, {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}"""
REGISTRY = {"url": "mock://bench-aio-serde"}
NO_WATCH = {"kbear.reload.interval.ms": 0}


async def alternate(
    raw: Callable[[], Awaitable[float]], routed: Callable[[], Awaitable[float]], rounds: int
) -> tuple[float, float, list[float]]:
    """Median seconds of each side over ``rounds`` alternating rounds, and each round's ratio."""
    raw_t: list[float] = []
    routed_t: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            raw_t.append(await raw())
            routed_t.append(await routed())
        else:
            routed_t.append(await routed())
            raw_t.append(await raw())
    return (
        statistics.median(raw_t),
        statistics.median(routed_t),
        [r / k for r, k in zip(raw_t, routed_t, strict=True)],
    )


def row(n: int, raw_s: float, routed_s: float, per_round: list[float]) -> dict[str, Any]:
    return {
        "messages": n,
        "raw_us_per_msg": round(raw_s / n * 1e6, 2),
        "routed_us_per_msg": round(routed_s / n * 1e6, 2),
        "ratio": round(statistics.median(per_round), 3),
        "ratio_per_round": [round(r, 3) for r in per_round],
    }


async def bench_produce(n: int, rounds: int, cluster: EmbeddedCluster, conf_dir: Path) -> dict[str, Any]:
    topic = "bench-aio-serde-produce"
    cluster.create_topic(topic, 4)
    data = [(f"k{i % 100}", {"seq": i, "sensor": f"s{i % 100}", "value": i * 0.5}) for i in range(n)]
    plain_value = await AsyncAvroSerializer(async_registry_client(REGISTRY), SCHEMA)

    async def run(producer: Any) -> float:
        produce = producer.produce
        t0 = time.process_time()
        for key, value in data:
            await produce(topic, key=key, value=value)
        await producer.flush()
        took = time.process_time() - t0
        await producer.close()
        return took

    async def raw() -> float:
        conf = {**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers}
        return await run(
            await AsyncSerializingProducer(
                {**conf, "key.serializer": StringSerializer(), "value.serializer": plain_value}
            )
        )

    async def routed() -> float:
        conf = {**PRODUCER_CONF, **NO_WATCH, "kbear.config": str(conf_dir)}
        value = per_cluster(lambda sr: AsyncAvroSerializer(sr, SCHEMA))
        return await run(
            await RoutedAsyncSerializingProducer(
                {**conf, "key.serializer": StringSerializer(), "value.serializer": value}
            )
        )

    raw_s, routed_s, per_round = await alternate(raw, routed, rounds)
    return row(n, raw_s, routed_s, per_round)


async def bench_consume(n: int, rounds: int, cluster: EmbeddedCluster, conf_dir: Path) -> dict[str, Any]:
    topic = "bench-aio-serde-consume"
    partitions = 4
    cluster.create_topic(topic, partitions)
    fill = await AsyncSerializingProducer(
        {
            **PRODUCER_CONF,
            "bootstrap.servers": cluster.bootstrap_servers,
            "key.serializer": StringSerializer(),
            "value.serializer": await AsyncAvroSerializer(async_registry_client(REGISTRY), SCHEMA),
        }
    )
    for i in range(n):
        await fill.produce(
            topic, key=f"k{i % 100}", value={"seq": i, "sensor": "s", "value": 0.5}, partition=i % 4
        )
    await fill.flush()
    await fill.close()
    plain_value = await AsyncAvroDeserializer(async_registry_client(REGISTRY), SCHEMA)
    base = {"enable.auto.commit": False, "log_level": 3, "queued.min.messages": 200_000}
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    groups = iter(range(10**6))

    async def run(consumer: Any) -> float:
        await consumer.assign(parts)
        got = 0
        deadline = time.perf_counter() + 120
        while got == 0 and time.perf_counter() < deadline:
            got += len(await consumer.consume(1000, 1.0))
        await asyncio.sleep(2.0)  # the fetchers fill the local queues: the timed part measures the client
        t0 = time.process_time()
        while got < n and time.perf_counter() < deadline:
            got += len(await consumer.consume(1000, 1.0))
        took = time.process_time() - t0
        await consumer.close()
        if got < n:
            raise RuntimeError(f"consumed {got} of {n}")
        return took

    async def raw() -> float:
        conf = {**base, "group.id": f"bench-{next(groups)}", "bootstrap.servers": cluster.bootstrap_servers}
        return await run(
            await AsyncDeserializingConsumer(
                {**conf, "key.deserializer": StringDeserializer(), "value.deserializer": plain_value}
            )
        )

    async def routed() -> float:
        conf = {**base, **NO_WATCH, "group.id": f"bench-{next(groups)}", "kbear.config": str(conf_dir)}
        value = per_cluster(lambda sr: AsyncAvroDeserializer(sr, SCHEMA))
        return await run(
            await RoutedAsyncDeserializingConsumer(
                {**conf, "key.deserializer": StringDeserializer(), "value.deserializer": value}
            )
        )

    raw_s, routed_s, per_round = await alternate(raw, routed, rounds)
    return row(n, raw_s, routed_s, per_round)


async def amain(quick: bool, only: str | None = None, rounds: int | None = None) -> dict[str, Any]:
    n, default_rounds = (5_000, 3) if quick else (20_000, 9)
    rounds = rounds or default_rounds
    cluster = EmbeddedCluster()
    conf_dir = Path(tempfile.mkdtemp(prefix="kbear-bench-aio-serde-"))
    meta = {"bootstrap.servers": cluster.bootstrap_servers, "schema.registry.url": REGISTRY["url"]}
    (conf_dir / "clusters.yaml").write_text(yaml.safe_dump({"clusters": [{"id": "A", "meta": meta}]}))
    rule = {"id": "all", "meta": {"rule.isGlobal": True}, "rule": "use cluster A"}
    replace_file(conf_dir / "route-rules.yaml", yaml.safe_dump({"route-rules": [rule]}))
    results: dict[str, Any] = {
        "machine": machine(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    try:
        if only in (None, "produce"):
            results["produce-avro"] = await bench_produce(n, rounds, cluster, conf_dir)
            print(f"produce avro: {results['produce-avro']}", flush=True)
        if only in (None, "consume"):
            results["consume-avro"] = await bench_consume(n, rounds, cluster, conf_dir)
            print(f"consume avro: {results['consume-avro']}", flush=True)
    finally:
        cluster.close()
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and messages")
    ap.add_argument("--only", choices=("produce", "consume"), help="one of the two (results not written)")
    ap.add_argument("--rounds", type=int, help="rounds (default 9; 3 with --quick)")
    args = ap.parse_args()
    results = asyncio.run(amain(args.quick, args.only, args.rounds))
    if args.only:
        return 0
    out = HERE / ("results-aio-serde-quick.json" if args.quick else "results-aio-serde.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
