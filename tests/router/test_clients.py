"""The client registry's factory (kbear.testing.mount_clients): routed clients build
each cluster's client through it, so a test can put fakes (or wrapped real clients)
under RoutedProducer, RoutedConsumer and RoutedAdminClient."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import rule, write_config
from kbear import RoutedAdminClient, RoutedConsumer, RoutedProducer, Router
from kbear.testing import ClientKind, confluent_client, mount_clients

NO_WATCH = {"kbear.reload.interval.ms": 0}


class FakeProducer:
    """Records what it is asked to send; delivers at poll()/flush()."""

    def __init__(self, cluster_id: str, config: dict[str, Any]) -> None:
        self.cluster_id = cluster_id
        self.config = config
        self.sent: list[tuple[str, Any]] = []
        self.closed = False

    def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
        self.sent.append((topic, value))

    def poll(self, timeout: float = -1) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0

    def purge(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def close(self, *args: Any) -> bool:
        self.closed = True
        return True


def test_a_mounted_factory_builds_every_cluster_client_of_a_producer(tmp_path: Path) -> None:
    rules = [
        rule("all", "use cluster A", isGlobal=True),
        rule("b", "use cluster B, topic b-there", topic="b"),
    ]
    router = Router.from_path(write_config(tmp_path, {"A": "a.invalid:9092", "B": "b.invalid:9092"}, rules))
    built: list[FakeProducer] = []

    def factory(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
        assert kind == "producer"
        fake = FakeProducer(cluster_id, config)
        built.append(fake)
        return fake

    try:
        with mount_clients(factory):
            producer = RoutedProducer({**NO_WATCH, "client.id": "fake"}, router=router)
        # the factory stays the producer's after the block
        for topic, value in (("x", b"1"), ("b", b"2"), ("y", b"3"), ("b", b"4")):
            producer.produce(topic, value)
        assert producer.flush(1) == 0
        producer.close()
    finally:
        router.close()
    by_cluster = {f.cluster_id: f for f in built}
    assert set(by_cluster) == {"A", "B"}
    assert by_cluster["A"].sent == [("x", b"1"), ("y", b"3")]
    assert by_cluster["B"].sent == [("b-there", b"2"), ("b-there", b"4")]  # the physical name
    # the cluster's properties merged over the application's configuration
    assert by_cluster["B"].config["bootstrap.servers"] == "b.invalid:9092"
    assert by_cluster["B"].config["client.id"] == "fake"
    assert all(f.closed for f in built)


def test_a_factory_wrapping_confluent_kafka_sees_each_kind_of_client(tmp_path: Path) -> None:
    """Producer, consumer and admin clients all come through the mounted factory."""
    rules = [rule("all", "use cluster A", isGlobal=True)]
    router = Router.from_path(write_config(tmp_path, {"A": "127.0.0.1:1"}, rules))
    seen: list[tuple[str, str]] = []

    def factory(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
        seen.append((kind, cluster_id))
        return confluent_client(kind, cluster_id, config)

    try:
        with mount_clients(factory):
            producer = RoutedProducer(NO_WATCH, router=router, topics=["t"])
            consumer = RoutedConsumer({**NO_WATCH, "group.id": "g"}, router=router)
            admin = RoutedAdminClient(NO_WATCH, router=router)
        consumer.subscribe(["t"])
        consumer.poll(0)
        producer.close(0)
        consumer.close()
        admin.close()
    finally:
        router.close()
    assert ("producer", "A") in seen
    assert ("consumer", "A") in seen
    assert ("admin", "A") in seen
