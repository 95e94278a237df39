"""Share groups (KIP-932) end to end: a share group of 3 routed share consumers
over topics on two real clusters, random ACCEPT / RELEASE / REJECT, one live move
of a topic from A to B. Runs where the backend serves share groups (Apache Kafka
4.x: the ``kafka`` backend); skipped with the reason elsewhere."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from integration.conftest import Harness
from integration.helpers import topic_rule
from kbear import RoutedShareConsumer

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def start_at_earliest(bootstrap: str, group: str) -> None:
    """Set the share group's ``share.auto.offset.reset`` to ``earliest`` on one cluster
    (a group configuration, KIP-932).

    Raises:
        pytest.skip.Exception: the backend does not serve share groups.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[entry])
    try:
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
    except Exception as exc:
        pytest.skip(f"this backend does not serve share groups (setting share.auto.offset.reset: {exc})")


def serves_share_groups(it: Harness, cluster: str) -> None:
    """Skip unless a plain ShareConsumer reads a record on ``cluster`` within 20 s.

    Raises:
        pytest.skip.Exception: it does not.
    """
    topic, group = it.create_topic(it.name("share-probe"), 1, cluster), it.name("share-probe")
    start_at_earliest(it.bootstrap(cluster), group)
    produce(it.bootstrap(cluster), topic, ["probe"])
    probe = ShareConsumer({"bootstrap.servers": it.bootstrap(cluster), "group.id": group})
    try:
        probe.subscribe([topic])
        end = time.monotonic() + 20
        while time.monotonic() < end:
            batch = probe.poll(0.5)
            errors = [m.error() for m in batch if m.error() is not None]
            if errors:
                pytest.skip(f"this backend does not serve share groups: {errors[0]}")
            if len(batch):
                return
        pytest.skip("this backend does not serve share groups: a ShareConsumer read nothing in 20 s")
    finally:
        probe.close()


def produce(bootstrap: str, topic: str, keys: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key.encode(), value=b"v", partition=i % 2 if len(keys) > 1 else 0)
    assert producer.flush(30) == 0


def test_share_group_of_three_follows_a_live_move(it: Harness) -> None:
    serves_share_groups(it, "A")
    moving = it.create_topic(it.name("share-moving"), 2, "A", "B")
    staying = it.create_topic(it.name("share-staying"), 2, "B")
    group = it.name("share-group")
    for cluster in ("A", "B"):
        start_at_earliest(it.bootstrap(cluster), group)
    before = [f"m-a{i}" for i in range(300)]
    after = [f"m-b{i}" for i in range(200)]
    others = [f"s{i}" for i in range(300)]
    produce(it.bootstrap("A"), moving, before)
    produce(it.bootstrap("B"), staying, others)
    conf = it.config([topic_rule(staying, "B"), topic_rule(moving, "A")])
    settings = {
        "group.id": group,
        "kbear.config": str(conf),
        "kbear.reload.interval.ms": 200,
        "share.acknowledgement.mode": "explicit",
        "kbear.switch.drain.idle.ms": 2000,
        "kbear.switch.drain.timeout.ms": 120_000,
    }
    members = [it.register(RoutedShareConsumer(settings)) for _ in range(3)]
    for member in members:
        member.subscribe([moving, staying])
    rng = random.Random(932)
    wanted = {key: rng.choices([ACCEPT, RELEASE, REJECT], [7, 2, 1])[0] for key in before + after + others}
    accepted: dict[str, int] = {}
    rejected: dict[str, int] = {}
    released: set[str] = set()
    redeliveries = refused = 0
    moved = False
    end = time.monotonic() + 240

    def switched() -> bool:
        return moved and all(m.routes()[moving].cluster_id == "B" for m in members)

    while (len(accepted) + len(rejected) < len(wanted) or not switched()) and time.monotonic() < end:
        for member in members:
            decided: list[tuple[Any, str, Any]] = []
            for msg in member.poll(0.1):
                assert msg.error() is None, msg.error()
                assert msg.topic() in (moving, staying)
                key = msg.key().decode()
                redeliveries += msg.delivery_count() > 1
                ack = wanted[key]
                if ack is RELEASE and msg.delivery_count() > 1:
                    ack = ACCEPT
                member.acknowledge(msg, ack)
                decided.append((msg, key, ack))
            if not decided:
                continue
            results = member.commit_sync(30)
            failed = {(tp.topic, tp.partition) for tp, err in results.items() if err is not None}
            for msg, key, ack in decided:
                if (msg.topic(), msg.partition()) in failed:
                    refused += 1  # delivered again: counted there
                elif ack is RELEASE:
                    released.add(key)
                elif ack is ACCEPT:
                    accepted[key] = accepted.get(key, 0) + 1
                else:
                    rejected[key] = rejected.get(key, 0) + 1
        if not moved and len(accepted) + len(rejected) >= 200:
            conf.write_rules([topic_rule(staying, "B"), topic_rule(moving, "B")])
            produce(it.bootstrap("B"), moving, after)
            moved = True
    lost = [k for k in wanted if k not in accepted and k not in rejected]
    it.note(
        f"share group of 3, one live move: {len(wanted)} records, {len(lost)} lost, "
        f"{len(released)} released, {redeliveries} redelivered, {refused} acknowledgements refused"
    )
    assert switched()
    assert not lost, f"{len(lost)} records lost, e.g. {lost[:5]}"
    assert all(n == 1 for n in accepted.values()), {k: n for k, n in accepted.items() if n > 1}
    assert all(n == 1 for n in rejected.values())
    assert set(rejected) == {k for k, ack in wanted.items() if ack is REJECT}
    assert released and redeliveries >= len(released)
