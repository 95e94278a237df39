"""RoutedSerializingProducer / RoutedDeserializingConsumer and a Schema Registry per
cluster (issue #28 item 1): confluent-kafka's behaviour (settings, contexts,
errors), and schema ids that belong to the registry of the cluster a message is
sent to / read from, also across a live move under load."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _serde import KEY_SCHEMA, OTHER_SCHEMA, VALUE_SCHEMA, Clusters, on, schema_id, write_clusters
from confluent_kafka import KafkaError, SerializingProducer
from confluent_kafka.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import StringSerializer

from conftest import FAST_GROUP, read_all, rewrite_rules, rule
from kbear import RoutedDeserializingConsumer, RoutedProducer, RoutedSerializingProducer, Router
from kbear.schema_registry import per_cluster, registry_client, registry_config

NO_WATCH = {"kbear.reload.interval.ms": 0}


@pytest.fixture
def registries(unique: Callable[[str], str]) -> tuple[str, str]:
    """Two in-memory registries (mock:// URLs) where the same schema gets different ids:
    another schema is registered first in B's."""
    east, west = f"mock://{unique('east')}", f"mock://{unique('west')}"
    registry_client({"url": west}).register_schema("other-value", Schema(OTHER_SCHEMA, "AVRO"))
    return east, west


@pytest.fixture
def topic(two_clusters: Clusters, unique: Callable[[str], str]) -> str:
    name = unique("serde")
    for cluster in two_clusters:
        cluster.create_topic(name, 3)
    return name


@pytest.fixture
def conf_dir(tmp_path: Path, two_clusters: Clusters, registries: tuple[str, str], topic: str) -> Path:
    east, west = registries
    directory = tmp_path / "conf"
    directory.mkdir()
    write_clusters(directory, two_clusters, ({"schema.registry.url": east}, {"schema.registry.url": west}))
    rewrite_rules(directory, on("A", topic))
    return directory


@pytest.fixture
def router(conf_dir: Path) -> Iterator[Router]:
    router = Router.from_path(conf_dir)
    yield router
    router.close()


def avro_producer(router: Router, **extra: Any) -> RoutedSerializingProducer:
    return RoutedSerializingProducer(
        {
            **NO_WATCH,
            "linger.ms": 5,
            "key.serializer": per_cluster(lambda sr: AvroSerializer(sr, KEY_SCHEMA)),
            "value.serializer": per_cluster(lambda sr: AvroSerializer(sr, VALUE_SCHEMA)),
            **extra,
        },
        router=router,
    )


def avro_consumer(router: Router, group: str) -> RoutedDeserializingConsumer:
    return RoutedDeserializingConsumer(
        {
            **NO_WATCH,
            **FAST_GROUP,
            "group.id": group,
            "kbear.switch.drain.idle.ms": 300,
            "key.deserializer": per_cluster(lambda sr: AvroDeserializer(sr, KEY_SCHEMA)),
            "value.deserializer": per_cluster(lambda sr: AvroDeserializer(sr, VALUE_SCHEMA)),
        },
        router=router,
    )


def poll_records(consumer: RoutedDeserializingConsumer, count: int, timeout: float) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None:
            out.append(msg)
    return out


# --------------------------------------------------------------------------- confluent-kafka's behaviour


def test_contexts_carry_the_logical_topic_and_the_message_is_sent_to_its_route(
    two_clusters: Clusters, tmp_path: Path, closing: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    """A remapped topic: the serializers and deserializers see the name the
    application used; the bytes land under the physical name on the route's cluster."""
    _a, b = two_clusters
    logical, physical = unique("logical"), unique("physical")
    b.create_topic(physical, 1)
    directory = tmp_path / "conf"
    directory.mkdir()
    write_clusters(directory, two_clusters, ({}, {}))
    rewrite_rules(directory, on("B", logical, physical))
    seen: list[tuple[str, str, Any]] = []

    def serializer(obj: Any, ctx: Any) -> bytes:
        seen.append(("ser", ctx.topic, ctx.field))
        return str(obj).encode()

    def deserializer(data: bytes, ctx: Any) -> str:
        seen.append(("de", ctx.topic, ctx.field))
        return data.decode().upper()

    router = closing(Router.from_path(directory))
    producer = closing(
        RoutedSerializingProducer(
            {**NO_WATCH, "key.serializer": serializer, "value.serializer": serializer}, router=router
        )
    )
    producer.produce(logical, key="k", value=42, headers={"h": b"1"})
    assert producer.flush(10) == 0
    raw = read_all(b, physical)
    assert [(m.key(), m.value()) for m in raw] == [(b"k", b"42")]
    consumer = closing(
        RoutedDeserializingConsumer(
            {**NO_WATCH, **FAST_GROUP, "group.id": unique("g"), "value.deserializer": deserializer},
            router=router,
        )
    )
    consumer.subscribe([logical])
    [msg] = poll_records(consumer, 1, 20)
    assert (msg.topic(), msg.key(), msg.value()) == (logical, b"k", "42")
    assert seen == [("ser", logical, "key"), ("ser", logical, "value"), ("de", logical, "value")]


def test_serialization_errors_are_confluent_kafkas(
    router: Router, topic: str, closing: Callable[[Any], Any]
) -> None:
    def failing(obj: Any, ctx: Any) -> bytes:
        raise ValueError("bad " + ctx.field)

    producer = closing(RoutedSerializingProducer({**NO_WATCH, "key.serializer": failing}, router=router))
    with pytest.raises(KeySerializationError) as key_err:
        producer.produce(topic, key="k", value=b"v")
    assert isinstance(key_err.value.exception, ValueError)
    assert key_err.value.args[0].code() == KafkaError._KEY_SERIALIZATION
    producer2 = closing(RoutedSerializingProducer({**NO_WATCH, "value.serializer": failing}, router=router))
    with pytest.raises(ValueSerializationError):
        producer2.produce(topic, key=b"k", value="v")
    with pytest.raises(TypeError, match="topic must be a str"):
        producer2.produce(b"bytes", value="v")  # type: ignore[arg-type]
    producer2.close()
    with pytest.raises(RuntimeError, match="Producer has been closed"):
        producer2.produce(topic, value="v")
    with pytest.raises(
        ValueError, match=r"Cannot configure both value\.serializer and value\.serializer\.builder"
    ):
        RoutedSerializingProducer(
            {**NO_WATCH, "value.serializer": failing, "value.serializer.builder": object()}, router=router
        )


def test_deserialization_errors_carry_the_message(
    router: Router, topic: str, closing: Callable[[Any], Any], unique: Callable[[str], str]
) -> None:
    producer = closing(RoutedProducer(NO_WATCH, router=router))
    producer.produce(topic, b"not-an-int", b"k", partition=0)
    assert producer.flush(10) == 0

    def failing(data: bytes, ctx: Any) -> Any:
        raise ValueError(ctx.field)

    consumer = closing(
        RoutedDeserializingConsumer(
            {**NO_WATCH, **FAST_GROUP, "group.id": unique("g"), "value.deserializer": failing}, router=router
        )
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    with pytest.raises(ValueDeserializationError) as err:
        while time.monotonic() < deadline:
            consumer.poll(0.1)
    assert err.value.kafka_message.value() == b"not-an-int"
    assert err.value.kafka_message.topic() == topic
    with pytest.raises(NotImplementedError):
        consumer.consume(1, 0)
    assert issubclass(KeyDeserializationError, ConsumeError)


def test_same_configuration_same_behaviour_as_confluent_kafkas_serializing_producer(
    two_clusters: Clusters, router: Router, topic: str, closing: Callable[[Any], Any]
) -> None:
    """The same string serializers through both: the same bytes on the cluster."""
    a, _ = two_clusters
    conf = {"key.serializer": StringSerializer(), "value.serializer": StringSerializer("utf_8")}
    plain = SerializingProducer({**conf, "bootstrap.servers": a.bootstrap_servers})
    routed = closing(RoutedSerializingProducer({**NO_WATCH, **conf}, router=router))
    for producer in (plain, routed):
        producer.produce(topic, key="clé", value="valeur", partition=1, headers=[("h", b"x")])
        assert producer.flush(10) == 0
    plain.close()
    got = [(m.key(), m.value(), m.partition(), m.headers()) for m in read_all(a, topic)]
    assert got[0] == got[1] == ("clé".encode(), b"valeur", 1, [("h", b"x")])


# --------------------------------------------------------------------------- a registry per cluster


def test_registry_settings_come_from_the_cluster_meta(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kbear import load_config

    monkeypatch.setenv("SR_USER_INFO", "alice:s3cret")
    (tmp_path / "clusters.yaml").write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "id": "A",
                        "meta": {
                            "bootstrap.servers": "a:9092",
                            "schema.registry.url": "https://sr.example:8081",
                            "schema.registry.basic.auth.user.info": "${SR_USER_INFO}",
                            "schema.registry.timeout": 5,
                        },
                    },
                    {"id": "B", "meta": {"bootstrap.servers": "b:9092"}},
                ]
            }
        )
    )
    (tmp_path / "route-rules.yaml").write_text(
        yaml.safe_dump({"route-rules": [rule("g", "use cluster A", isGlobal=True)]})
    )
    config = load_config(tmp_path)
    a = config.clusters["A"]
    assert registry_config(a.meta) == {
        "url": "https://sr.example:8081",
        "basic.auth.user.info": "alice:s3cret",
        "timeout": 5,
    }
    assert registry_config(config.clusters["B"].meta) is None
    assert "s3cret" not in repr(a)  # hidden as other secrets
    assert not any(k.startswith("schema.registry.") for k in a.client_properties)  # never reach librdkafka


