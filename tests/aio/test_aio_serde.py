"""RoutedAsyncSerializingProducer / RoutedAsyncDeserializingConsumer (issue #28 item 3):
confluent-kafka's asyncio serializing clients, routed, with a Schema Registry per
cluster: contexts and errors as confluent-kafka's, each message's schema id from
the registry of the cluster it is sent to, also when a move lands between
``produce()`` and the batch's send, and across a live move under load."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from _serde import KEY_SCHEMA, OTHER_SCHEMA, VALUE_SCHEMA, Clusters, on, schema_id, write_clusters
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from confluent_kafka.aio import AsyncDeserializingConsumer, AsyncSerializingProducer
from confluent_kafka.error import (
    ConsumeError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AsyncAvroDeserializer, AsyncAvroSerializer
from confluent_kafka.serialization import StringDeserializer, StringSerializer

from conftest import FAST_GROUP, plain_producer, read_all, rewrite_rules
from kbear import Router
from kbear.aio import RoutedAsyncDeserializingConsumer, RoutedAsyncSerializingProducer
from kbear.schema_registry import async_registry_client, per_cluster

pytestmark = pytest.mark.asyncio

NO_WATCH = {"kbear.reload.interval.ms": 0}


@pytest.fixture
def topic(two_clusters: Clusters, unique: Callable[[str], str]) -> str:
    name = unique("aserde")
    for cluster in two_clusters:
        cluster.create_topic(name, 3)
    return name


@pytest_asyncio.fixture
async def registries(unique: Callable[[str], str]) -> tuple[str, str]:
    """Two in-memory asyncio registries where the same schema gets different ids:
    another schema is registered first in B's."""
    east, west = f"mock://{unique('east')}", f"mock://{unique('west')}"
    await async_registry_client({"url": west}).register_schema("other-value", Schema(OTHER_SCHEMA, "AVRO"))
    return east, west


@pytest.fixture
def conf_dir(tmp_path: Path, two_clusters: Clusters, registries: tuple[str, str], topic: str) -> Path:
    east, west = registries
    directory = tmp_path / "conf"
    directory.mkdir()
    write_clusters(directory, two_clusters, ({"schema.registry.url": east}, {"schema.registry.url": west}))
    rewrite_rules(directory, on("A", topic))
    return directory


@pytest.fixture
def router(conf_dir: Path) -> Any:
    router = Router.from_path(conf_dir)
    yield router
    router.close()


@pytest_asyncio.fixture
async def opened() -> AsyncIterator[Callable[[Any], Any]]:
    """Register an asyncio client to close (awaited) at teardown."""
    clients: list[Any] = []

    def register(client: Any) -> Any:
        clients.append(client)
        return client

    yield register
    for client in reversed(clients):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 60)


async def avro_producer(router: Router, **kwargs: Any) -> RoutedAsyncSerializingProducer:
    producer: RoutedAsyncSerializingProducer = await RoutedAsyncSerializingProducer(
        {
            **NO_WATCH,
            "linger.ms": 5,
            "key.serializer": per_cluster(lambda sr: AsyncAvroSerializer(sr, KEY_SCHEMA)),
            "value.serializer": per_cluster(lambda sr: AsyncAvroSerializer(sr, VALUE_SCHEMA)),
        },
        router=router,
        **kwargs,
    )
    return producer


async def avro_consumer(router: Router, group: str) -> RoutedAsyncDeserializingConsumer:
    consumer: RoutedAsyncDeserializingConsumer = await RoutedAsyncDeserializingConsumer(
        {
            **NO_WATCH,
            **FAST_GROUP,
            "group.id": group,
            "kbear.switch.drain.idle.ms": 300,
            "key.deserializer": per_cluster(lambda sr: AsyncAvroDeserializer(sr, KEY_SCHEMA)),
            "value.deserializer": per_cluster(lambda sr: AsyncAvroDeserializer(sr, VALUE_SCHEMA)),
        },
        router=router,
    )
    return consumer


async def read(consumer: RoutedAsyncDeserializingConsumer, count: int, timeout: float = 30) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out.extend(await consumer.consume(500, 0.2))
    return out


# --------------------------------------------------------------------------- confluent-kafka's behaviour


