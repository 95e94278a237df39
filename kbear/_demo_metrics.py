"""``kbear demo --metrics-port N``: serve the metrics while the demo runs, and check
that its final table agrees with what a scrape shows (private)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

from prometheus_client import REGISTRY, CollectorRegistry

from kbear.metrics import instrument, serve

#: statistics interval of the demo's clients (ms): the run lasts seconds
STATS_INTERVAL_MS = 500
#: how long the final figures may take to reach the statistics (seconds)
SETTLE_S = 15.0

# (env, logical topic, cluster) -> count
Counts = Mapping[tuple[str, str, str], int]


def start(port: int, out: TextIO) -> Any:
    """Instrument the default registry and serve it on ``port`` (127.0.0.1); the server."""
    instrument(REGISTRY, stats_interval_ms=STATS_INTERVAL_MS)
    server = serve(port)
    print(f"metrics: http://127.0.0.1:{server.server_address[1]}/metrics", file=out)
    return server


def total(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` of ``registry`` whose labels include ``labels``."""
    want = labels.items()
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and want <= s.labels.items()
    )


def agree(delivered: Counts, consumed: Counts, clients: Iterable[Any], out: TextIO) -> bool:
    """Whether the scraped figures equal the demo's table: per (env, topic, cluster),
    messages transmitted by the producer (``kbear_producer_transmitted_messages_total``)
    = delivered, handed to the application by the consumer (``kbear_consumer_messages_total``) =
    consumed. Polls ``clients`` (their statistics are served by poll()) for up to
    :data:`SETTLE_S` seconds; prints the verdict and any difference."""
    clients = list(clients)
    deadline = time.monotonic() + SETTLE_S
    while True:
        diffs = []
        for name, counts in (
            ("kbear_producer_transmitted_messages_total", delivered),
            ("kbear_consumer_messages_total", consumed),
        ):
            for (env, topic, cluster), count in counts.items():
                got = total(REGISTRY, name, client=f"demo-{env}", topic=topic, cluster=cluster)
                if got != count:
                    diffs.append(
                        f"{name}{{env={env}, topic={topic}, cluster={cluster}}} = {got:g}, table {count}"
                    )
        if not diffs or time.monotonic() > deadline:
            break
        for client in clients:
            client.poll(0.05)
    if diffs:
        print("metrics: the scrape DISAGREES with the table:", file=out)
        for line in diffs:
            print(f"  {line}", file=out)
        return False
    print(
        "metrics: the scrape agrees with the table (delivered = transmitted, consumed = handed out)", file=out
    )
    return True
