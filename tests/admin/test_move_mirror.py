"""``kbear move`` between mirrored clusters (#27 item 4): the plan prints, per
partition, where a group starts with ``kbear.switch.start=translated`` and how far
behind the mirror is (MirrorMaker 2's format written by the test replicator)."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path

import yaml
from _mirror_replicator import Replicator
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import rewrite_rules, rule
from kbear.cli import main
from kbear.testing import EmbeddedCluster


def test_the_plan_prints_translated_starts_and_the_mirrors_lag(
    two_clusters: tuple[EmbeddedCluster, EmbeddedCluster], tmp_path: Path
) -> None:
    east, west = two_clusters
    topic, group = "orders", "billing"
    east.create_topic(topic, 2)
    conf = tmp_path / "conf"
    conf.mkdir()
    meta = {
        "bootstrap.servers": east.bootstrap_servers,
        "kbear.failover.to": "west",
        "kbear.mirror": "mm2",
        "kbear.mirror.replication.policy": "identity",
    }
    clusters = [
        {"id": "east", "meta": meta},
        {"id": "west", "meta": {"bootstrap.servers": west.bootstrap_servers}},
    ]
    (conf / "clusters.yaml").write_text(yaml.safe_dump({"clusters": clusters}))
    rewrite_rules(conf, [rule("all", "use cluster east", isGlobal=True)])
    with Producer({"bootstrap.servers": east.bootstrap_servers}) as producer:
        for i in range(20):
            producer.produce(topic, b"x", partition=i % 2)
        assert producer.flush(10) == 0
    replicator = Replicator(east, west, topic, 2, remote=topic, skip=0.0, sync_every=4, rng=random.Random(3))
    committer = Consumer({"bootstrap.servers": east.bootstrap_servers, "group.id": group})
    try:
        replicator.create_topics()
        replicator.copy({0: 8, 1: 10})  # partition 0: 2 records not mirrored yet
        committer.commit(
            offsets=[TopicPartition(topic, 0, 6), TopicPartition(topic, 1, 9)], asynchronous=False
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(
                ["move", "--config", str(conf), "--topic", topic, "--to", "west", "--group", group, "--json"]
            )
        assert code == 0, out.getvalue()
        (planned,) = json.loads(out.getvalue())["plan"]["groups"]
        starts = {t["partition"]: t for t in planned["translated"]}
        for p, committed in ((0, 6), (1, 9)):
            expected = replicator.translate(p, committed)
            assert expected is not None
            assert starts[p]["offset"] == expected[0] and starts[p]["decided_by"] == "offset-sync"
            assert starts[p]["reread_at_most"] == committed - expected[1]
            last = replicator.copied[p].syncs[-1][0]
            assert starts[p]["mirror_behind"] == 10 - (last + 1)
        assert "MirrorMaker 2 east -> west" in planned["mirror"]
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            main(
                [
                    "move",
                    "--config",
                    str(conf),
                    "--topic",
                    topic,
                    "--to",
                    "west",
                    "--group",
                    group,
                    "--request-timeout",
                    "1",
                ]
            )
        assert f"partition 0: starts at offset {starts[0]['offset']} (offset-sync" in text.getvalue()
        assert "mirror behind: " in text.getvalue()
    finally:
        committer.close()
        replicator.close()
