"""Produce and consume routed topics with kbear.

Against the clusters of docker/docker-compose.yml::

    docker compose -f docker/docker-compose.yml up -d
    KBEAR_CONFIG=docker/routing .venv/bin/python examples/quickstart.py

Without KBEAR_CONFIG it starts two embedded (in-process) clusters and uses
examples/demo-config, so it runs anywhere kbear is installed.
"""

from __future__ import annotations

import os
import time

from kbear import RoutedConsumer, RoutedProducer
from kbear.testing import EmbeddedCluster

TOPICS = ["orders", "payments", "audit"]


def main() -> None:
    config_dir = os.environ.get("KBEAR_CONFIG")
    clusters: list[EmbeddedCluster] = []
    if config_dir is None:
        clusters = [EmbeddedCluster(), EmbeddedCluster()]
        for cluster in clusters:
            for topic in ("orders", "payments", "audit", "audit.v2"):
                cluster.create_topic(topic, 4)
        os.environ["KBEAR_DEMO_EAST"] = clusters[0].bootstrap_servers
        os.environ["KBEAR_DEMO_WEST"] = clusters[1].bootstrap_servers
        config_dir = os.path.join(os.path.dirname(__file__), "demo-config")

    common = {"kbear.config": config_dir, "kbear.client.id": "quickstart", "kbear.client.meta.env": "prod"}
    with RoutedProducer(common, topics=TOPICS) as producer:
        for topic in TOPICS:
            route = producer.route(topic)
            print(f"{topic}: cluster {route.cluster_id} ({route.bootstrap_servers}), topic {route.topic}")
            for i in range(10):
                producer.produce(topic, value=f"{topic}-{i}".encode(), key=str(i))
        print("undelivered after flush:", producer.flush(10))

    consumer = RoutedConsumer(
        {**common, "group.id": "quickstart", "auto.offset.reset": "earliest", "session.timeout.ms": 6000}
    )
    consumer.subscribe(TOPICS)
    counts = dict.fromkeys(TOPICS, 0)
    deadline = time.monotonic() + 30
    while sum(counts.values()) < 10 * len(TOPICS) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            counts[msg.topic()] += 1
    consumer.close()
    print("consumed:", counts)
    for cluster in clusters:
        cluster.close()


if __name__ == "__main__":
    main()
