"""Losing a cluster while producing and consuming, and failing back (issue #27, "Done when").

Two clusters, ``east`` (standby: ``west``) and ``west``; topic ``orders`` routed to
``east``. A routed producer sends keyed messages at a steady rate (``--rate`` per
second, keys ``k0``..``k15``, the value carrying the key's sequence number) with a
delivery callback; a group of 2 routed consumers reads the topic. At a random
moment (``--seed``) ``east`` is lost. The backend (``--backend``):

- ``mock``: two embedded (librdkafka mock) clusters, no mirror; the loss sets
  ``east``'s broker down;
- ``kafka``: two Apache Kafka clusters (broker processes, ``integration/kafka.py``)
  and MirrorMaker 2 replicating ``east`` to ``west`` (identity replication policy,
  ``kbear.mirror: mm2``); the consumers have ``kbear.switch.start=translated``; the
  loss is ``kill -9`` of ``east``'s broker process, and the random moment comes
  after MirrorMaker 2 has checkpointed the group once. ``--mirror-lag-s S`` stops
  MirrorMaker 2 ``S`` seconds before the loss (a mirror behind by that much: what
  ``east`` then takes is never mirrored).

The trigger (``--trigger``):

- ``client``: the producer itself, ``kbear.failover.enable``; the consumers follow
  the operator, ``kbear failover --config DIR --cluster east --apply`` (run as a
  command when the producer has failed over); the mirror is stopped then. With
  ``--consumers client`` the consumers fail over themselves too
  (``kbear.failover.enable``: their drain of ``east`` ends at once, their start is
  the mirror's), the operator's change coming after them;
- ``serve``: every client through an embedded ``kbear serve
  --failover-after-ms``, one decision for the fleet (mock only).

With ``--failback``, ``east`` then comes back on its data (the mock's broker up; the
broker process restarted on its log directories) while the producer goes on on
``west``; the application restarts its producer (a producer that failed over
itself stayed failed over for its life when this was written; it now follows ``kbear
failback --apply`` at its reload, #27 item 5) and the operator fails back, ``kbear failback
--config DIR --cluster east --apply``; the new producer sends ``--back-seconds``
more to ``east``.

Printed (one JSON object; ``--json-out FILE`` writes it too):

- ``first_on_west_s``: time from the loss to the first message delivered on
  ``west`` (target: ``kbear.failover.after.ms`` + 2 s);
- ``lost``: messages the producer was told were delivered and that no cluster
  holds (target 0); ``reported_failed``: delivery reports with an error;
- ``first_read_on_west_s``: time from the loss to the group's first message read
  on ``west``;
- ``duplicates_stored``: messages stored twice (in-flight ones sent again; with a
  mirror, a message on both clusters is its mirrored copy, not counted);
- ``duplicates_read``: the group's reads of a message already read: before the
  loss (``reread_before_loss``: on ``east``, members joining), after it
  (``reread_after_loss``: on ``west``, from the translated starts) and after the
  fail-back (``reread_after_failback``: on ``east``, from the group's offsets
  committed there before the loss); ``read_past_checkpoint``: the messages the
  group had read on ``east`` past MirrorMaker 2's last checkpoint of it (what a
  translated start from that checkpoint reads again, with the mirror's sync lag);
- ``unmirrored``: messages produced before the loss that ``east`` holds and
  ``west`` does not (the mirror's lag at the loss; all of ``east``'s without a
  mirror), and how many of them the group read once, more than once, never;
- ``unread``: messages stored but never read by the group;
- ``late_ms``: the longest ``poll()``/``produce()``/``flush()`` call past its timeout
  (``produce()``: its whole duration), producer and consumers (target <= 50 ms);
  ``late_at_s``: when each began, in seconds from the loss; ``failover_calls_late_ms``:
  the same for the calls that applied the failover (a take-back, the end of a drain,
  a client's own failover: kbear's work at the failover, in the calling thread);
  beside them, a control thread measures the machine's own lateness the same way
  (``control.plain_poll``: a plain confluent-kafka consumer's ``poll(0.1)`` on
  ``west``, another group; ``control.sleep``: ``time.sleep(0.1)``): on a loaded
  machine a thread that should wake up may wait for a core, whoever's code it runs;
- ``keys_out_of_order``: keys whose messages west holds out of their order (first
  copies: a message stored twice counts once);
- ``translated_starts``: the consumers' starts on ``west`` by what decided them
  (``checkpoint``, ``offset-sync``, ``none``: the committed offsets).

Run: ``python bench/failover.py [--backend mock|kafka] [--trigger client|serve]
[--failback] [--seconds 20]``; bounded: ``--seconds`` of producing (after the
mirror's start-up on ``kafka``, itself bounded by 240 s), then at most 30 s to
drain and read (and the fail-back's restart, at most 180 s).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml
from _failover_clusters import KafkaPair, MockPair, make_pair
from confluent_kafka import Consumer, TopicPartition

from kbear import RoutedConsumer, RoutedProducer, _events

TOPIC = "orders"
GROUP = "bench-failover"
KEYS = 16
POLL_S = 0.1


def write_conf(directory: Path, pair: MockPair | KafkaPair) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [
        {"id": "east", "meta": {"bootstrap.servers": pair.east_bootstrap, **pair.east_meta()}},
        {"id": "west", "meta": {"bootstrap.servers": pair.west_bootstrap}},
    ]
    (directory / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}, sort_keys=False))
    rules = [{"id": "all", "priority": 0, "meta": {"rule.isGlobal": True}, "rule": "use cluster east"}]
    (directory / "route-rules.yaml").write_text(yaml.safe_dump({"route-rules": rules}, sort_keys=False))
    return directory


def kbear_cli(*args: str) -> tuple[int, float]:
    """``kbear ARGS`` as the operator runs it (a command of its own); exit code, seconds."""
    started = time.monotonic()
    code = "import sys; from kbear.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"kbear {' '.join(args)}: exit {done.returncode}: {done.stdout[-600:]!r}", file=sys.stderr)
    return done.returncode, round(time.monotonic() - started, 2)


def stored(bootstrap: str) -> list[tuple[bytes, bytes, int, int]]:
    """(key, value, partition, offset) of every message of the topic on a cluster."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-reader", "enable.auto.commit": False}
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
                        got += 1
                        if m.value().startswith(b"k"):  # not the mirror's warm-up record
                            out.append((m.key(), m.value(), m.partition(), m.offset()))
    finally:
        consumer.close()
    return out


