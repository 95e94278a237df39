"""close() of a group member: it returns, even right after subscribe(), and it
commits what the application was handed, no more (kbear/consumer/_closing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from conftest import FAST_GROUP, Rule, committed_offsets, consume_until, plain_producer, rule
from kbear import RoutedConsumer
from kbear.consumer._closing import close_consumer
from kbear.testing import EmbeddedCluster

Clusters = tuple[EmbeddedCluster, EmbeddedCluster]

#: subscribe/close cycles run in the child process. Without leaving the group first,
#: librdkafka's close hung within the first 1-21 cycles in each of 6 runs (2.16.0).
CYCLES = 60
#: the child must end within this (seconds); a hung close holds the GIL, so only
#: another process can tell
CHILD_TIMEOUT_S = 120

_CHILD = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    from kbear import RoutedConsumer
    from kbear.testing import EmbeddedCluster
    from conftest import write_config, rule

    cycles, directory = int(sys.argv[1]), sys.argv[2]
    a, b = EmbeddedCluster(), EmbeddedCluster()
    conf = write_config(
        __import__("pathlib").Path(directory), {"A": a, "B": b},
        [rule("all-on-A", "use cluster A", isGlobal=True), rule("b-on-B", "use cluster B", topic="on-b")],
    )
    for cluster, topic in ((a, "on-a"), (b, "on-b")):
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        p.produce(topic, b"x")
        p.flush(10)
    for i in range(cycles):
        c = RoutedConsumer({"kbear.config": str(conf), "group.id": f"g{i}",
                            "group.protocol": "consumer", "auto.offset.reset": "earliest"})
        c.subscribe(["on-a", "on-b"])
        time.sleep((i % 10) * 0.01)  # close at every stage of the first join
        c.close()
        print(i, flush=True)
    """
)


def fill_partition_0(cluster: EmbeddedCluster, topic: str, count: int) -> None:
    p = plain_producer(cluster)
    for i in range(count):
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(10) == 0


def test_close_right_after_subscribe_returns(tmp_path: Path) -> None:
    """A member closed while its first assignment arrives: librdkafka's close can
    then hang for good holding the GIL (confluentinc/librdkafka#4041, #4884); kbear
    leaves the group before closing, so every close returns."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    here = Path(__file__).resolve().parents[1]  # the child imports tests/conftest.py
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(CYCLES), str(tmp_path / "conf")],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            env=env,
            cwd=here.parent,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        cycles = [line for line in out.splitlines() if line.isdigit()]
        raise AssertionError(f"close() hung after {len(cycles)} of {CYCLES} subscribe/close cycles") from None
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == str(CYCLES - 1)


def test_close_commits_what_was_handed_out_and_no_more(
    two_clusters: Clusters,
    make_config: Callable[[Sequence[Rule]], Path],
    unique: Callable[[str], str],
    closing: Callable[[Any], Any],
) -> None:
    """Leaving the group before close serves the queued events with a poll: the
    messages fetched ahead but never returned must not be read by it (their offsets
    would be committed unread, with enable.auto.commit and auto offset store on)."""
    a, _b = two_clusters
    topic, group = unique("t"), unique("g")
    fill_partition_0(a, topic, 200)
    conf_dir = make_config([rule("all-on-A", "use cluster A", isGlobal=True)])
    consumer = closing(RoutedConsumer({"kbear.config": str(conf_dir), "group.id": group, **FAST_GROUP}))
    consumer.subscribe([topic])
    got = consume_until(consumer, 10)
    assert len(got) == 10  # librdkafka has fetched far more than that by now
    consumer.close()
    assert committed_offsets(a, group, topic).get(0) == 10


def test_plain_consumer_leaves_its_group_before_closing(
    two_clusters: Clusters, unique: Callable[[str], str]
) -> None:
    """close_consumer on a plain confluent-kafka consumer: on_revoke runs in the
    closing thread and may commit; the consumer ends closed (calls raise)."""
    a, _b = two_clusters
    topic, group = unique("t"), unique("g")
    fill_partition_0(a, topic, 20)
    revoked: list[list[TopicPartition]] = []

    def on_revoke(c: Any, parts: list[TopicPartition]) -> None:
        c.commit(asynchronous=False)
        revoked.append(parts)

    c = Consumer(
        {
            "bootstrap.servers": a.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            **FAST_GROUP,
        }
    )
    c.subscribe([topic], on_revoke=on_revoke)
    assert len(consume_until(c, 5)) == 5
    close_consumer(c)
    assert len(revoked) == 1 and (topic, 0) in [(tp.topic, tp.partition) for tp in revoked[0]]
    assert committed_offsets(a, group, topic).get(0) == 5
    try:
        c.poll(0)
    except RuntimeError:
        pass
    else:
        raise AssertionError("poll() on a closed consumer did not raise")
