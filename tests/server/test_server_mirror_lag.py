"""``GET /clusters``' mirror lag: for a cluster mirrored by MirrorMaker 2, each consumer
group's records behind the mirror's last checkpoint (its committed offset on the cluster
now minus the checkpoint's), from checkpoints written in MirrorMaker 2's format on the
standby (the test replicator) over embedded clusters; without the lag when the cluster
does not answer."""

from __future__ import annotations

import random
from pathlib import Path

from _mirror_replicator import Replicator
from confluent_kafka import Consumer, Producer, TopicPartition

from kbear.config import load_config
from kbear.server.clusters import ClusterBoard
from kbear.server.mirror_lag import read_mirror_lag
from kbear.testing import EmbeddedCluster


def commit(cluster: EmbeddedCluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_each_groups_lag_behind_the_mirror(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster], tmp_path: Path, unique: object
) -> None:
    east, west = two_clusters
    topic = "orders"
    east.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": east.bootstrap_servers})
    for i in range(40):
        producer.produce(topic, b"x", partition=i % 2)
    assert producer.flush(10) == 0
    replicator = Replicator(east, west, topic, 2, skip=0.0, sync_every=1, rng=random.Random(5))
    try:
        replicator.create_topics()
        replicator.copy()
        commit(east, "billing", topic, {0: 10, 1: 12})
        written = replicator.checkpoint("billing")
        assert {p: c.upstream_offset for p, c in written.items()} == {0: 10, 1: 12}
    finally:
        replicator.close()
    commit(east, "billing", topic, {0: 15, 1: 20})  # read on since: 5 + 8 records not checkpointed
    (tmp_path / "clusters.yaml").write_text(
        f"""\
clusters:
  - id: east
    meta:
      bootstrap.servers: {east.bootstrap_servers}
      kbear.failover.to: west
      kbear.mirror: mm2
  - id: west
    meta:
      bootstrap.servers: ${{KBEAR_T_WEST}}
"""
    )
    (tmp_path / "route-rules.yaml").write_text(
        "route-rules:\n  - id: all\n    meta: {rule.isGlobal: true}\n    rule: use cluster east\n"
    )
    config = load_config(tmp_path, environ={"KBEAR_T_WEST": west.bootstrap_servers})
    lag = read_mirror_lag(config.clusters["east"], config.clusters["west"])
    assert lag is not None and not lag.error
    assert [(g.group, g.topic, g.lag, g.partitions) for g in lag.groups] == [("billing", topic, 13, 2)]
    assert read_mirror_lag(config.clusters["west"], config.clusters["east"]) is None  # not mirrored
    # what GET /clusters shows: read by the board, placeholders resolved from its environment
    unresolved = load_config(tmp_path, resolve_env=False)
    board = ClusterBoard(lambda: unresolved, environ={"KBEAR_T_WEST": west.bootstrap_servers})
    board.read_lag(unresolved.clusters["east"], unresolved.clusters["west"])
    shown = board.cluster_json(unresolved.clusters["east"])["mirrorLag"]
    assert shown["groups"] == [{"group": "billing", "topic": topic, "lag": 13, "partitions": 2}]
    assert shown["error"] is None and shown["readAt"]
    # a standby whose address the server cannot resolve: said, not guessed
    blind = ClusterBoard(lambda: unresolved, environ={})
    blind.read_lag(unresolved.clusters["east"], unresolved.clusters["west"])
    assert "KBEAR_T_WEST is not set" in blind.cluster_json(unresolved.clusters["east"])["mirrorLag"]["error"]
