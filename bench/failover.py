"""Losing a cluster for good while producing and consuming (issue #27, "Done when").

Two embedded (librdkafka mock) clusters, ``east`` (standby: ``west``, no mirror)
and ``west``; topic ``orders`` routed to ``east``. A routed producer sends keyed
messages at a steady rate (``--rate`` per second, keys ``k0``..``k15``, the value
carrying the key's sequence number) with a delivery callback; a group of 2 routed
consumers reads the topic. At a random moment (``--seed``) ``east``'s broker goes
down for good. The trigger (``--trigger``):

- ``client``: the producer itself, ``kbear.failover.enable`` (the consumers get
  the standby route from the operator's change, written when the producer failed
  over, as ``kbear failover --apply`` does);
- ``serve``: every client through an embedded ``kbear serve
  --failover-after-ms``, one decision for the fleet.

Printed (one JSON object; ``--json-out FILE`` writes it too):

- ``first_on_west_s``: time from the loss to the first message delivered on
  ``west`` (target: ``kbear.failover.after.ms`` + 2 s);
- ``lost``: messages the producer was told were delivered and that no cluster
  holds (target 0); ``reported_failed``: delivery reports with an error;
- ``duplicates_stored``: messages stored twice (in-flight ones sent again);
- ``duplicates_read``: messages the group read more than once;
- ``unread``: messages stored but never read by the group (without a mirror:
  what east held, unread, when it was lost);
- ``late_ms``: the longest ``poll()``/``produce()``/``flush()`` call past its timeout
  (``produce()``: its whole duration), producer and consumers (target <= 50 ms);
- ``keys_out_of_order``: keys whose messages west holds out of their order.

Run: ``python bench/failover.py [--trigger client|serve] [--seconds 20]``; bounded:
``--seconds`` of producing, then at most 30 s to drain and read.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, TopicPartition

from kbear import RoutedConsumer, RoutedProducer
from kbear.admin import apply_failover, plan_failover
from kbear.config import load_config
from kbear.testing import EmbeddedCluster

TOPIC = "orders"
KEYS = 16
POLL_S = 0.1


def write_conf(directory: Path, east: EmbeddedCluster, west: EmbeddedCluster) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        {"id": "east", "meta": {"bootstrap.servers": east.bootstrap_servers, "kbear.failover.to": "west"}},
        {"id": "west", "meta": {"bootstrap.servers": west.bootstrap_servers}},
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}, sort_keys=False))
    rules = [{"id": "all", "priority": 0, "meta": {"rule.isGlobal": True}, "rule": "use cluster east"}]
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}, sort_keys=False))
    return directory


def stored(cluster: EmbeddedCluster) -> list[tuple[bytes, bytes, int, int]]:
    """(key, value, partition, offset) of every message of the topic on ``cluster``."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "bench-reader",
            "enable.auto.commit": False,
        }
    )
    out = []
    try:
        parts = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        for p in parts:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(TOPIC, p, low)])
            got = 0
            end = time.monotonic() + 20
            while got < high - low and time.monotonic() < end:
                for m in consumer.consume(1000, 0.5):
                    if m.error() is None:
                        out.append((m.key(), m.value(), m.partition(), m.offset()))
                        got += 1
    finally:
        consumer.close()
    return out


