"""How long ``poll(0.1)`` takes while a group follows a live move and a broker of
the old cluster dies (issue #39 item 6).

Cluster A has 3 brokers (topic of 4 partitions, replication 3), cluster B 1 (or
3 on Apache Kafka). A group of ``--members`` routed consumers, each calling
``poll(0.1)`` in a thread of its own, reads a keyed topic a producer thread fills
at ``--rate`` messages/s; the route moves it from A to B at 3 s; ``--kill-after``
seconds after the rule write the broker coordinating the group on A goes down
(the mock: ``set_broker_down``, back up ``--down-s`` later; Apache Kafka:
SIGKILL, back up ``--down-s`` later). Another thread calls ``assignment()`` and
``position()`` every 50 ms. Per run: the longest ``poll(0.1)`` and when it
happened, the longest ``assignment()``/``position()``, messages lost, read
twice, per-key order breaks. One JSON line per run.

    PYTHONPATH=. .venv/bin/python bench/poll_bound.py --backend mock --runs 3
    PYTHONPATH=. .venv/bin/python bench/poll_bound.py --backend kafka --runs 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

# KBEAR_SRC: another checkout's kbear to measure (e.g. before a change); bench/ stays this one's
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if os.environ.get("KBEAR_SRC"):
    sys.path.insert(0, os.environ["KBEAR_SRC"])

from bench._common import global_rule, topic_rule, write_config
from kbear import RoutedConsumer, RoutedProducer
from kbear.reload import replace_file

KEYS = 24
PARTITIONS = 4


class Cluster:
    """One cluster of the run: its bootstrap servers, a topic maker and a broker killer."""

    bootstrap_servers: str

    def create_topic(self, name: str, partitions: int, replicas: int) -> None:
        raise NotImplementedError

    def kill(self, broker_id: int) -> None:
        raise NotImplementedError

    def revive(self, broker_id: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class MockCluster(Cluster):
    def __init__(self, brokers: int) -> None:
        from kbear.testing import EmbeddedCluster

        self._c = EmbeddedCluster(num_brokers=brokers)
        self.bootstrap_servers = self._c.bootstrap_servers

    def create_topic(self, name: str, partitions: int, replicas: int) -> None:
        self._c.create_topic(name, partitions, replicas)

    def kill(self, broker_id: int) -> None:
        self._c.set_broker_down(broker_id)

    def revive(self, broker_id: int) -> None:
        self._c.set_broker_up(broker_id)

    def close(self) -> None:
        self._c.close()


class KafkaCluster(Cluster):
    def __init__(self, name: str, brokers: int, workdir: Path) -> None:
        from integration.kafka import KafkaCluster as Jvm

        replicas = str(min(3, brokers))
        props = {
            "offsets.topic.replication.factor": replicas,
            "default.replication.factor": replicas,
            "min.insync.replicas": str(min(2, brokers)),
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": str(min(2, brokers)),
        }
        self._c = Jvm(name, workdir, brokers=brokers, properties=props)
        self.bootstrap_servers = self._c.bootstrap_servers

    def create_topic(self, name: str, partitions: int, replicas: int) -> None:
        from confluent_kafka.admin import NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        config = {"min.insync.replicas": str(min(2, replicas))}
        for future in admin.create_topics([NewTopic(name, partitions, replicas, config=config)]).values():
            future.result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                return
            time.sleep(0.2)

    def kill(self, broker_id: int) -> None:
        self._c.kill_node(broker_id)

    def revive(self, broker_id: int) -> None:
        self._c.start()

    def close(self) -> None:
        self._c.close()


def mock_group(prefix: str, brokers: int = 3, coordinator: int = 2) -> str:
    """A group name whose coordinator on librdkafka's mock cluster is broker
    ``coordinator``: the mock picks broker number crc32(group) % brokers + 1
    (``rd_kafka_mock_cluster_get_coord``), and answers no DescribeGroups to ask."""
    n = 0
    while zlib.crc32(f"{prefix}-{n}".encode()) % brokers != coordinator - 1:
        n += 1
    return f"{prefix}-{n}"


def coordinator(bootstrap: str, group: str) -> int:
    """The id of the broker coordinating ``group`` on the cluster at ``bootstrap``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
        return int(future.result(15).coordinator.id)
    except Exception:  # a broker that cannot say: broker 2, as in the issue
        return 2


class Member(threading.Thread):
    """Calls ``poll(0.1)`` until stopped; keeps the messages and the longest calls."""

    def __init__(self, consumer: RoutedConsumer, sink: list[tuple[bytes, int]], t0: Callable[[], float]):
        super().__init__(daemon=True)
        self.consumer = consumer
        self.sink = sink
        self.t0 = t0
        self.stop = threading.Event()
        self.longest = 0.0
        self.slow: list[tuple[float, float]] = []  # (s since the rule write, took s) over 0.5 s
        self.error: BaseException | None = None
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                start = time.monotonic()
                msg = self.consumer.poll(0.1)
                took = time.monotonic() - start
                self.longest = max(self.longest, took)
                if took > 0.5:
                    self.slow.append((round(start - self.t0(), 2), round(took, 2)))
                if msg is None:
                    continue
                if msg.error() is None:
                    self.sink.append((msg.key(), int(msg.value())))
                else:
                    self.errors.append(str(msg.error()))
        except BaseException as exc:
            self.error = exc


