"""RoutedDeserializingShareConsumer on librdkafka's mock clusters: records decoded
in place with the logical topic in the SerializationContext, failures marked and
still acknowledgeable, as confluent-kafka's DeserializingShareConsumer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import AcknowledgeType, KafkaError, Producer
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringDeserializer
from test_share_consumer import produce

from conftest import Rule, rule, write_config
from kbear import RoutedDeserializingShareConsumer, Router
from kbear.schema_registry import per_cluster, registry_client
from kbear.testing import EmbeddedCluster

VALUE_SCHEMA = """{"type": "record", "name": "Job", "namespace": "kbear.test", "fields": [
  {"name": "seq", "type": "long"}, {"name": "where", "type": "string"}]}"""
OTHER_SCHEMA = """{"type": "record", "name": "Other", "fields": [{"name": "x", "type": "int"}]}"""


def test_decodes_in_place_with_logical_names(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    a, _ = share_clusters
    topic, physical, group = unique("t"), unique("t-phys"), unique("sg")
    a.create_topic(physical, 1)
    produce(a, physical, ["good", "bad"], partitions=1)
    seen: list[tuple[str, Any]] = []

    def value(data: bytes | None, ctx: Any) -> str:
        seen.append((ctx.topic, ctx.field))
        if data == b"v" and len(seen) == 2:  # the second record's value fails
            raise ValueError("cannot decode")
        return "decoded"

    router = share_router([rule("t", f"use cluster A, topic {physical}", topic=topic)])
    sc = closing(
        RoutedDeserializingShareConsumer(
            {
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
                "key.deserializer": StringDeserializer(),
                "value.deserializer": value,
            },
            router=router,
        )
    )
    sc.subscribe([topic])
    got: list[Any] = []
    for _ in range(100):
        batch = sc.poll(0.2)
        got += list(batch)
        for msg in batch:  # a record that failed is still acknowledged (rejected)
            sc.acknowledge(msg, AcknowledgeType.REJECT if msg.error() else AcknowledgeType.ACCEPT)
        if len(got) >= 2:
            break
    assert [m.topic() for m in got] == [topic, topic]
    good, bad = got
    assert (good.key(), good.value(), good.error()) == ("good", "decoded", None)
    assert bad.error().code() == KafkaError._VALUE_DESERIALIZATION
    assert (bad.key(), bad.value()) == (b"bad", b"v")  # raw bytes kept
    assert seen == [(topic, MessageField.VALUE), (topic, MessageField.VALUE)]
    assert all(err is None for err in sc.commit_sync(10).values())


def test_each_record_is_decoded_with_the_registry_of_its_cluster(
    share_clusters: tuple[EmbeddedCluster, EmbeddedCluster],
    tmp_path: Path,
    closing: Callable[[Any], Any],
    unique: Callable[[str], str],
) -> None:
    """Two clusters, two registries where the same schema has different ids: a
    share consumer over a topic on each decodes each record with its cluster's."""
    a, b = share_clusters
    east, west = f"mock://{unique('east')}", f"mock://{unique('west')}"
    registry_client({"url": west}).register_schema("other-value", Schema(OTHER_SCHEMA, "AVRO"))
    on_a, on_b, group = unique("ta"), unique("tb"), unique("sg")
    conf = write_config(
        tmp_path / "conf",
        {"A": a, "B": b},
        [rule("a", "use cluster A", topic=on_a), rule("b", "use cluster B", topic=on_b)],
    )
    clusters = yaml.safe_load((conf / "clusters.yaml").read_text())
    for entry, url in zip(clusters["clusters"], (east, west), strict=True):
        entry["meta"]["schema.registry.url"] = url
    (conf / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    ids = set()
    for cluster, topic, url in ((a, on_a, east), (b, on_b, west)):
        cluster.create_topic(topic, 1)
        serializer = AvroSerializer(registry_client({"url": url}), VALUE_SCHEMA)
        data = serializer({"seq": 1, "where": topic}, SerializationContext(topic, MessageField.VALUE))
        ids.add(int.from_bytes(data[1:5], "big"))
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        producer.produce(topic, data)
        assert producer.flush(10) == 0
    assert len(ids) == 2  # the same schema, two ids
    router = closing(Router.from_path(conf))
    sc = closing(
        RoutedDeserializingShareConsumer(
            {
                "group.id": group,
                "kbear.reload.interval.ms": 0,
                "value.deserializer": per_cluster(lambda sr: AvroDeserializer(sr, VALUE_SCHEMA)),
            },
            router=router,
        )
    )
    sc.subscribe([on_a, on_b])
    got: list[Any] = []
    for _ in range(100):
        got += [m for m in sc.poll(0.2)]
        if len(got) >= 2:
            break
    assert all(m.error() is None for m in got), [m.error() for m in got]
    assert sorted((m.topic(), m.value()["where"]) for m in got) == sorted([(on_a, on_a), (on_b, on_b)])
