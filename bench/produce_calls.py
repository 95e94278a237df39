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

``--no-record`` adds a third producer to each round: a RoutedProducer whose
cluster client's send function is the client's own ``produce`` (what kbear would
do if it skipped the record: no take-back of these messages), printed as its own
ratio to confluent-kafka and as the recording producer's time over it (the cost
of the record; below 1: the record is faster than calling the client directly).
The producers here never fail over: one cluster, no standby.

Run: ``python bench/produce_calls.py [--no-record]`` (add ``KBEAR_PURE_PYTHON=1``
for the pure-Python record).
"""

from __future__ import annotations

import argparse
import functools
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
from kbear.producer import _cluster
from kbear.testing import EmbeddedCluster

WAYS = ("plain", "callback", "headers", "headers+on_delivery")


def _report(err: Any, msg: Any) -> None:
    """A delivery callback that does nothing."""


def _unrecorded(target: Any, fallback: Any, reported: bool = False) -> Any:
    """The send function of a client that skips the record: its ``produce`` (in a
    ``partial``, a C call, for the ``record`` flag the client's delivery report reads)."""
    send = functools.partial(target)
    send.record = False  # type: ignore[attr-defined]
    return send


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
    ap.add_argument("--no-record", action="store_true", help="also a producer that skips the record")
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
    unrecorded: dict[bool, Any] = {}
    if args.no_record:
        recorded_call = _cluster.plain_call
        _cluster.plain_call = _unrecorded  # the client's produce
        try:
            unrecorded = {
                False: RoutedProducer({**PRODUCER_CONF, **kbear_conf}, topics=["p1"]),
                True: RoutedProducer({**PRODUCER_CONF, **kbear_conf, "on_delivery": _report}, topics=["p1"]),
            }
        finally:
            _cluster.plain_call = recorded_call
    print(f"dispatcher: {dispatcher()}; {args.rounds} rounds of {args.messages} messages")
    for way in WAYS:
        raw, routed = pairs[way == "headers+on_delivery"]
        bare = unrecorded.get(way == "headers+on_delivery")
        ratios, bare_ratios, costs = [], [], []
        for rnd in range(args.rounds):
            order = [("raw", raw), ("routed", routed)] + ([("bare", bare)] if bare is not None else [])
            if rnd % 2:
                order.reverse()
            took = {name: _run(producer, way, args.messages) for name, producer in order}
            ratios.append(took["routed"] / took["raw"])
            if bare is not None:
                bare_ratios.append(took["bare"] / took["raw"])
                costs.append(took["routed"] / took["bare"])
        median = statistics.median(ratios)
        line = f"{way:20} routed/raw time {median:.3f} -> throughput {1 / median:.2f} x confluent-kafka"
        if bare is not None:
            bare_median = statistics.median(bare_ratios)
            line += (
                f"; without the record {1 / bare_median:.2f} x; "
                f"with/without the record time {statistics.median(costs):.3f}"
            )
        print(line)
    for raw, routed in pairs.values():
        raw.flush(10)
        routed.close()
    for bare in unrecorded.values():
        bare.close()
    cluster.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
