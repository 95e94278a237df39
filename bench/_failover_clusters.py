"""The two clusters of ``bench/failover.py``: librdkafka mock clusters, or Apache
Kafka broker processes with MirrorMaker 2 replicating ``east`` to ``west``.

A pair gives the bench the same handles on either backend: the bootstrap servers,
the meta keys of ``east``'s entry in ``clusters.yaml`` (its standby and how it is
mirrored), :meth:`lose` (the loss: the mock's broker set down; ``kill -9`` of the
Kafka broker process) and :meth:`restore` (the mock's broker up again; the broker
process restarted on the same log directories), the mirror's start and stop, and
the consumers' group settings.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kbear.mirror import decode_checkpoint
from kbear.testing import EmbeddedCluster

#: the mirrored topic keeps its name on west (MirrorMaker 2's IdentityReplicationPolicy):
#: a producer that fails over writes the topic itself there, so the group reads one topic
#: Over examples/mirrormaker2/mm2.properties (what integration/mirror.py runs): the
#: benchmark's mirror syncs every record and checkpoints and looks groups up every
#: second, as its figures were measured with (the file's offset flush every second
#: came after them: 60 s then).
FAST_MIRROR = {
    "offset.lag.max": "0",
    "emit.checkpoints.interval.seconds": "1",
    "refresh.topics.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
}


class MockPair:
    """Two embedded (mock) clusters, no mirror: ``east`` lost by setting its broker down."""

    name = "mock"
    mirrored = False

    def __init__(self) -> None:
        self.east, self.west = EmbeddedCluster(), EmbeddedCluster()

    @property
    def east_bootstrap(self) -> str:
        return self.east.bootstrap_servers

    @property
    def west_bootstrap(self) -> str:
        return self.west.bootstrap_servers

    def east_meta(self) -> dict[str, Any]:
        return {"kbear.failover.to": "west"}

    def group_conf(self) -> dict[str, Any]:
        return {"group.protocol": "consumer"}

    def create_topic(self, topic: str, partitions: int) -> None:
        for c in (self.east, self.west):
            c.create_topic(topic, partitions)

    def start_mirror(self, topic: str, group: str) -> None:
        """No mirror between mock clusters."""

    def wait_checkpointed(self, group: str, timeout_s: float) -> float | None:
        return None

    def stop_mirror(self, kill: bool = False) -> None:
        """No mirror between mock clusters."""

    def last_checkpoints(self, group: str) -> dict[int, int]:
        return {}

    def lose(self) -> None:
        self.east.set_broker_down(-1)

    def restore(self) -> float:
        started = time.monotonic()
        self.east.set_broker_up(-1)
        return time.monotonic() - started

    def close(self) -> None:
        self.west.close()
        self.east.close()


class KafkaPair:
    """Two Apache Kafka clusters (one broker/controller JVM process each, started
    side by side under ``workdir``) and MirrorMaker 2 (dedicated mode) replicating
    ``east`` to ``west`` with the identity replication policy, an offset sync for
    every record and checkpoints every second (``FAST_MIRROR``)."""

    name = "kafka"
    mirrored = True

    def __init__(self, workdir: Path) -> None:
        from concurrent.futures import ThreadPoolExecutor

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the integration/ package
        from integration.kafka import KafkaCluster

        self.workdir = workdir
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(KafkaCluster, name, workdir) for name in ("east", "west")]
        self.east, self.west = (f.result() for f in futures)
        self.mm2: Any = None
        self.version = self.east.version

    @property
    def east_bootstrap(self) -> str:
        return str(self.east.bootstrap_servers)

    @property
    def west_bootstrap(self) -> str:
        return str(self.west.bootstrap_servers)

    def east_meta(self) -> dict[str, Any]:
        return {
            "kbear.failover.to": "west",
            "kbear.mirror": "mm2",
            "kbear.mirror.source.alias": "east",
            "kbear.mirror.replication.policy": "identity",
        }

    def group_conf(self) -> dict[str, Any]:
        # KIP-848: the broker holds the heartbeats (integration/kafka.py BASE_PROPERTIES)
        return {"group.protocol": "consumer"}

    def create_topic(self, topic: str, partitions: int) -> None:
        for c in (self.east, self.west):
            c.create_topic(topic, partitions)

    def start_mirror(self, topic: str, group: str, timeout_s: float = 240.0) -> None:
        """MirrorMaker 2 mirroring ``topic`` and checkpointing ``group``; returns once a
        first record produced on east is on west (MirrorMaker 2 starts three connectors
        first: up to ~100 s on a busy 2-core machine). Raises TimeoutError."""
        from integration.mirror import MirrorMaker2

        self.mm2 = MirrorMaker2(
            self.east,
            self.west,
            self.workdir / "mm2",
            topics=topic,
            groups=group,
            identity=True,
            bench_overrides=FAST_MIRROR,
        )
        producer = Producer({"bootstrap.servers": self.east_bootstrap})
        producer.produce(topic, b"warm-up", key=b"warm-up")
        producer.flush(30)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.mm2.alive():
                break
            if _end_offsets(self.west_bootstrap, topic) > 0:
                return
            time.sleep(1.0)
        raise TimeoutError(f"MirrorMaker 2 mirrored nothing within {timeout_s:.0f} s ({self.mm2.log_path})")

    def wait_checkpointed(self, group: str, timeout_s: float) -> float | None:
        """Seconds until MirrorMaker 2 wrote a checkpoint of ``group`` on west (bounded;
        None when none came)."""
        started = time.monotonic()
        topic = "east.checkpoints.internal"
        while time.monotonic() - started < timeout_s:
            for key, value in _records(self.west_bootstrap, topic):
                if decode_checkpoint(key, value).group == group:
                    return time.monotonic() - started
            time.sleep(1.0)
        return None

    def last_checkpoints(self, group: str) -> dict[int, int]:
        """The upstream offset of MirrorMaker 2's last checkpoint of ``group``, per partition."""
        latest: dict[int, int] = {}
        for key, value in _records(self.west_bootstrap, "east.checkpoints.internal"):
            checkpoint = decode_checkpoint(key, value)
            if checkpoint.group == group:
                latest[checkpoint.partition] = checkpoint.upstream_offset
        return latest

    def stop_mirror(self, kill: bool = False) -> None:
        """The runbook's step after a failover: stop the mirror east -> west (else, once
        east is back, it would copy what east held into the topic west now serves).
        ``kill``: at once (SIGKILL), as a mirror that stops mirroring."""
        mm2, self.mm2 = self.mm2, None
        if mm2 is not None:
            if kill and mm2.proc is not None:
                mm2.proc.kill()
            mm2.close()

    def lose(self) -> None:
        self.east.kill()  # SIGKILL of the broker process, as a crash

    def restore(self) -> float:
        """The broker process restarted on its log directories; seconds until it answers."""
        started = time.monotonic()
        self.east.start()
        return time.monotonic() - started

    def close(self) -> None:
        self.stop_mirror()
        self.west.close()
        self.east.close()


def _end_offsets(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-marks"})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions
        )
    finally:
        consumer.close()


def _records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of ``topic`` now (bounded: 10 s)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-reader", "enable.auto.commit": False}
    )
    out: list[tuple[bytes, bytes]] = []
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return out
        ends = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                ends[p] = (low, high)
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        want = sum(h - lo for lo, h in ends.values())
        deadline = time.monotonic() + 10
        while len(out) < want and time.monotonic() < deadline:
            out.extend((m.key(), m.value()) for m in consumer.consume(1000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return out


def make_pair(backend: str, workdir: Path) -> MockPair | KafkaPair:
    """The clusters of ``backend`` (``mock`` or ``kafka``)."""
    return KafkaPair(workdir) if backend == "kafka" else MockPair()
