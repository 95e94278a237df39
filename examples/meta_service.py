"""A fleet steered by a meta-service: ``kbear serve`` + routed clients + a live move.

    .venv/bin/python examples/meta_service.py      # needs the server and meta extras

Starts two embedded (in-process) clusters, copies examples/demo-config, and
serves the copy with ``kbear serve`` (in-process, on 127.0.0.1 and a free port).
The clients get ``kbear.config=http://127.0.0.1:<port>``: they ask the service
for their routes (one request per refresh) instead of reading files. The
clusters' ``bootstrap.servers`` are ``${KBEAR_DEMO_EAST}`` / ``${KBEAR_DEMO_WEST}``
in clusters.yaml: the service passes the placeholders through and each client
resolves them from its own environment. Midway, the rule that keeps uat's audit
on east is removed from the served directory: the service serves the new
configuration once it validated, the clients see it at their next refresh and
move audit to west with the same drain as a file change. Exits 1 if a message
was lost or read twice.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kbear import RoutedConsumer, RoutedProducer
from kbear.reload import replace_file
from kbear.server.embedded import EmbeddedMetaService
from kbear.testing import EmbeddedCluster

MESSAGES = 1000


def where(topic: str, producer: RoutedProducer, consumer: RoutedConsumer) -> str:
    return (
        f"{topic}: producer -> {producer.route(topic).cluster_id}, "
        f"consumer -> {consumer.routes()[topic].cluster_id}"
    )


def run(url: str, rules_file: Path) -> int:
    common = {
        "kbear.config": url,
        "kbear.client.id": "meta-example",
        "kbear.client.meta.env": "uat",
        "kbear.reload.interval.ms": 500,  # how often each client asks the service
    }
    producer = RoutedProducer(common)
    consumer = RoutedConsumer(
        {**common, "group.id": "meta-example", "group.protocol": "consumer", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["audit"])
    print(where("audit", producer, consumer))
    sent: list[bytes] = []
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + 60
    for i in range(MESSAGES):
        value = b"event-%05d" % i
        producer.produce("audit", value=value, key=b"user-%d" % (i % 10))
        sent.append(value)
        if i == MESSAGES // 2:
            rules = yaml.safe_load(rules_file.read_text())
            rules["route-rules"] = [r for r in rules["route-rules"] if r["id"] != "uat-audit-on-east"]
            replace_file(rules_file, yaml.safe_dump(rules, sort_keys=False))
            print("rule uat-audit-on-east removed from the served directory")
        for msg in consumer.consume(100, 0.005):
            if msg.error() is None:
                got[msg.value()] = got.get(msg.value(), 0) + 1
    producer.flush(30)
    while len(got) < len(sent) and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.2):
            if msg.error() is None:
                got[msg.value()] = got.get(msg.value(), 0) + 1
    print("now", where("audit", producer, consumer))
    producer.close()
    consumer.close()
    lost = [v for v in sent if v not in got]
    twice = [v for v, n in got.items() if n > 1]
    print(f"produced {len(sent)}, consumed {len(got)}, lost {len(lost)}, read twice {len(twice)}")
    return 1 if lost or twice else 0


def main() -> int:
    east, west = EmbeddedCluster(), EmbeddedCluster()
    try:
        for cluster in (east, west):
            for topic in ("orders", "payments", "audit", "audit.v2"):
                cluster.create_topic(topic, 4)
        # The clients' environment: the service never resolves ${...} itself.
        os.environ["KBEAR_DEMO_EAST"] = east.bootstrap_servers
        os.environ["KBEAR_DEMO_WEST"] = west.bootstrap_servers
        with tempfile.TemporaryDirectory() as tmp:
            served = Path(tmp) / "served"
            shutil.copytree(Path(__file__).parent / "demo-config", served)
            os.environ.setdefault("XDG_CACHE_HOME", str(Path(tmp) / "cache"))  # the clients' cache files
            with EmbeddedMetaService(served) as service:
                print(f"kbear serve on {service.url} serving {served}")
                return run(service.url, served / "route-rules.yaml")
    finally:
        west.close()
        east.close()


if __name__ == "__main__":
    sys.exit(main())
