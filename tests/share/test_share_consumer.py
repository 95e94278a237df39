"""RoutedShareConsumer on librdkafka's mock clusters (share groups, KIP-932):
routing, logical names, acknowledgement modes and confluent-kafka's errors."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    AcknowledgeType,
    ConcurrentModificationException,
    DeserializingShareConsumer,
    IllegalStateException,
    Messages,
    Producer,
    ShareConsumer,
)

from conftest import Rule, rule
from kbear import RoutedDeserializingShareConsumer, RoutedShareConsumer, Router
from kbear.testing import EmbeddedCluster

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture
def consumers(closing: Callable[[Any], Any]) -> Iterator[Callable[..., RoutedShareConsumer]]:
    """``consumers(router, group, **config)`` -> a RoutedShareConsumer closed at teardown."""

    def make(router: Router, group: str, **config: Any) -> RoutedShareConsumer:
        conf = {"group.id": group, **{k.replace("_", "."): v for k, v in config.items()}}
        return closing(RoutedShareConsumer(conf, router=router))

    yield make


def produce(cluster: EmbeddedCluster, topic: str, keys: Sequence[str], partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key.encode(), value=b"v", partition=i % partitions)
    assert producer.flush(10) == 0


def poll_until(
    consumer: RoutedShareConsumer, count: int, timeout: float = 20.0, ack: Any = None
) -> list[Any]:
    """Records of ``consumer`` until ``count`` arrived (each acknowledged with
    ``ack`` when given: explicit mode)."""
    got: list[Any] = []
    end = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < end:
        for msg in consumer.poll(0.2):
            assert msg.error() is None, msg.error()
            got.append(msg)
            if ack is not None:
                consumer.acknowledge(msg, ack)
    return got


def test_reads_remapped_topic_under_its_logical_name(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    _, b = share_clusters
    topic, physical, group = unique("orders"), unique("orders-b"), unique("sg")
    b.create_topic(physical, 2)
    produce(b, physical, [f"k{i}" for i in range(10)])
    router = share_router([rule("remap", f"use cluster B, topic {physical}", topic=topic)])
    sc = consumers(router, group)
    sc.subscribe([topic])
    assert sc.subscription() == [topic]
    got = poll_until(sc, 10)
    assert sorted(m.key() for m in got) == sorted(f"k{i}".encode() for i in range(10))
    assert {m.topic() for m in got} == {topic}
    results = sc.commit_sync(10)  # implicit mode: the last batch is accepted
    assert results and {tp.topic for tp in results} == {topic}
    assert all(err is None for err in results.values())
    assert sc.routes()[topic].cluster_id == "B"


def test_share_group_rule_routes_by_group_name(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    a, b = share_clusters
    topic, group = unique("jobs"), unique("workers")
    for cluster, prefix in ((a, "a"), (b, "b")):
        cluster.create_topic(topic, 2)
        produce(cluster, topic, [f"{prefix}{i}" for i in range(4)])
    router = share_router(
        [
            rule("all", "use cluster A", isGlobal=True),
            rule("workers", "use cluster B", group=group, group_topic=topic),
        ]
    )
    sc = consumers(router, group)
    sc.subscribe([topic])
    got = poll_until(sc, 4)
    assert sorted(m.key() for m in got) == [b"b0", b"b1", b"b2", b"b3"]


def test_one_share_consumer_per_cluster(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    a, b = share_clusters
    on_a, on_b, group = unique("ta"), unique("tb"), unique("sg")
    a.create_topic(on_a, 2)
    b.create_topic(on_b, 2)
    produce(a, on_a, [f"a{i}" for i in range(6)])
    produce(b, on_b, [f"b{i}" for i in range(6)])
    router = share_router([rule("a", "use cluster A", topic=on_a), rule("b", "use cluster B", topic=on_b)])
    sc = consumers(router, group, **{"share.acknowledgement.mode": "explicit"})
    sc.subscribe([on_b, on_a])
    assert sc.subscription() == sorted([on_a, on_b])
    got = poll_until(sc, 12, ack=ACCEPT)
    assert sorted((m.topic(), m.key()) for m in got) == sorted(
        [(on_a, f"a{i}".encode()) for i in range(6)] + [(on_b, f"b{i}".encode()) for i in range(6)]
    )
    assert {r.cluster_id for r in sc.routes().values()} == {"A", "B"}


def test_explicit_mode_errors_and_redelivery(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    a, _ = share_clusters
    topic, physical, group = unique("q"), unique("q-phys"), unique("sg")
    a.create_topic(physical, 1)
    produce(a, physical, [f"k{i}" for i in range(4)], partitions=1)
    router = share_router([rule("q", f"use cluster A, topic {physical}", topic=topic)])
    sc = consumers(router, group, **{"share.acknowledgement.mode": "explicit"})
    commits: list[tuple[dict[Any, set[int]], Any]] = []
    sc.set_acknowledgement_commit_callback(lambda offsets, exc: commits.append((offsets, exc)))
    sc.subscribe([topic])
    first = poll_until(sc, 1)
    assert first
    # as confluent-kafka: the next poll refuses while records of this one are not acknowledged
    with pytest.raises(IllegalStateException, match=f"{len(first)} records from previous poll"):
        sc.poll(0.1)
    for msg in first:
        sc.acknowledge(msg, RELEASE if msg.key() == b"k0" else ACCEPT)
    sc.acknowledge_offset(topic, first[0].partition(), first[0].offset(), RELEASE)  # again: allowed
    with pytest.raises(IllegalStateException):
        sc.acknowledge_offset(topic, 0, 999)  # not in flight
    again = poll_until(sc, 1, ack=REJECT)
    redelivered = [m for m in again if m.key() == b"k0"]
    seen = {m.key() for m in first}
    if len(first) < 4:  # the rest arrived now
        assert {m.key() for m in again} - {b"k0"} <= {f"k{i}".encode() for i in range(4)} - seen
    assert redelivered and redelivered[0].delivery_count() == 2
    assert all(err is None for err in sc.commit_sync(10).values())
    assert commits and all(set(tp.topic for tp in offsets) == {topic} for offsets, _ in commits)


def test_implicit_mode_refuses_acknowledge(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    a, _ = share_clusters
    topic, group = unique("q"), unique("sg")
    a.create_topic(topic, 1)
    produce(a, topic, ["k0"], partitions=1)
    sc = consumers(share_router([rule("q", "use cluster A", topic=topic)]), group)
    sc.subscribe([topic])
    got = poll_until(sc, 1)
    with pytest.raises(IllegalStateException, match="Failed to acknowledge message"):
        sc.acknowledge(got[0])
    with pytest.raises(IllegalStateException, match="Failed to acknowledge offset"):
        sc.acknowledge_offset(topic, got[0].partition(), got[0].offset())
    with pytest.raises(TypeError):
        sc.acknowledge("not a message")


def test_calls_refused_as_confluent_kafka(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    unique: Callable[[str], str],
) -> None:
    a, _ = share_clusters
    router = share_router([rule("all", "use cluster A", isGlobal=True)])
    group = unique("sg")
    sc = RoutedShareConsumer({"group.id": group}, router=router)
    plain = ShareConsumer({"group.id": group, "bootstrap.servers": a.bootstrap_servers})
    try:
        for client in (sc, plain):
            assert client.subscription() == []
            with pytest.raises(IllegalStateException, match="not subscribed"):
                client.poll(0.1)
            with pytest.raises(ValueError):
                client.subscribe(["x", "x"])
            with pytest.raises(TypeError):
                client.subscribe("x")  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                client.poll(None)  # type: ignore[arg-type]
            client.subscribe(["x"])
            assert isinstance(client.poll(0.1), Messages)
            client.subscribe([])
            assert client.subscription() == []
    finally:
        plain.close()
    sc.close()
    sc.close()  # a no-op, as confluent-kafka
    for call in (lambda: sc.subscribe(["x"]), sc.subscription, lambda: sc.poll(0.1), sc.commit_async):
        with pytest.raises(IllegalStateException, match="Share consumer closed"):
            call()
    with pytest.raises(ValueError, match=r"group\.id must be set"):
        RoutedShareConsumer({}, router=router)
    with pytest.raises(ValueError, match=r"kbear\.ack\.mode"):
        RoutedShareConsumer({"group.id": group, "kbear.ack.mode": "individual"}, router=router)


def test_another_thread_in_a_call_conflicts(
    share_clusters: tuple[EmbeddedCluster, ...],
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    sc = consumers(share_router([rule("all", "use cluster A", isGlobal=True)]), unique("sg"))
    sc.subscribe([unique("t")])
    conflicts: list[BaseException] = []
    polling = threading.Event()

    def other() -> None:
        polling.wait(5)
        time.sleep(0.1)
        try:
            sc.commit_async()
        except ConcurrentModificationException as exc:
            conflicts.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    polling.set()
    sc.poll(1.0)
    thread.join(5)
    assert conflicts


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("mode", ["drain", "immediate"])
def test_three_members_live_move(
    share_clusters: tuple[EmbeddedCluster, ...],
    make_config: Callable[[Sequence[Rule]], Path],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
    mode: str,
) -> None:
    """A share group of 3 routed share consumers over topics on two clusters,
    random ACCEPT / RELEASE / REJECT, one live move of a topic from A to B: every
    record is accepted once or rejected as asked, none is lost, and the records
    released are redelivered (counted)."""
    import random

    from conftest import rewrite_rules

    a, b = share_clusters
    moving, staying, group = unique("moving"), unique("staying"), unique("sg")
    a.create_topic(moving, 2)
    b.create_topic(moving, 2)
    b.create_topic(staying, 2)
    before = [f"m-a{i}" for i in range(60)]
    after = [f"m-b{i}" for i in range(40)]
    others = [f"s{i}" for i in range(60)]
    produce(a, moving, before)
    produce(b, staying, others)
    rules = [rule("s", "use cluster B", topic=staying)]
    conf = make_config([*rules, rule("m", "use cluster A", topic=moving)])
    router = Router.from_path(conf)
    members = [
        consumers(
            router,
            group,
            **{
                "share.acknowledgement.mode": "explicit",
                "kbear.switch.mode": mode,
                "kbear.switch.drain.idle.ms": 500,
                "kbear.switch.drain.timeout.ms": 30_000,
            },
        )
        for _ in range(3)
    ]
    for member in members:
        member.subscribe([moving, staying])
    rng = random.Random(932)
    wanted = {key: rng.choices([ACCEPT, RELEASE, REJECT], [7, 2, 1])[0] for key in before + after + others}
    accepted: dict[str, int] = {}
    rejected: dict[str, int] = {}
    redeliveries = 0
    released = 0
    moved = False
    failed_acks = 0
    released_keys: set[str] = set()
    end = time.monotonic() + 90
    expected = len(wanted)

    def switched() -> bool:
        return moved and all(m.routes()[moving].cluster_id == "B" for m in members)

    last_record = time.monotonic()

    def finished() -> bool:
        if not switched():
            return False
        if len(accepted) + len(rejected) == expected:
            return True
        # immediate: records of A not read before the move stay there
        rest = [k for k in wanted if k not in accepted and k not in rejected]
        quiet = time.monotonic() - last_record > 2.0
        return mode == "immediate" and quiet and all(k.startswith("m-a") for k in rest)

    while not finished() and time.monotonic() < end:
        for member in members:
            decided: list[tuple[Any, str, Any]] = []
            for msg in member.poll(0.05):
                assert msg.error() is None, msg.error()
                assert msg.topic() in (moving, staying)
                key = msg.key().decode()
                if msg.delivery_count() > 1:
                    redeliveries += 1
                ack = wanted[key]
                if ack is RELEASE and msg.delivery_count() > 1:
                    ack = ACCEPT  # released once, then accepted
                member.acknowledge(msg, ack)
                decided.append((msg, key, ack))
            if not decided:
                continue
            last_record = time.monotonic()
            # share groups deliver at least once: an acknowledgement the broker
            # refused (the mock loses share sessions while the group forms) is
            # followed by a redelivery; only those it confirmed count
            results = member.commit_sync(10)
            refused = {(tp.topic, tp.partition) for tp, err in results.items() if err is not None}
            for msg, key, ack in decided:
                if (msg.topic(), msg.partition()) in refused:
                    failed_acks += 1
                elif ack is RELEASE:
                    released += 1
                    released_keys.add(key)
                elif ack is ACCEPT:
                    accepted[key] = accepted.get(key, 0) + 1
                else:
                    rejected[key] = rejected.get(key, 0) + 1
        if not moved and len(accepted) + len(rejected) >= 40:
            rewrite_rules(conf, [*rules, rule("m", "use cluster B", topic=moving)])
            assert router.reload()
            produce(b, moving, after)
            moved = True
    for member in members:
        member.commit_sync(10)
    assert moved
    assert all(m.routes()[moving].cluster_id == "B" for m in members)
    lost = [k for k in wanted if k not in accepted and k not in rejected]
    left_behind = set(lost) if mode == "immediate" else set()
    if mode == "immediate":
        # records of A not returned before the move stay there, available at once:
        # those the members' share consumers had fetched were released, not left
        # locked (the lock is the mock's 30 s; they are read back within 10 s)
        assert all(k.startswith("m-a") for k in lost)
        left = poll_plain(a, group, moving, len(lost))
        assert sorted(k for k, _ in left) == sorted(lost)
        lost = []
    assert not lost, f"{len(lost)} records lost, e.g. {lost[:5]}"
    assert all(n == 1 for n in accepted.values()), {k: n for k, n in accepted.items() if n > 1}
    assert all(n == 1 for n in rejected.values())
    assert set(rejected) == {k for k, ack in wanted.items() if ack is REJECT} - left_behind
    assert released > 0
    assert redeliveries >= len(released_keys - left_behind)  # each released record came back
    print(f"records {expected}, released {released}, redelivered {redeliveries}, refused acks {failed_acks}")


def poll_plain(cluster: EmbeddedCluster, group: str, topic: str, count: int) -> list[tuple[str, int]]:
    """(key, delivery count) of the records a plain ShareConsumer of ``group`` reads
    from ``topic`` on ``cluster`` (accepted), ``count`` of them or what came in 10 s."""
    plain = ShareConsumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        plain.subscribe([topic])
        got: list[tuple[str, int]] = []
        end = time.monotonic() + 10
        while time.monotonic() < end and len(got) < count:
            got += [(m.key().decode(), m.delivery_count()) for m in plain.poll(0.2) if m.error() is None]
        plain.commit_sync(5)
        return got
    finally:
        plain.close()


def test_mock_share_group_settings_are_checked(share_clusters: tuple[EmbeddedCluster, ...]) -> None:
    with pytest.raises(ValueError, match="earliest"):
        share_clusters[0].set_share_group(auto_offset_reset="middle")


@pytest.mark.parametrize(
    ("routed", "plain"),
    [(RoutedShareConsumer, ShareConsumer), (RoutedDeserializingShareConsumer, DeserializingShareConsumer)],
)
def test_every_method_of_confluent_kafkas_class(routed: type, plain: type) -> None:
    """The routed class has every public method of confluent-kafka's, with the
    parameters confluent-kafka documents (the C methods show none to inspect)."""
    methods = {name for name in dir(plain) if not name.startswith("_") and callable(getattr(plain, name))}
    assert methods <= set(dir(routed))
    params = {
        "subscribe": ["topics"],
        "poll": ["timeout"],
        "acknowledge": ["message", "ack_type"],
        "acknowledge_offset": ["topic", "partition", "offset", "ack_type"],
        "commit_sync": ["timeout"],
        "commit_async": [],
        "set_acknowledgement_commit_callback": ["callback"],
        "set_sasl_credentials": ["username", "password"],
        "close": [],
    }
    for name, expected in params.items():
        assert list(inspect.signature(getattr(routed, name)).parameters)[1:] == expected, name


def test_snapshot_names_the_share_group(
    share_router: Callable[[Sequence[Rule]], Router],
    consumers: Callable[..., RoutedShareConsumer],
    unique: Callable[[str], str],
) -> None:
    group, topic = unique("sg"), unique("t")
    sc = consumers(share_router([rule("all", "use cluster A", isGlobal=True)]), group)
    sc.subscribe([topic])
    snapshot = sc.snapshot()
    assert snapshot is not None
    assert (snapshot.kind, snapshot.group) == ("share_consumer", group)
    assert snapshot.routes[topic].cluster_id == "A"
    sc.close()
    assert sc.snapshot() is None