@pytest.fixture
def moving(
    two_clusters: Clusters, registries: tuple[str, str], router: Router, conf_dir: Path, topic: str
) -> tuple[Clusters, tuple[str, str], Router, Path, str]:
    """What a move between two clusters with their own registries needs."""
    return two_clusters, registries, router, conf_dir, topic


def test_each_cluster_registers_in_its_own_registry(
    moving: tuple[Clusters, tuple[str, str], Router, Path, str], closing: Callable[[Any], Any]
) -> None:
    """The same schema has id 1 in A's registry and 2 in B's: each message carries
    the id of its cluster's registry, and is decoded there."""
    (a, b), registries, router, conf_dir, topic = moving
    producer = closing(avro_producer(router))
    consumer = closing(avro_consumer(router, topic + ".g"))
    consumer.subscribe([topic])
    record = {"seq": 1, "key": "k1", "note": "a"}
    producer.produce(topic, key="k1", value=record)
    assert producer.flush(10) == 0
    got = poll_records(consumer, 1, 30)
    rewrite_rules(conf_dir, on("B", topic))
    assert router.reload()
    producer.produce(topic, key="k1", value={**record, "seq": 2})
    assert producer.flush(10) == 0
    [on_a], [on_b] = read_all(a, topic), read_all(b, topic)
    east, west = (registry_client({"url": u}) for u in registries)
    assert schema_id(on_a.value()) == east.get_latest_version(f"{topic}-value").schema_id
    assert schema_id(on_b.value()) == west.get_latest_version(f"{topic}-value").schema_id
    assert schema_id(on_a.value()) != schema_id(on_b.value())
    # A's bytes decoded with B's registry would name another schema: the consumer
    # decodes each with the registry of the cluster it read it from
    got += poll_records(consumer, 1, 30)
    assert [m.value() for m in got] == [record, {**record, "seq": 2}]
    assert all(m.key() == "k1" for m in got)
    assert consumer.routes()[topic].cluster_id == "B"