class Late:
    """The longest call past its timeout, in ms, per call."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()

    def call(self, name: str, fn: Any, timeout: float, *args: Any) -> Any:
        started = time.monotonic()
        result = fn(*args)
        past = (time.monotonic() - started - timeout) * 1000
        with self.lock:
            self.ms[name] = max(self.ms[name], past)
        return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    east, west = EmbeddedCluster(), EmbeddedCluster()
    for c in (east, west):
        c.create_topic(TOPIC, 4)
    tmp = tempfile.TemporaryDirectory(prefix="kbear-bench-failover-")
    conf = write_conf(Path(tmp.name) / "conf", east, west)
    service = None
    if args.trigger == "serve":
        from kbear.server.embedded import EmbeddedMetaService

        service = EmbeddedMetaService(conf, failover_after_ms=args.after_ms)
        location, reload_ms = service.url, 200
    else:
        location, reload_ms = str(conf), 200
    base = {"kbear.config": location, "kbear.reload.interval.ms": reload_ms}
    delivered: dict[bytes, float] = {}
    failed: list[bytes] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[msg.value()] = time.monotonic()
        else:
            failed.append(msg.value())

    producer = RoutedProducer(
        {
            **base,
            "message.timeout.ms": 60_000,
            "kbear.failover.enable": args.trigger == "client",
            "kbear.failover.after.ms": args.after_ms,
        },
        on_delivery=on_delivery,
    )
    late = Late()
    read: list[bytes] = []
    stop = threading.Event()

    def consume(n: int) -> None:
        consumer = RoutedConsumer(
            {
                **base,
                "group.id": "bench-failover",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "kbear.switch.drain.timeout.ms": 5000,
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not stop.is_set():
                m = late.call("consumer.poll", consumer.poll, POLL_S, POLL_S)
                if m is not None and m.error() is None:
                    read.append(m.value())
        finally:
            consumer.close()

    consumers = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(2)]
    for t in consumers:
        t.start()
    loss_at_s = rng.uniform(args.seconds * 0.25, args.seconds * 0.5)
    started = time.monotonic()
    lost_at = None
    seq: Counter[int] = Counter()
    sent = 0
    switched_config = False
    while time.monotonic() - started < args.seconds:
        now = time.monotonic() - started
        if lost_at is None and now >= loss_at_s:
            east.set_broker_down(-1)
            lost_at = time.monotonic()
        while sent < now * args.rate:
            key = sent % KEYS
            value = f"k{key}-{seq[key]:06d}".encode()
            seq[key] += 1
            late.call("producer.produce", producer.produce, 0.0, TOPIC, value, f"k{key}".encode())
            sent += 1
        late.call("producer.poll", producer.poll, 0.01, 0.01)
        if args.trigger == "client" and not switched_config and producer.route(TOPIC).cluster_id == "west":
            # the producer failed over; the operator's change brings the consumers along
            p = plan_failover(conf, load_config(conf), "east", False, 2.0)
            if p.ready and not p.done:
                apply_failover(conf, p)
            switched_config = True
    left = late.call("producer.flush", producer.flush, 30.0, 30.0)
    end = time.monotonic() + 30
    while time.monotonic() < end and not set(delivered) <= set(read):
        time.sleep(0.2)
    stop.set()
    for t in consumers:
        t.join(15)
    producer.close(5)
    assert lost_at is not None
    on_west = stored(west)
    east.set_broker_up(-1)
    on_east = stored(east)
    every = Counter(v for _, v, _, _ in on_west + on_east)
    after_loss = [t for t in delivered.values() if t > lost_at]
    by_key: dict[bytes, list[tuple[int, int, bytes]]] = defaultdict(list)
    for k, v, p, o in on_west:
        by_key[k].append((p, o, v))
    out_of_order = sum(
        1 for msgs in by_key.values() if [v for _, _, v in sorted(msgs)] != sorted(v for _, _, v in msgs)
    )
    result = {
        "trigger": args.trigger,
        "after_ms": args.after_ms,
        "rate": args.rate,
        "seconds": args.seconds,
        "loss_at_s": round(loss_at_s, 2),
        "produced": sent,
        "left_after_flush": left,
        "first_on_west_s": round(min(after_loss) - lost_at, 3) if after_loss else None,
        "lost": sum(1 for v in delivered if every[v] == 0),
        "reported_failed": len(failed),
        "duplicates_stored": sum(n - 1 for n in every.values() if n > 1),
        "duplicates_read": sum(n - 1 for n in Counter(read).values() if n > 1),
        "unread": len(set(every) - set(read)),
        "late_ms": {name: round(ms, 1) for name, ms in sorted(late.ms.items())},
        "keys_out_of_order": out_of_order,
        "stored_east": len(on_east),
        "stored_west": len(on_west),
    }
    if service is not None:
        service.close()
    west.close()
    east.close()
    tmp.cleanup()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trigger", choices=["client", "serve"], default="client")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of producing (20)")
    ap.add_argument("--rate", type=float, default=200.0, help="messages per second (200)")
    ap.add_argument("--after-ms", type=int, default=3000, help="kbear.failover.after.ms (3000)")
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    result = run(args)
    print(json.dumps(result))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result) + "\n")
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
