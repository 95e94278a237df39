"""Throughput of message-level acknowledgement (kbear.ack.mode=individual) next to
offset commits, on one in-process cluster (issue #15).

    PYTHONPATH=. .venv/bin/python bench/acks.py [--messages 100000] [--rounds 3]

Each round reads the same topic (4 partitions, 100 B values) from the start with
a fresh group, once per variant, in turn:

- ``offset, auto-commit``: ``kbear.ack.mode=offset`` (default), ``enable.auto.commit``:
  nothing per message (confluent-kafka's own ``poll``/``consume``: the fast path);
- ``offset, store_offsets``: the same, the application storing each message's
  offset (``enable.auto.offset.store=false`` + ``store_offsets(msg)``), the usual
  at-least-once loop;
- ``individual, ack``: ``kbear.ack.mode=individual``, ``ack(msg)`` per message.

Prints messages/s per variant (median of the rounds) for ``poll()`` and
``consume(1000)`` loops. Figures measure client-side cost, not a network.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import global_rule, write_config

from kbear import RoutedConsumer, Router
from kbear.testing import EmbeddedCluster

VALUE = b"x" * 100
BASE = {
    "auto.offset.reset": "earliest",
    "group.protocol": "consumer",
    "kbear.reload.interval.ms": 0,
    "log_level": 3,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "offset, auto-commit": {},
    "offset, store_offsets": {"enable.auto.offset.store": False},
    "individual, ack": {"kbear.ack.mode": "individual"},
}


def run_one(router: Router, name: str, n: int, batch: int | None, group: str) -> float:
    c = RoutedConsumer({"group.id": group, **BASE, **VARIANTS[name]}, router=router)
    c.subscribe(["t"])
    store = name == "offset, store_offsets"
    ack = name == "individual, ack"
    got = 0
    start = 0.0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(batch, 0.5) if batch else [m] if (m := c.poll(0.5)) is not None else []
        for m in msgs:
            if m.error() is not None:
                continue
            if not got:
                start = time.perf_counter()
            got += 1
            if ack:
                c.ack(m)
            elif store:
                c.store_offsets(m)
    elapsed = time.perf_counter() - start
    c.close()
    if got < n:
        raise SystemExit(f"{name}: read {got} of {n}")
    return (n - 1) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cluster = EmbeddedCluster()
    cluster.create_topic("t", 4)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
    for i in range(args.messages):
        p.produce("t", VALUE, partition=i % 4)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(60)
    with tempfile.TemporaryDirectory() as tmp:
        router = Router.from_path(
            write_config(Path(tmp), {"A": cluster.bootstrap_servers}, [global_rule("A")])
        )
        results: dict[tuple[str, str], list[float]] = {}
        seq = 0
        for _ in range(args.rounds):
            for loop, batch in (("poll()", None), ("consume(1000)", 1000)):
                for name in VARIANTS:
                    seq += 1
                    rate = run_one(router, name, args.messages, batch, f"bench-acks-{seq}")
                    results.setdefault((loop, name), []).append(rate)
        router.close()
    cluster.close()
    print(f"{args.messages} messages of {len(VALUE)} B, median of {args.rounds} rounds (messages/s):")
    for (loop, name), rates in results.items():
        print(f"  {loop:14} {name:24} {statistics.median(rates):>10,.0f}")


if __name__ == "__main__":
    main()
