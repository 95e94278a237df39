"""Routed clients are freed at their last reference, as confluent-kafka's: with
Python's cycle collector off, every routed client class, used over two clusters
and dropped without ``close()``, is gone at once and each confluent-kafka client it
built is freed or closed: no reference cycle runs between a client and its parts."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer

from conftest import FAST_GROUP, Rule, rule
from kbear import (
    ClientBalancedConsumer,
    RoutedAdminClient,
    RoutedConsumer,
    RoutedDeserializingConsumer,
    RoutedDeserializingShareConsumer,
    RoutedProducer,
    RoutedSerializingProducer,
    RoutedShareConsumer,
)
from kbear._clients import confluent_client, mount
from kbear.aio import (
    RoutedAIOConsumer,
    RoutedAIOProducer,
    RoutedAsyncDeserializingConsumer,
    RoutedAsyncSerializingProducer,
)
from kbear.balanced import _registry
from kbear.testing import EmbeddedCluster

#: topic ``ta`` on cluster A, ``tb`` on cluster B
RULES: list[Rule] = [rule("a", "use cluster A", isGlobal=True), rule("b", "use cluster B", topic="tb")]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    """The ids of the confluent-kafka clients built during the test (kbear's client
    factory, the client-balanced consumer's report producers): ids only, no reference."""
    ids: set[int] = set()

    def factory(kind: Any, cluster_id: str, config: dict[str, Any]) -> Any:
        client = confluent_client(kind, cluster_id, config)
        ids.add(id(client))
        return client

    def report_producer(config: dict[str, Any]) -> Producer:
        producer = Producer(config)
        ids.add(id(producer))
        return producer

    monkeypatch.setattr(_registry, "Producer", report_producer)
    with mount(factory):
        yield ids


def closed(client: Any) -> bool:
    """Whether ``client`` (a confluent-kafka client) is closed: its calls refuse."""
    try:
        if isinstance(client, Producer):
            client.poll(0)
        elif isinstance(client, Consumer):
            client.assignment()
        elif isinstance(client, ShareConsumer):
            client.subscription()
        else:
            return False  # an AdminClient is never closed: only freed
    except Exception:
        return True
    return False


@pytest.fixture
def conf(
    share_clusters: tuple[EmbeddedCluster, EmbeddedCluster], make_config: Callable[[list[Rule]], Path]
) -> dict[str, Any]:
    """A configuration (kbear.config: the client owns its router, watching it) routing
    ``ta`` to cluster A and ``tb`` to B, each topic holding a message."""
    for cluster, topic in zip(share_clusters, ("ta", "tb"), strict=True):
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce(topic, b"v")
        assert producer.flush(10) == 0
    return {"kbear.config": str(make_config(RULES)), "kbear.reload.interval.ms": 1000}


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Python's cycle collector off during the test (what is freed is freed by
    reference counting alone), and no earlier test's garbage in the way."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def used(name: str, conf: dict[str, Any]) -> Any:
    """A blocking routed client of kind ``name``, used on both clusters."""
    group = {**conf, **FAST_GROUP, "group.id": f"freed-{name}"}
    if name in ("producer", "serializing"):
        producer = (RoutedProducer if name == "producer" else RoutedSerializingProducer)(conf)
        producer.produce("ta", value=b"x")
        producer.produce("tb", value=b"y")
        assert producer.flush(10) == 0
        return producer
    if name in ("consumer", "deserializing"):
        consumer = (RoutedConsumer if name == "consumer" else RoutedDeserializingConsumer)(group)
        consumer.subscribe(["ta", "tb"])
        seen = 0
        for _ in range(100):
            msg = consumer.poll(0.1)
            seen += msg is not None and msg.error() is None
            if seen == 2:
                return consumer
        pytest.fail(f"{name}: {seen} of 2 messages read")
    if name == "admin":
        admin = RoutedAdminClient(conf)
        assert {"ta", "tb"} <= set(admin.list_topics(timeout=10).topics)
        return admin
    if name in ("share", "deserializing share"):
        share = (RoutedShareConsumer if name == "share" else RoutedDeserializingShareConsumer)(
            {**conf, "group.id": f"freed-{name.replace(' ', '-')}"}
        )
        share.subscribe(["ta", "tb"])
        share.poll(0.5)
        return share
    assert name == "client-balanced"
    balanced = ClientBalancedConsumer(group, source_count=1, node_id=0)
    balanced.subscribe(["ta", "tb"])
    for _ in range(50):
        if len(balanced.consume(10, 0.1)):
            break
    return balanced


def assert_freed(ref: weakref.ref[Any], built: set[int]) -> None:
    assert ref() is None, f"{ref}: alive after its last reference went ({gc.get_referrers(ref())!r:.300})"
    assert built, "no confluent-kafka client was built"
    left = [o for o in gc.get_objects() if id(o) in built]
    assert all(closed(o) for o in left), f"still open: {left}"


@pytest.mark.parametrize(
    "name",
    [
        "producer",
        "serializing",
        "consumer",
        "deserializing",
        "admin",
        "share",
        "deserializing share",
        "client-balanced",
    ],
)
def test_a_dropped_blocking_client_is_freed_with_its_clients(
    name: str, conf: dict[str, Any], built: set[int], collector_off: None
) -> None:
    client = used(name, conf)
    ref = weakref.ref(client)
    del client
    assert_freed(ref, built)


async def used_aio(name: str, conf: dict[str, Any]) -> Any:
    """An asyncio routed client of kind ``name``, used on both clusters."""
    if name in ("aio producer", "aio serializing"):
        producer = (
            RoutedAIOProducer(conf) if name == "aio producer" else await RoutedAsyncSerializingProducer(conf)
        )
        for topic in ("ta", "tb"):
            await producer.produce(topic, value=b"x")
        assert await producer.flush() == 0
        return producer
    group = {**conf, **FAST_GROUP, "group.id": f"freed-{name.replace(' ', '-')}"}
    consumer = (
        RoutedAIOConsumer(group) if name == "aio consumer" else await RoutedAsyncDeserializingConsumer(group)
    )
    await consumer.subscribe(["ta", "tb"])
    seen = 0
    for _ in range(100):
        msg = await consumer.poll(0.1)
        seen += msg is not None and msg.error() is None
        if seen == 2:
            return consumer
    pytest.fail(f"{name}: {seen} of 2 messages read")


@pytest.mark.parametrize("name", ["aio producer", "aio serializing", "aio consumer", "aio deserializing"])
def test_a_dropped_asyncio_client_is_freed_with_its_clients(
    name: str, conf: dict[str, Any], built: set[int], collector_off: None
) -> None:
    async def main() -> weakref.ref[Any]:
        client = await used_aio(name, conf)
        ref = weakref.ref(client)
        del client
        await asyncio.sleep(0.3)  # its tasks see it gone, on a loop still running
        assert ref() is None, f"{name}: alive after its last reference went"
        return ref

    assert_freed(asyncio.run(main()), built)
