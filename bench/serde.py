"""RoutedSerializingProducer / RoutedDeserializingConsumer next to confluent-kafka's
SerializingProducer / DeserializingConsumer, one cluster, in one process run (issue #28).

    .venv/bin/python bench/serde.py            # writes bench/results-serde.json
    .venv/bin/python bench/serde.py --quick    # fewer rounds and messages

One in-process mock cluster (kbear.testing) with a Schema Registry in memory
(``mock://``; kbear finds it in clusters.yaml, ``schema.registry.url``). Two
serdes: Avro values with string keys (``AvroSerializer`` / ``AvroDeserializer``;
kbear's built per cluster by ``kbear.schema_registry.per_cluster`` over the same
registry client) and string keys and values (``StringSerializer``; the cheapest
serializer, where kbear's per-message cost weighs the most).

- produce: N ``produce(topic, key=..., value=...)`` calls timed in the calling
  thread's CPU time (the serialization and kbear's per-call work; the
  ``flush()`` after them is not timed: its delivery timing varies by more than
  the difference between clients on a loaded machine);
- poll: N messages read with ``poll(0)`` after the local queues are filled
  (a new group assigning from the beginning per round), timed in the calling
  thread's CPU time.

Rounds alternate plain and routed; the figure is the median throughput ratio
routed/plain (1.0 = as fast as confluent-kafka), with the median ns per message.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import PRODUCER_CONF, machine, median_ratio
from confluent_kafka import OFFSET_BEGINNING, DeserializingConsumer, SerializingProducer, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from kbear import RoutedDeserializingConsumer, RoutedSerializingProducer
from kbear.reload import replace_file
from kbear.schema_registry import per_cluster, registry_client
from kbear.testing import EmbeddedCluster

HERE = Path(__file__).resolve().parent
SCHEMA = """{"type": "record", "name": "Reading", "fields": [
  {"name": "seq", "type": "long"}, {"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}"""
REGISTRY = "mock://bench-serde"


def serdes(kind: str, routed: bool, out: bool) -> dict[str, Any]:
    """The serde settings of one client: ``out`` serializers, else deserializers."""
    if kind == "string":
        if out:
            return {"key.serializer": StringSerializer(), "value.serializer": StringSerializer()}
        return {"key.deserializer": StringDeserializer(), "value.deserializer": StringDeserializer()}
    if out:
        value: Any = per_cluster(lambda sr: AvroSerializer(sr, SCHEMA)) if routed else None
        value = value or AvroSerializer(registry_client({"url": REGISTRY}), SCHEMA)
        return {"key.serializer": StringSerializer(), "value.serializer": value}
    value = per_cluster(lambda sr: AvroDeserializer(sr, SCHEMA)) if routed else None
    value = value or AvroDeserializer(registry_client({"url": REGISTRY}), SCHEMA)
    return {"key.deserializer": StringDeserializer(), "value.deserializer": value}


def records(kind: str, n: int) -> list[tuple[str, Any]]:
    if kind == "string":
        return [(f"k{i % 100}", f"reading {i} of sensor {i % 100}: {i * 0.5}") for i in range(n)]
    return [(f"k{i % 100}", {"seq": i, "sensor": f"s{i % 100}", "value": i * 0.5}) for i in range(n)]


def bench_produce(
    kind: str, n: int, rounds: int, cluster: EmbeddedCluster, directory: Path
) -> dict[str, Any]:
    topic = f"produce-{kind}"
    cluster.create_topic(topic, 4)
    plain = SerializingProducer(
        {**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers, **serdes(kind, False, True)}
    )
    routed = RoutedSerializingProducer(
        {
            **PRODUCER_CONF,
            "kbear.config": str(directory),
            "kbear.reload.interval.ms": 0,
            **serdes(kind, True, True),
        }
    )
    data = records(kind, n)

    def run(producer: Any) -> float:
        produce = producer.produce
        t0 = time.thread_time()
        for key, value in data:
            produce(topic, key=key, value=value)
        took = time.thread_time() - t0
        producer.flush()
        return took

    per_round: list[float] = []
    raw_s, routed_s, ratio = median_ratio(lambda: run(plain), lambda: run(routed), rounds, per_round)
    plain.close()
    routed.close()
    return _row(n, raw_s, routed_s, ratio, per_round)


def bench_poll(kind: str, n: int, rounds: int, cluster: EmbeddedCluster, directory: Path) -> dict[str, Any]:
    topic = f"poll-{kind}"
    cluster.create_topic(topic, 4)
    fill = SerializingProducer(
        {**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers, **serdes(kind, False, True)}
    )
    for i, (key, value) in enumerate(records(kind, n)):
        fill.produce(topic, key=key, value=value, partition=i % 4)
        if i % 10_000 == 0:
            fill.poll(0)
    fill.flush()
    fill.close()
    made = iter(range(10**6))
    base = {"enable.auto.commit": False, "log_level": 3, "queued.min.messages": 200_000}

    def run(routed: bool) -> float:
        group = f"bench-serde-{kind}-{next(made)}"
        if routed:
            consumer: Any = RoutedDeserializingConsumer(
                {
                    **base,
                    "group.id": group,
                    "kbear.config": str(directory),
                    "kbear.reload.interval.ms": 0,
                    **serdes(kind, True, False),
                }
            )
        else:
            consumer = DeserializingConsumer(
                {
                    **base,
                    "group.id": group,
                    "bootstrap.servers": cluster.bootstrap_servers,
                    **serdes(kind, False, False),
                }
            )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
        deadline = time.monotonic() + 60
        got = 0
        while not got and time.monotonic() < deadline:
            got = consumer.poll(1.0) is not None
        time.sleep(2.0)  # the fetchers fill the local queues: the timed part measures the client
        poll = consumer.poll
        t0, count = time.thread_time(), 1
        while count < n:
            count += poll(0) is not None
        took = time.thread_time() - t0
        consumer.close()
        return took

    per_round: list[float] = []
    raw_s, routed_s, ratio = median_ratio(lambda: run(False), lambda: run(True), rounds, per_round)
    return _row(n, raw_s, routed_s, ratio, per_round)


def _row(n: int, raw_s: float, routed_s: float, ratio: float, per_round: list[float]) -> dict[str, Any]:
    """One figure: median ns per message each way, the median ratio, each round's ratio."""
    return {
        "messages": n,
        "raw_ns_per_msg": round(raw_s / n * 1e9),
        "routed_ns_per_msg": round(routed_s / n * 1e9),
        "ratio": round(ratio, 3),
        "ratio_per_round": [round(r, 3) for r in per_round],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and messages")
    args = ap.parse_args()
    n, rounds = (10_000, 3) if args.quick else (40_000, 15)
    cluster = EmbeddedCluster()
    directory = Path(tempfile.mkdtemp(prefix="kbear-bench-serde-"))
    (directory / "clusters.yaml").write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "id": "A",
                        "meta": {
                            "bootstrap.servers": cluster.bootstrap_servers,
                            "schema.registry.url": REGISTRY,
                        },
                    }
                ]
            }
        )
    )
    rule = {"id": "all", "meta": {"rule.isGlobal": True}, "rule": "use cluster A"}
    replace_file(directory / "route-rules.yaml", yaml.safe_dump({"route-rules": [rule]}))
    results: dict[str, Any] = {
        "machine": machine(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for kind in ("avro", "string"):
        results[f"produce-{kind}"] = bench_produce(kind, n, rounds, cluster, directory)
        print(f"produce {kind}: {results[f'produce-{kind}']}", flush=True)
        results[f"poll-{kind}"] = bench_poll(kind, n // 2, rounds, cluster, directory)
        print(f"poll {kind}: {results[f'poll-{kind}']}", flush=True)
    cluster.close()
    out = HERE / ("results-serde-quick.json" if args.quick else "results-serde.json")
    out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
