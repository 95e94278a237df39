"""RoutedAdminClient on two embedded (librdkafka mock) clusters.

The mock cluster answers metadata, ListOffsets, OffsetFetch and OffsetCommit
(so ``list_topics``, ``list_offsets``, ``list_consumer_group_offsets``,
``alter_consumer_group_offsets``, ``list_consumer_groups``, ``cluster_id``), and
refuses DescribeGroups, DeleteGroups and DeleteRecords with
``_UNSUPPORTED_FEATURE``; CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs and DescribeCluster time out waiting for a controller. Those are
tested on real brokers in ``integration/test_admin.py``; here the errors they
give are compared with a plain AdminClient's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from conftest import keyed, plain_producer, rule
from kbear import NoRouteError, RoutedAdminClient, Router
from kbear.testing import ClientKind, EmbeddedCluster, confluent_client, mount_clients

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]
NO_WATCH = {"kbear.reload.interval.ms": 0}


class Topics:
    """``on_a`` on A (global rule), ``on_b`` on B (topic rule), ``logical`` stored
    as ``physical`` on B (remap); ``stale`` exists on both, routed to B."""

    def __init__(self, unique: Callable[[str], str]) -> None:
        self.on_a = unique("on-a")
        self.on_b = unique("on-b")
        self.logical = unique("logical")
        self.physical = unique("physical")
        self.group = unique("group")

    def rules(self) -> list[dict[str, Any]]:
        return [
            rule("to-b", "use cluster B", topic=self.on_b),
            rule("remap", f"use cluster B, topic {self.physical}", topic=self.logical),
            rule("global", "use cluster A", isGlobal=True),
        ]


@pytest.fixture
def topics(two_clusters: Clusters, unique: Callable[[str], str]) -> Topics:
    t = Topics(unique)
    a, b = two_clusters
    a.create_topic(t.on_a, 2)
    b.create_topic(t.on_b, 3)
    b.create_topic(t.physical, 4)
    for cluster, topic, n in ((a, t.on_a, 5), (b, t.on_b, 7), (b, t.physical, 9)):
        with plain_producer(cluster) as p:
            for key, value in keyed(n):
                p.produce(topic, value, key, partition=0)
            assert p.flush(10) == 0
    return t


@pytest.fixture
def admin(make_config: Callable[..., Path], topics: Topics) -> Iterator[RoutedAdminClient]:
    client = RoutedAdminClient({**NO_WATCH, "kbear.config": str(make_config(topics.rules()))})
    yield client
    client.close()


def plain(cluster: EmbeddedCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def code(exc: BaseException | None) -> int:
    assert isinstance(exc, KafkaException), exc
    return int(exc.args[0].code())


def test_list_topics_merges_clusters_under_logical_names(admin: RoutedAdminClient, topics: Topics) -> None:
    md = admin.list_topics(timeout=10)
    assert {topics.on_a, topics.on_b, topics.logical} <= set(md.topics)
    assert topics.physical not in md.topics
    assert md.topics[topics.logical].topic == topics.logical
    assert len(md.topics[topics.logical].partitions) == 4
    assert {name: md.topics[name].cluster for name in (topics.on_a, topics.on_b, topics.logical)} == {
        topics.on_a: "A",
        topics.on_b: "B",
        topics.logical: "B",
    }
    one = admin.list_topics(topics.logical, timeout=10)
    assert list(one.topics) == [topics.logical]
    assert admin.list_topics(timeout=10, cluster="B").topics.keys() >= {topics.physical, topics.on_b}


def test_list_offsets_route_each_partition_and_keep_logical_keys(
    admin: RoutedAdminClient, topics: Topics
) -> None:
    request = {
        TopicPartition(topics.on_a, 0): OffsetSpec.latest(),
        TopicPartition(topics.on_b, 0): OffsetSpec.latest(),
        TopicPartition(topics.logical, 0): OffsetSpec.latest(),
        TopicPartition(topics.logical, 1): OffsetSpec.earliest(),
    }
    futures = admin.list_offsets(request, request_timeout=10)
    got = {(tp.topic, tp.partition): f.result(10).offset for tp, f in futures.items()}
    assert got == {(topics.on_a, 0): 5, (topics.on_b, 0): 7, (topics.logical, 0): 9, (topics.logical, 1): 0}
    # keys as confluent-kafka's: TopicPartition(topic, partition, spec value)
    keys = {(tp.topic, tp.partition, tp.offset) for tp in futures}
    assert (topics.logical, 1, OffsetSpec.earliest()._value) in keys


def test_group_offsets_are_altered_and_listed_per_route_across_clusters(
    admin: RoutedAdminClient, topics: Topics, two_clusters: Clusters
) -> None:
    a, b = two_clusters
    group = topics.group
    wanted = [TopicPartition(topics.on_a, 0, 3), TopicPartition(topics.logical, 0, 6)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])
    result = altered[group].result(10)
    assert {(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions} == {
        (topics.on_a, 0, 3),
        (topics.logical, 0, 6),
    }
    # what each cluster holds, seen by plain clients: the physical name on B (the mock
    # answers OffsetFetch for named partitions only: a whole group lists nothing)
    plain_a, plain_b = plain(a), plain(b)  # kept: a collected client's futures never complete

    def held(client: AdminClient, topic: str) -> list[tuple[str, int]]:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        result = client.list_consumer_group_offsets([request])[group].result(10)
        return [(tp.topic, tp.offset) for tp in result.topic_partitions]

    assert held(plain_a, topics.on_a) == [(topics.on_a, 3)]
    assert held(plain_b, topics.physical) == [(topics.physical, 6)]
    assert held(plain_a, topics.logical) == [(topics.logical, -1001)]  # nothing under the logical name
    named = admin.list_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(topics.logical, 0), TopicPartition(topics.on_a, 0)]
            )
        ]
    )[group].result(10)
    assert sorted((tp.topic, tp.offset) for tp in named.topic_partitions) == sorted(
        [(topics.logical, 6), (topics.on_a, 3)]
    )
    # cluster=: the names on that cluster, as they are
    raw = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topics.physical, 0)])], cluster="B"
    )
    assert [(tp.topic, tp.offset) for tp in raw[group].result(10).topic_partitions] == [(topics.physical, 6)]


def test_errors_are_confluent_kafkas(
    admin: RoutedAdminClient, topics: Topics, two_clusters: Clusters
) -> None:
    """The mock refuses DescribeGroups and DeleteRecords: same KafkaError code as plain."""
    _a, b = two_clusters
    group = topics.group
    plain_b = plain(b)
    routed = admin.describe_consumer_groups([group])[group].exception(10)
    native = plain_b.describe_consumer_groups([group])[group].exception(10)
    assert code(routed) == code(native) == KafkaError._UNSUPPORTED_FEATURE
    tp = TopicPartition(topics.logical, 0, 1)
    routed_dr = admin.delete_records([tp])[tp].exception(10)
    native_dr = plain_b.delete_records([TopicPartition(topics.physical, 0, 1)])
    assert code(routed_dr) == code(next(iter(native_dr.values())).exception(10))


def test_requests_the_mock_cannot_serve_fail_per_topic_as_plain(
    admin: RoutedAdminClient, topics: Topics, two_clusters: Clusters
) -> None:
    """CreateTopics times out on the mock: each routed future (two clusters, a
    remapped name) fails with a plain client's error code, under the name given."""
    _a, b = two_clusters
    plain_b = plain(b)
    native = plain_b.create_topics([NewTopic("x", 1)], request_timeout=1)["x"].exception(10)
    routed = admin.create_topics([NewTopic("new-a", 1), NewTopic(topics.logical, 1)], request_timeout=1)
    assert set(routed) == {"new-a", topics.logical}
    assert [code(f.exception(10)) for f in routed.values()] == [code(native)] * 2


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.create_topics([]),
        lambda c: c.delete_topics([]),
        lambda c: c.delete_topics("x"),
        lambda c: c.create_partitions([]),
        lambda c: c.describe_configs([]),
        lambda c: c.describe_configs([1]),
        lambda c: c.describe_topics(["x"]),
        lambda c: c.describe_consumer_groups([]),
        lambda c: c.describe_consumer_groups("g"),
        lambda c: c.delete_consumer_groups([]),
        lambda c: c.list_offsets({TopicPartition("x", -1): OffsetSpec.latest()}),
        lambda c: c.list_offsets({TopicPartition("x", 0): 5}),
        lambda c: c.delete_records([TopicPartition("x", -1)]),
        lambda c: c.list_consumer_group_offsets([]),
        lambda c: c.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g", [])]),
        lambda c: c.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("g", [TopicPartition("x", 0, -5)])]
        ),
    ],
)
def test_bad_input_raises_like_confluent_kafka(
    admin: RoutedAdminClient, two_clusters: Clusters, call: Callable[[Any], Any]
) -> None:
    with plain(two_clusters[0]) as native_client, pytest.raises(Exception) as native:
        call(native_client)
    with pytest.raises(Exception) as routed:
        call(admin)
    assert (type(routed.value), str(routed.value)) == (type(native.value), str(native.value))