#: what a call applying a failover emits in the calling thread
FAILOVER_WORK = (_events.FailedOver, _events.MessagesResent, _events.DrainFinished)


class Late:
    """The longest call past its timeout, in ms, per call, and when it began; and the
    same for the calls that applied a failover (emitted :data:`FAILOVER_WORK` events:
    the take-back, the end of a drain, a client's own failover)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self.at: dict[str, float] = {}
        self.failover_ms: dict[str, float] = {}
        self.lock = threading.Lock()
        self._seen = threading.local()
        _events.subscribe(self._event)

    def _event(self, event: Any) -> None:
        if isinstance(event, FAILOVER_WORK):
            self._seen.work = True

    def call(self, name: str, fn: Any, timeout: float, *args: Any) -> Any:
        self._seen.work = False
        started = time.monotonic()
        result = fn(*args)
        past = (time.monotonic() - started - timeout) * 1000
        with self.lock:
            if past > self.ms[name]:
                self.ms[name], self.at[name] = past, started
            if self._seen.work:
                self.failover_ms[name] = max(self.failover_ms.get(name, -1e9), past)
        return result


class Starts(logging.Handler):
    """The consumers' translated starts, from their log line on ``kbear.consumer``
    (``... translated from 'east' by MirrorMaker 2 (0: checkpoint 120, ...)``)."""

    PART = re.compile(r"(\d+): (committed|checkpoint|offset-sync|none) ")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.by_source: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "translated from" in text:
            print(text, file=sys.stderr)
            self.by_source.update(
                m.group(2) for m in self.PART.finditer(text.split("MirrorMaker 2 (", 1)[-1])
            )


class Run:
    """One run's clients and what they saw (the producer loop runs in the caller's thread)."""

    def __init__(self, args: argparse.Namespace, pair: MockPair | KafkaPair, location: str) -> None:
        self.args, self.pair = args, pair
        self.base = {"kbear.config": location, "kbear.reload.interval.ms": 200}
        self.delivered: dict[bytes, float] = {}
        self.failed: list[bytes] = []
        self.late = Late()
        self.read: list[tuple[bytes, float]] = []
        #: the group's position on east before the loss (partition -> next offset)
        self.position: dict[int, int] = {}
        self.lost_at = float("inf")
        self.stop = threading.Event()
        self.seq: Counter[int] = Counter()
        self.sent = 0
        self.producer = self.new_producer()

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered[msg.value()] = time.monotonic()
        else:
            self.failed.append(msg.value())

    def new_producer(self) -> RoutedProducer:
        conf = {
            **self.base,
            "message.timeout.ms": 60_000,
            "kbear.failover.enable": self.args.trigger == "client",
            "kbear.failover.after.ms": self.args.after_ms,
        }
        return RoutedProducer(conf, on_delivery=self.on_delivery)

    def consume(self) -> None:
        conf = {
            **self.base,
            **self.pair.group_conf(),
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 1000,
            "kbear.switch.drain.timeout.ms": 5000,
            "kbear.failover.enable": self.args.trigger == "client" and self.args.consumers == "client",
            "kbear.failover.after.ms": self.args.after_ms,
        }
        if self.pair.mirrored:
            conf["kbear.switch.start"] = "translated"
        consumer = RoutedConsumer(conf)
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                m = self.late.call("consumer.poll", consumer.poll, POLL_S, POLL_S)
                if m is not None and m.error() is None:
                    now = time.monotonic()
                    self.read.append((m.value(), now))
                    if now < self.lost_at:
                        self.position[m.partition()] = max(
                            self.position.get(m.partition(), 0), m.offset() + 1
                        )
        finally:
            consumer.close()

    def control(self) -> None:
        """The machine's own lateness, measured as kbear's calls are: a plain
        confluent-kafka consumer of ``west`` (another group) and a sleep."""
        plain = Consumer(
            {
                "bootstrap.servers": self.pair.west_bootstrap,
                **self.pair.group_conf(),
                "group.id": "bench-control",
                "auto.offset.reset": "earliest",
            }
        )
        plain.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                self.late.call("control.plain_poll", plain.poll, POLL_S, POLL_S)
                self.late.call("control.sleep", time.sleep, POLL_S, POLL_S)
        finally:
            plain.close()

    def produce_until(self, until: float, rate_from: float, done: Any = None) -> None:
        """Produce at ``--rate`` from ``rate_from`` (monotonic s) until ``until`` or ``done()``."""
        while time.monotonic() < until and not (done is not None and done()):
            now = time.monotonic() - rate_from
            while self.sent < self.sent_at_rate_start + now * self.args.rate:
                key = self.sent % KEYS
                value = f"k{key}-{self.seq[key]:06d}".encode()
                self.seq[key] += 1
                self.late.call(
                    "producer.produce", self.producer.produce, 0.0, TOPIC, value, f"k{key}".encode()
                )
                self.sent += 1
            self.late.call("producer.poll", self.producer.poll, 0.01, 0.01)
            if self.on_tick is not None:
                self.on_tick()

    sent_at_rate_start = 0
    on_tick: Any = None


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    tmp = tempfile.TemporaryDirectory(prefix="kbear-bench-failover-")
    pair = make_pair(args.backend, Path(tmp.name))
    starts = Starts()
    logging.getLogger("kbear.consumer").addHandler(starts)
    logging.getLogger("kbear.consumer").setLevel(logging.INFO)
    result: dict[str, Any] = {
        "backend": pair.name,
        "trigger": args.trigger,
        "consumers": args.consumers if args.trigger == "client" else "serve",
        "failback": args.failback,
    }
    try:
        pair.create_topic(TOPIC, 4)
        t0 = time.monotonic()
        pair.start_mirror(TOPIC, GROUP)
        result["mirror_start_s"] = round(time.monotonic() - t0, 1)
        conf = write_conf(Path(tmp.name) / "conf", pair)
        service = None
        location = str(conf)
        if args.trigger == "serve":
            from kbear.server.embedded import EmbeddedMetaService

            service = EmbeddedMetaService(conf, failover_after_ms=args.after_ms)
            location = service.url
        try:
            result.update(scenario(args, rng, pair, conf, location, starts))
        finally:
            if service is not None:
                service.close()
    finally:
        pair.close()
        tmp.cleanup()
    return result


def scenario(
    args: argparse.Namespace,
    rng: random.Random,
    pair: MockPair | KafkaPair,
    conf: Path,
    location: str,
    starts: Starts,
) -> dict[str, Any]:
    r = Run(args, pair, location)
    consumers = [threading.Thread(target=r.consume, daemon=True) for _ in range(2)]
    consumers.append(threading.Thread(target=r.control, daemon=True))
    for t in consumers:
        t.start()
    out: dict[str, Any] = {"after_ms": args.after_ms, "rate": args.rate, "seconds": args.seconds}
    started = time.monotonic()
    if pair.mirrored:  # the loss comes after MirrorMaker 2 has checkpointed the group once
        state = {"checkpointed": None}

        def watch() -> None:
            state["checkpointed"] = pair.wait_checkpointed(GROUP, 120.0)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        r.produce_until(started + 150.0, started, lambda: not watcher.is_alive())
        out["checkpointed_after_s"] = state["checkpointed"]
    warm = time.monotonic() - started
    loss_at_s = warm + rng.uniform(args.seconds * 0.25, args.seconds * 0.5)
    out["loss_at_s"] = round(loss_at_s, 2)
    if pair.mirrored and args.mirror_lag_s > 0:
        r.produce_until(started + loss_at_s - args.mirror_lag_s, started)
        pair.stop_mirror(kill=True)
    r.produce_until(started + loss_at_s, started)
    pair.lose()
    lost_at = r.lost_at = time.monotonic()
    sent_at_loss = r.sent
    switched: dict[str, Any] = {}

    def operator(action: str) -> None:
        code, took = kbear_cli(action, "--config", str(conf), "--cluster", "east", "--apply")
        switched[action] = (code, took, time.monotonic())
        if action == "failover":
            pair.stop_mirror()

    def follow() -> None:
        if (
            args.trigger == "client"
            and "started" not in switched
            and r.producer.route(TOPIC).cluster_id == "west"
        ):
            # the producer failed over; the operator's change brings the consumers along
            switched["started"] = True
            threading.Thread(target=operator, args=("failover",), daemon=True).start()

    r.on_tick = follow
    r.produce_until(started + warm + args.seconds, started)
    r.on_tick = None
    left = r.late.call("producer.flush", r.producer.flush, 30.0, 30.0)
    failback_at = None
    if args.failback:
        restorer = threading.Thread(target=lambda: out.__setitem__("restart_s", round(pair.restore(), 1)))
        restorer.start()
        r.produce_until(time.monotonic() + 180.0, started, lambda: not restorer.is_alive())
        gap = time.monotonic()
        left += r.late.call("producer.flush", r.producer.flush, 30.0, 30.0)
        r.producer.close(5)
        failback_at = time.monotonic()
        operator("failback")
        r.producer = r.new_producer()  # the application restarts its producer
        out["failback_gap_s"] = round(time.monotonic() - gap, 2)
        r.sent_at_rate_start = r.sent
        r.produce_until(time.monotonic() + args.back_seconds, time.monotonic())
        left += r.late.call("producer.flush", r.producer.flush, 30.0, 30.0)
    # read what can be read: everything delivered, or nothing new for 5 s (at most 30 s)
    end, seen, quiet_from = time.monotonic() + 30, -1, time.monotonic()
    while time.monotonic() < end and not set(r.delivered) <= {v for v, _ in r.read}:
        if len(r.read) != seen:
            seen, quiet_from = len(r.read), time.monotonic()
        elif time.monotonic() - quiet_from > 5:
            break
        time.sleep(0.2)
    r.stop.set()
    for t in consumers:
        t.join(15)
    r.producer.close(5)
    if not args.failback:
        out["restart_s"] = round(pair.restore(), 1)  # to count what east holds
    out.update(figures(r, pair, lost_at, sent_at_loss, failback_at, left, switched, started))
    out["translated_starts"] = dict(starts.by_source)
    return out


def figures(
    r: Run,
    pair: MockPair | KafkaPair,
    lost_at: float,
    sent_at_loss: int,
    failback_at: float | None,
    left: int,
    switched: dict[str, Any],
    started: float,
) -> dict[str, Any]:
    on_west = stored(pair.west_bootstrap)
    on_east = stored(pair.east_bootstrap)
    every = Counter(v for _, v, _, _ in on_west + on_east)
    per_cluster = [Counter(v for _, v, _, _ in on) for on in (on_west, on_east)]
    # a message on both clusters is a mirrored copy with a mirror, a message sent twice without
    stored_twice = sum(n - 1 for c in per_cluster for n in c.values() if n > 1)
    if not pair.mirrored:
        stored_twice += len(set(per_cluster[0]) & set(per_cluster[1]))
    west_values = {v for _, v, _, _ in on_west}
    produced_before_loss = {f"k{i % KEYS}-{i // KEYS:06d}".encode() for i in range(sent_at_loss)}
    unmirrored = {v for _, v, _, _ in on_east if v in produced_before_loss and v not in west_values}
    back_from = failback_at if failback_at is not None else float("inf")
    # (a message east stored just before the loss may be reported after it: on west only)
    after_loss = [t for v, t in r.delivered.items() if lost_at < t < back_from and v in west_values]
    read_after = [t for _, t in r.read if lost_at < t < back_from]
    checkpoints = pair.last_checkpoints(GROUP)
    past_checkpoint = (
        sum(max(0, n - checkpoints.get(p, 0)) for p, n in r.position.items()) if pair.mirrored else None
    )
    reads: dict[bytes, list[float]] = defaultdict(list)
    for v, t in r.read:
        reads[v].append(t)
    read_count = Counter({v: len(ts) for v, ts in reads.items()})
    by_key: dict[bytes, list[tuple[int, int, bytes]]] = defaultdict(list)
    for k, v, p, o in on_west:
        by_key[k].append((p, o, v))
    out_of_order = 0
    for msgs in by_key.values():
        firsts = list(dict.fromkeys(v for _, _, v in sorted(msgs)))
        out_of_order += firsts != sorted(firsts)
    twice = [ts for ts in reads.values() if len(ts) > 1]
    return {
        "produced": r.sent,
        "produced_before_loss": sent_at_loss,
        "left_after_flush": left,
        "operator": {k: v[:2] for k, v in switched.items() if k != "started"},
        "operator_failover_written_s": round(switched["failover"][2] - lost_at, 2)
        if "failover" in switched
        else None,
        "first_on_west_s": round(min(after_loss) - lost_at, 3) if after_loss else None,
        "first_read_on_west_s": round(min(read_after) - lost_at, 3) if read_after else None,
        "lost": sum(1 for v in r.delivered if every[v] == 0),
        # reported delivered before the loss (so by east) and not on east once it is back
        "east_missing_after_restart": sum(
            1 for v, t in r.delivered.items() if t < lost_at and v not in {x for _, x, _, _ in on_east}
        ),
        "reported_delivered": len(r.delivered),
        "reported_failed": len(r.failed),
        "duplicates_stored": stored_twice,
        "duplicates_read": sum(n - 1 for n in read_count.values() if n > 1),
        "reread_before_loss": sum(1 for ts in twice for t in sorted(ts)[1:] if t < lost_at),
        "reread_after_loss": sum(1 for ts in twice for t in sorted(ts)[1:] if lost_at <= t < back_from),
        "read_past_checkpoint": past_checkpoint,
        "reread_after_failback": sum(1 for ts in twice for t in sorted(ts)[1:] if t >= back_from),
        "unmirrored": len(unmirrored),
        "unmirrored_read": Counter(min(read_count[v], 2) for v in unmirrored),
        "unread": len(set(every) - set(reads)),
        "late_ms": {name: round(ms, 1) for name, ms in sorted(r.late.ms.items())},
        "late_at_s": {name: round(at - lost_at, 2) for name, at in sorted(r.late.at.items())},
        "failover_calls_late_ms": {name: round(ms, 1) for name, ms in sorted(r.late.failover_ms.items())},
        "keys_out_of_order": out_of_order,
        "stored_east": len(on_east),
        "stored_west": len(on_west),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["mock", "kafka"], default="mock")
    ap.add_argument("--trigger", choices=["client", "serve"], default="client")
    ap.add_argument(
        "--consumers",
        choices=["operator", "client"],
        default="operator",
        help="with --trigger client: the consumers follow the operator's kbear failover (operator, "
        "the default) or fail over themselves first, kbear.failover.enable (client)",
    )
    ap.add_argument("--failback", action="store_true", help="east comes back, the operator fails back")
    ap.add_argument(
        "--seconds", type=float, default=20.0, help="seconds of producing before any fail-back (20)"
    )
    ap.add_argument("--back-seconds", type=float, default=5.0, help="seconds of producing after it (5)")
    ap.add_argument("--rate", type=float, default=200.0, help="messages per second (200)")
    ap.add_argument("--after-ms", type=int, default=3000, help="kbear.failover.after.ms (3000)")
    ap.add_argument(
        "--mirror-lag-s", type=float, default=0.0, help="kafka: stop the mirror S s before the loss"
    )
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    result = run(args)
    result["unmirrored_read"] = {
        {0: "never", 1: "once", 2: "more"}[k]: n for k, n in sorted(result.get("unmirrored_read", {}).items())
    }
    print(json.dumps(result))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result) + "\n")
    return 0 if result.get("lost") == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
