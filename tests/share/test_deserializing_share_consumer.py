"""RoutedDeserializingShareConsumer on librdkafka's mock clusters: records decoded
in place with the logical topic in the SerializationContext, failures marked and
still acknowledgeable, as confluent-kafka's DeserializingShareConsumer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError
from confluent_kafka.serialization import MessageField, StringDeserializer
from test_share_consumer import produce

from conftest import Rule, rule
from kbear import RoutedDeserializingShareConsumer, Router
from kbear.testing import EmbeddedCluster


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