def test_unroutable_topics_and_unknown_clusters_raise_before_sending(
    make_config: Callable[..., Path],
) -> None:
    conf = make_config([rule("only-b", "use cluster B", topic="b")])
    with RoutedAdminClient({**NO_WATCH, "kbear.config": str(conf)}) as admin:
        with pytest.raises(NoRouteError, match="'x', 'y'"):
            admin.list_offsets(
                {TopicPartition("x", 0): OffsetSpec.latest(), TopicPartition("y", 0): OffsetSpec.latest()}
            )
        with pytest.raises(ValueError, match="unknown cluster 'C'"):
            admin.list_topics(timeout=1, cluster="C")
        with pytest.raises(ValueError, match=r"pass cluster="):
            admin.describe_user_scram_credentials()
        with pytest.raises(ValueError, match=r"ResourceType.BROKER resources are not routed: pass cluster="):
            admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])


def test_cluster_wide_calls_are_tagged_by_cluster(
    admin: RoutedAdminClient, topics: Topics, two_clusters: Clusters
) -> None:
    a, b = two_clusters
    ids = admin.cluster_id(timeout=10)
    assert ids == {"A": plain(a).cluster_id(10), "B": plain(b).cluster_id(10)}
    assert admin.cluster_id(10, cluster="B") == ids["B"]
    # the mock answers ListGroups with an error per broker: one per cluster here
    plain_a = plain(a)
    native = plain_a.list_consumer_groups(request_timeout=10).result(10)
    listing = admin.list_consumer_groups(request_timeout=10).result(10)
    assert [e.code() for e in listing.errors] == [e.code() for e in native.errors] * 2


