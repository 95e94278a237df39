"""What the take-back of #27 item 3 costs per message, in one run.

One embedded cluster, two ways of producing ``--messages`` plain messages
(``produce(topic, value)``) per block, the ways taking turns block by block for
``--rounds`` rounds (the order alternating), CPU time of the calling thread:

- ``before``: a cluster client as kbear built it before #27 (no ``on_delivery``
  when the application configured none; produce() is the client's own method);
- ``after``: as now, the cluster healthy (still no ``on_delivery`` when none is
  configured; produce() through the PlainCall check of the call's arguments);
- ``suspect``: as now while the cluster is suspect (its brokers all down: every
  message gets a record as its delivery callback, so that it can be taken back).

Printed per way: the median of produce() per message, and of the ``flush()`` that
serves the delivery reports per message. Run: ``python bench/takeback_cost.py``
(add ``KBEAR_PURE_PYTHON=1`` for the pure-Python check).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from confluent_kafka import Producer

from kbear.producer._pending import Rescue, _PlainCall, plain_call, recording_send
from kbear.testing import EmbeddedCluster

VALUE = b"x" * 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--messages", type=int, default=50_000)
    args = ap.parse_args()
    cluster = EmbeddedCluster()
    cluster.create_topic("t", 3)
    base = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
    }
    before = Producer(base)
    client = Producer(base)
    rescue = Rescue()
    rescue.call = plain_call(client.produce, recording_send(client.produce, rescue))
    suspect_client = Producer(base)
    suspect = Rescue()
    suspect.call = plain_call(suspect_client.produce, recording_send(suspect_client.produce, suspect))
    suspect.suspect(True)
    ways: dict[str, tuple[Any, Any]] = {
        "before": (before.produce, before),
        "after": (rescue.call, client),
        "suspect": (suspect.call, suspect_client),
    }
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ways}
    for rnd in range(args.rounds):
        for name in list(ways) if rnd % 2 else list(ways)[::-1]:
            produce, producer = ways[name]
            suspect.suspect(True)  # (a delivery there ends the suspicion: set again)
            t0 = time.thread_time()
            for _ in range(args.messages):
                produce("t", VALUE)
            t1 = time.thread_time()
            assert producer.flush(60) == 0
            t2 = time.thread_time()
            times[name][0].append((t1 - t0) / args.messages * 1e9)
            times[name][1].append((t2 - t1) / args.messages * 1e9)
    print(f"compiled PlainCall: {_PlainCall is not None}; {args.rounds} rounds of {args.messages} messages")
    for name, (produced, flushed) in times.items():
        print(
            f"{name:7} produce {statistics.median(produced):.0f} ns/msg "
            f"(rounds {min(produced):.0f}-{max(produced):.0f}), "
            f"flush serving the reports {statistics.median(flushed):.0f} ns/msg"
        )
    for _, producer in ways.values():
        producer.flush(10)
    cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
