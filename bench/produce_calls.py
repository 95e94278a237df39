"""RoutedProducer.produce() with more than topic/value/key, against plain confluent-kafka.

The take-back of #27 item 3 keeps a record of some messages (kbear/producer/_pending.py);
this measures what that costs on the calls it concerns. One embedded cluster, one
topic of 8 partitions, a RoutedProducer over it and a confluent-kafka Producer with
the same settings; per way of calling, ``--rounds`` rounds of ``--messages``
produce() calls + flush() each, the two producers alternating, CPU time of the
process; printed: the median of routed time / raw time per way, and its inverse,
the throughput ratio (1.0: as fast as confluent-kafka). The ways:

- ``plain``: ``produce(topic, value)``;
- ``callback``: ``produce(topic, value, callback=cb)`` (recorded: the message has a
  callback of its own);
- ``headers``: ``produce(topic, value=v, key=k, headers=[...])`` with no delivery
  callback anywhere (not recorded while the cluster is healthy);
- ``headers+on_delivery``: the same call, both producers configured with an
  ``on_delivery`` (recorded: its purge report reaches kbear).

Run: ``python bench/produce_calls.py`` (add ``KBEAR_PURE_PYTHON=1`` for the
pure-Python record).
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
from _common import PRODUCER_CONF, VALUE, global_rule, write_config

from kbear import RoutedProducer, dispatcher
from kbear.testing import EmbeddedCluster

WAYS = ("plain", "callback", "headers", "headers+on_delivery")


def _report(err: Any, msg: Any) -> None:
    """A delivery callback that does nothing."""


def _run(producer: Any, way: str, messages: int) -> float:
    """CPU seconds of ``messages`` produce() calls of ``way`` and the flush()."""
    t0 = time.process_time()
    if way == "plain":
        for _ in range(messages):
            producer.produce("p1", VALUE)
    elif way == "callback":
        for _ in range(messages):
            producer.produce("p1", VALUE, callback=_report)
    else:
        for _ in range(messages):
            producer.produce("p1", value=VALUE, key=b"k", headers=[("h", b"v")])
    producer.flush(60)
    return time.process_time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--messages", type=int, default=50_000)
    args = ap.parse_args()
    cluster = EmbeddedCluster()
    cluster.create_topic("p1", 8)
    config = write_config(
        Path(tempfile.mkdtemp()) / "one", {"A": cluster.bootstrap_servers}, [global_rule("A")]
    )
    kbear_conf = {"kbear.config": str(config), "kbear.reload.interval.ms": 0}
    raw_conf = {**PRODUCER_CONF, "bootstrap.servers": cluster.bootstrap_servers}
    pairs = {
        False: (Producer(raw_conf), RoutedProducer({**PRODUCER_CONF, **kbear_conf}, topics=["p1"])),
        True: (
            Producer({**raw_conf, "on_delivery": _report}),
            RoutedProducer({**PRODUCER_CONF, **kbear_conf, "on_delivery": _report}, topics=["p1"]),
        ),
    }
    print(f"dispatcher: {dispatcher()}; {args.rounds} rounds of {args.messages} messages")
    for way in WAYS:
        raw, routed = pairs[way == "headers+on_delivery"]
        ratios = []
        for rnd in range(args.rounds):
            if rnd % 2:
                routed_s, raw_s = _run(routed, way, args.messages), _run(raw, way, args.messages)
            else:
                raw_s, routed_s = _run(raw, way, args.messages), _run(routed, way, args.messages)
            ratios.append(routed_s / raw_s)
        median = statistics.median(ratios)
        print(f"{way:20} routed/raw time {median:.3f} -> throughput {1 / median:.2f} x confluent-kafka")
    for raw, routed in pairs.values():
        raw.flush(10)
        routed.close()
    cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
