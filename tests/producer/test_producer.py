"""RoutedProducer against two in-process Kafka clusters (librdkafka mock clusters)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from conftest import keyed, message_count, partitions_of, plain_producer, read_all, rule
from kbear import NoRouteError, RoutedProducer, Router
from kbear.testing import EmbeddedCluster

NO_WATCH = {"kbear.reload.interval.ms": 0}

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]


@pytest.fixture
def topics(two_clusters: Clusters, unique: Callable[[str], str]) -> tuple[str, str, str, str]:
    """(on_a, on_b, remapped, physical): ``on_a`` on cluster A (global rule),
    ``on_b`` on cluster B (topic rule), ``remapped`` sent to ``physical`` on B."""
    a, b = two_clusters
    on_a, on_b, remapped, physical = (unique(n) for n in ("on-a", "on-b", "logical", "physical"))
    a.create_topic(on_a, 3)
    b.create_topic(on_b, 3)
    b.create_topic(physical, 2)
    return on_a, on_b, remapped, physical


@pytest.fixture
def router(make_router: Callable[..., Router], topics: tuple[str, str, str, str]) -> Router:
    _on_a, on_b, remapped, physical = topics
    return make_router(
        [
            rule("global", "use cluster A", isGlobal=True),
            rule("to-b", "use cluster B", topic=on_b),
            rule("remap", f"use cluster B, topic {physical}", topic=remapped),
        ]
    )


@pytest.fixture
def producer(router: Router, closing: Callable[[Any], Any]) -> RoutedProducer:
    return closing(RoutedProducer(NO_WATCH, router=router))


# --------------------------------------------------------------------------- configuration


def test_bootstrap_servers_in_config_is_refused(router: Router) -> None:
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        RoutedProducer({"bootstrap.servers": "127.0.0.1:9092", **NO_WATCH}, router=router)


def test_unknown_kbear_key_is_refused(router: Router) -> None:
    with pytest.raises(ValueError, match=r"kbear\.no\.such\.key"):
        RoutedProducer({"kbear.no.such.key": "1", **NO_WATCH}, router=router)


def test_neither_kbear_config_nor_router_is_refused() -> None:
    with pytest.raises(ValueError, match=r"kbear\.config"):
        RoutedProducer({"linger.ms": 5})


def test_unroutable_topics_up_front_are_all_named(
    make_router: Callable[..., Router], unique: Callable[[str], str]
) -> None:
    routed, lost1, lost2 = unique("routed"), unique("lost1"), unique("lost2")
    router = make_router([rule("only", "use cluster A", topic=routed)])
    with pytest.raises(NoRouteError) as info:
        RoutedProducer(NO_WATCH, router=router, topics=[routed, lost1, lost2])
    message = str(info.value)
    assert lost1 in message
    assert lost2 in message
    assert routed not in message
    assert isinstance(info.value, LookupError)


def test_unroutable_topic_at_produce_raises_no_route(
    make_router: Callable[..., Router], unique: Callable[[str], str]
) -> None:
    routed, lost = unique("routed"), unique("lost")
    router = make_router([rule("only", "use cluster A", topic=routed)])
    p = RoutedProducer(NO_WATCH, router=router)
    try:
        with pytest.raises(NoRouteError, match=lost):
            p.produce(lost, b"v", b"k")
        assert len(p) == 0
    finally:
        p.close()


# --------------------------------------------------------------------------- routing


def test_each_topic_reaches_the_cluster_of_its_route(
    producer: RoutedProducer, two_clusters: Clusters, topics: tuple[str, str, str, str]
) -> None:
    a, b = two_clusters
    on_a, on_b, remapped, physical = topics
    sent = {on_a: keyed(20, "a"), on_b: keyed(15, "b"), remapped: keyed(10, "r")}
    for topic, pairs in sent.items():
        for key, value in pairs:
            producer.produce(topic, value, key)
    assert producer.flush(10) == 0

    def content(cluster: EmbeddedCluster, topic: str) -> Counter[tuple[bytes, bytes]]:
        return Counter((m.key(), m.value()) for m in read_all(cluster, topic))

    assert content(a, on_a) == Counter(sent[on_a])
    assert content(b, on_b) == Counter(sent[on_b])
    assert content(b, physical) == Counter(sent[remapped])
    # nothing leaked to the other cluster or to the logical name of the remapped topic
    assert partitions_of(b, on_a) == []
    assert partitions_of(a, on_b) == []
    assert partitions_of(a, remapped) == partitions_of(b, remapped) == []
    assert partitions_of(a, physical) == []


def test_topics_up_front_are_routed_at_construction(
    router: Router, closing: Callable[[Any], Any], topics: tuple[str, str, str, str]
) -> None:
    on_a, on_b, remapped, physical = topics
    p = closing(RoutedProducer(NO_WATCH, router=router, topics=[on_a, on_b, remapped]))
    assert p.route(on_a).cluster_id == "A"
    assert p.route(on_b).cluster_id == "B"
    route = p.route(remapped)
    assert (route.cluster_id, route.topic, route.requested_topic) == ("B", physical, remapped)


def test_remapped_topic_reports_logical_name_per_message_callback(
    producer: RoutedProducer, topics: tuple[str, str, str, str]
) -> None:
    _on_a, _on_b, remapped, _physical = topics
    reports: list[tuple[Any, str, bytes]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((err, msg.topic(), msg.value()))

    producer.produce(remapped, value=b"kw", key=b"k1", on_delivery=report)
    producer.produce(remapped, value=b"alias", key=b"k2", callback=report)
    producer.produce(remapped, b"positional", b"k3", -1, report)
    assert producer.flush(10) == 0
    assert sorted(reports, key=lambda r: r[2]) == [
        (None, remapped, b"alias"),
        (None, remapped, b"kw"),
        (None, remapped, b"positional"),
    ]


def test_remapped_topic_reports_logical_name_config_callback(
    router: Router, closing: Callable[[Any], Any], topics: tuple[str, str, str, str]
) -> None:
    on_a, on_b, remapped, _physical = topics
    reports: list[tuple[Any, str, int]] = []

    def report(err: Any, msg: Any) -> None:
        reports.append((err, msg.topic(), msg.offset()))

    p = closing(RoutedProducer({**NO_WATCH, "on_delivery": report}, router=router))
    for topic in (on_a, on_b, remapped):
        for key, value in keyed(5):
            p.produce(topic, value, key)
    assert p.flush(10) == 0
    assert Counter((err, topic) for err, topic, _ in reports) == {
        (None, on_a): 5,
        (None, on_b): 5,
        (None, remapped): 5,
    }
    assert all(offset >= 0 for _, _, offset in reports)


def test_config_callback_matches_plain_producer(
    router: Router, closing: Callable[[Any], Any], two_clusters: Clusters, topics: tuple[str, str, str, str]
) -> None:
    """Same delivery reports (error, topic, partition, key) as a plain Producer
    writing the same keys to the same partition count."""
    a, _b = two_clusters
    on_a, *_ = topics
    plain_topic = on_a + ".plain"
    a.create_topic(plain_topic, 3)

    routed_reports: list[tuple[Any, int, bytes]] = []
    plain_reports: list[tuple[Any, int, bytes]] = []
    routed = closing(
        RoutedProducer(
            {**NO_WATCH, "on_delivery": lambda e, m: routed_reports.append((e, m.partition(), m.key()))},
            router=router,
        )
    )
    plain = Producer(
        {
            "bootstrap.servers": a.bootstrap_servers,
            "on_delivery": lambda e, m: plain_reports.append((e, m.partition(), m.key())),
        }
    )
    for key, value in keyed(12):
        routed.produce(on_a, value, key)
        plain.produce(plain_topic, value, key)
    assert routed.flush(10) == plain.flush(10) == 0
    assert sorted(routed_reports, key=lambda r: r[2]) == sorted(plain_reports, key=lambda r: r[2])


def test_len_flush_and_poll(producer: RoutedProducer, topics: tuple[str, str, str, str]) -> None:
    on_a, on_b, _remapped, _physical = topics
    delivered: list[str] = []
    assert len(producer) == 0
    assert producer.flush(1) == 0
    for topic in (on_a, on_b):
        for key, value in keyed(5):
            producer.produce(topic, value, key, on_delivery=lambda e, m: delivered.append(m.topic()))
    assert len(producer) == 10  # queued on two clusters' clients
    assert bool(producer) is True
    # poll() returns the number of events served (one event may carry several reports)
    served = 0
    for _ in range(100):
        served += producer.poll(0.05)
        if len(delivered) == 10:
            break
    assert served >= 1
    assert Counter(delivered) == {on_a: 5, on_b: 5}
    assert len(producer) == 0
    assert producer.poll(0) == 0
    assert producer.flush(1) == 0


def test_list_topics_lists_remapped_topic_under_logical_name(
    producer: RoutedProducer, topics: tuple[str, str, str, str]
) -> None:
    on_a, _on_b, remapped, physical = topics
    md = producer.list_topics(remapped, timeout=5)
    assert remapped in md.topics
    assert physical not in md.topics
    assert md.topics[remapped].topic == remapped
    assert len(md.topics[remapped].partitions) == 2  # the physical topic's partitions

    md_a = producer.list_topics(on_a, timeout=5)
    assert len(md_a.topics[on_a].partitions) == 3


def test_list_topics_without_topic_merges_clusters(
    producer: RoutedProducer, topics: tuple[str, str, str, str]
) -> None:
    on_a, on_b, _remapped, physical = topics
    md = producer.list_topics(timeout=5)
    assert {on_a, on_b, physical} <= set(md.topics)


def test_client_meta_selects_the_when_rule(
    make_router: Callable[..., Router],
    closing: Callable[[Any], Any],
    two_clusters: Clusters,
    unique: Callable[[str], str],
) -> None:
    a, b = two_clusters
    topic = unique("orders")
    a.create_topic(topic, 2)
    b.create_topic(topic, 2)
    router = make_router(
        [
            rule("uat", "use cluster B when client.env=uat", priority=1, isGlobal=True),
            rule("default", "use cluster A", isGlobal=True),
        ]
    )
    uat = closing(RoutedProducer({**NO_WATCH, "kbear.client.meta.env": "uat"}, router=router))
    prod = closing(RoutedProducer({**NO_WATCH, "kbear.client.meta.env": "prod"}, router=router))
    anonymous = closing(RoutedProducer(NO_WATCH, router=router))
    assert uat.client.meta == {"env": "uat"}
    for p, n in ((uat, 7), (prod, 3), (anonymous, 2)):
        for key, value in keyed(n):
            p.produce(topic, value, key)
        assert p.flush(10) == 0
    assert message_count(b, topic) == 7
    assert message_count(a, topic) == 5
    assert uat.route(topic).rule_id == "uat"
    assert prod.route(topic).rule_id == "default"


def test_close_flushes_pending_messages(
    router: Router, two_clusters: Clusters, topics: tuple[str, str, str, str]
) -> None:
    a, b = two_clusters
    on_a, on_b, _remapped, _physical = topics
    delivered: list[Any] = []
    # a long linger keeps the messages queued until close() flushes them
    p = RoutedProducer(
        {**NO_WATCH, "linger.ms": 5000, "on_delivery": lambda e, m: delivered.append(e)}, router=router
    )
    for topic in (on_a, on_b):
        for key, value in keyed(10):
            p.produce(topic, value, key)
    assert len(p) == 20
    p.close(10)
    assert delivered == [None] * 20
    assert message_count(a, on_a) == 10
    assert message_count(b, on_b) == 10
    p.close()  # idempotent


def test_context_manager_closes_and_delivers(
    router: Router, two_clusters: Clusters, topics: tuple[str, str, str, str]
) -> None:
    _a, b = two_clusters
    _on_a, _on_b, remapped, physical = topics
    with RoutedProducer({**NO_WATCH, "linger.ms": 5000}, router=router) as p:
        assert isinstance(p, RoutedProducer)
        for key, value in keyed(8):
            p.produce(remapped, value, key)
    assert message_count(b, physical) == 8


def test_plain_producer_to_embedded_cluster_sees_routed_messages(
    producer: RoutedProducer, two_clusters: Clusters, topics: tuple[str, str, str, str]
) -> None:
    """A routed producer and a plain producer on the same cluster and topic mix."""
    a, _b = two_clusters
    on_a, *_ = topics
    plain = plain_producer(a)
    for key, value in keyed(5, "plain"):
        plain.produce(on_a, value, key)
    for key, value in keyed(5, "routed"):
        producer.produce(on_a, value, key)
    assert plain.flush(10) == producer.flush(10) == 0
    keys = sorted(m.key() for m in read_all(a, on_a))
    assert keys == sorted([k for k, _ in keyed(5, "plain")] + [k for k, _ in keyed(5, "routed")])
