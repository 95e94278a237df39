"""An asyncio service on routed topics: RoutedAIOProducer and RoutedAIOConsumer.

    .venv/bin/python examples/asyncio_service.py

Starts two embedded (in-process) clusters, copies examples/demo-config, and runs
an asyncio "service" as the uat environment: a producer task sending audit events,
a consumer task reading them, and a heartbeat task. Midway, the rule that keeps
uat's audit on east is removed from the copied route-rules.yaml: both clients
follow the move to west (the producer drains east first, the consumer reads
east's tail and commits there), while the event loop keeps serving the
heartbeat. It prints where each message was produced and read, the longest
time the event loop was held, and exits 1 if a message was lost or read twice.

Against your own clusters, set KBEAR_CONFIG to a configuration directory that
routes the topic ``audit``; nothing is edited then.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kbear.aio import RoutedAIOConsumer, RoutedAIOProducer
from kbear.reload import replace_file
from kbear.testing import EmbeddedCluster

MESSAGES = 2000


async def service(config_dir: str, edit: Path | None) -> int:
    common = {
        "kbear.config": config_dir,
        "kbear.client.id": "asyncio-service",
        "kbear.client.meta.env": "uat",
        "kbear.reload.interval.ms": 200,
    }
    producer = RoutedAIOProducer(common, batch_size=100, buffer_timeout=0.05)
    consumer = RoutedAIOConsumer(
        {
            **common,
            "group.id": "asyncio-service",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    moves: list[str] = []
    producer.on_route_change(
        lambda old, new: moves.append(f"producer: {old.cluster_id} -> {new and new.cluster_id}")
    )

    async def consumer_moved(old: object, new: object) -> None:  # async callbacks work too
        moves.append(f"consumer: {getattr(old, 'cluster_id', '?')} -> {getattr(new, 'cluster_id', None)}")

    consumer.on_route_change(consumer_moved)
    await consumer.subscribe(["audit"])
    worst = 0.0
    running = True

    async def heartbeat() -> None:
        nonlocal worst
        while running:
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - t0 - 0.01)

    async def produce() -> list[bytes]:
        sent = []
        for i in range(MESSAGES):
            value = b"event-%05d" % i
            await producer.produce("audit", value=value, key=b"user-%d" % (i % 10))
            sent.append(value)
            if i == MESSAGES // 2 and edit is not None:
                rules = yaml.safe_load(edit.read_text())
                rules["route-rules"] = [r for r in rules["route-rules"] if r["id"] != "uat-audit-on-east"]
                replace_file(edit, yaml.safe_dump(rules, sort_keys=False))
                print("rule uat-audit-on-east removed: audit moves from east to west")
            if i % 50 == 0:
                await asyncio.sleep(0.01)
        await producer.flush(30)
        return sent

    beat = asyncio.create_task(heartbeat())
    producing = asyncio.create_task(produce())
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (producing.done() and len(got) >= MESSAGES):
        for msg in await consumer.consume(500, 0.1):
            if msg.error() is None:
                got[msg.value()] = got.get(msg.value(), 0) + 1
    sent = await producing
    running = False
    await beat
    now = (producer.route("audit").cluster_id, consumer.routes()["audit"].cluster_id)
    print(f"audit now: producer -> {now[0]}, consumer -> {now[1]}")
    print("\n".join(moves))
    await producer.close()
    await consumer.close()
    lost = [v for v in sent if v not in got]
    twice = [v for v, n in got.items() if n > 1]
    print(f"produced {len(sent)}, consumed {len(got)}, lost {len(lost)}, read twice {len(twice)}")
    print(f"event loop held at most {worst * 1000:.1f} ms (a task scheduled every 10 ms)")
    return 1 if lost or twice else 0


def main() -> int:
    config_dir = os.environ.get("KBEAR_CONFIG")
    if config_dir is not None:
        return asyncio.run(service(config_dir, None))
    east, west = EmbeddedCluster(), EmbeddedCluster()
    try:
        for cluster in (east, west):
            for topic in ("orders", "payments", "audit", "audit.v2"):
                cluster.create_topic(topic, 4)
        os.environ["KBEAR_DEMO_EAST"] = east.bootstrap_servers
        os.environ["KBEAR_DEMO_WEST"] = west.bootstrap_servers
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "config"
            shutil.copytree(Path(__file__).parent / "demo-config", copy)
            return asyncio.run(service(str(copy), copy / "route-rules.yaml"))
    finally:
        west.close()
        east.close()


if __name__ == "__main__":
    sys.exit(main())