class Caller(threading.Thread):
    """Calls ``assignment()`` and ``position()`` of ``consumers`` every 50 ms; the longest call."""

    def __init__(self, consumers: list[RoutedConsumer], topic: str) -> None:
        super().__init__(daemon=True)
        self.consumers = consumers
        self.topic = topic
        self.stop = threading.Event()
        self.longest = 0.0

    def run(self) -> None:
        parts = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        while not self.stop.wait(0.05):
            for consumer in self.consumers:
                start = time.monotonic()
                with contextlib.suppress(Exception):
                    consumer.assignment()
                    consumer.position(parts)
                self.longest = max(self.longest, time.monotonic() - start)


def run_once(args: argparse.Namespace, index: int, workdir: Path) -> dict[str, Any]:
    if args.backend == "mock":
        a: Cluster = MockCluster(3)
        b: Cluster = MockCluster(1)
    else:
        a = KafkaCluster(f"pb-a-{index}", 3, workdir)
        b = KafkaCluster(f"pb-b-{index}", 1, workdir)
    topic = f"moving-{index}"
    group = mock_group(f"movers-{index}") if args.backend == "mock" else f"movers-{index}"
    clients: list[Any] = []
    try:
        a.create_topic(topic, PARTITIONS, 3)
        b.create_topic(topic, PARTITIONS, 1)
        conf_dir = write_config(
            workdir / f"conf-{index}",
            {"A": a.bootstrap_servers, "B": b.bootstrap_servers},
            [topic_rule(topic, "A"), global_rule("A")],
        )
        rules = conf_dir / "route-rules.yaml"
        common = {"kbear.config": str(conf_dir), "kbear.reload.interval.ms": 100, "log_level": 0}
        group_conf: dict[str, Any] = {"group.protocol": args.protocol}
        if args.protocol == "classic":
            group_conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        consumers = [
            RoutedConsumer(
                {
                    **common,
                    **group_conf,
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "kbear.switch.drain.idle.ms": 500,
                }
            )
            for _ in range(args.members)
        ]
        clients += consumers
        producer = RoutedProducer({**common, "linger.ms": 5})
        clients.append(producer)
        for consumer in consumers:
            consumer.subscribe([topic])
        sink: list[tuple[bytes, int]] = []
        written = [0.0]
        members = [Member(c, sink, lambda: written[0]) for c in consumers]
        for m in members:
            m.start()
        if args.no_caller:  # no assignment() from this thread: it would wait for the pollers
            time.sleep(8.0)
        else:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and sum(len(c.assignment()) for c in consumers) < PARTITIONS:
                time.sleep(0.1)
        caller = Caller(consumers if not args.no_caller else [], topic)
        caller.start()
        delivered: list[tuple[bytes, int]] = []

        def report(err: Any, msg: Any) -> None:
            if err is None:
                delivered.append((msg.key(), int(msg.value())))

        t0 = time.monotonic()
        seq = 0
        killed: int | None = None
        revived = False
        while time.monotonic() - t0 < args.seconds:
            now = time.monotonic() - t0
            for _ in range(int(now * args.rate) - seq):
                producer.produce(topic, str(seq).encode(), f"k{seq % KEYS}".encode(), on_delivery=report)
                seq += 1
            producer.poll(0.005)
            if not written[0] and now >= 3.0:
                written[0] = time.monotonic()
                text = rules.read_text().replace(
                    "use cluster A", "use cluster B", 1
                )  # the topic rule comes first
                replace_file(rules, text)
            if written[0] and killed is None and time.monotonic() - written[0] >= args.kill_after:
                killed = coordinator(a.bootstrap_servers, group)
                if args.backend == "kafka" and killed == 1:
                    killed = 2  # node 1 is the controller: kill a broker only
                a.kill(killed)
                killed_at = time.monotonic()
            if killed is not None and not revived and time.monotonic() - killed_at >= args.down_s:
                a.revive(killed)
                revived = True
        unflushed = producer.flush(60)
        if killed is not None and not revived:
            a.revive(killed)
        wanted = set(delivered)
        end = time.monotonic() + 60
        while time.monotonic() < end and not wanted <= set(sink):
            time.sleep(0.2)
        time.sleep(1.0)
        for m in members:
            m.stop.set()
        caller.stop.set()
        for m in members:
            m.join(15)
        caller.join(15)
        counts = Counter(sink)
        last: dict[bytes, int] = {}
        breaks = 0
        for key, value in dict.fromkeys(sink):
            if value < last.get(key, -1):
                breaks += 1
            last[key] = value
        return {
            "backend": args.backend,
            "protocol": args.protocol,
            "members": args.members,
            "killed_broker": killed,
            "sent": seq,
            "delivered": len(delivered),
            "unflushed": unflushed,
            "lost": len(wanted - set(sink)),
            "duplicates": sum(n - 1 for n in counts.values()),
            "order_breaks": breaks,
            "longest_poll_s": round(max(m.longest for m in members), 3),
            "polls_over_0_5_s": [s for m in members for s in m.slow],
            "longest_other_thread_call_s": None if args.no_caller else round(caller.longest, 3),
            "kbear": str(Path(sys.modules["kbear"].__file__ or "").parent.parent),
            "stuck_members": sum(m.is_alive() for m in members),
            "errors": [e for m in members for e in m.errors][:5],
            "failures": [repr(m.error) for m in members if m.error is not None],
        }
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()
        b.close()
        a.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["mock", "kafka"], default="mock")
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the producer runs")
    parser.add_argument("--kill-after", type=float, default=1.5, help="seconds after the rule write")
    parser.add_argument("--down-s", type=float, default=6.0, help="seconds the broker stays down")
    parser.add_argument(
        "--no-caller", action="store_true", help="no assignment()/position() from other threads"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kbear-poll-bound-") as tmp:
        for i in range(args.runs):
            print(json.dumps(run_once(args, i, Path(tmp))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
