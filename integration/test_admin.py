"""RoutedAdminClient on real brokers: topics and consumer groups created, described,
altered and deleted across two clusters, one topic remapped.

Runs where the backend's brokers answer the admin requests (Apache Kafka: kafka,
docker); the mock cluster lacks most of them (``tests/admin/test_admin.py`` covers
what it has).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from integration.backends import RDKAFKA_LOG, admin_client
from integration.conftest import Harness
from integration.helpers import global_rule, settled, topic_rule
from kbear import RoutedAdminClient

ADMIN_BACKENDS = ("docker", "kafka")
T = 20  # seconds for a future


@pytest.fixture
def admin_it(it: Harness) -> Harness:
    if it.backend.name not in ADMIN_BACKENDS:
        pytest.skip(f"the {it.backend.name} backend lacks admin requests (integration/BACKENDS.md)")
    return it


class Names:
    def __init__(self, it: Harness) -> None:
        self.on_a = it.name("on-a")
        self.on_b = it.name("on-b")
        self.logical = it.name("logical")
        self.physical = it.name("physical")
        self.group = it.name("group")

    def rules(self) -> list[dict[str, Any]]:
        return [
            topic_rule(self.on_b, "B"),
            topic_rule(self.logical, "B", physical=self.physical),
            global_rule("A"),
        ]


@pytest.fixture
def names(admin_it: Harness) -> Names:
    return Names(admin_it)


@pytest.fixture
def admin(admin_it: Harness, names: Names) -> Iterator[RoutedAdminClient]:
    conf = admin_it.config(names.rules())
    client = RoutedAdminClient(
        {
            "kbear.config": str(conf),
            "kbear.reload.interval.ms": 0,
            "socket.timeout.ms": 5000,
            "logger": RDKAFKA_LOG,
        }
    )
    yield client
    client.close()


def topics_on(it: Harness, cluster: str) -> set[str]:
    return set(admin_client(it.bootstrap(cluster)).list_topics(timeout=10).topics)


def results(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {key: future.result(T) for key, future in futures.items()}


def test_topics_across_two_clusters_with_a_remap(
    admin_it: Harness, admin: RoutedAdminClient, names: Names
) -> None:
    it = admin_it
    created = admin.create_topics(
        [
            NewTopic(names.on_a, 2, 1),
            NewTopic(names.on_b, 3, 1),
            NewTopic(names.logical, 4, 1, config={"retention.ms": "3600000"}),
        ],
        operation_timeout=10,
    )
    assert results(created) == {names.on_a: None, names.on_b: None, names.logical: None}
    on_a = settled(lambda: topics_on(it, "A"), lambda t: names.on_a in t)
    on_b = settled(lambda: topics_on(it, "B"), lambda t: {names.on_b, names.physical} <= t)
    assert names.on_a in on_a and {names.on_a, names.physical, names.logical} & on_b == {names.physical}
    assert {names.on_b, names.physical} <= on_b and not {names.on_b, names.physical, names.logical} & on_a

    again = admin.create_topics([NewTopic(names.logical, 4, 1)])[names.logical].exception(T)
    assert isinstance(again, KafkaException) and again.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    described = results(admin.describe_topics(TopicCollection([names.on_a, names.logical])))
    assert {t: (d.name, len(d.partitions)) for t, d in described.items()} == {
        names.on_a: (names.on_a, 2),
        names.logical: (names.logical, 4),
    }

    resource = ConfigResource(ResourceType.TOPIC, names.logical)
    assert admin.describe_configs([resource])[resource].result(T)["retention.ms"].value == "3600000"
    change = ConfigResource(
        ResourceType.TOPIC,
        names.logical,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert admin.incremental_alter_configs([change])[change].result(T) is None
    retention = settled(
        lambda: admin.describe_configs([resource])[resource].result(T)["retention.ms"].value,
        lambda value: value == "7200000",
    )
    assert retention == "7200000"

    assert results(admin.create_partitions([NewPartitions(names.logical, 6)])) == {names.logical: None}
    partitions = settled(
        lambda: len(admin.list_topics(names.logical, timeout=10).topics[names.logical].partitions),
        lambda n: n == 6,
    )
    assert partitions == 6
    merged = admin.list_topics(timeout=10)
    assert {t: merged.topics[t].cluster for t in (names.on_a, names.on_b, names.logical)} == {
        names.on_a: "A",
        names.on_b: "B",
        names.logical: "B",
    }

    deleted = admin.delete_topics([names.on_a, names.logical], operation_timeout=10)
    assert results(deleted) == {names.on_a: None, names.logical: None}
    assert names.on_a not in settled(lambda: topics_on(it, "A"), lambda t: names.on_a not in t)
    on_b = settled(lambda: topics_on(it, "B"), lambda t: names.physical not in t)
    assert names.physical not in on_b and names.on_b in on_b


def test_groups_across_two_clusters_with_a_remap(
    admin_it: Harness, admin: RoutedAdminClient, names: Names
) -> None:
    it = admin_it
    results(
        admin.create_topics([NewTopic(names.on_a, 2, 1), NewTopic(names.logical, 2, 1)], operation_timeout=10)
    )
    # Apache Kafka: a broker may not know a topic acknowledged a moment before, and an
    # offset commit for a topic it does not know is refused per partition
    settled(lambda: topics_on(it, "A"), lambda t: names.on_a in t)
    settled(lambda: topics_on(it, "B"), lambda t: names.physical in t)
    group = names.group
    offsets = [TopicPartition(names.on_a, 0, 0), TopicPartition(names.logical, 1, 0)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[
        group
    ].result(T)
    assert sorted((tp.topic, tp.partition, tp.error) for tp in altered.topic_partitions) == sorted(
        [(names.on_a, 0, None), (names.logical, 1, None)]
    )
    # each cluster holds its share under its physical name
    for cluster, topic in (("A", names.on_a), ("B", names.physical)):
        plain = admin_client(it.bootstrap(cluster))
        held = plain.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(T)
        assert [tp.topic for tp in held.topic_partitions] == [topic]

    whole = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(T)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in whole.topic_partitions) == sorted(
        [(names.on_a, 0, 0), (names.logical, 1, 0)]
    )
    ends = results(admin.list_offsets({TopicPartition(names.logical, 1): OffsetSpec.latest()}))
    assert [(tp.topic, info.offset) for tp, info in ends.items()] == [(names.logical, 0)]

    description = admin.describe_consumer_groups([group])[group].result(T)
    assert description.group_id == group and description.state == ConsumerGroupState.EMPTY
    listing = admin.list_consumer_groups(request_timeout=10).result(T)
    assert {(g.group_id, g.cluster) for g in listing.valid if g.group_id == group} == {
        (group, "A"),
        (group, "B"),
    }

    assert admin.delete_consumer_groups([group])[group].result(T) is None  # on both clusters
    for cluster in ("A", "B"):
        plain = admin_client(it.bootstrap(cluster))
        gone = plain.delete_consumer_groups([group])[group].exception(T)
        assert isinstance(gone, KafkaException) and gone.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    again = admin.delete_consumer_groups([group])[group].exception(T)
    assert isinstance(again, KafkaException) and again.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_a_member_assignment_of_a_remapped_topic_carries_the_logical_name(
    admin_it: Harness, admin: RoutedAdminClient, names: Names
) -> None:
    it = admin_it
    results(admin.create_topics([NewTopic(names.logical, 2, 1)], operation_timeout=10))
    conf = it.config(names.rules())
    consumer = it.consumer(conf, names.group)
    consumer.subscribe([names.logical])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    description = admin.describe_consumer_groups([names.group])[names.group].result(T)
    assigned = {tp.topic for m in description.members for tp in m.assignment.topic_partitions}
    assert assigned == {names.logical}
    raw = admin.describe_consumer_groups([names.group], cluster="B")[names.group].result(T)
    assert {tp.topic for m in raw.members for tp in m.assignment.topic_partitions} == {names.physical}


def test_acl_calls_go_to_every_cluster_with_confluent_kafkas_errors(
    admin_it: Harness, admin: RoutedAdminClient
) -> None:
    """No authorizer is configured: each cluster refuses CreateAcls; the routed future
    raises the same code as a plain client's; DescribeAcls answers every cluster's (empty) list."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )

    binding = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "User:u",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    plain = admin_client(admin_it.bootstrap("A"))
    native = plain.create_acls([binding])[binding].exception(T)
    routed = admin.create_acls([binding])[binding].exception(T)
    assert isinstance(native, KafkaException) and isinstance(routed, KafkaException)
    assert routed.args[0].code() == native.args[0].code()
    anything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert admin.describe_acls(anything).result(T) == plain.describe_acls(anything).result(T) == []
