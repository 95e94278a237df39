"""Cost of asking librdkafka about cluster properties at load time (issue #12).

Run: PYTHONPATH=. python bench/librdkafka_probe.py

Prints the microseconds of one probe (a key and value set on a fresh
configuration through confluent-kafka's Producer constructor, refused by the
sentinel, no client handle built), and for comparison the milliseconds of
building and destroying a real Producer handle without bootstrap servers.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from kbear.config import _librdkafka

N = 2000


def main() -> None:
    keys = [
        ("linger.ms", "5"),
        ("acks", "all"),
        ("security.protocol", "SSL"),
        ("zookeeper.connect", "zk:2181"),
    ]
    started = time.perf_counter()
    for i in range(N):
        key, value = keys[i % len(keys)]
        _librdkafka._probe.__wrapped__(key, f"{value}")
    probe_us = (time.perf_counter() - started) / N * 1e6
    started = time.perf_counter()
    for _ in range(50):
        p = Producer({"linger.ms": "5", "log_level": 0})
        del p
    handle_ms = (time.perf_counter() - started) / 50 * 1e3
    print(f"probe (uncached): {probe_us:.1f} us per key; real Producer handle: {handle_ms:.2f} ms")


if __name__ == "__main__":
    main()