def test_a_cluster_without_registry(
    two_clusters: Clusters,
    tmp_path: Path,
    topic: str,
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    directory = tmp_path / "conf"
    directory.mkdir()
    write_clusters(directory, two_clusters, ({}, {"schema.registry.url": f"mock://{unique('only')}"}))
    rewrite_rules(directory, on("A", topic))
    router = closing(Router.from_path(directory))
    producer = closing(
        RoutedSerializingProducer(
            {**NO_WATCH, "value.serializer": per_cluster(lambda sr: AvroSerializer(sr, VALUE_SCHEMA))},
            router=router,
        )
    )
    with pytest.raises(ValueSerializationError, match=r"cluster 'A' has no schema\.registry\.url"):
        producer.produce(topic, value={"seq": 1, "key": "k", "note": ""})
    fallback = closing(
        RoutedSerializingProducer(
            {
                **NO_WATCH,
                "value.serializer": per_cluster(
                    lambda sr: AvroSerializer(sr, VALUE_SCHEMA), default=StringSerializer()
                ),
            },
            router=router,
        )
    )
    fallback.produce(topic, value="plain", partition=0)
    assert fallback.flush(10) == 0
    assert [m.value() for m in read_all(two_clusters[0], topic)] == [b"plain"]


def test_one_registry_client_per_configuration_in_a_process(registries: tuple[str, str]) -> None:
    east, west = registries
    assert registry_client({"url": east}) is registry_client({"url": east})
    assert registry_client({"url": east}) is not registry_client({"url": west})


# --------------------------------------------------------------------------- a live move under load


def test_a_live_move_under_load_decodes_every_record_as_sent(
    moving: tuple[Clusters, tuple[str, str], Router, Path, str], closing: Callable[[Any], Any]
) -> None:
    """A producer thread sends Avro keys and values while the topic moves from A to B
    (different schema ids there); a routed deserializing consumer in drain mode reads
    both: every decoded record equals what was sent, none lost."""
    (a, b), _registries, router, conf_dir, topic = moving
    producer = closing(avro_producer(router))
    consumer = closing(avro_consumer(router, topic + ".group"))
    consumer.subscribe([topic])
    sent: dict[int, dict[str, Any]] = {}
    moved = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        seq = 0
        try:
            deadline = time.monotonic() + 60
            while not stop.is_set() and seq < 6000 and time.monotonic() < deadline:
                for _ in range(20):
                    record = {"seq": seq, "key": f"k{seq % 7}", "note": "n" * (seq % 13)}
                    producer.produce(topic, key=record["key"], value=record)
                    sent[seq] = record
                    seq += 1
                producer.poll(0)
                if seq == 1000:
                    rewrite_rules(conf_dir, on("B", topic))
                    router.reload()
                    moved.set()
                if seq >= 2000 and moved.is_set():
                    break
                time.sleep(0.005)
            assert producer.flush(20) == 0
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    received: list[Any] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None:
            received.append((msg.key(), msg.value()))
        elif not thread.is_alive() and len({v["seq"] for _, v in received}) >= len(sent):
            break
    thread.join(30)
    stop.set()
    assert not errors, errors
    assert moved.is_set() and len(sent) == 2000  # 1,000 before the move, 1,000 after
    on_a, on_b = read_all(a, topic), read_all(b, topic)
    assert on_a and on_b and len(on_a) + len(on_b) == len(sent)
    assert {schema_id(m.value()) for m in on_a} != {schema_id(m.value()) for m in on_b}
    decoded = {v["seq"]: v for _, v in received}
    assert set(decoded) == set(sent)  # 0 lost
    assert all(decoded[s] == r for s, r in sent.items())  # every record as sent
    assert all(k == v["key"] for k, v in received)
    assert consumer.routes()[topic].cluster_id == "B"