async def test_contexts_carry_the_logical_topic_and_the_message_goes_to_its_route(
    two_clusters: Clusters, tmp_path: Path, opened: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    """A remapped topic: asyncio and plain serdes see the name the application used;
    the bytes land under the physical name on the route's cluster; poll() and
    consume() deserialize."""
    _a, b = two_clusters
    logical, physical = unique("logical"), unique("physical")
    b.create_topic(physical, 1)
    directory = tmp_path / "conf"
    directory.mkdir()
    write_clusters(directory, two_clusters, ({}, {}))
    rewrite_rules(directory, on("B", logical, physical))
    seen: list[tuple[str, str, Any]] = []

    async def serializer(obj: Any, ctx: Any) -> bytes:
        seen.append(("ser", ctx.topic, ctx.field))
        return str(obj).encode()

    def deserializer(data: bytes, ctx: Any) -> str:
        seen.append(("de", ctx.topic, ctx.field))
        return data.decode().upper()

    router = Router.from_path(directory)
    try:
        producer = opened(
            await RoutedAsyncSerializingProducer(
                {**NO_WATCH, "key.serializer": StringSerializer(), "value.serializer": serializer},
                router=router,
            )
        )
        delivered = await (await producer.produce(logical, key="k", value=42))
        assert delivered.topic() == logical
        assert await producer.produce(logical, key="k2", value="x", partition=0)
        assert await producer.flush() == 0
        raw = read_all(b, physical)
        assert [(m.key(), m.value()) for m in raw] == [(b"k", b"42"), (b"k2", b"x")]
        consumer = opened(
            await RoutedAsyncDeserializingConsumer(
                {
                    **NO_WATCH,
                    **FAST_GROUP,
                    "group.id": unique("g"),
                    "key.deserializer": StringDeserializer(),
                    "value.deserializer": deserializer,
                },
                router=router,
            )
        )
        await consumer.subscribe([logical])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            first = await consumer.poll(0.2)
        assert first is not None
        assert (first.topic(), first.key(), first.value()) == (logical, "k", "42")
        [second] = await read(consumer, 1)
        assert (second.key(), second.value(), second.deserialized_value()) == ("k2", "X", "X")
        assert seen == [
            ("ser", logical, "value"),
            ("ser", logical, "value"),
            ("de", logical, "value"),
            ("de", logical, "value"),
        ]
    finally:
        router.close()


async def test_serialization_errors_are_confluent_kafkas(
    router: Router, topic: str, opened: Callable[[Any], Any]
) -> None:
    async def failing(obj: Any, ctx: Any) -> bytes:
        raise ValueError("bad " + ctx.field)

    producer = opened(
        await RoutedAsyncSerializingProducer({**NO_WATCH, "key.serializer": failing}, router=router)
    )
    with pytest.raises(KeySerializationError) as key_err:
        await producer.produce(topic, key="k", value=b"v")
    assert isinstance(key_err.value.exception, ValueError)
    assert key_err.value.args[0].code() == KafkaError._KEY_SERIALIZATION
    values = opened(
        await RoutedAsyncSerializingProducer({**NO_WATCH, "value.serializer": failing}, router=router)
    )
    with pytest.raises(ValueSerializationError):
        await values.produce(topic, key=b"k", value="v")
    with pytest.raises(TypeError, match="topic must be a str"):
        await values.produce(b"bytes", value="v")  # type: ignore[arg-type]
    plain = opened(await RoutedAsyncSerializingProducer(NO_WATCH, router=router))
    with pytest.raises(NotImplementedError, match="Headers are not supported"):
        await plain.produce(topic, value=b"v", headers={"h": b"1"})
    await values.close()
    with pytest.raises(RuntimeError, match="Producer has been closed"):
        await values.produce(topic, value="v")
    with pytest.raises(
        ValueError, match=r"Cannot configure both value\.serializer and value\.serializer\.builder"
    ):
        await RoutedAsyncSerializingProducer(
            {**NO_WATCH, "value.serializer": failing, "value.serializer.builder": object()}, router=router
        )


async def test_deserialization_errors_carry_the_message(
    router: Router, topic: str, opened: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    producer = opened(await RoutedAsyncSerializingProducer(NO_WATCH, router=router))
    await producer.produce(topic, key=b"k", value=b"not-an-int", partition=0)
    assert await producer.flush() == 0

    async def failing(data: bytes, ctx: Any) -> Any:
        raise ValueError(ctx.field)

    consumer = opened(
        await RoutedAsyncDeserializingConsumer(
            {**NO_WATCH, **FAST_GROUP, "group.id": unique("g"), "value.deserializer": failing}, router=router
        )
    )
    await consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    with pytest.raises(ValueDeserializationError) as err:
        while time.monotonic() < deadline:
            await consumer.poll(0.2)
    assert err.value.kafka_message.value() == b"not-an-int"
    assert err.value.kafka_message.topic() == topic
    assert issubclass(ValueDeserializationError, ConsumeError)
    with pytest.raises(ValueError, match="num_messages must be between"):
        await consumer.consume(-1, 0)
    await consumer.close()
    with pytest.raises(RuntimeError, match="Consumer closed"):
        await consumer.poll(0)


async def test_same_configuration_same_behaviour_as_confluent_kafkas_async_clients(
    two_clusters: Clusters,
    router: Router,
    topic: str,
    opened: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """The same string serdes through confluent-kafka's asyncio clients and kbear's: the
    same bytes on the cluster, the same messages decoded."""
    a, _ = two_clusters
    conf = {"key.serializer": StringSerializer(), "value.serializer": StringSerializer("utf_8")}
    plain = opened(await AsyncSerializingProducer({**conf, "bootstrap.servers": a.bootstrap_servers}))
    routed = opened(await RoutedAsyncSerializingProducer({**NO_WATCH, **conf}, router=router))
    for producer in (plain, routed):
        delivered = await (await producer.produce(topic, key="clé", value="valeur", partition=1))
        assert (delivered.topic(), delivered.partition()) == (topic, 1)
    got = [(m.key(), m.value(), m.partition()) for m in read_all(a, topic)]
    assert got[0] == got[1] == ("clé".encode(), b"valeur", 1)
    de = {"key.deserializer": StringDeserializer(), "value.deserializer": StringDeserializer(), **FAST_GROUP}
    readers = (
        await AsyncDeserializingConsumer(
            {**de, "group.id": unique("p"), "bootstrap.servers": a.bootstrap_servers}
        ),
        await RoutedAsyncDeserializingConsumer({**NO_WATCH, **de, "group.id": unique("r")}, router=router),
    )
    decoded = []
    for consumer in readers:
        opened(consumer)
        await consumer.assign([TopicPartition(topic, 1, OFFSET_BEGINNING)])
        decoded.append([(m.topic(), m.key(), m.value()) for m in await read(consumer, 2)])
    assert decoded[0] == decoded[1] == [(topic, "clé", "valeur")] * 2


# --------------------------------------------------------------------------- a registry per cluster


async def test_a_move_between_produce_and_send_serializes_for_the_new_cluster(
    two_clusters: Clusters,
    registries: tuple[str, str],
    router: Router,
    conf_dir: Path,
    topic: str,
    opened: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """produce() serializes with A's registry; the topic moves to B before the
    buffer is sent: the message reaches B carrying B's schema id, not A's, and
    decodes there. A cluster without a registry (per_cluster without default) fails
    the message's future (KeySerializationError: the key is serialized first)."""
    a, b = two_clusters
    east, west = (async_registry_client({"url": u}) for u in registries)
    producer = opened(await avro_producer(router, batch_size=10_000, buffer_timeout=0))
    record = {"seq": 1, "key": "k1", "note": "before the move"}
    future = await producer.produce(topic, key="k1", value=record)
    assert not future.done()  # buffered, serialized for A
    rewrite_rules(conf_dir, on("B", topic))
    assert router.reload()
    assert await producer.flush() == 0
    delivered = await future
    assert delivered.topic() == topic
    assert read_all(a, topic) == []
    [on_b] = read_all(b, topic)
    b_id = (await west.get_latest_version(f"{topic}-value")).schema_id
    assert schema_id(on_b.value()) == b_id
    assert b_id != (await east.get_latest_version(f"{topic}-value")).schema_id
    consumer = opened(await avro_consumer(router, unique("g")))
    await consumer.subscribe([topic])
    [msg] = await read(consumer, 1)
    assert (msg.key(), msg.value()) == ("k1", record)

    # back on A; then B loses its registry while a message serialized for A waits:
    # it cannot be serialized for B, its future fails as a serialization error
    rewrite_rules(conf_dir, on("A", topic))
    assert router.reload()
    assert await producer.flush() == 0  # (the move applied)
    pending = await producer.produce(topic, key="k2", value={**record, "seq": 2})
    write_clusters(conf_dir, two_clusters, ({"schema.registry.url": registries[0]}, {}))
    rewrite_rules(conf_dir, on("B", topic))
    assert router.reload()
    await producer.flush()
    with pytest.raises(KeySerializationError, match=r"cluster .B. has no schema\.registry\.url"):
        await pending


async def test_a_live_move_under_load_decodes_every_record_as_sent(
    two_clusters: Clusters,
    registries: tuple[str, str],
    router: Router,
    conf_dir: Path,
    topic: str,
    opened: Callable[[Any], Any],
) -> None:
    """A producer task sends Avro keys and values while the topic moves from A to B
    (the same schemas have other ids there); a routed asyncio deserializing consumer
    in drain mode reads both: every record decoded equals the record sent, none lost."""
    a, b = two_clusters
    producer = opened(await avro_producer(router, batch_size=200, buffer_timeout=0.05))
    consumer = opened(await avro_consumer(router, topic + ".group"))
    await consumer.subscribe([topic])
    sent: dict[int, dict[str, Any]] = {}
    futures: list[asyncio.Future[Any]] = []

    async def produce() -> None:
        for seq in range(2000):
            record = {"seq": seq, "key": f"k{seq % 7}", "note": "n" * (seq % 13)}
            futures.append(await producer.produce(topic, key=record["key"], value=record))
            sent[seq] = record
            if seq == 1000:
                rewrite_rules(conf_dir, on("B", topic))
                assert router.reload()
            if seq % 50 == 0:
                await asyncio.sleep(0.005)
        assert await producer.flush() == 0

    task = asyncio.get_running_loop().create_task(produce())
    received: list[Any] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (task.done() and len(received) >= len(sent)):
        received.extend(await consumer.consume(500, 0.1))
    await task
    assert all(f.done() and f.exception() is None for f in futures)
    on_a, on_b = read_all(a, topic), read_all(b, topic)
    assert on_a and on_b and len(on_a) + len(on_b) == len(sent) == 2000
    assert {schema_id(m.value()) for m in on_a}.isdisjoint({schema_id(m.value()) for m in on_b})
    decoded = {m.value()["seq"]: m.value() for m in received}
    assert set(decoded) == set(sent)  # 0 lost
    assert all(decoded[s] == r for s, r in sent.items())  # every record as sent
    assert all(m.key() == m.value()["key"] for m in received)
    assert consumer.routes()[topic].cluster_id == "B"


class ClusterTagging:
    """An asyncio serializer that asks for the Kafka cluster id, as confluent-kafka's
    serdes resolving subjects with ``AssociatedNameStrategy`` do, and writes it out."""

    def __init__(self) -> None:
        self.resolver: Any = None

    def set_async_cluster_id_resolver(self, resolver: Any) -> None:
        self.resolver = resolver

    async def __call__(self, obj: Any, ctx: Any) -> bytes:
        return f"{await self.resolver()}/{obj}".encode()


async def test_serdes_asking_for_the_kafka_cluster_id_are_told_the_messages_cluster(
    two_clusters: Clusters, router: Router, conf_dir: Path, topic: str, opened: Callable[[Any], Any]
) -> None:
    """A serde given as is that asks for the Kafka cluster id is told the id of the
    cluster each message is sent to, also when a move lands between produce() and send
    (with one executor thread: the thread sending the batch waits for the loop, which
    asks the cluster id elsewhere)."""
    a, b = two_clusters
    ids = [plain_producer(c).cluster_id(10) for c in two_clusters]
    assert ids[0] != ids[1]
    producer = opened(
        await RoutedAsyncSerializingProducer(
            {**NO_WATCH, "value.serializer": ClusterTagging()},
            router=router,
            max_workers=1,
            batch_size=10_000,
            buffer_timeout=0,
        )
    )
    await producer.produce(topic, value="one")
    assert await producer.flush() == 0
    await producer.produce(topic, value="two")  # serialized for A, sent to B
    rewrite_rules(conf_dir, on("B", topic))
    assert router.reload()
    assert await asyncio.wait_for(producer.flush(), 30) == 0
    assert [m.value() for m in read_all(a, topic)] == [f"{ids[0]}/one".encode()]
    assert [m.value() for m in read_all(b, topic)] == [f"{ids[1]}/two".encode()]


async def test_an_infinite_consume_returns_with_a_message_as_confluent_kafkas(
    conf_dir: Path,
    two_clusters: Clusters,
    topic: str,
    opened: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """``consume(1, -1)`` returns once it has a message, as confluent-kafka's (its
    ``Consumer.consume`` polls again until one comes): started over two clusters before
    ``subscribe()``, it is still waiting when the routed poll came back empty (after
    about a second while nothing is subscribed), then returns the message produced
    after the subscription."""
    other = unique("aserde-b")
    two_clusters[1].create_topic(other, 1)
    rewrite_rules(conf_dir, on("B", other))  # topic on A, other on B: no one-cluster path
    conf = {**NO_WATCH, **FAST_GROUP, "kbear.config": str(conf_dir), "group.id": unique("g")}
    consumer = opened(
        await RoutedAsyncDeserializingConsumer({**conf, "value.deserializer": StringDeserializer()})
    )
    waiting = asyncio.ensure_future(consumer.consume(1, -1))
    await asyncio.sleep(2.5)
    assert not waiting.done(), waiting.result()
    await consumer.subscribe([topic, other])
    with plain_producer(two_clusters[1]) as producer:
        producer.produce(other, b"sent", b"k")
        assert producer.flush(10) == 0
    (msg,) = await asyncio.wait_for(waiting, 60)
    assert (msg.topic(), msg.key(), msg.value()) == (other, b"k", "sent")