def test_one_cluster_configuration_answers_as_a_plain_client(
    make_config: Callable[..., Path], two_clusters: Clusters
) -> None:
    a, _b = two_clusters
    conf = make_config([rule("all", "use cluster A", isGlobal=True)])
    router = Router.from_path(conf)
    with RoutedAdminClient(NO_WATCH, router=router) as admin:
        assert admin.cluster_id(10) == plain(a).cluster_id(10)
        assert admin.list_topics(timeout=10).cluster_id == plain(a).list_topics(timeout=10).cluster_id
    router.close()


def test_construction_like_the_other_routed_clients(make_config: Callable[..., Path]) -> None:
    conf = str(make_config([rule("all", "use cluster A", isGlobal=True)]))
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        RoutedAdminClient({"kbear.config": conf, "bootstrap.servers": "x:1"})
    with pytest.raises(ValueError, match=r"kbear\.config"):
        RoutedAdminClient({"client.id": "x"})
    with pytest.raises(TypeError, match="expected configuration dict"):
        RoutedAdminClient("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown kbear"):
        RoutedAdminClient({"kbear.config": conf, "kbear.nope": 1})
    admin = RoutedAdminClient({"kbear.config": conf, "kbear.client.id": "ops", **NO_WATCH})
    assert admin.client.id == "ops"
    admin.close()
    admin.close()
    with pytest.raises(RuntimeError):
        admin.list_topics(timeout=1)


def test_poll_serves_error_callbacks_in_the_callers_thread(dead_cluster: Router) -> None:
    """One cluster: its client exists from construction on, as a plain AdminClient's,
    so connection errors reach error_cb at the first polls."""
    import threading
    import time

    seen: list[tuple[int, str]] = []
    admin = RoutedAdminClient(
        {**NO_WATCH, "error_cb": lambda err: seen.append((err.code(), threading.current_thread().name))},
        router=dead_cluster,
    )
    try:
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            admin.poll(0.1)
        assert seen and {name for _code, name in seen} == {threading.current_thread().name}
    finally:
        admin.close()


def test_several_clusters_build_their_clients_at_first_use(dead_clusters: Router) -> None:
    built: list[str] = []

    def factory(kind: ClientKind, cluster_id: str, config: dict[str, Any]) -> Any:
        built.append(cluster_id)
        return confluent_client(kind, cluster_id, config)

    with mount_clients(factory):
        admin = RoutedAdminClient(NO_WATCH, router=dead_clusters)
    with admin:
        assert admin.poll(0) == 0 and len(admin) == 0  # nothing built, nothing to serve
        with pytest.raises(KafkaException):
            admin.list_topics("b", timeout=0.2)
        assert len(built) == 1


def test_after_close_every_call_raises_confluent_kafkas_runtime_error(dead_cluster: Router) -> None:
    with RoutedAdminClient(NO_WATCH, router=dead_cluster) as admin:
        pass
    with pytest.raises(RuntimeError, match="AdminClient has been closed"):
        admin.create_topics([NewTopic("t", 1)])
    with pytest.raises(RuntimeError, match="AdminClient has been closed"):
        admin.poll(0)
    with pytest.raises(RuntimeError, match="Handle has been closed"):
        admin.list_topics()
    assert len(admin) == 0
